//! Record accounting: what an attempt closed with no client watching
//! says, times, progress order and the budget `resume` grants.

use jiff::{SignedDuration, Timestamp};

use super::*;
use crate::record::{Metadata, MigrationStatus, Phase};
use crate::spec::{ClaimRef, MigrationSpec};

fn t0() -> Timestamp {
    "2025-03-01T12:00:00Z".parse().expect("timestamp")
}

fn at(seconds: i64) -> Timestamp {
    t0() + SignedDuration::from_secs(seconds)
}

fn pod(name: &str, phase: &str) -> PodRecord {
    PodRecord {
        name: name.into(),
        phase: Some(phase.into()),
        ..PodRecord::default()
    }
}

fn finished(name: &str, node: &str, code: i32, at: Timestamp) -> PodRecord {
    PodRecord {
        node: Some(node.into()),
        exit_code: Some(code),
        finished_at: Some(at),
        ..pod(name, if code == 0 { "Succeeded" } else { "Failed" })
    }
}

/// Attempt `number` as `--detach` leaves it: started, its sender created,
/// nothing else written (no driver heard from its pods).
fn detached(number: u32, start: Timestamp) -> Attempt {
    Attempt {
        number,
        phase: AttemptPhase::Running,
        receiver: PodRecord {
            name: "volmig-op-receiver-1".into(),
            ..PodRecord::default()
        },
        sender: PodRecord {
            name: "volmig-op-sender-1".into(),
            ..PodRecord::default()
        },
        start_time: Some(start),
        ..Attempt::default()
    }
}

fn progress(bytes: u64, files: u64) -> Progress {
    Progress {
        bytes_done: bytes,
        bytes_total: 100_000_000,
        files_done: files,
        files_total: 40,
        listing_done: true,
        rate: 4_450_000,
        ..Progress::default()
    }
}

#[test]
fn aborting_an_attempt_nobody_drove_records_what_it_copied() {
    let mut a = detached(1, t0());
    let seen = Seen {
        receiver: Some(PodRecord {
            node: Some("node-1".into()),
            ..pod("volmig-op-receiver-1", "Running")
        }),
        sender: Some(PodRecord {
            node: Some("node-2".into()),
            ..pod("volmig-op-sender-1", "Running")
        }),
        progress: Some(progress(40_067_072, 12)),
        prior: Some(0),
        log_tail: vec!["receiver: mover: authenticated session".into()],
    };
    close(
        &mut a,
        AttemptPhase::Aborted,
        Some("aborted by laptop/42".into()),
        None,
        &seen,
        at(9),
    );
    assert_eq!(a.bytes_done, 40_067_072);
    assert_eq!(a.rate, 4_450_000);
    assert_eq!(a.sender.node.as_deref(), Some("node-2"));
    assert_eq!(a.end_time, Some(at(9)));
    assert_eq!(a.elapsed_seconds, 9.0);
    assert_eq!(a.log_tail.len(), 1);
    // The operation's time is the attempts' time, the aborted one included.
    assert_eq!(recorded_elapsed(&[a.clone()]), 9.0);
    assert_eq!(total_elapsed(&[a], at(600)), 9.0);
}

#[test]
fn a_pod_seen_gone_keeps_the_node_it_ran_on() {
    let mut a = detached(1, t0());
    a.sender.node = Some("node-2".into());
    let seen = Seen {
        sender: Some(pod("volmig-op-sender-1", "Deleted")),
        ..Seen::default()
    };
    close(&mut a, AttemptPhase::Failed, None, Some(true), &seen, at(5));
    assert_eq!(a.sender.node.as_deref(), Some("node-2"));
    assert_eq!(a.sender.phase.as_deref(), Some("Deleted"));
}

#[test]
fn an_attempt_finalised_later_ends_when_its_pods_ended() {
    // Detached at t0; both pods done 30 s later; `resume` an hour after.
    let mut a = detached(1, t0());
    let seen = Seen {
        receiver: Some(finished("volmig-op-receiver-1", "node-1", 0, at(29))),
        sender: Some(finished("volmig-op-sender-1", "node-2", 0, at(30))),
        progress: Some(progress(100_000_000, 40)),
        ..Seen::default()
    };
    close(&mut a, AttemptPhase::Succeeded, None, None, &seen, at(3600));
    assert_eq!(a.end_time, Some(at(30)));
    assert_eq!(a.elapsed_seconds, 30.0);
}

#[test]
fn a_driver_watching_records_the_moment_it_saw_the_end() {
    // finishedAt is to the second: just seen, `now` is closer.
    let now = at(30) + SignedDuration::from_millis(700);
    let mut a = detached(1, t0());
    a.receiver = finished("volmig-op-receiver-1", "node-1", 0, at(30));
    a.sender = finished("volmig-op-sender-1", "node-2", 0, at(30));
    assert_eq!(end_time(&a, now), now);
    // A pod still running: the attempt ends when it is ended, now.
    a.receiver = pod("volmig-op-receiver-1", "Running");
    assert_eq!(end_time(&a, at(900)), at(900));
    // Never before it started.
    let mut early = detached(1, at(10));
    early.sender = finished("volmig-op-sender-1", "node-2", 1, at(9));
    early.receiver = finished("volmig-op-receiver-1", "node-1", 10, at(9));
    assert_eq!(end_time(&early, at(100)), at(10));
}

#[test]
fn a_running_attempt_s_time_counts_up_from_its_start() {
    let running = detached(2, at(100));
    assert_eq!(attempt_elapsed(&running, at(106)), 6.0);
    let mut aborted = detached(1, t0());
    aborted.phase = AttemptPhase::Aborted;
    aborted.elapsed_seconds = 9.0;
    let attempts = [aborted, running];
    assert_eq!(total_elapsed(&attempts, at(106)), 15.0);
    // The record keeps what has ended.
    assert_eq!(recorded_elapsed(&attempts), 9.0);
}

#[test]
fn progress_picked_up_never_goes_backwards() {
    let shown = progress(38_000_000, 15);
    let replayed = progress(32_000_000, 12);
    let newer = progress(39_000_000, 15);
    assert_eq!(newest(Some(&shown), Some(&replayed)), Some(&shown));
    assert_eq!(newest(Some(&shown), Some(&newer)), Some(&newer));
    assert_eq!(newest(None, Some(&replayed)), Some(&replayed));
    assert_eq!(newest(Some(&shown), None), Some(&shown));
    // A tie takes the fresh report (its rate and ETA are current).
    let same = Progress {
        rate: 1,
        ..shown.clone()
    };
    assert_eq!(newest(Some(&shown), Some(&same)), Some(&same));
}

fn failed_three_times(backoff_limit: u32) -> VolumeMigration {
    let spec = MigrationSpec::new(
        ClaimRef::new("default", "data"),
        ClaimRef::new("default", "data-fast"),
    );
    let mut vm = VolumeMigration {
        api_version: crate::record::API_VERSION.into(),
        kind: crate::record::KIND.into(),
        metadata: Metadata::default(),
        spec,
        status: MigrationStatus::default(),
    };
    vm.spec.retry.backoff_limit = backoff_limit;
    vm.status = MigrationStatus {
        phase: Phase::Failed,
        attempts: (1..=3)
            .map(|n| Attempt {
                number: n,
                phase: AttemptPhase::Failed,
                ..Attempt::default()
            })
            .collect(),
        ..MigrationStatus::default()
    };
    vm
}

#[test]
fn resume_of_a_failed_operation_shows_the_fresh_budget_it_grants() {
    let mut vm = failed_three_times(2);
    let spent = Budget::of(&vm);
    assert_eq!(spent.count(), "3 of 3");
    assert_eq!(spent.label(3), "attempt 3/3");
    assert_eq!(failures(&vm.status.attempts, spent.from), 3);

    // resume: the budget counts from attempt 4.
    vm.status.phase = Phase::Running;
    vm.status.budget_from = Some(4);
    vm.status.attempts.push(detached(4, t0()));
    let fresh = Budget::of(&vm);
    assert_eq!(fresh.count(), "1 of 3 since resume (4 in all)");
    assert_eq!(fresh.cell(), "1/3");
    assert_eq!(fresh.label(4), "attempt 4 (1/3 since resume)");
    assert_eq!(fresh.label(6), "attempt 6 (3/3 since resume)");
    assert_eq!(failures(&vm.status.attempts, fresh.from), 0);
}
