//! A container's environment, as the kubelet and the runtime build it: the
//! runtime's default `PATH`, the image's `Env` (the `base`), `HOSTNAME`,
//! then the kubelet's: the Services' variables ([`super::service_env`]),
//! `envFrom` sources, then `env` entries in order
//! (values expanded with `$(VAR)` from the ones before), with `fieldRef`,
//! `secretKeyRef` and `configMapKeyRef`. A later definition wins.

use base64::prelude::{Engine as _, BASE64_STANDARD};
use serde_json::Value;

use super::runtime::{expand_vars, DEFAULT_PATH};
use crate::registry;
use crate::store::Store;

/// The environment, or the CreateContainerConfigError message.
pub fn build(
    store: &Store,
    pod: &Value,
    container: &Value,
    base: &[(String, String)],
) -> Result<Vec<(String, String)>, String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let mut env: Vec<(String, String)> = Vec::new();
    set(&mut env, "PATH", DEFAULT_PATH.to_string());
    for (name, value) in base {
        set(&mut env, name, value.clone());
    }
    set(
        &mut env,
        "HOSTNAME",
        pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    );
    for (name, value) in super::service_env::vars(store, pod) {
        set(&mut env, &name, value);
    }
    for source in container["envFrom"].as_array().into_iter().flatten() {
        let prefix = source["prefix"].as_str().unwrap_or_default();
        let (plural, reference) = if source["secretRef"].is_object() {
            ("secrets", &source["secretRef"])
        } else {
            ("configmaps", &source["configMapRef"])
        };
        let name = reference["name"].as_str().unwrap_or_default();
        match data_of(store, plural, ns, name) {
            Ok(data) => {
                for (k, v) in data {
                    set(&mut env, &format!("{prefix}{k}"), v);
                }
            }
            Err(e) if reference["optional"] == Value::Bool(true) => drop(e),
            Err(e) => return Err(e),
        }
    }
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().unwrap_or_default();
        let value = match (&var["value"], &var["valueFrom"]) {
            (Value::String(v), _) => expand_vars(v, &env),
            (_, from) if from.is_object() => match value_from(store, pod, from) {
                Ok(Some(v)) => v,
                Ok(None) => continue,
                Err(e) => return Err(e),
            },
            _ => String::new(),
        };
        set(&mut env, name, value);
    }
    Ok(env)
}

fn set(env: &mut Vec<(String, String)>, key: &str, value: String) {
    env.retain(|(k, _)| k != key);
    env.push((key.to_string(), value));
}

/// A Secret's (decoded) or ConfigMap's data.
fn data_of(
    store: &Store,
    plural: &str,
    ns: &str,
    name: &str,
) -> Result<Vec<(String, String)>, String> {
    let res = registry::get(plural);
    let obj = store
        .get(res, ns, name)
        .map_err(|_| format!("{} \"{name}\" not found", res.singular))?;
    let mut out = Vec::new();
    for (k, v) in obj["data"].as_object().into_iter().flatten() {
        let text = v.as_str().unwrap_or_default();
        let value = if plural == "secrets" {
            let bytes = BASE64_STANDARD
                .decode(text)
                .map_err(|e| format!("secret \"{name}\" key {k:?} is not base64: {e}"))?;
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            text.to_string()
        };
        out.push((k.clone(), value));
    }
    Ok(out)
}

fn value_from(store: &Store, pod: &Value, from: &Value) -> Result<Option<String>, String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
        return field(pod, path).map(Some);
    }
    for (key, plural) in [
        ("secretKeyRef", "secrets"),
        ("configMapKeyRef", "configmaps"),
    ] {
        let r = &from[key];
        if !r.is_object() {
            continue;
        }
        let name = r["name"].as_str().unwrap_or_default();
        let wanted = r["key"].as_str().unwrap_or_default();
        let optional = r["optional"] == Value::Bool(true);
        let found = data_of(store, plural, ns, name).and_then(|data| {
            data.into_iter()
                .find(|(k, _)| k == wanted)
                .map(|(_, v)| v)
                .ok_or_else(|| {
                    let kind = &registry::get(plural).singular;
                    format!("couldn't find key {wanted} in {kind} {ns}/{name}")
                })
        });
        return match found {
            Ok(v) => Ok(Some(v)),
            Err(_) if optional => Ok(None),
            Err(e) => Err(e),
        };
    }
    Err("valueFrom source not supported by kube-sandbox (fieldRef, secretKeyRef and configMapKeyRef are)".into())
}

/// The downward API's fields.
pub(super) fn field(pod: &Value, path: &str) -> Result<String, String> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let keyed = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("['"))
            .and_then(|rest| rest.strip_suffix("']"))
    };
    Ok(match path {
        "metadata.name" => text(&pod["metadata"]["name"]),
        "metadata.namespace" => text(&pod["metadata"]["namespace"]),
        "metadata.uid" => text(&pod["metadata"]["uid"]),
        "spec.nodeName" => text(&pod["spec"]["nodeName"]),
        "spec.serviceAccountName" => text(&pod["spec"]["serviceAccountName"]),
        "status.podIP" => text(&pod["status"]["podIP"]),
        "status.hostIP" => text(&pod["status"]["hostIP"]),
        "status.podIPs" => text(&pod["status"]["podIP"]),
        _ => {
            if let Some(k) = keyed("metadata.labels") {
                text(&pod["metadata"]["labels"][k])
            } else if let Some(k) = keyed("metadata.annotations") {
                text(&pod["metadata"]["annotations"][k])
            } else {
                return Err(format!("unsupported fieldPath: {path}"));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn downward_fields() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "db"}}, "status": {"podIP": "127.244.0.1"}});
        assert_eq!(field(&pod, "status.podIP").as_deref(), Ok("127.244.0.1"));
        assert_eq!(field(&pod, "metadata.labels['app']").as_deref(), Ok("db"));
        assert!(field(&pod, "spec.bogus").is_err());
    }

    #[test]
    fn env_values_expand_earlier_ones_and_secrets_decode() {
        let store = Store::new(16);
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}});
        store
            .create(registry::get("namespaces"), "", ns)
            .expect("namespace");
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"token": "c2VjcmV0"}});
        store
            .create(registry::get("secrets"), "ns", secret)
            .expect("secret");
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "status": {"podIP": "127.244.0.9"}});
        let container = json!({"env": [
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "LISTEN", "value": "$(IP):7000"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
            {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": true}}},
        ]});
        let env = build(&store, &pod, &container, &[]).expect("env");
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("LISTEN"), Some("127.244.0.9:7000"));
        assert_eq!(get("TOKEN"), Some("secret"));
        assert_eq!(get("GONE"), None);
        let missing = json!({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]});
        assert_eq!(
            build(&store, &pod, &missing, &[]),
            Err("secret \"nope\" not found".to_string())
        );
    }
}
