//! Invariant 4 of the cutover: the plugin killed at every step boundary
//! and in the middle of the swap, then `resume` finishes the move, or
//! `rollback` restores the original claim, volume, data and replicas;
//! either way no acknowledged write is lost and the old volume is never
//! deleted before commit.

mod common;

use std::path::PathBuf;

use common::app::{
    assert_gapless, await_running, await_sequence_past, bound_volume, claim_of, cutover, policy,
    replicas, running_app, sequence, volume,
};
use common::{env, records, volmig, volmig_with, volume_dir, Env};
use futures::stream::{self, StreamExt};
use kube::Client;
use volmig::driver::cutover::CRASH_AT;
use volmig::record::cutover::Step;
use volmig::record::Phase;

/// Where the forward run dies: every step boundary, and each change of
/// the swap (the claims named as the case names them).
const FORWARD: &[&str] = &[
    "step:Quiesce",
    "quiesce:ScaleDown",
    "step:FinalSync",
    "step:Swap",
    "swap:Retain",
    "swap:DeleteClaim {claim}-migrated",
    "swap:DeleteClaim {claim}",
    "swap:FreeVolume",
    "swap:CreateClaim",
    "step:Restore",
    "step:AwaitingCommit",
];

/// How many cases of a test run at once. Each has its own app, claims and
/// operation, and spends most of its time waiting on pods and polls, so
/// running them one after another (27 cutovers) was most of this file's
/// time; a few at a time keeps a two-core machine busy without starving
/// the sandbox.
const AT_ONCE: usize = 4;

/// One case: app and claim of its own, a cutover killed at `point`.
struct Case {
    claim: String,
    app: String,
    old_dir: PathBuf,
    old_volume: String,
    op: String,
}

async fn crashed_cutover(env: &Env, client: &Client, n: usize, point: &str) -> Case {
    let ns = &env.namespace;
    let claim = format!("data{n}");
    let app = format!("app{n}");
    let old_dir = running_app(client, ns, &claim, &app).await;
    let old_volume = bound_volume(&claim_of(client, ns, &claim).await);
    let point = point.replace("{claim}", &claim);
    let run = cutover(env, &[(CRASH_AT, point.as_str())], &claim, &[]).await;
    assert_ne!(run.code, 0, "killed at {point}: {}", run.stderr);
    assert!(
        run.stderr.contains("crash point"),
        "never reached {point}: {}",
        run.stderr
    );
    let op = records(client, ns)
        .await
        .into_iter()
        .find(|r| r.spec.source.name == claim)
        .expect("the operation is recorded")
        .metadata
        .name;
    // Invariant 1: the old volume and its data are there.
    let old = volume(client, &old_volume).await.expect("old volume kept");
    assert!(old_dir.exists(), "{point}: the old volume's data is gone");
    assert!(policy(&old) == "Retain" || policy(&old) == "Delete");
    Case {
        claim,
        app,
        old_dir,
        old_volume,
        op,
    }
}

/// Resume finishes the move (the killed client's lease is taken over at
/// once: it was a process of this machine, and it is gone): the claim on the new volume, the app on it,
/// every write kept.
async fn resume_finishes(env: &Env, client: &Client, case: &Case, point: &str) {
    let ns = &env.namespace;
    let run = volmig(env, &["resume", &case.op, "-o", "json"]).await;
    assert_eq!(run.code, 0, "{point}: {}", run.stderr);
    let vm = run.operation();
    assert_eq!(
        vm.status.phase,
        Phase::Succeeded,
        "{point}: {:?}",
        vm.status.message
    );
    let c = vm.status.cutover.as_ref().expect("cutover");
    assert_eq!(c.step, Step::AwaitingCommit, "{point}");
    let claim = claim_of(client, ns, &case.claim).await;
    let new_volume = bound_volume(&claim);
    assert_ne!(new_volume, case.old_volume, "{point}");
    assert!(
        volume(client, &case.old_volume).await.is_some(),
        "{point}: old volume deleted"
    );
    assert_eq!(replicas(client, ns, &case.app).await, 1, "{point}");
    await_running(client, ns, &case.app).await;
    let before = sequence(&case.old_dir);
    assert_gapless(&before, point);
    let new_dir = volume_dir(client, ns, &case.claim).await;
    let after = await_sequence_past(&new_dir, before.len() + 5).await;
    assert_gapless(&after, point);
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "{point}: a write before the stop is missing"
    );
}

/// Rollback restores the original: the claim on the old volume with its
/// policy, the app on it, going on from its last number.
async fn rollback_restores(env: &Env, client: &Client, case: &Case, point: &str) {
    let ns = &env.namespace;
    let run = volmig(env, &["rollback", &case.op, "-o", "json"]).await;
    assert_eq!(run.code, 0, "{point}: {}", run.stderr);
    let vm = run.operation();
    assert_eq!(
        vm.status.phase,
        Phase::RolledBack,
        "{point}: {:?}",
        vm.status.message
    );
    let claim = claim_of(client, ns, &case.claim).await;
    assert_eq!(bound_volume(&claim), case.old_volume, "{point}");
    let old = volume(client, &case.old_volume).await.expect("old volume");
    assert_eq!(
        policy(&old),
        "Delete",
        "{point}: the old volume's policy is back"
    );
    assert_eq!(replicas(client, ns, &case.app).await, 1, "{point}");
    await_running(client, ns, &case.app).await;
    let before = sequence(&case.old_dir).len();
    let after = await_sequence_past(&case.old_dir, before + 5).await;
    assert_gapless(&after, point);
}

/// What a test does with each cutover it killed.
#[derive(Clone, Copy)]
enum Then {
    Resume,
    RollBack,
}

/// Kills a cutover at every forward point, `AT_ONCE` cases at a time, and
/// then resumes or rolls back each.
async fn kill_at_every_point(then: Then) {
    let env = env().await;
    let client = env.client().await;
    stream::iter(FORWARD.iter().enumerate())
        .for_each_concurrent(AT_ONCE, |(n, point)| {
            let (env, client) = (&env, &client);
            async move {
                let case = crashed_cutover(env, client, n, point).await;
                match then {
                    Then::Resume => resume_finishes(env, client, &case, point).await,
                    Then::RollBack => rollback_restores(env, client, &case, point).await,
                }
            }
        })
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_anywhere_then_resumed_the_cutover_completes() {
    kill_at_every_point(Then::Resume).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_anywhere_then_rolled_back_the_original_is_restored() {
    kill_at_every_point(Then::RollBack).await;
}

/// A rollback killed half-way is finished by running rollback again: the
/// writes made on the new volume still come back.
#[tokio::test(flavor = "multi_thread")]
async fn a_rollback_killed_half_way_finishes_when_asked_again() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let points = [
        "rollback:ScaleDown",
        "rollback:Retain",
        "rollback:FreeVolume",
        "rollback:DeleteClaim {claim}",
        "rollback:CreateClaim {claim}",
    ];
    stream::iter(points.iter().enumerate())
        .for_each_concurrent(AT_ONCE, |(n, point)| {
            let (env, client, ns) = (&env, &client, &ns);
            async move {
                let claim = format!("data{n}");
                let app = format!("app{n}");
                let old_dir = running_app(client, ns, &claim, &app).await;
                let run = cutover(env, &[], &claim, &["-o", "json"]).await;
                assert_eq!(run.code, 0, "{}", run.stderr);
                let op = run.operation().metadata.name;
                await_running(client, ns, &app).await;
                let new_dir = volume_dir(client, ns, &claim).await;
                let on_old = sequence(&old_dir).len();
                await_sequence_past(&new_dir, on_old + 20).await;
                let point = point.replace("{claim}", &claim);
                let run = volmig_with(env, &[(CRASH_AT, point.as_str())], &["rollback", &op]).await;
                assert_ne!(run.code, 0, "killed at {point}: {}", run.stderr);
                assert!(
                    run.stderr.contains("crash point"),
                    "never reached {point}: {}",
                    run.stderr
                );
                let run = volmig(env, &["rollback", &op, "-o", "json"]).await;
                assert_eq!(run.code, 0, "{point}: {}", run.stderr);
                assert_eq!(run.operation().status.phase, Phase::RolledBack, "{point}");
                await_running(client, ns, &app).await;
                let on_new = sequence(&new_dir);
                assert_gapless(&on_new, &point);
                let after = await_sequence_past(&old_dir, on_new.len() + 5).await;
                assert_gapless(&after, &point);
                assert_eq!(
                    &after[..on_new.len()],
                    &on_new[..],
                    "{point}: writes on the new volume lost"
                );
            }
        })
        .await;
}
