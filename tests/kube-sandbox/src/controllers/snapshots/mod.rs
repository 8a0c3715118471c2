//! The CSI snapshot controllers: the common snapshot-controller
//! (external-snapshotter `pkg/common-controller`), here, and the
//! csi-snapshotter sidecar of the sandbox's CSI driver ([`sidecar`]).
//!
//! For a VolumeSnapshot of a claim: its class is resolved (the one named,
//! else the single default class of the source PV's CSI driver) and
//! written into its spec; it gets `volumesnapshot-as-source-protection`
//! (and `volumesnapshot-bound-protection` once bound to a content with
//! `deletionPolicy: Delete`); its claim gets `pvc-as-source-protection`
//! until no snapshot of it is still not ready; the content
//! `snapcontent-<uid>` is created (Normal `CreatingSnapshot`) and the
//! snapshot bound to it; the sidecar cuts the snapshot and fills the
//! content's status, which is copied back (Normal `SnapshotCreated`,
//! `SnapshotReady`). Errors go into `status.error` with a Warning event,
//! once per distinct message, as `updateSnapshotErrorStatusWithEvent` does.
//!
//! Deletion: a snapshot that a Pending claim restores from waits (Warning
//! `SnapshotDeletePending`); otherwise its content is marked
//! `volumesnapshot-being-deleted` and, with `deletionPolicy: Delete`,
//! deleted (the sidecar removes the data, then the content's finalizer);
//! the snapshot's finalizers go once its content is gone or retained.

mod sidecar;
mod status;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{is_terminating, log_err, name_of, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry::{self, SNAPSHOT_GROUP};
use status::{error_status, update_snapshot_status};

pub const SNAPSHOTS: &str = "volumesnapshots";
pub const CONTENTS: &str = "volumesnapshotcontents";
pub const CLASSES: &str = "volumesnapshotclasses";
const CLAIMS: &str = "persistentvolumeclaims";

pub const DEFAULT_CLASS_ANNOTATION: &str = "snapshot.storage.kubernetes.io/is-default-class";
pub const AS_SOURCE_FINALIZER: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection";
pub const BOUND_FINALIZER: &str = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection";
pub const CONTENT_FINALIZER: &str =
    "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection";
pub const PVC_FINALIZER: &str = "snapshot.storage.kubernetes.io/pvc-as-source-protection";
const BEING_DELETED: &str = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted";

/// Where the sandbox's CSI driver keeps the snapshot with this handle
/// (its content's name, for the snapshots it cuts).
pub fn snapshot_dir(data_dir: &Path, handle: &str) -> PathBuf {
    data_dir.join("snapshots").join(handle)
}

fn event(ctx: &Ctx, obj: &Value, kind: EventType, reason: &str, message: &str) {
    let source = Source::new("snapshot-controller");
    events::record(&ctx.store, &source, obj, kind, reason, message);
}

fn list(ctx: &Ctx, plural: &str) -> Vec<Value> {
    ctx.store.list(registry::get(plural), None).0
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_str()
        .unwrap_or_default()
}

fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|l| l.iter().any(|f| f == finalizer))
}

/// Edits the stored object (gone or unchanged: nothing written).
fn modify(ctx: &Ctx, plural: &str, obj: &Value, edit: impl FnOnce(&mut Value) -> bool) {
    let (ns, name) = name_of(obj);
    let written = ctx.store.modify(registry::get(plural), ns, name, edit);
    log_err(plural, written);
}

fn add_finalizers(obj: &mut Value, finalizers: &[&str]) -> bool {
    let mut changed = false;
    for f in finalizers {
        if has_finalizer(obj, f) {
            continue;
        }
        match obj["metadata"]["finalizers"].as_array_mut() {
            Some(list) => list.push(json!(f)),
            None => obj["metadata"]["finalizers"] = json!([f]),
        }
        changed = true;
    }
    changed
}

fn remove_finalizers(obj: &mut Value, finalizers: &[&str]) -> bool {
    let Some(list) = obj["metadata"]["finalizers"].as_array_mut() else {
        return false;
    };
    let before = list.len();
    list.retain(|f| !finalizers.iter().any(|r| f == r));
    before != list.len()
}

pub fn reconcile(ctx: &Ctx) {
    if !ctx.snapshots {
        return;
    }
    for content in list(ctx, CONTENTS) {
        sync_content(ctx, &content);
        sidecar::sync_content(ctx, &content);
    }
    for snapshot in list(ctx, SNAPSHOTS) {
        sync_snapshot(ctx, &snapshot);
    }
}

/// `GetDynamicSnapshotContentNameForSnapshot`.
fn content_name_for(snapshot: &Value) -> String {
    format!("snapcontent-{}", str_at(snapshot, &["metadata", "uid"]))
}

/// `IsVolumeSnapshotRefSet`: the content points back at this snapshot.
fn refers_to(content: &Value, snapshot: &Value) -> bool {
    let r = &content["spec"]["volumeSnapshotRef"];
    let (ns, name) = name_of(snapshot);
    r["name"] == json!(name)
        && r["namespace"] == json!(ns)
        && r["uid"] == snapshot["metadata"]["uid"]
}

/// `IsSnapshotDeletionCandidate`.
fn deletion_candidate(snapshot: &Value) -> bool {
    is_terminating(snapshot)
        && (has_finalizer(snapshot, AS_SOURCE_FINALIZER)
            || has_finalizer(snapshot, BOUND_FINALIZER))
}

/// The common controller's `syncContent`: the content finalizer, and the
/// being-deleted annotation once its snapshot is going.
fn sync_content(ctx: &Ctx, content: &Value) {
    let reference = &content["spec"]["volumeSnapshotRef"];
    if str_at(reference, &["uid"]).is_empty() {
        return;
    }
    if !is_terminating(content) && !has_finalizer(content, CONTENT_FINALIZER) {
        modify(ctx, CONTENTS, content, |c| {
            add_finalizers(c, &[CONTENT_FINALIZER])
        });
        return;
    }
    let snapshot = ctx.store.get(
        registry::get(SNAPSHOTS),
        str_at(reference, &["namespace"]),
        str_at(reference, &["name"]),
    );
    let going = snapshot
        .ok()
        .filter(|s| s["metadata"]["uid"] == reference["uid"])
        .is_some_and(|s| deletion_candidate(&s));
    if going {
        mark_being_deleted(ctx, content);
    }
}

fn mark_being_deleted(ctx: &Ctx, content: &Value) {
    modify(ctx, CONTENTS, content, |c| {
        if !c["metadata"]["annotations"][BEING_DELETED].is_null() {
            return false;
        }
        if !c["metadata"]["annotations"].is_object() {
            c["metadata"]["annotations"] = json!({});
        }
        c["metadata"]["annotations"][BEING_DELETED] = json!("yes");
        true
    });
}

fn sync_snapshot(ctx: &Ctx, snapshot: &Value) {
    // The base controller's `checkAndUpdateSnapshotClass` comes first.
    let Some(snapshot) = check_class(ctx, snapshot) else {
        return;
    };
    remove_claim_finalizer(ctx, &snapshot, false);
    if is_terminating(&snapshot) {
        return delete_snapshot(ctx, &snapshot);
    }
    let dynamic = !str_at(&snapshot, &["spec", "source", "persistentVolumeClaimName"]).is_empty();
    let content = match dynamic {
        true => {
            get(ctx, CONTENTS, "", &content_name_for(&snapshot)).filter(|c| refers_to(c, &snapshot))
        }
        false => {
            let name = str_at(&snapshot, &["spec", "source", "volumeSnapshotContentName"]);
            get(ctx, CONTENTS, "", name)
        }
    };
    // `checkandAddSnapshotFinalizers`.
    let bound = !str_at(&snapshot, &["status", "boundVolumeSnapshotContentName"]).is_empty();
    let mut wanted = vec![AS_SOURCE_FINALIZER];
    if bound
        && content
            .as_ref()
            .is_some_and(|c| c["spec"]["deletionPolicy"] == "Delete")
    {
        wanted.push(BOUND_FINALIZER);
    }
    if wanted.iter().any(|f| !has_finalizer(&snapshot, f)) {
        return modify(ctx, SNAPSHOTS, &snapshot, |s| add_finalizers(s, &wanted));
    }
    match content {
        Some(content) => {
            if dynamic || bind_content(ctx, &snapshot, &content) {
                update_snapshot_status(ctx, &snapshot, &content);
            }
        }
        None if dynamic => create_content(ctx, &snapshot),
        None => error_status(
            ctx,
            &snapshot,
            true,
            "SnapshotContentMissing",
            "VolumeSnapshotContent is missing",
        ),
    }
}

fn get(ctx: &Ctx, plural: &str, ns: &str, name: &str) -> Option<Value> {
    ctx.store.get(registry::get(plural), ns, name).ok()
}

/// A pre-provisioned content names this snapshot: its ref gets the
/// snapshot's uid. False while the binding is not made (or not possible).
fn bind_content(ctx: &Ctx, snapshot: &Value, content: &Value) -> bool {
    let reference = &content["spec"]["volumeSnapshotRef"];
    let (ns, name) = name_of(snapshot);
    if content["spec"]["source"]["snapshotHandle"].is_null() {
        let message = format!("VolumeSnapshotContent {} is dynamically provisioned while expecting a pre-provisioned one", name_of(content).1);
        error_status(ctx, snapshot, true, "SnapshotContentMismatch", &message);
        return false;
    }
    if reference["name"] != json!(name) || reference["namespace"] != json!(ns) {
        let message = format!(
            "VolumeSnapshotContent [{}] is bound to a different snapshot",
            name_of(content).1
        );
        error_status(ctx, snapshot, true, "SnapshotContentMisbound", &message);
        return false;
    }
    if reference["uid"] == snapshot["metadata"]["uid"] {
        return true;
    }
    if !str_at(reference, &["uid"]).is_empty() {
        let message = format!(
            "VolumeSnapshotContent [{}] is bound to a different snapshot",
            name_of(content).1
        );
        error_status(ctx, snapshot, true, "SnapshotContentMisbound", &message);
        return false;
    }
    let uid = snapshot["metadata"]["uid"].clone();
    let class = snapshot["spec"]["volumeSnapshotClassName"].clone();
    modify(ctx, CONTENTS, content, |c| {
        c["spec"]["volumeSnapshotRef"]["uid"] = uid;
        if c["spec"]["volumeSnapshotClassName"].is_null() && !class.is_null() {
            c["spec"]["volumeSnapshotClassName"] = class;
        }
        true
    });
    false
}

/// `checkAndUpdateSnapshotClass`: the snapshot as it continues, None when
/// its class is not resolved (a live snapshot waits; a terminating one
/// with a named class that is gone goes on to its deletion).
fn check_class(ctx: &Ctx, snapshot: &Value) -> Option<Value> {
    let named = str_at(snapshot, &["spec", "volumeSnapshotClassName"]);
    if !named.is_empty() {
        if get(ctx, CLASSES, "", named).is_some() || is_terminating(snapshot) {
            return Some(snapshot.clone());
        }
        let message = format!("Failed to get snapshot class with error volumesnapshotclass.snapshot.storage.k8s.io \"{named}\" not found");
        error_status(ctx, snapshot, false, "GetSnapshotClassFailed", &message);
        return None;
    }
    if snapshot["spec"]["source"]["persistentVolumeClaimName"].is_null() {
        return Some(snapshot.clone());
    }
    let chosen = source_volume(ctx, snapshot).and_then(|pv| {
        if pv["spec"]["csi"].is_null() {
            let (ns, name) = name_of(snapshot);
            return Err(format!(
                "snapshotting non-CSI volumes is not supported, snapshot:{ns}/{name}"
            ));
        }
        let driver = str_at(&pv, &["spec", "csi", "driver"]);
        let defaults: Vec<Value> = list(ctx, CLASSES)
            .into_iter()
            .filter(|c| c["metadata"]["annotations"][DEFAULT_CLASS_ANNOTATION] == "true")
            .filter(|c| c["driver"] == json!(driver))
            .collect();
        match defaults.as_slice() {
            [] => Err("cannot find default snapshot class".to_string()),
            [one] => Ok(name_of(one).1.to_string()),
            many => Err(format!(
                "{} default snapshot classes were found",
                many.len()
            )),
        }
    });
    match chosen {
        Ok(class) => {
            let (ns, name) = name_of(snapshot);
            let written = ctx.store.modify(registry::get(SNAPSHOTS), ns, name, |s| {
                s["spec"]["volumeSnapshotClassName"] = json!(class);
                true
            });
            log_err(SNAPSHOTS, written)
        }
        Err(e) => {
            let message = format!("Failed to set default snapshot class with error {e}");
            error_status(
                ctx,
                snapshot,
                false,
                "SetDefaultSnapshotClassFailed",
                &message,
            );
            None
        }
    }
}

/// `getVolumeFromVolumeSnapshot`: the bound PV of the snapshot's claim.
fn source_volume(ctx: &Ctx, snapshot: &Value) -> Result<Value, String> {
    let claim = source_claim(ctx, snapshot)?;
    let claim_name = name_of(&claim).1;
    if str_at(&claim, &["status", "phase"]) != "Bound" {
        return Err(format!(
            "the PVC {claim_name} is not yet bound to a PV, will not attempt to take a snapshot"
        ));
    }
    let pv_name = str_at(&claim, &["spec", "volumeName"]);
    let pv = ctx
        .store
        .get(registry::get("persistentvolumes"), "", pv_name)
        .map_err(|e| format!("failed to retrieve PV {pv_name} from the API server: \"{e}\""))?;
    let r = &pv["spec"]["claimRef"];
    let uid = str_at(r, &["uid"]);
    let bound = r["name"] == json!(claim_name)
        && r["namespace"] == claim["metadata"]["namespace"]
        && (uid.is_empty() || r["uid"] == claim["metadata"]["uid"]);
    if !bound {
        return Err("claim in dataSource not bound or invalid".into());
    }
    Ok(pv)
}

/// `getClaimFromVolumeSnapshot`.
fn source_claim(ctx: &Ctx, snapshot: &Value) -> Result<Value, String> {
    let (ns, _) = name_of(snapshot);
    let name = str_at(snapshot, &["spec", "source", "persistentVolumeClaimName"]);
    ctx.store
        .get(registry::get(CLAIMS), ns, name)
        .map_err(|e| format!("failed to retrieve PVC {name} from the lister: \"{e}\""))
}

/// `createSnapshotContent`, with `ensurePVCFinalizer` first.
fn create_content(ctx: &Ctx, snapshot: &Value) {
    let fail = |message: String| {
        let message = format!("Failed to create snapshot content with error {message}");
        error_status(
            ctx,
            snapshot,
            true,
            "SnapshotContentCreationFailed",
            &message,
        );
    };
    let (ns, name) = name_of(snapshot);
    let update_error = |what: &str, why: &str| {
        format!("snapshot controller failed to update {what} on API server: {why}")
    };
    let Ok(claim) = source_claim(ctx, snapshot) else {
        return fail(update_error(name, "cannot get claim from snapshot"));
    };
    if !has_finalizer(&claim, PVC_FINALIZER) {
        if is_terminating(&claim) {
            let why = "cannot add finalizer on claim because it is being deleted";
            return fail(update_error(name_of(&claim).1, why));
        }
        modify(ctx, CLAIMS, &claim, |c| add_finalizers(c, &[PVC_FINALIZER]));
    }
    let class_name = str_at(snapshot, &["spec", "volumeSnapshotClassName"]);
    let Some(class) = get(ctx, CLASSES, "", class_name) else {
        return fail(format!("failed to get input parameters to create snapshot {name}: \"volumesnapshotclass.snapshot.storage.k8s.io \\\"{class_name}\\\" not found\""));
    };
    let volume = match source_volume(ctx, snapshot) {
        Ok(volume) => volume,
        Err(e) => {
            let e = e.replace('"', "\\\"");
            return fail(format!(
                "failed to get input parameters to create snapshot {name}: \"{e}\""
            ));
        }
    };
    if volume["spec"]["csi"].is_null() {
        return fail(format!(
            "cannot find CSI PersistentVolumeSource for volume {}",
            name_of(&volume).1
        ));
    }
    let content_name = content_name_for(snapshot);
    let content = json!({
        "apiVersion": format!("{SNAPSHOT_GROUP}/v1"),
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": content_name},
        "spec": {
            "volumeSnapshotRef": {
                "kind": "VolumeSnapshot",
                "namespace": ns,
                "name": name,
                "uid": snapshot["metadata"]["uid"],
                "apiVersion": format!("{SNAPSHOT_GROUP}/v1"),
                "resourceVersion": snapshot["metadata"]["resourceVersion"],
            },
            "source": {"volumeHandle": volume["spec"]["csi"]["volumeHandle"]},
            "volumeSnapshotClassName": class_name,
            "deletionPolicy": class["deletionPolicy"],
            "driver": class["driver"],
        },
    });
    let created = match ctx.store.create(registry::get(CONTENTS), "", content) {
        Ok(created) => created,
        Err(crate::ApiError::AlreadyExists { .. }) => return,
        Err(e) => {
            let message = format!(
                "Error creating volume snapshot content object for snapshot {ns}/{name}: {e}."
            );
            event(
                ctx,
                snapshot,
                EventType::Warning,
                "CreateSnapshotContentFailed",
                &message,
            );
            return;
        }
    };
    let message = format!("Waiting for a snapshot {ns}/{name} to be created by the CSI driver.");
    event(
        ctx,
        snapshot,
        EventType::Normal,
        "CreatingSnapshot",
        &message,
    );
    update_snapshot_status(ctx, snapshot, &created);
}

/// `checkandRemovePVCFinalizer`: the source claim keeps its finalizer
/// while a snapshot of it (other than this one, with `skip_self`) is not
/// ready.
fn remove_claim_finalizer(ctx: &Ctx, snapshot: &Value, skip_self: bool) {
    let Ok(claim) = source_claim(ctx, snapshot) else {
        return;
    };
    if !has_finalizer(&claim, PVC_FINALIZER) {
        return;
    }
    let (ns, claim_name) = name_of(&claim);
    let in_use = ctx
        .store
        .list(registry::get(SNAPSHOTS), Some(ns))
        .0
        .iter()
        .filter(|s| !(skip_self && name_of(s).1 == name_of(snapshot).1))
        .any(|s| {
            s["spec"]["source"]["persistentVolumeClaimName"] == json!(claim_name)
                && s["status"]["readyToUse"] != json!(true)
        });
    if !in_use {
        modify(ctx, CLAIMS, &claim, |c| {
            remove_finalizers(c, &[PVC_FINALIZER])
        });
    }
}

/// `processSnapshotWithDeletionTimestamp` and
/// `checkandRemoveSnapshotFinalizersAndCheckandDeleteContent`.
fn delete_snapshot(ctx: &Ctx, snapshot: &Value) {
    if !deletion_candidate(snapshot) {
        return;
    }
    let mut content_name =
        str_at(snapshot, &["status", "boundVolumeSnapshotContentName"]).to_string();
    if content_name.is_empty() && !snapshot["spec"]["source"]["persistentVolumeClaimName"].is_null()
    {
        content_name = content_name_for(snapshot);
    }
    let content = get(ctx, CONTENTS, "", &content_name).filter(|c| refers_to(c, snapshot));
    let delete_content = content
        .as_ref()
        .is_some_and(|c| c["spec"]["deletionPolicy"] == "Delete");
    if content.is_some() && restoring_from(ctx, snapshot) {
        event(
            ctx,
            snapshot,
            EventType::Warning,
            "SnapshotDeletePending",
            "Snapshot is being used to restore a PVC",
        );
        return;
    }
    if let Some(content) = &content {
        mark_being_deleted(ctx, content);
        if delete_content && !is_terminating(content) {
            let deleted = ctx.store.delete(
                registry::get(CONTENTS),
                "",
                name_of(content).1,
                &Default::default(),
            );
            if let Err(e) = deleted {
                if !matches!(e, crate::ApiError::NotFound { .. }) {
                    let message = "Failed to delete snapshot content API object";
                    let reason = "SnapshotContentObjectDeleteError";
                    event(ctx, snapshot, EventType::Warning, reason, message);
                    return;
                }
            }
        }
    }
    remove_claim_finalizer(ctx, snapshot, true);
    let keep_bound = content.is_some() && delete_content;
    modify(ctx, SNAPSHOTS, snapshot, |s| {
        let mut gone = vec![AS_SOURCE_FINALIZER];
        if !keep_bound {
            gone.push(BOUND_FINALIZER);
        }
        remove_finalizers(s, &gone)
    });
}

/// `isVolumeBeingCreatedFromSnapshot`: a Pending claim of the namespace
/// names the snapshot in its `dataSource`.
fn restoring_from(ctx: &Ctx, snapshot: &Value) -> bool {
    let (ns, name) = name_of(snapshot);
    ctx.store
        .list(registry::get(CLAIMS), Some(ns))
        .0
        .iter()
        .any(|c| {
            let source = &c["spec"]["dataSource"];
            source["name"] == json!(name)
                && source["kind"] == "VolumeSnapshot"
                && source["apiGroup"] == SNAPSHOT_GROUP
                && c["status"]["phase"] == "Pending"
        })
}

#[cfg(test)]
mod tests;
