//! The CSI driver and the snapshot API through real kubectl: a pod writes
//! on a CSI volume, a VolumeSnapshot of it is cut and restored into a claim
//! another pod reads; a sandbox without the snapshot CRDs serves no such
//! group.

mod common;

use common::{apply, kubectl, kubectl_ok, sandbox, wait_for};
use kube_sandbox::sandbox::{CLASS_CSI, SNAPSHOT_CLASS};
use kube_sandbox::{Sandbox, SandboxConfig};

const CLAIM_AND_WRITER: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  storageClassName: csi
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "echo before > /data/file"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"#;

const SNAPSHOT: &str = r#"
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: snap}
spec:
  source: {persistentVolumeClaimName: data}
"#;

const RESTORE_AND_READER: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: restored}
spec:
  storageClassName: csi
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
  dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: snap}
---
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "cat /data/file"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: restored}}]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_csi_volume_is_snapshotted_and_restored_for_pods() {
    let sb = sandbox().await;
    let classes = kubectl_ok(&sb, &["get", "volumesnapshotclass", "-o", "name"]).await;
    assert_eq!(
        classes.trim(),
        format!("volumesnapshotclass.snapshot.storage.k8s.io/{SNAPSHOT_CLASS}")
    );
    assert_eq!(CLASS_CSI, "csi");
    let out = apply(&sb, CLAIM_AND_WRITER).await;
    assert!(out.ok, "{}", out.stderr);
    wait_for(
        &sb,
        &["get", "pod", "writer"],
        "{.status.phase}",
        "Succeeded",
    )
    .await;
    let out = apply(&sb, SNAPSHOT).await;
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
    let copy = sb.snapshot_dir(&content).join("file");
    assert_eq!(std::fs::read_to_string(&copy).expect("copy"), "before\n");
    // A write after the snapshot is not in it, nor in its restore.
    let pv = kubectl_ok(
        &sb,
        &["get", "pvc", "data", "-o", "jsonpath={.spec.volumeName}"],
    )
    .await;
    std::fs::write(sb.volume_dir(&pv).join("file"), "after\n").expect("write");
    let out = apply(&sb, RESTORE_AND_READER).await;
    assert!(out.ok, "{}", out.stderr);
    wait_for(
        &sb,
        &["get", "pod", "reader"],
        "{.status.phase}",
        "Succeeded",
    )
    .await;
    let logs = kubectl_ok(&sb, &["logs", "reader"]).await;
    assert_eq!(logs, "before\n");
    // Deleting the snapshot (policy Delete) takes its content and copy.
    kubectl_ok(&sb, &["delete", "vs", "snap", "--wait=true"]).await;
    let contents = kubectl_ok(&sb, &["get", "vsc", "-o", "name"]).await;
    assert!(contents.trim().is_empty(), "{contents}");
    assert!(!sb.snapshot_dir(&content).exists());
}

const BUSY_WRITER: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: busy}
spec:
  storageClassName: csi
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: busy}
spec:
  containers:
  - name: c
    image: busybox
    command: [sh, -c, ": > /data/seq; dd if=/dev/zero of=/data/middle bs=1M count=32 2>/dev/null; n=0; while true; do n=$((n+1)); echo $n >> /data/seq; echo $n > /data/last.tmp; mv /data/last.tmp /data/last; done"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: busy}}]
"#;

/// A snapshot is one point in time across the volume's files, as a CSI
/// driver's is: cut while a pod appends `n` to `seq` then renames `n` into
/// `last`, each snapshot has a gapless `seq` and a `last` that is its last
/// number or the one before (the rename not done yet). The 32 MiB file
/// made between `seq` and `last` (in directory order, which is creation
/// order or its reverse on a small ext4 or tmpfs directory) keeps a copy
/// file by file long enough between the two to see several loops.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_is_one_point_in_time_while_a_pod_writes() {
    let sb = sandbox().await;
    let out = apply(&sb, BUSY_WRITER).await;
    assert!(out.ok, "{}", out.stderr);
    wait_for(&sb, &["get", "pod", "busy"], "{.status.phase}", "Running").await;
    let pv = kubectl_ok(
        &sb,
        &["get", "pvc", "busy", "-o", "jsonpath={.spec.volumeName}"],
    )
    .await;
    let seq = sb.volume_dir(&pv).join("seq");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::metadata(&seq).map_or(0, |m| m.len()) < 1000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the pod writes nothing"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for i in 0..5 {
        let manifest = format!(
            "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata: {{name: busy-{i}}}\nspec:\n  source: {{persistentVolumeClaimName: busy}}\n"
        );
        let out = apply(&sb, &manifest).await;
        assert!(out.ok, "{}", out.stderr);
        let name = format!("busy-{i}");
        wait_for(&sb, &["get", "vs", &name], "{.status.readyToUse}", "true").await;
        let content = kubectl_ok(
            &sb,
            &[
                "get",
                "vs",
                &name,
                "-o",
                "jsonpath={.status.boundVolumeSnapshotContentName}",
            ],
        )
        .await;
        let dir = sb.snapshot_dir(&content);
        let seq = std::fs::read_to_string(dir.join("seq")).expect("seq in the snapshot");
        let numbers: Vec<u64> = seq
            .lines()
            .map(|l| l.parse().unwrap_or_else(|_| panic!("{name}: line {l:?}")))
            .collect();
        let expected: Vec<u64> = (1..=numbers.len() as u64).collect();
        assert!(numbers == expected, "{name}: seq has gaps");
        let top = numbers.len() as u64;
        if let Ok(last) = std::fs::read_to_string(dir.join("last")) {
            let last: u64 = last.trim().parse().expect("last is a number");
            assert!(
                last == top || last + 1 == top,
                "{name}: last is {last}, seq ends at {top}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_crds_the_snapshot_group_is_not_served() {
    let sb: Sandbox = Sandbox::start(SandboxConfig {
        snapshots: false,
        ..SandboxConfig::default()
    })
    .await
    .expect("sandbox starts");
    let groups = kubectl_ok(&sb, &["get", "--raw", "/apis"]).await;
    assert!(!groups.contains("snapshot.storage.k8s.io"), "{groups}");
    for path in [
        "/apis/snapshot.storage.k8s.io",
        "/apis/snapshot.storage.k8s.io/v1",
        "/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses",
        "/apis/snapshot.storage.k8s.io/v1/namespaces/default/volumesnapshots",
    ] {
        let out = kubectl(&sb, &["get", "--raw", path], None).await;
        assert!(!out.ok, "{path}: {}", out.stdout);
        assert!(
            out.stderr.contains("NotFound") || out.stderr.contains("not found"),
            "{path}: {}",
            out.stderr
        );
    }
    let out = kubectl(&sb, &["get", "volumesnapshots"], None).await;
    assert!(!out.ok);
    assert!(
        out.stderr
            .contains("the server doesn't have a resource type"),
        "{}",
        out.stderr
    );
}
