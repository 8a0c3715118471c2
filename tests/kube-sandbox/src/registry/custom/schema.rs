//! What the apiextensions server does with a custom resource's
//! structural schema on write: pruning (fields the schema does not
//! specify are dropped, unless `x-kubernetes-preserve-unknown-fields`
//! keeps them or `spec.preserveUnknownFields` turns pruning off),
//! defaulting (`default:` fills what is missing; a `null` the schema
//! does not allow is dropped first), and validation of the value
//! constraints tests meet: `type` (with `nullable` and
//! `x-kubernetes-int-or-string`), `required`, `enum`, `minLength`,
//! `maxLength`, `minimum`, `maximum`. `pattern`, `format`, CEL rules and
//! list types are not checked. Messages are kube-openapi's, as the API
//! server turns them into field errors.

use serde_json::{Map, Value};

/// The fields of a resource's root that the schema does not govern.
const RESOURCE_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Drops what `schema` does not specify from the object (pruning).
pub fn prune(schema: &Value, obj: &mut Value) {
    if let Value::Object(map) = obj {
        prune_object(schema, map, true);
    }
}

fn prune_value(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            let embedded = schema["x-kubernetes-embedded-resource"] == true;
            prune_object(schema, map, embedded);
        }
        Value::Array(items) if schema["items"].is_object() => {
            for item in items {
                prune_value(&schema["items"], item);
            }
        }
        _ => {}
    }
}

/// An object's fields: those with a property schema (nulls it does not
/// allow dropped), those `additionalProperties` admits, and the rest
/// only when unknown fields are preserved. `resource` keeps apiVersion,
/// kind and metadata (the root, or an embedded resource).
fn prune_object(schema: &Value, map: &mut Map<String, Value>, resource: bool) {
    let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
    let properties = schema["properties"].as_object();
    let additional = &schema["additionalProperties"];
    map.retain(|key, value| {
        if resource && RESOURCE_FIELDS.contains(&key.as_str()) {
            return true;
        }
        if let Some(property) = properties.and_then(|p| p.get(key)) {
            if value.is_null() && property["nullable"] != true {
                return false;
            }
            prune_value(property, value);
            return true;
        }
        if additional.is_object() {
            prune_value(additional, value);
            return true;
        }
        *additional == true || preserve
    });
}

/// Fills the `default`s of the properties the object lacks, at every
/// level (the root's apiVersion, kind and metadata excepted).
pub fn default_fields(schema: &Value, obj: &mut Value) {
    default_value(schema, obj, true);
}

fn default_value(schema: &Value, value: &mut Value, root: bool) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema["properties"].as_object() {
                for (key, property) in properties {
                    if root && RESOURCE_FIELDS.contains(&key.as_str()) {
                        continue;
                    }
                    if let Some(default) = property.get("default") {
                        map.entry(key.clone()).or_insert_with(|| default.clone());
                    }
                    if let Some(field) = map.get_mut(key) {
                        default_value(property, field, false);
                    }
                }
            } else if schema["additionalProperties"].is_object() {
                for field in map.values_mut() {
                    default_value(&schema["additionalProperties"], field, false);
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for item in items {
                default_value(&schema["items"], item, false);
            }
        }
        _ => {}
    }
}

/// The field errors of `obj` against `schema`, as `path: ...` causes;
/// the root's metadata is ObjectMeta's to validate.
pub fn schema_causes(schema: &Value, obj: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    let Some(map) = obj.as_object() else {
        return causes;
    };
    for name in required(schema) {
        if !map.contains_key(name) {
            causes.push(format!("{name}: Required value"));
        }
    }
    for (key, value) in map {
        if key == "metadata" {
            continue;
        }
        if let Some(property) = schema["properties"].get(key) {
            check(property, value, key, &mut causes);
        }
    }
    causes
}

fn required(schema: &Value) -> impl Iterator<Item = &str> {
    schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The JSON type of a value as kube-openapi names it.
fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(expected: &str, actual: &str, int_or_string: bool) -> bool {
    expected == actual
        || (expected == "number" && actual == "integer")
        || (int_or_string && matches!(actual, "integer" | "string"))
}

/// A value as `field.Error` prints it: strings quoted, numbers and
/// booleans bare, anything else as JSON.
pub(crate) fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn check(schema: &Value, value: &Value, path: &str, causes: &mut Vec<String>) {
    if !schema.is_object() || (value.is_null() && schema["nullable"] == true) {
        return;
    }
    let actual = type_of(value);
    let int_or_string = schema["x-kubernetes-int-or-string"] == true;
    if let Some(expected) = schema["type"].as_str() {
        if !type_matches(expected, actual, int_or_string) {
            causes.push(format!(
                "{path}: Invalid value: \"{actual}\": {path} in body must be of type {expected}: \"{actual}\""
            ));
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            let values: Vec<String> = allowed
                .iter()
                .map(|v| match v {
                    Value::String(s) => format!("{s:?}"),
                    other => format!("{:?}", other.to_string()),
                })
                .collect();
            causes.push(format!(
                "{path}: Unsupported value: {}: supported values: {}",
                shown(value),
                values.join(", ")
            ));
        }
    }
    match value {
        Value::String(s) => string_causes(schema, s, path, causes),
        Value::Number(n) => {
            let n = n.as_f64().unwrap_or_default();
            let bound = |key: &str| schema[key].as_f64();
            if let Some(min) = bound("minimum").filter(|m| n < *m) {
                causes.push(format!(
                    "{path}: Invalid value: {}: {path} in body should be greater than or equal to {min}",
                    shown(value)
                ));
            }
            if let Some(max) = bound("maximum").filter(|m| n > *m) {
                causes.push(format!(
                    "{path}: Invalid value: {}: {path} in body should be less than or equal to {max}",
                    shown(value)
                ));
            }
        }
        Value::Object(map) => {
            for name in required(schema) {
                if !map.contains_key(name) {
                    causes.push(format!("{path}.{name}: Required value"));
                }
            }
            for (key, field) in map {
                let child = format!("{path}.{key}");
                match schema["properties"].get(key) {
                    Some(property) => check(property, field, &child, causes),
                    None if schema["additionalProperties"].is_object() => {
                        check(&schema["additionalProperties"], field, &child, causes);
                    }
                    None => {}
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check(&schema["items"], item, &format!("{path}[{i}]"), causes);
            }
        }
        _ => {}
    }
}

fn string_causes(schema: &Value, s: &str, path: &str, causes: &mut Vec<String>) {
    let chars = s.chars().count() as u64;
    if let Some(min) = schema["minLength"].as_u64().filter(|m| chars < *m) {
        causes.push(format!(
            "{path}: Invalid value: {s:?}: {path} in body should be at least {min} chars long"
        ));
    }
    if let Some(max) = schema["maxLength"].as_u64().filter(|m| chars > *m) {
        causes.push(format!(
            "{path}: Too long: may not be more than {max} bytes"
        ));
    }
}
