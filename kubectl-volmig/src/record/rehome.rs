//! The record of a rehome (`kubectl volmig rehome`, issue 19): volumes
//! whose disks moved to another node, their PVs made again with a new node
//! affinity. No data moves; only objects change, and between deleting a PV
//! and creating it again the record is the only place its spec exists, so
//! everything a step needs is written here before the step runs: each
//! volume as it was (`original`, the rollback's source of truth) and as it
//! will be (`rehomed`), its claim's shape, its reclaim policy, its driver's
//! objects with their old and new values, and the owners stopped.
//!
//! One ConfigMap `volmig-<op>` (component `rehome`, format `"1"`) in the
//! namespace the command ran in, for one volume or many
//! (`--all-from-node`).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume};
use serde::{Deserialize, Serialize};

use super::configmap::{whole, whole_from, RecordError};
use super::cutover::ClaimShape;
use super::{Driver, Metadata, Phase};
use crate::names::Component;
use crate::plan::quiesce::ScaleTarget;
use crate::plan::rehome::drivers::DriverObject;
use crate::spec::ClaimRef;

/// The layout of a rehome's ConfigMap.
pub const FORMAT: &str = "1";
pub const API_VERSION: &str = "volmig.io/v1alpha1";
pub const KIND: &str = "VolumeRehome";

/// A rehome of one or more volumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rehome {
    pub metadata: Metadata,
    pub spec: RehomeSpec,
    pub status: RehomeStatus,
}

/// What was asked: fixed when it is planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RehomeSpec {
    pub target: RehomeTarget,
    /// `--pool`: the pool (ZFS) or volume group (LVM) the disks are in now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// `--all-from-node`: every volume pinned to this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_node: Option<String>,
    /// The volumes, in plan order.
    pub volumes: Vec<String>,
}

/// Where the volumes are pinned to afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "camelCase")]
pub enum RehomeTarget {
    /// `--to-node`.
    Node { node: String },
    /// `--topology KEY=VALUE`.
    Topology { key: String, value: String },
}

impl std::fmt::Display for RehomeTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RehomeTarget::Node { node } => write!(f, "node {node}"),
            RehomeTarget::Topology { key, value } => write!(f, "{key}={value}"),
        }
    }
}

/// The rehome's steps, in order; `RollingBack` can follow any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Step {
    /// Stopping every pod that mounts one of the claims.
    #[default]
    Quiesce,
    /// Each volume in turn: Retain, its claim deleted, the PV deleted and
    /// created again, the driver's objects rewritten, the claim created
    /// again and bound, the reclaim policy restored.
    Move,
    /// The owners scaled back; Ready awaited.
    Restore,
    Done,
    /// Each volume back to its original PV, the app restarted.
    RollingBack,
    RolledBack,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Quiesce => "Quiesce",
            Step::Move => "Move",
            Step::Restore => "Restore",
            Step::Done => "Done",
            Step::RollingBack => "RollingBack",
            Step::RolledBack => "RolledBack",
        }
    }
}

/// Where the rehome stands.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RehomeStatus {
    pub phase: Phase,
    pub step: Step,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Timestamp>,
    /// The client driving it, and its heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<Driver>,
    pub volumes: Vec<VolumeRehome>,
    /// The owners scaled to zero and the replicas they go back to,
    /// recorded before the first is scaled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stops: Vec<Stop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiesced_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_at: Option<Timestamp>,
    /// From the first scale-down until every owner was Ready again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downtime_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RehomeRollback>,
}

/// An owner stopped, in its namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stop {
    pub namespace: String,
    #[serde(flatten)]
    pub target: ScaleTarget,
}

/// One volume's rehome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeRehome {
    /// The PV.
    pub name: String,
    /// The claim bound to it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimRef>,
    /// The claim as it was, to create it again (binding annotations left
    /// out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_shape: Option<ClaimShape>,
    /// The claim's `volume.kubernetes.io/selected-node` as it was, if it
    /// had one; the re-created claim names the new node there (TopoLVM
    /// deletes the claims that name a deleted node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_node: Option<String>,
    /// The PV as it was read before anything changed.
    pub original: PersistentVolume,
    /// The PV to create: [`crate::plan::rehome::rehomed`] of `original`.
    pub rehomed: PersistentVolume,
    /// The reclaim policy before volmig set Retain.
    pub policy: String,
    /// The driver's objects to rewrite, with their old and new values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub driver_objects: Vec<DriverObject>,
    /// The last change written ahead (`DeleteVolume pvc-1`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
}

/// A rollback in flight or done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RehomeRollback {
    /// The step it started from.
    pub from: Step,
    /// Who asked (`host/pid`), or why it started by itself.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Timestamp>,
}

impl Rehome {
    pub fn volume(&self, name: &str) -> Option<&VolumeRehome> {
        self.status.volumes.iter().find(|v| v.name == name)
    }

    pub fn volume_mut(&mut self, name: &str) -> Option<&mut VolumeRehome> {
        self.status.volumes.iter_mut().find(|v| v.name == name)
    }

    /// Seconds the app has been (or was) down.
    pub fn downtime(&self, now: Timestamp) -> Option<f64> {
        let down = self.status.quiesced_at?;
        let up = self.status.restored_at.unwrap_or(now);
        Some(up.duration_since(down).as_secs_f64().max(0.0))
    }
}

/// The ConfigMap that stores `r`.
pub fn to_config_map(r: &Rehome) -> Result<ConfigMap, RecordError> {
    let parts = (&r.spec, &r.status);
    whole(
        &r.metadata,
        Component::Rehome,
        FORMAT,
        parts,
        r.status.phase,
        [],
    )
}

/// How many bytes `r` takes in its ConfigMap.
pub fn encoded_size(r: &Rehome) -> Result<usize, RecordError> {
    let cm = to_config_map(r)?;
    Ok(cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum())
}

/// The rehome a ConfigMap stores.
pub fn from_config_map(cm: &ConfigMap) -> Result<Rehome, RecordError> {
    let (metadata, spec, status) = whole_from(cm, Component::Rehome, FORMAT)?;
    Ok(Rehome {
        metadata,
        spec,
        status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rehome_survives_its_config_map() {
        let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pvc-1"},
            "spec": {"local": {"path": "/disks/1"}, "persistentVolumeReclaimPolicy": "Delete"},
        }))
        .expect("pv");
        let r = Rehome {
            metadata: Metadata {
                name: "data-abcde".into(),
                namespace: "prod".into(),
                ..Metadata::default()
            },
            spec: RehomeSpec {
                target: RehomeTarget::Node {
                    node: "node-2".into(),
                },
                pool: Some("tank".into()),
                from_node: None,
                volumes: vec!["pvc-1".into()],
            },
            status: RehomeStatus {
                step: Step::Move,
                volumes: vec![VolumeRehome {
                    name: "pvc-1".into(),
                    claim: Some(ClaimRef::new("prod", "data")),
                    claim_shape: None,
                    selected_node: Some("node-1".into()),
                    original: pv.clone(),
                    rehomed: pv,
                    policy: "Delete".into(),
                    driver_objects: Vec::new(),
                    change: Some("DeleteVolume pvc-1".into()),
                }],
                ..RehomeStatus::default()
            },
        };
        let cm = to_config_map(&r).expect("encoded");
        let labels = cm.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels[crate::names::COMPONENT_KEY], "rehome");
        assert_eq!(from_config_map(&cm).expect("decoded"), r);
        // Not a claim's record: the other kinds refuse it.
        assert!(super::super::configmap::from_config_map(&cm).is_err());
    }
}
