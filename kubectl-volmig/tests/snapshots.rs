//! Snapshot and clone sources end to end (issue 24), on the sandbox's CSI
//! class (`csi`, driver `csi.sandbox.volmig.io`, default VolumeSnapshotClass
//! `csi-snapclass`): a ReadWriteOncePod claim in use moved with `--cutover`
//! through a snapshot per pre-copy round, a copy taken while the app writes
//! that equals its snapshot, a clone, the refusals that create nothing, and
//! nothing left after success or after `abort` and `cleanup`.
//!
//! On another cluster (`VOLMIG_E2E_KUBECONFIG`) the class names are
//! `VOLMIG_E2E_CSI_CLASS` and `VOLMIG_E2E_SNAPSHOT_CLASS`; the checks of the
//! sandbox's snapshot directories are skipped there.

mod common;

use std::path::Path;

use common::app::{
    assert_gapless, await_running, await_sequence_past, bound_volume, claim_of, sequence,
    sequence_app, AppWatch,
};
use common::{
    create_bound, env, env_configured, everything_volmig_made, manifest, object, records, seed,
    volmig, volume_dir, wait_until, Env,
};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::Client;
use kube_sandbox::SandboxConfig;
use serde_json::json;
use volmig::plan::Method;
use volmig::record::{AttemptPhase, Phase, VolumeMigration};
use volmig::snapshots::{VolumeSnapshot, VolumeSnapshotClass};

fn snapshot_class() -> String {
    std::env::var("VOLMIG_E2E_SNAPSHOT_CLASS").unwrap_or_else(|_| "csi-snapclass".into())
}

/// A claim of the CSI class, 1Gi, Bound; its volume's directory.
async fn csi_claim(client: &Client, ns: &str, name: &str, mode: &str) -> std::path::PathBuf {
    common::csi_claim(client, ns, name, mode, "1Gi").await
}

/// What volmig made of the source's copies in `ns`, by label: snapshots
/// and the claims restored or cloned from them.
async fn copies_left(client: &Client, ns: &str) -> Vec<String> {
    let selector = "app.kubernetes.io/managed-by=kubectl-volmig,volmig.io/component=source-copy";
    let lp = ListParams::default().labels(selector);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let snapshots: Api<VolumeSnapshot> = Api::namespaced(client.clone(), ns);
    let mut out: Vec<String> = claims
        .list(&lp)
        .await
        .expect("claims")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name.map(|n| format!("claim/{n}")))
        .collect();
    out.extend(
        snapshots
            .list(&lp)
            .await
            .expect("snapshots")
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name.map(|n| format!("volumesnapshot/{n}"))),
    );
    out
}

/// The snapshots the sandbox's driver still keeps (each a directory).
fn snapshot_dirs(env: &Env) -> Vec<String> {
    let Some(sandbox) = &env.sandbox else {
        return Vec::new();
    };
    let root = sandbox.snapshot_dir("-");
    let root = root.parent().expect("the snapshots directory");
    match std::fs::read_dir(root) {
        Ok(entries) => entries
            .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Waits until volmig's copies are gone, and the driver's snapshots with
/// them (deletion is asynchronous).
async fn await_no_copies(env: &Env, client: &Client, ns: &str) {
    wait_until("the snapshots and their claims gone", || async {
        let left = copies_left(client, ns).await;
        (left.is_empty() && snapshot_dirs(env).is_empty()).then_some(())
    })
    .await;
}

fn only_operation(mut all: Vec<VolumeMigration>) -> VolumeMigration {
    assert_eq!(all.len(), 1, "one operation");
    all.remove(0)
}

/// A ReadWriteOncePod claim in use cannot be mounted by the sender: the
/// pre-copy rounds read a fresh snapshot each while the app runs, the
/// final sync reads the claim itself once the app is down, every write
/// is kept, and no snapshot or claim of the source is left.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_write_once_pod_claim_in_use_moves_with_cutover_through_snapshots() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_dir = csi_claim(&client, &ns, "data", "ReadWriteOncePod").await;
    sequence_app(&client, &ns, "app", "data").await;
    await_sequence_past(&old_dir, 20).await;
    let old_volume = bound_volume(&claim_of(&client, &ns, "data").await);
    let watch = AppWatch::start(&client, &ns, "app", "data");

    let args = [
        "migrate",
        "data",
        "--to-storage-class",
        "standard",
        "--cutover",
        "--max-downtime",
        "0s",
        "--precopy-rounds",
        "2",
    ];
    let run = volmig(&env, &args).await;
    let (wrong, _) = watch.finish().await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("reads    snapshot") && run.stderr.contains("in use by pod app-"),
        "the plan says why it reads snapshots: {}",
        run.stderr
    );
    assert!(
        wrong.is_empty(),
        "the app ran during the final sync: {wrong:?}"
    );

    // The claim is on the new volume, ReadWriteOncePod still; the app goes
    // on there from where it was.
    let claim = claim_of(&client, &ns, "data").await;
    let new_volume = bound_volume(&claim);
    assert_ne!(new_volume, old_volume);
    let spec = claim.spec.clone().expect("spec");
    assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
    assert_eq!(
        spec.access_modes,
        Some(vec!["ReadWriteOncePod".to_string()])
    );
    await_running(&client, &ns, "app").await;
    let new_dir = volume_dir(&client, &ns, "data").await;
    let before = sequence(&old_dir).len();
    let seq = await_sequence_past(&new_dir, before + 20).await;
    assert_gapless(&seq, "the sequence across the cutover");

    // Each pre-copy round read its own snapshot; the final sync none.
    let vm = only_operation(records(&client, &ns).await);
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:#?}", vm.status);
    let cutover = vm.status.cutover.as_ref().expect("cutover");
    assert_eq!(cutover.rounds.len(), 2, "{cutover:#?}");
    let (read_copies, direct): (Vec<_>, Vec<_>) =
        vm.status.attempts.iter().partition(|a| a.source.is_some());
    assert!(read_copies.len() >= 2, "{:#?}", vm.status.attempts);
    let mut snapshots: Vec<String> = Vec::new();
    for a in &read_copies {
        let copy = a.source.as_ref().expect("a copy");
        assert_eq!(copy.method, Method::Snapshot, "{a:#?}");
        assert!(
            copy.ready_at.is_some() && copy.restore_size.is_some(),
            "{a:#?}"
        );
        snapshots.push(copy.snapshot.clone().expect("its snapshot"));
    }
    snapshots.dedup();
    assert_eq!(snapshots.len(), read_copies.len(), "a snapshot per attempt");
    let last = vm.status.attempts.last().expect("attempts");
    assert!(
        last.source.is_none() && last.phase == AttemptPhase::Succeeded,
        "the final sync read the claim itself: {last:#?}"
    );
    assert!(!direct.is_empty());

    await_no_copies(&env, &client, &ns).await;
}

/// `--copy-method snapshot` while the app writes: the copy is the
/// snapshot's point in time (kept here by a Retain class to compare with),
/// not a mix of states, though the app went on writing all along.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_copy_taken_while_the_app_writes_equals_the_snapshot() {
    let env = env().await;
    if env.sandbox.is_none() {
        return; // the comparison reads the driver's snapshot directory
    }
    let client = env.client().await;
    let ns = env.namespace.clone();
    let retain: VolumeSnapshotClass = object(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
        "metadata": {"name": "retain"}, "driver": "csi.sandbox.volmig.io",
        "deletionPolicy": "Retain",
    }));
    Api::<VolumeSnapshotClass>::all(client.clone())
        .create(&PostParams::default(), &retain)
        .await
        .expect("class");
    let src = csi_claim(&client, &ns, "data", "ReadWriteOnce").await;
    seed(&src, 40, 64 * 1024);
    // Two files that only agree at a point in time: the sequence, then its
    // last number (renamed into place, so that a crash never leaves it
    // empty).
    let script = "n=0; while true; do n=$((n+1)); echo $n >> /data/seq; \
                  echo $n > /data/last.tmp; mv /data/last.tmp /data/last; sleep 0.01; done";
    let mut writer = common::app_pod_spec("writer", "data");
    writer["spec"]["containers"][0]["command"] = json!(["sh", "-c", script]);
    Api::<Pod>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &object(writer))
        .await
        .expect("writer");
    await_sequence_past(&src, 20).await;

    let args = [
        "migrate",
        "data",
        "--to",
        "copy",
        "--to-storage-class",
        "standard",
        "--copy-method",
        "snapshot",
        "--snapshot-class",
        "retain",
    ];
    let run = volmig(&env, &args).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);

    let vm = only_operation(records(&client, &ns).await);
    let attempt = &vm.status.attempts[0];
    let copy = attempt.source.as_ref().expect("it read a snapshot");
    assert_eq!(copy.method, Method::Snapshot);
    let kept = snapshot_dirs(&env);
    assert_eq!(
        kept.len(),
        1,
        "the Retain class keeps the snapshot: {kept:?}"
    );
    let snapshot_dir = env.sandbox().snapshot_dir(&kept[0]);
    let dst = volume_dir(&client, &ns, "copy").await;
    assert_eq!(
        manifest(&dst),
        manifest(&snapshot_dir),
        "the copy is the snapshot"
    );
    let seq = sequence(&dst);
    assert_gapless(&seq, "the copied sequence");
    let last: u64 = std::fs::read_to_string(dst.join("last"))
        .expect("last")
        .trim()
        .parse()
        .expect("a number");
    // One point in time: `last` is the sequence's end, or the number
    // before it when the snapshot came between the two writes; a copy of
    // the live volume would read `seq` and `last` at different moments.
    let end = seq.last().copied().unwrap_or_default();
    assert!(
        last == end || last + 1 == end,
        "last {last} and the sequence's end {end} are of one point in time"
    );
    assert!(
        sequence(&src).len() > seq.len(),
        "the app wrote on meanwhile, and the copy did not follow it"
    );
    // volmig's snapshot object went (the class kept the driver's copy).
    assert!(copies_left(&client, &ns).await.is_empty());
}

/// `--copy-method clone`: the copy reads a CSI clone of the source; a
/// driver that cannot clone fails the first attempt for good, in the
/// provisioner's words, and leaves nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_clone_copy_and_a_driver_that_cannot_clone() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let src = csi_claim(&client, &ns, "data", "ReadWriteOnce").await;
    seed(&src, 60, 16 * 1024);
    let args = [
        "migrate",
        "data",
        "--to",
        "copy",
        "--to-storage-class",
        "standard",
        "--copy-method",
        "clone",
    ];
    let run = volmig(&env, &args).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        manifest(&volume_dir(&client, &ns, "copy").await),
        manifest(&src)
    );
    let vm = only_operation(records(&client, &ns).await);
    let copy = vm.status.attempts[0].source.as_ref().expect("a clone");
    assert_eq!(copy.method, Method::Clone);
    assert_eq!(copy.snapshot, None);
    assert!(copy.ready_at.is_some(), "{copy:#?}");
    await_no_copies(&env, &client, &ns).await;

    if env.sandbox.is_none() {
        return;
    }
    let no_clones = env_configured(SandboxConfig {
        csi_clone: false,
        ..SandboxConfig::default()
    })
    .await;
    let client = no_clones.client().await;
    let src = csi_claim(&client, &ns, "data", "ReadWriteOnce").await;
    seed(&src, 5, 1024);
    let mut failing = args.to_vec();
    failing.extend(["--backoff-limit", "3", "--backoff", "1"]);
    let run = volmig(&no_clones, &failing).await;
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let vm = only_operation(records(&client, &ns).await);
    assert_eq!(vm.status.phase, Phase::Failed);
    assert_eq!(vm.status.attempts.len(), 1, "no retry fixes it");
    let reason = vm.status.attempts[0].reason.clone().unwrap_or_default();
    assert!(
        reason.contains("CSI driver does not support clone operations"),
        "{reason}"
    );
    assert_eq!(vm.status.attempts[0].retryable, Some(false));
    await_no_copies(&no_clones, &client, &ns).await;
}

/// Refusals before anything is created: a snapshot without a snapshot
/// class for the driver; and, without the snapshot API, `auto` reads a
/// clone of a ReadWriteOncePod claim in use (the dry run says so).
#[tokio::test(flavor = "multi_thread")]
async fn without_a_snapshot_class_a_snapshot_copy_is_refused_and_nothing_is_created() {
    let env = env().await;
    if env.sandbox.is_none() {
        return; // it deletes the cluster's snapshot class
    }
    let client = env.client().await;
    let ns = env.namespace.clone();
    csi_claim(&client, &ns, "data", "ReadWriteOnce").await;
    Api::<VolumeSnapshotClass>::all(client.clone())
        .delete(&snapshot_class(), &DeleteParams::default())
        .await
        .expect("class deleted");
    let run = volmig(&env, &["migrate", "data", "--copy-method", "snapshot"]).await;
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    for part in [
        "no VolumeSnapshotClass is the default",
        "csi.sandbox.volmig.io",
        "--snapshot-class NAME",
    ] {
        assert!(run.stderr.contains(part), "{part:?} in {}", run.stderr);
    }
    assert!(everything_volmig_made(&client, &ns).await.is_empty());
    assert!(copies_left(&client, &ns).await.is_empty());

    let no_api = env_configured(SandboxConfig {
        snapshots: false,
        ..SandboxConfig::default()
    })
    .await;
    let client = no_api.client().await;
    csi_claim(&client, &ns, "data", "ReadWriteOncePod").await;
    common::app_pod(&client, &ns, "db", "data", json!({})).await;
    let run = volmig(&no_api, &["migrate", "data", "--dry-run"]).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let plan = format!("{}{}", run.stdout, run.stderr);
    assert!(plan.contains("reads    clone"), "{plan}");
    assert!(plan.contains("in use by pod db"), "{plan}");
    let snapshot = volmig(&no_api, &["migrate", "data", "--copy-method", "snapshot"]).await;
    assert_eq!(snapshot.code, 1);
    assert!(
        snapshot
            .stderr
            .contains("does not serve the VolumeSnapshot API"),
        "{}",
        snapshot.stderr
    );
    assert!(everything_volmig_made(&client, &ns).await.is_empty());
}

/// A snapshot that never gets ready (its volume is gone from the driver)
/// fails the attempt after `--start-timeout`, with the driver's error in
/// the record.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_never_ready_fails_with_the_drivers_error_in_the_record() {
    let env = env().await;
    if env.sandbox.is_none() {
        return; // a static volume of the sandbox's driver
    }
    let client = env.client().await;
    let ns = env.namespace.clone();
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pv: PersistentVolume = object(json!({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "lost"},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "csi", "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": "csi.sandbox.volmig.io", "volumeHandle": "pvc-lost-on-the-backend"},
            "claimRef": {"namespace": ns, "name": "data"},
        },
    }));
    volumes
        .create(&PostParams::default(), &pv)
        .await
        .expect("pv");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvc: PersistentVolumeClaim = object(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "csi", "volumeName": "lost",
                 "resources": {"requests": {"storage": "1Gi"}}},
    }));
    create_bound(&claims, pvc).await;

    let args = [
        "migrate",
        "data",
        "--copy-method",
        "snapshot",
        "--start-timeout",
        "3",
        "--backoff-limit",
        "0",
    ];
    let run = volmig(&env, &args).await;
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let vm = only_operation(records(&client, &ns).await);
    let attempt = &vm.status.attempts[0];
    let reason = attempt.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("was not ready within 3s")
            && reason.contains("does not exist in the volumes list"),
        "{reason}"
    );
    let copy = attempt.source.as_ref().expect("the snapshot it asked for");
    assert!(copy.ready_at.is_none(), "{copy:#?}");
    assert!(
        copy.error
            .as_deref()
            .is_some_and(|e| e.contains("does not exist in the volumes list")),
        "{copy:#?}"
    );
    await_no_copies(&env, &client, &ns).await;
}

/// An operation aborted while its sender reads a snapshot (its client
/// killed: no driver cleans up), then `cleanup`: no snapshot, no claim of
/// the source's copies, no driver snapshot left.
#[tokio::test(flavor = "multi_thread")]
async fn nothing_is_left_after_abort_and_cleanup() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let src = csi_claim(&client, &ns, "data", "ReadWriteOnce").await;
    seed(&src, 12, 1024 * 1024);
    let args = [
        "migrate",
        "data",
        "--copy-method",
        "snapshot",
        "--bwlimit",
        "2M",
    ];
    let (child, op) = common::start_moving(&env, &client, &args, 1).await;
    common::kill(child).await;
    assert!(
        !copies_left(&client, &ns).await.is_empty(),
        "it reads a copy"
    );

    let abort = volmig(&env, &["abort", &op]).await;
    assert_eq!(abort.code, 0, "{}", abort.stderr);
    let cleanup = volmig(&env, &["cleanup", &op]).await;
    assert_eq!(cleanup.code, 0, "{}", cleanup.stderr);
    await_no_copies(&env, &client, &ns).await;
    let made = everything_volmig_made(&client, &ns).await;
    assert_eq!(made, ["claim/data-migrated"], "the destination is kept");
    assert!(!Path::new(&src).join(".volmig").exists());
}
