//! Ending an attempt (record it, delete its pods, choose what is next) and
//! ending the operation.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use tokio::time::Instant;

use super::attempt::progress_of;
use super::judge::{judge, PodView, Verdict};
use super::logs::LogDigest;
use super::objects;
use super::run::{
    pass_first, AttemptEnd, Driver, Outcome, State, Update, MAX_BACKOFF, POD_GONE_WAIT,
};
use super::DriverError;
use crate::events::Severity;
use crate::names::{self, Component};
use crate::record::figures::{self, Seen};
use crate::record::{Attempt, AttemptPhase, BlockCheckpoint, Phase, PodRecord, Summary};

/// An attempt's pods as last seen, and their logs' digests.
pub(super) type FinalView = (PodView, Option<PodView>, LogDigest, Option<LogDigest>);

impl Driver {
    pub(super) async fn end_attempt(
        &mut self,
        number: u32,
        end: AttemptEnd,
    ) -> Result<State, DriverError> {
        // Taken again after an API error, the step records only once.
        let recorded = self
            .record
            .status
            .attempts
            .iter()
            .any(|a| a.number == number && a.phase.is_over());
        let end = if recorded {
            end
        } else {
            // The whole logs, read once: the failure is judged again from
            // them, and the record keeps their tails.
            let last = self.final_view().await;
            let end = self.judged_again(end, &last);
            self.record_end(number, &end, last).await?;
            if let (AttemptPhase::Failed, Some(reason)) = (end.phase, &end.reason) {
                self.learn_from_failure(reason).await?;
            }
            end
        };
        // The pods go; their logs' tails stay in the record.
        self.live = None;
        let receiver_name = names::pod_name(&self.plan.operation, Component::Receiver, number);
        let sender_name = names::pod_name(&self.plan.operation, Component::Sender, number);
        // Side by side: the wait stays shorter than a lease's life. A pod
        // whose kubelet cannot answer is not waited for when that is safe.
        let sender_wait = self.gone_wait(&self.sender_pods, &sender_name).await?;
        let receiver_wait = self.gone_wait(&self.receiver_pods, &receiver_name).await?;
        let (sender, receiver) = tokio::join!(
            objects::delete_pods(
                &self.sender_pods,
                std::slice::from_ref(&sender_name),
                sender_wait
            ),
            objects::delete_pods(
                &self.receiver_pods,
                std::slice::from_ref(&receiver_name),
                receiver_wait
            ),
        );
        sender?;
        receiver?;
        // The copy it read goes too, once no pod mounts it.
        self.release_source(number).await?;
        Ok(self.after(number, end).await)
    }

    /// Writes how attempt `number` ended: its pods, bytes, log tails, and
    /// its end: when its pods ended, for an attempt that ran without a
    /// driver (see [`figures::end_time`]).
    pub(super) async fn record_end(
        &mut self,
        number: u32,
        end: &AttemptEnd,
        (receiver, sender, rlog, slog): FinalView,
    ) -> Result<(), DriverError> {
        let mut log_tail: Vec<String> = rlog
            .tail()
            .into_iter()
            .map(|l| format!("receiver: {l}"))
            .collect();
        if let Some(s) = &slog {
            log_tail.extend(s.tail().into_iter().map(|l| format!("sender: {l}")));
        }
        let summary = rlog
            .result
            .as_ref()
            .and_then(|r| r.summary.as_ref())
            .map(summary_of);
        // The whole log's last word, never older than what was shown.
        let shown = self.live.as_ref().and_then(|l| l.shown.clone());
        let fresh = rlog.progress.as_ref().map(progress_of);
        let seen = Seen {
            // A view of pods never seen keeps the recorded ones.
            receiver: Some(&receiver)
                .filter(|r| !r.name.is_empty())
                .map(pod_record),
            sender: sender.as_ref().map(pod_record),
            progress: figures::newest(shown.as_ref(), fresh.as_ref()).cloned(),
            prior: rlog.first_progress.as_ref().map(|p| p.bytes_prior),
            log_tail,
        };
        let claim = self.plan.destination.name.clone();
        let seed = rlog.checkpoint.as_ref().map(|c| BlockCheckpoint {
            claim: claim.clone(),
            attempt: c.attempt,
            verified: c.verified,
            data: c.data.clone(),
        });
        let mut ended: Option<Attempt> = None;
        self.write(|vm| {
            // The newest checkpoint a receiver told is the next one's seed;
            // a finished copy needs none.
            match (&seed, end.phase) {
                (_, AttemptPhase::Succeeded) => vm.status.block_checkpoint = None,
                (Some(s), _) => vm.status.block_checkpoint = Some(s.clone()),
                (None, _) => {}
            }
            if let Some(p) = &seen.progress {
                vm.status.progress = Some(p.clone());
            }
            if let Some(a) = vm.status.attempts.iter_mut().find(|a| a.number == number) {
                let (reason, retryable) = (end.reason.clone(), end.retryable);
                figures::close(a, end.phase, reason, retryable, &seen, Timestamp::now());
                a.destination_fault = end.destination_fault;
                ended = Some(a.clone());
            }
            vm.status.elapsed_seconds = figures::recorded_elapsed(&vm.status.attempts);
            if end.phase == AttemptPhase::Succeeded {
                vm.status.summary = summary.clone();
            }
        })
        .await?;
        if let Some(a) = ended {
            let _ = self.updates.send(Update::AttemptEnded(Box::new(a)));
        }
        Ok(())
    }

    pub(super) async fn after(&mut self, number: u32, end: AttemptEnd) -> State {
        let reason = end.reason.clone().unwrap_or_default();
        match end.phase {
            AttemptPhase::Succeeded => State::Finish {
                phase: Phase::Succeeded,
                message: None,
            },
            AttemptPhase::Replaced => State::StartAttempt { number: number + 1 },
            // A destination that could not be emptied is replaced by the
            // next attempt, not the end of the operation.
            _ if end.retryable == Some(false) && !self.wipe_failed(number, &end) => State::Finish {
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

    /// Whether attempt `number` was one that emptied the destination and
    /// could not.
    fn wipe_failed(&self, number: u32, end: &AttemptEnd) -> bool {
        let attempt = self
            .record
            .status
            .attempts
            .iter()
            .find(|a| a.number == number);
        let why = end.reason.as_deref().unwrap_or_default();
        attempt.is_some_and(|a| a.wipe) && end.destination_fault && why.contains("cannot wipe")
    }

    /// A cutover pass ended: the phase stays for the cutover to decide,
    /// and its pods are gone before it goes on (a sender still mounting the
    /// source would hold its claim).
    async fn end_pass(
        &mut self,
        phase: Phase,
        message: Option<String>,
    ) -> Result<State, DriverError> {
        let op = self.plan.operation.clone();
        let gone = objects::wait_pods_gone(&self.sides, &op, self.namespaces(), POD_GONE_WAIT);
        if !gone.await? {
            return Err(DriverError::Refused(format!(
                "the mover pods of operation {op} are still there after {}s",
                POD_GONE_WAIT.as_secs()
            )));
        }
        self.heartbeat().await?;
        let failure = (phase != Phase::Succeeded).then(|| message.unwrap_or_default());
        self.outcome = Some(Outcome::PassEnded {
            record: Box::new(self.record.clone()),
            failure,
        });
        Ok(State::Done)
    }

    /// A failure judged again from the whole logs once both sides have
    /// ended: the followed logs may not have reached a side's last words
    /// yet (the sender's summary saying which files it may not read, while
    /// the receiver only counted them failed).
    fn judged_again(&self, end: AttemptEnd, last: &FinalView) -> AttemptEnd {
        let (receiver, sender, rlog, slog) = last;
        if end.phase != AttemptPhase::Failed {
            return end;
        }
        let ended = |p: &PodView| p.exit_code.is_some();
        let both_ended = ended(receiver) && sender.as_ref().is_some_and(ended);
        let Some(live) = self.live.as_ref().filter(|_| both_ended) else {
            return end;
        };
        let view = live.attempt_view(
            receiver.clone(),
            sender.clone(),
            rlog,
            slog.as_ref(),
            self.options.start_timeout,
        );
        match judge(&view) {
            failed @ Verdict::Failed { .. } => failed.failure().unwrap_or(end),
            _ => end,
        }
    }

    /// The pods' last states and their whole logs (a follower may have
    /// missed the end).
    pub(super) async fn final_view(&self) -> FinalView {
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

    pub(super) async fn finish(
        &mut self,
        phase: Phase,
        message: Option<String>,
    ) -> Result<State, DriverError> {
        // Still ours? (A client that took over must not lose its pods.)
        self.heartbeat().await?;
        let op = self.plan.operation.clone();
        if pass_first(&self.record).is_some() {
            // The cutover removes the Service and the keys when it ends.
            objects::remove_pods(&self.sides, &op, self.namespaces()).await?;
            return self.end_pass(phase, message).await;
        }
        let reads = self.plan.source_method.method;
        objects::cleanup(&self.sides, &op, self.namespaces(), reads).await?;
        let msg = message.clone();
        self.write(|vm| {
            let now = Timestamp::now();
            vm.status.phase = phase;
            vm.status.message = msg.clone();
            vm.status.completion_time = Some(now);
            if phase == Phase::Succeeded {
                crate::record::sync::close_round(&mut vm.status, now);
            }
        })
        .await?;
        // Ended for good (sync --final): the source's cluster keeps nothing.
        if self.record.status.sync.as_ref().is_some_and(|s| s.ended) {
            let source_ns = self.plan.spec.source.namespace.clone();
            objects::remove_pointer(&self.sides, &op, &source_ns).await?;
        }
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
}

async fn full_log(api: &Api<Pod>, name: &str) -> Option<LogDigest> {
    let params = LogParams {
        container: Some(crate::resources::CONTAINER.into()),
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

pub(super) fn summary_of(s: &mover::stats::Summary) -> Summary {
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
        changed: s.files_changed + s.files_vanished + s.verify.as_ref().map_or(0, |v| v.changed),
        changed_paths: s
            .verify
            .as_ref()
            .map(|v| v.changed_paths.clone())
            .unwrap_or_default(),
    }
}

pub(super) fn pod_record(view: &PodView) -> PodRecord {
    PodRecord {
        finished_at: view.finished_at,
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
