//! Rehoming a node-local volume whose disks moved to another node (issue
//! 19): the PersistentVolume as it must be created again. Its
//! `spec.nodeAffinity` is immutable, so the object is deleted (Retain keeps
//! the data) and made again with the same source and a new affinity,
//! pre-bound to its claim by name (../shared/cutover-notes.md, "Node-local
//! volumes"). Pure: the driver writes the result ahead in the record, the
//! only place the spec exists between the delete and the create.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, PersistentVolume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::placement::HOSTNAME_LABEL;

/// Where the volume is pinned to after the move.
#[derive(Debug, Clone, PartialEq)]
pub enum Target<'a> {
    /// `--to-node NODE`: every `In` requirement of the affinity points at
    /// that node's own value of its key (its hostname, and a driver's key
    /// such as `openebs.io/nodeid` or `topology.topolvm.io/node`).
    Node(&'a Node),
    /// `--topology KEY=VALUE`: pinned to a label, not to a host (a pool
    /// that may move again): KEY In [VALUE], the hostname requirement gone.
    Topology { key: &'a str, value: &'a str },
}

/// Why a volume cannot be rehomed as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RehomeError {
    #[error(
        "persistentvolume {volume:?} has no required node affinity: it is not pinned to a node, \
         so there is nothing to rehome"
    )]
    NotPinned { volume: String },
    /// The target node lacks a label the affinity needs.
    #[error(
        "node {node:?} has no label {key:?}, which persistentvolume {volume:?}'s node affinity \
         requires: label the node (kubectl label node {node} {key}=...) or use --topology"
    )]
    MissingLabel {
        node: String,
        key: String,
        volume: String,
    },
}

impl RehomeError {
    /// Never: the same volume and node give the same answer.
    pub fn is_retryable(&self) -> bool {
        match self {
            RehomeError::NotPinned { .. } | RehomeError::MissingLabel { .. } => false,
        }
    }
}

/// `pv` as it must be created again on `target`: the same name, labels,
/// annotations and spec (source, capacity, class, access modes, mode,
/// mount options), the node affinity re-pointed, the reclaim policy
/// `Retain` (the driver restores the recorded one once the claim is bound
/// again), and `claimRef` kept by namespace and name only, so that the
/// re-created claim binds to it and nothing else can. What the API server
/// and controllers own (uid, versions, finalizers, status) is left out.
pub fn rehomed(
    pv: &PersistentVolume,
    target: &Target<'_>,
) -> Result<PersistentVolume, RehomeError> {
    let volume = pv.metadata.name.clone().unwrap_or_default();
    let mut spec = pv.spec.clone().unwrap_or_default();
    let required = spec
        .node_affinity
        .as_mut()
        .and_then(|a| a.required.as_mut())
        .filter(|r| !r.node_selector_terms.is_empty())
        .ok_or_else(|| RehomeError::NotPinned {
            volume: volume.clone(),
        })?;
    for term in &mut required.node_selector_terms {
        repoint(term, target, &volume)?;
    }
    spec.persistent_volume_reclaim_policy = Some("Retain".to_string());
    spec.claim_ref = spec.claim_ref.map(|c| ObjectReference {
        api_version: c.api_version,
        kind: c.kind,
        namespace: c.namespace,
        name: c.name,
        ..ObjectReference::default()
    });
    Ok(PersistentVolume {
        metadata: ObjectMeta {
            name: pv.metadata.name.clone(),
            labels: pv.metadata.labels.clone(),
            annotations: pv.metadata.annotations.clone(),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// One term of the affinity, re-pointed at `target`.
fn repoint(
    term: &mut NodeSelectorTerm,
    target: &Target<'_>,
    volume: &str,
) -> Result<(), RehomeError> {
    let expressions = term.match_expressions.get_or_insert_with(Vec::new);
    match target {
        Target::Node(node) => {
            let empty = BTreeMap::new();
            let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
            let name = node.metadata.name.clone().unwrap_or_default();
            for r in expressions.iter_mut().filter(|r| r.operator == "In") {
                let value = labels
                    .get(&r.key)
                    .ok_or_else(|| RehomeError::MissingLabel {
                        node: name.clone(),
                        key: r.key.clone(),
                        volume: volume.to_string(),
                    })?;
                r.values = Some(vec![value.clone()]);
            }
            // Pinned by node name (`matchFields`): the new node's.
            for f in term.match_fields.iter_mut().flatten() {
                if f.key == "metadata.name" && f.operator == "In" {
                    f.values = Some(vec![name.clone()]);
                }
            }
        }
        Target::Topology { key, value } => {
            expressions.retain(|r| r.key != HOSTNAME_LABEL && r.key != *key);
            expressions.push(NodeSelectorRequirement {
                key: key.to_string(),
                operator: "In".to_string(),
                values: Some(vec![value.to_string()]),
            });
            if let Some(fields) = &mut term.match_fields {
                fields.retain(|f| f.key != "metadata.name");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
}
