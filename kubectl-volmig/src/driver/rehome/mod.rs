//! The rehome (`kubectl volmig rehome`, issue 19): an explicit state
//! machine over the recorded [`Step`] that makes node-local volumes' PVs
//! again, pinned to the node their disks moved to.
//!
//! `Quiesce` (owners scaled to zero, their replicas recorded first) →
//! `Move` (each volume walked to its rehomed PV, [`decide`]) → `Restore`
//! (owners scaled back, Ready awaited) → `Done`; or `RollingBack` (the app
//! stopped again, each volume walked back to its original PV, the app
//! restored) → `RolledBack`, from any step.
//!
//! Every change is written ahead in the record (`volumes[].change`) and
//! worked out afresh from what the cluster shows, so a client killed
//! anywhere is finished by `resume` or undone by `rollback`.
//!
//! - [`decide`]: a volume's next change, pure;
//! - `io`: what the cluster shows of a volume, and each change made.

pub mod decide;
pub mod gather;
mod io;

use std::time::Duration;

use jiff::Timestamp;
use kube::Client;
use tokio::time::Instant;

use super::cutover::{crash_point, workload};
use super::lease::{LeaseHolder, Leased};
use super::DriverError;
use crate::events::{Recorder, Severity};
use crate::plan::quiesce;
use crate::record::rehome::{Rehome, RehomeRollback, Step, Stop};
use crate::record::store::Store;
use crate::record::{Driver as Lease, Phase};
use crate::spec::ClaimRef;
use decide::Toward;

/// How often waits look at the cluster again: the app is down meanwhile.
const POLL: Duration = Duration::from_millis(250);
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// How long a claim or a PV may stay Terminating before the driver stops
/// and says what holds it.
const TERMINATING_LIMIT: Duration = Duration::from_secs(120);
/// How long the pods of a scaled-down owner may take to go.
const GONE_LIMIT: Duration = Duration::from_secs(300);
/// How long the app may take to be Ready again.
const READY_LIMIT: Duration = Duration::from_secs(600);

impl Leased for Rehome {
    fn phase(&self) -> Phase {
        self.status.phase
    }
    fn lease(&self) -> Option<&Lease> {
        self.status.driver.as_ref()
    }
    fn lease_mut(&mut self) -> &mut Option<Lease> {
        &mut self.status.driver
    }
    fn rolling_back(&self) -> bool {
        self.status.rollback.is_some()
    }
}

/// Drives one rehome.
pub struct Rehomer {
    client: Client,
    store: Store<Rehome>,
    events: Recorder,
    holder: String,
    record: Rehome,
    holds_lease: bool,
    heartbeat_at: Instant,
    /// Where each step's news goes (the terminal).
    say: fn(&str),
}

impl Rehomer {
    pub fn new(client: Client, record: Rehome, holder: &str, say: fn(&str)) -> Rehomer {
        Rehomer {
            store: Store::new(client.clone(), &record.metadata.namespace),
            events: Recorder::new(client.clone(), &record.metadata.name),
            client,
            holder: holder.to_string(),
            record,
            holds_lease: false,
            heartbeat_at: Instant::now(),
            say,
        }
    }

    /// Runs until the rehome is done or rolled back, or stops with why.
    pub async fn run(mut self) -> Result<Rehome, DriverError> {
        self.write(|r| {
            if !r.status.phase.is_final() {
                r.status.phase = Phase::Running;
                r.status.start_time.get_or_insert_with(Timestamp::now);
            }
        })
        .await?;
        let mut failing: Option<Instant> = None;
        loop {
            let step = self.record.status.step;
            let result = match step {
                Step::Quiesce => self.quiesce().await,
                Step::Move => self.move_volumes(Toward::New, Step::Restore).await,
                Step::Restore => self.restore(Step::Done).await,
                Step::RollingBack => self.roll_back().await,
                Step::Done | Step::RolledBack => {
                    self.release().await?;
                    return Ok(self.record);
                }
            };
            match result {
                Ok(()) => failing = None,
                Err(e)
                    if e.is_retryable()
                        && failing.get_or_insert_with(Instant::now).elapsed()
                            < super::run::API_OUTAGE =>
                {
                    tracing::warn!("{e}; trying again");
                    tokio::time::sleep(POLL * 2).await;
                }
                Err(e) => {
                    let op = self.record.metadata.name.clone();
                    let msg = format!(
                        "{} stopped: {e}; the app may be down: kubectl volmig resume {op} \
                         finishes the rehome, kubectl volmig rollback {op} undoes it",
                        step.as_str()
                    );
                    let _ = self
                        .write(|r| {
                            r.status.message = Some(msg.clone());
                            r.status.phase = Phase::Failed;
                        })
                        .await;
                    let _ = self.release().await;
                    return Err(DriverError::Refused(msg));
                }
            }
        }
    }

    /// Changes the record with this driver's heartbeat.
    async fn write(&mut self, change: impl FnMut(&mut Rehome)) -> Result<(), DriverError> {
        let lease = LeaseHolder {
            store: &self.store,
            operation: &self.record.metadata.name,
            holder: &self.holder,
            claiming: !self.holds_lease,
            stop_on_rollback: false,
        };
        self.record = lease.write(change).await?;
        self.holds_lease = true;
        self.heartbeat_at = Instant::now();
        Ok(())
    }

    async fn keep_alive(&mut self) -> Result<(), DriverError> {
        if self.heartbeat_at.elapsed() >= HEARTBEAT_EVERY {
            self.write(|_| {}).await?;
        }
        Ok(())
    }

    async fn release(&mut self) -> Result<(), DriverError> {
        let op = self.record.metadata.name.clone();
        self.record = super::lease::release_lease(&self.store, &op, &self.holder).await?;
        self.holds_lease = false;
        Ok(())
    }

    /// Moves to `next`, unless a rollback was asked for meanwhile.
    async fn advance(
        &mut self,
        next: Step,
        mut change: impl FnMut(&mut Rehome),
    ) -> Result<(), DriverError> {
        self.write(|r| {
            change(r);
            r.status.step = match (&r.status.rollback, next) {
                (Some(_), Step::Quiesce | Step::Move | Step::Restore | Step::Done) => {
                    Step::RollingBack
                }
                _ => next,
            };
        })
        .await?;
        let now = self.record.status.step;
        (self.say)(&format!("rehome: {}", now.as_str()));
        crash_point(&format!("rehome-step:{}", now.as_str()));
        Ok(())
    }

    fn claims(&self) -> Vec<ClaimRef> {
        let volumes = &self.record.status.volumes;
        volumes.iter().filter_map(|v| v.claim.clone()).collect()
    }

    /// An Event on every claim, and a line for the user.
    async fn post(&self, severity: Severity, reason: &str, message: &str) {
        (self.say)(message);
        let claims = self.claims();
        let refs: Vec<&ClaimRef> = claims.iter().collect();
        self.events.post(&refs, severity, reason, message).await;
    }

    async fn quiesce(&mut self) -> Result<(), DriverError> {
        if self.record.status.rollback.is_some() {
            return self.advance(Step::RollingBack, |_| {}).await;
        }
        if self.record.status.quiesced_at.is_none() {
            // Planned again now: pods may have come or gone since the plan.
            let stops = self.plan_stops().await?;
            let now = Timestamp::now();
            self.write(|r| {
                r.status.stops = stops.clone();
                r.status.quiesced_at = Some(now);
            })
            .await?;
        }
        let stops = &self.record.status.stops;
        let msg = match stops.is_empty() {
            true => "no pod mounts the claims: nothing to stop".to_string(),
            false => {
                let names: Vec<String> = stops
                    .iter()
                    .map(|s| format!("{:?} {}/{}", s.target.kind, s.namespace, s.target.name))
                    .collect();
                format!("scaling {} to 0", names.join(", "))
            }
        };
        self.post(Severity::Normal, "RehomeQuiesce", &msg).await;
        self.stop_app().await?;
        self.advance(Step::Move, |_| {}).await
    }

    /// The owners that stop every consumer of the claims, or why some
    /// cannot be stopped (nothing has changed yet: the rehome fails, and
    /// resume tries again).
    async fn plan_stops(&self) -> Result<Vec<Stop>, DriverError> {
        let mut stops: Vec<Stop> = Vec::new();
        for claim in self.claims() {
            let w = workload::gather(&self.client, &claim.namespace).await?;
            let plan = quiesce::plan(&claim.name, &w).map_err(|u| {
                let list: Vec<String> = u.iter().map(ToString::to_string).collect();
                DriverError::Refused(format!(
                    "cannot stop every consumer of {claim}: {}",
                    list.join("; ")
                ))
            })?;
            for target in plan.targets {
                let stop = Stop {
                    namespace: claim.namespace.clone(),
                    target,
                };
                let known = stops.iter().any(|s| {
                    s.namespace == stop.namespace
                        && s.target.kind == stop.target.kind
                        && s.target.name == stop.target.name
                });
                if !known {
                    stops.push(stop);
                }
            }
        }
        Ok(stops)
    }

    /// Scales every recorded owner to zero and waits until no pod (but
    /// volmig's) mounts a claim.
    async fn stop_app(&mut self) -> Result<(), DriverError> {
        crash_point("rehome:ScaleDown");
        for s in self.record.status.stops.clone() {
            self.scale(&s, 0).await?;
        }
        for claim in self.claims() {
            let what = format!("pods still mount {claim}");
            self.wait_until(GONE_LIMIT, &what, |client| {
                let claim = claim.clone();
                async move {
                    let pods = workload::consumers(&client, &claim.namespace, &claim.name).await?;
                    Ok(pods.is_empty())
                }
            })
            .await?;
        }
        Ok(())
    }

    /// Scales a recorded owner; `false` when it is gone (deleted
    /// meanwhile: there is nothing to stop or start), said once.
    async fn scale(&mut self, s: &Stop, replicas: i32) -> Result<bool, DriverError> {
        match workload::scale(&self.client, &s.namespace, &s.target, replicas).await {
            Ok(()) => Ok(true),
            Err(DriverError::Kube { source, .. }) if matches!(source.as_ref(), kube::Error::Api(e) if e.code == 404) =>
            {
                let msg = format!(
                    "{:?} {}/{} is gone: not scaled to {replicas}",
                    s.target.kind, s.namespace, s.target.name
                );
                self.post(Severity::Warning, "RehomeOwnerGone", &msg).await;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Walks every volume `toward` an end, then goes to `next`.
    async fn move_volumes(&mut self, toward: Toward, next: Step) -> Result<(), DriverError> {
        if toward == Toward::New && self.record.status.rollback.is_some() {
            return self.advance(Step::RollingBack, |_| {}).await;
        }
        for name in self.record.spec.volumes.clone() {
            self.walk(&name, toward).await?;
            if toward == Toward::New && self.record.status.rollback.is_some() {
                return self.advance(Step::RollingBack, |_| {}).await;
            }
            let msg = match toward {
                Toward::New => format!(
                    "persistentvolume {name} is pinned to {} now",
                    self.record.spec.target
                ),
                Toward::Old => format!("persistentvolume {name} is back as it was"),
            };
            self.post(Severity::Normal, "RehomeVolume", &msg).await;
        }
        self.advance(next, |_| {}).await
    }

    /// Scales every recorded owner back, waits until each is Ready, then
    /// goes to `next`.
    async fn restore(&mut self, next: Step) -> Result<(), DriverError> {
        if next == Step::Done && self.record.status.rollback.is_some() {
            return self.advance(Step::RollingBack, |_| {}).await;
        }
        crash_point("rehome:ScaleUp");
        let mut present = Vec::new();
        for s in self.record.status.stops.clone() {
            if self.scale(&s, s.target.replicas).await? {
                present.push(s);
            }
        }
        for s in present {
            let what = format!(
                "{:?} {}/{} Ready",
                s.target.kind, s.namespace, s.target.name
            );
            self.wait_until(READY_LIMIT, &what, |client| {
                let s = s.clone();
                async move { workload::ready(&client, &s.namespace, &s.target, s.target.replicas).await }
            })
            .await?;
        }
        let now = Timestamp::now();
        let phase = match next {
            Step::RolledBack => Phase::RolledBack,
            _ => Phase::Succeeded,
        };
        self.write(|r| {
            r.status.restored_at.get_or_insert(now);
            r.status.downtime_seconds = r.downtime(now);
        })
        .await?;
        let downtime = self.record.status.downtime_seconds.unwrap_or(0.0);
        let msg = match next {
            Step::RolledBack => format!(
                "rolled back: every volume is as it was and the app runs (down {downtime:.1}s)"
            ),
            _ => format!(
                "rehomed to {}: the app runs (down {downtime:.1}s)",
                self.record.spec.target
            ),
        };
        self.advance(next, |r| {
            // A rollback asked meanwhile goes on instead.
            if r.status.rollback.is_none() || next == Step::RolledBack {
                r.status.phase = phase;
                r.status.completion_time = Some(now);
                r.status.message = Some(msg.clone());
            }
        })
        .await?;
        if self.record.status.step == next {
            self.post(Severity::Normal, "RehomeDone", &msg).await;
        }
        Ok(())
    }

    /// Stops the app again (it may have run on the rehomed volumes), walks
    /// every volume back, restores the app.
    async fn roll_back(&mut self) -> Result<(), DriverError> {
        let touched = self
            .record
            .status
            .volumes
            .iter()
            .any(|v| v.change.is_some());
        if self.record.status.quiesced_at.is_none() && !touched {
            // Nothing was stopped or changed: nothing to undo.
            let msg = "rolled back before anything changed".to_string();
            return self
                .advance(Step::RolledBack, |r| {
                    r.status.phase = Phase::RolledBack;
                    r.status.completion_time = Some(Timestamp::now());
                    r.status.message = Some(msg.clone());
                })
                .await;
        }
        if self.record.status.quiesced_at.is_none() {
            // Nothing was stopped or changed: the stops are planned now.
            let stops = self.plan_stops().await?;
            self.write(|r| {
                r.status.stops = stops.clone();
                r.status.quiesced_at = Some(Timestamp::now());
            })
            .await?;
        }
        // A second stop of the app counts from here.
        if self.record.status.restored_at.is_some() {
            let now = Timestamp::now();
            self.write(|r| {
                r.status.restored_at = None;
                r.status.quiesced_at = Some(now);
            })
            .await?;
        }
        self.stop_app().await?;
        for name in self.record.spec.volumes.clone() {
            self.walk(&name, Toward::Old).await?;
        }
        self.restore(Step::RolledBack).await
    }

    /// Waits until `done` says so, keeping the heartbeat.
    async fn wait_until<F, Fut>(
        &mut self,
        limit: Duration,
        what: &str,
        mut done: F,
    ) -> Result<(), DriverError>
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = Result<bool, DriverError>>,
    {
        let started = Instant::now();
        loop {
            if done(self.client.clone()).await? {
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

/// Asks for a rollback of `op`: written in the record, so the client that
/// drives it (or the next `resume`) takes it up. `Err` says why not.
pub async fn request_rollback(
    store: &Store<Rehome>,
    op: &str,
    reason: &str,
) -> Result<Rehome, DriverError> {
    let now = Timestamp::now();
    store
        .update(op, |r| {
            if r.status.step == Step::RolledBack {
                return Err(crate::record::store::StoreError::Changed(
                    "the rehome is rolled back already".into(),
                ));
            }
            if r.status.rollback.is_none() {
                r.status.rollback = Some(RehomeRollback {
                    from: r.status.step,
                    reason: reason.to_string(),
                    started: Some(now),
                });
                r.status.step = Step::RollingBack;
                r.status.phase = Phase::Running;
                r.status.completion_time = None;
            }
            Ok(())
        })
        .await
        .map_err(|e| match e {
            crate::record::store::StoreError::Changed(why) => DriverError::Refused(why),
            other => other.into(),
        })
}
