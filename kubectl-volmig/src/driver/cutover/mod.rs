//! The cutover (`migrate --cutover`): an explicit state machine over the
//! recorded [`Step`], one `step` function per step, that moves the app onto
//! the new volume under its claim's own name.
//!
//! `PreCopy` rounds of transfer while the app runs → `Quiesce` (owners
//! scaled to zero, their replicas recorded first) → `FinalSync` (verified,
//! `--delete`, the app down) → `Swap` (the claim name bound to the new
//! volume) → `Restore` (owners scaled back, Ready awaited) →
//! `AwaitingCommit` (→ `Committed` by `commit`), or `RollingBack` →
//! `RolledBack` from any step before `Committed`.
//!
//! Every change to the cluster is written ahead in the record and safe to
//! make twice; each step works out what is left from what the cluster
//! shows, so a client killed anywhere is finished by `resume` or undone by
//! `rollback`. Transfer passes (rounds, the final sync, a rollback's sync
//! back) are runs of the attempt driver ([`super::Driver`]) whose attempts
//! are counted from the pass's first one.
//!
//! - [`machine`]: the decisions, pure;
//! - [`rebind`]: binding a claim name to a given volume, one idempotent
//!   change at a time (pure decisions; I/O in `rebind_io`);
//! - [`workload`]: reading, scaling and awaiting the app's owners;
//! - [`owner`]: `--update-owner`, a StatefulSet re-created with the new
//!   class in its claim template (pure decisions; I/O in `owner_io`);
//! - [`request`]: asking for a rollback, from any client;
//! - `steps`, `rollback`: the steps' I/O.

pub mod machine;
pub mod owner;
mod owner_io;
pub mod rebind;
pub(crate) mod rebind_io;
pub mod request;
mod rollback;
mod steps;
#[cfg(test)]
mod tests;
pub(crate) mod volumes;
pub mod workload;

use std::time::Duration;

use jiff::Timestamp;
use kube::Client;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::group::gate::{Gate, Pos, Verdict};
use super::lease::LeaseHolder;
use super::run::API_OUTAGE;
use super::{Driver, DriverError, DriverOptions, Outcome, Update};
use crate::cluster::Sides;
use crate::events::{Recorder, Severity};
use crate::plan::Plan;
use crate::record::cutover::{CutoverStatus, Pass, PassKind, Step};
use crate::record::store::RecordStore;
use crate::record::VolumeMigration;
use crate::spec::ClaimRef;

/// The environment variable that names a crash point: the plugin dies
/// there at once (`abort`: no clean-up, no lease released, as `kill -9`
/// would leave it), for the tests of invariant 4. Unset in normal use.
pub const CRASH_AT: &str = "VOLMIG_CRASH_AT";

/// Dies at `point` when [`CRASH_AT`] names it: after the change it is
/// about was written ahead, before the change is made.
pub(crate) fn crash_point(point: &str) {
    if std::env::var(CRASH_AT).is_ok_and(|p| p == point) {
        mover::stdio::err(&format!(
            "volmig: crash point {point} reached ({CRASH_AT})\n"
        ));
        std::process::abort();
    }
}

/// How often waits look at the cluster again: most of them run while the
/// app is down, where every second counts.
const POLL: Duration = Duration::from_millis(250);
/// How often a wait refreshes the heartbeat.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// How long a claim may stay Terminating before the consumer still
/// holding it is named and the driver stops.
const TERMINATING_LIMIT: Duration = Duration::from_secs(120);
/// How long the app may take to be Ready again.
const READY_LIMIT: Duration = Duration::from_secs(600);

/// What a step leads to.
pub(crate) enum Flow {
    Next,
    Stop(Outcome),
}

/// Drives one cutover operation.
pub struct Cutover {
    pub(super) client: Client,
    /// The copy into the temporary claim, as planned.
    pub(super) plan: Plan,
    pub(super) store: RecordStore,
    pub(super) events: Recorder,
    pub(super) options: DriverOptions,
    pub(super) updates: UnboundedSender<Update>,
    pub(super) record: VolumeMigration,
    pub(super) holds_lease: bool,
    pub(super) heartbeat_at: Instant,
    /// The set's barriers, when this claim's cutover is one of a set's.
    pub(super) gate: Option<Gate>,
}

impl Cutover {
    pub fn new(
        client: Client,
        plan: Plan,
        record: VolumeMigration,
        options: DriverOptions,
        updates: UnboundedSender<Update>,
    ) -> Cutover {
        Cutover {
            store: RecordStore::new(client.clone(), &plan.destination.namespace),
            events: Recorder::new(client.clone(), &plan.operation),
            client,
            plan,
            options,
            updates,
            record,
            holds_lease: false,
            heartbeat_at: Instant::now(),
            gate: None,
        }
    }

    /// This claim's cutover as one of a set's, held at the set's barriers.
    pub fn in_set(mut self, gate: Gate) -> Cutover {
        self.gate = Some(gate);
        self
    }

    /// Runs until the cutover waits for `commit`, is committed, rolled
    /// back, fails, or is aborted.
    pub async fn run(mut self) -> Result<Outcome, DriverError> {
        // Take the lease and start the record's cutover part.
        self.write(|vm| {
            vm.status.cutover.get_or_insert_with(CutoverStatus::default);
            if !vm.status.phase.is_final() {
                vm.status.phase = crate::record::Phase::Running;
                vm.status.start_time.get_or_insert_with(Timestamp::now);
            }
        })
        .await?;
        let mut failing: Option<Instant> = None;
        loop {
            let step = self.cutover().step;
            tracing::debug!(step = step.as_str(), "cutover step");
            let result = match step {
                Step::PreCopy => self.pre_copy().await,
                Step::Quiesce => self.quiesce().await,
                Step::FinalSync => self.final_sync().await,
                Step::Swap => self.swap().await,
                Step::Restore => self.restore().await,
                Step::RollingBack => self.roll_back().await,
                Step::AwaitingCommit => self.settle().await,
                Step::Committed | Step::RolledBack => {
                    self.tidy().await?;
                    self.release().await?;
                    Ok(Flow::Stop(Outcome::Finished(Box::new(self.record.clone()))))
                }
            };
            match result {
                Ok(Flow::Next) => failing = None,
                Ok(Flow::Stop(outcome)) => return Ok(outcome),
                Err(e)
                    if e.is_retryable()
                        && failing.get_or_insert_with(Instant::now).elapsed() < API_OUTAGE =>
                {
                    tracing::warn!("{e}; trying again");
                    tokio::time::sleep(POLL * 2).await;
                }
                Err(e) => {
                    // Say where it stopped; the record keeps the step, so
                    // resume or rollback go on from there.
                    let msg = format!("{} stopped: {e}", step.as_str());
                    let _ = self.write(|vm| vm.status.message = Some(msg.clone())).await;
                    return Err(e);
                }
            }
        }
    }

    /// The record's cutover part.
    pub(super) fn cutover(&self) -> CutoverStatus {
        self.record.status.cutover.clone().unwrap_or_default()
    }

    /// The claim that moves.
    pub(super) fn claim(&self) -> &ClaimRef {
        &self.plan.spec.source
    }

    /// Changes the record with this driver's heartbeat.
    pub(super) async fn write(
        &mut self,
        change: impl FnMut(&mut VolumeMigration),
    ) -> Result<(), DriverError> {
        let lease = LeaseHolder {
            store: &self.store,
            operation: &self.plan.operation,
            holder: &self.options.holder,
            claiming: !self.holds_lease,
            stop_on_rollback: false,
        };
        self.record = lease.write(change).await?;
        self.holds_lease = true;
        self.heartbeat_at = Instant::now();
        Ok(())
    }

    /// Writes ahead, in the claim's part of the record, the change about
    /// to be made (`claims[].swap`).
    pub(super) async fn note_change(&mut self, change: &str) -> Result<(), DriverError> {
        let claim = self.claim().name.clone();
        self.write(|vm| {
            let c = vm.status.cutover.get_or_insert_with(CutoverStatus::default);
            if let Some(claim) = c.claim_mut(&claim) {
                claim.swap = Some(change.to_string());
            }
        })
        .await
    }

    /// Refreshes the heartbeat if it is due (during waits).
    pub(super) async fn keep_alive(&mut self) -> Result<(), DriverError> {
        if self.heartbeat_at.elapsed() >= HEARTBEAT_EVERY {
            self.write(|_| {}).await?;
        }
        Ok(())
    }

    /// Moves to `next`, unless a rollback was asked for meanwhile: then the
    /// rollback goes on from the step that was running.
    pub(super) async fn advance(
        &mut self,
        next: Step,
        mut change: impl FnMut(&mut CutoverStatus),
    ) -> Result<(), DriverError> {
        self.write(|vm| {
            let c = vm.status.cutover.get_or_insert_with(CutoverStatus::default);
            change(c);
            c.step = if c.rollback.is_some() && next != Step::RolledBack {
                Step::RollingBack
            } else {
                next
            };
        })
        .await?;
        let now = self.cutover().step;
        let _ = self
            .updates
            .send(Update::Cutover(format!("cutover: {}", now.as_str())));
        crash_point(&format!("step:{}", now.as_str()));
        Ok(())
    }

    /// Gives the lease up: another client may drive now.
    pub async fn release(&mut self) -> Result<(), DriverError> {
        self.record =
            super::lease::release_lease(&self.store, &self.plan.operation, &self.options.holder)
                .await?;
        self.holds_lease = false;
        Ok(())
    }

    /// The record as this driver last wrote or read it.
    pub fn record(&self) -> &VolumeMigration {
        &self.record
    }

    /// An Event on the claim, and a line for the user.
    pub(super) async fn post(&self, severity: Severity, reason: &str, message: &str) {
        let _ = self.updates.send(Update::Cutover(message.to_string()));
        self.events
            .post(&[self.claim()], severity, reason, message)
            .await;
    }

    /// Runs the pass the record names (a new one starts at the next
    /// attempt number) with the attempt driver, on `plan`.
    pub(super) async fn run_pass(
        &mut self,
        kind: PassKind,
        plan: Plan,
    ) -> Result<Outcome, DriverError> {
        let in_flight = self.cutover().pass.filter(|p| p.kind == kind);
        if in_flight.is_none() {
            let first = self
                .record
                .status
                .attempts
                .last()
                .map_or(1, |a| a.number + 1);
            self.write(|vm| {
                let c = vm.status.cutover.get_or_insert_with(CutoverStatus::default);
                c.pass = Some(Pass {
                    kind,
                    first_attempt: first,
                });
            })
            .await?;
        }
        let options = self.options.clone();
        let driver = Driver::new(
            Sides::one(self.client.clone()),
            plan,
            self.record.clone(),
            options,
            self.updates.clone(),
        );
        let outcome = driver.run().await?;
        // Every outcome carries the record as the pass left it.
        self.record = match &outcome {
            Outcome::Finished(vm) => (**vm).clone(),
            Outcome::PassEnded { record, .. } => (**record).clone(),
        };
        // A pass may have given the destination up for a fresh claim: the
        // next passes and the swap use that one.
        if let Some(d) = &self.record.status.destination {
            self.plan.destination = d.clone();
        }
        Ok(outcome)
    }

    /// In a set, waits at the set's barrier `pos` (keeping the heartbeat):
    /// what the set says to do. Alone, goes on at once.
    pub(super) async fn barrier(&mut self, pos: Pos) -> Result<Verdict, DriverError> {
        let Some(gate) = self.gate.clone() else {
            return Ok(Verdict::Go);
        };
        loop {
            tokio::select! {
                verdict = gate.wait_at(pos) => return Ok(verdict),
                () = tokio::time::sleep(HEARTBEAT_EVERY) => self.keep_alive().await?,
            }
            // A rollback asked for meanwhile (`rollback` of the set) turns
            // every claim waiting on the way forward back.
            let asked = self.cutover().rollback.map(|r| r.reason);
            if let (Some(why), false) = (asked, pos >= Pos::SyncedBack) {
                gate.roll_back_all(&why);
                return Ok(Verdict::RollBack(why));
            }
        }
    }

    /// The operation a user acts on: the set this claim belongs to, or
    /// this claim's own.
    pub(super) fn user_operation(&self) -> String {
        let group = self.record.metadata.group.as_ref();
        group.map_or_else(|| self.plan.operation.clone(), |g| g.name.clone())
    }

    /// Waits until `done` says so, keeping the heartbeat; `Err` from
    /// `done` ends the wait.
    pub(super) async fn wait_until<F, Fut>(
        &mut self,
        limit: Duration,
        what: &str,
        mut done: F,
    ) -> Result<(), DriverError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<bool, DriverError>>,
    {
        let started = Instant::now();
        loop {
            if done().await? {
                return Ok(());
            }
            if started.elapsed() >= limit {
                return Err(DriverError::Refused(format!(
                    "{what}: still not so after {}s",
                    limit.as_secs()
                )));
            }
            self.keep_alive().await?;
            tokio::time::sleep(POLL).await;
        }
    }
}
