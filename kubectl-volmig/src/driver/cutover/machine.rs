//! The cutover's decisions, pure: when the pre-copy rounds stop, how each
//! pass copies, what a round and the downtime were, whether and how a
//! rollback may start.

use jiff::Timestamp;

use crate::plan::{Plan, SourceMethod};
use crate::record::cutover::{CutoverStatus, PassKind, Rollback, Round, Step};
use crate::record::{Attempt, AttemptPhase, Summary};
use crate::spec::CutoverSpec;

/// Whether the pre-copy rounds are done: the last one took no longer than
/// the downtime aimed for (the final sync sends at most what changed
/// since, at the same pace), or the rounds ran out.
pub fn precopy_done(rounds: &[Round], spec: &CutoverSpec) -> bool {
    let Some(last) = rounds.last() else {
        return false;
    };
    rounds.len() as u32 >= spec.precopy_rounds.max(1)
        || last.seconds <= spec.max_downtime_seconds as f64
}

/// The plan of a pass: rounds mirror the source (`--delete`) without the
/// verification a changing source would fail; the final sync mirrors and
/// verifies, whatever `--no-verify` said. Rounds read what the plan says
/// (a fresh snapshot or clone each, when it says so: each round is then
/// one point in time, and a ReadWriteOncePod source stays its app's); the
/// final sync and the sync back read the volumes themselves, no pod
/// holding them then.
pub fn pass_plan(base: &Plan, kind: PassKind) -> Plan {
    let mut plan = base.clone();
    let t = &mut plan.spec.transfer;
    t.delete = true;
    t.verify = kind != PassKind::PreCopy;
    if kind != PassKind::PreCopy {
        plan.source_method = SourceMethod::default();
    }
    plan
}

/// A finished round: from its first attempt's start to its last's end.
pub fn round_of(
    number: u32,
    first_attempt: u32,
    attempts: &[Attempt],
    summary: Option<&Summary>,
) -> Round {
    let own: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| a.number >= first_attempt)
        .collect();
    let start = own.iter().filter_map(|a| a.start_time).min();
    let end = own
        .iter()
        .filter(|a| a.phase == AttemptPhase::Succeeded)
        .filter_map(|a| a.end_time)
        .max();
    let seconds = match (start, end) {
        (Some(s), Some(e)) => e.duration_since(s).as_secs_f64().max(0.0),
        _ => own.iter().map(|a| a.elapsed_seconds).sum(),
    };
    Round {
        number,
        first_attempt,
        seconds,
        bytes_sent: summary.map_or(0, |s| s.bytes_literal + s.bytes_matched),
        files_transferred: summary.map_or(0, |s| s.files_transferred),
    }
}

/// A rollback of `c` as asked for, or why there can be none.
pub fn rollback_request(
    c: &CutoverStatus,
    discard_new_writes: bool,
    delete_new: bool,
    reason: &str,
    now: Timestamp,
) -> Result<Rollback, String> {
    match (c.step, &c.rollback) {
        (Step::Committed, _) => Err(
            "the cutover is committed: the old volume is gone, there is nothing to go back to"
                .into(),
        ),
        (Step::RolledBack, _) => Err("the cutover is rolled back already".into()),
        // Asked again: the flags of the first request stand, but a later
        // request may add --delete-new.
        (_, Some(r)) => Ok(Rollback {
            delete_new: r.delete_new || delete_new,
            ..r.clone()
        }),
        (from, None) => Ok(Rollback {
            from,
            sync_back: from.app_ran_on_new() && !discard_new_writes,
            synced_back: false,
            delete_new,
            quiesced: false,
            reason: reason.to_string(),
            started: Some(now),
        }),
    }
}

/// Whether the claim may have been swapped (from the Swap step on): the
/// rollback must bind it to the old volume again.
pub fn swap_may_have_started(from: Step, c: &CutoverStatus) -> bool {
    matches!(from, Step::Swap | Step::Restore | Step::AwaitingCommit)
        || c.claims.iter().any(|claim| claim.swap.is_some())
}

/// Whether `c` is past the point where `abort` stops a copy: from Quiesce
/// on, the app has been touched and abort means rollback.
pub fn abort_means_rollback(c: &CutoverStatus) -> bool {
    c.step != Step::PreCopy || c.rollback.is_some()
}
