//! The driver's states and steps.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use kube::Client;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::follow::Follower;
use super::judge::{judge, AttemptView, PodView, Verdict};
use super::logs::LogDigest;
use super::objects;
use super::watch::PodWatch;
use super::DriverError;
use crate::events::{Recorder, Severity};
use crate::names::{self, Component};
use crate::plan::{placement, NodePlacement, Plan};
use crate::record::store::{RecordStore, StoreError};
use crate::record::{
    Attempt, AttemptPhase, Driver as Lease, Phase, PodRecord, Progress, Summary, VolumeMigration,
};
use crate::resources;

/// How often the record gets the latest progress and the driver's
/// heartbeat while an attempt runs.
const RECORD_EVERY: Duration = Duration::from_secs(5);
/// How often the app's pods are looked at again, to follow the app.
const PLACEMENT_EVERY: Duration = Duration::from_secs(5);
/// The longest wait between two looks at the pods.
const TICK: Duration = Duration::from_secs(1);
/// The longest backoff between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How long ended pods get to go (the receiver writes its checkpoint on
/// SIGTERM within the default 30 s grace period).
const POD_GONE_WAIT: Duration = Duration::from_secs(45);

/// How the driver runs.
#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// Return once the first attempt's sender is created.
    pub detach: bool,
    /// How long a mover pod may take to start before the attempt fails.
    pub start_timeout: Duration,
    /// Who drives (`host/pid`), recorded as the lease holder.
    pub holder: String,
    /// Failed attempts so far do not count against the backoff limit (a
    /// Failed or Aborted operation run again).
    pub fresh_budget: bool,
}

/// What the driver tells its user interface.
#[derive(Debug, Clone)]
pub enum Update {
    AttemptStarted { number: u32, sender: NodePlacement },
    Progress { attempt: u32, progress: Progress },
    AttemptEnded(Box<Attempt>),
    Backoff { next: u32, delay: Duration },
}

/// How a run ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The operation reached a final phase, or was aborted.
    Finished(Box<VolumeMigration>),
    /// `--detach`: attempts go on in the cluster without a driver.
    Detached(Box<VolumeMigration>),
}

/// Where an operation is.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// Claim, key Secrets and Service in place; record Running; adopt an
    /// attempt a previous driver left running.
    Setup,
    /// Record the attempt, create its receiver.
    StartAttempt {
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
}

/// The running attempt.
struct Live {
    number: u32,
    started: Instant,
    receiver: String,
    sender: String,
    receiver_log: Follower,
    sender_log: Option<Follower>,
    sender_placement: NodePlacement,
    one_side_finished_at: Option<Instant>,
    placement_checked: Instant,
    /// Whether the pod watch has shown each pod yet: one just created may
    /// not be in the store for a moment, and is not "deleted" then.
    receiver_seen: bool,
    sender_seen: bool,
}

/// Drives one operation.
pub struct Driver {
    client: Client,
    plan: Plan,
    store: RecordStore,
    events: Recorder,
    watch: PodWatch,
    receiver_pods: Api<Pod>,
    sender_pods: Api<Pod>,
    updates: UnboundedSender<Update>,
    options: DriverOptions,
    receiver_address: String,
    live: Option<Live>,
    /// Failed attempts counted against the backoff limit.
    failures: u32,
    record: VolumeMigration,
    written: Instant,
    outcome: Option<Outcome>,
}

impl Driver {
    /// A driver for the operation `record` describes.
    pub fn new(
        client: Client,
        plan: Plan,
        record: VolumeMigration,
        options: DriverOptions,
        updates: UnboundedSender<Update>,
    ) -> Driver {
        let dest_ns = plan.destination.namespace.clone();
        let src_ns = plan.spec.source.namespace.clone();
        let failures = if options.fresh_budget {
            0
        } else {
            record
                .status
                .attempts
                .iter()
                .filter(|a| a.phase == AttemptPhase::Failed)
                .count() as u32
        };
        Driver {
            store: RecordStore::new(client.clone(), &dest_ns),
            events: Recorder::new(client.clone(), &plan.operation),
            watch: PodWatch::start(&client, &plan.operation, &[&dest_ns, &src_ns]),
            receiver_pods: Api::namespaced(client.clone(), &dest_ns),
            sender_pods: Api::namespaced(client.clone(), &src_ns),
            client,
            plan,
            updates,
            options,
            receiver_address: String::new(),
            live: None,
            failures,
            record,
            written: Instant::now(),
            outcome: None,
        }
    }

    /// Runs until the operation ends, is aborted, or detaches.
    pub async fn run(mut self) -> Result<Outcome, DriverError> {
        let mut state = State::Setup;
        loop {
            tracing::debug!(?state, "step");
            state = match self.step(state).await {
                Ok(State::Done) => break,
                Ok(next) => next,
                Err(DriverError::Aborted) => {
                    let record = self.store.get(&self.plan.operation).await?;
                    self.live = None;
                    return Ok(Outcome::Finished(Box::new(record)));
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
        objects::ensure_destination(&self.client, &self.plan).await?;
        objects::ensure_keys(&self.client, &self.plan).await?;
        self.receiver_address = objects::ensure_service(&self.client, &self.plan).await?;
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
        let Some(last) = self.record.status.attempts.last().cloned() else {
            return Ok(State::StartAttempt { number: 1 });
        };
        if last.phase.is_over() {
            return Ok(State::StartAttempt {
                number: last.number + 1,
            });
        }
        // A previous driver left this attempt: adopt its pods.
        let receiver = self
            .watch
            .get(&self.plan.destination.namespace, &last.receiver.name);
        let sender = self
            .watch
            .get(&self.plan.spec.source.namespace, &last.sender.name);
        let Some(_) = receiver else {
            return Ok(State::EndAttempt {
                number: last.number,
                end: AttemptEnd {
                    phase: AttemptPhase::Failed,
                    reason: Some("its pods were gone when the driver came back".into()),
                    retryable: Some(true),
                },
            });
        };
        let sender_placement = self
            .record
            .status
            .placement
            .as_ref()
            .map_or_else(|| self.plan.placement.sender.clone(), |p| p.sender.clone());
        self.live = Some(self.live_attempt(last.number, sender_placement));
        if sender.is_some() {
            let name = last.sender.name.clone();
            self.follow_sender(name);
            Ok(State::Transfer {
                number: last.number,
            })
        } else {
            Ok(State::AwaitListener {
                number: last.number,
            })
        }
    }

    fn live_attempt(&self, number: u32, sender_placement: NodePlacement) -> Live {
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
            sender_seen: false,
        }
    }

    fn follow_sender(&mut self, name: String) {
        let follower = Follower::start(self.sender_pods.clone(), name, self.watch.wake.clone());
        if let Some(live) = &mut self.live {
            live.sender_log = Some(follower);
        }
    }

    async fn start_attempt(&mut self, number: u32) -> Result<State, DriverError> {
        let sender_placement = self.current_sender_placement().await?;
        let live = self.live_attempt(number, sender_placement.clone());
        let attempt = Attempt {
            number,
            phase: AttemptPhase::Starting,
            receiver: PodRecord {
                name: live.receiver.clone(),
                ..PodRecord::default()
            },
            sender: PodRecord {
                name: live.sender.clone(),
                ..PodRecord::default()
            },
            start_time: Some(Timestamp::now()),
            ..Attempt::default()
        };
        let plan_placement = self.plan.placement.clone();
        self.write(|vm| {
            vm.status.attempts.retain(|a| a.number != number);
            vm.status.attempts.push(attempt.clone());
            let mut placement = plan_placement.clone();
            placement.sender = sender_placement.clone();
            vm.status.placement = Some(placement);
        })
        .await?;
        let pod = resources::receiver_pod(&self.plan, number);
        objects::create_or_get(&self.receiver_pods, &pod).await?;
        self.live = Some(live);
        let _ = self.updates.send(Update::AttemptStarted {
            number,
            sender: sender_placement,
        });
        Ok(State::AwaitListener { number })
    }

    /// Where the sender goes now: next to the app's pod, if it has one.
    async fn current_sender_placement(&self) -> Result<NodePlacement, DriverError> {
        let source = &self.plan.spec.source;
        let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &source.namespace);
        let claim = claims
            .get(&source.name)
            .await
            .map_err(|e| DriverError::kube(format!("get claim {}", source.name), e))?;
        let pods: Vec<Pod> = self
            .sender_pods
            .list(&ListParams::default())
            .await
            .map_err(|e| DriverError::kube("list pods", e))?
            .items
            .into_iter()
            .filter(|p| !objects::is_ours(p))
            .collect();
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        let nodes = nodes
            .list(&ListParams::default())
            .await
            .map_err(|e| DriverError::kube("list nodes", e))?
            .items;
        let volumes: Api<k8s_openapi::api::core::v1::PersistentVolume> =
            Api::all(self.client.clone());
        let volume = match &self.plan.source.volume {
            v if v.is_empty() => None,
            v => volumes
                .get_opt(v)
                .await
                .map_err(|e| DriverError::kube(format!("get volume {v}"), e))?,
        };
        Ok(placement::sender(&claim, volume.as_ref(), &pods, &nodes))
    }

    fn view(&self) -> Option<(PodView, Option<PodView>, LogDigest, Option<LogDigest>)> {
        let live = self.live.as_ref()?;
        let r = self
            .watch
            .get(&self.plan.destination.namespace, &live.receiver);
        let receiver = PodView::new("receiver", &live.receiver, r.as_deref());
        let sender = live.sender_log.as_ref().map(|_| {
            let s = self
                .watch
                .get(&self.plan.spec.source.namespace, &live.sender);
            PodView::new("sender", &live.sender, s.as_deref())
        });
        let rlog = live.receiver_log.digest();
        let slog = live.sender_log.as_ref().map(Follower::digest);
        Some((receiver, sender, rlog, slog))
    }

    fn verdict(&mut self) -> Verdict {
        let Some((mut receiver, mut sender, rlog, slog)) = self.view() else {
            return Verdict::Wait;
        };
        let Some(live) = self.live.as_mut() else {
            return Verdict::Wait;
        };
        live.receiver_seen |= receiver.exists;
        receiver.exists |= !live.receiver_seen;
        if let Some(sender) = &mut sender {
            live.sender_seen |= sender.exists;
            sender.exists |= !live.sender_seen;
        }
        let finished = [Some(&receiver), sender.as_ref()]
            .into_iter()
            .flatten()
            .filter(|p| p.exit_code.is_some())
            .count();
        if finished > 0 {
            live.one_side_finished_at.get_or_insert_with(Instant::now);
        }
        let view = AttemptView {
            receiver,
            receiver_result: rlog.result.as_ref(),
            sender,
            sender_result: slog.as_ref().and_then(|l| l.result.as_ref()),
            age: live.started.elapsed(),
            one_side_finished_for: live
                .one_side_finished_at
                .map_or(Duration::ZERO, |t| t.elapsed()),
            start_timeout: self.options.start_timeout,
        };
        judge(&view)
    }

    async fn await_listener(&mut self, number: u32) -> Result<State, DriverError> {
        if let Some(end) = self.concluded() {
            return Ok(State::EndAttempt { number, end });
        }
        let listening = self
            .live
            .as_ref()
            .is_some_and(|l| l.receiver_log.digest().listening);
        if !listening {
            self.idle().await?;
            return Ok(State::AwaitListener { number });
        }
        let placement = self
            .live
            .as_ref()
            .map(|l| l.sender_placement.clone())
            .unwrap_or_else(|| self.plan.placement.sender.clone());
        let pod = resources::sender_pod(&self.plan, number, &placement, &self.receiver_address);
        objects::create_or_get(&self.sender_pods, &pod).await?;
        let name = names::pod_name(&self.plan.operation, Component::Sender, number);
        self.follow_sender(name);
        self.write(|vm| {
            if let Some(a) = vm.status.attempts.iter_mut().find(|a| a.number == number) {
                a.phase = AttemptPhase::Running;
            }
        })
        .await?;
        if self.options.detach {
            self.release().await?;
            return Ok(self.detach());
        }
        Ok(State::Transfer { number })
    }

    fn detach(&mut self) -> State {
        self.outcome = Some(Outcome::Detached(Box::new(self.record.clone())));
        State::Done
    }

    /// The verdict as an attempt end, if the attempt is over.
    fn concluded(&mut self) -> Option<AttemptEnd> {
        match self.verdict() {
            Verdict::Wait => None,
            Verdict::Succeeded => Some(AttemptEnd {
                phase: AttemptPhase::Succeeded,
                reason: None,
                retryable: None,
            }),
            Verdict::Failed { reason, retryable } => Some(AttemptEnd {
                phase: AttemptPhase::Failed,
                reason: Some(reason),
                retryable: Some(retryable),
            }),
        }
    }

    async fn transfer(&mut self, number: u32) -> Result<State, DriverError> {
        if let Some(end) = self.concluded() {
            return Ok(State::EndAttempt { number, end });
        }
        if let Some(end) = self.app_moved().await? {
            return Ok(State::EndAttempt { number, end });
        }
        self.idle().await?;
        Ok(State::Transfer { number })
    }

    /// Ends the attempt when the app's pod now runs on another node than
    /// the sender was placed on (a ReadWriteOnce source follows its app).
    async fn app_moved(&mut self) -> Result<Option<AttemptEnd>, DriverError> {
        let due = self
            .live
            .as_ref()
            .is_some_and(|l| l.placement_checked.elapsed() >= PLACEMENT_EVERY);
        if !due {
            return Ok(None);
        }
        let now = self.current_sender_placement().await?;
        let Some(live) = self.live.as_mut() else {
            return Ok(None);
        };
        live.placement_checked = Instant::now();
        let moved = now.node.is_some() && now.node != live.sender_placement.node;
        if !moved {
            return Ok(None);
        }
        let reason = format!(
            "the app moved to node {}: the sender follows it ({})",
            now.node.as_deref().unwrap_or("?"),
            now.reason
        );
        Ok(Some(AttemptEnd {
            phase: AttemptPhase::Replaced,
            reason: Some(reason),
            retryable: Some(true),
        }))
    }

    /// Waits for news (a pod change, a log line) or a tick, keeping the
    /// record's progress and heartbeat fresh.
    async fn idle(&mut self) -> Result<(), DriverError> {
        self.report_progress();
        if self.written.elapsed() >= RECORD_EVERY {
            self.heartbeat().await?;
        }
        let wake = self.watch.wake.clone();
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(TICK) => {}
        }
        Ok(())
    }

    fn progress(&self) -> Option<Progress> {
        let live = self.live.as_ref()?;
        let digest = live.receiver_log.digest();
        digest.progress.as_ref().map(progress_of)
    }

    fn report_progress(&self) {
        if let (Some(progress), Some(live)) = (self.progress(), &self.live) {
            let _ = self.updates.send(Update::Progress {
                attempt: live.number,
                progress,
            });
        }
    }

    /// Writes the latest progress and the driver's heartbeat.
    async fn heartbeat(&mut self) -> Result<(), DriverError> {
        let progress = self.progress();
        let number = self.live.as_ref().map(|l| l.number);
        self.write(|vm| {
            if let Some(p) = &progress {
                vm.status.progress = Some(p.clone());
                if let Some(a) = vm
                    .status
                    .attempts
                    .iter_mut()
                    .find(|a| Some(a.number) == number)
                {
                    a.bytes_done = p.bytes_done;
                    a.bytes_total = p.bytes_total;
                    a.rate = p.rate;
                }
            }
        })
        .await
    }

    async fn end_attempt(&mut self, number: u32, end: AttemptEnd) -> Result<State, DriverError> {
        let (receiver, sender, rlog, slog) = self.final_view().await;
        let started = self.live.as_ref().map(|l| l.started);
        let elapsed = started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let progress = rlog.progress.as_ref().map(progress_of);
        let resumed = rlog.first_progress.as_ref().map_or(0, |p| p.bytes_resumed);
        let mut tail: Vec<String> = rlog
            .tail()
            .into_iter()
            .map(|l| format!("receiver: {l}"))
            .collect();
        if let Some(s) = &slog {
            tail.extend(s.tail().into_iter().map(|l| format!("sender: {l}")));
        }
        let summary = rlog
            .result
            .as_ref()
            .and_then(|r| r.summary.as_ref())
            .map(summary_of);
        let end_for_record = end.clone();
        let mut ended: Option<Attempt> = None;
        self.write(|vm| {
            vm.status.elapsed_seconds += elapsed;
            if let Some(p) = &progress {
                vm.status.progress = Some(p.clone());
            }
            if let Some(a) = vm.status.attempts.iter_mut().find(|a| a.number == number) {
                a.phase = end_for_record.phase;
                a.reason = end_for_record.reason.clone();
                a.retryable = end_for_record.retryable;
                a.end_time = Some(Timestamp::now());
                a.elapsed_seconds = elapsed;
                a.receiver = pod_record(&receiver);
                if let Some(s) = &sender {
                    a.sender = pod_record(s);
                }
                a.bytes_resumed = resumed;
                if let Some(p) = &progress {
                    a.bytes_done = p.bytes_done;
                    a.bytes_total = p.bytes_total;
                    a.rate = p.rate;
                }
                a.log_tail = tail.clone();
                ended = Some(a.clone());
            }
            if end_for_record.phase == AttemptPhase::Succeeded {
                vm.status.summary = summary.clone();
            }
        })
        .await?;
        if let Some(a) = ended {
            let _ = self.updates.send(Update::AttemptEnded(Box::new(a)));
        }
        // The pods go; their logs' tails stay in the record.
        self.live = None;
        let receiver_name = names::pod_name(&self.plan.operation, Component::Receiver, number);
        let sender_name = names::pod_name(&self.plan.operation, Component::Sender, number);
        objects::delete_pods(&self.sender_pods, &[sender_name], POD_GONE_WAIT).await?;
        objects::delete_pods(&self.receiver_pods, &[receiver_name], POD_GONE_WAIT).await?;
        Ok(self.after(number, end).await)
    }

    async fn after(&mut self, number: u32, end: AttemptEnd) -> State {
        let reason = end.reason.clone().unwrap_or_default();
        match end.phase {
            AttemptPhase::Succeeded => State::Finish {
                phase: Phase::Succeeded,
                message: None,
            },
            AttemptPhase::Replaced => State::StartAttempt { number: number + 1 },
            _ if end.retryable == Some(false) => State::Finish {
                phase: Phase::Failed,
                message: Some(format!(
                    "attempt {number} failed and a retry cannot fix it: {reason}"
                )),
            },
            _ => {
                self.failures += 1;
                let limit = self.plan.spec.retry.backoff_limit;
                let msg = format!("attempt {number} failed: {reason}");
                self.post(Severity::Warning, "AttemptFailed", &msg).await;
                if self.failures > limit {
                    return State::Finish {
                        phase: Phase::Failed,
                        message: Some(format!(
                            "gave up after {} failed attempts (--backoff-limit {limit}); the last: {reason}",
                            self.failures
                        )),
                    };
                }
                let delay = backoff(self.plan.spec.retry.backoff_seconds, self.failures);
                let _ = self.updates.send(Update::Backoff {
                    next: number + 1,
                    delay,
                });
                State::Backoff {
                    next: number + 1,
                    until: Instant::now() + delay,
                }
            }
        }
    }

    /// The pods' last states and their whole logs (a follower may have
    /// missed the end).
    async fn final_view(&self) -> (PodView, Option<PodView>, LogDigest, Option<LogDigest>) {
        let (receiver, sender, mut rlog, mut slog) = self.view().unwrap_or_default();
        if rlog.result.is_none() {
            if let Some(d) = full_log(&self.receiver_pods, &receiver.name).await {
                rlog = d;
            }
        }
        if let (Some(s), true) = (&sender, slog.as_ref().is_none_or(|l| l.result.is_none())) {
            if let Some(d) = full_log(&self.sender_pods, &s.name).await {
                slog = Some(d);
            }
        }
        (receiver, sender, rlog, slog)
    }

    async fn finish(
        &mut self,
        phase: Phase,
        message: Option<String>,
    ) -> Result<State, DriverError> {
        let op = self.plan.operation.clone();
        let namespaces = [
            self.plan.destination.namespace.as_str(),
            self.plan.spec.source.namespace.as_str(),
        ];
        objects::cleanup(&self.client, &op, &namespaces).await?;
        let msg = message.clone();
        self.write(|vm| {
            vm.status.phase = phase;
            vm.status.message = msg.clone();
            vm.status.completion_time = Some(Timestamp::now());
        })
        .await?;
        self.release().await?;
        let (severity, reason, text) = match phase {
            Phase::Succeeded => (
                Severity::Normal,
                "MigrationSucceeded",
                format!(
                    "copied to {}/{}",
                    self.plan.destination.namespace, self.plan.destination.name
                ),
            ),
            _ => (
                Severity::Warning,
                "MigrationFailed",
                message.unwrap_or_default(),
            ),
        };
        self.post(severity, reason, &text).await;
        self.outcome = Some(Outcome::Finished(Box::new(self.record.clone())));
        Ok(State::Done)
    }

    /// Changes the record (re-read on conflict), with the heartbeat; stops
    /// with [`DriverError::Aborted`] once someone has aborted the operation.
    async fn write(
        &mut self,
        mut change: impl FnMut(&mut VolumeMigration),
    ) -> Result<(), DriverError> {
        let lease = Lease {
            holder: self.options.holder.clone(),
            heartbeat: Timestamp::now(),
        };
        let result = self
            .store
            .update(&self.plan.operation, |vm| {
                if vm.status.phase == Phase::Aborted {
                    return Err(StoreError::Changed("the operation was aborted".into()));
                }
                change(vm);
                vm.status.driver = Some(lease.clone());
                Ok(())
            })
            .await;
        match result {
            Ok(vm) => {
                self.record = vm;
                self.written = Instant::now();
                Ok(())
            }
            Err(StoreError::Changed(_)) => Err(DriverError::Aborted),
            Err(e) => Err(e.into()),
        }
    }

    /// Gives up the lease: another client may drive now.
    async fn release(&mut self) -> Result<(), DriverError> {
        let vm = self
            .store
            .update(&self.plan.operation, |vm| {
                vm.status.driver = None;
                Ok(())
            })
            .await?;
        self.record = vm;
        Ok(())
    }

    async fn post(&self, severity: Severity, reason: &str, message: &str) {
        let destination = crate::spec::ClaimRef {
            namespace: self.plan.destination.namespace.clone(),
            name: self.plan.destination.name.clone(),
        };
        self.events
            .post(
                &[&self.plan.spec.source, &destination],
                severity,
                reason,
                message,
            )
            .await;
    }
}

/// Releases `holder`'s lease on `op` (after Ctrl-C), if it still holds it.
pub async fn release_lease(store: &RecordStore, op: &str, holder: &str) -> Result<(), StoreError> {
    store
        .update(op, |vm| {
            if vm
                .status
                .driver
                .as_ref()
                .is_some_and(|d| d.holder == holder)
            {
                vm.status.driver = None;
            }
            Ok(())
        })
        .await
        .map(|_| ())
}

async fn full_log(api: &Api<Pod>, name: &str) -> Option<LogDigest> {
    let params = LogParams {
        container: Some("mover".into()),
        ..LogParams::default()
    };
    api.logs(name, &params)
        .await
        .ok()
        .map(|t| LogDigest::from_text(&t))
}

/// The delay before the attempt after the `failures`-th failure: doubling
/// from `first_seconds`, at most five minutes.
pub fn backoff(first_seconds: u32, failures: u32) -> Duration {
    let factor = 1u64 << failures.saturating_sub(1).min(16);
    Duration::from_secs(u64::from(first_seconds).saturating_mul(factor)).min(MAX_BACKOFF)
}

fn progress_of(p: &mover::stats::Progress) -> Progress {
    Progress {
        bytes_done: p.bytes_done,
        bytes_total: p.bytes_total,
        files_done: p.files_done,
        files_total: p.files_total,
        listing_done: p.listing_done,
        rate: p.rate,
        eta_seconds: p.eta_s,
        current: p.current.clone(),
        updated: Some(Timestamp::now()),
    }
}

fn summary_of(s: &mover::stats::Summary) -> Summary {
    Summary {
        entries: s.entries_total,
        files: s.files_total,
        bytes: s.bytes_total,
        files_transferred: s.files_transferred,
        files_up_to_date: s.files_up_to_date,
        bytes_literal: s.bytes_literal,
        bytes_matched: s.bytes_matched,
        bytes_on_wire: s.bytes_on_wire,
        deleted: s.deleted,
        verified_entries: s.verify.as_ref().map(|v| v.entries),
        manifest: s.verify.as_ref().map(|v| v.manifest.clone()),
    }
}

fn pod_record(view: &PodView) -> PodRecord {
    PodRecord {
        name: view.name.clone(),
        node: view.node.clone(),
        phase: Some(if view.exists {
            view.phase.clone().unwrap_or_else(|| "Pending".into())
        } else {
            "Deleted".into()
        }),
        exit_code: view.exit_code,
        reason: view.reason.clone(),
    }
}
