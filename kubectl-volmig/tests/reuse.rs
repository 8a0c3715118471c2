//! Destination reuse (issue 20). A `local` destination whose node goes
//! away mid-copy is waited for: no attempt is spent meanwhile, and when the
//! node is back the next attempt resumes there and sends only the rest. A
//! node that stays away past `--reuse-wait` gets the destination given up
//! for a fresh claim on another node, filled in full; `cleanup` removes the
//! old one. A destination the receiver cannot repair (a mount where a file
//! must go) fails `--reuse-limit` attempts, cannot be emptied either, and is
//! replaced; the data ends identical and the history says each step.
//!
//! These need a cluster whose nodes the test can take away: the sandbox.

mod common;

use std::time::Duration;

use common::{app_pod, claim, env_with, manifest, seed, volmig, volume_dir, wait_until, Env};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;
use kube::Client;
use kube_sandbox::sandbox::Taint;
use serde_json::json;
use volmig::record::store::RecordStore;
use volmig::record::{AttemptPhase, Phase, VolumeMigration};

const MIB: u64 = 1024 * 1024;

async fn record(client: &Client, ns: &str, op: &str) -> VolumeMigration {
    RecordStore::new(client.clone(), ns)
        .get(op)
        .await
        .expect("the record")
}

/// The node a bound claim's volume is pinned to.
async fn node_of_claim(client: &Client, ns: &str, claim: &str) -> String {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let volume = wait_until(&format!("claim {claim} bound"), || async {
        claims.get(claim).await.ok()?.spec?.volume_name
    })
    .await;
    let pv: PersistentVolume = Api::all(client.clone()).get(&volume).await.expect("pv");
    common::nodes::pinned_to(&pv).remove(0)
}

/// A source claim of 24 MiB in use by an app on node-1 (so the sender runs
/// there); node-1 is tainted for everyone but the app, so no receiver does.
async fn source_on_node_1() -> (Env, Client, String, std::path::PathBuf) {
    let taint: Taint = "node-1:app-only=yes:NoSchedule".parse().expect("taint");
    let env = env_with(vec![taint]).await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    seed(&src, 24, MIB as usize);
    let tolerate =
        json!([{"key": "app-only", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]);
    app_pod(
        &client,
        &ns,
        "app",
        "data",
        json!({"nodeName": "node-1", "tolerations": tolerate}),
    )
    .await;
    (env, client, ns, src)
}

/// A copy of `data` into a new `local` claim `copy` (`--reuse-wait
/// WAIT`), started in the background; once 6 MiB are across, the node its
/// volume was made on goes away (unreachable, its processes killed). The
/// client, the operation and that node.
async fn copy_until_its_node_goes(
    env: &Env,
    client: &Client,
    wait: &str,
) -> (tokio::process::Child, String, String) {
    let ns = &env.namespace;
    let args = [
        "migrate",
        "data",
        "--to",
        "copy",
        "--to-storage-class",
        "local",
        "--bwlimit",
        "3M",
        "--backoff",
        "1",
        "--reuse-wait",
        wait,
        "-o",
        "json",
    ];
    let child = common::spawn_volmig(env, &args);
    let op = common::first_operation(client, ns).await;
    common::await_progress(client, ns, &op, 1, 6 * MIB).await;
    let away = node_of_claim(client, ns, "copy").await;
    assert_ne!(away, "node-1", "node-1 takes no receiver");
    let sandbox = env.sandbox();
    sandbox.set_node_ready(&away, false).expect("node away");
    sandbox.kill_pods_on(&away);
    (child, op, away)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destination_whose_node_comes_back_is_reused_from_its_checkpoint() {
    let (env, client, ns, src) = source_on_node_1().await;
    let (child, op, away) = copy_until_its_node_goes(&env, &client, "10m").await;
    let sandbox = env.sandbox();

    // The driver waits: it says so, and starts no attempt meanwhile.
    let waiting = wait_until("the driver waiting for the node", || async {
        let vm = record(&client, &ns, &op).await;
        vm.status.destination_unavailable.clone()
    })
    .await;
    assert!(
        waiting.starts_with(&format!("waiting for {away} (destination volume")),
        "{waiting}"
    );
    let status = volmig(&env, &["status", &op]).await;
    assert!(
        status.stdout.contains(&format!("waiting for {away}")),
        "{}",
        status.stdout
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        record(&client, &ns, &op).await.status.attempts.len(),
        1,
        "an attempt spent waiting"
    );

    sandbox.set_node_ready(&away, true).expect("node back");
    let run = common::finish(child).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    assert_eq!(vm.status.destination_unavailable, None);
    assert!(vm.status.abandoned_destinations.is_empty());
    let last = vm.status.attempts.last().expect("attempts");
    assert_eq!(last.phase, AttemptPhase::Succeeded);
    assert_eq!(
        last.receiver.node.as_deref(),
        Some(away.as_str()),
        "resumed on its node"
    );
    assert!(last.bytes_prior >= 4 * MIB, "{last:#?}");
    let summary = vm.status.summary.as_ref().expect("summary");
    let total = 24 * MIB;
    eprintln!(
        "node back: reused {} of {total} bytes, sent {} after it",
        last.bytes_prior, summary.bytes_literal
    );
    assert!(
        summary.bytes_literal <= total - last.bytes_prior + MIB,
        "re-sent too much: {summary:?}, reused {}",
        last.bytes_prior
    );
    assert_eq!(
        manifest(&src),
        manifest(&volume_dir(&client, &ns, "copy").await)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_stays_away_gets_a_fresh_destination_and_cleanup_removes_the_old() {
    let (env, client, ns, src) = source_on_node_1().await;
    let (child, op, away) = copy_until_its_node_goes(&env, &client, "5s").await;
    let sandbox = env.sandbox();

    let run = common::finish(child).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    let given_up = &vm.status.abandoned_destinations;
    assert_eq!(given_up.len(), 1, "{given_up:?}");
    assert_eq!(given_up[0].name, "copy");
    assert!(
        given_up[0].reason.contains("--reuse-wait 5s"),
        "{}",
        given_up[0].reason
    );
    let fresh = vm
        .status
        .destination
        .as_ref()
        .expect("destination")
        .name
        .clone();
    assert_eq!(fresh, "copy-2");
    let last = vm.status.attempts.last().expect("attempts");
    assert_eq!(last.bytes_prior, 0, "a fresh destination is filled in full");
    assert!(last
        .destination_note
        .as_deref()
        .is_some_and(|n| n.starts_with("fresh claim copy-2")));
    assert_ne!(last.receiver.node.as_deref(), Some(away.as_str()));
    assert_eq!(
        manifest(&src),
        manifest(&volume_dir(&client, &ns, &fresh).await)
    );
    let status = volmig(&env, &["status", &op]).await;
    assert!(status.stdout.contains("Given up"), "{}", status.stdout);

    // The old claim is kept until cleanup; its node back, cleanup removes it.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    assert!(claims.get_opt("copy").await.expect("get").is_some());
    sandbox.set_node_ready(&away, true).expect("node back");
    let run = volmig(&env, &["cleanup", &op]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("given-up destination claim"),
        "{}",
        run.stdout
    );
    wait_until("the given-up claim gone", || async {
        claims
            .get_opt("copy")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        claims.get_opt(&fresh).await.expect("get").is_some(),
        "the fresh one is kept"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_to_another_node_replaces_the_destination_at_once() {
    let (env, client, ns, src) = source_on_node_1().await;
    let (child, op, away) = copy_until_its_node_goes(&env, &client, "10m").await;
    let other = ["node-2", "node-3"]
        .into_iter()
        .find(|n| *n != away)
        .expect("another node");
    let sandbox = env.sandbox();
    wait_until("the driver waiting for the node", || async {
        record(&client, &ns, &op)
            .await
            .status
            .destination_unavailable
    })
    .await;
    // The user will not wait ten minutes: the client goes, and resume
    // asks for a destination on the other node.
    common::kill(child).await;
    let run = volmig(&env, &["resume", &op, "--to-node", other, "-o", "json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    let given_up = &vm.status.abandoned_destinations;
    assert_eq!(given_up.len(), 1, "{given_up:?}");
    assert_eq!(
        given_up[0].reason,
        format!("asked by resume: --to-node {other}")
    );
    let last = vm.status.attempts.last().expect("attempts");
    assert_eq!(last.receiver.node.as_deref(), Some(other));
    let placed = vm
        .status
        .placement
        .as_ref()
        .map(|p| p.receiver.node.clone());
    assert_eq!(
        placed,
        Some(Some(other.to_string())),
        "the receiver pinned where asked"
    );
    assert_eq!(last.bytes_prior, 0);
    assert_eq!(vm.status.destination_change, None);
    assert_eq!(vm.status.destination_unavailable, None);
    assert_eq!(node_of_claim(&client, &ns, "copy-2").await, other);
    assert_eq!(
        manifest(&src),
        manifest(&volume_dir(&client, &ns, "copy-2").await)
    );
    sandbox.set_node_ready(&away, true).expect("node back");
}

/// A source whose last entry, `zzz`, comes after 8 MiB in `aaa/`.
fn seed_with_last_entry(src: &std::path::Path) {
    seed(&src.join("aaa"), 8, MIB as usize);
    std::fs::write(src.join("zzz"), b"the last entry").expect("write");
}

/// Mounts a tmpfs on `dir/zzz` (made a directory): where the source has a
/// file, a mount point the receiver can neither replace nor remove.
fn block_last_entry(dir: &std::path::Path) -> Unmount {
    let blocker = dir.join("zzz");
    std::fs::create_dir_all(&blocker).expect("dir");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&blocker)
        .status()
        .expect("mount runs");
    assert!(
        mounted.success(),
        "mounting needs root, as the sandbox does"
    );
    Unmount(blocker)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destination_that_cannot_be_repaired_is_replaced_after_the_reuse_limit() {
    let env = env_with(Vec::new()).await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    seed_with_last_entry(&src);

    // A claim given with --reuse is the user's: after --reuse-limit
    // failures on its data it is neither emptied nor replaced.
    claim(&client, &ns, "copy", "ReadWriteOnce", "1Gi").await;
    let _unmount = block_last_entry(&volume_dir(&client, &ns, "copy").await);
    let args = [
        "migrate",
        "data",
        "--to",
        "copy",
        "--reuse",
        "--backoff",
        "1",
        "--reuse-limit",
        "2",
        "--backoff-limit",
        "6",
        "-o",
        "json",
    ];
    let run = volmig(&env, &args).await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    let vm = run.operation();
    let message = vm.status.message.clone().unwrap_or_default();
    assert!(message.contains("it is yours (--reuse)"), "{message}");
    // Before the first attempt, it said what the claim held.
    let held = vm.status.reusable.clone().unwrap_or_default();
    assert!(held.starts_with("no checkpoint"), "{held}");
    let faults = vm
        .status
        .attempts
        .iter()
        .filter(|a| a.destination_fault)
        .count();
    assert_eq!(faults, 2, "{:#?}", vm.status.attempts);
    assert!(!vm.status.attempts.iter().any(|a| a.wipe));
    let cleaned = volmig(&env, &["cleanup", &vm.metadata.name]).await;
    assert_eq!(cleaned.code, 0, "{}", cleaned.stderr);

    // The same damage in a destination volmig made. A pod sees the mounts
    // its volume had when it started, so the damage is done between two
    // attempts: attempt 1's sender is killed early (a transient failure,
    // which counts neither way), then two attempts fail on `zzz`, the
    // fourth empties the destination first, which the mount stops, and the
    // fifth copies in full into a fresh claim. (The backoff between them
    // grows as for any failure: `backoff` is tested in the driver. One
    // second is ample for the mount, made right after the kill, to come
    // before attempt 2's receiver starts; `--backoff 2` only doubled the
    // four waits, 15 s more.)
    let args = [
        "migrate",
        "data",
        "--to",
        "made",
        "--bwlimit",
        "2M",
        "--backoff",
        "1",
        "--reuse-limit",
        "2",
        "--backoff-limit",
        "6",
        "-o",
        "json",
    ];
    let child = common::spawn_volmig(&env, &args);
    let op = common::first_operation(&client, &ns).await;
    common::await_progress(&client, &ns, &op, 1, MIB).await;
    let sender = volmig::names::pod_name(&op, volmig::names::Component::Sender, 1);
    assert!(common::kill_pod_process(&sender), "no process for {sender}");
    let _unmount_made = block_last_entry(&volume_dir(&client, &ns, "made").await);
    let run = common::finish(child).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    let attempts = &vm.status.attempts;
    let kinds: Vec<(bool, bool, AttemptPhase)> = attempts
        .iter()
        .map(|a| (a.destination_fault, a.wipe, a.phase))
        .collect();
    assert_eq!(
        kinds,
        [
            (false, false, AttemptPhase::Failed),
            (true, false, AttemptPhase::Failed),
            (true, false, AttemptPhase::Failed),
            (true, true, AttemptPhase::Failed),
            (false, false, AttemptPhase::Succeeded),
        ],
        "{attempts:#?}"
    );
    let wipe = &attempts[3];
    assert!(
        wipe.reason
            .as_deref()
            .is_some_and(|r| r.contains("cannot wipe")),
        "{wipe:#?}"
    );
    let note = wipe.destination_note.as_deref().unwrap_or_default();
    assert!(
        note.starts_with("wiped: 2 attempts in a row failed on its data"),
        "{note}"
    );
    let last = &attempts[4];
    let note = last.destination_note.as_deref().unwrap_or_default();
    assert!(note.contains("its data could not be removed"), "{note}");
    let fresh = vm
        .status
        .destination
        .as_ref()
        .expect("destination")
        .name
        .clone();
    assert_eq!(fresh, "made-2");
    assert_eq!(
        manifest(&src),
        manifest(&volume_dir(&client, &ns, &fresh).await)
    );
}

/// Unmounts a test's file system when the test ends, however it ends.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}
