//! Attempts: a sender killed mid-transfer twice; attempts 2 and 3 resume
//! from the receiver's checkpoint, and the record tells all three. A
//! destination too small for the data (`--allow-shrink`) fails at once.

mod common;

use common::{claim, env, manifest, seed, volume_dir, MOVER_IMAGE};
use volmig::names::{pod_name, Component};
use volmig::record::{AttemptPhase, Phase};

const MIB: u64 = 1024 * 1024;

#[tokio::test(flavor = "multi_thread")]
async fn killed_senders_resume_from_the_checkpoint() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    seed(&src, 24, MIB as usize);
    let total = 24 * MIB;

    let child = common::spawn_volmig(
        &env,
        &[
            "migrate",
            "data",
            "--mover-image",
            MOVER_IMAGE,
            "--bwlimit",
            "3M",
            "--backoff",
            "1",
            "-o",
            "json",
        ],
    );
    let op = common::first_operation(&client, &ns).await;
    // Kill attempt 1's sender, then attempt 2's, each once it has moved
    // a few MiB more than the last.
    let mut floor = 0;
    for attempt in 1..=2 {
        let sender = pod_name(&op, Component::Sender, attempt);
        floor = common::await_progress(&client, &ns, &op, attempt, floor + 4 * MIB).await;
        assert!(
            floor < total,
            "attempt {attempt} finished before it was killed"
        );
        assert!(common::kill_pod_process(&sender), "no process for {sender}");
    }
    let run = common::finish(child).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation();
    assert_eq!(op.status.phase, Phase::Succeeded, "{:?}", op.status.message);
    let attempts = &op.status.attempts;
    assert_eq!(attempts.len(), 3, "{attempts:#?}");
    for failed in &attempts[..2] {
        assert_eq!(failed.phase, AttemptPhase::Failed);
        assert_eq!(failed.sender.exit_code, Some(137), "{failed:#?}");
        assert_eq!(failed.retryable, Some(true));
        let reason = failed.reason.as_deref().unwrap_or("");
        assert!(reason.contains("sender exited 137"), "{reason}");
        assert!(failed.receiver.exit_code.is_some(), "{failed:#?}");
        assert!(!failed.log_tail.is_empty());
    }
    assert_eq!(attempts[2].phase, AttemptPhase::Succeeded);
    // Attempts 2 and 3 started from what the earlier ones had verified...
    assert!(attempts[1].bytes_prior >= 4 * MIB, "{:#?}", attempts[1]);
    assert!(
        attempts[2].bytes_prior >= attempts[1].bytes_prior + 4 * MIB,
        "{:#?}",
        attempts[2]
    );
    // ... so the last one sent only the rest (1 MiB of slack: a checkpoint
    // is written per MiB of progress).
    let summary = op.status.summary.as_ref().expect("summary");
    assert!(
        summary.bytes_literal <= total - attempts[2].bytes_prior + MIB,
        "re-sent too much: {summary:?}, started from {} done by earlier attempts",
        attempts[2].bytes_prior
    );
    // Each attempt's time, from its recorded start to its end.
    for a in attempts {
        let (start, end) = (a.start_time.expect("start"), a.end_time.expect("end"));
        let span = end.duration_since(start).as_secs_f64();
        assert!((a.elapsed_seconds - span).abs() < 0.5, "{a:#?}");
    }
    // The failed attempts' pods are gone; their last lines are not.
    let logs = common::volmig(&env, &["logs", &op.metadata.name, "--attempt", "1"]).await;
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    assert!(logs.stderr.contains("is gone"), "{}", logs.stderr);
    assert!(logs.stdout.contains("mover: "), "{}", logs.stdout);
    let dst = volume_dir(&client, &ns, "data-migrated").await;
    assert_eq!(manifest(&dst), manifest(&src));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shrunk_destination_the_data_does_not_fit_fails_before_it_fills() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    seed(&src, 20, 100 * 1024);

    // About 2 MiB of files into a 1Mi claim: the local volumes here do not
    // enforce a capacity, so only the receiver's own check can stop it.
    let run = common::volmig(
        &env,
        &[
            "migrate",
            "data",
            "--to-size",
            "1Mi",
            "--allow-shrink",
            "--mover-image",
            MOVER_IMAGE,
            "--backoff",
            "1",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    let op = run.operation();
    assert_eq!(op.status.phase, Phase::Failed);
    let attempts = &op.status.attempts;
    assert_eq!(attempts.len(), 1, "not retried: {attempts:#?}");
    assert_eq!(attempts[0].retryable, Some(false));
    assert_eq!(attempts[0].receiver.exit_code, Some(11), "{attempts:#?}");
    let message = op.status.message.as_deref().unwrap_or("");
    for words in [
        "do not fit in the destination",
        "more than its 1048576 (--capacity, 1.0 MiB)",
        "the destination is full",
    ] {
        assert!(message.contains(words), "{words:?} not in {message}");
    }
    // It stopped before the claim was full: less than 1 MiB was written.
    let dst = volume_dir(&client, &ns, "data-migrated").await;
    let written = bytes_under(&dst);
    assert!(written <= MIB, "{written} bytes written into a 1Mi claim");
}

/// The bytes of the files under `dir` (the receiver's own state aside).
fn bytes_under(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let entry = entry.expect("entry");
        let meta = entry.metadata().expect("metadata");
        if meta.is_dir() && entry.file_name() != ".volmig" {
            total += bytes_under(&entry.path());
        } else if meta.is_file() {
            total += meta.len();
        }
    }
    total
}
