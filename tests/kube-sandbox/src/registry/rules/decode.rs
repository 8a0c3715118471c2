//! What stops a request body from decoding at all, as Go's JSON decoder
//! words it.

use serde_json::Value;

use super::quantity::is_quantity;
use crate::registry::Resource;

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
    let binary = match res.builtin_kind() {
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
    let quantities: &[&str] = match res.builtin_kind() {
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
