//! The csi-snapshotter sidecar of the sandbox's CSI driver
//! (external-snapshotter `pkg/sidecar-controller`), for the contents whose
//! `driver` is [`CSI`]; another driver's contents are its own sidecar's.
//!
//! A dynamic content without a status gets its snapshot cut: the volume's
//! directory copied, at that instant (its writers stopped meanwhile: see
//! `kubelet::freeze`), to `data_dir/snapshots/<handle>`
//! (the handle is the content's name), and the status filled
//! (`snapshotHandle`, `creationTime` in Unix nanoseconds, `restoreSize` in
//! bytes: the volume's capacity, `readyToUse: true`); a failure is the
//! content's `status.error` with Warning `SnapshotCreationFailed`. A
//! pre-provisioned content is checked for its snapshot's directory. A
//! content marked being-deleted and terminating loses its data (with
//! `deletionPolicy: Delete`) and then its finalizer.

use serde_json::{json, Value};

use super::{
    has_finalizer, modify, remove_finalizers, snapshot_dir, str_at, BEING_DELETED, CLASSES,
    CONTENTS, CONTENT_FINALIZER,
};
use crate::controllers::volumes::CSI;
use crate::controllers::{is_terminating, name_of, tree_copy, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry::{self, rules::parse_quantity};

const COMPONENT: &str = "csi-snapshotter csi.sandbox.volmig.io";

pub(super) fn sync_content(ctx: &Ctx, content: &Value) {
    if str_at(content, &["spec", "driver"]) != CSI {
        return;
    }
    if should_delete(content) {
        return delete(ctx, content);
    }
    let status = &content["status"];
    if !content["spec"]["source"]["volumeHandle"].is_null() && status.is_null() {
        return create(ctx, content);
    }
    if status["readyToUse"] == json!(true) || is_terminating(content) {
        return;
    }
    if let Some(handle) = content["spec"]["source"]["snapshotHandle"].as_str() {
        check_pre_provisioned(ctx, content, handle);
    }
}

/// `shouldDelete`.
fn should_delete(content: &Value) -> bool {
    if !is_terminating(content) {
        return false;
    }
    let unbound = str_at(content, &["spec", "volumeSnapshotRef", "uid"]).is_empty();
    (!content["spec"]["source"]["snapshotHandle"].is_null() && unbound)
        || !content["metadata"]["annotations"][BEING_DELETED].is_null()
}

/// `CreateSnapshot` of the driver, then `updateSnapshotContentStatus`.
fn create(ctx: &Ctx, content: &Value) {
    let name = name_of(content).1;
    let class = str_at(content, &["spec", "volumeSnapshotClassName"]);
    if class.is_empty() {
        let e = format!("failed to take snapshot {name} without a snapshot class");
        return failed(ctx, content, &wrap(name, &e));
    }
    if registry_get(ctx, CLASSES, class).is_none() {
        let e = format!("volumesnapshotclass.snapshot.storage.k8s.io \"{class}\" not found");
        return failed(ctx, content, &wrap(name, &e));
    }
    let handle = str_at(content, &["spec", "source", "volumeHandle"]);
    let volume_dir = ctx.data_dir.join("volumes").join(handle);
    let volume = ctx
        .store
        .list(registry::get("persistentvolumes"), None)
        .0
        .into_iter()
        .find(|pv| {
            pv["spec"]["csi"]["driver"] == CSI && pv["spec"]["csi"]["volumeHandle"] == json!(handle)
        });
    let (Some(volume), false) = (volume, handle.contains('/') || !volume_dir.is_dir()) else {
        let e = format!("rpc error: code = NotFound desc = volume id {handle} does not exist in the volumes list");
        let message = format!("failed to take snapshot of the volume {handle}: {e:?}");
        return failed(ctx, content, &message);
    };
    let size = volume["spec"]["capacity"]["storage"]
        .as_str()
        .and_then(parse_quantity)
        .and_then(|b| i64::try_from(b).ok())
        .unwrap_or(0);
    let target = snapshot_dir(&ctx.data_dir, name);
    let taken_at = time::OffsetDateTime::now_utc();
    let copied = std::fs::create_dir_all(ctx.data_dir.join("snapshots")).and_then(|()| {
        match target.exists() {
            true => Ok(0),
            false => {
                // One point in time, as a device snapshot: the pods'
                // processes on the volume are stopped while it is
                // copied, and continue when `frozen` drops, whatever
                // the outcome.
                let frozen = ctx.freezer.freeze(&volume_dir);
                let copied = tree_copy::copy_tree(&volume_dir, &target);
                drop(frozen);
                copied
            }
        }
    });
    if let Err(e) = copied {
        let e = format!("rpc error: code = Internal desc = failed to create snapshot: {e}");
        let message = format!("failed to take snapshot of the volume {handle}: {e:?}");
        return failed(ctx, content, &message);
    }
    let nanos = i64::try_from(taken_at.unix_timestamp_nanos()).unwrap_or(0);
    let mut status = json!({
        "snapshotHandle": name,
        "readyToUse": true,
        "creationTime": nanos,
    });
    if size > 0 {
        status["restoreSize"] = json!(size);
    }
    modify(ctx, CONTENTS, content, |c| {
        c["status"] = status;
        true
    });
}

fn registry_get(ctx: &Ctx, plural: &str, name: &str) -> Option<Value> {
    ctx.store.get(registry::get(plural), "", name).ok()
}

fn wrap(name: &str, e: &str) -> String {
    format!("failed to get input parameters to create snapshot for content {name}: {e:?}")
}

/// `updateContentErrorStatusWithEvent` after a failed `createSnapshot`.
fn failed(ctx: &Ctx, content: &Value, error: &str) {
    let message = format!("Failed to create snapshot: {error}");
    error_status(ctx, content, "SnapshotCreationFailed", &message);
}

fn error_status(ctx: &Ctx, content: &Value, reason: &str, message: &str) {
    if content["status"]["error"]["message"] == json!(message) {
        return;
    }
    let error = json!({"time": crate::time::now(), "message": message});
    modify(ctx, CONTENTS, content, |c| {
        if !c["status"].is_object() {
            c["status"] = json!({"readyToUse": false});
        }
        c["status"]["error"] = error;
        true
    });
    let source = Source::new(COMPONENT);
    events::record(
        &ctx.store,
        &source,
        content,
        EventType::Warning,
        reason,
        message,
    );
}

/// A pre-provisioned content: ready when the driver has the snapshot.
fn check_pre_provisioned(ctx: &Ctx, content: &Value, handle: &str) {
    let dir = snapshot_dir(&ctx.data_dir, handle);
    if handle.contains('/') || !dir.is_dir() {
        let message = format!("Failed to check and update snapshot content: failed to list snapshot for content {}: \"rpc error: code = NotFound desc = snapshot id {handle} does not exist in the snapshots list\"", name_of(content).1);
        return error_status(
            ctx,
            content,
            "SnapshotContentCheckandUpdateFailed",
            &message,
        );
    }
    let created = std::fs::metadata(&dir)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(0));
    let size = i64::try_from(tree_copy::tree_bytes(&dir)).unwrap_or(0);
    let handle = handle.to_string();
    modify(ctx, CONTENTS, content, |c| {
        let mut status =
            json!({"snapshotHandle": handle, "readyToUse": true, "creationTime": created});
        if size > 0 {
            status["restoreSize"] = json!(size);
        }
        c["status"] = status;
        true
    });
}

/// `deleteCSISnapshot` (with `deletionPolicy: Delete` and a handle), then
/// `removeContentFinalizer`.
fn delete(ctx: &Ctx, content: &Value) {
    let handle = str_at(content, &["status", "snapshotHandle"]);
    if content["spec"]["deletionPolicy"] == "Delete" && !handle.is_empty() {
        let dir = snapshot_dir(&ctx.data_dir, handle);
        if !handle.contains('/') {
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    let source = Source::new(COMPONENT);
                    let (kind, reason) = (EventType::Warning, "SnapshotDeleteError");
                    events::record(
                        &ctx.store,
                        &source,
                        content,
                        kind,
                        reason,
                        "Failed to delete snapshot",
                    );
                    return;
                }
                _ => {}
            }
        }
        // `clearVolumeContentStatus`: the handle goes, not ready.
        modify(ctx, CONTENTS, content, |c| {
            if let Some(status) = c["status"].as_object_mut() {
                status.remove("snapshotHandle");
                status.insert("readyToUse".into(), json!(false));
            }
            true
        });
    }
    if has_finalizer(content, CONTENT_FINALIZER) {
        modify(ctx, CONTENTS, content, |c| {
            remove_finalizers(c, &[CONTENT_FINALIZER])
        });
    }
}
