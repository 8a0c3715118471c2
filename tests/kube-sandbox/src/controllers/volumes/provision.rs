//! The built-in provisioners (acting as external ones do).

use std::os::unix::fs::PermissionsExt;

use serde_json::{json, Value};

use super::binding::{claim_ref, class_of};
use super::{
    annotation, event, str_at, View, LOCAL, PROVISIONED_BY, SELECTED_NODE, SHARED, VOLUMES,
};
use crate::controllers::{is_terminating, name_of, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry;

// ---------------------------------------------------------------------------
// Provisioning

/// `provisionClaim` for a claim that names a class; the sandbox's own
/// provisioners act as external ones do.
pub(super) fn provision_claim(ctx: &Ctx, view: &View, claim: &Value) {
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
    if (provisioner != SHARED && provisioner != LOCAL) || is_terminating(claim) {
        return;
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
    provision(ctx, claim, class, provisioner, node);
}

fn provision(ctx: &Ctx, claim: &Value, class: &Value, provisioner: &str, node: &str) {
    let uid = str_at(claim, &["metadata", "uid"]);
    let pv_name = format!("pvc-{uid}");
    let dir = ctx.data_dir.join("volumes").join(&pv_name);
    // Writable by any user, as local-path-provisioner (kind, k3d) makes
    // its directories: a non-root pod can use a claim whose plugin does
    // not apply its fsGroup.
    let made = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)));
    if let Err(e) = made {
        failed(ctx, claim, &format!("creating {}: {e}", dir.display()));
        return;
    }
    let path = dir.to_string_lossy().to_string();
    let mut spec = json!({
        "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
        "accessModes": claim["spec"]["accessModes"],
        "persistentVolumeReclaimPolicy": class["reclaimPolicy"].as_str().unwrap_or("Delete"),
        "storageClassName": name_of(class).1,
        "volumeMode": claim["spec"]["volumeMode"],
        "claimRef": claim_ref(claim),
    });
    if provisioner == LOCAL {
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
        Err(e) => failed(ctx, claim, &e.to_string()),
    }
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
fn provisioner_event(
    ctx: &Ctx,
    provisioner: &str,
    claim: &Value,
    kind: EventType,
    reason: &str,
    message: &str,
) {
    let component = if provisioner == LOCAL { LOCAL } else { SHARED };
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
    matches!(annotation(volume, PROVISIONED_BY), Some(SHARED | LOCAL))
}
