//! A destination in another cluster (`--to-context`): the destination's
//! class, nodes and name come from that cluster, not the source's.

use super::*;
use crate::plan::RemoteInputs;
use serde_json::json;

/// The destination's cluster: one node, `dst-1`, and its own default
/// class `fast`.
fn other_cluster() -> RemoteInputs {
    RemoteInputs {
        storage_classes: vec![object(json!({
            "metadata": {
                "name": "fast",
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}
            },
            "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer"
        }))],
        nodes: vec![object(json!({
            "metadata": {"name": "dst-1", "labels": {"kubernetes.io/hostname": "dst-1"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))],
        openshift: None,
    }
}

fn across(spec: &MigrationSpec) -> Result<Plan, Refusal> {
    let cluster = Cluster::with_destinations();
    let mut inputs = cluster.inputs(spec);
    inputs.remote = Some(other_cluster());
    // The source cluster's own destination claims are not the other's.
    inputs.destination_claim = None;
    inputs.destination_volume = None;
    plan(spec, "data-x7k2q", &inputs)
}

#[test]
fn the_claim_may_keep_its_name_and_namespace() {
    let plan = across(&spec("data")).expect("planned");
    assert_eq!(plan.destination.name, "data");
    assert_eq!(plan.destination.namespace, "shop");
    // In one cluster, that is the source itself.
    let same = Cluster::with_destinations().refuse(&spec("data"));
    assert!(matches!(same, Refusal::SameClaim { .. }), "{same}");
}

#[test]
fn the_class_is_the_destination_cluster_default() {
    let plan = across(&spec("data")).expect("planned");
    assert_eq!(plan.destination.storage_class.as_deref(), Some("fast"));
    // A class only the source's cluster has is not found there.
    let mut wanted = spec("data");
    wanted.destination.storage_class = Some("local-path".into());
    let refusal = across(&wanted).expect_err("refused");
    assert_says(&refusal.to_string(), &["local-path"]);
}

#[test]
fn to_node_names_a_node_of_the_destination_cluster() {
    let mut pinned = spec("data");
    pinned.destination.node = Some("dst-1".into());
    let plan = across(&pinned).expect("planned");
    assert_eq!(plan.placement.receiver.node.as_deref(), Some("dst-1"));
    pinned.destination.node = Some("node-1".into());
    match across(&pinned).expect_err("refused") {
        Refusal::NodeNotFound { name, available } => {
            assert_eq!(name, "node-1");
            assert_eq!(available, vec!["dst-1".to_string()]);
        }
        other => panic!("{other}"),
    }
}
