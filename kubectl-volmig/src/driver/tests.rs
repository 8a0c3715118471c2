//! The driver's pure parts: verdicts and backoff.

use std::time::Duration;

use super::attempt::unrecorded_node;
use super::ending::backoff;
use super::judge::{judge, AttemptView, PodView, Verdict, SURVIVOR_GRACE};
use super::logs::{LogDigest, MoverResult};

fn running(role: &'static str) -> PodView {
    PodView {
        name: format!("volmig-op-{role}-1"),
        role,
        exists: true,
        phase: Some("Running".into()),
        node: Some("node-1".into()),
        running: true,
        ..PodView::default()
    }
}

fn exited(role: &'static str, code: i32) -> PodView {
    PodView {
        running: false,
        exit_code: Some(code),
        phase: Some(if code == 0 { "Succeeded" } else { "Failed" }.into()),
        reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
        ..running(role)
    }
}

fn view(receiver: PodView, sender: Option<PodView>) -> AttemptView<'static> {
    AttemptView {
        receiver,
        sender,
        start_timeout: Duration::from_secs(300),
        ..AttemptView::default()
    }
}

fn failed(v: &AttemptView<'_>) -> (String, bool) {
    match judge(v) {
        Verdict::Failed {
            reason, retryable, ..
        } => (reason, retryable),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn both_sides_exiting_zero_is_success_and_one_is_not_enough() {
    assert_eq!(
        judge(&view(exited("receiver", 0), Some(exited("sender", 0)))),
        Verdict::Succeeded { live_source: false }
    );
    assert_eq!(
        judge(&view(exited("receiver", 0), Some(running("sender")))),
        Verdict::Wait
    );
    // No sender yet: the receiver alone never makes a success.
    assert_eq!(judge(&view(running("receiver"), None)), Verdict::Wait);
}

#[test]
fn a_killed_sender_is_the_cause_and_retryable() {
    let v = view(exited("receiver", 10), Some(exited("sender", 137)));
    let (reason, retryable) = failed(&v);
    assert!(reason.starts_with("sender exited 137 (Error)"), "{reason}");
    assert!(reason.contains("SIGKILL"), "{reason}");
    assert!(retryable);
}

/// Whether the verdict blames the destination's data.
fn blames_destination(v: &AttemptView<'_>) -> bool {
    matches!(
        judge(v),
        Verdict::Failed {
            destination: true,
            ..
        }
    )
}

#[test]
fn only_the_receivers_own_write_failures_count_against_the_destination() {
    // The receiver could not write or verify entries: its data.
    assert!(blames_destination(&view(
        exited("receiver", 23),
        Some(exited("sender", 13))
    )));
    assert!(blames_destination(&view(
        exited("receiver", 11),
        Some(exited("sender", 13))
    )));
    // A dropped link or a killed sender says nothing about it.
    assert!(!blames_destination(&view(
        exited("receiver", 10),
        Some(exited("sender", 137))
    )));
    assert!(!blames_destination(&view(
        exited("receiver", 13),
        Some(exited("sender", 11))
    )));
}

#[test]
fn the_survivor_gets_a_grace_period_then_the_attempt_ends() {
    let mut v = view(running("receiver"), Some(exited("sender", 137)));
    v.one_side_finished_for = Duration::from_secs(1);
    assert_eq!(judge(&v), Verdict::Wait);
    v.one_side_finished_for = SURVIVOR_GRACE;
    assert!(failed(&v).0.starts_with("sender exited 137"));
}

#[test]
fn the_movers_own_verdict_decides_retryability_and_advice() {
    let full = MoverResult {
        ok: false,
        exit_code: 11,
        error: Some("write data/big: No space left on device (os error 28)".into()),
        retryable: Some(false),
        summary: None,
    };
    let mut v = view(exited("receiver", 11), Some(exited("sender", 13)));
    v.receiver_result = Some(&full);
    let (reason, retryable) = failed(&v);
    assert!(!retryable);
    assert!(reason.starts_with("receiver exited 11"), "{reason}");
    assert!(reason.contains("larger --to-size"), "{reason}");

    let auth = view(exited("receiver", 10), Some(exited("sender", 3)));
    let (reason, retryable) = failed(&auth);
    assert!(!retryable && reason.contains("key material"), "{reason}");
}

#[test]
fn files_the_sender_may_not_read_fail_the_attempt_for_good_by_name() {
    // Both sides exit 23; the receiver only counted failed files, the
    // sender says which and that no retry helps.
    let counted = MoverResult {
        ok: false,
        exit_code: 23,
        error: None,
        retryable: None,
        summary: None,
    };
    let denied = MoverResult {
        ok: false,
        exit_code: 23,
        error: Some(
            "2 source entries could not be read as uid 1000 gid 2000 (permission denied): \
             private, sub/secret.key"
                .into(),
        ),
        retryable: Some(false),
        summary: None,
    };
    let mut v = view(exited("receiver", 23), Some(exited("sender", 23)));
    v.receiver_result = Some(&counted);
    v.sender_result = Some(&denied);
    let (reason, retryable) = failed(&v);
    assert!(!retryable, "{reason}");
    assert!(
        reason.starts_with(
            "sender exited 23 (Error): 2 source entries could not be read as uid 1000"
        ),
        "{reason}"
    );
    assert!(reason.contains("private, sub/secret.key"), "{reason}");
    assert!(reason.contains("--security baseline"), "{reason}");
}

#[test]
fn a_sender_refusing_its_command_line_is_quoted_not_called_silent() {
    // clap's usage error: no summary line, only `error: ...` on stderr.
    let log = LogDigest::from_text(
        "error: invalid value '2Q' for '--bwlimit <RATE>': invalid rate \"2Q\" \
         (examples: 500, 20M, 1.5G)\n\nFor more information, try '--help'.\n",
    );
    let mut v = view(running("receiver"), Some(exited("sender", 1)));
    v.sender_error = log.error.as_ref();
    v.one_side_finished_for = SURVIVOR_GRACE;
    let (reason, retryable) = failed(&v);
    assert!(
        reason.starts_with(
            "sender exited 1 (Error): invalid value '2Q' for '--bwlimit <RATE>': invalid rate"
        ),
        "{reason}"
    );
    assert!(!reason.contains("no error message"), "{reason}");
    assert!(reason.contains("--mover-image is the mover"), "{reason}");
    assert!(!retryable);

    // The mover's own `mover: error:` line, when it printed no summary.
    let log = LogDigest::from_text("mover: error: /data: No such file or directory (os error 2)\n");
    let mut v = view(exited("receiver", 11), Some(exited("sender", 13)));
    v.receiver_error = log.error.as_ref();
    let (reason, _) = failed(&v);
    assert_eq!(
        reason,
        "receiver exited 11 (Error): /data: No such file or directory (os error 2)"
    );
}

#[test]
fn pods_that_cannot_start_fail_fast_or_time_out() {
    let mut pull = running("receiver");
    pull.running = false;
    pull.reason = Some("ImagePullBackOff".into());
    pull.message = Some("Back-off pulling image \"ghcr.io/volmig/mover:0.0.9\"".into());
    let (reason, retryable) = failed(&view(pull, None));
    assert!(!retryable);
    assert!(
        reason.contains("--mover-image") && reason.contains("0.0.9"),
        "{reason}"
    );

    let mut pending = running("sender");
    pending.running = false;
    pending.phase = Some("Pending".into());
    pending.unschedulable = Some("0/3 nodes are available: 3 node(s) had untolerated taint".into());
    let mut v = view(running("receiver"), Some(pending));
    assert_eq!(judge(&v), Verdict::Wait);
    // The sender's own clock counts, not the receiver's.
    v.age = Duration::from_secs(300);
    assert_eq!(judge(&v), Verdict::Wait);
    v.sender_age = Duration::from_secs(300);
    let (reason, retryable) = failed(&v);
    assert!(
        retryable && reason.contains("untolerated taint"),
        "{reason}"
    );
}

#[test]
fn a_deleted_pod_ends_the_attempt() {
    let mut gone = running("receiver");
    gone.exists = false;
    let (reason, retryable) = failed(&view(gone, None));
    assert!(retryable && reason.contains("was deleted"), "{reason}");
}

#[test]
fn backoff_doubles_from_the_first_delay_up_to_five_minutes() {
    let delays: Vec<u64> = (1..=7).map(|n| backoff(10, n).as_secs()).collect();
    assert_eq!(delays, [10, 20, 40, 80, 160, 300, 300]);
    assert_eq!(backoff(1, 40).as_secs(), 300);
}

#[test]
fn a_pod_s_node_is_written_once_the_scheduler_placed_it() {
    let mut attempt = crate::record::Attempt::default();
    assert!(!unrecorded_node(&attempt, None, None));
    assert!(unrecorded_node(&attempt, None, Some("node-2")));
    attempt.sender.node = Some("node-2".into());
    assert!(!unrecorded_node(&attempt, None, Some("node-2")));
    assert!(unrecorded_node(&attempt, Some("node-1"), Some("node-2")));
    attempt.receiver.node = Some("node-1".into());
    assert!(!unrecorded_node(&attempt, Some("node-1"), Some("node-2")));
}

/// A session that completed with exit 24 (the source changed during the copy) is a success
/// with a warning, never a failure to retry until the budget runs out; exit 24 without a
/// completed session (no counters) is still a failure.
#[test]
fn a_live_source_succeeds_with_a_warning_and_is_not_retried() {
    let completed = MoverResult {
        ok: false,
        exit_code: 24,
        error: None,
        retryable: None,
        summary: Some(mover::stats::Summary::default()),
    };
    let mut v = view(exited("receiver", 24), Some(exited("sender", 24)));
    v.receiver_result = Some(&completed);
    v.sender_result = Some(&completed);
    assert_eq!(judge(&v), Verdict::Succeeded { live_source: true });

    let bare = MoverResult {
        summary: None,
        ..completed.clone()
    };
    let mut v = view(exited("receiver", 24), Some(exited("sender", 24)));
    v.receiver_result = Some(&bare);
    v.sender_result = Some(&bare);
    assert!(
        matches!(judge(&v), Verdict::Failed { .. }),
        "{:?}",
        judge(&v)
    );

    // Exit 24 before its log line is read: wait for the log, then decide.
    let mut v = view(exited("receiver", 24), Some(exited("sender", 24)));
    v.one_side_finished_for = Duration::from_secs(1);
    assert_eq!(judge(&v), Verdict::Wait);
    v.one_side_finished_for = super::judge::LOG_GRACE;
    assert!(
        matches!(judge(&v), Verdict::Failed { .. }),
        "{:?}",
        judge(&v)
    );
}
