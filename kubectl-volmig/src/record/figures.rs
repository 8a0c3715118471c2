//! The figures the record keeps and shows, worked out from what was seen
//! (pure): when an attempt ended and how long it took, its bytes and rate,
//! the operation's time in attempts, progress that never goes backwards,
//! and the attempts counted against the backoff limit.
//!
//! The driver that watched an attempt and `abort` (which may be the first
//! to look at an attempt nobody drove) close attempts the same way, with
//! [`close`].

use std::time::Duration;

use jiff::Timestamp;

use super::{Attempt, AttemptPhase, PodRecord, Progress, VolumeMigration};

/// `finishedAt` is written to the second: a driver that saw the pods end
/// less than this long ago records the moment it saw it, which is closer.
pub const FINISHED_AT_PRECISION: Duration = Duration::from_secs(2);

/// What was seen of an attempt's pods and logs when it ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seen {
    /// The pods as last seen; `None` for one not seen at all (the record
    /// keeps what it had).
    pub receiver: Option<PodRecord>,
    pub sender: Option<PodRecord>,
    /// The receiver's newest progress event.
    pub progress: Option<Progress>,
    /// What earlier attempts had done, from the receiver's first progress
    /// event.
    pub prior: Option<u64>,
    /// Both pods' last human lines, each prefixed with its role.
    pub log_tail: Vec<String>,
}

/// Closes attempt `a` as `phase`: why, its pods, bytes, rate and log tail
/// as `seen`, its end (see [`end_time`]) and elapsed time.
pub fn close(
    a: &mut Attempt,
    phase: AttemptPhase,
    reason: Option<String>,
    retryable: Option<bool>,
    seen: &Seen,
    now: Timestamp,
) {
    a.phase = phase;
    a.reason = reason;
    a.retryable = retryable;
    if let Some(r) = seen.receiver.as_ref().filter(|p| !p.name.is_empty()) {
        a.receiver = merged(&a.receiver, r);
    }
    if let Some(s) = seen.sender.as_ref().filter(|p| !p.name.is_empty()) {
        a.sender = merged(&a.sender, s);
    }
    if let Some(prior) = seen.prior {
        a.bytes_prior = prior;
    }
    if let Some(p) = &seen.progress {
        a.bytes_done = p.bytes_done;
        a.bytes_total = p.bytes_total;
        a.rate = p.rate;
    }
    if !seen.log_tail.is_empty() {
        a.log_tail = seen.log_tail.clone();
    }
    let end = end_time(a, now);
    a.end_time = Some(end);
    a.elapsed_seconds = a
        .start_time
        .map_or(0.0, |start| seconds_between(start, end));
}

/// A pod as seen now over what the record had: a pod seen gone keeps
/// the node it ran on.
fn merged(recorded: &PodRecord, seen: &PodRecord) -> PodRecord {
    PodRecord {
        name: seen.name.clone(),
        node: seen.node.clone().or_else(|| recorded.node.clone()),
        phase: seen.phase.clone().or_else(|| recorded.phase.clone()),
        exit_code: seen.exit_code.or(recorded.exit_code),
        reason: seen.reason.clone().or_else(|| recorded.reason.clone()),
        finished_at: seen.finished_at.or(recorded.finished_at),
    }
}

/// When attempt `a` ended: when the last of its pods finished, if every
/// pod it still has has finished and that was a while ago (a driver that
/// came back later, `resume` after `--detach`, or an `abort` of an attempt
/// nobody drove); else `now`. Never before it started.
pub fn end_time(a: &Attempt, now: Timestamp) -> Timestamp {
    let pods = [&a.receiver, &a.sender];
    let still_running = pods.iter().any(|p| {
        p.finished_at.is_none() && matches!(p.phase.as_deref(), Some("Pending" | "Running"))
    });
    let last_finished = pods.iter().filter_map(|p| p.finished_at).max();
    let end = match last_finished {
        Some(t)
            if !still_running && seconds_between(t, now) >= FINISHED_AT_PRECISION.as_secs_f64() =>
        {
            t
        }
        _ => now,
    };
    match a.start_time {
        Some(start) if end < start => start,
        _ => end,
    }
}

/// Seconds from `from` to `to`, never negative.
fn seconds_between(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

/// Attempt `a`'s time: as recorded once it has ended, from its start to
/// `now` while it runs (nothing writes it before it ends).
pub fn attempt_elapsed(a: &Attempt, now: Timestamp) -> f64 {
    if a.phase.is_over() {
        return a.elapsed_seconds;
    }
    a.start_time
        .map_or(0.0, |start| seconds_between(start, now))
}

/// The operation's time in attempts: every ended attempt's, plus the
/// running one's so far.
pub fn total_elapsed(attempts: &[Attempt], now: Timestamp) -> f64 {
    attempts.iter().map(|a| attempt_elapsed(a, now)).sum()
}

/// The time the ended attempts took, as the record keeps it.
pub fn recorded_elapsed(attempts: &[Attempt]) -> f64 {
    attempts
        .iter()
        .filter(|a| a.phase.is_over())
        .map(|a| a.elapsed_seconds)
        .sum()
}

/// The further along of two progress reports of one attempt (bytes, then
/// files); `fresh` on a tie, as it is the more recent word. A client that
/// picks an attempt up starts from the newest its log or the record holds,
/// and never shows an older one after it.
pub fn newest<'a>(
    known: Option<&'a Progress>,
    fresh: Option<&'a Progress>,
) -> Option<&'a Progress> {
    match (known, fresh) {
        (Some(k), Some(f)) if ahead(k, f) => Some(k),
        (k, None) => k,
        (_, f) => f,
    }
}

/// Whether `a` is further along than `b` (bytes, then files).
pub fn ahead(a: &Progress, b: &Progress) -> bool {
    (a.bytes_done, a.files_done) > (b.bytes_done, b.files_done)
}

/// The attempts counted against the backoff limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The first attempt counted: 1, or the first after `resume` granted a
    /// fresh budget.
    pub from: u32,
    /// 1 + the backoff limit.
    pub allowed: u64,
    /// Attempts counted so far (not the ones replaced to follow the app).
    pub used: usize,
    /// Attempts replaced to follow the app, all told.
    pub replaced: usize,
    /// Attempts made, all told.
    pub all: usize,
}

impl Budget {
    pub fn of(vm: &VolumeMigration) -> Budget {
        let from = vm.status.budget_from.unwrap_or(1).max(1);
        let all = &vm.status.attempts;
        Budget {
            from,
            allowed: 1 + u64::from(vm.spec.retry.backoff_limit),
            used: all
                .iter()
                .filter(|a| a.number >= from && a.phase != AttemptPhase::Replaced)
                .count(),
            replaced: all
                .iter()
                .filter(|a| a.phase == AttemptPhase::Replaced)
                .count(),
            all: all.len(),
        }
    }

    /// Whether `resume` granted a fresh budget after earlier attempts.
    pub fn fresh(&self) -> bool {
        self.from > 1
    }

    /// `2 of 7`; after a fresh budget, `1 of 3 since resume (4 in all)`.
    pub fn count(&self) -> String {
        if self.fresh() {
            format!(
                "{} of {} since resume ({} in all)",
                self.used, self.allowed, self.all
            )
        } else {
            format!("{} of {}", self.used, self.allowed)
        }
    }

    /// The ATTEMPTS cell: `2/7`, counted since the last fresh budget.
    pub fn cell(&self) -> String {
        format!("{}/{}", self.used, self.allowed)
    }

    /// Attempt `number` in progress lines: `attempt 2/7`; after a fresh
    /// budget, `attempt 4 (1/3 since resume)`.
    pub fn label(&self, number: u32) -> String {
        if self.fresh() {
            let counted = number.saturating_sub(self.from) + 1;
            format!("attempt {number} ({counted}/{} since resume)", self.allowed)
        } else {
            format!("attempt {number}/{}", self.allowed)
        }
    }
}

/// Failed attempts counted against the backoff limit: those from `from` on.
pub fn failures(attempts: &[Attempt], from: u32) -> u32 {
    let failed = attempts
        .iter()
        .filter(|a| a.number >= from && a.phase == AttemptPhase::Failed)
        .count();
    u32::try_from(failed).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
