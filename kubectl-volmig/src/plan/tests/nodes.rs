//! Node moves (`--to-node`, issue 19): the class is kept, a cordoned node
//! is refused, and a cutover is refused onto a node where the app's pods
//! could not run; a source whose node is down is warned of.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus, VolumeNodeAffinity};

use super::{assert_says, spec, Cluster};
use crate::plan::Refusal;
use crate::spec::{CutoverSpec, MigrationSpec};

fn to_node(node: &str, cutover: bool) -> MigrationSpec {
    let mut s = spec("data-moved");
    s.destination.node = Some(node.to_string());
    s.cutover = cutover.then(CutoverSpec::default);
    s
}

#[test]
fn a_node_move_keeps_the_source_s_class_unless_told_otherwise() {
    let mut cluster = Cluster::base();
    // Another class is the cluster's default.
    cluster.class("standard").metadata.annotations = None;
    cluster.class("local-path").metadata.annotations = Some(BTreeMap::from([(
        "storageclass.kubernetes.io/is-default-class".to_string(),
        "true".to_string(),
    )]));
    let moved = cluster.plan(&to_node("node-1", true));
    assert_eq!(moved.destination.storage_class.as_deref(), Some("standard"));
    assert_eq!(moved.placement.receiver.node.as_deref(), Some("node-1"));
    let copied = cluster.plan(&spec("data-moved"));
    assert_eq!(
        copied.destination.storage_class.as_deref(),
        Some("local-path")
    );
    let mut asked = to_node("node-1", true);
    asked.destination.storage_class = Some("local-path".into());
    let asked = cluster.plan(&asked);
    assert_eq!(
        asked.destination.storage_class.as_deref(),
        Some("local-path")
    );
}

#[test]
fn a_cordoned_node_is_refused() {
    let mut cluster = Cluster::base();
    let node = cluster
        .nodes
        .iter_mut()
        .find(|n| n.metadata.name.as_deref() == Some("node-1"));
    node.expect("node-1")
        .spec
        .get_or_insert_with(Default::default)
        .unschedulable = Some(true);
    let refusal = cluster.refuse(&to_node("node-1", false));
    assert_eq!(
        refusal,
        Refusal::NodeCordoned {
            name: "node-1".into()
        }
    );
    assert_says(
        &refusal.to_string(),
        &["cordoned", "kubectl uncordon node-1"],
    );
}

#[test]
fn a_cutover_onto_a_node_the_app_cannot_run_on_is_refused_by_its_reason() {
    let mut cluster = Cluster::base();
    // db-0 tolerates node-2's dedicated=db, not node-3's dedicated=batch.
    let refusal = cluster.refuse(&to_node("node-3", true));
    assert!(matches!(&refusal, Refusal::NodeMisfit { pod, .. } if pod == "db-0"));
    assert_says(
        &refusal.to_string(),
        &[
            r#"pod "db-0""#,
            r#"node "node-3""#,
            "dedicated=batch:NoExecute is not tolerated",
        ],
    );
    // A copy only needs the receiver there, which tolerates the node's own taints.
    cluster.plan(&to_node("node-3", false));
    // Every pod that mounts the claim must fit: the backup pod does not
    // tolerate node-2's taint; without it, the app fits there.
    let refusal = cluster.refuse(&to_node("node-2", true));
    assert!(matches!(&refusal, Refusal::NodeMisfit { pod, .. } if pod == "db-backup-28611"));
    cluster.remove_pod("db-backup-28611");
    cluster.plan(&to_node("node-2", true));

    let mut picky = Cluster::base();
    picky.pod("db-0").spec.as_mut().unwrap().node_selector =
        Some(BTreeMap::from([("disk".to_string(), "ssd".to_string())]));
    let refusal = picky.refuse(&to_node("node-1", true));
    assert_says(
        &refusal.to_string(),
        &["nodeSelector disk=ssd does not match: it has no label disk"],
    );
}

#[test]
fn a_source_pinned_to_a_node_that_is_not_ready_is_warned_of() {
    let mut cluster = Cluster::base();
    let affinity: VolumeNodeAffinity = serde_json::from_value(serde_json::json!({"required": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["db-host-2"]}]}]}}))
    .expect("affinity");
    cluster.source().1.spec.as_mut().unwrap().node_affinity = Some(affinity);
    let set_ready = |cluster: &mut Cluster, status: &str| {
        let node = cluster
            .nodes
            .iter_mut()
            .find(|n| n.metadata.name.as_deref() == Some("node-2"));
        node.expect("node-2").status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: status.into(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        });
    };
    set_ready(&mut cluster, "Unknown");
    let plan = cluster.plan(&to_node("node-1", false));
    assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
    assert_says(
        &plan.warnings[0],
        &["pinned to node-2", "not Ready", "the sender cannot run"],
    );
    set_ready(&mut cluster, "True");
    assert!(cluster.plan(&to_node("node-1", false)).warnings.is_empty());
}
