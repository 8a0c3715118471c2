//! Block claims (`volumeMode: Block`) end to end: an app that writes
//! numbered records to its device is cut over to another class and goes on
//! from its last record on the new device; a killed attempt's successor
//! starts from the checkpoint its receiver told; a Block claim is never
//! copied into a Filesystem one.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use common::app::{await_running, bound_volume, claim_of, cutover, volume};
use common::{env, object, records, volmig, wait_until, MOVER_IMAGE};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;
use kube::Client;
use serde_json::json;
use volmig::names::{pod_name, Component};
use volmig::record::cutover::Step;
use volmig::record::{AttemptPhase, Phase};

const MIB: u64 = 1 << 20;
const RECORD: u64 = 4096;

/// Record `n` (from 1) in block `n` of the device, its number in block 0,
/// each written and synced before the next; on start the app goes on from
/// the number in block 0. A write lost across a move shows as a record
/// missing or a number repeated.
const DISK_SCRIPT: &str = "trap 'exit 0' TERM; \
    n=$(dd if=/dev/app-disk bs=4096 count=1 2>/dev/null | tr -d '\\000' | head -n 1); n=${n:-0}; \
    while true; do n=$((n+1)); \
    printf '%s\\n' $n | dd of=/dev/app-disk bs=4096 seek=$n conv=notrunc,fsync 2>/dev/null; \
    printf '%s\\n' $n | dd of=/dev/app-disk bs=4096 seek=0 conv=notrunc,fsync 2>/dev/null; \
    sleep 0.05; done";

/// `len` bytes that do not compress, the same for the same `seed`.
fn random_bytes(seed: &str, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    blake3::Hasher::new()
        .update(seed.as_bytes())
        .finalize_xof()
        .fill(&mut out);
    out
}

/// A Block claim of `size` in the default class, Bound; its image.
async fn block_claim(client: &Client, ns: &str, name: &str, size: &str) -> PathBuf {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvc: PersistentVolumeClaim = object(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": {"team": "vm"}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Block",
            "resources": {"requests": {"storage": size}},
        },
    }));
    common::create_bound(&api, pvc).await;
    image_of(client, ns, name).await
}

/// The image behind claim `name`'s volume.
async fn image_of(client: &Client, ns: &str, name: &str) -> PathBuf {
    let pv = bound_volume(&claim_of(client, ns, name).await);
    let pv: PersistentVolume = volume(client, &pv).await.expect("volume");
    image_of_volume(&pv)
}

fn image_of_volume(pv: &PersistentVolume) -> PathBuf {
    let spec = pv.spec.as_ref().expect("spec");
    let path = match &spec.csi {
        Some(csi) => common::csi_volume_dir(&csi.volume_handle),
        None => PathBuf::from(
            spec.host_path
                .as_ref()
                .map(|h| h.path.clone())
                .or(spec.local.as_ref().map(|l| l.path.clone()))
                .expect("a hostPath, local or CSI volume"),
        ),
    };
    if path.is_file() {
        path
    } else {
        path.join("disk.img")
    }
}

/// Deployment `name` writing records on Block claim `claim`, running.
async fn disk_app(client: &Client, ns: &str, name: &str, claim: &str) {
    let container = json!({
        "name": "app", "image": "busybox",
        "command": ["sh", "-c", DISK_SCRIPT],
        "volumeDevices": [{"name": "data", "devicePath": "/dev/app-disk"}],
    });
    common::app::app_deployment(client, ns, name, claim, container).await;
}

/// The number in block 0, and the records 1..=it as numbers (0 where a
/// record does not hold one).
fn disk_records(image: &Path) -> (u64, Vec<u64>) {
    let f = std::fs::File::open(image).expect("image");
    let read = |block: u64| {
        let mut b = [0u8; 32];
        f.read_exact_at(&mut b, block * RECORD).expect("read");
        let text: String = b
            .iter()
            .take_while(|&&c| c != b'\n' && c != 0)
            .map(|&c| c as char)
            .collect();
        text.parse::<u64>().unwrap_or(0)
    };
    let n = read(0);
    (n, (1..=n).map(read).collect())
}

#[track_caller]
fn assert_records_gapless(records: &[u64], what: &str) {
    for (i, &n) in records.iter().enumerate() {
        assert_eq!(n, i as u64 + 1, "{what}: record {} holds {n}", i + 1);
    }
}

async fn await_records_past(image: &Path, n: u64) -> (u64, Vec<u64>) {
    wait_until(&format!("{} past record {n}", image.display()), || async {
        let (count, records) = disk_records(image);
        (count > n).then_some((count, records))
    })
    .await
}

/// The whole move of a Block claim an app writes: its device after the
/// cutover holds every record written before the stop, the app goes on
/// from there, the claim is still Block, and the old image is kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_block_claim_an_app_writes_cuts_over_with_every_record() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_image = block_claim(&client, &ns, "disk", "64Mi").await;
    // Data beyond the records: 8 MiB at 32 MiB, the rest holes.
    let payload = random_bytes("vm-payload", 8 * MIB as usize);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&old_image)
        .expect("image")
        .write_all_at(&payload, 32 * MIB)
        .expect("payload");
    disk_app(&client, &ns, "vm", "disk").await;
    await_records_past(&old_image, 20).await;
    let old_volume = bound_volume(&claim_of(&client, &ns, "disk").await);

    let run = cutover(
        &env,
        &[],
        "disk",
        &[
            "--max-downtime",
            "0s",
            "--precopy-rounds",
            "1",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    let c = vm.status.cutover.as_ref().expect("cutover");
    assert_eq!(c.step, Step::AwaitingCommit);

    // Same claim, still Block, on a new volume of the new class.
    let claim = claim_of(&client, &ns, "disk").await;
    let spec = claim.spec.as_ref().expect("spec");
    assert_eq!(spec.volume_mode.as_deref(), Some("Block"));
    let new_volume = bound_volume(&claim);
    assert_ne!(new_volume, old_volume);
    let new = volume(&client, &new_volume).await.expect("new volume");
    let new_spec = new.spec.as_ref().expect("spec");
    assert_eq!(new_spec.storage_class_name.as_deref(), Some("local"));
    assert_eq!(new_spec.volume_mode.as_deref(), Some("Block"));

    // The old image, untouched since the stop: every record up to its last.
    let (before, old_records) = disk_records(&old_image);
    assert!(before > 20);
    assert_records_gapless(&old_records, "the old device");
    // The app went on, on the new device, from that last record.
    await_running(&client, &ns, "vm").await;
    let new_image = image_of_volume(&new);
    let (_, new_records) = await_records_past(&new_image, before + 10).await;
    assert_records_gapless(&new_records, "the new device");
    // Every byte of the device as it was at the stop is on the new one,
    // but the blocks the app wrote since (block 0, records past `before`).
    let (old_bytes, new_bytes) = (
        std::fs::read(&old_image).expect("old image"),
        std::fs::read(&new_image).expect("new image"),
    );
    // The app's count in the same read of the device (it goes on writing).
    let text: String = new_bytes[..32]
        .iter()
        .take_while(|&&c| c != b'\n' && c != 0)
        .map(|&c| c as char)
        .collect();
    let after: u64 = text.parse().expect("a count in block 0");
    assert_eq!(old_bytes.len(), new_bytes.len());
    let since = ((before + 1) * RECORD) as usize..((after + 1) * RECORD) as usize;
    let same = |range: std::ops::Range<usize>| old_bytes[range.clone()] == new_bytes[range];
    assert!(same(RECORD as usize..since.start), "the records differ");
    let differs = (since.end..old_bytes.len()).find(|&i| old_bytes[i] != new_bytes[i]);
    assert_eq!(
        differs,
        None,
        "the device past the records (from {}) differs: old {:?}, new {:?}",
        since.end,
        differs.map(|i| &old_bytes[i..(i + 16).min(old_bytes.len())]),
        differs.map(|i| &new_bytes[i..(i + 16).min(new_bytes.len())]),
    );
    assert!(new_bytes[32 * MIB as usize..40 * MIB as usize] == payload[..]);

    let commit = volmig(&env, &["commit", &vm.metadata.name]).await;
    assert_eq!(commit.code, 0, "{}", commit.stderr);
}

/// Rollback after success: the app's records written on the new device are
/// copied back to the old one (a block session the other way), the claim is
/// bound to its old volume again, and the app goes on from its newest record.
#[tokio::test(flavor = "multi_thread")]
async fn a_block_cutover_rolls_back_with_the_records_written_since() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_image = block_claim(&client, &ns, "disk", "32Mi").await;
    disk_app(&client, &ns, "vm", "disk").await;
    await_records_past(&old_image, 20).await;
    let old_volume = bound_volume(&claim_of(&client, &ns, "disk").await);
    let run = cutover(&env, &[], "disk", &["-o", "json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation().metadata.name;
    await_running(&client, &ns, "vm").await;
    let new_image = image_of(&client, &ns, "disk").await;
    let (on_old, _) = disk_records(&old_image);
    await_records_past(&new_image, on_old + 30).await;

    let run = volmig(&env, &["rollback", &op, "-o", "json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(
        vm.status.phase,
        Phase::RolledBack,
        "{:?}",
        vm.status.message
    );
    let r = vm
        .status
        .cutover
        .as_ref()
        .and_then(|c| c.rollback.clone())
        .expect("rollback");
    assert!(r.sync_back && r.synced_back, "{r:?}");
    let claim = claim_of(&client, &ns, "disk").await;
    assert_eq!(bound_volume(&claim), old_volume);
    let mode = claim.spec.as_ref().and_then(|s| s.volume_mode.as_deref());
    assert_eq!(mode, Some("Block"));
    // The new device is kept as the app left it; the old one got its writes.
    let (on_new, new_records) = disk_records(&new_image);
    assert_records_gapless(&new_records, "the new device");
    await_running(&client, &ns, "vm").await;
    let (_, after) = await_records_past(&old_image, on_new + 10).await;
    assert_records_gapless(&after, "the old device after the rollback");
}

/// A copy killed midway: the next attempt's receiver, in a new pod,
/// starts from the prefix the killed one told.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_block_copy_resumes_from_the_told_checkpoint() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let image = block_claim(&client, &ns, "disk", "32Mi").await;
    let data = random_bytes("disk", 32 * MIB as usize);
    std::fs::write(&image, &data).expect("image");
    let child = common::spawn_volmig(
        &env,
        &[
            "migrate",
            "disk",
            "--mover-image",
            MOVER_IMAGE,
            "--bwlimit",
            "2M",
            "--backoff",
            "1",
            "-o",
            "json",
        ],
    );
    let op = common::first_operation(&client, &ns).await;
    common::await_progress(&client, &ns, &op, 1, 12 * MIB).await;
    let sender = pod_name(&op, Component::Sender, 1);
    assert!(common::kill_pod_process(&sender), "no process for {sender}");
    let run = common::finish(child).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    let attempts = &vm.status.attempts;
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    assert_eq!(attempts[0].phase, AttemptPhase::Failed);
    // The second receiver, in a new pod with an empty state directory, was
    // seeded: it started from the prefix the first one told, and only the
    // rest was sent.
    assert!(attempts[1].bytes_prior >= 10 * MIB, "{:#?}", attempts[1]);
    let summary = vm.status.summary.as_ref().expect("summary");
    assert!(
        summary.bytes_literal <= 32 * MIB - attempts[1].bytes_prior,
        "re-sent too much: {summary:?}"
    );
    assert!(
        vm.status.block_checkpoint.is_none(),
        "a finished copy keeps no seed"
    );
    let copy = image_of(&client, &ns, "disk-migrated").await;
    let copied = std::fs::read(&copy).expect("copy");
    assert!(copied[..data.len()] == data[..], "the copy differs");
}

/// A Block claim into a Filesystem one is refused before anything is made.
#[tokio::test(flavor = "multi_thread")]
async fn a_block_claim_is_not_copied_into_a_filesystem_one() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    block_claim(&client, &ns, "disk", "16Mi").await;
    common::claim(&client, &ns, "files", "ReadWriteOnce", "1Gi").await;
    let run = volmig(
        &env,
        &[
            "migrate",
            "disk",
            "--to",
            "files",
            "--reuse",
            "--mover-image",
            MOVER_IMAGE,
        ],
    )
    .await;
    assert_ne!(run.code, 0);
    assert!(
        run.stderr
            .contains("cannot move a Block claim into a Filesystem one"),
        "{}",
        run.stderr
    );
    assert!(records(&client, &ns).await.is_empty(), "a record was made");
}
