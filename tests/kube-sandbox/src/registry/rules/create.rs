//! Validation on create.

use serde_json::{json, Value};

use super::metadata::{annotation_causes, invalid_value, label_causes, meta_causes};
use super::quantity::quantity_sign;
use super::secrets::{config_map_causes, secret_causes};
use crate::registry::{custom, Resource};
use crate::status::ApiError;

/// Checks a new object as a real server's validation would, for the rules
/// tests and volmig can meet: metadata (names, labels, annotations), and the
/// fields without which the controllers here could not act. Every problem
/// found is a cause of one 422, as Kubernetes reports them all at once.
pub fn validate_create(res: &Resource, obj: &Value) -> Result<(), ApiError> {
    let mut causes = meta_causes(res, &obj["metadata"], true);
    if let Some(definition) = &res.custom {
        causes.extend(custom::schema_causes(&definition.schema, obj));
    }
    match res.builtin_kind() {
        "Pod" => causes.extend(validate_pod_spec(&obj["spec"])),
        "PersistentVolumeClaim" => causes.extend(claim_spec_causes(&obj["spec"])),
        "PersistentVolume" => {
            if obj["spec"]["capacity"]["storage"].is_null() {
                causes.push("spec.capacity: Required value".into());
            }
            if obj["spec"]["accessModes"]
                .as_array()
                .is_none_or(Vec::is_empty)
            {
                causes.push("spec.accessModes: Required value".into());
            }
        }
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" | "ReplicationController" => {
            let template = &obj["spec"]["template"]["metadata"];
            causes.extend(label_causes(
                "spec.template.metadata.labels",
                &template["labels"],
            ));
            causes.extend(annotation_causes(
                "spec.template.metadata.annotations",
                &template["annotations"],
            ));
            causes.extend(validate_workload(res.builtin_kind(), &obj["spec"]));
        }
        "HorizontalPodAutoscaler" => causes.extend(autoscaler_causes(&obj["spec"])),
        "Job" => causes.extend(super::jobs::job_causes(&obj["spec"])),
        "Secret" => causes.extend(secret_causes(obj)),
        "ConfigMap" => causes.extend(config_map_causes(obj)),
        "VolumeSnapshot" | "VolumeSnapshotContent" | "VolumeSnapshotClass" => {
            causes.extend(super::snapshots::create_causes(res.builtin_kind(), obj));
        }
        "CustomResourceDefinition" => causes.extend(super::crds::create_causes(obj)),
        _ => {}
    }
    invalid_if_any(res, obj, causes)
}

pub(super) fn invalid_if_any(
    res: &Resource,
    obj: &Value,
    causes: Vec<String>,
) -> Result<(), ApiError> {
    if causes.is_empty() {
        return Ok(());
    }
    // `NewInvalid` names the kind with its group: `StatefulSet.apps`.
    let kind = match &*res.group {
        "" => res.kind.to_string(),
        group => format!("{}.{group}", res.kind),
    };
    Err(ApiError::Invalid {
        kind,
        name: obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        causes,
    })
}

/// A claim's spec: access modes, and a positive storage request (always,
/// a claim that names its volume included).
fn claim_spec_causes(spec: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    if spec["accessModes"].as_array().is_none_or(Vec::is_empty) {
        causes.push("spec.accessModes: Required value: at least 1 access mode is required".into());
    }
    let path = "spec.resources[storage]";
    match &spec["resources"]["requests"]["storage"] {
        Value::Null => causes.push(format!("{path}: Required value")),
        storage => {
            let text = match storage {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            match quantity_sign(&text) {
                Some(sign) if sign <= 0 => {
                    let shown = if sign == 0 { "0" } else { text.as_str() };
                    causes.push(invalid_value(path, shown, "must be greater than zero"));
                }
                _ => {}
            }
        }
    }
    causes.extend(super::snapshots::data_source_causes(spec));
    causes
}

/// A pod spec's containers, images and volume names; then every
/// container's `volumeMounts` and `volumeDevices` against each other, as
/// `ValidateVolumeMounts` and `ValidateVolumeDevices` check them.
fn validate_pod_spec(spec: &Value) -> Vec<String> {
    let containers = spec["containers"].as_array().filter(|c| !c.is_empty());
    let Some(containers) = containers else {
        return vec!["spec.containers: Required value".into()];
    };
    let volumes: Vec<&str> = spec["volumes"]
        .as_array()
        .map(|v| v.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default();
    for (i, c) in containers.iter().enumerate() {
        if c["name"].as_str().is_none_or(str::is_empty) {
            return vec![format!("spec.containers[{i}].name: Required value")];
        }
        if c["image"].as_str().is_none_or(str::is_empty) {
            return vec![format!("spec.containers[{i}].image: Required value")];
        }
        for (j, m) in c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let name = m["name"].as_str().unwrap_or_default();
            if !volumes.contains(&name) {
                return vec![format!(
                    "spec.containers[{i}].volumeMounts[{j}].name: Not found: {name:?}"
                )];
            }
        }
    }
    let mut causes = Vec::new();
    for (i, c) in containers.iter().enumerate() {
        causes.extend(super::devices::container_causes(
            &format!("spec.containers[{i}]"),
            c,
            spec["volumes"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default(),
        ));
    }
    causes
}

/// The template's labels must carry the selector's `matchLabels`
/// (`ValidatePodTemplateSpecForReplicaSet`, `validateJob`'s selector
/// check): the cause when they do not.
pub(super) fn selector_mismatch(selector: &Value, template: &Value) -> Option<String> {
    let labels = &template["metadata"]["labels"];
    let wanted = selector["matchLabels"].as_object()?;
    wanted.iter().any(|(k, v)| &labels[k] != v).then(|| {
        "spec.template.metadata.labels: Invalid value: `selector` does not match template `labels`"
            .to_string()
    })
}

fn validate_workload(kind: &str, spec: &Value) -> Vec<String> {
    // A ReplicationController's selector is the map a LabelSelector's
    // matchLabels is (`ValidateReplicationControllerSpec`).
    let selector = match kind {
        "ReplicationController" => match &spec["selector"] {
            Value::Object(map) if !map.is_empty() => json!({"matchLabels": map}),
            _ => Value::Null,
        },
        _ => spec["selector"].clone(),
    };
    if selector.is_null() {
        return vec!["spec.selector: Required value".into()];
    }
    if spec["template"].is_null() {
        return vec!["spec.template: Required value".into()];
    }
    if let Some(cause) = selector_mismatch(&selector, &spec["template"]) {
        return vec![cause];
    }
    // Pods that a controller replaces when they finish must not finish on
    // their own terms.
    let restart = spec["template"]["spec"]["restartPolicy"].as_str();
    if let Some(r) = restart.filter(|r| *r != "Always") {
        return vec![format!("spec.template.spec.restartPolicy: Unsupported value: \"{r}\": supported values: \"Always\"")];
    }
    // A StatefulSet's claim templates are its pods' claims too.
    let mut pod_spec = spec["template"]["spec"].clone();
    for t in spec["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if !pod_spec["volumes"].is_array() {
            pod_spec["volumes"] = json!([]);
        }
        if let Some(volumes) = pod_spec["volumes"].as_array_mut() {
            let name = &t["metadata"]["name"];
            volumes.push(json!({"name": name, "persistentVolumeClaim": {"claimName": name}}));
        }
    }
    validate_pod_spec(&pod_spec)
        .into_iter()
        .map(|m| format!("spec.template.{m}"))
        .collect()
}

/// `validateHorizontalPodAutoscalerSpec`: the target named, at least one
/// replica, no more at least than at most.
fn autoscaler_causes(spec: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    for field in ["kind", "name"] {
        if spec["scaleTargetRef"][field]
            .as_str()
            .is_none_or(str::is_empty)
        {
            causes.push(format!("spec.scaleTargetRef.{field}: Required value"));
        }
    }
    let min = spec["minReplicas"].as_i64();
    if let Some(min) = min.filter(|m| *m < 1) {
        causes.push(format!(
            "spec.minReplicas: Invalid value: {min}: must be greater than or equal to 1"
        ));
    }
    let max = spec["maxReplicas"].as_i64().unwrap_or(0);
    if max < 1 {
        causes.push(format!(
            "spec.maxReplicas: Invalid value: {max}: must be greater than 0"
        ));
    }
    if min.is_some_and(|min| max < min) {
        causes.push(format!(
            "spec.maxReplicas: Invalid value: {max}: must be greater than or equal to `minReplicas`"
        ));
    }
    causes
}
