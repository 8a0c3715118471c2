//! A decoded Kubernetes message as the JSON the API server would write for
//! it: Kubernetes' field names (the schemas name fields by their JSON
//! names), 64-bit integers as numbers, bytes in base64, and the types with
//! a JSON form of their own: `Time` and `MicroTime` as RFC 3339,
//! `IntOrString` as a number or a string, `Quantity` as its string,
//! `RawExtension` and `FieldsV1` as the JSON they carry.
//!
//! Go's protobuf encoder writes every non-pointer field, zero or not; Go's
//! JSON encoder then leaves the `omitempty` ones out. The same fields are
//! left out here: empty strings (but pointer strings, see [`omitempty`]),
//! and the zero numbers and `false` of the non-pointer `omitempty` fields;
//! other zeros and empty messages (`emptyDir: {}`) are kept, as pointers
//! set to them must be, and a zero time is `null`, as Go writes it
//! (`creationTimestamp: null`).

use base64::prelude::{Engine as _, BASE64_STANDARD};
use prost_reflect::{DynamicMessage, MapKey, ReflectMessage, Value as Field};
use serde_json::{json, Map, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::omitempty::{EMPTY_IS_A_VALUE, ZERO_IS_UNSET};

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

/// The fields of core/v1 messages that Go embeds with `json:",inline"`
/// (k8s.io/api `core/v1/types.go`): a message in protobuf, its fields
/// merged into the parent in JSON.
const INLINE: [&str; 5] = [
    "volumeSource",
    "persistentVolumeSource",
    "localObjectReference",
    "handler",
    "ephemeralContainerCommon",
];

/// The JSON of a message.
pub(super) fn object(message: &DynamicMessage) -> Value {
    let name = message.descriptor().full_name().to_string();
    match name.strip_prefix(META).unwrap_or(&name) {
        ".Time" => return time(message, false),
        ".MicroTime" => return time(message, true),
        ".FieldsV1" => return embedded_json(message, "Raw"),
        _ => {}
    }
    match name.as_str() {
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => return int_or_string(message),
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => {
            return Value::String(text(message, "string"));
        }
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => return embedded_json(message, "raw"),
        _ => {}
    }
    let core = name.starts_with("k8s.io.api.core.v1.");
    let short = name.rsplit('.').next().unwrap_or(&name);
    let mut map = Map::new();
    for (field, value) in message.fields() {
        let qualified = format!("{short}.{}", field.json_name());
        let omitted = match value {
            Field::String(s) => s.is_empty() && !EMPTY_IS_A_VALUE.contains(&qualified.as_str()),
            Field::Bool(false) | Field::I32(0) | Field::I64(0) => {
                ZERO_IS_UNSET.contains(&qualified.as_str())
            }
            _ => false,
        };
        if omitted {
            continue;
        }
        match field_value(value) {
            Some(Value::Object(inner)) if core && INLINE.contains(&field.name()) => {
                map.extend(inner);
            }
            Some(value) => {
                map.insert(field.json_name().to_string(), value);
            }
            None => {}
        }
    }
    Value::Object(map)
}

/// A field's JSON (a zero time is null, as Go writes it).
fn field_value(value: &Field) -> Option<Value> {
    let json = match value {
        Field::Message(m) => object(m),
        Field::List(items) => Value::Array(items.iter().filter_map(element).collect()),
        Field::Map(entries) => {
            let mut map = Map::new();
            for (key, value) in entries {
                if let Some(value) = element(value) {
                    map.insert(map_key(key), value);
                }
            }
            Value::Object(map)
        }
        scalar => element(scalar)?,
    };
    Some(json)
}

/// A value in a list or map, or a scalar: kept even when empty.
fn element(value: &Field) -> Option<Value> {
    Some(match value {
        Field::Bool(b) => json!(b),
        Field::I32(n) => json!(n),
        Field::I64(n) => json!(n),
        Field::U32(n) => json!(n),
        Field::U64(n) => json!(n),
        Field::F32(n) => json!(n),
        Field::F64(n) => json!(n),
        Field::String(s) => json!(s),
        Field::Bytes(b) => json!(BASE64_STANDARD.encode(b)),
        Field::EnumNumber(n) => json!(n),
        Field::Message(m) => object(m),
        Field::List(_) | Field::Map(_) => field_value(value)?,
    })
}

fn map_key(key: &MapKey) -> String {
    match key {
        MapKey::String(s) => s.clone(),
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
    }
}

fn text(message: &DynamicMessage, name: &str) -> String {
    match message.get_field_by_name(name).as_deref() {
        Some(Field::String(s)) => s.clone(),
        _ => String::new(),
    }
}

fn integer(message: &DynamicMessage, name: &str) -> i64 {
    match message.get_field_by_name(name).as_deref() {
        Some(Field::I64(n)) => *n,
        Some(Field::I32(n)) => i64::from(*n),
        _ => 0,
    }
}

/// `Time` (seconds) and `MicroTime` (microseconds) in RFC 3339, UTC; the
/// zero time is null, as in Go.
fn time(message: &DynamicMessage, micro: bool) -> Value {
    let (seconds, nanos) = (integer(message, "seconds"), integer(message, "nanos"));
    if seconds == 0 && nanos == 0 {
        return Value::Null;
    }
    let Ok(at) = OffsetDateTime::from_unix_timestamp(seconds) else {
        return Value::Null;
    };
    let at = at.replace_nanosecond(0).unwrap_or(at);
    let whole = at.format(&Rfc3339).unwrap_or_default();
    if !micro {
        return Value::String(whole);
    }
    let micros = nanos / 1000;
    Value::String(match whole.strip_suffix('Z') {
        Some(stem) => format!("{stem}.{micros:06}Z"),
        None => whole,
    })
}

/// `IntOrString`: `type` 0 is `intVal`, 1 is `strVal`.
fn int_or_string(message: &DynamicMessage) -> Value {
    match integer(message, "type") {
        1 => Value::String(text(message, "strVal")),
        _ => json!(integer(message, "intVal")),
    }
}

/// The JSON in a bytes field (`RawExtension.raw`, `FieldsV1.Raw`).
fn embedded_json(message: &DynamicMessage, field: &str) -> Value {
    match message.get_field_by_name(field).as_deref() {
        Some(Field::Bytes(raw)) if !raw.is_empty() => {
            serde_json::from_slice(raw).unwrap_or(Value::Null)
        }
        _ => Value::Null,
    }
}
