//! Leaving and coming back: Ctrl-C leaves the operation running and a
//! second invocation adopts it, until an abort from elsewhere; abort of a
//! detached operation records what it did, and resume finishes it with a
//! fresh budget, detached again.

mod common;

use std::time::Duration;

use common::{claim, env, leftovers, manifest, records, seed, volume_dir, wait_until, MOVER_IMAGE};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use volmig::names::{pod_name, Component};
use volmig::record::{AttemptPhase, Phase};

const MIB: u64 = 1024 * 1024;

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_leaves_it_running_and_resume_reattaches() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    seed(&src, 24, MIB as usize);
    let total = 24 * MIB + (0..24).sum::<u64>();

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
    // The sender had started: it copies on, and the message says so.
    assert!(
        run.stderr.contains(&format!(
            "operation {op} keeps running in the cluster: attempt 1 copies without a driver.\n\
             Reattach with: kubectl volmig resume {op}"
        )),
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

    // It copied on without a driver; resume adopts the attempt there.
    let floor = common::await_progress(&client, &ns, &op, 1, 4 * MIB).await;
    let resumed = common::spawn_volmig(&env, &["resume", &op]);
    wait_until("resume drives it", || async {
        records(&client, &ns).await[0].status.driver.clone()
    })
    .await;
    common::await_progress(&client, &ns, &op, 1, floor + 3 * MIB).await;
    // Aborted from elsewhere while resume drives it.
    let abort = common::volmig(&env, &["abort", &op, "-o", "json"]).await;
    assert_eq!(abort.code, 0, "{}", abort.stderr);
    let run = common::finish(resumed).await;
    assert_eq!(run.code, 4, "{}", run.stderr);
    // The attempt was adopted, not restarted.
    assert_eq!(abort.operation().status.attempts.len(), 1);
    // resume tells the operation as it is, not its first plan.
    assert!(
        run.stderr.contains(&format!(
            "operation {op}: {ns}/data to {ns}/data-migrated\n  attempt 1 was left running; \
             taking it over\n"
        )),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("new claim"), "{}", run.stderr);
    // Its progress starts from the newest the log held, and never goes back.
    let percents = progress_percents(&run.stderr, 1);
    let floor_percent = (floor * 100 / total) as f64;
    assert!(
        percents.first().is_some_and(|p| *p >= floor_percent),
        "started below {floor_percent}%: {}",
        run.stderr
    );
    assert!(percents.windows(2).all(|w| w[0] <= w[1]), "{}", run.stderr);
    // It ends saying who aborted it, not with a progress line.
    let last = run.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!("operation {op} was aborted by ")),
        "{}",
        run.stderr
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
    assert_eq!(done.status.attempts.len(), 2, "{:#?}", done.status.attempts);
    assert_eq!(leftovers(&client, &ns).await, Vec::<String>::new());
    let dst = volume_dir(&client, &ns, "data-migrated").await;
    assert_eq!(manifest(&dst), manifest(&src));
}

/// The percentages of attempt `attempt`'s plain progress lines
/// (`attempt 1: 10.7 MiB / 36.2 MiB (30%), ...`), in order.
fn progress_percents(stderr: &str, attempt: u32) -> Vec<f64> {
    let prefix = format!("attempt {attempt}: ");
    stderr
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let open = l.find(" (")? + 2;
            let close = open + l[open..].find("%)")?;
            l[open..close].parse().ok()
        })
        .collect()
}

/// Whether pod `name` exists and its container has finished.
async fn finished(client: &kube::Client, ns: &str, name: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let Ok(Some(pod)) = pods.get_opt(name).await else {
        return false;
    };
    pod.status
        .and_then(|s| s.container_statuses)
        .into_iter()
        .flatten()
        .all(|c| c.state.and_then(|s| s.terminated).is_some())
}

#[tokio::test(flavor = "multi_thread")]
async fn abort_keeps_the_data_and_resume_finishes_it() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    seed(&src, 12, MIB as usize);

    // A client that goes away mid-copy (killed: nothing releases its
    // lease) leaves attempt 1 running without a driver.
    let args = [
        "migrate",
        "data",
        "--mover-image",
        MOVER_IMAGE,
        "--bwlimit",
        "2M",
    ];
    let (child, op) = common::start_moving(&env, &client, &args, 1).await;
    common::kill(child).await;
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
    // No client drove it: abort records what the attempt did, and who
    // aborted it.
    let first = &aborted.status.attempts[0];
    assert_eq!(first.phase, AttemptPhase::Aborted);
    assert!(first.bytes_done >= 2 * MIB, "{first:#?}");
    assert!(first.rate > 0, "{first:#?}");
    assert!(first.sender.node.is_some(), "{first:#?}");
    assert!(first.elapsed_seconds > 0.0, "{first:#?}");
    assert_eq!(aborted.status.elapsed_seconds, first.elapsed_seconds);
    let who = aborted.status.aborted_by.clone().expect("who aborted");
    assert_eq!(first.reason, Some(format!("aborted by {who}")));
    wait_until("the pods gone", || async {
        leftovers(&client, &ns).await.is_empty().then_some(())
    })
    .await;

    // resume grants a fresh budget; its client goes away too.
    let resuming = common::spawn_volmig(&env, &["resume", &op]);
    common::await_progress(&client, &ns, &op, 2, 3 * MIB).await;
    let run = common::kill(resuming).await;
    assert!(
        run.stderr.contains(
            "Aborted after 1 attempt; running it again with a fresh budget of 7 attempts"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("attempt 2 (1/7 since resume): sender"),
        "{}",
        run.stderr
    );
    let status = common::volmig(&env, &["status", &op]).await;
    assert!(
        status
            .stdout
            .contains("Attempts:      1 of 7 since resume (2 in all)\n"),
        "{}",
        status.stdout
    );
    // Attempt 2 ends without a driver; resume, later, records when it did.
    let receiver = pod_name(&op, Component::Receiver, 2);
    let sender = pod_name(&op, Component::Sender, 2);
    let ended_by = wait_until("attempt 2's pods finished", || async {
        let done = finished(&client, &ns, &receiver).await && finished(&client, &ns, &sender).await;
        done.then(Timestamp::now)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

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
    let second = &done.status.attempts[1];
    // The second attempt resumed what the aborted one had copied...
    assert!(second.bytes_prior >= 2 * MIB, "{second:#?}");
    // ... and ended when its pods did, not when resume came.
    assert!(
        second.end_time.is_some_and(|t| t <= ended_by),
        "ended {:?}, pods seen done at {ended_by}",
        second.end_time
    );
    let dst = volume_dir(&client, &ns, "data-migrated").await;
    assert_eq!(manifest(&dst), manifest(&src));
}
