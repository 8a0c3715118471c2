//! The built-in provisioners (acting as external ones do).

use std::os::unix::fs::PermissionsExt;

use serde_json::{json, Value};

use super::binding::{claim_ref, class_of};
use super::{
    annotation, event, str_at, View, CSI, LOCAL, PROVISIONED_BY, SELECTED_NODE, SHARED, VOLUMES,
};
use crate::controllers::{is_terminating, name_of, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry;

// ---------------------------------------------------------------------------
// Provisioning

/// `provisionClaim` for a claim that names a class; the sandbox's own
/// provisioners act as external ones do. The hostPath and local ones are
/// built on sig-storage-lib-external-provisioner, which never looks at a
/// claim's `dataSource`: as local-path-provisioner or
/// nfs-subdir-external-provisioner, they make an empty volume for it.
pub(super) fn provision_claim(ctx: &Ctx, view: &mut View, claim: &Value) {
    let class_name = class_of(claim);
    let Some(class) = view.classes.iter().find(|c| name_of(c).1 == class_name) else {
        failed(
            ctx,
            claim,
            &format!("storageclass.storage.k8s.io \"{class_name}\" not found"),
        );
        return;
    };
    let provisioner = str_at(class, &["provisioner"]);
    if ![SHARED, LOCAL, CSI].contains(&provisioner) || is_terminating(claim) {
        return;
    }
    if provisioner == CSI {
        let class = class.clone();
        return super::csi::provision(ctx, view, claim, &class);
    }
    if !claim["spec"]["selector"].is_null() {
        let message = format!(
            "failed to provision volume with StorageClass \"{class_name}\": claim Selector is not supported"
        );
        let kind = EventType::Warning;
        provisioner_event(
            ctx,
            provisioner,
            claim,
            kind,
            "ProvisioningFailed",
            &message,
        );
        return;
    }
    let node = annotation(claim, SELECTED_NODE).unwrap_or_default();
    if provisioner == LOCAL && node.is_empty() {
        failed(
            ctx,
            claim,
            "node-local volumes need volumeBindingMode WaitForFirstConsumer",
        );
        return;
    }
    let made = make_volume(ctx, claim, class, provisioner, node, None);
    if let Err(message) = made {
        failed(ctx, claim, &message);
    }
}

/// The name of the volume provisioned for `claim`.
pub(super) fn volume_name(claim: &Value) -> String {
    format!("pvc-{}", str_at(claim, &["metadata", "uid"]))
}

/// Makes the volume's directory (a copy of `content` when given) and its
/// PV, with `ProvisioningSucceeded`; the error to report otherwise.
pub(super) fn make_volume(
    ctx: &Ctx,
    claim: &Value,
    class: &Value,
    provisioner: &str,
    node: &str,
    content: Option<&std::path::Path>,
) -> Result<(), String> {
    let pv_name = volume_name(claim);
    let dir = ctx.data_dir.join("volumes").join(&pv_name);
    // Writable by any user, as local-path-provisioner (kind, k3d) makes
    // its directories: a non-root pod can use a claim whose plugin does
    // not apply its fsGroup. A copy keeps its source's root as it is.
    let made = match content {
        Some(source) if !dir.exists() => {
            // A clone is one point in time too (see the snapshot sidecar).
            let _frozen = ctx.freezer.freeze(source);
            super::super::tree_copy::copy_tree(source, &dir).map(drop)
        }
        Some(_) => Ok(()),
        None => std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))),
    };
    made.map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let block = claim["spec"]["volumeMode"] == "Block";
    let path = match block {
        true => make_image(claim, &dir, content.is_some())?,
        false => dir,
    };
    let path = path.to_string_lossy().to_string();
    let mut spec = json!({
        "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
        "accessModes": claim["spec"]["accessModes"],
        "persistentVolumeReclaimPolicy": class["reclaimPolicy"].as_str().unwrap_or("Delete"),
        "storageClassName": name_of(class).1,
        "volumeMode": claim["spec"]["volumeMode"],
        "claimRef": claim_ref(claim),
    });
    if provisioner == CSI {
        spec["csi"] = super::csi::volume_source(&pv_name);
    } else if provisioner == LOCAL {
        spec["local"] = json!({"path": path});
        spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
        ]}]}});
    } else {
        spec["hostPath"] = json!({"path": path, "type": ""});
    }
    let pv = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "annotations": {PROVISIONED_BY: provisioner}},
        "spec": spec,
    });
    match ctx.store.create(registry::get(VOLUMES), "", pv) {
        Ok(_) => provisioner_event(
            ctx,
            provisioner,
            claim,
            EventType::Normal,
            "ProvisioningSucceeded",
            &format!("Successfully provisioned volume {pv_name}"),
        ),
        Err(crate::ApiError::AlreadyExists { .. }) => {}
        Err(e) => return Err(e.to_string()),
    }
    Ok(())
}

/// A Block volume's image in its directory `dir`: sparse, mode 0600, as
/// long as the claim's request (a copy from a snapshot or clone is grown
/// to it, never shrunk). The PV names it, and nodes attach it.
fn make_image(
    claim: &Value,
    dir: &std::path::Path,
    copied: bool,
) -> Result<std::path::PathBuf, String> {
    let image = dir.join(crate::kubelet::devices::IMAGE);
    let failed = |e: std::io::Error| format!("creating {}: {e}", image.display());
    let size = claim["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .and_then(crate::registry::rules::parse_quantity)
        .and_then(|b| u64::try_from(b).ok())
        .unwrap_or(0);
    if copied && !image.is_file() {
        return Err("the data source holds no block volume image: it is not a Block volume".into());
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&image)
        .map_err(failed)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(failed)?;
    if file.metadata().map_err(failed)?.len() < size {
        file.set_len(size).map_err(failed)?;
    }
    Ok(image)
}

/// `ProvisioningFailed`, as the PV controller records it.
fn failed(ctx: &Ctx, claim: &Value, message: &str) {
    event(
        ctx,
        claim,
        EventType::Warning,
        "ProvisioningFailed",
        message,
    );
}

/// An event about the claim from the provisioner itself.
pub(super) fn provisioner_event(
    ctx: &Ctx,
    provisioner: &str,
    claim: &Value,
    kind: EventType,
    reason: &str,
    message: &str,
) {
    let component = match provisioner {
        LOCAL => LOCAL,
        CSI => super::csi::COMPONENT,
        _ => SHARED,
    };
    events::record(
        &ctx.store,
        &Source::new(component),
        claim,
        kind,
        reason,
        message,
    );
}

pub(super) fn provisioned_here(volume: &Value) -> bool {
    matches!(
        annotation(volume, PROVISIONED_BY),
        Some(SHARED | LOCAL | CSI)
    )
}
