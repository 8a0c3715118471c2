//! Validation on update: the immutability rules.

use serde_json::{json, Map, Value};

use super::create::invalid_if_any;
use super::metadata::{invalid_value, meta_causes};
use super::quantity::parse_quantity;
use super::secrets::{config_map_causes, secret_causes};
use crate::registry::{custom, Resource};
use crate::status::ApiError;

/// Checks an update against the fields Kubernetes forbids changing, and the
/// new object's labels, annotations and (Secrets, ConfigMaps) data.
pub fn validate_update(res: &Resource, old: &Value, new: &Value) -> Result<(), ApiError> {
    let mut causes = meta_causes(res, &new["metadata"], false);
    if let Some(definition) = &res.custom {
        causes.extend(custom::schema_causes(&definition.schema, new));
    }
    let problem = match res.builtin_kind() {
        "Pod" => pod_update_problem(&old["spec"], &new["spec"]),
        "PersistentVolumeClaim" => claim_update_problem(&old["spec"], &new["spec"]),
        "PersistentVolume" => volume_update_problem(&old["spec"], &new["spec"]),
        "StatefulSet" => changed_except(
            &old["spec"],
            &new["spec"],
            &["replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy", "minReadySeconds"],
        )
        .then(|| "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".to_string()),
        "Job" => super::jobs::job_update_problem(&old["spec"], &new["spec"]),
        "Deployment" | "ReplicaSet" | "DaemonSet" => (old["spec"]["selector"] != new["spec"]["selector"])
            .then(|| "spec.selector: Invalid value: field is immutable".to_string()),
        "StorageClass" => ["provisioner", "parameters", "reclaimPolicy", "volumeBindingMode"]
            .into_iter()
            .find(|f| old[f] != new[f])
            .map(|f| format!("{f}: Forbidden: updates to {f} are forbidden.")),
        "Service" => (old["spec"]["clusterIP"] != new["spec"]["clusterIP"])
            .then(|| "spec.clusterIPs[0]: Invalid value: field is immutable".to_string()),
        _ => None,
    };
    causes.extend(problem);
    match res.builtin_kind() {
        "Secret" => {
            if old["type"] != new["type"] {
                let ty = new["type"].as_str().unwrap_or_default();
                causes.push(invalid_value("type", ty, "field is immutable"));
            }
            causes.extend(immutable_causes(old, new, &["data"]));
            causes.extend(secret_causes(new));
        }
        "ConfigMap" => {
            causes.extend(immutable_causes(old, new, &["data", "binaryData"]));
            causes.extend(config_map_causes(new));
        }
        "VolumeSnapshot" | "VolumeSnapshotContent" | "VolumeSnapshotClass" => {
            causes.extend(super::snapshots::update_causes(
                res.builtin_kind(),
                old,
                new,
            ));
        }
        "CustomResourceDefinition" => causes.extend(super::crds::update_causes(old, new)),
        _ => {}
    }
    invalid_if_any(res, old, causes)
}

/// A write of a custom resource's status subresource: the status
/// against the schema's `status` property, the rest being the stored
/// object's (the status strategy's `ValidateStatusUpdate`).
pub fn validate_status(res: &Resource, new: &Value) -> Result<(), ApiError> {
    let Some(definition) = &res.custom else {
        return Ok(());
    };
    let status_only = json!({"properties": {"status": definition.schema["properties"]["status"]}});
    let causes = custom::schema_causes(&status_only, &json!({"status": new["status"]}));
    invalid_if_any(res, new, causes)
}

/// Once `immutable: true`, it stays, and so does the data.
fn immutable_causes(old: &Value, new: &Value, fields: &[&str]) -> Vec<String> {
    let forbidden = |f: &str| format!("{f}: Forbidden: field is immutable when `immutable` is set");
    if old["immutable"] != json!(true) {
        return Vec::new();
    }
    let mut causes = Vec::new();
    if new["immutable"] != json!(true) {
        causes.push(forbidden("immutable"));
    }
    for f in fields {
        if old[*f] != new[*f] {
            causes.push(forbidden(f));
        }
    }
    causes
}

/// Whether any field of `old`/`new` other than `allowed` differs.
fn changed_except(old: &Value, new: &Value, allowed: &[&str]) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        m.retain(|k, v| !allowed.contains(&k.as_str()) && !v.is_null());
        m
    };
    strip(old) != strip(new)
}

pub(super) fn pod_update_problem(old: &Value, new: &Value) -> Option<String> {
    let mut old = old.clone();
    let mut new = new.clone();
    for spec in [&mut old, &mut new] {
        for list in ["containers", "initContainers"] {
            for c in spec[list].as_array_mut().into_iter().flatten() {
                c["image"] = Value::Null;
            }
        }
        spec["activeDeadlineSeconds"] = Value::Null;
    }
    // Tolerations may only be added to.
    let old_tol = old["tolerations"].as_array().cloned().unwrap_or_default();
    let new_tol = new["tolerations"].as_array().cloned().unwrap_or_default();
    let only_added = old_tol.iter().all(|t| new_tol.contains(t));
    if only_added {
        old["tolerations"] = Value::Null;
        new["tolerations"] = Value::Null;
    }
    (old != new).then(|| {
        "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".to_string()
    })
}

pub(super) fn claim_update_problem(old: &Value, new: &Value) -> Option<String> {
    let mut old_rest = old.clone();
    let mut new_rest = new.clone();
    // The binder sets volumeName once; a class may be set once too.
    for field in ["volumeName", "storageClassName"] {
        if old[field].is_null() {
            new_rest[field] = Value::Null;
        }
    }
    let bound = !old["volumeName"].is_null();
    if bound {
        let parse = |v: &Value| v.as_str().and_then(parse_quantity);
        let (before, after) = (
            parse(&old["resources"]["requests"]["storage"]),
            parse(&new["resources"]["requests"]["storage"]),
        );
        if let (Some(before), Some(after)) = (before, after) {
            if after < before {
                return Some("spec.resources.requests.storage: Forbidden: field can not be less than status.capacity".into());
            }
        }
        old_rest["resources"] = Value::Null;
        new_rest["resources"] = Value::Null;
    }
    old_rest["volumeAttributesClassName"] = Value::Null;
    new_rest["volumeAttributesClassName"] = Value::Null;
    (changed_except(&old_rest, &new_rest, &[])).then(|| {
        "spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims".to_string()
    })
}

pub(super) fn volume_update_problem(old: &Value, new: &Value) -> Option<String> {
    if !old["nodeAffinity"].is_null() && old["nodeAffinity"] != new["nodeAffinity"] {
        return Some("spec.nodeAffinity: Invalid value: field is immutable".into());
    }
    if old["volumeMode"] != new["volumeMode"] {
        return Some("spec.volumeMode: Invalid value: field is immutable".into());
    }
    let claim = &new["claimRef"];
    if !claim.is_null() && (claim["name"].as_str().is_none_or(str::is_empty)) {
        return Some("spec.claimRef.name: Required value".into());
    }
    let source = |v: &Value| -> Map<String, Value> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        m.retain(|k, _| ["hostPath", "local", "csi", "nfs"].contains(&k.as_str()));
        m
    };
    (source(old) != source(new))
        .then(|| "spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation".to_string())
}
