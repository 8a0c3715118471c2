//! The snapshot controller, the CSI driver's snapshotter and provisioner,
//! run pass by pass on a store (no threads: each test settles the loops
//! itself), as volmig meets them.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::*;
use crate::auth::Authority;
use crate::controllers::volumes;
use crate::store::Store;

struct Harness {
    ctx: Ctx,
    _dir: tempfile::TempDir,
}

fn harness(csi_clone: bool) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::new(1000);
    let authority = Authority::generate(IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("authority");
    let mut ctx = Ctx::new(store, dir.path().to_path_buf(), Arc::new(authority));
    ctx.csi_clone = csi_clone;
    let h = Harness { ctx, _dir: dir };
    h.create("namespaces", "", json!({"metadata": {"name": "default"}}));
    h.create(
        "storageclasses",
        "",
        json!({"metadata": {"name": "csi"}, "provisioner": volumes::CSI}),
    );
    h.create(
        "storageclasses",
        "",
        json!({"metadata": {"name": "standard"}, "provisioner": volumes::SHARED}),
    );
    h.create(
        "volumesnapshotclasses",
        "",
        class("csi-snapclass", volumes::CSI, "Delete", true),
    );
    h
}

fn class(name: &str, driver: &str, policy: &str, default: bool) -> Value {
    let mut c = json!({"metadata": {"name": name}, "driver": driver, "deletionPolicy": policy});
    if default {
        c["metadata"]["annotations"] = json!({DEFAULT_CLASS_ANNOTATION: "true"});
    }
    c
}

fn claim(name: &str, class: &str, size: &str, source: Option<(&str, &str)>) -> Value {
    let mut c = json!({"metadata": {"name": name}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": class,
        "resources": {"requests": {"storage": size}}}});
    if let Some((kind, name)) = source {
        let group = (kind == "VolumeSnapshot").then_some(SNAPSHOT_GROUP);
        c["spec"]["dataSource"] = json!({"kind": kind, "name": name, "apiGroup": group});
    }
    c
}

fn snapshot(name: &str, claim: &str, class: Option<&str>) -> Value {
    let mut s = json!({"metadata": {"name": name},
        "spec": {"source": {"persistentVolumeClaimName": claim}}});
    if let Some(class) = class {
        s["spec"]["volumeSnapshotClassName"] = json!(class);
    }
    s
}

impl Harness {
    fn create(&self, plural: &str, ns: &str, obj: Value) -> Value {
        self.ctx
            .store
            .create(registry::get(plural), ns, obj)
            .unwrap_or_else(|e| panic!("create {plural}: {e}"))
    }

    fn get(&self, plural: &str, ns: &str, name: &str) -> Option<Value> {
        self.ctx.store.get(registry::get(plural), ns, name).ok()
    }

    fn delete(&self, plural: &str, ns: &str, name: &str) {
        let deleted = self
            .ctx
            .store
            .delete(registry::get(plural), ns, name, &Default::default());
        deleted.unwrap_or_else(|e| panic!("delete {plural}/{name}: {e}"));
    }

    /// Runs the volume and snapshot controllers until nothing changes.
    fn settle(&self) {
        for _ in 0..50 {
            let before = self.ctx.store.resource_version();
            volumes::reconcile(&self.ctx);
            reconcile(&self.ctx);
            if self.ctx.store.resource_version() == before {
                return;
            }
        }
    }

    fn events(&self, name: &str) -> Vec<(String, String, String)> {
        let (events, _) = self.ctx.store.list(registry::get("events"), None);
        events
            .iter()
            .filter(|e| e["involvedObject"]["name"] == json!(name))
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (s("type"), s("reason"), s("message"))
            })
            .collect()
    }

    fn has_event(&self, name: &str, reason: &str, message: &str) -> bool {
        self.events(name)
            .iter()
            .any(|(_, r, m)| r == reason && m == message)
    }

    /// A bound claim of the CSI class, with `files` written in its volume.
    fn bound_claim(&self, name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        self.create(
            "persistentvolumeclaims",
            "default",
            claim(name, "csi", "1Gi", None),
        );
        self.settle();
        let c = self
            .get("persistentvolumeclaims", "default", name)
            .expect("claim");
        assert_eq!(c["status"]["phase"], "Bound", "{c}");
        let pv_name = c["spec"]["volumeName"].as_str().expect("volume name");
        let pv = self.get("persistentvolumes", "", pv_name).expect("pv");
        assert_eq!(pv["spec"]["csi"]["driver"], volumes::CSI);
        assert_eq!(pv["spec"]["csi"]["volumeHandle"], json!(pv_name));
        assert!(pv["spec"]["hostPath"].is_null() && pv["spec"]["csi"]["fsType"].is_null());
        let dir = self.ctx.data_dir.join("volumes").join(pv_name);
        for (file, text) in files {
            std::fs::write(dir.join(file), text).expect("write");
        }
        dir
    }

    fn volume_dir_of(&self, claim: &str) -> std::path::PathBuf {
        let c = self
            .get("persistentvolumeclaims", "default", claim)
            .expect("claim");
        let pv = c["spec"]["volumeName"].as_str().expect("bound");
        self.ctx.data_dir.join("volumes").join(pv)
    }

    fn ready_snapshot(&self, name: &str, claim: &str) -> (Value, Value) {
        self.create("volumesnapshots", "default", snapshot(name, claim, None));
        self.settle();
        let s = self
            .get("volumesnapshots", "default", name)
            .expect("snapshot");
        assert_eq!(s["status"]["readyToUse"], true, "{s}");
        let content_name = s["status"]["boundVolumeSnapshotContentName"]
            .as_str()
            .expect("bound");
        let c = self
            .get("volumesnapshotcontents", "", content_name)
            .expect("content");
        (s, c)
    }
}

fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("read dir")
        .flatten()
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().to_string(), text)
        })
        .collect();
    out.sort();
    out
}

fn finalizers(obj: &Value) -> Vec<String> {
    serde_json::from_value(obj["metadata"]["finalizers"].clone()).unwrap_or_default()
}

#[test]
fn a_snapshot_is_cut_at_that_instant_bound_both_ways_and_restored() {
    let h = harness(true);
    let volume = h.bound_claim("data", &[("a", "one")]);
    let (s, c) = h.ready_snapshot("snap", "data");
    let uid = s["metadata"]["uid"].as_str().expect("uid");
    let content_name = format!("snapcontent-{uid}");
    assert_eq!(s["spec"]["volumeSnapshotClassName"], "csi-snapclass");
    assert_eq!(
        s["status"]["boundVolumeSnapshotContentName"],
        json!(content_name)
    );
    assert_eq!(s["status"]["restoreSize"], "1Gi");
    assert!(crate::time::parse(s["status"]["creationTime"].as_str().expect("time")).is_some());
    assert_eq!(
        finalizers(&s),
        [AS_SOURCE_FINALIZER, BOUND_FINALIZER],
        "{s}"
    );
    assert_eq!(c["metadata"]["name"], json!(content_name));
    assert_eq!(c["spec"]["volumeSnapshotRef"]["uid"], json!(uid));
    assert_eq!(c["spec"]["driver"], volumes::CSI);
    assert_eq!(c["spec"]["deletionPolicy"], "Delete");
    assert_eq!(c["status"]["restoreSize"], json!(1i64 << 30));
    assert_eq!(c["status"]["snapshotHandle"], json!(content_name));
    assert!(c["status"]["creationTime"].as_i64().expect("ns") > 1_600_000_000_000_000_000);
    assert_eq!(finalizers(&c), [CONTENT_FINALIZER]);
    let data = h
        .get("persistentvolumeclaims", "default", "data")
        .expect("claim");
    assert!(!finalizers(&data).contains(&PVC_FINALIZER.to_string()));
    for (reason, message) in [
        (
            "CreatingSnapshot",
            "Waiting for a snapshot default/snap to be created by the CSI driver.",
        ),
        (
            "SnapshotCreated",
            "Snapshot default/snap was successfully created by the CSI driver.",
        ),
        ("SnapshotReady", "Snapshot default/snap is ready to use."),
    ] {
        assert!(
            h.has_event("snap", reason, message),
            "{reason}: {:?}",
            h.events("snap")
        );
    }
    // Written after the snapshot: not in it.
    std::fs::write(volume.join("b"), "two").expect("write");
    let copy = snapshot_dir(&h.ctx.data_dir, &content_name);
    assert_eq!(files(&copy), [("a".to_string(), "one".to_string())]);
    // A claim restored from it starts as the snapshot is.
    let restore = claim("restored", "csi", "1Gi", Some(("VolumeSnapshot", "snap")));
    let created = h.create("persistentvolumeclaims", "default", restore);
    assert_eq!(
        created["spec"]["dataSourceRef"],
        created["spec"]["dataSource"]
    );
    h.settle();
    assert_eq!(files(&h.volume_dir_of("restored")), files(&copy));
    assert!(h.has_event(
        "restored",
        "Provisioning",
        "External provisioner is provisioning volume for claim \"default/restored\""
    ));
    let snap = h
        .get("volumesnapshots", "default", "snap")
        .expect("snapshot");
    assert!(!finalizers(&snap)
        .iter()
        .any(|f| f.starts_with("provisioner.")));
}

#[test]
fn without_one_default_class_the_snapshot_waits_with_the_controllers_error() {
    let h = harness(true);
    h.bound_claim("data", &[]);
    h.delete("volumesnapshotclasses", "", "csi-snapclass");
    h.create("volumesnapshots", "default", snapshot("none", "data", None));
    h.settle();
    let message =
        "Failed to set default snapshot class with error cannot find default snapshot class";
    assert!(h.has_event("none", "SetDefaultSnapshotClassFailed", message));
    let s = h
        .get("volumesnapshots", "default", "none")
        .expect("snapshot");
    assert_eq!(s["status"]["error"]["message"], message);
    assert!(s["status"]["readyToUse"].is_null() && finalizers(&s).is_empty());
    for name in ["one", "two"] {
        h.create(
            "volumesnapshotclasses",
            "",
            class(name, volumes::CSI, "Delete", true),
        );
    }
    h.create("volumesnapshots", "default", snapshot("two", "data", None));
    h.settle();
    let message =
        "Failed to set default snapshot class with error 2 default snapshot classes were found";
    assert!(h.has_event("two", "SetDefaultSnapshotClassFailed", message));
    h.create(
        "volumesnapshots",
        "default",
        snapshot("missing", "data", Some("gone")),
    );
    h.settle();
    let message = "Failed to get snapshot class with error volumesnapshotclass.snapshot.storage.k8s.io \"gone\" not found";
    assert!(h.has_event("missing", "GetSnapshotClassFailed", message));
}

#[test]
fn a_claim_that_is_not_csi_or_not_bound_is_not_snapshotted() {
    let h = harness(true);
    h.create(
        "persistentvolumeclaims",
        "default",
        claim("host", "standard", "1Gi", None),
    );
    h.settle();
    h.create("volumesnapshots", "default", snapshot("s1", "host", None));
    h.settle();
    let message = "Failed to set default snapshot class with error snapshotting non-CSI volumes is not supported, snapshot:default/s1";
    assert!(
        h.has_event("s1", "SetDefaultSnapshotClassFailed", message),
        "{:?}",
        h.events("s1")
    );
    h.create(
        "persistentvolumeclaims",
        "default",
        claim("later", "nowhere", "1Gi", None),
    );
    h.create(
        "volumesnapshots",
        "default",
        snapshot("s2", "later", Some("csi-snapclass")),
    );
    h.settle();
    let s = h.get("volumesnapshots", "default", "s2").expect("snapshot");
    let message = "Failed to create snapshot content with error failed to get input parameters to create snapshot s2: \"the PVC later is not yet bound to a PV, will not attempt to take a snapshot\"";
    assert_eq!(s["status"]["error"]["message"], message);
    assert_eq!(s["status"]["readyToUse"], false);
    let later = h
        .get("persistentvolumeclaims", "default", "later")
        .expect("claim");
    assert!(finalizers(&later).contains(&PVC_FINALIZER.to_string()));
}

#[test]
fn deleting_with_policy_delete_removes_content_and_copy_and_retain_keeps_them() {
    let h = harness(true);
    h.bound_claim("data", &[("a", "one")]);
    let (_, content) = h.ready_snapshot("snap", "data");
    let content_name = name_of(&content).1.to_string();
    let copy = snapshot_dir(&h.ctx.data_dir, &content_name);
    assert!(copy.is_dir());
    h.delete("volumesnapshots", "default", "snap");
    h.settle();
    assert!(h.get("volumesnapshots", "default", "snap").is_none());
    assert!(h.get("volumesnapshotcontents", "", &content_name).is_none());
    assert!(!copy.exists());
    h.create(
        "volumesnapshotclasses",
        "",
        class("keep", volumes::CSI, "Retain", false),
    );
    h.create(
        "volumesnapshots",
        "default",
        snapshot("kept", "data", Some("keep")),
    );
    h.settle();
    let s = h
        .get("volumesnapshots", "default", "kept")
        .expect("snapshot");
    assert_eq!(finalizers(&s), [AS_SOURCE_FINALIZER]);
    let content_name = s["status"]["boundVolumeSnapshotContentName"]
        .as_str()
        .expect("bound")
        .to_string();
    h.delete("volumesnapshots", "default", "kept");
    h.settle();
    assert!(h.get("volumesnapshots", "default", "kept").is_none());
    let content = h
        .get("volumesnapshotcontents", "", &content_name)
        .expect("retained");
    assert_eq!(content["metadata"]["annotations"][BEING_DELETED], "yes");
    assert!(snapshot_dir(&h.ctx.data_dir, &content_name).is_dir());
}

#[test]
fn a_snapshot_a_pending_claim_restores_from_is_deleted_after_that_claim() {
    let h = harness(true);
    h.bound_claim("data", &[("a", "one")]);
    h.ready_snapshot("snap", "data");
    let small = claim("small", "csi", "1Mi", Some(("VolumeSnapshot", "snap")));
    h.create("persistentvolumeclaims", "default", small);
    h.settle();
    let message = format!("error getting handle for DataSource Type VolumeSnapshot by Name snap: requested volume size {} is less than the size {} for the source snapshot snap", 1 << 20, 1u64 << 30);
    assert!(
        h.has_event("small", "ProvisioningFailed", &message),
        "{:?}",
        h.events("small")
    );
    h.delete("volumesnapshots", "default", "snap");
    h.settle();
    assert!(h.has_event(
        "snap",
        "SnapshotDeletePending",
        "Snapshot is being used to restore a PVC"
    ));
    assert!(h.get("volumesnapshots", "default", "snap").is_some());
    h.delete("persistentvolumeclaims", "default", "small");
    h.settle();
    assert!(h.get("volumesnapshots", "default", "snap").is_none());
}

#[test]
fn a_snapshot_whose_driver_failed_is_not_ready_for_a_restore() {
    let h = harness(true);
    let volume = h.bound_claim("data", &[]);
    std::fs::remove_dir_all(&volume).expect("remove");
    h.create("volumesnapshots", "default", snapshot("snap", "data", None));
    h.settle();
    let s = h
        .get("volumesnapshots", "default", "snap")
        .expect("snapshot");
    let content_name = s["status"]["boundVolumeSnapshotContentName"]
        .as_str()
        .expect("bound");
    assert_eq!(s["status"]["readyToUse"], false);
    let pv = volume
        .file_name()
        .expect("name")
        .to_string_lossy()
        .to_string();
    let error = format!("Failed to create snapshot: failed to take snapshot of the volume {pv}: \"rpc error: code = NotFound desc = volume id {pv} does not exist in the volumes list\"");
    assert_eq!(s["status"]["error"]["message"], json!(error));
    assert!(h.has_event(content_name, "SnapshotCreationFailed", &error));
    // The claim keeps the source protection while the snapshot is not ready.
    let data = h
        .get("persistentvolumeclaims", "default", "data")
        .expect("claim");
    assert!(finalizers(&data).contains(&PVC_FINALIZER.to_string()));
    let restore = claim("restored", "csi", "1Gi", Some(("VolumeSnapshot", "snap")));
    h.create("persistentvolumeclaims", "default", restore);
    h.settle();
    let message = "error getting handle for DataSource Type VolumeSnapshot by Name snap: snapshot snap is not Ready";
    assert!(
        h.has_event("restored", "ProvisioningFailed", message),
        "{:?}",
        h.events("restored")
    );
    let restored = h
        .get("persistentvolumeclaims", "default", "restored")
        .expect("claim");
    assert_eq!(restored["status"]["phase"], "Pending");
}

#[test]
fn a_clone_starts_as_a_copy_of_its_source() {
    let h = harness(true);
    let source = h.bound_claim("data", &[("a", "one"), ("b", "two")]);
    let small = claim(
        "small",
        "csi",
        "1Mi",
        Some(("PersistentVolumeClaim", "data")),
    );
    h.create("persistentvolumeclaims", "default", small);
    h.settle();
    let message = format!("error getting handle for DataSource Type PersistentVolumeClaim by Name data: error, new PVC request must be greater than or equal in size to the specified PVC data source, requested {} but source is {}", 1 << 20, 1 << 30);
    assert!(
        h.has_event("small", "ProvisioningFailed", &message),
        "{:?}",
        h.events("small")
    );
    h.create(
        "persistentvolumeclaims",
        "default",
        claim(
            "copy",
            "csi",
            "2Gi",
            Some(("PersistentVolumeClaim", "data")),
        ),
    );
    h.settle();
    assert_eq!(files(&h.volume_dir_of("copy")), files(&source));
    // The small clone is still Pending: the source stays protected.
    let data = h
        .get("persistentvolumeclaims", "default", "data")
        .expect("claim");
    assert!(finalizers(&data).contains(&volumes::CLONE_FINALIZER.to_string()));
    h.delete("persistentvolumeclaims", "default", "small");
    h.settle();
    let data = h
        .get("persistentvolumeclaims", "default", "data")
        .expect("claim");
    assert!(!finalizers(&data).contains(&volumes::CLONE_FINALIZER.to_string()));
}

#[test]
fn a_driver_without_clone_refuses_every_clone_with_the_provisioners_message() {
    let h = harness(false);
    h.bound_claim("data", &[("a", "one")]);
    h.create(
        "persistentvolumeclaims",
        "default",
        claim(
            "copy",
            "csi",
            "1Gi",
            Some(("PersistentVolumeClaim", "data")),
        ),
    );
    h.settle();
    let message = "CSI driver does not support clone operations: controller CLONE_VOLUME capability is not reported";
    assert!(h.has_event("copy", "ProvisioningFailed", message));
    let copy = h
        .get("persistentvolumeclaims", "default", "copy")
        .expect("claim");
    assert_eq!(copy["status"]["phase"], "Pending");
    let data = h
        .get("persistentvolumeclaims", "default", "data")
        .expect("claim");
    assert!(!finalizers(&data).contains(&volumes::CLONE_FINALIZER.to_string()));
}

#[test]
fn the_hostpath_provisioner_ignores_a_data_source_as_lib_based_ones_do() {
    let h = harness(true);
    h.bound_claim("data", &[("a", "one")]);
    let c = claim(
        "host",
        "standard",
        "1Gi",
        Some(("PersistentVolumeClaim", "data")),
    );
    h.create("persistentvolumeclaims", "default", c);
    h.settle();
    assert!(files(&h.volume_dir_of("host")).is_empty());
}
