//! Secret and ConfigMap rules: keys, sizes and the keys each Secret type
//! requires.

use serde_json::Value;

use super::decode::go_base64_decode;
use super::metadata::{invalid_value, too_long, Rule};

/// The most a Secret's (decoded) data may hold.
const SECRET_LIMIT: usize = 1 << 20;

/// `IsConfigMapKey`: Secret and ConfigMap keys become file names.
fn config_key_errors(key: &str) -> Vec<String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    let mut errors = Rule {
        max: 253,
        message: "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
        regex: "[-._a-zA-Z0-9]+",
        examples: &["key.name", "KEY_NAME", "key-name"],
    }
    .errors(key, !key.is_empty() && key.chars().all(ok));
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
pub(super) fn secret_causes(secret: &Value) -> Vec<String> {
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

pub(super) fn config_map_causes(map: &Value) -> Vec<String> {
    let mut causes = key_causes("data", &map["data"]);
    causes.extend(key_causes("binaryData", &map["binaryData"]));
    causes
}
