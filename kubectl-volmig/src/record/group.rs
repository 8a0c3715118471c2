//! The record of an operation on several claims (`migrate a b c`,
//! `--workload`, `-l`, `--all`, `--from-storage-class`): one head that
//! holds what the set shares, and one ordinary record per claim.
//!
//! The head, ConfigMap `volmig-<op>` (component `operation`, format `"2"`),
//! holds how the claims were chosen, the claims in plan order with their
//! keys, `--parallel`/`--per-node`, and the set's phase and lease. Each
//! claim's attempts, checkpoints, progress and placement live in its own
//! record, `volmig-<op>-<key>` in its destination namespace, labelled with
//! the head: the format-1 record of a one-claim operation, driven by the
//! same attempt driver. So a claim's writes (a heartbeat every few seconds)
//! rewrite a few kilobytes, not the whole set; no claim waits on another's
//! write; and a set is not bounded by the 1 MiB of one ConfigMap.
//! `status OP -o json` joins head and claims into one `VolumeMigration`
//! with a list of claims ([`print`](super::print)).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use serde::{Deserialize, Serialize};

use super::configmap::{whole, whole_from, RecordError};
use super::{Driver, Metadata, Phase, VolumeMigration};
use crate::names::{self, Component};
use crate::plan::select::Selection;
use crate::spec::ClaimRef;

/// The head's layout.
pub const FORMAT: &str = "2";
/// How a set is printed: the one-claim record's kind, a new version.
pub const API_VERSION: &str = "volmig.io/v1alpha2";

/// `--parallel` by default: a few copies side by side, not a storm.
pub const DEFAULT_PARALLEL: u32 = 2;
/// `--per-node` by default.
pub const DEFAULT_PER_NODE: u32 = 4;

/// The head of a set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationGroup {
    pub metadata: Metadata,
    pub spec: GroupSpec,
    pub status: GroupStatus,
}

/// What the set is: fixed when it is planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupSpec {
    pub selection: Selection,
    /// In plan order; a key is never reused.
    pub claims: Vec<Member>,
    pub parallelism: Parallelism,
}

/// One claim of a set, and where its record is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub key: u32,
    /// The claim's own operation id (`<op>-<key>`): its record, pods and
    /// key Secret are named and labelled with it.
    pub operation: String,
    pub source: ClaimRef,
    /// Its record lives in this claim's namespace.
    pub destination: ClaimRef,
}

impl Member {
    /// The namespace of the claim's record.
    pub fn namespace(&self) -> &str {
        &self.destination.namespace
    }
}

/// How many claims copy at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Parallelism {
    /// Claims copying at once (`--parallel`).
    pub claims: u32,
    /// Mover pods at once on one node (`--per-node`).
    pub per_node: u32,
}

impl Default for Parallelism {
    fn default() -> Self {
        Parallelism {
            claims: DEFAULT_PARALLEL,
            per_node: DEFAULT_PER_NODE,
        }
    }
}

/// The set's own status; each claim's is in its record.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupStatus {
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Timestamp>,
    /// The client driving the set (and, with the same holder, each
    /// claim it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<Driver>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted_by: Option<String>,
}

/// A claim's record as the head sees it: where it belongs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupRef {
    pub name: String,
    pub namespace: String,
    pub key: u32,
}

/// A set's phase from its claims' `phases`: Running while one runs or
/// waits, Aborted if one was, RolledBack when all were, Failed if one
/// failed, Succeeded when all have.
pub fn phase_of(phases: &[Phase]) -> Phase {
    if phases.iter().any(|p| !p.is_stopped()) {
        Phase::Running
    } else if phases.contains(&Phase::Aborted) {
        Phase::Aborted
    } else if phases.iter().all(|p| *p == Phase::RolledBack) {
        Phase::RolledBack
    } else if phases.iter().any(|p| *p != Phase::Succeeded) {
        Phase::Failed
    } else {
        Phase::Succeeded
    }
}

/// A head and its claims' records, as read together.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupView {
    pub group: MigrationGroup,
    /// In the head's claim order; `None` for a record that could not be
    /// read (deleted by hand, or not yet created).
    pub members: Vec<Option<VolumeMigration>>,
}

impl GroupView {
    /// The set's phase: [`phase_of`] its claims', a missing claim counted
    /// Failed; the head's own phase wins while Pending or once Aborted.
    pub fn phase(&self) -> Phase {
        let head = self.group.status.phase;
        if head == Phase::Aborted || head == Phase::Pending {
            return head;
        }
        let phases: Vec<Phase> = self
            .members
            .iter()
            .map(|m| m.as_ref().map_or(Phase::Failed, |vm| vm.status.phase))
            .collect();
        phase_of(&phases)
    }

    /// Claims by phase, in words: `2 Succeeded, 1 Running`.
    pub fn phases_text(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in &self.members {
            let phase = m.as_ref().map_or("Missing", |vm| vm.status.phase.as_str());
            *counts.entry(phase).or_default() += 1;
        }
        let order = [
            "Succeeded",
            "Running",
            "Pending",
            "Failed",
            "Aborted",
            "RolledBack",
            "Missing",
        ];
        order
            .iter()
            .filter_map(|p| counts.get(p).map(|n| format!("{n} {p}")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl MigrationGroup {
    /// A fresh head: Pending, in `namespace`.
    pub fn new(
        operation: &str,
        namespace: &str,
        selection: Selection,
        claims: Vec<Member>,
        parallelism: Parallelism,
    ) -> MigrationGroup {
        MigrationGroup {
            metadata: Metadata {
                name: operation.to_string(),
                namespace: namespace.to_string(),
                ..Metadata::default()
            },
            spec: GroupSpec {
                selection,
                claims,
                parallelism,
            },
            status: GroupStatus::default(),
        }
    }

    /// How the set reads in a table's SOURCE cell: `statefulset/db (3 claims)`.
    pub fn source_text(&self) -> String {
        let n = self.spec.claims.len();
        let plural = if n == 1 { "" } else { "s" };
        format!("{} ({n} claim{plural})", self.spec.selection.describe())
    }

    /// The claim with operation id `op`, or with source claim name `op`.
    pub fn member(&self, name: &str) -> Option<&Member> {
        self.spec
            .claims
            .iter()
            .find(|m| m.operation == name || m.source.name == name)
    }
}

/// The ConfigMap that stores a head.
pub fn to_config_map(g: &MigrationGroup) -> Result<ConfigMap, RecordError> {
    let claims = (
        names::CLAIMS_KEY.to_string(),
        g.spec.claims.len().to_string(),
    );
    let parts = (&g.spec, &g.status);
    whole(
        &g.metadata,
        Component::Operation,
        FORMAT,
        parts,
        g.status.phase,
        [claims],
    )
}

/// The head a ConfigMap stores.
pub fn from_config_map(cm: &ConfigMap) -> Result<MigrationGroup, RecordError> {
    let (metadata, spec, status) = whole_from(cm, Component::Operation, FORMAT)?;
    Ok(MigrationGroup {
        metadata,
        spec,
        status,
    })
}

#[cfg(test)]
mod tests;
