//! `rehomed` on fixtures.

use super::*;
use serde_json::json;

fn volume() -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": "pvc-1", "uid": "u-1", "resourceVersion": "42",
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "finalizers": ["kubernetes.io/pv-protection"],
                     "labels": {"team": "db"},
                     "annotations": {"pv.kubernetes.io/provisioned-by": "zfs.csi.openebs.io"}},
        "spec": {
            "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "zfs",
            "volumeMode": "Filesystem", "mountOptions": ["noatime"],
            "csi": {"driver": "zfs.csi.openebs.io", "volumeHandle": "pvc-1", "fsType": "zfs",
                    "volumeAttributes": {"openebs.io/poolname": "tank"}},
            "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                         "namespace": "prod", "name": "data", "uid": "c-1", "resourceVersion": "7"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "openebs.io/nodeid", "operator": "In", "values": ["node-1"]},
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]},
                {"key": "disk", "operator": "Exists"}]}]}},
        },
        "status": {"phase": "Bound"},
    }))
    .expect("pv")
}

fn node(name: &str, labels: serde_json::Value) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).expect("node")
}

fn requirements(pv: &PersistentVolume) -> Vec<(String, String, Vec<String>)> {
    let spec = pv.spec.as_ref().expect("spec");
    let required = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .expect("required");
    required.node_selector_terms[0]
        .match_expressions
        .iter()
        .flatten()
        .map(|r| {
            (
                r.key.clone(),
                r.operator.clone(),
                r.values.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn the_volume_is_made_again_on_the_new_node_with_everything_else_kept() {
    let old = volume();
    let to = node(
        "node-2",
        json!({"kubernetes.io/hostname": "host-2", "openebs.io/nodeid": "node-2", "disk": "nvme"}),
    );
    let new = rehomed(&old, &Target::Node(&to)).expect("rehomed");
    assert_eq!(
        requirements(&new),
        [
            (
                "openebs.io/nodeid".into(),
                "In".into(),
                vec!["node-2".to_string()]
            ),
            (
                "kubernetes.io/hostname".into(),
                "In".into(),
                vec!["host-2".to_string()]
            ),
            ("disk".into(), "Exists".into(), vec![]),
        ]
    );
    let (a, b) = (
        old.spec.clone().expect("spec"),
        new.spec.clone().expect("spec"),
    );
    // The same volume: source, size, class, modes, options.
    assert_eq!(a.csi, b.csi);
    assert_eq!(a.capacity, b.capacity);
    assert_eq!(a.storage_class_name, b.storage_class_name);
    assert_eq!(a.access_modes, b.access_modes);
    assert_eq!(a.volume_mode, b.volume_mode);
    assert_eq!(a.mount_options, b.mount_options);
    // Retain while it changes hands; bound again by the claim's name only.
    assert_eq!(
        b.persistent_volume_reclaim_policy.as_deref(),
        Some("Retain")
    );
    let claim = b.claim_ref.expect("claimRef");
    assert_eq!(
        (claim.namespace.as_deref(), claim.name.as_deref()),
        (Some("prod"), Some("data"))
    );
    assert_eq!((claim.uid, claim.resource_version), (None, None));
    // What the API server owns is not carried over.
    let meta = &new.metadata;
    assert_eq!(meta.name.as_deref(), Some("pvc-1"));
    assert_eq!(meta.labels, old.metadata.labels);
    assert_eq!(meta.annotations, old.metadata.annotations);
    assert!(meta.uid.is_none() && meta.resource_version.is_none() && meta.finalizers.is_none());
    assert!(meta.creation_timestamp.is_none() && new.status.is_none());
}

#[test]
fn a_target_node_without_a_required_label_is_refused_by_name() {
    let to = node("node-2", json!({"kubernetes.io/hostname": "node-2"}));
    let e = rehomed(&volume(), &Target::Node(&to)).expect_err("refused");
    assert_eq!(
        e,
        RehomeError::MissingLabel {
            node: "node-2".into(),
            key: "openebs.io/nodeid".into(),
            volume: "pvc-1".into()
        }
    );
    let mut unpinned = volume();
    unpinned.spec.as_mut().expect("spec").node_affinity = None;
    assert!(matches!(
        rehomed(&unpinned, &Target::Node(&to)),
        Err(RehomeError::NotPinned { .. })
    ));
}

#[test]
fn topology_mode_pins_to_a_label_instead_of_a_host() {
    let target = Target::Topology {
        key: "openebs.io/nodeid",
        value: "pool-tank",
    };
    let new = rehomed(&volume(), &target).expect("rehomed");
    assert_eq!(
        requirements(&new),
        [
            ("disk".into(), "Exists".into(), vec![]),
            (
                "openebs.io/nodeid".into(),
                "In".into(),
                vec!["pool-tank".to_string()]
            ),
        ]
    );
}
