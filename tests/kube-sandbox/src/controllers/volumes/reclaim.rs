//! Volume sync (`syncVolume`), reclaim by policy and the pv-protection
//! controller.

use serde_json::Value;

use super::binding::{set_volume_phase, volume_mode_mismatch};
use super::provision::provisioned_here;
use super::{
    annotation, event, has_finalizer, is_gone, phase, remove_finalizer, str_at, update, View,
    BOUND_BY_CONTROLLER, PROVISIONED_BY, PV_PROTECTION, VOLUMES,
};
use crate::controllers::{is_terminating, log_err, name_of, Ctx};
use crate::events::EventType;
use crate::registry;

// ---------------------------------------------------------------------------
// Volumes

pub(super) fn sync_volume(ctx: &Ctx, view: &mut View, volume: Value) {
    let Some(volume) = protect_volume(ctx, view, volume) else {
        return;
    };
    let name = name_of(&volume).1.to_string();
    let reference = &volume["spec"]["claimRef"];
    if reference.is_null() || str_at(reference, &["uid"]).is_empty() {
        // Unused, or reserved for a claim that has not bound yet.
        set_phase(ctx, view, &volume, "Available");
        return;
    }
    let claim = view
        .claim(
            str_at(reference, &["namespace"]),
            str_at(reference, &["name"]),
        )
        .filter(|c| c["metadata"]["uid"] == reference["uid"])
        .cloned();
    let Some(claim) = claim else {
        release(ctx, view, &volume);
        return;
    };
    let claimed = str_at(&claim, &["spec", "volumeName"]);
    if claimed.is_empty() {
        // The claim's sync completes the binding; the phase stays.
        if volume_mode_mismatch(&claim, &volume) {
            let volume_message = format!("Cannot bind PersistentVolume to requested PersistentVolumeClaim \"{}\" due to incompatible volumeMode.", name_of(&claim).1);
            event(
                ctx,
                &volume,
                EventType::Warning,
                "VolumeMismatch",
                &volume_message,
            );
            let claim_message = format!("Cannot bind PersistentVolume \"{name}\" to requested PersistentVolumeClaim due to incompatible volumeMode.");
            event(
                ctx,
                &claim,
                EventType::Warning,
                "VolumeMismatch",
                &claim_message,
            );
        }
    } else if claimed == name {
        set_phase(ctx, view, &volume, "Bound");
    } else if annotation(&volume, PROVISIONED_BY).is_some() && policy(&volume) == "Delete" {
        // Provisioned for a claim that went to another volume: not needed.
        release(ctx, view, &volume);
    } else {
        unbind_volume(ctx, view, &volume);
    }
}

fn policy(volume: &Value) -> &str {
    str_at(volume, &["spec", "persistentVolumeReclaimPolicy"])
}

fn set_phase(ctx: &Ctx, view: &mut View, volume: &Value, phase: &str) {
    if self::phase(volume) != phase {
        update(ctx, view, VOLUMES, volume, |v| {
            set_volume_phase(v, phase, "");
        });
    }
}

/// The volume's claim is gone: Released first (for the user, and for
/// external deleters to see), and the reclaim policy on a later pass.
fn release(ctx: &Ctx, view: &mut View, volume: &Value) {
    if !matches!(phase(volume), "Released" | "Failed") {
        set_phase(ctx, view, volume, "Released");
        return;
    }
    match policy(volume) {
        "Retain" => {}
        "Delete" => delete_volume(ctx, view, volume),
        "Recycle" => {
            // The recyclers of hostPath and NFS volumes are not emulated:
            // such a volume stays Released.
            let recyclable =
                !volume["spec"]["hostPath"].is_null() || !volume["spec"]["nfs"].is_null();
            if !recyclable {
                failed(
                    ctx,
                    view,
                    volume,
                    "VolumeFailedRecycle",
                    "No recycler plugin found for the volume!",
                );
            }
        }
        _ => failed(
            ctx,
            view,
            volume,
            "VolumeUnknownReclaimPolicy",
            "Volume has unrecognized PersistentVolumeReclaimPolicy",
        ),
    }
}

/// `deleteVolumeOperation`. The sandbox's provisioners delete their own
/// volumes (directory, then object); another external provisioner's are
/// left to it; the rest go to the in-tree deleters, of which only
/// hostPath's exists, and only for paths under `/tmp/` (it deletes in the
/// controller manager's own filesystem, so the node's data stays).
fn delete_volume(ctx: &Ctx, view: &mut View, volume: &Value) {
    let name = name_of(volume).1.to_string();
    let provisioner = annotation(volume, PROVISIONED_BY).unwrap_or_default();
    if provisioned_here(volume) {
        if phase(volume) == "Released" && !is_terminating(volume) {
            remove_provisioned_dir(ctx, volume);
            delete_object(ctx, view, &name);
        }
        return;
    }
    if !provisioner.is_empty() && !provisioner.starts_with("kubernetes.io/") {
        return;
    }
    let host_path = volume["spec"]["hostPath"]["path"].as_str();
    let outcome = match host_path {
        Some(path) if under_tmp(path) => Ok(()),
        Some(path) => Err(format!(
            "host_path deleter only supports /tmp/.+ but received provided {path}"
        )),
        None => Err(format!(
            "error getting deleter volume plugin for volume \"{name}\": no deletable volume plugin matched"
        )),
    };
    match outcome {
        Ok(()) if !is_terminating(volume) => delete_object(ctx, view, &name),
        Ok(()) => {}
        Err(message) => failed(ctx, view, volume, "VolumeFailedDelete", &message),
    }
}

/// The hostPath deleter's `/tmp/.+` (unanchored).
pub(super) fn under_tmp(path: &str) -> bool {
    path.match_indices("/tmp/")
        .any(|(at, _)| path[at + 5..].chars().next().is_some_and(|c| c != '\n'))
}

fn delete_object(ctx: &Ctx, view: &mut View, name: &str) {
    let deleted = ctx
        .store
        .delete(registry::get(VOLUMES), "", name, &Default::default());
    match log_err("reclaim", deleted) {
        Some(crate::store::Deleted::Gone(obj)) => {
            view.volumes.retain(|v| name_of(v).1 != name_of(&obj).1);
        }
        Some(crate::store::Deleted::Terminating(obj)) => view.put(VOLUMES, obj),
        None => {}
    }
}

/// `updateVolumePhaseWithEvent(Failed, Warning, ...)`.
fn failed(ctx: &Ctx, view: &mut View, volume: &Value, reason: &str, message: &str) {
    if phase(volume) == "Failed" {
        return;
    }
    let written = update(ctx, view, VOLUMES, volume, |v| {
        set_volume_phase(v, "Failed", message);
    });
    if let Some(written) = written {
        event(ctx, &written, EventType::Warning, reason, message);
    }
}

/// `unbindVolume`: a volume the controller bound forgets the claim; one
/// pre-bound by its creator keeps the claim's name and loses its uid.
fn unbind_volume(ctx: &Ctx, view: &mut View, volume: &Value) {
    update(ctx, view, VOLUMES, volume, |v| {
        if annotation(v, BOUND_BY_CONTROLLER).is_some() {
            if let Some(spec) = v["spec"].as_object_mut() {
                spec.remove("claimRef");
            }
            let emptied = v["metadata"]["annotations"]
                .as_object_mut()
                .is_some_and(|map| {
                    map.remove(BOUND_BY_CONTROLLER);
                    map.is_empty()
                });
            if let Some(meta) = v["metadata"].as_object_mut().filter(|_| emptied) {
                meta.remove("annotations");
            }
        } else if let Some(reference) = v["spec"]["claimRef"].as_object_mut() {
            reference.remove("uid");
        }
        set_volume_phase(v, "Available", "");
    });
}

/// The pv-protection controller: a terminating volume loses its finalizer
/// once it is not Bound. A volume the sandbox provisioned with the Delete
/// policy takes its directory with it, as an external provisioner honouring
/// the reclaim policy does. None when the volume is gone.
fn protect_volume(ctx: &Ctx, view: &mut View, volume: Value) -> Option<Value> {
    if !is_terminating(&volume)
        || !has_finalizer(&volume, PV_PROTECTION)
        || phase(&volume) == "Bound"
    {
        return Some(volume);
    }
    remove_provisioned_dir(ctx, &volume);
    let written = update(ctx, view, VOLUMES, &volume, |v| {
        remove_finalizer(v, PV_PROTECTION);
    })?;
    (!is_gone(&written)).then_some(written)
}

/// Detaches the loop devices of a volume this sandbox provisioned, and
/// with the Delete policy deletes its directory (only under its own data
/// dir).
fn remove_provisioned_dir(ctx: &Ctx, volume: &Value) {
    if !provisioned_here(volume) {
        return;
    }
    let root = ctx.data_dir.join("volumes");
    // The CSI driver's volumes are named by their handle.
    let handle = match str_at(volume, &["spec", "csi", "driver"]) {
        super::CSI => str_at(volume, &["spec", "csi", "volumeHandle"]),
        _ => "",
    };
    let csi_path = if !handle.is_empty() && !handle.contains('/') {
        root.join(handle).to_string_lossy().to_string()
    } else {
        String::new()
    };
    let path = [
        str_at(volume, &["spec", "hostPath", "path"]),
        str_at(volume, &["spec", "local", "path"]),
        csi_path.as_str(),
    ]
    .into_iter()
    .find(|p| !p.is_empty())
    .map(std::path::PathBuf::from);
    // A Block volume's PV names its image: the directory holding it goes.
    let path = path.map(|p| match p.file_name() {
        Some(name) if name == crate::kubelet::devices::IMAGE => {
            p.parent().map(std::path::Path::to_path_buf).unwrap_or(p)
        }
        _ => p,
    });
    if let Some(path) = path.filter(|p| p.starts_with(&root) && p != &root) {
        // Its loop devices first, whatever the policy: the PV goes, and
        // the device with it, before any data does.
        ctx.devices.release(&path);
        if policy(volume) != "Delete" {
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("reclaiming {}: {e}", path.display());
            }
        }
    }
}
