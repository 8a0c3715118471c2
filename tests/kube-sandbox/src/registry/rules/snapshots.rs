//! The `snapshot.storage.k8s.io/v1` kinds as their CRDs validate them
//! (external-snapshotter's `client/config/crd`): the OpenAPI schema's
//! required fields and enums, and the CEL rules, worded as the
//! apiextensions server words them. A claim's `dataSource` and
//! `dataSourceRef` as `pkg/api/persistentvolumeclaim` normalizes them and
//! `ValidatePersistentVolumeClaimSpec` checks them.

use serde_json::{json, Value};

use super::metadata::invalid_value;

const POLICIES: &str = "supported values: \"Delete\", \"Retain\"";

/// A CEL rule's failure on a field of `ty` ("object", "string").
fn rule(path: &str, ty: &str, message: &str) -> String {
    format!("{path}: Invalid value: \"{ty}\": {message}")
}

fn required(path: &str) -> String {
    format!("{path}: Required value")
}

fn has(obj: &Value, field: &str) -> bool {
    !obj[field].is_null()
}

/// The `deletionPolicy` enum (required where `path` says).
fn policy_causes(path: &str, policy: &Value) -> Vec<String> {
    match policy {
        Value::Null => vec![required(path)],
        Value::String(p) if p == "Delete" || p == "Retain" => Vec::new(),
        other => {
            let shown = other.as_str().map_or(other.to_string(), |s| s.to_string());
            vec![format!(
                "{path}: Unsupported value: \"{shown}\": {POLICIES}"
            )]
        }
    }
}

/// What the schema and the create-time CEL rules refuse.
pub(super) fn create_causes(kind: &str, obj: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    match kind {
        "VolumeSnapshot" => {
            if spec.is_null() {
                return vec![required("spec")];
            }
            let source = &spec["source"];
            if source.is_null() {
                causes.push(required("spec.source"));
            } else if has(source, "volumeSnapshotContentName")
                == has(source, "persistentVolumeClaimName")
            {
                causes.push(rule(
                    "spec.source",
                    "object",
                    "exactly one of volumeSnapshotContentName and persistentVolumeClaimName must be set",
                ));
            }
            if spec["volumeSnapshotClassName"] == json!("") {
                causes.push(rule(
                    "spec.volumeSnapshotClassName",
                    "string",
                    "volumeSnapshotClassName must not be the empty string when set",
                ));
            }
        }
        "VolumeSnapshotContent" => {
            if spec.is_null() {
                return vec![required("spec")];
            }
            causes.extend(policy_causes(
                "spec.deletionPolicy",
                &spec["deletionPolicy"],
            ));
            if spec["driver"].is_null() {
                causes.push(required("spec.driver"));
            }
            let source = &spec["source"];
            if source.is_null() {
                causes.push(required("spec.source"));
            } else if has(source, "volumeHandle") == has(source, "snapshotHandle") {
                causes.push(rule(
                    "spec.source",
                    "object",
                    "exactly one of volumeHandle and snapshotHandle must be set",
                ));
            }
            let reference = &spec["volumeSnapshotRef"];
            if reference.is_null() {
                causes.push(required("spec.volumeSnapshotRef"));
            } else if !has(reference, "name") || !has(reference, "namespace") {
                causes.push(rule(
                    "spec.volumeSnapshotRef",
                    "object",
                    "both spec.volumeSnapshotRef.name and spec.volumeSnapshotRef.namespace must be set",
                ));
            }
        }
        "VolumeSnapshotClass" => {
            causes.extend(policy_causes("deletionPolicy", &obj["deletionPolicy"]));
            if obj["driver"].is_null() {
                causes.push(required("driver"));
            }
        }
        _ => {}
    }
    causes
}

/// The transition rules (`self == oldSelf`, "required once set") on top of
/// what a new object must satisfy.
pub(super) fn update_causes(kind: &str, old: &Value, new: &Value) -> Vec<String> {
    let mut causes = create_causes(kind, new);
    let (fields, source_path): (&[&str], _) = match kind {
        "VolumeSnapshot" => (
            &["persistentVolumeClaimName", "volumeSnapshotContentName"],
            "spec.source",
        ),
        "VolumeSnapshotContent" => (&["volumeHandle", "snapshotHandle"], "spec.source"),
        _ => return causes,
    };
    let (before, after) = (&old["spec"]["source"], &new["spec"]["source"]);
    for field in fields {
        if has(before, field) && !has(after, field) {
            causes.push(rule(
                source_path,
                "object",
                &format!("{field} is required once set"),
            ));
        } else if has(before, field) && before[field] != after[field] {
            causes.push(rule(
                &format!("{source_path}.{field}"),
                "string",
                &format!("{field} is immutable"),
            ));
        }
    }
    if kind == "VolumeSnapshotContent" {
        let (before, after) = (
            &old["spec"]["sourceVolumeMode"],
            &new["spec"]["sourceVolumeMode"],
        );
        if !before.is_null() && after.is_null() {
            causes.push(rule(
                "spec",
                "object",
                "sourceVolumeMode is required once set",
            ));
        } else if !before.is_null() && before != after {
            causes.push(rule(
                "spec.sourceVolumeMode",
                "string",
                "sourceVolumeMode is immutable",
            ));
        }
    }
    causes
}

/// `NormalizeDataSources` (AnyVolumeDataSource is GA): a `dataSource`
/// alone is copied to `dataSourceRef`; a `dataSourceRef` without a
/// namespace alone is copied to `dataSource`.
pub(super) fn normalize_data_sources(spec: &mut Value) {
    let source = spec["dataSource"].clone();
    let reference = spec["dataSourceRef"].clone();
    if source.is_object() && reference.is_null() {
        spec["dataSourceRef"] = source;
    } else if reference.is_object() && source.is_null() {
        let local = reference["namespace"].as_str().is_none_or(str::is_empty);
        if local {
            let mut copy = reference;
            if let Some(map) = copy.as_object_mut() {
                map.remove("namespace");
            }
            spec["dataSource"] = copy;
        }
    }
}

/// `validateDataSource`, `validateDataSourceRef` and their agreement: a
/// kind of the core group must be PersistentVolumeClaim (a VolumeSnapshot
/// needs its `apiGroup`); any other group names a populator's kind.
pub(super) fn data_source_causes(spec: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    for field in ["dataSource", "dataSourceRef"] {
        let source = &spec[field];
        if source.is_null() {
            continue;
        }
        let path = format!("spec.{field}");
        let kind = source["kind"].as_str().unwrap_or_default();
        let group = source["apiGroup"].as_str().unwrap_or_default();
        if source["name"].as_str().is_none_or(str::is_empty) {
            causes.push(required(&format!("{path}.name")));
        }
        if kind.is_empty() {
            causes.push(required(&format!("{path}.kind")));
        }
        if group.is_empty() && kind != "PersistentVolumeClaim" {
            causes.push(format!(
                "{path}: Unsupported value: \"{kind}\": supported values: \"PersistentVolumeClaim\""
            ));
        }
        if !group.is_empty() && !is_dns_subdomain(group) {
            causes.push(invalid_value(
                &format!("{path}.apiGroup"),
                group,
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            ));
        }
    }
    let (source, reference) = (&spec["dataSource"], &spec["dataSourceRef"]);
    let namespaced = reference["namespace"]
        .as_str()
        .is_some_and(|ns| !ns.is_empty());
    if namespaced && !source.is_null() {
        causes.push(invalid_value(
            "spec",
            "spec.dataSource",
            "may not be specified when dataSourceRef.namespace is specified",
        ));
    } else if !source.is_null() && !reference.is_null() {
        let key = |v: &Value| {
            (
                v["apiGroup"].as_str().unwrap_or_default().to_string(),
                v["kind"].clone(),
                v["name"].clone(),
            )
        };
        if key(source) != key(reference) {
            causes.push(invalid_value(
                "spec",
                "spec.dataSource",
                "must match dataSourceRef",
            ));
        }
    }
    causes
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}
