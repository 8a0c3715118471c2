//! The running attempt: its pods, their verdict, the app's moves, progress.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams};
use tokio::time::Instant;

use super::destination::Prepared;
use super::follow::Follower;
use super::judge::{judge, AttemptView, PodView, Verdict};
use super::logs::LogDigest;
use super::network::Route;
use super::objects;
use super::run::{AttemptEnd, Driver, Live, State, Update, PLACEMENT_EVERY, RECORD_EVERY, TICK};
use super::source_copy;
use super::DriverError;
use crate::cluster::Side;
use crate::names::{self, Component};
use crate::plan::{placement, NodePlacement};
use crate::record::{figures, Attempt, AttemptPhase, PodRecord, Progress};
use crate::resources;

impl Driver {
    pub(super) async fn start_attempt(&mut self, number: u32) -> Result<State, DriverError> {
        let (wipe, destination_note) = match self.prepare_destination(number).await? {
            Prepared::Go { wipe, note } => (wipe, note),
            Prepared::Wait(next) => {
                self.heartbeat().await?;
                return Ok(next);
            }
        };
        // Exposed anew if `auto` gave up the path the last attempt took.
        self.route().await?;
        let sender_placement = self.current_sender_placement().await?;
        // The receiver goes where the plan said; why is told anew, as the
        // destination is now (an earlier attempt may have bound it to a node).
        self.plan.placement.receiver.reason = self.current_receiver_reason().await?;
        let receiver = names::pod_name(&self.plan.operation, Component::Receiver, number);
        let sender = names::pod_name(&self.plan.operation, Component::Sender, number);
        let source = source_copy::planned_copy(&self.plan, number);
        let reads_copy = source.is_some();
        let attempt = Attempt {
            number,
            phase: AttemptPhase::Starting,
            receiver: PodRecord {
                name: receiver,
                ..PodRecord::default()
            },
            sender: PodRecord {
                name: sender,
                ..PodRecord::default()
            },
            start_time: Some(Timestamp::now()),
            source,
            wipe,
            destination_note,
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
        if reads_copy {
            return Ok(State::PrepareSource { number });
        }
        self.launch_receiver(number).await
    }

    /// Routes the Service to attempt `number` and creates its receiver.
    pub(super) async fn launch_receiver(&mut self, number: u32) -> Result<State, DriverError> {
        let sender_placement = self.recorded_sender_placement();
        let live = self.live_attempt(number, sender_placement.clone());
        objects::route_to_attempt(&self.sides.destination, &self.plan, number).await?;
        let mut pod = resources::receiver_pod(&self.plan, number);
        let attempt = self
            .record
            .status
            .attempts
            .iter()
            .find(|a| a.number == number);
        let wipe = attempt.is_some_and(|a| a.wipe);
        if wipe && self.record.status.block_checkpoint.is_some() {
            // A Block copy starts over by forgetting its prefix: every
            // block is compared again.
            self.write(|vm| vm.status.block_checkpoint = None).await?;
        }
        if wipe {
            resources::wipe_first(&mut pod);
        } else if let Some(seed) = self.record.status.block_checkpoint.as_ref() {
            // A Block copy's last verified prefix, into the same claim only.
            if seed.claim == self.plan.destination.name {
                resources::seed_checkpoint(&mut pod, &seed.data);
            }
        }
        objects::create_or_get(&self.receiver_pods, &pod).await?;
        self.live = Some(live);
        let _ = self.updates.send(Update::AttemptStarted {
            number,
            sender: sender_placement,
        });
        Ok(State::AwaitListener { number })
    }

    /// Where the sender goes now: next to the app's pod, if it has one.
    pub(super) async fn current_sender_placement(&self) -> Result<NodePlacement, DriverError> {
        // A copy of the source has no app to follow.
        if self.plan.source_method.method.reads_copy() {
            return Ok(placement::copy_reader());
        }
        let source = &self.plan.spec.source;
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.sides.source.clone(), &source.namespace);
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
        let nodes = self.nodes(Side::Source).await?;
        let volumes: Api<PersistentVolume> = Api::all(self.sides.source.clone());
        let volume = match &self.plan.source.volume {
            v if v.is_empty() => None,
            v => volumes
                .get_opt(v)
                .await
                .map_err(|e| DriverError::kube(format!("get volume {v}"), e))?,
        };
        Ok(placement::sender(&claim, volume.as_ref(), &pods, &nodes))
    }

    /// Why the receiver goes where it goes, from the destination claim and
    /// volume as they are now.
    async fn current_receiver_reason(&self) -> Result<String, DriverError> {
        let dst = &self.plan.destination;
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.sides.destination.clone(), &dst.namespace);
        let claim = claims
            .get_opt(&dst.name)
            .await
            .map_err(|e| DriverError::kube(format!("get claim {}", dst.name), e))?;
        let bound = claim
            .as_ref()
            .and_then(|c| c.spec.as_ref()?.volume_name.clone())
            .filter(|v| !v.is_empty());
        let volumes: Api<PersistentVolume> = Api::all(self.sides.destination.clone());
        let volume = match bound {
            Some(v) => volumes
                .get_opt(&v)
                .await
                .map_err(|e| DriverError::kube(format!("get volume {v}"), e))?,
            None => None,
        };
        let nodes = self.nodes(Side::Destination).await?;
        let spec = &self.plan.spec.destination;
        let placement = placement::receiver(spec, claim.as_ref(), volume.as_ref(), &nodes);
        Ok(placement.reason)
    }

    /// The nodes of `side`'s cluster.
    pub(super) async fn nodes(&self, side: Side) -> Result<Vec<Node>, DriverError> {
        super::gather::nodes(self.sides.client(side)).await
    }

    pub(super) fn view(&self) -> Option<(PodView, Option<PodView>, LogDigest, Option<LogDigest>)> {
        let live = self.live.as_ref()?;
        let r = self.watch.get(Side::Destination, &live.receiver);
        let receiver = PodView::new("receiver", &live.receiver, r.as_deref());
        let sender = live.sender_log.as_ref().map(|_| {
            let s = self.watch.get(Side::Source, &live.sender);
            PodView::new("sender", &live.sender, s.as_deref())
        });
        let rlog = live.receiver_log.digest();
        let slog = live.sender_log.as_ref().map(Follower::digest);
        Some((receiver, sender, rlog, slog))
    }

    pub(super) fn verdict(&mut self) -> Verdict {
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
        judge(&live.attempt_view(
            receiver,
            sender,
            &rlog,
            slog.as_ref(),
            self.options.start_timeout,
        ))
    }

    pub(super) async fn await_listener(&mut self, number: u32) -> Result<State, DriverError> {
        if let Some(end) = self.concluded() {
            return Ok(State::EndAttempt { number, end });
        }
        let listening = self
            .live
            .as_ref()
            .is_some_and(|l| l.receiver_log.digest().listening);
        if !listening {
            if let Some(end) = self.silent_receiver() {
                return Ok(State::EndAttempt { number, end });
            }
            self.idle().await?;
            return Ok(State::AwaitListener { number });
        }
        let placement = self
            .live
            .as_ref()
            .map(|l| l.sender_placement.clone())
            .unwrap_or_else(|| self.plan.placement.sender.clone());
        let pod = match self.route().await? {
            Route::Tunnel => resources::listening_sender_pod(&self.plan, number, &placement),
            Route::Dial(to) => resources::sender_pod(&self.plan, number, &placement, &to),
        };
        objects::create_or_get(&self.sender_pods, &pod).await?;
        if let Some(live) = self.live.as_mut() {
            live.sender_created = Some(Instant::now());
        }
        let name = names::pod_name(&self.plan.operation, Component::Sender, number);
        self.follow_sender(name);
        self.write(|vm| {
            if let Some(a) = vm.status.attempts.iter_mut().find(|a| a.number == number) {
                a.phase = AttemptPhase::Running;
            }
        })
        .await?;
        Ok(State::Transfer { number })
    }

    /// A receiver that runs but whose log never says it listens: the log
    /// cannot be read (pods/log forbidden, API server cut off from the
    /// kubelet), or the mover is stuck. Waiting longer will not help.
    fn silent_receiver(&self) -> Option<AttemptEnd> {
        let live = self.live.as_ref()?;
        let pod = self.watch.get(Side::Destination, &live.receiver)?;
        let running = PodView::new("receiver", &live.receiver, Some(&pod)).running;
        (running && live.started.elapsed() >= self.options.start_timeout).then(|| AttemptEnd {
            phase: AttemptPhase::Failed,
            reason: Some(format!(
                "receiver {} runs, but its log never said it listens: check that you may read \
                 pods/log (kubectl logs {} -n {}) and that the API server reaches the kubelet",
                live.receiver, live.receiver, self.plan.destination.namespace
            )),
            retryable: Some(false),
            destination_fault: false,
        })
    }

    /// The verdict as an attempt end, if the attempt is over.
    pub(super) fn concluded(&mut self) -> Option<AttemptEnd> {
        match self.verdict() {
            Verdict::Wait => None,
            Verdict::Succeeded { live_source } => Some(AttemptEnd {
                phase: AttemptPhase::Succeeded,
                reason: live_source.then(|| {
                    "the source changed during the copy (exit 24): the destination holds the \
                     version sent; see Changed"
                        .to_string()
                }),
                retryable: None,
                destination_fault: false,
            }),
            failed @ Verdict::Failed { .. } => failed.failure(),
        }
    }

    pub(super) async fn transfer(&mut self, number: u32) -> Result<State, DriverError> {
        if let Some(end) = self.concluded() {
            return Ok(State::EndAttempt { number, end });
        }
        if let Some(end) = self.app_moved().await? {
            return Ok(State::EndAttempt { number, end });
        }
        if let Some(end) = self.tend_tunnel() {
            return Ok(State::EndAttempt { number, end });
        }
        self.idle().await?;
        Ok(State::Transfer { number })
    }

    /// Ends the attempt when the app's pod now runs on another node than
    /// the sender was placed on (a ReadWriteOnce source follows its app).
    pub(super) async fn app_moved(&mut self) -> Result<Option<AttemptEnd>, DriverError> {
        let due = self
            .live
            .as_ref()
            .is_some_and(|l| l.placement_checked.elapsed() >= PLACEMENT_EVERY);
        // Any node mounts a shared source, and a copy has no app: there is
        // nothing to follow.
        let shared = self.plan.source_method.method.reads_copy()
            || self
                .plan
                .source
                .access_modes
                .iter()
                .any(|m| m == "ReadWriteMany" || m == "ReadOnlyMany");
        if !due || shared {
            return Ok(None);
        }
        let now = self.current_sender_placement().await?;
        let Some(live) = self.live.as_mut() else {
            return Ok(None);
        };
        live.placement_checked = Instant::now();
        // Where the sender is: where it was placed, or (unpinned) where the
        // scheduler put it.
        let sender_node = live.sender_placement.node.clone().or_else(|| {
            let pod = self.watch.get(Side::Source, &live.sender)?;
            pod.spec.as_ref()?.node_name.clone()
        });
        let moved = now.node.is_some() && now.node != sender_node;
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
            destination_fault: false,
        }))
    }

    /// Waits for news (a pod change, a log line) or a tick, keeping the
    /// record's progress and heartbeat fresh.
    pub(super) async fn idle(&mut self) -> Result<(), DriverError> {
        self.report_progress();
        if self.written.elapsed() >= RECORD_EVERY || self.newly_scheduled() {
            self.heartbeat().await?;
        }
        let wake = self.watch.wake.clone();
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(TICK) => {}
        }
        Ok(())
    }

    /// Whether a pod of the running attempt has a node the record does not
    /// show yet: written at once, so the record says where the sender runs
    /// as soon as the scheduler has placed it.
    fn newly_scheduled(&self) -> bool {
        let (Some(live), Some((receiver, sender, _, _))) = (&self.live, self.view()) else {
            return false;
        };
        let sender = sender.and_then(|s| s.node);
        let recorded = self.record.status.attempts.iter();
        recorded
            .filter(|a| a.number == live.number)
            .any(|a| unrecorded_node(a, receiver.node.as_deref(), sender.as_deref()))
    }

    /// The running attempt's newest progress: its receiver's log once it
    /// has been read up to now, never older than what was shown (see
    /// [`figures::newest`]).
    pub(super) fn progress(&mut self) -> Option<Progress> {
        let live = self.live.as_mut()?;
        if live.receiver_log.caught_up() {
            let digest = live.receiver_log.digest();
            let fresh = digest.progress.as_ref().map(progress_of);
            live.shown = figures::newest(live.shown.as_ref(), fresh.as_ref()).cloned();
        }
        live.shown.clone()
    }

    /// What earlier attempts had done when this one started, once the
    /// receiver has said so (its first progress event).
    pub(super) fn prior(&self) -> Option<u64> {
        let live = self.live.as_ref()?;
        let digest = live.receiver_log.digest();
        digest.first_progress.as_ref().map(|p| p.bytes_prior)
    }

    /// Tells the user interface the newest progress, once the receiver's
    /// log has been read up to now.
    pub(super) fn report_progress(&mut self) {
        let progress = self.progress();
        let Some(live) = self.live.as_ref().filter(|l| l.receiver_log.caught_up()) else {
            return;
        };
        if let Some(progress) = progress {
            let _ = self.updates.send(Update::Progress {
                attempt: live.number,
                progress,
            });
        }
    }
}

/// Whether the pods' nodes, as seen, tell `recorded` something new.
pub(super) fn unrecorded_node(
    recorded: &Attempt,
    receiver: Option<&str>,
    sender: Option<&str>,
) -> bool {
    (recorded.receiver.node.is_none() && receiver.is_some())
        || (recorded.sender.node.is_none() && sender.is_some())
}

/// A mover progress event as the record keeps it, stamped now.
pub fn progress_of(p: &mover::stats::Progress) -> Progress {
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

impl Live {
    /// What the judge sees of this attempt: its pods, what their logs
    /// said, and how long it has run.
    pub(super) fn attempt_view<'a>(
        &self,
        receiver: PodView,
        sender: Option<PodView>,
        rlog: &'a LogDigest,
        slog: Option<&'a LogDigest>,
        start_timeout: Duration,
    ) -> AttemptView<'a> {
        AttemptView {
            receiver,
            receiver_result: rlog.result.as_ref(),
            sender,
            sender_result: slog.and_then(|l| l.result.as_ref()),
            receiver_error: rlog.error.as_ref(),
            sender_error: slog.and_then(|l| l.error.as_ref()),
            age: self.started.elapsed(),
            sender_age: self.sender_created.map_or(Duration::ZERO, |t| t.elapsed()),
            one_side_finished_for: self
                .one_side_finished_at
                .map_or(Duration::ZERO, |t| t.elapsed()),
            start_timeout,
        }
    }
}
