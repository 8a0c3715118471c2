//! Rehoming a node-local volume whose disks moved to another node (issue
//! 19): the PersistentVolume as it must be created again. Its
//! `spec.nodeAffinity` is immutable, so the object is deleted (Retain keeps
//! the data) and made again with the same source and a new affinity,
//! pre-bound to its claim by name (../shared/cutover-notes.md, "Node-local
//! volumes"). Pure: the driver writes the result ahead in the record, the
//! only place the spec exists between the delete and the create.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::placement::HOSTNAME_LABEL;

pub mod check;
pub mod drivers;

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
        tidy(term);
    }
    Ok(made_again(&pv.metadata, spec))
}

/// `pv` as it must be created again to undo a rehome: as it was, made
/// again the way [`rehomed`] makes it (Retain, `claimRef` by name, no
/// server-owned fields), its own node affinity kept.
pub fn as_before(pv: &PersistentVolume) -> PersistentVolume {
    made_again(&pv.metadata, pv.spec.clone().unwrap_or_default())
}

/// A volume of `spec` to create under `meta`'s name, labels and
/// annotations: Retain, bound by the claim's name only.
fn made_again(meta: &ObjectMeta, mut spec: PersistentVolumeSpec) -> PersistentVolume {
    spec.persistent_volume_reclaim_policy = Some("Retain".to_string());
    spec.claim_ref = spec.claim_ref.map(|c| ObjectReference {
        api_version: c.api_version,
        kind: c.kind,
        namespace: c.namespace,
        name: c.name,
        ..ObjectReference::default()
    });
    PersistentVolume {
        metadata: ObjectMeta {
            name: meta.name.clone(),
            labels: meta.labels.clone(),
            annotations: meta.annotations.clone(),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The volume's required node affinity, the part a rehome changes.
pub fn affinity(pv: &PersistentVolume) -> Option<&NodeSelector> {
    pv.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref()
}

/// Whether two volumes are pinned alike: their required affinities equal
/// once empty lists count as absent (the API server drops them).
pub fn same_affinity(a: &PersistentVolume, b: &PersistentVolume) -> bool {
    affinity(a).map(normalized) == affinity(b).map(normalized)
}

fn normalized(s: &NodeSelector) -> NodeSelector {
    let mut s = s.clone();
    for t in &mut s.node_selector_terms {
        tidy(t);
    }
    s
}

/// `term` without empty lists.
fn tidy(term: &mut NodeSelectorTerm) {
    if term.match_expressions.as_ref().is_some_and(Vec::is_empty) {
        term.match_expressions = None;
    }
    if term.match_fields.as_ref().is_some_and(Vec::is_empty) {
        term.match_fields = None;
    }
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
mod tests;
