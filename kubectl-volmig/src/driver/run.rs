//! The driver's states and steps.

use std::time::Duration;

use crate::cluster::{Side, Sides};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::follow::Follower;
use super::objects;
use super::watch::PodWatch;
use super::DriverError;
use crate::events::{Recorder, Severity};
use crate::names::{self, Component};
use crate::plan::{NodePlacement, Plan};
use crate::record::figures;
use crate::record::store::RecordStore;
use crate::record::{Attempt, AttemptPhase, Phase, Progress, VolumeMigration};

/// How often the record gets the latest progress and the driver's
/// heartbeat while an attempt runs.
pub(super) const RECORD_EVERY: Duration = Duration::from_secs(5);
/// How often the app's pods are looked at again, to follow the app.
pub(super) const PLACEMENT_EVERY: Duration = Duration::from_secs(5);
/// The longest wait between two looks at the pods.
pub(super) const TICK: Duration = Duration::from_secs(1);
/// The longest backoff between attempts.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How long the driver rides out API errors before it gives up (the
/// operation goes on in the cluster; `resume` picks it up).
pub(super) const API_OUTAGE: Duration = Duration::from_secs(120);
/// How long ended pods get to go (the receiver writes its checkpoint on
/// SIGTERM within the default 30 s grace period).
pub(super) const POD_GONE_WAIT: Duration = Duration::from_secs(45);

/// How the driver runs.
#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// How long a mover pod may take to start before the attempt fails.
    pub start_timeout: Duration,
    /// Who drives (`host/pid`, or `pod/NAME` in the cluster), recorded as
    /// the lease holder.
    pub holder: String,
}

/// What the driver tells its user interface.
#[derive(Debug, Clone)]
pub enum Update {
    AttemptStarted {
        number: u32,
        sender: NodePlacement,
    },
    Progress {
        attempt: u32,
        progress: Progress,
    },
    AttemptEnded(Box<Attempt>),
    Backoff {
        next: u32,
        delay: Duration,
    },
    /// A cutover step began or ended, in words.
    Cutover(String),
    /// The destination is waited for, emptied or replaced, in words.
    Destination(String),
}

/// How a run ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The operation reached a final phase, or was aborted.
    Finished(Box<VolumeMigration>),
    /// A cutover's transfer pass ended (the operation goes on): `failure`
    /// says why it failed, if it did.
    PassEnded {
        record: Box<VolumeMigration>,
        failure: Option<String>,
    },
}

/// Where an operation is.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// Claim, key Secrets and Service in place; record Running; adopt an
    /// attempt a previous driver left running.
    Setup,
    /// Record the attempt (and, when the sender reads a copy, what copy),
    /// create its receiver.
    StartAttempt {
        number: u32,
    },
    /// Until the attempt's snapshot is ready and its claim restored, or its
    /// clone made; then create the receiver.
    PrepareSource {
        number: u32,
    },
    /// Until the receiver listens; then create the sender.
    AwaitListener {
        number: u32,
    },
    /// Until both pods finish, one fails, or the app moves.
    Transfer {
        number: u32,
    },
    /// Record how the attempt went, delete its pods, choose what is next.
    EndAttempt {
        number: u32,
        end: AttemptEnd,
    },
    Backoff {
        next: u32,
        until: Instant,
    },
    /// Final record, clean-up, events.
    Finish {
        phase: Phase,
        message: Option<String>,
    },
    Done,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptEnd {
    pub phase: AttemptPhase,
    pub reason: Option<String>,
    pub retryable: Option<bool>,
    /// The failure was the destination's data or state.
    pub destination_fault: bool,
}

/// The running attempt.
pub(super) struct Live {
    pub(super) number: u32,
    pub(super) started: Instant,
    pub(super) receiver: String,
    pub(super) sender: String,
    pub(super) receiver_log: Follower,
    pub(super) sender_log: Option<Follower>,
    pub(super) sender_placement: NodePlacement,
    pub(super) one_side_finished_at: Option<Instant>,
    pub(super) placement_checked: Instant,
    /// Whether the pod watch has shown each pod yet: one just created may
    /// not be in the store for a moment, and is not "deleted" then.
    pub(super) receiver_seen: bool,
    /// When the sender was created (its own start timeout counts from it).
    pub(super) sender_created: Option<Instant>,
    pub(super) sender_seen: bool,
    /// The newest progress shown and recorded: what follows is never
    /// older (an adopted attempt's starts as the record has it).
    pub(super) shown: Option<Progress>,
    /// Over the tunnel, the relay once the sender listens.
    pub(super) relay: Option<super::network::relay::Relay>,
}

/// Drives one operation.
pub struct Driver {
    pub(super) sides: Sides,
    pub(super) plan: Plan,
    pub(super) store: RecordStore,
    /// Events on the destination claim, and on the source claim.
    pub(super) events: Recorder,
    pub(super) source_events: Recorder,
    pub(super) watch: PodWatch,
    pub(super) receiver_pods: Api<Pod>,
    pub(super) sender_pods: Api<Pod>,
    pub(super) updates: UnboundedSender<Update>,
    pub(super) options: DriverOptions,
    /// How senders reach the receiver; `None` until it is exposed.
    pub(super) route: Option<super::network::Route>,
    pub(super) live: Option<Live>,
    /// Failed attempts counted against the backoff limit (those from the
    /// record's `budgetFrom` on).
    pub(super) failures: u32,
    pub(super) record: VolumeMigration,
    pub(super) written: Instant,
    pub(super) outcome: Option<Outcome>,
    /// Whether this driver's lease is in the record.
    pub(super) holds_lease: bool,
}

impl Driver {
    /// A driver for the operation `record` describes.
    pub fn new(
        sides: Sides,
        plan: Plan,
        record: VolumeMigration,
        options: DriverOptions,
        updates: UnboundedSender<Update>,
    ) -> Driver {
        let dest_ns = plan.destination.namespace.clone();
        let src_ns = plan.spec.source.namespace.clone();
        let failures = figures::failures(&record.status.attempts, budget_from(&record));
        Driver {
            store: RecordStore::new(sides.destination.clone(), &dest_ns),
            events: Recorder::new(sides.destination.clone(), &plan.operation),
            source_events: Recorder::new(sides.source.clone(), &plan.operation),
            watch: PodWatch::start(&sides, &plan.operation, (&src_ns, &dest_ns)),
            receiver_pods: Api::namespaced(sides.destination.clone(), &dest_ns),
            sender_pods: Api::namespaced(sides.source.clone(), &src_ns),
            sides,
            plan,
            updates,
            options,
            route: None,
            live: None,
            failures,
            record,
            written: Instant::now(),
            outcome: None,
            holds_lease: false,
        }
    }

    /// The source's namespace and the destination's.
    pub(super) fn namespaces(&self) -> (&str, &str) {
        (
            self.plan.spec.source.namespace.as_str(),
            self.plan.destination.namespace.as_str(),
        )
    }

    /// Runs until the operation ends or is aborted.
    pub async fn run(mut self) -> Result<Outcome, DriverError> {
        let mut state = State::Setup;
        // Since when the API server has been failing, if it is.
        let mut failing: Option<Instant> = None;
        let mut finishing = false;
        loop {
            tracing::debug!(?state, "step");
            state = match self.step(state.clone()).await {
                Ok(State::Done) => break,
                Ok(next) => {
                    failing = None;
                    next
                }
                Err(DriverError::Aborted) => {
                    // abort removed the pods it saw; one created since goes now.
                    self.live = None;
                    let (op, reads) = (&self.plan.operation, self.plan.source_method.method);
                    objects::cleanup(&self.sides, op, self.namespaces(), reads).await?;
                    let record = self.store.get(&self.plan.operation).await?;
                    return Ok(Outcome::Finished(Box::new(record)));
                }
                // Every step can be taken again: ride out a restarting or
                // overloaded API server.
                Err(e)
                    if e.is_retryable()
                        && failing.get_or_insert_with(Instant::now).elapsed() < API_OUTAGE =>
                {
                    tracing::warn!("{e}; trying again");
                    tokio::time::sleep(TICK * 2).await;
                    state
                }
                // A failure no retry fixes (a refused pod, a conflicting
                // claim) ends the operation Failed, cleaned up and recorded.
                Err(e)
                    if !finishing
                        && !matches!(e, DriverError::TakenOver(_))
                        && !e.is_retryable() =>
                {
                    finishing = true;
                    self.live = None;
                    State::Finish {
                        phase: Phase::Failed,
                        message: Some(e.to_string()),
                    }
                }
                Err(e) => return Err(e),
            };
        }
        self.outcome
            .take()
            .ok_or_else(|| DriverError::Conflict("the driver stopped without an outcome".into()))
    }

    async fn step(&mut self, state: State) -> Result<State, DriverError> {
        match state {
            State::Setup => self.setup().await,
            State::StartAttempt { number } => self.start_attempt(number).await,
            State::PrepareSource { number } => self.prepare_source(number).await,
            State::AwaitListener { number } => self.await_listener(number).await,
            State::Transfer { number } => self.transfer(number).await,
            State::EndAttempt { number, end } => self.end_attempt(number, end).await,
            State::Backoff { next, until } => {
                self.heartbeat().await?;
                let now = Instant::now();
                if now >= until {
                    return Ok(State::StartAttempt { number: next });
                }
                tokio::time::sleep((until - now).min(RECORD_EVERY)).await;
                Ok(State::Backoff { next, until })
            }
            State::Finish { phase, message } => self.finish(phase, message).await,
            State::Done => Ok(State::Done),
        }
    }

    async fn setup(&mut self) -> Result<State, DriverError> {
        objects::ensure_destination(&self.sides.destination, &self.plan).await?;
        objects::ensure_keys(&self.sides, &self.plan).await?;
        objects::ensure_pointer(&self.sides, &self.plan).await?;
        self.route().await?;
        let first = self.record.status.attempts.is_empty();
        self.write(|vm| {
            vm.status.phase = Phase::Running;
            vm.status.message = None;
            vm.status.completion_time = None;
            vm.status.start_time.get_or_insert_with(Timestamp::now);
        })
        .await?;
        if first {
            let msg = format!(
                "copying {} to {}/{}",
                self.plan.spec.source, self.plan.destination.namespace, self.plan.destination.name
            );
            self.post(Severity::Normal, "MigrationStarted", &msg).await;
        }
        self.watch.ready().await;
        let reused = self.plan.destination.action == crate::plan::ClaimAction::Reuse;
        if first && reused && self.record.status.reusable.is_none() {
            self.inspect_destination().await?;
        }
        let adopt = self
            .record
            .status
            .attempts
            .last()
            .filter(|a| !a.phase.is_over())
            .map(|a| a.number);
        self.sweep_pods_except(adopt).await?;
        self.resume_point().await
    }

    /// Deletes (and waits out) the pods of every attempt but `keep`: left
    /// by a driver interrupted while it ended an attempt, they would be a
    /// second writer of the destination.
    async fn sweep_pods_except(&self, keep: Option<u32>) -> Result<(), DriverError> {
        let selector = names::operation_selector(&self.plan.operation);
        for api in [&self.receiver_pods, &self.sender_pods] {
            let pods = api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| DriverError::kube("list the operation's pods", e))?;
            let stale: Vec<String> = pods
                .items
                .iter()
                .filter(|p| {
                    let attempt = p
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(names::ATTEMPT_KEY));
                    keep.is_none_or(|n| attempt != Some(&n.to_string()))
                })
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            let (mut quick, mut slow) = (Vec::new(), Vec::new());
            for name in stale {
                match self.gone_wait(api, &name).await?.is_zero() {
                    true => quick.push(name),
                    false => slow.push(name),
                }
            }
            objects::delete_pods(api, &quick, Duration::ZERO).await?;
            objects::delete_pods(api, &slow, POD_GONE_WAIT).await?;
        }
        if self.plan.source_method.method.reads_copy() {
            let ns = &self.plan.spec.source.namespace;
            let client = &self.sides.source;
            objects::remove_source_copies(client, &self.plan.operation, ns, keep).await?;
        }
        Ok(())
    }

    /// Where a run starts: the last attempt's outcome decides, or its pods
    /// are adopted, or a new attempt starts.
    async fn resume_point(&mut self) -> Result<State, DriverError> {
        // A cutover's new pass, or a sync round: the attempts so far
        // belong to earlier ones.
        let first = pass_first(&self.record).or_else(|| {
            let round = self.record.status.open_round();
            round.map(|r| r.first_attempt)
        });
        let Some(last) = self.record.status.attempts.last().cloned() else {
            return Ok(State::StartAttempt {
                number: first.unwrap_or(1),
            });
        };
        if let Some(first) = first.filter(|f| last.number < *f) {
            return Ok(State::StartAttempt { number: first });
        }
        if last.phase.is_over() {
            return Ok(self.decided_by(&last).unwrap_or(State::StartAttempt {
                number: last.number + 1,
            }));
        }
        // A new destination was asked for: the attempt left running into
        // the old one ends, and the next makes the new one.
        if self.record.status.destination_change.is_some() {
            return Ok(State::EndAttempt {
                number: last.number,
                end: AttemptEnd {
                    phase: AttemptPhase::Replaced,
                    reason: Some("a new destination was asked for".into()),
                    retryable: Some(true),
                    destination_fault: false,
                },
            });
        }
        // A previous driver left this attempt: adopt its pods.
        let receiver = self.watch.get(Side::Destination, &last.receiver.name);
        let sender = self.watch.get(Side::Source, &last.sender.name);
        // Its copy was being made: the receiver comes after it.
        let preparing = last.phase == AttemptPhase::Starting && last.source.is_some();
        if receiver.is_none() && preparing {
            return Ok(State::PrepareSource {
                number: last.number,
            });
        }
        if receiver.is_none() {
            return Ok(State::EndAttempt {
                number: last.number,
                end: AttemptEnd {
                    phase: AttemptPhase::Failed,
                    reason: Some("its pods were gone when the driver came back".into()),
                    retryable: Some(true),
                    destination_fault: false,
                },
            });
        }
        let mut live = self.live_attempt(last.number, self.recorded_sender_placement());
        // Progress goes on from what the record shows of this attempt.
        live.shown = self
            .record
            .status
            .progress
            .clone()
            .filter(|p| p.updated.is_some() && p.updated >= last.start_time);
        self.live = Some(live);
        if sender.is_none() {
            return Ok(State::AwaitListener {
                number: last.number,
            });
        }
        self.follow_sender(last.sender.name.clone());
        Ok(State::Transfer {
            number: last.number,
        })
    }

    /// What an ended attempt already decided, when a driver stopped before
    /// acting on it: the operation succeeded, or failed for good.
    fn decided_by(&self, last: &Attempt) -> Option<State> {
        let reason = last.reason.clone().unwrap_or_default();
        match last.phase {
            AttemptPhase::Succeeded => Some(State::Finish {
                phase: Phase::Succeeded,
                message: None,
            }),
            // `resume` granted a fresh budget after it.
            _ if last.number < budget_from(&self.record) => None,
            // A wipe that could not remove something: the next attempt
            // replaces the destination.
            AttemptPhase::Failed
                if last.wipe && last.destination_fault && reason.contains("cannot wipe") =>
            {
                None
            }
            AttemptPhase::Failed if last.retryable == Some(false) => Some(State::Finish {
                phase: Phase::Failed,
                message: Some(format!(
                    "attempt {} failed and a retry cannot fix it: {reason}",
                    last.number
                )),
            }),
            _ if self.failures > self.plan.spec.retry.backoff_limit => Some(State::Finish {
                phase: Phase::Failed,
                message: Some(format!(
                    "gave up after {} failed attempts (--backoff-limit {}); the last: {reason}",
                    self.failures, self.plan.spec.retry.backoff_limit
                )),
            }),
            _ => None,
        }
    }

    pub(super) fn live_attempt(&self, number: u32, sender_placement: NodePlacement) -> Live {
        let receiver = names::pod_name(&self.plan.operation, Component::Receiver, number);
        let follower = Follower::start(
            self.receiver_pods.clone(),
            receiver.clone(),
            self.watch.wake.clone(),
        );
        Live {
            number,
            started: Instant::now(),
            sender: names::pod_name(&self.plan.operation, Component::Sender, number),
            receiver,
            receiver_log: follower,
            sender_log: None,
            sender_placement,
            one_side_finished_at: None,
            placement_checked: Instant::now(),
            receiver_seen: false,
            sender_created: None,
            sender_seen: false,
            shown: None,
            relay: None,
        }
    }

    /// Where the record says the running attempt's sender goes (the plan's
    /// placement, for a record without one).
    pub(super) fn recorded_sender_placement(&self) -> NodePlacement {
        let recorded = self.record.status.placement.as_ref();
        recorded.map_or_else(|| self.plan.placement.sender.clone(), |p| p.sender.clone())
    }

    pub(super) fn follow_sender(&mut self, name: String) {
        let follower = Follower::start(self.sender_pods.clone(), name, self.watch.wake.clone());
        if let Some(live) = &mut self.live {
            live.sender_log = Some(follower);
        }
    }
}

/// The first attempt counted against the backoff limit: each cutover
/// pass has a budget of its own.
pub(super) fn budget_from(record: &VolumeMigration) -> u32 {
    let first = record.status.budget_from.unwrap_or(1);
    first.max(pass_first(record).unwrap_or(1))
}

/// The first attempt of the cutover pass in flight, if one is.
pub(super) fn pass_first(record: &VolumeMigration) -> Option<u32> {
    let pass = record.status.cutover.as_ref()?.pass?;
    Some(pass.first_attempt)
}
