//! CustomResourceDefinition (apiextensions.k8s.io/v1) as its registry
//! strategy writes and checks it (`pkg/registry/customresourcedefinition`
//! and `pkg/apis/apiextensions/validation` of the apiextensions server):
//! the v1 defaults, the status a new definition starts with, the
//! `Terminating` condition and cleanup finalizer of a deletion, and the
//! validation of names, group, scope, versions and schemas, with
//! apimachinery's messages. A `spec.versions` error prints its value
//! abbreviated (`[]apiextensions.CustomResourceDefinitionVersion{...}`)
//! where Go prints the whole internal struct.

use serde_json::{json, Value};

use super::metadata::{dns1035_label_errors, dns1123_subdomain_errors, invalid_value};
use crate::registry::custom::{storage_version, CLEANUP_FINALIZER};

/// The annotation a definition in a Kubernetes-owned group must carry.
const API_APPROVED: &str = "api-approved.kubernetes.io";

/// `SetDefaults_CustomResourceDefinitionSpec` and the strategy's
/// `storedVersions` bookkeeping: the storage version is recorded once it
/// is used.
pub(super) fn defaults(obj: &mut Value) {
    let names = &mut obj["spec"]["names"];
    let kind = names["kind"].as_str().unwrap_or_default().to_string();
    if names["singular"].as_str().is_none_or(str::is_empty) && !kind.is_empty() {
        names["singular"] = json!(kind.to_lowercase());
    }
    if names["listKind"].as_str().is_none_or(str::is_empty) && !kind.is_empty() {
        names["listKind"] = json!(format!("{kind}List"));
    }
    if obj["spec"]["conversion"].is_null() {
        obj["spec"]["conversion"] = json!({"strategy": "None"});
    }
    if let Some(storage) = storage_version(obj).map(str::to_string) {
        let stored = &mut obj["status"]["storedVersions"];
        if !stored.is_array() {
            *stored = json!([]);
        }
        if let Some(list) = stored.as_array_mut() {
            if !list.iter().any(|v| *v == json!(storage)) {
                list.push(json!(storage));
            }
        }
    }
}

/// `PrepareForCreate`: a new definition's status is the server's (names
/// not yet accepted, no conditions); the naming and establishing
/// controllers fill it in.
pub(super) fn reset_status(obj: &mut Value) {
    obj["status"] = json!({"acceptedNames": {"plural": "", "kind": ""}});
}

/// The first DELETE of a definition (`REST.Delete`): the cleanup
/// finalizer and a `Terminating` condition, so it stays until the
/// finalizer controller has deleted its custom resources.
pub fn mark_terminating(obj: &mut Value) {
    let finalizers = &mut obj["metadata"]["finalizers"];
    if !finalizers.is_array() {
        *finalizers = json!([]);
    }
    if let Some(list) = finalizers.as_array_mut() {
        if !list.iter().any(|f| f == CLEANUP_FINALIZER) {
            list.push(json!(CLEANUP_FINALIZER));
        }
    }
    set_condition(
        obj,
        "Terminating",
        "True",
        "InstanceDeletionPending",
        "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
    );
}

/// Sets a status condition by type; the transition time moves only when
/// its status does. True when anything changed.
pub fn set_condition(
    obj: &mut Value,
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> bool {
    let list = &mut obj["status"]["conditions"];
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(list) = list.as_array_mut() else {
        return false;
    };
    let mut condition = json!({
        "type": kind, "status": status, "lastTransitionTime": crate::time::now(),
        "reason": reason, "message": message,
    });
    match list.iter_mut().find(|c| c["type"] == kind) {
        Some(old) => {
            if old["status"] == status {
                condition["lastTransitionTime"] = old["lastTransitionTime"].clone();
            }
            let changed = *old != condition;
            *old = condition;
            changed
        }
        None => {
            list.push(condition);
            true
        }
    }
}

fn text<'v>(v: &'v Value, pointer: &str) -> &'v str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `ValidateCustomResourceDefinition` (beyond the common metadata rules).
pub(super) fn create_causes(obj: &Value) -> Vec<String> {
    let mut causes = name_causes(obj);
    causes.extend(spec_causes(&obj["spec"]));
    causes.extend(approval_causes(obj));
    causes
}

/// `ValidateCustomResourceDefinitionUpdate`: the spec again, the fields
/// that name the storage (group and plural always; scope and kind once
/// established), and the stored versions.
pub(super) fn update_causes(old: &Value, new: &Value) -> Vec<String> {
    let mut causes = spec_causes(&new["spec"]);
    let established = crate::registry::custom::condition_true(old, "Established");
    let mut immutable = vec!["/spec/group", "/spec/names/plural"];
    if established {
        immutable.extend(["/spec/scope", "/spec/names/kind"]);
    }
    for pointer in immutable {
        if old.pointer(pointer) != new.pointer(pointer) {
            let path = pointer.trim_start_matches('/').replace('/', ".");
            causes.push(invalid_value(
                &path,
                text(new, pointer),
                "field is immutable",
            ));
        }
    }
    let versions: Vec<&str> = versions(&new["spec"])
        .filter_map(|v| v["name"].as_str())
        .collect();
    for (i, stored) in new["status"]["storedVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let stored = stored.as_str().unwrap_or_default();
        if !versions.contains(&stored) {
            causes.push(invalid_value(
                &format!("status.storedVersions[{i}]"),
                stored,
                "must appear in spec.versions",
            ));
        }
    }
    causes.extend(approval_causes(new));
    causes
}

/// The name must be `plural.group`, besides being a DNS subdomain.
fn name_causes(obj: &Value) -> Vec<String> {
    let name = text(obj, "/metadata/name");
    if name.is_empty() {
        return Vec::new();
    }
    let wanted = format!(
        "{}.{}",
        text(obj, "/spec/names/plural"),
        text(obj, "/spec/group")
    );
    (name != wanted)
        .then(|| {
            invalid_value(
                "metadata.name",
                name,
                r#"must be spec.names.plural+"."+spec.group"#,
            )
        })
        .into_iter()
        .collect()
}

fn versions(spec: &Value) -> impl Iterator<Item = &Value> {
    spec["versions"].as_array().into_iter().flatten()
}

/// How a `spec.versions` error shows the list: abbreviated.
fn versions_value(spec: &Value) -> String {
    let each: Vec<String> = versions(spec)
        .map(|v| {
            format!(
                "apiextensions.CustomResourceDefinitionVersion{{Name:{:?}, Served:{}, Storage:{}, ...}}",
                v["name"].as_str().unwrap_or_default(),
                v["served"] == true,
                v["storage"] == true
            )
        })
        .collect();
    format!(
        "[]apiextensions.CustomResourceDefinitionVersion{{{}}}",
        each.join(", ")
    )
}

fn spec_causes(spec: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    let group = text(spec, "/group");
    if group.is_empty() {
        causes.push("spec.group: Required value".into());
    } else if let errors @ [_, ..] = dns1123_subdomain_errors(group).as_slice() {
        causes.push(invalid_value("spec.group", group, &errors.join(",")));
    } else if !group.contains('.') {
        causes.push(invalid_value(
            "spec.group",
            group,
            "should be a domain with at least one dot",
        ));
    }
    match text(spec, "/scope") {
        "" => causes.push("spec.scope: Required value".into()),
        "Cluster" | "Namespaced" => {}
        other => causes.push(format!(
            "spec.scope: Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""
        )),
    }
    let mut seen = Vec::new();
    let mut storage = 0;
    for (i, version) in versions(spec).enumerate() {
        let name = version["name"].as_str().unwrap_or_default();
        let path = format!("spec.versions[{i}]");
        if let errors @ [_, ..] = dns1035_label_errors(name).as_slice() {
            causes.push(invalid_value(
                &format!("{path}.name"),
                name,
                &errors.join(","),
            ));
        }
        causes.extend(schema_causes(&version["schema"]["openAPIV3Schema"], &path));
        storage += usize::from(version["storage"] == true);
        if seen.contains(&name) {
            causes.push(format!(
                "spec.versions: Invalid value: {}: must contain unique version names",
                versions_value(spec)
            ));
        }
        seen.push(name);
    }
    if storage != 1 {
        causes.push(format!(
            "spec.versions: Invalid value: {}: must have exactly one version marked as storage version",
            versions_value(spec)
        ));
    }
    causes.extend(names_causes(&spec["names"]));
    causes
}

/// A version's schema: required in v1, an object at the root.
fn schema_causes(schema: &Value, version_path: &str) -> Vec<String> {
    let path = format!("{version_path}.schema.openAPIV3Schema");
    match schema["type"].as_str() {
        _ if !schema.is_object() => vec![format!("{path}: Required value: schemas are required")],
        None | Some("") => vec![format!(
            "{path}.type: Required value: must not be empty at the root"
        )],
        Some("object") => Vec::new(),
        Some(other) => vec![invalid_value(
            &format!("{path}.type"),
            other,
            "must be object at the root",
        )],
    }
}

/// `ValidateCustomResourceDefinitionNames`, with the names a spec needs.
fn names_causes(names: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    for field in ["plural", "singular", "kind", "listKind"] {
        if names[field].as_str().is_none_or(str::is_empty) {
            causes.push(format!("spec.names.{field}: Required value"));
        }
    }
    let label = |field: &str, lower: bool| -> Option<String> {
        let value = names[field].as_str().filter(|v| !v.is_empty())?;
        let checked = if lower {
            value.to_lowercase()
        } else {
            value.to_string()
        };
        let errors = dns1035_label_errors(&checked);
        if errors.is_empty() {
            return None;
        }
        let prefix = if lower {
            "may have mixed case, but should otherwise match: "
        } else {
            ""
        };
        Some(invalid_value(
            &format!("spec.names.{field}"),
            value,
            &format!("{prefix}{}", errors.join(",")),
        ))
    };
    causes.extend(label("plural", false));
    causes.extend(label("singular", false));
    causes.extend(label("kind", true));
    causes.extend(label("listKind", true));
    for list in ["shortNames", "categories"] {
        for (i, name) in names[list].as_array().into_iter().flatten().enumerate() {
            let name = name.as_str().unwrap_or_default();
            if let errors @ [_, ..] = dns1035_label_errors(name).as_slice() {
                causes.push(invalid_value(
                    &format!("spec.names.{list}[{i}]"),
                    name,
                    &errors.join(","),
                ));
            }
        }
    }
    let kind = names["kind"].as_str().unwrap_or_default();
    if !kind.is_empty() && names["listKind"] == kind {
        causes.push(invalid_value(
            "spec.names.listKind",
            kind,
            "kind and listKind may not be the same",
        ));
    }
    causes
}

/// `validateAPIApproval`: groups Kubernetes owns need the approval
/// annotation.
fn approval_causes(obj: &Value) -> Vec<String> {
    let group = text(obj, "/spec/group");
    let protected = ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|d| group == *d || group.ends_with(&format!(".{d}")));
    if !protected || !obj["metadata"]["annotations"][API_APPROVED].is_null() {
        return Vec::new();
    }
    vec![format!(
        "metadata.annotations[{API_APPROVED}]: Required value: protected groups must have approval annotation \"{API_APPROVED}\", see https://github.com/kubernetes/enhancements/pull/1111"
    )]
}
