//! The sandbox's CSI driver as its external-provisioner drives it
//! (kubernetes-csi/external-provisioner `pkg/controller`): `Provisioning`
//! before each attempt, the claim's data source resolved and checked
//! (`getSnapshotSource`, `getPVCSource`), a clone's source held by
//! `provisioner.storage.kubernetes.io/cloning-protection` while the clone
//! is Pending, and every failure a `ProvisioningFailed` with the error as
//! the provisioner words it, retried on the next pass.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::{json, Value};

use super::provision::{make_volume, provisioner_event};
use super::{
    annotation, has_finalizer, phase, remove_finalizer, str_at, update, View, CLAIMS, CSI,
    SELECTED_NODE,
};
use crate::controllers::snapshots;
use crate::controllers::{is_terminating, name_of, Ctx};
use crate::events::EventType;
use crate::registry::{self, rules::parse_quantity, SNAPSHOT_GROUP};

/// The events' source: `<driver>_<host>_<uuid>` for the real sidecar.
pub(crate) const COMPONENT: &str = "csi.sandbox.volmig.io_kube-sandbox";
pub const CLONE_FINALIZER: &str = "provisioner.storage.kubernetes.io/cloning-protection";
/// Held on a snapshot while a volume is being restored from it.
const SNAPSHOT_SOURCE_FINALIZER: &str =
    "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection";
const IDENTITY_KEY: &str = "storage.kubernetes.io/csiProvisionerIdentity";

/// `spec.csi` of a volume the driver made: its handle is the PV's name
/// (and its directory's), its attributes the provisioner's identity (the
/// driver returns no volume context for a class without parameters).
pub(super) fn volume_source(handle: &str) -> Value {
    json!({
        "driver": CSI,
        "volumeHandle": handle,
        "volumeAttributes": {IDENTITY_KEY: identity()},
    })
}

/// `<start time in ms>-<random up to 10000>-<driver>`, per process.
fn identity() -> &'static str {
    static IDENTITY: OnceLock<String> = OnceLock::new();
    IDENTITY.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let random = (now.subsec_nanos() ^ std::process::id()) % 10_000;
        format!("{}-{random}-{CSI}", now.as_millis())
    })
}

/// What to fill a new volume from.
enum Content {
    Empty,
    Snapshot { name: String, dir: PathBuf },
    Clone(PathBuf),
}

/// `provisionClaimOperation` with the CSI provisioner's `Provision`.
pub(super) fn provision(ctx: &Ctx, view: &mut View, claim: &Value, class: &Value) {
    let (ns, name) = name_of(claim);
    let event = |kind, reason: &str, message: &str| {
        provisioner_event(ctx, CSI, claim, kind, reason, message);
    };
    event(
        EventType::Normal,
        "Provisioning",
        &format!("External provisioner is provisioning volume for claim \"{ns}/{name}\""),
    );
    let content = match prepare(ctx, view, claim, class) {
        Ok(Some(content)) => content,
        Ok(None) => {
            event(
                EventType::Normal,
                "Provisioning",
                "Assuming an external populator will provision the volume",
            );
            return;
        }
        Err(message) => return event(EventType::Warning, "ProvisioningFailed", &message),
    };
    let node = annotation(claim, SELECTED_NODE).unwrap_or_default();
    let dir = match &content {
        Content::Empty => None,
        Content::Snapshot { dir, .. } | Content::Clone(dir) => Some(dir.as_path()),
    };
    if let Err(message) = make_volume(ctx, claim, class, CSI, node, dir) {
        return event(EventType::Warning, "ProvisioningFailed", &message);
    }
    if let Content::Snapshot { name, .. } = &content {
        set_snapshot_finalizer(ctx, ns, name, false);
    }
}

/// `prepareProvision` up to `CreateVolume`: the source's directory, None
/// for a kind an external populator fills.
fn prepare(
    ctx: &Ctx,
    view: &mut View,
    claim: &Value,
    class: &Value,
) -> Result<Option<Content>, String> {
    let spec = &claim["spec"];
    let source = match (&spec["dataSource"], &spec["dataSourceRef"]) {
        (s, _) if s.is_object() => s.clone(),
        (_, r) if r.is_object() => {
            if r["namespace"].as_str().is_some_and(|n| !n.is_empty()) {
                return Err("dataSourceRef namespace specified but the CrossNamespaceVolumeDataSource feature is disabled".into());
            }
            r.clone()
        }
        _ => Value::Null,
    };
    let kind = str_at(&source, &["kind"]);
    let source_name = str_at(&source, &["name"]);
    if !source.is_null() {
        if source_name.is_empty() {
            return Err(format!(
                "the PVC source not found for PVC {}",
                name_of(claim).1
            ));
        }
        match kind {
            "VolumeSnapshot" => {
                let group = str_at(&source, &["apiGroup"]);
                if group != SNAPSHOT_GROUP {
                    return Err(format!("the PVC source does not belong to the right APIGroup. Expected {SNAPSHOT_GROUP}, Got {group}"));
                }
            }
            "PersistentVolumeClaim" => {
                if !ctx.csi_clone {
                    return Err("CSI driver does not support clone operations: controller CLONE_VOLUME capability is not reported".into());
                }
            }
            _ => return Ok(None),
        }
    }
    if !spec["selector"].is_null() {
        return Err("claim Selector is not supported".into());
    }
    if source.is_null() {
        return Ok(Some(Content::Empty));
    }
    let handle_error = |e: String| {
        format!("error getting handle for DataSource Type {kind} by Name {source_name}: {e}")
    };
    let content = if kind == "VolumeSnapshot" {
        let dir = snapshot_source(ctx, claim, class, source_name).map_err(handle_error)?;
        set_snapshot_finalizer(ctx, name_of(claim).0, source_name, true);
        Content::Snapshot {
            name: source_name.to_string(),
            dir,
        }
    } else {
        let dir = claim_source(ctx, view, claim, class, source_name).map_err(handle_error)?;
        set_clone_finalizer(ctx, view, name_of(claim).0, source_name);
        Content::Clone(dir)
    };
    Ok(Some(content))
}

/// `getSnapshotSource`: the snapshot's directory once it is bound to a
/// content of the class's driver and ready, and no larger than the claim.
fn snapshot_source(ctx: &Ctx, claim: &Value, class: &Value, name: &str) -> Result<PathBuf, String> {
    let ns = name_of(claim).0;
    if !ctx.snapshots {
        return Err(format!(
            "error getting snapshot {name} from api server: the server could not find the requested resource (get volumesnapshots.snapshot.storage.k8s.io {name})"
        ));
    }
    let snapshot = ctx
        .store
        .get(registry::get(snapshots::SNAPSHOTS), ns, name)
        .map_err(|e| format!("error getting snapshot {name} from api server: {e}"))?;
    if is_terminating(&snapshot) && !has_finalizer(&snapshot, SNAPSHOT_SOURCE_FINALIZER) {
        return Err(format!("snapshot {name} is being deleted"));
    }
    let content_name = str_at(&snapshot, &["status", "boundVolumeSnapshotContentName"]);
    if content_name.is_empty() {
        return Err(format!("snapshot {name} not bound"));
    }
    let content = ctx
        .store
        .get(registry::get(snapshots::CONTENTS), "", content_name)
        .map_err(|_| format!("error getting snapshotcontent {content_name} for snapshot {name}"))?;
    let reference = &content["spec"]["volumeSnapshotRef"];
    if reference["uid"] != snapshot["metadata"]["uid"]
        || reference["namespace"] != json!(ns)
        || reference["name"] != json!(name)
    {
        return Err(format!(
            "snapshotcontent {content_name} for snapshot {name} is bound to a different snapshot"
        ));
    }
    if str_at(&content, &["spec", "driver"]) != str_at(class, &["provisioner"]) {
        return Err(format!(
            "snapshotcontent {content_name} for snapshot {name} is not handled by CSI driver of StorageClass {}",
            name_of(class).1
        ));
    }
    if snapshot["status"]["readyToUse"] != json!(true) {
        return Err(format!("snapshot {name} is not Ready"));
    }
    let handle = str_at(&content, &["status", "snapshotHandle"]);
    if handle.is_empty() {
        return Err(format!("snapshot handle {name} is not available"));
    }
    let restore = snapshot["status"]["restoreSize"]
        .as_str()
        .and_then(parse_quantity);
    let requested = storage(claim);
    if let (Some(restore), Some(requested)) = (restore, requested) {
        if requested < restore {
            return Err(format!(
                "requested volume size {requested} is less than the size {restore} for the source snapshot {name}"
            ));
        }
    }
    Ok(snapshots::snapshot_dir(&ctx.data_dir, handle))
}

fn storage(claim: &Value) -> Option<u128> {
    claim["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .and_then(parse_quantity)
}

/// `getPVCSource`: the source claim's directory when it is Bound, not
/// being deleted, no larger than the clone, and on a CSI volume of the
/// class's driver bound back to it, in the clone's volume mode.
fn claim_source(
    ctx: &Ctx,
    view: &View,
    claim: &Value,
    class: &Value,
    name: &str,
) -> Result<PathBuf, String> {
    let ns = name_of(claim).0;
    let Some(source) = view.claim(ns, name) else {
        return Err(format!(
            "error getting PVC {name} (namespace \"{ns}\") from api server: persistentvolumeclaim \"{name}\" not found"
        ));
    };
    if phase(source) != "Bound" {
        return Err(format!(
            "the PVC DataSource {name} must have a status of Bound.  Got {}",
            go_claim_status(&source["status"])
        ));
    }
    if is_terminating(source) {
        return Err(format!(
            "the PVC DataSource {name} is currently being deleted"
        ));
    }
    if source["spec"]["storageClassName"].is_null() {
        return Err(format!(
            "the source PVC ({name}) storageclass cannot be empty"
        ));
    }
    if let (Some(requested), Some(size)) = (storage(claim), storage(source)) {
        if requested < size {
            return Err(format!("error, new PVC request must be greater than or equal in size to the specified PVC data source, requested {requested} but source is {size}"));
        }
    }
    let pv_name = str_at(source, &["spec", "volumeName"]);
    if pv_name.is_empty() {
        return Err(format!("volume name is empty in source PVC {name}"));
    }
    let invalid = || "claim in dataSource not bound or invalid".to_string();
    let pv = view.volume(pv_name).ok_or_else(invalid)?;
    let reference = &pv["spec"]["claimRef"];
    let bound_back = reference["uid"] == source["metadata"]["uid"]
        && reference["namespace"] == json!(ns)
        && reference["name"] == json!(name);
    if pv["spec"]["csi"].is_null()
        || str_at(pv, &["spec", "csi", "driver"]) != str_at(class, &["provisioner"])
        || !bound_back
        || phase(pv) != "Bound"
    {
        return Err(invalid());
    }
    let mode = |v: &Value| {
        v["spec"]["volumeMode"]
            .as_str()
            .unwrap_or("Filesystem")
            .to_string()
    };
    match (mode(claim).as_str(), mode(pv).as_str()) {
        ("Filesystem", "Block") => return Err("the source PVC and destination PVCs must have the same volume mode for cloning.  Source is Block, but new PVC requested Filesystem".into()),
        ("Block", m) if m != "Block" => return Err("the source PVC and destination PVCs must have the same volume mode for cloning.  Source is Filesystem, but new PVC requested Block".into()),
        _ => {}
    }
    let handle = str_at(pv, &["spec", "csi", "volumeHandle"]);
    Ok(ctx.data_dir.join("volumes").join(handle))
}

/// A claim's status as the provisioner's `%v` prints the struct value
/// (a Pending claim has no access modes, capacity or conditions).
fn go_claim_status(status: &Value) -> String {
    format!(
        "{{{} [] map[] [] map[] map[] <nil> <nil>}}",
        status["phase"].as_str().unwrap_or_default()
    )
}

fn set_clone_finalizer(ctx: &Ctx, view: &mut View, ns: &str, name: &str) {
    let Some(source) = view.claim(ns, name).cloned() else {
        return;
    };
    if has_finalizer(&source, CLONE_FINALIZER) {
        return;
    }
    update(ctx, view, CLAIMS, &source, |c| {
        if let Some(list) = c["metadata"]["finalizers"].as_array_mut() {
            list.push(json!(CLONE_FINALIZER));
        } else {
            c["metadata"]["finalizers"] = json!([CLONE_FINALIZER]);
        }
    });
}

/// Adds (`hold`) or removes the provisioner's finalizer on a snapshot
/// a volume is being restored from.
fn set_snapshot_finalizer(ctx: &Ctx, ns: &str, name: &str, hold: bool) {
    let written = ctx
        .store
        .modify(registry::get(snapshots::SNAPSHOTS), ns, name, |s| {
            if !hold {
                return remove_finalizer(s, SNAPSHOT_SOURCE_FINALIZER);
            }
            if has_finalizer(s, SNAPSHOT_SOURCE_FINALIZER) || is_terminating(s) {
                return false;
            }
            if let Some(list) = s["metadata"]["finalizers"].as_array_mut() {
                list.push(json!(SNAPSHOT_SOURCE_FINALIZER));
            } else {
                s["metadata"]["finalizers"] = json!([SNAPSHOT_SOURCE_FINALIZER]);
            }
            true
        });
    crate::controllers::log_err("snapshot source finalizer", written);
}

/// The external-provisioner's CloningProtectionController: a claim loses
/// the cloning finalizer once no Pending claim of its namespace clones it.
pub(super) fn protect_clone_source(ctx: &Ctx, view: &mut View, claim: &Value) {
    if !has_finalizer(claim, CLONE_FINALIZER) {
        return;
    }
    let (ns, name) = name_of(claim);
    let cloning = view.claims.iter().any(|c| {
        name_of(c).0 == ns
            && c["spec"]["dataSource"]["kind"] == "PersistentVolumeClaim"
            && c["spec"]["dataSource"]["name"] == json!(name)
            && phase(c) == "Pending"
    });
    if !cloning {
        update(ctx, view, CLAIMS, claim, |c| {
            remove_finalizer(c, CLONE_FINALIZER);
        });
    }
}
