//! What the API server does to an object on write, per kind: decoding (what
//! Go's JSON decoder refuses before anything else), defaulting (the fields a
//! real server fills so that clients reading them back see what they would
//! see), admission, validation on create (names, labels, annotations, and
//! the fields the controllers here need), and on update the immutability
//! rules that volmig can trip over. Messages are apimachinery's.

use base64::prelude::{Engine as _, BASE64_STANDARD};
use serde_json::{json, Map, Value};

use super::Resource;
use crate::status::ApiError;

/// What admission plugins add to a new object: the storage-object-in-use
/// protection finalizers on claims and volumes.
pub fn admit(res: &Resource, obj: &mut Value) {
    let finalizer = match res.kind {
        "PersistentVolumeClaim" => "kubernetes.io/pvc-protection",
        "PersistentVolume" => "kubernetes.io/pv-protection",
        _ => return,
    };
    let list = &mut obj["metadata"]["finalizers"];
    if !list.is_array() {
        *list = json!([]);
    }
    if let Some(list) = list.as_array_mut() {
        if !list.iter().any(|f| f == finalizer) {
            list.push(json!(finalizer));
        }
    }
}

/// Fills the defaults a real API server fills on create (and on update, for
/// fields a client cleared). `default_class` is the default StorageClass's
/// name, which the admission plugin writes into claims that name none.
pub fn default_object(res: &Resource, obj: &mut Value, default_class: Option<&str>) {
    match res.kind {
        "Pod" => default_pod_spec(&mut obj["spec"]),
        "PersistentVolumeClaim" => {
            set_default(&mut obj["spec"], "volumeMode", json!("Filesystem"));
            // The DefaultStorageClass admission plugin: a claim that names
            // no class (absent or null; "" asks for none) gets the default.
            if let Some(class) = default_class {
                if obj["spec"]["storageClassName"].is_null() {
                    obj["spec"]["storageClassName"] = json!(class);
                }
            }
            set_default(&mut obj["status"], "phase", json!("Pending"));
        }
        "PersistentVolume" => {
            set_default(&mut obj["spec"], "volumeMode", json!("Filesystem"));
            set_default(
                &mut obj["spec"],
                "persistentVolumeReclaimPolicy",
                json!("Retain"),
            );
            set_default(&mut obj["status"], "phase", json!("Pending"));
        }
        "Service" => default_service(obj),
        "Namespace" => {
            set_default(&mut obj["spec"], "finalizers", json!(["kubernetes"]));
            set_default(&mut obj["status"], "phase", json!("Active"));
        }
        "StorageClass" => {
            set_default(obj, "reclaimPolicy", json!("Delete"));
            set_default(obj, "volumeBindingMode", json!("Immediate"));
        }
        "Secret" => default_secret(obj),
        "Deployment" => {
            set_default(&mut obj["spec"], "replicas", json!(1));
            set_default(&mut obj["spec"], "revisionHistoryLimit", json!(10));
            set_default(&mut obj["spec"], "progressDeadlineSeconds", json!(600));
            set_default(
                &mut obj["spec"],
                "strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
            );
            default_pod_spec(&mut obj["spec"]["template"]["spec"]);
        }
        "StatefulSet" => {
            set_default(&mut obj["spec"], "replicas", json!(1));
            set_default(
                &mut obj["spec"],
                "podManagementPolicy",
                json!("OrderedReady"),
            );
            set_default(&mut obj["spec"], "revisionHistoryLimit", json!(10));
            set_default(
                &mut obj["spec"],
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            set_default(
                &mut obj["spec"],
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
            if let Some(templates) = obj["spec"]["volumeClaimTemplates"].as_array_mut() {
                for t in templates {
                    set_default(&mut t["spec"], "volumeMode", json!("Filesystem"));
                }
            }
            default_pod_spec(&mut obj["spec"]["template"]["spec"]);
        }
        "ReplicaSet" => {
            set_default(&mut obj["spec"], "replicas", json!(1));
            default_pod_spec(&mut obj["spec"]["template"]["spec"]);
        }
        _ => {}
    }
}

fn set_default(obj: &mut Value, key: &str, value: Value) {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    if obj.get(key).is_none_or(Value::is_null) {
        obj[key] = value;
    }
}

fn default_pod_spec(spec: &mut Value) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "serviceAccountName", json!("default"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "enableServiceLinks", json!(true));
    set_default(spec, "priority", json!(0));
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec[list].as_array_mut() {
            for c in containers {
                let latest = c["image"].as_str().is_some_and(|i| {
                    !i.rsplit('/').next().unwrap_or(i).contains(':') || i.ends_with(":latest")
                });
                let policy = if latest { "Always" } else { "IfNotPresent" };
                set_default(c, "imagePullPolicy", json!(policy));
                set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
                set_default(c, "terminationMessagePolicy", json!("File"));
                set_default(c, "resources", json!({}));
                if let Some(ports) = c["ports"].as_array_mut() {
                    for p in ports {
                        set_default(p, "protocol", json!("TCP"));
                    }
                }
            }
        }
    }
}

fn default_service(obj: &mut Value) {
    let spec = &mut obj["spec"];
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    if let Some(ports) = spec["ports"].as_array_mut() {
        for p in ports {
            set_default(p, "protocol", json!("TCP"));
            let port = p["port"].clone();
            set_default(p, "targetPort", port);
        }
    }
}

/// `stringData` is write-only: the server folds it into `data` (base64).
fn default_secret(obj: &mut Value) {
    set_default(obj, "type", json!("Opaque"));
    let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    set_default(obj, "data", json!({}));
    for (k, v) in strings {
        let text = v.as_str().unwrap_or_default();
        obj["data"][k] = json!(BASE64_STANDARD.encode(text.as_bytes()));
    }
}

/// Checks a new object as a real server's validation would, for the rules
/// tests and volmig can meet: metadata (names, labels, annotations), and the
/// fields without which the controllers here could not act. Every problem
/// found is a cause of one 422, as Kubernetes reports them all at once.
pub fn validate_create(res: &Resource, obj: &Value) -> Result<(), ApiError> {
    let mut causes = meta_causes(res, &obj["metadata"], true);
    match res.kind {
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
        "Deployment" | "ReplicaSet" | "StatefulSet" => {
            let template = &obj["spec"]["template"]["metadata"];
            causes.extend(label_causes(
                "spec.template.metadata.labels",
                &template["labels"],
            ));
            causes.extend(annotation_causes(
                "spec.template.metadata.annotations",
                &template["annotations"],
            ));
            causes.extend(validate_workload(&obj["spec"]));
        }
        "Secret" => causes.extend(secret_causes(obj)),
        "ConfigMap" => causes.extend(config_map_causes(obj)),
        _ => {}
    }
    invalid_if_any(res, obj, causes)
}

fn invalid_if_any(res: &Resource, obj: &Value, causes: Vec<String>) -> Result<(), ApiError> {
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::Invalid {
        kind: res.kind.to_string(),
        name: obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        causes,
    })
}

/// apimachinery's `field.Invalid(path, value, detail)`, as it prints.
fn invalid_value(path: &str, value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {value:?}: {detail}")
}

/// apimachinery's `RegexError`: the rule, examples and the regex itself.
fn regex_error(message: &str, regex: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{message} (e.g. {}regex used for validation is '{regex}')",
        examples.join(" or ")
    )
}

fn max_len_error(max: usize) -> String {
    format!("must be no more than {max} characters")
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, the shape of one DNS label.
fn is_dns_label(s: &str) -> bool {
    let inner = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    s.chars().all(inner) && edge(s.chars().next()) && edge(s.chars().next_back())
}

/// `IsDNS1123Label`: namespace names.
fn dns1123_label_errors(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if s.len() > 63 {
        errors.push(max_len_error(63));
    }
    if !is_dns_label(s) {
        errors.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            "[a-z0-9]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "123-abc"],
        ));
    }
    errors
}

/// `IsDNS1123Subdomain`: most object names, and label key prefixes.
fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if s.len() > 253 {
        errors.push(max_len_error(253));
    }
    if !s.split('.').all(is_dns_label) {
        errors.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
            &["example.com"],
        ));
    }
    errors
}

/// `IsDNS1035Label`: Service names (they become DNS names and env vars).
fn dns1035_label_errors(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if s.len() > 63 {
        errors.push(max_len_error(63));
    }
    if !is_dns_label(s) || !s.starts_with(|c: char| c.is_ascii_lowercase()) {
        errors.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            "[a-z]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "abc-123"],
        ));
    }
    errors
}

/// The name rule of a kind, as its registry validates `metadata.name`
/// (and, with `prefix`, a `generateName`, whose trailing dash is allowed).
fn name_errors(kind: &str, name: &str, prefix: bool) -> Vec<String> {
    let masked;
    let name = match name.strip_suffix('-') {
        Some(rest) if prefix && !rest.is_empty() => {
            masked = format!("{rest}a");
            masked.as_str()
        }
        _ => name,
    };
    match kind {
        "Service" => dns1035_label_errors(name),
        "Namespace" => dns1123_label_errors(name),
        _ => dns1123_subdomain_errors(name),
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, or empty.
fn is_label_value(s: &str) -> bool {
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let edge = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    s.chars().all(inner) && edge(s.chars().next()) && edge(s.chars().next_back())
}

const QUALIFIED_NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_REGEX: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_EXAMPLES: &[&str] = &["MyName", "my.name", "123-abc"];

/// `IsQualifiedName`: label and annotation keys, `[prefix/]name`.
fn qualified_name_errors(key: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_string());
            } else {
                errors.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_RULE, QUALIFIED_NAME_REGEX, QUALIFIED_NAME_EXAMPLES)
            )]
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errors.push(format!("name part {}", max_len_error(63)));
    }
    if name.is_empty() || !is_label_value(name) {
        errors.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_RULE,
                QUALIFIED_NAME_REGEX,
                QUALIFIED_NAME_EXAMPLES
            )
        ));
    }
    errors
}

/// `IsValidLabelValue`: empty, or at most 63 of the qualified-name shape.
fn label_value_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push(max_len_error(63));
    }
    if !is_label_value(value) {
        errors.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
            &["MyValue", "my_value", "12345"],
        ));
    }
    errors
}

/// `ValidateLabels` at `path` (`metadata.labels`).
fn label_causes(path: &str, labels: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    for (key, value) in labels.as_object().into_iter().flatten() {
        let value = value.as_str().unwrap_or_default();
        for e in qualified_name_errors(key) {
            causes.push(invalid_value(path, key, &e));
        }
        for e in label_value_errors(value) {
            causes.push(invalid_value(path, value, &e));
        }
    }
    causes
}

/// The most all annotations of an object may hold, keys and values.
const ANNOTATIONS_LIMIT: usize = 256 << 10;

/// `ValidateAnnotations` at `path`: keys are qualified names (in any
/// case), and all of them with their values fit in 256 KiB.
fn annotation_causes(path: &str, annotations: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    let mut total = 0;
    for (key, value) in annotations.as_object().into_iter().flatten() {
        for e in qualified_name_errors(&key.to_lowercase()) {
            causes.push(invalid_value(path, key, &e));
        }
        total += key.len() + value.as_str().map_or(0, str::len);
    }
    if total > ANNOTATIONS_LIMIT {
        causes.push(too_long(path, ANNOTATIONS_LIMIT));
    }
    causes
}

/// apimachinery's `field.TooLong` (1.33 wording).
fn too_long(path: &str, max: usize) -> String {
    format!("{path}: Too long: may not be more than {max} bytes")
}

/// `ValidateObjectMeta` (on create: names too) and the label and
/// annotation half of `ValidateObjectMetaUpdate`.
fn meta_causes(res: &Resource, meta: &Value, create: bool) -> Vec<String> {
    let mut causes = Vec::new();
    if create {
        let generate = meta["generateName"].as_str().unwrap_or_default();
        if !generate.is_empty() {
            for e in name_errors(res.kind, generate, true) {
                causes.push(invalid_value("metadata.generateName", generate, &e));
            }
        }
        let name = meta["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            causes.push("metadata.name: Required value: name or generateName is required".into());
        } else {
            for e in name_errors(res.kind, name, false) {
                causes.push(invalid_value("metadata.name", name, &e));
            }
        }
    }
    causes.extend(label_causes("metadata.labels", &meta["labels"]));
    causes.extend(annotation_causes(
        "metadata.annotations",
        &meta["annotations"],
    ));
    causes
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
    causes
}

/// Whether `s` is a resource quantity, as its regular expression says:
/// `^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$`.
fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    if number == 0 {
        return false;
    }
    let suffix = &s[number..];
    let letters = suffix
        .find(|c: char| !"eEinumkKMGTP".contains(c))
        .unwrap_or(suffix.len());
    let exponent = &suffix[letters..];
    let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    exponent.chars().all(|c| c.is_ascii_digit())
}

/// -1, 0 or 1 for a quantity's sign; None when it is not a quantity.
fn quantity_sign(s: &str) -> Option<i8> {
    if !is_quantity(s) {
        return None;
    }
    let negative = s.starts_with('-');
    let digits = s.trim_start_matches(['+', '-']);
    let number = digits
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(digits.len());
    let zero = digits[..number].chars().all(|c| c == '0' || c == '.');
    Some(match (zero, negative) {
        (true, _) => 0,
        (false, true) => -1,
        (false, false) => 1,
    })
}

/// The most a Secret's (decoded) data may hold.
const SECRET_LIMIT: usize = 1 << 20;

/// `IsConfigMapKey`: Secret and ConfigMap keys become file names.
fn config_key_errors(key: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if key.len() > 253 {
        errors.push(max_len_error(253));
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    if key.is_empty() || !key.chars().all(ok) {
        errors.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    match key {
        "." => errors.push("must not be '.'".into()),
        ".." => errors.push("must not be '..'".into()),
        _ if key.starts_with("..") => errors.push("must not start with '..'".into()),
        _ => {}
    }
    errors
}

fn key_causes(path: &str, map: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    for key in map.as_object().into_iter().flatten().map(|(k, _)| k) {
        for e in config_key_errors(key) {
            causes.push(invalid_value(&format!("{path}[{key}]"), key, &e));
        }
    }
    causes
}

/// `ValidateSecret` past its metadata: keys, total size, and the keys each
/// built-in type requires.
fn secret_causes(secret: &Value) -> Vec<String> {
    let data = &secret["data"];
    let mut causes = key_causes("data", data);
    let total: usize = data
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(_, v)| go_base64_decode(v.as_str()?.as_bytes()).ok())
        .map(|bytes| bytes.len())
        .sum();
    if total > SECRET_LIMIT {
        causes.push(too_long("data", SECRET_LIMIT));
    }
    let has = |key: &str| data.get(key).is_some();
    let required = |key: &str| format!("data[{key}]: Required value");
    match secret["type"].as_str().unwrap_or("Opaque") {
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if !has(key) {
                    causes.push(required(key));
                }
            }
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            causes.push(required("username"));
            causes.push(required("password"));
        }
        "kubernetes.io/ssh-auth" if data["ssh-privatekey"].as_str().is_none_or(str::is_empty) => {
            causes.push(required("ssh-privatekey"));
        }
        "kubernetes.io/dockercfg" if !has(".dockercfg") => causes.push(required(".dockercfg")),
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            causes.push(required(".dockerconfigjson"));
        }
        "kubernetes.io/service-account-token"
            if secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
                .as_str()
                .is_none_or(str::is_empty) =>
        {
            causes.push(
                "metadata.annotations[kubernetes.io/service-account.name]: Required value".into(),
            );
        }
        _ => {}
    }
    causes
}

fn config_map_causes(map: &Value) -> Vec<String> {
    let mut causes = key_causes("data", &map["data"]);
    causes.extend(key_causes("binaryData", &map["binaryData"]));
    causes
}

/// What stops a request body from decoding into its kind at all, as Go's
/// JSON decoder words it: Secret data that is not base64, a label that is
/// not a string, a quantity that is not one. The API server answers these
/// with 400 (`<Kind> in version "v1" cannot be handled as a <Kind>: ...`)
/// before any validation; for a patch, whose result does not decode, 422.
pub fn decode_problem(res: &Resource, obj: &Value) -> Option<String> {
    let type_error = |found: &Value, field: &str, ty: &str| {
        let what = match found {
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
            Value::Null => return None,
        };
        Some(format!(
            "json: cannot unmarshal {what} into Go struct field {field} of type {ty}"
        ))
    };
    for map in ["labels", "annotations"] {
        for (_, v) in obj["metadata"][map].as_object().into_iter().flatten() {
            if !v.is_string() {
                if let Some(e) = type_error(v, &format!("ObjectMeta.metadata.{map}"), "string") {
                    return Some(e);
                }
            }
        }
    }
    let binary = match res.kind {
        "Secret" => Some(("data", "Secret.data")),
        "ConfigMap" => Some(("binaryData", "ConfigMap.binaryData")),
        _ => None,
    };
    if let Some((field, go_field)) = binary {
        for (_, v) in obj[field].as_object().into_iter().flatten() {
            match v {
                Value::String(s) => {
                    if let Err(at) = go_base64_decode(s.as_bytes()) {
                        return Some(format!("illegal base64 data at input byte {at}"));
                    }
                }
                other => {
                    if let Some(e) = type_error(other, go_field, "[]uint8") {
                        return Some(e);
                    }
                }
            }
        }
    }
    let quantities: &[&str] = match res.kind {
        "PersistentVolumeClaim" => &["/spec/resources/requests", "/spec/resources/limits"],
        "PersistentVolume" => &["/spec/capacity"],
        _ => &[],
    };
    for list in quantities {
        for (_, q) in obj
            .pointer(list)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let ok = match q {
                Value::String(s) => is_quantity(s),
                Value::Number(_) | Value::Null => true,
                _ => false,
            };
            if !ok {
                return Some("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'".into());
            }
        }
    }
    None
}

/// Go's `base64.StdEncoding.Decode`, as `encoding/json` decodes `[]byte`:
/// padded, newlines skipped, and on failure the offset Go reports
/// ("illegal base64 data at input byte N").
pub fn go_base64_decode(src: &[u8]) -> Result<Vec<u8>, usize> {
    let value = |c: u8| -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    };
    let newline = |c: u8| c == b'\n' || c == b'\r';
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0;
    while si < src.len() {
        let mut quantum = [0u32; 4];
        let mut len = 4;
        let mut j = 0;
        let mut end = false;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                // Go reports `si - j` for a short final quantum.
                return Err(si - j);
            }
            let c = src[si];
            si += 1;
            if let Some(v) = value(c) {
                quantum[j] = v;
                j += 1;
                continue;
            }
            if newline(c) {
                continue;
            }
            if c != b'=' {
                return Err(si - 1);
            }
            // Padding: only after two or three symbols, and then the end.
            match j {
                0 | 1 => return Err(si - 1),
                2 => {
                    while si < src.len() && newline(src[si]) {
                        si += 1;
                    }
                    if si == src.len() {
                        return Err(src.len());
                    }
                    if src[si] != b'=' {
                        return Err(si - 1);
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && newline(src[si]) {
                si += 1;
            }
            if si < src.len() {
                return Err(si);
            }
            len = j;
            end = true;
            break;
        }
        let bits = quantum[0] << 18 | quantum[1] << 12 | quantum[2] << 6 | quantum[3];
        let bytes = [(bits >> 16) as u8, (bits >> 8) as u8, bits as u8];
        out.extend_from_slice(&bytes[..len - 1]);
        if end {
            return Ok(out);
        }
    }
    Ok(out)
}

fn validate_pod_spec(spec: &Value) -> Option<String> {
    let containers = spec["containers"].as_array().filter(|c| !c.is_empty());
    let Some(containers) = containers else {
        return Some("spec.containers: Required value".into());
    };
    let volumes: Vec<&str> = spec["volumes"]
        .as_array()
        .map(|v| v.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default();
    for (i, c) in containers.iter().enumerate() {
        if c["name"].as_str().is_none_or(str::is_empty) {
            return Some(format!("spec.containers[{i}].name: Required value"));
        }
        if c["image"].as_str().is_none_or(str::is_empty) {
            return Some(format!("spec.containers[{i}].image: Required value"));
        }
        for (j, m) in c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let name = m["name"].as_str().unwrap_or_default();
            if !volumes.contains(&name) {
                return Some(format!(
                    "spec.containers[{i}].volumeMounts[{j}].name: Not found: {name:?}"
                ));
            }
        }
    }
    None
}

fn validate_workload(spec: &Value) -> Option<String> {
    let selector = &spec["selector"];
    if selector.is_null() {
        return Some("spec.selector: Required value".into());
    }
    let labels = &spec["template"]["metadata"]["labels"];
    if let Some(wanted) = selector["matchLabels"].as_object() {
        if wanted.iter().any(|(k, v)| &labels[k] != v) {
            return Some("spec.template.metadata.labels: Invalid value: `selector` does not match template `labels`".into());
        }
    }
    // A StatefulSet's claim templates are volumes its pods mount too.
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
            volumes.push(json!({"name": t["metadata"]["name"]}));
        }
    }
    validate_pod_spec(&pod_spec).map(|m| format!("spec.template.{m}"))
}

/// Checks an update against the fields Kubernetes forbids changing, and the
/// new object's labels, annotations and (Secrets, ConfigMaps) data.
pub fn validate_update(res: &Resource, old: &Value, new: &Value) -> Result<(), ApiError> {
    let mut causes = meta_causes(res, &new["metadata"], false);
    let problem = match res.kind {
        "Pod" => pod_update_problem(&old["spec"], &new["spec"]),
        "PersistentVolumeClaim" => claim_update_problem(&old["spec"], &new["spec"]),
        "PersistentVolume" => volume_update_problem(&old["spec"], &new["spec"]),
        "StatefulSet" => changed_except(
            &old["spec"],
            &new["spec"],
            &["replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy", "minReadySeconds"],
        )
        .then(|| "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".to_string()),
        "Deployment" | "ReplicaSet" => (old["spec"]["selector"] != new["spec"]["selector"])
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
    match res.kind {
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
        _ => {}
    }
    invalid_if_any(res, old, causes)
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

fn pod_update_problem(old: &Value, new: &Value) -> Option<String> {
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

fn claim_update_problem(old: &Value, new: &Value) -> Option<String> {
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

fn volume_update_problem(old: &Value, new: &Value) -> Option<String> {
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

/// A resource quantity in bytes (`10Gi`, `500M`, `1024`); None when it is
/// not one.
pub fn parse_quantity(q: &str) -> Option<u128> {
    let q = q.trim();
    let split = q
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let factor: u128 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    Some((value * factor as f64) as u128)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::get;

    #[test]
    fn pods_get_the_defaults_a_server_fills() {
        let mut pod = json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        default_object(get("pods"), &mut pod, None);
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
    }

    #[test]
    fn claims_get_the_default_class_and_secrets_fold_string_data() {
        let mut pvc =
            json!({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"]}});
        default_object(get("persistentvolumeclaims"), &mut pvc, Some("standard"));
        assert_eq!(pvc["spec"]["storageClassName"], "standard");
        assert_eq!(pvc["status"]["phase"], "Pending");
        let mut secret =
            json!({"metadata": {"name": "s"}, "stringData": {"a": "hello", "b": "hi"}});
        default_object(get("secrets"), &mut secret, None);
        assert_eq!(secret["data"], json!({"a": "aGVsbG8=", "b": "aGk="}));
        assert!(secret.get("stringData").is_none());
    }

    #[test]
    fn names_follow_dns_1123() {
        let pod = |name: &str| json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        assert!(validate_create(get("pods"), &pod("app-0")).is_ok());
        assert!(validate_create(get("pods"), &pod("app.example")).is_ok());
        for bad in ["", "App", "-a", "a_b", "a-", "a..b", "a-.b"] {
            let err = validate_create(get("pods"), &pod(bad)).expect_err(bad);
            assert_eq!(err.code(), 422, "{bad}");
        }
        let err = validate_create(get("pods"), &pod("")).expect_err("empty");
        assert_eq!(
            err.to_string(),
            "Pod \"\" is invalid: metadata.name: Required value: name or generateName is required"
        );
        let err = validate_create(get("pods"), &pod("App")).expect_err("upper case");
        assert_eq!(
            err.to_string(),
            r#"Pod "App" is invalid: metadata.name: Invalid value: "App": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#
        );
    }

    #[test]
    fn services_are_dns_1035_labels_and_namespaces_dns_1123_labels() {
        let svc = |name: &str| json!({"metadata": {"name": name}, "spec": {}});
        assert!(validate_create(get("services"), &svc("web-1")).is_ok());
        let err = validate_create(get("services"), &svc("1web")).expect_err("leading digit");
        assert_eq!(
            err.to_string(),
            r#"Service "1web" is invalid: metadata.name: Invalid value: "1web": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"#
        );
        assert!(validate_create(get("services"), &svc("a.b")).is_err());
        assert!(validate_create(get("services"), &svc(&"a".repeat(64))).is_err());
        let ns = |name: &str| json!({"metadata": {"name": name}});
        assert!(validate_create(get("namespaces"), &ns("team-1")).is_ok());
        let err = validate_create(get("namespaces"), &ns("team.one")).expect_err("dots");
        assert!(
            err.to_string()
                .contains("a lowercase RFC 1123 label must consist of"),
            "{err}"
        );
        assert!(validate_create(get("namespaces"), &ns(&"a".repeat(64))).is_err());
        // A generateName prefix may end in a dash; the name it makes is
        // checked too.
        let generated =
            json!({"metadata": {"generateName": "Web-", "name": "Web-x2b4z"}, "spec": {}});
        let err = validate_create(get("services"), &generated).expect_err("upper case");
        let ApiError::Invalid { causes, .. } = err else {
            panic!("{err:?}")
        };
        assert!(causes[0].starts_with("metadata.generateName: Invalid value: \"Web-\""));
        assert!(causes[1].starts_with("metadata.name: Invalid value: \"Web-x2b4z\""));
    }

    #[test]
    fn labels_and_annotations_are_validated_on_create_and_update() {
        let cm = |meta: Value| {
            let mut m = json!({"name": "c"});
            m.as_object_mut()
                .unwrap()
                .extend(meta.as_object().unwrap().clone());
            json!({"metadata": m})
        };
        let good =
            cm(json!({"labels": {"app.kubernetes.io/name": "web", "tier": "", "a_b": "x.y-Z"}}));
        assert!(validate_create(get("configmaps"), &good).is_ok());
        let err = validate_create(get("configmaps"), &cm(json!({"labels": {"bad key": "v"}})))
            .expect_err("space in key");
        assert_eq!(
            err.to_string(),
            r#"ConfigMap "c" is invalid: metadata.labels: Invalid value: "bad key": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"#
        );
        let long = "v".repeat(64);
        let err = validate_create(get("configmaps"), &cm(json!({"labels": {"k": long}})))
            .expect_err("long value");
        assert!(
            err.to_string()
                .ends_with(": must be no more than 63 characters"),
            "{err}"
        );
        for key in ["Example.com/x", "/x", "a/b/c", "x/"] {
            assert!(
                validate_create(get("configmaps"), &cm(json!({"labels": {key: "v"}}))).is_err(),
                "{key}"
            );
        }
        // Annotation keys are checked in lower case; their size is capped.
        let upper = cm(json!({"annotations": {"Example.com/Note": "anything goes: here"}}));
        assert!(validate_create(get("configmaps"), &upper).is_ok());
        let big = cm(json!({"annotations": {"a": "x".repeat(256 << 10)}}));
        let err = validate_create(get("configmaps"), &big).expect_err("too big");
        assert!(
            err.to_string()
                .ends_with("metadata.annotations: Too long: may not be more than 262144 bytes"),
            "{err}"
        );
        let old = cm(json!({}));
        let relabelled = cm(json!({"labels": {"-x": "v"}}));
        assert_eq!(
            validate_update(get("configmaps"), &old, &relabelled).map_err(|e| e.code()),
            Err(422)
        );
    }

    #[test]
    fn claims_always_request_storage() {
        let claim = |spec: Value| json!({"metadata": {"name": "c"}, "spec": spec});
        let claims = get("persistentvolumeclaims");
        let bound = claim(json!({"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1"}));
        assert_eq!(
            validate_create(claims, &bound).map_err(|e| e.to_string()),
            Err(
                "PersistentVolumeClaim \"c\" is invalid: spec.resources[storage]: Required value"
                    .into()
            )
        );
        for (storage, shown) in [("0", "0"), ("0Gi", "0"), ("-1Gi", "-1Gi")] {
            let zero = claim(
                json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}),
            );
            assert_eq!(
                validate_create(claims, &zero).map_err(|e| e.to_string()),
                Err(format!("PersistentVolumeClaim \"c\" is invalid: spec.resources[storage]: Invalid value: \"{shown}\": must be greater than zero"))
            );
        }
        let ok = claim(
            json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv-1"}),
        );
        assert!(validate_create(claims, &ok).is_ok());
        let odd = claim(
            json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1 Gi"}}}),
        );
        assert!(decode_problem(claims, &odd)
            .is_some_and(|p| p.starts_with("quantities must match the regular expression")));
        assert!(decode_problem(claims, &ok).is_none());
    }

    #[test]
    fn a_null_class_gets_the_default_and_an_empty_one_stays() {
        let claims = get("persistentvolumeclaims");
        let mut null = json!({"metadata": {"name": "c"}, "spec": {"storageClassName": null}});
        default_object(claims, &mut null, Some("standard"));
        assert_eq!(null["spec"]["storageClassName"], "standard");
        let mut none = json!({"metadata": {"name": "c"}, "spec": {"storageClassName": ""}});
        default_object(claims, &mut none, Some("standard"));
        assert_eq!(none["spec"]["storageClassName"], "");
    }

    #[test]
    fn secrets_keys_types_sizes_and_immutability() {
        let secrets = get("secrets");
        let secret =
            |ty: &str, data: Value| json!({"metadata": {"name": "s"}, "type": ty, "data": data});
        assert!(validate_create(secrets, &secret("Opaque", json!({"a.b-C_d": "aGk="}))).is_ok());
        let err =
            validate_create(secrets, &secret("Opaque", json!({"a/b": "aGk="}))).expect_err("slash");
        assert_eq!(
            err.to_string(),
            r#"Secret "s" is invalid: data[a/b]: Invalid value: "a/b": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"#
        );
        assert!(validate_create(secrets, &secret("Opaque", json!({"..x": ""}))).is_err());
        let err = validate_create(
            secrets,
            &secret("kubernetes.io/tls", json!({"tls.crt": "aGk="})),
        )
        .expect_err("no key");
        assert_eq!(
            err.to_string(),
            "Secret \"s\" is invalid: data[tls.key]: Required value"
        );
        let big = BASE64_STANDARD.encode(vec![0u8; (1 << 20) + 1]);
        let err =
            validate_create(secrets, &secret("Opaque", json!({"big": big}))).expect_err("too big");
        assert!(
            err.to_string()
                .ends_with("data: Too long: may not be more than 1048576 bytes"),
            "{err}"
        );
        let mut locked = secret("Opaque", json!({"a": "aGk="}));
        locked["immutable"] = json!(true);
        let mut unlocked = locked.clone();
        unlocked["immutable"] = json!(false);
        assert_eq!(
            validate_update(secrets, &locked, &unlocked).map_err(|e| e.to_string()),
            Err("Secret \"s\" is invalid: immutable: Forbidden: field is immutable when `immutable` is set".into())
        );
        let mut retyped = secret("kubernetes.io/basic-auth", json!({"username": "aGk="}));
        retyped["metadata"]["name"] = json!("s");
        assert!(
            validate_update(secrets, &secret("Opaque", json!({})), &retyped).is_err_and(|e| e
                .to_string()
                .contains("type: Invalid value: \"kubernetes.io/basic-auth\": field is immutable"))
        );
    }

    #[test]
    fn data_that_does_not_decode() {
        let secrets = get("secrets");
        let secret = |v: Value| json!({"metadata": {"name": "s"}, "data": {"k": v}});
        assert_eq!(decode_problem(secrets, &secret(json!("aGk="))), None);
        assert_eq!(
            decode_problem(secrets, &secret(json!("not base64!"))).as_deref(),
            Some("illegal base64 data at input byte 3")
        );
        assert_eq!(
            decode_problem(secrets, &secret(json!(7))).as_deref(),
            Some("json: cannot unmarshal number into Go struct field Secret.data of type []uint8")
        );
        let labelled = json!({"metadata": {"name": "c", "labels": {"n": 1}}});
        assert!(decode_problem(get("configmaps"), &labelled).is_some());
    }

    #[test]
    fn base64_errors_at_the_byte_go_reports() {
        assert_eq!(go_base64_decode(b"aGk="), Ok(b"hi".to_vec()));
        assert_eq!(go_base64_decode(b"aGVsbG8="), Ok(b"hello".to_vec()));
        assert_eq!(go_base64_decode(b"aA=="), Ok(b"h".to_vec()));
        assert_eq!(go_base64_decode(b"aGVs\nbG8="), Ok(b"hello".to_vec()));
        assert_eq!(go_base64_decode(b""), Ok(Vec::new()));
        assert_eq!(go_base64_decode(b"billy"), Err(4));
        assert_eq!(go_base64_decode(b"APIKEY_BASE64"), Err(6));
        assert_eq!(go_base64_decode(b"<foo>"), Err(0));
        assert_eq!(go_base64_decode(b"abc"), Err(0));
        assert_eq!(go_base64_decode(b"a==="), Err(1));
        assert_eq!(go_base64_decode(b"aGk=x"), Err(4));
        assert_eq!(go_base64_decode(b"aA="), Err(3));
    }

    #[test]
    fn bound_claims_only_grow() {
        let old = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv-1", "storageClassName": "standard"});
        let mut grown = old.clone();
        grown["resources"]["requests"]["storage"] = json!("2Gi");
        assert!(claim_update_problem(&old, &grown).is_none());
        let mut shrunk = old.clone();
        shrunk["resources"]["requests"]["storage"] = json!("512Mi");
        assert!(claim_update_problem(&old, &shrunk).is_some());
        let mut reclassed = old.clone();
        reclassed["storageClassName"] = json!("fast");
        assert!(claim_update_problem(&old, &reclassed).is_some());
        let unbound = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
        let mut binding = unbound.clone();
        binding["volumeName"] = json!("pv-1");
        assert!(claim_update_problem(&unbound, &binding).is_none());
    }

    #[test]
    fn pod_specs_allow_image_and_added_tolerations_only() {
        let old = json!({"containers": [{"name": "c", "image": "a"}], "tolerations": [{"key": "k", "operator": "Exists"}]});
        let mut new = old.clone();
        new["containers"][0]["image"] = json!("b");
        new["tolerations"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "x", "operator": "Exists"}));
        assert!(pod_update_problem(&old, &new).is_none());
        new["tolerations"] = json!([]);
        assert!(pod_update_problem(&old, &new).is_some());
        let mut renamed = old.clone();
        renamed["containers"][0]["args"] = json!(["x"]);
        assert!(pod_update_problem(&old, &renamed).is_some());
    }

    #[test]
    fn statefulset_templates_are_immutable_but_replicas_are_not() {
        let old = json!({"replicas": 1, "serviceName": "s", "volumeClaimTemplates": [{"spec": {"storageClassName": "a"}}]});
        let mut scaled = old.clone();
        scaled["replicas"] = json!(3);
        assert!(validate_update(
            get("statefulsets"),
            &json!({"spec": old}),
            &json!({"spec": scaled})
        )
        .is_ok());
        let mut reclassed = old.clone();
        reclassed["volumeClaimTemplates"][0]["spec"]["storageClassName"] = json!("b");
        let err = validate_update(
            get("statefulsets"),
            &json!({"spec": old}),
            &json!({"spec": reclassed}),
        );
        assert_eq!(err.map_err(|e| e.reason()), Err("Invalid"));
    }

    #[test]
    fn volume_node_affinity_and_source_are_fixed() {
        let old = json!({"hostPath": {"path": "/a"}, "nodeAffinity": {"required": {}}, "volumeMode": "Filesystem"});
        let mut released = old.clone();
        released["claimRef"] = Value::Null;
        assert!(volume_update_problem(&old, &released).is_none());
        let mut moved = old.clone();
        moved["nodeAffinity"] = json!({"required": {"x": 1}});
        assert!(volume_update_problem(&old, &moved).is_some());
        let mut resourced = old.clone();
        resourced["hostPath"]["path"] = json!("/b");
        assert!(volume_update_problem(&old, &resourced).is_some());
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("1Gi"), Some(1 << 30));
        assert_eq!(parse_quantity("500M"), Some(500_000_000));
        assert_eq!(parse_quantity("1.5Ki"), Some(1536));
        assert_eq!(parse_quantity("12"), Some(12));
        assert_eq!(parse_quantity("1X"), None);
    }
}
