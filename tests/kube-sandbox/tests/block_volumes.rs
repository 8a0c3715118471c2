//! `volumeMode: Block` through real kubectl: Block claims get sparse images
//! of their size in every class; a pod's `volumeDevices` entry is a loop
//! device over the image (or, file-backed, the image itself) that reads
//! back what was written, and which the image holds; a pod without it has
//! no such path and no loop device; a read-only claim refuses writes; a
//! claim used in the wrong list leaves the pod `ContainerCreating`; bad
//! `volumeDevices` are refused by the API; CSI snapshots and clones of a
//! Block volume are equal and sparse; deleting the claim detaches its
//! loops.
//!
//! Loop-only cases take `testkit::loop_lock` and are skipped (with a
//! notice) where loop devices cannot be attached.

mod common;

use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::{apply, await_event, client, create, kubectl, kubectl_ok, wait_for, MOVER_IMAGE};
use kube_sandbox::kubelet::{BlockBacking, ImageMapping};
use kube_sandbox::testkit::{loop_lock, loops_available, LoopLock};
use kube_sandbox::{Sandbox, SandboxConfig};

const MIB: u64 = 1 << 20;

async fn sandbox_backed(block_backing: BlockBacking) -> Sandbox {
    Sandbox::start(SandboxConfig {
        images: vec![ImageMapping {
            image: MOVER_IMAGE.to_string(),
            binary: common::mover_binary(),
        }],
        block_backing,
        ..SandboxConfig::default()
    })
    .await
    .expect("sandbox starts")
}

/// The loop lock, or None (with a notice) where loops cannot be used.
async fn loops_or_skip(test: &str) -> Option<LoopLock> {
    if !loops_available() {
        eprintln!("{test}: skipped, this process cannot attach loop devices (root and /dev/loop-control needed)");
        return None;
    }
    let lock = tokio::task::spawn_blocking(loop_lock).await.expect("join");
    Some(lock.expect("the loop devices' lock"))
}

fn claim(name: &str, class: &str, size: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}}}
spec:
  storageClassName: {class}
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: {size}}}}}
"#
    )
}

/// A root pod on node-1 mapping `claim` at `/dev/xvda` and running `script`.
fn device_pod(name: &str, claim: &str, read_only: bool, script: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  nodeName: node-1
  restartPolicy: Never
  containers:
  - name: c
    image: busybox
    command: [sh, -c, {script:?}]
    volumeDevices: [{{name: data, devicePath: /dev/xvda}}]
  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim}, readOnly: {read_only}}}}}]
"#
    )
}

/// Runs a pod to completion; its log.
async fn run(sb: &Sandbox, manifest: &str, name: &str) -> String {
    let out = apply(sb, manifest).await;
    assert!(out.ok, "{}", out.stderr);
    wait_for(sb, &["get", "pod", name], "{.status.phase}", "Succeeded").await;
    kubectl_ok(sb, &["logs", name]).await
}

async fn volume_of(sb: &Sandbox, claim: &str) -> String {
    wait_for(sb, &["get", "pvc", claim], "{.status.phase}", "Bound").await;
    kubectl_ok(
        sb,
        &["get", "pvc", claim, "-o", "jsonpath={.spec.volumeName}"],
    )
    .await
}

fn image_of(sb: &Sandbox, pv: &str) -> PathBuf {
    sb.volume_dir(pv).join("disk.img")
}

fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).expect("image").blocks() * 512
}

const WRITE_AND_READ: &str = "set -e
if [ -b /dev/xvda ]; then echo kind=block; elif [ -f /dev/xvda ]; then echo kind=file; fi
printf hello-block > /tmp/in
dd if=/tmp/in of=/dev/xvda bs=512 seek=2048 conv=notrunc,fsync 2>/dev/null
echo read=$(dd if=/dev/xvda bs=512 skip=2048 count=1 2>/dev/null | head -c 11)";

const TRY_WRITE: &str =
    "if printf x | dd of=/dev/xvda bs=512 seek=4096 conv=notrunc,fsync 2>/tmp/err
then echo write=allowed; else echo write=refused; cat /tmp/err; fi
echo read=$(dd if=/dev/xvda bs=512 skip=2048 count=1 2>/dev/null | head -c 11)";

const NOSY: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: nosy}
spec:
  nodeName: node-1
  restartPolicy: Never
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "echo dev: $(ls /dev); [ -e /dev/xvda ] && echo HAS-DEVICE; ls /dev/loop* >/dev/null 2>&1 && echo HAS-LOOP; [ -e \"$IMAGE\" ] && echo HAS-IMAGE; echo done"]
    env: [{name: IMAGE, value: "IMAGE_PATH"}]
"#;

/// The device round trip both backings share: written and read back
/// through the device, the bytes in the image; another root pod on the
/// node sees neither the device, a loop device nor the image; a read-only
/// claim's writes fail. Returns the PV's name.
async fn round_trip(sb: &Sandbox, class: &str, kind: &str) -> String {
    let out = apply(sb, &claim("data", class, "64Mi")).await;
    assert!(out.ok, "{}", out.stderr);
    let log = run(
        sb,
        &device_pod("writer", "data", false, WRITE_AND_READ),
        "writer",
    )
    .await;
    assert_eq!(log, format!("kind={kind}\nread=hello-block\n"));
    let pv = volume_of(sb, "data").await;
    let image = image_of(sb, &pv);
    let mut bytes = [0u8; 11];
    let file = std::fs::File::open(&image).expect("image");
    file.read_exact_at(&mut bytes, MIB).expect("read image");
    assert_eq!(&bytes, b"hello-block", "the image holds what the pod wrote");
    assert_eq!(file.metadata().expect("meta").len(), 64 * MIB);

    let nosy = NOSY.replace("IMAGE_PATH", &image.to_string_lossy());
    let log = run(sb, &nosy, "nosy").await;
    assert!(log.ends_with("done\n"), "{log}");
    for leak in ["HAS-DEVICE", "HAS-LOOP", "HAS-IMAGE", "loop", "vda"] {
        assert!(
            !log.contains(leak),
            "a pod without volumeDevices sees {leak}: {log}"
        );
    }
    assert!(log.contains("null") && log.contains("urandom"), "{log}");

    let log = run(sb, &device_pod("reader", "data", true, TRY_WRITE), "reader").await;
    assert!(log.starts_with("write=refused\n"), "{log}");
    assert!(log.ends_with("read=hello-block\n"), "{log}");
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, 2 * MIB).expect("read image");
    assert_eq!(byte, [0], "nothing written through the read-only claim");
    pv
}

#[tokio::test(flavor = "multi_thread")]
async fn a_loop_device_reads_back_what_was_written_and_goes_with_its_claim() {
    let Some(_lock) = loops_or_skip("loop devices").await else {
        return;
    };
    let sb = sandbox_backed(BlockBacking::Loop).await;
    let pv = round_trip(&sb, "standard", "block").await;
    let loops = sb.loop_devices(&pv);
    assert_eq!(loops.len(), 2, "a read-write loop and its read-only mirror");
    let image = std::fs::canonicalize(image_of(&sb, &pv)).expect("image");
    for n in &loops {
        assert_eq!(backing_file(*n), Some(image.clone()));
    }
    kubectl_ok(&sb, &["delete", "pod", "writer", "reader", "nosy"]).await;
    kubectl_ok(&sb, &["delete", "pvc", "data"]).await;
    wait_for(&sb, &["get", "pv"], "{.items[*].metadata.name}", "").await;
    for n in &loops {
        assert_ne!(
            backing_file(*n),
            Some(image.clone()),
            "loop{n} still attached"
        );
    }
    assert!(!sb.volume_dir(&pv).exists());
}

/// What loop `n` is attached to, if anything.
fn backing_file(n: u32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/sys/block/loop{n}/loop/backing_file")).ok()?;
    Some(PathBuf::from(
        text.trim_end().trim_end_matches(" (deleted)"),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_backed_device_reads_back_what_was_written() {
    let sb = sandbox_backed(BlockBacking::File).await;
    let pv = round_trip(&sb, "csi", "file").await;
    assert!(sb.loop_devices(&pv).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_block_claim_in_each_class_gets_a_sparse_image_of_its_size() {
    let sb = sandbox_backed(BlockBacking::File).await;
    for (name, class, size) in [
        ("shared", "standard", "48Mi"),
        ("csi", "csi", "32Mi"),
        ("local", "local", "16Mi"),
    ] {
        let out = apply(&sb, &claim(name, class, size)).await;
        assert!(out.ok, "{}", out.stderr);
    }
    // The local class binds for its first consumer, which the scheduler
    // places (a pod with `nodeName` skips it, and the claim would wait).
    let consumer =
        device_pod("user", "local", false, "echo used").replace("  nodeName: node-1\n", "");
    let log = run(&sb, &consumer, "user").await;
    assert_eq!(log, "used\n");
    for (name, mib, source) in [
        ("shared", 48, "hostPath"),
        ("csi", 32, "csi"),
        ("local", 16, "local"),
    ] {
        let pv = volume_of(&sb, name).await;
        let spec = kubectl_ok(&sb, &["get", "pv", &pv, "-o", "jsonpath={.spec.volumeMode} {.spec.hostPath.path}{.spec.local.path}{.spec.csi.volumeHandle}"]).await;
        let image = image_of(&sb, &pv);
        let named = match source {
            "csi" => pv.clone(),
            _ => image.to_string_lossy().into_owned(),
        };
        assert_eq!(spec, format!("Block {named}"), "{name}");
        let meta = std::fs::metadata(&image).expect("image");
        assert_eq!(meta.len(), mib * MIB, "{name}");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
        assert!(
            allocated(&image) < MIB,
            "{name}: {} bytes allocated",
            allocated(&image)
        );
    }
}

const MISMATCHED: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: fs}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: mounts-block}
spec:
  containers:
  - name: c
    image: busybox
    command: [sleep, "600"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
---
apiVersion: v1
kind: Pod
metadata: {name: maps-filesystem}
spec:
  containers:
  - name: c
    image: busybox
    command: [sleep, "600"]
    volumeDevices: [{name: data, devicePath: /dev/xvda}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: fs}}]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_in_the_wrong_list_leaves_the_pod_container_creating() {
    let sb = sandbox_backed(BlockBacking::File).await;
    let out = apply(&sb, &claim("data", "standard", "16Mi")).await;
    assert!(out.ok, "{}", out.stderr);
    let out = apply(&sb, MISMATCHED).await;
    assert!(out.ok, "{}", out.stderr);
    let client = client(&sb).await;
    for (pod, mode, list) in [
        ("mounts-block", "Block", "volumeMounts"),
        ("maps-filesystem", "Filesystem", "volumeDevices"),
    ] {
        let message = await_event(&client, "default", pod, "FailedMount").await;
        assert_eq!(
            message,
            format!("Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: volume data has volumeMode {mode}, but is specified in {list}")
        );
        let state = kubectl_ok(
            &sb,
            &[
                "get",
                "pod",
                pod,
                "-o",
                "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.reason}",
            ],
        )
        .await;
        assert_eq!(state, "Pending ContainerCreating", "{pod}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_volume_devices_are_refused() {
    let sb = sandbox_backed(BlockBacking::File).await;
    let pod = r#"
apiVersion: v1
kind: Pod
metadata: {name: bad}
spec:
  containers:
  - name: c
    image: busybox
    command: [sleep, "1"]
    volumeMounts: [{name: scratch, mountPath: /data}]
    volumeDevices:
    - {name: data, devicePath: /data}
    - {name: data, devicePath: /dev/../xvdb}
    - {name: scratch, devicePath: ""}
    - {name: missing, devicePath: /dev/xvdc}
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: data}}
  - {name: scratch, emptyDir: {}}
"#;
    let out = create(&sb, pod).await;
    assert!(!out.ok, "{}", out.stdout);
    let d = "spec.containers[0].volumeDevices";
    for cause in [
        "spec.containers[0].volumeMounts[0].name: Invalid value: \"scratch\": must not already exist in volumeDevices".to_string(),
        "spec.containers[0].volumeMounts[0].mountPath: Invalid value: \"/data\": must not already exist as a path in volumeDevices".into(),
        format!("{d}[0].devicePath: Invalid value: \"/data\": must not already exist as a path in volumeMounts"),
        format!("{d}[1].name: Invalid value: \"data\": must be unique"),
        format!("{d}[1].devicePath: Invalid value: \"/dev/../xvdb\": can not contain backsteps ('..')"),
        format!("{d}[2].name: Invalid value: \"scratch\": can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode"),
        format!("{d}[2].devicePath: Required value"),
        format!("{d}[2].name: Invalid value: \"scratch\": must not already exist in volumeMounts"),
        format!("{d}[3].name: Not found: \"missing\""),
    ] {
        assert!(out.stderr.contains(&cause), "{cause} not in {}", out.stderr);
    }
    assert!(
        out.stderr.contains("Pod \"bad\" is invalid"),
        "{}",
        out.stderr
    );
    let pods = kubectl_ok(&sb, &["get", "pods", "-o", "name"]).await;
    assert!(pods.is_empty(), "{pods}");
}

const SNAPSHOT_AND_CLONE: &str = r#"
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: snap}
spec:
  source: {persistentVolumeClaimName: data}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: clone}
spec:
  storageClassName: csi
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 64Mi}}
  dataSource: {kind: PersistentVolumeClaim, name: data}
"#;

const RESTORE: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: restored}
spec:
  storageClassName: csi
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 96Mi}}
  dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: snap}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn csi_snapshots_and_clones_of_a_block_volume_are_equal_and_sparse() {
    let sb = sandbox_backed(BlockBacking::File).await;
    let out = apply(&sb, &claim("data", "csi", "64Mi")).await;
    assert!(out.ok, "{}", out.stderr);
    let pv = volume_of(&sb, "data").await;
    let image = image_of(&sb, &pv);
    {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&image)
            .expect("image");
        for (at, byte) in [(0, 1u8), (7 * MIB + 512, 2), (64 * MIB - 4096, 3)] {
            file.write_all_at(&[byte; 4096][..], at.min(64 * MIB - 4096))
                .expect("write");
        }
    }
    let source = std::fs::read(&image).expect("image");
    let out = apply(&sb, SNAPSHOT_AND_CLONE).await;
    assert!(out.ok, "{}", out.stderr);
    wait_for(&sb, &["get", "vs", "snap"], "{.status.readyToUse}", "true").await;
    let content = kubectl_ok(
        &sb,
        &[
            "get",
            "vs",
            "snap",
            "-o",
            "jsonpath={.status.boundVolumeSnapshotContentName}",
        ],
    )
    .await;
    let copies = [
        sb.snapshot_dir(&content).join("disk.img"),
        image_of(&sb, &volume_of(&sb, "clone").await),
    ];
    let out = apply(&sb, RESTORE).await;
    assert!(out.ok, "{}", out.stderr);
    let restored = image_of(&sb, &volume_of(&sb, "restored").await);
    for copy in copies.iter().chain([&restored]) {
        let bytes = std::fs::read(copy).expect("copy");
        assert_eq!(&bytes[..source.len()], &source[..], "{copy:?}");
        assert!(bytes[source.len()..].iter().all(|b| *b == 0), "{copy:?}");
        assert!(
            allocated(copy) <= 4 * 64 * 1024,
            "{copy:?}: {} bytes allocated",
            allocated(copy)
        );
    }
    assert_eq!(
        std::fs::metadata(&restored).expect("meta").len(),
        96 * MIB,
        "grown to the request"
    );
    // The restored device reads the snapshot's bytes in a pod.
    let log = run(
        &sb,
        &device_pod(
            "reader",
            "restored",
            true,
            "dd if=/dev/xvda bs=4096 skip=16383 count=1 2>/dev/null | od -An -tu1 | head -1",
        ),
        "reader",
    )
    .await;
    assert!(log.split_whitespace().all(|b| b == "3"), "{log}");
    let _ = kubectl(&sb, &["delete", "pod", "reader"], None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_loop_that_a_vanished_sandbox_left_is_detached_at_the_next_start() {
    let Some(_lock) = loops_or_skip("leaked loops").await else {
        return;
    };
    // What a sandbox killed with SIGKILL leaves: a loop over an image in
    // its temporary directory, which is gone.
    let gone = tempfile::Builder::new()
        .prefix("kube-sandbox-")
        .tempdir()
        .expect("temp dir");
    let image = gone.path().join("volumes/pvc-leaked/disk.img");
    std::fs::create_dir_all(image.parent().expect("dir")).expect("dirs");
    std::fs::File::create(&image)
        .and_then(|f| f.set_len(MIB))
        .expect("image");
    let attached = std::process::Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&image)
        .output();
    let node = match attached {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        other => {
            eprintln!("leaked loops: skipped, losetup could not attach a loop: {other:?}");
            return;
        }
    };
    let number: u32 = node
        .trim_start_matches("/dev/loop")
        .parse()
        .expect("loop number");
    let canonical = std::fs::canonicalize(&image).expect("image");
    // Checked while the image exists: once it is gone, any sandbox that
    // starts (another test binary's too) may detach the loop.
    assert_eq!(backing_file(number), Some(canonical.clone()));
    drop(gone);
    let _sb = sandbox_backed(BlockBacking::Loop).await;
    assert_ne!(
        backing_file(number),
        Some(canonical),
        "loop{number} still attached"
    );
}
