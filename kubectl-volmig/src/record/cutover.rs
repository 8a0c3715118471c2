//! The cutover's part of the record: where the move of the app stands
//! (`status.cutover`), and everything the steps that change the cluster
//! need, written before they run. A client killed at any instant leaves a
//! record from which `resume` finishes the move and `rollback` undoes it:
//! between deleting the source claim and re-creating it, the record is the
//! only place its labels, annotations and spec exist.
//!
//! The steps belong to the operation (one quiesce, one restore); the
//! volumes and the claim's shape belong to each claim in [`claims`]
//! (CutoverStatus::claims), so an operation of several claims (issue 18)
//! extends this rather than rewriting it.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::plan::quiesce::ScaleTarget;

/// The cutover's steps, in order. `RollingBack` can follow any step before
/// `Committed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Step {
    /// Rounds of copies while the app runs.
    #[default]
    PreCopy,
    /// Scaling the app's owners to zero; waiting until no pod mounts the
    /// claim.
    Quiesce,
    /// The last copy: `--delete`, verified, the app down.
    FinalSync,
    /// The claim re-created under its name, bound to the new volume.
    Swap,
    /// The owners scaled back; Ready awaited.
    Restore,
    /// The app runs on the new volume; the old one is kept until `commit`.
    AwaitingCommit,
    /// The old volume is gone (and its data, if its policy was Delete).
    Committed,
    /// Undoing: the claim goes back to the old volume.
    RollingBack,
    /// The claim is bound to the old volume again and the app runs.
    RolledBack,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::PreCopy => "PreCopy",
            Step::Quiesce => "Quiesce",
            Step::FinalSync => "FinalSync",
            Step::Swap => "Swap",
            Step::Restore => "Restore",
            Step::AwaitingCommit => "AwaitingCommit",
            Step::Committed => "Committed",
            Step::RollingBack => "RollingBack",
            Step::RolledBack => "RolledBack",
        }
    }

    /// Whether the app may have written to the new volume: from Restore
    /// on, its pods run there.
    pub fn app_ran_on_new(self) -> bool {
        matches!(self, Step::Restore | Step::AwaitingCommit)
    }
}

/// `status.cutover`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CutoverStatus {
    pub step: Step,
    /// Pre-copy rounds, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<Round>,
    /// The owners scaled to zero and the replicas they go back to, recorded
    /// before the first is scaled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quiesce: Vec<ScaleTarget>,
    /// Per claim: the volumes and the claim as it was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ClaimCutover>,
    /// When the first owner was scaled down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiesced_at: Option<Timestamp>,
    /// When every owner was Ready again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_at: Option<Timestamp>,
    /// From the first scale-down until the workload was Ready again (or,
    /// while it is down, until now as last recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downtime_seconds: Option<f64>,
    /// The final sync's duration, once it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_sync_seconds: Option<f64>,
    /// Set once a rollback has started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<Rollback>,
    /// `--update-owner`: the StatefulSet re-created with the new class in
    /// its claim template, as it was before (written before it is
    /// deleted: until it is created again, this is the only copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<OwnerUpdate>,
    /// The step the current transfer pass belongs to, and its first
    /// attempt: attempts before it belong to earlier passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<Pass>,
}

impl CutoverStatus {
    /// The claim `name`'s part.
    pub fn claim(&self, name: &str) -> Option<&ClaimCutover> {
        self.claims.iter().find(|c| c.name == name)
    }

    pub fn claim_mut(&mut self, name: &str) -> Option<&mut ClaimCutover> {
        self.claims.iter_mut().find(|c| c.name == name)
    }

    /// Seconds the app has been (or was) down: from the first scale-down
    /// to Ready again, or to `now` while it is still down.
    pub fn downtime(&self, now: Timestamp) -> Option<f64> {
        let down = self.quiesced_at?;
        let up = self.restored_at.unwrap_or(now);
        Some(up.duration_since(down).as_secs_f64().max(0.0))
    }
}

/// One pre-copy round.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Round {
    /// From 1.
    pub number: u32,
    /// Its first attempt.
    pub first_attempt: u32,
    /// From its first attempt's start to its success.
    pub seconds: f64,
    /// Bytes of file data it sent (literal plus matched).
    pub bytes_sent: u64,
    /// Files it had to send.
    pub files_transferred: u64,
}

/// A transfer pass in flight: a pre-copy round, the final sync, or the
/// sync back of a rollback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pass {
    pub kind: PassKind,
    pub first_attempt: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PassKind {
    PreCopy,
    FinalSync,
    SyncBack,
}

impl PassKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PassKind::PreCopy => "pre-copy round",
            PassKind::FinalSync => "final sync",
            PassKind::SyncBack => "sync back",
        }
    }
}

/// One claim's cutover.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimCutover {
    pub namespace: String,
    pub name: String,
    /// The claim as it was, to re-create it (binding annotations left out).
    pub original: ClaimShape,
    /// The old PV and its reclaim policy before volmig set Retain.
    pub source_volume: String,
    pub source_policy: String,
    /// The new PV (the temporary claim's) and its policy before Retain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_volume: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_policy: Option<String>,
    /// The temporary claim the copies went to (deleted in the swap), and
    /// its shape: the re-created claim's spec.
    pub temporary_claim: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_shape: Option<ClaimShape>,
    /// The last change of the swap (or of the swap back) written ahead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<String>,
}

/// What a claim is made of, as volmig re-creates it: metadata a user set
/// and the spec fields a binding keeps.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimShape {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    pub access_modes: Vec<String>,
    /// The requested size (a quantity).
    pub request: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<String>,
}

/// A StatefulSet whose `volumeClaimTemplates` entry names the class of the
/// claims it makes (immutable: changed by deleting the StatefulSet with
/// orphan propagation and creating it again; pods and claims stay).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerUpdate {
    pub name: String,
    /// The claim template's name.
    pub template: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_class: Option<String>,
    /// The StatefulSet as it was: metadata a user set, and its spec.
    pub original: serde_json::Value,
}

/// What `claims[].swap` says once `commit` has begun: from then on the old
/// volume is going, and no rollback may start.
pub const COMMIT: &str = "Commit";

/// A rollback in flight or done.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollback {
    /// The step it started from.
    pub from: Step,
    /// Copy the app's writes on the new volume back to the old one first.
    pub sync_back: bool,
    /// The sync back has verified.
    #[serde(default)]
    pub synced_back: bool,
    /// Remove the new volume afterwards (`--delete-new`).
    #[serde(default)]
    pub delete_new: bool,
    /// The app is stopped for the rollback (set before the first
    /// scale-down; replicas come from `quiesce`).
    #[serde(default)]
    pub quiesced: bool,
    /// Who asked (`host/pid`), or why it started by itself.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Timestamp>,
}
