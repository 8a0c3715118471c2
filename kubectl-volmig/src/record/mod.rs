//! The operation record: a labelled ConfigMap in the destination namespace
//! that holds an operation's spec, plan and status (phase, placement, every
//! attempt), so that `status`, `logs`, `resume` and `abort` work from any
//! machine. Printed as a Kubernetes-style `VolumeMigration` object.
//!
//! - this module: the types;
//! - [`configmap`]: a record to and from its ConfigMap (pure);
//! - [`figures`]: times, bytes and the attempt budget worked out from what
//!   was seen (pure);
//! - [`store`]: reading, listing and writing records with optimistic
//!   concurrency;
//! - [`print`](mod@print): tables, JSON and YAML for `-o`.

pub mod configmap;
pub mod cutover;
pub mod figures;
pub mod group;
pub mod network;
pub mod print;
pub mod rehome;
pub mod store;
pub mod sync;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::plan::{DestinationClaim, Method, MoverSecurity, Placement, SourceMethod, SourceVolume};
use crate::spec::MigrationSpec;

pub const API_VERSION: &str = "volmig.io/v1alpha1";
pub const KIND: &str = "VolumeMigration";

/// An operation as printed by `-o json|yaml`: `{apiVersion, kind, metadata,
/// spec, status}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMigration {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: MigrationSpec,
    pub status: MigrationStatus,
}

impl VolumeMigration {
    /// The attempt that runs now: the latest, if it has not ended, of an
    /// operation that goes on.
    pub fn running_attempt(&self) -> Option<&Attempt> {
        let goes_on = matches!(self.status.phase, Phase::Pending | Phase::Running);
        let last = self.status.attempts.last();
        last.filter(|a| goes_on && !a.phase.is_over())
    }

    /// The plan the record was made from, or `None` for a record that
    /// never got one (it never started).
    pub fn plan(&self) -> Option<crate::plan::Plan> {
        let mut spec = self.spec.clone();
        if let Some(round) = self.status.open_round() {
            // A round mirrors the source into the claim volmig made
            // (nothing else is in it); the final round also verifies.
            let made = self.status.destination.as_ref();
            let made = made.is_some_and(|d| d.action == crate::plan::ClaimAction::Create);
            spec.transfer.delete |= made;
            spec.transfer.verify |= round.r#final;
        }
        Some(crate::plan::Plan {
            operation: self.metadata.name.clone(),
            spec,
            source: self.status.source.clone()?,
            destination: self.status.destination.clone()?,
            placement: self.status.placement.clone()?,
            // Records of older versions planned none: baseline movers.
            security: self.status.security.clone().unwrap_or_default(),
            // ... and read their sources directly.
            source_method: self.status.source_method.clone().unwrap_or_default(),
            warnings: Vec::new(),
        })
    }

    /// What its senders read: the source, or a snapshot or clone of it.
    pub fn reads(&self) -> Method {
        self.status
            .source_method
            .as_ref()
            .map_or(Method::Direct, |m| m.method)
    }

    /// Whether a cutover rollback has been asked for.
    pub fn rolling_back(&self) -> bool {
        let cutover = self.status.cutover.as_ref();
        cutover.is_some_and(|c| c.rollback.is_some())
    }
}

/// The record's identity: name (the operation id) and namespace, plus the
/// ConfigMap's `resourceVersion` for optimistic concurrency.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: String,
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// The set this claim's record belongs to (`migrate a b`, `--workload`,
    /// ...), from its labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<group::GroupRef>,
}

/// The operation's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Phase {
    /// Recorded, nothing started yet.
    #[default]
    Pending,
    /// Attempts are running (or waiting out a backoff).
    Running,
    /// The data is at the destination (and verified, unless `--no-verify`).
    Succeeded,
    /// Out of attempts, or a failure no retry can fix.
    Failed,
    /// Stopped by `kubectl volmig abort`; the destination keeps its data.
    Aborted,
    /// A cutover undone: the claim is bound to its old volume again and
    /// the app runs on it.
    RolledBack,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Aborted => "Aborted",
            Phase::RolledBack => "RolledBack",
        }
    }

    /// Succeeded, Failed or RolledBack: no attempt will run again.
    /// (Aborted can be resumed.)
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed | Phase::RolledBack)
    }

    /// Final, or Aborted: nothing drives it until someone resumes it.
    pub fn is_stopped(self) -> bool {
        self.is_final() || self == Phase::Aborted
    }
}

/// Everything that happened so far.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    pub phase: Phase,
    /// Why the phase is what it is, in words (the refusal, the failure and
    /// what to do, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceVolume>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<DestinationClaim>,
    /// Where the mover pods run and why (the current attempt's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// The movers' Pod Security profile, and whom they run as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<MoverSecurity>,
    /// Where the sender reads (issue 24); none: the source directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_method: Option<SourceMethod>,
    /// Every attempt, oldest first.
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// Overall progress, exact across attempts (from the receiver's
    /// checkpoint-backed progress events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Timestamp>,
    /// Seconds spent in attempts, summed over all of them.
    #[serde(default)]
    pub elapsed_seconds: f64,
    /// The successful attempt's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// The client driving the operation, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<Driver>,
    /// The first attempt counted against the backoff limit: 1, or the
    /// first after `resume` ran a Failed or Aborted operation again with a
    /// fresh budget (absent means 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_from: Option<u32>,
    /// Who ran `abort` (`host/pid`, and the kubeconfig user when known),
    /// while the operation is Aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted_by: Option<String>,
    /// Where a cutover (`--cutover`) stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cutover: Option<cutover::CutoverStatus>,
    /// `--detach`: the driver runs in the cluster, as a Job's pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_cluster: Option<InCluster>,
    /// Since when the destination's node has been away (NotReady,
    /// unreachable, gone), while the driver waits for it (`--reuse-wait`)
    /// instead of spending attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_unavailable_since: Option<Timestamp>,
    /// Why, in words: `node node-2 (destination volume) is unreachable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_unavailable: Option<String>,
    /// Destination claims given up for a fresh one, kept (labelled) until
    /// the operation ends; `cleanup` removes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub abandoned_destinations: Vec<AbandonedDestination>,
    /// A new destination asked for (`resume --to-node`/`--to-storage-class`):
    /// the next attempt makes it at once, without waiting for the old one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_change: Option<String>,
    /// What a reused destination (`--reuse`) held before the first
    /// attempt, as `mover inspect` read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reusable: Option<String>,
    /// A Block copy's verified prefix, as the last receiver told it: the
    /// next receiver into the same claim starts from it (`--checkpoint-seed`),
    /// since its own state directory goes with its pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_checkpoint: Option<BlockCheckpoint>,
    /// Into another cluster: how the sender reaches the receiver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<network::NetworkStatus>,
    /// The rounds run by `kubectl volmig sync` after the first copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<sync::SyncStatus>,
}

impl MigrationStatus {
    /// The operation runs again (`resume` of a Failed or Aborted one, a
    /// `sync` round): Running, with a fresh attempt budget from the next
    /// attempt, whose number it returns.
    pub fn run_again(&mut self) -> u32 {
        let next = self.attempts.last().map_or(1, |a| a.number + 1);
        self.phase = Phase::Running;
        self.message = None;
        self.aborted_by = None;
        self.completion_time = None;
        self.budget_from = Some(next);
        next
    }
}

/// A Block copy's checkpoint, carried between receivers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockCheckpoint {
    /// The destination claim it is of: another claim (a replaced or fresh
    /// destination) does not take it.
    pub claim: String,
    pub attempt: u32,
    pub verified: u64,
    /// The mover's encoding, base64.
    pub data: String,
}

/// A destination claim the driver stopped using, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AbandonedDestination {
    pub name: String,
    pub reason: String,
    /// The first attempt on its replacement.
    pub replaced_before_attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
}

/// The in-cluster driver of a detached operation, recorded before any of
/// its objects is created, so that whoever ends the operation (or cleans
/// it up) knows what to remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InCluster {
    /// The Job, in the record's namespace, whose pods drive the operation.
    pub job: String,
    /// The image they run (`kubectl-volmig drive`).
    pub image: String,
    /// The namespaces holding one of its Roles: the operation's.
    pub namespaces: Vec<String>,
    /// Who detached it (`host/pid`, and the kubeconfig user when known).
    pub started_by: String,
    pub started_at: Timestamp,
}

/// One attempt: a receiver pod and a sender pod.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// From 1.
    pub number: u32,
    pub phase: AttemptPhase,
    pub receiver: PodRecord,
    pub sender: PodRecord,
    /// Why it ended (the failing side's exit code and error), if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether a new attempt may fix that failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Timestamp>,
    #[serde(default)]
    pub elapsed_seconds: f64,
    /// Overall bytes at the destination when the attempt ended (or now).
    #[serde(default)]
    pub bytes_done: u64,
    #[serde(default)]
    pub bytes_total: u64,
    /// Bytes earlier attempts had done, per the checkpoint this attempt
    /// started from: where its progress started (the mover's progress
    /// `bytes_prior`). Records written before the rename say
    /// `bytesResumed`.
    #[serde(default, alias = "bytesResumed")]
    pub bytes_prior: u64,
    /// Bytes per second this attempt wrote or settled.
    #[serde(default)]
    pub rate: u64,
    /// The last lines of both pods' logs (kept after the pods are deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_tail: Vec<String>,
    /// The snapshot or clone the sender read, when it read a copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceCopy>,
    /// It failed because of the destination's data or state (the
    /// receiver's local I/O error, entries it could not write or replace,
    /// verification differences): counted against `--reuse-limit`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub destination_fault: bool,
    /// Its receiver emptied the destination first (`--wipe`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wipe: bool,
    /// What it did with the destination other than reuse it, and why:
    /// `wiped: 3 attempts in a row failed on its data`, `fresh claim
    /// data-migrated-2: its node node-2 has been unreachable for 10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_note: Option<String>,
}

/// The copy of the source an attempt read: written ahead, before the
/// snapshot or claim is created, so that a driver that stops finds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceCopy {
    /// `Snapshot` or `Clone`.
    pub method: Method,
    /// The VolumeSnapshot (snapshot only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// The claim the sender mounted.
    pub claim: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<Timestamp>,
    /// When the snapshot was ready to use, or the clone bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<Timestamp>,
    /// The snapshot's `restoreSize`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_size: Option<String>,
    /// The last error the snapshot controller or the provisioner reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum AttemptPhase {
    /// Pods created, not both running yet.
    #[default]
    Starting,
    Running,
    Succeeded,
    Failed,
    /// Ended by the driver to move the sender after the app (not counted
    /// against the backoff limit).
    Replaced,
    /// Ended by `abort`.
    Aborted,
}

impl AttemptPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptPhase::Starting => "Starting",
            AttemptPhase::Running => "Running",
            AttemptPhase::Succeeded => "Succeeded",
            AttemptPhase::Failed => "Failed",
            AttemptPhase::Replaced => "Replaced",
            AttemptPhase::Aborted => "Aborted",
        }
    }

    pub fn is_over(self) -> bool {
        !matches!(self, AttemptPhase::Starting | AttemptPhase::Running)
    }
}

/// A mover pod as last seen.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRecord {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The pod's phase (`Pending`, `Running`, `Succeeded`, `Failed`), or
    /// `Deleted` once gone before it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The container's terminated or waiting reason (`Error`,
    /// `OOMKilled`, `ImagePullBackOff`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the container finished (its `finishedAt`, to the second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
}

/// Overall progress, as the latest mover progress event said.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub files_done: u64,
    pub files_total: u64,
    /// The totals are final (the source has been listed completely).
    pub listing_done: bool,
    #[serde(default)]
    pub rate: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated: Option<Timestamp>,
}

/// What the successful attempt did, from the mover's summary.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub entries: u64,
    pub files: u64,
    pub bytes: u64,
    pub files_transferred: u64,
    pub files_up_to_date: u64,
    pub bytes_literal: u64,
    pub bytes_matched: u64,
    pub bytes_on_wire: u64,
    pub deleted: u64,
    /// Entries compared by BLAKE3, if verification ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_entries: Option<u64>,
    /// The BLAKE3 manifest of the destination as verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// Source entries that changed, vanished or kept changing during the
    /// copy (a live source): the destination holds what was sent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub changed: u64,
    /// The first of them, by path (those verification named).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_paths: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The client driving an operation: who, and when it last said so. A
/// heartbeat older than [`Driver::STALE_SECONDS`] is a driver gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Driver {
    /// `host/pid` for a client, `pod/NAME` for the in-cluster driver.
    pub holder: String,
    pub heartbeat: Timestamp,
}

impl Driver {
    pub const STALE_SECONDS: i64 = 60;

    pub fn is_live(&self, now: Timestamp) -> bool {
        now.duration_since(self.heartbeat).as_secs() < Self::STALE_SECONDS
    }

    /// [`is_live`](Self::is_live), and not a process of this machine
    /// known to have gone (a client killed here is taken over at once).
    pub fn is_alive(&self, now: Timestamp) -> bool {
        self.is_live(now) && !crate::names::holder_gone(&self.holder)
    }
}
