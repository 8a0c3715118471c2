//! Leaving and coming back: Ctrl-C leaves the operation running and a
//! second invocation resumes it; abort stops it and resume finishes it.

mod common;

use common::{claim, env, leftovers, manifest, records, seed, volume_dir, wait_until, MOVER_IMAGE};
use volmig::record::{AttemptPhase, Phase};

const MIB: u64 = 1024 * 1024;

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_leaves_it_running_and_resume_reattaches() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    seed(&src, 12, MIB as usize);

    let args = [
        "migrate",
        "data",
        "--mover-image",
        MOVER_IMAGE,
        "--bwlimit",
        "2M",
    ];
    let (child, op) = common::start_moving(&env, &client, &args, 1).await;
    let pid = child.id().expect("pid") as i32;
    // SAFETY: kill(2) takes plain integers.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let run = common::finish(child).await;
    assert_eq!(run.code, 130, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("kubectl volmig resume {op}")),
        "{}",
        run.stderr
    );
    let record = &records(&client, &ns).await[0];
    assert_eq!(record.status.phase, Phase::Running);
    assert!(record.status.driver.is_none(), "the lease was not released");
    assert!(
        !leftovers(&client, &ns).await.is_empty(),
        "the pods must keep running"
    );

    let run = common::volmig(&env, &["resume", &op, "-o", "json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let done = run.operation();
    assert_eq!(
        done.status.phase,
        Phase::Succeeded,
        "{:?}",
        done.status.message
    );
    // The running attempt was adopted, not restarted.
    assert_eq!(done.status.attempts.len(), 1, "{:#?}", done.status.attempts);
    assert_eq!(leftovers(&client, &ns).await, Vec::<String>::new());
    let dst = volume_dir(&client, &ns, "data-migrated").await;
    assert_eq!(manifest(&dst), manifest(&src));
}

#[tokio::test(flavor = "multi_thread")]
async fn abort_keeps_the_data_and_resume_finishes_it() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    seed(&src, 12, MIB as usize);

    let run = common::volmig(
        &env,
        &[
            "migrate",
            "data",
            "--mover-image",
            MOVER_IMAGE,
            "--bwlimit",
            "2M",
            "--detach",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation().metadata.name;
    // One operation at a time per destination.
    let second = common::volmig(&env, &["migrate", "data", "--mover-image", MOVER_IMAGE]).await;
    assert_eq!(second.code, 1, "{}", second.stderr);
    assert!(
        second
            .stderr
            .contains(&format!("kubectl volmig resume {op}")),
        "{}",
        second.stderr
    );
    assert_eq!(records(&client, &ns).await.len(), 1);
    common::await_progress(&client, &ns, &op, 1, 2 * MIB).await;

    let run = common::volmig(&env, &["abort", &op, "-o", "json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let aborted = run.operation();
    assert_eq!(aborted.status.phase, Phase::Aborted);
    assert_eq!(aborted.status.attempts[0].phase, AttemptPhase::Aborted);
    wait_until("the pods gone", || async {
        leftovers(&client, &ns).await.is_empty().then_some(())
    })
    .await;

    let run = common::volmig(&env, &["resume", &op, "-o", "json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let done = run.operation();
    assert_eq!(
        done.status.phase,
        Phase::Succeeded,
        "{:?}",
        done.status.message
    );
    assert_eq!(done.status.attempts.len(), 2, "{:#?}", done.status.attempts);
    // The second attempt resumed what the aborted one had copied.
    assert!(
        done.status.attempts[1].bytes_prior >= 2 * MIB,
        "{:#?}",
        done.status.attempts[1]
    );
    let dst = volume_dir(&client, &ns, "data-migrated").await;
    assert_eq!(manifest(&dst), manifest(&src));
}
