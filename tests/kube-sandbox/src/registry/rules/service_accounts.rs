//! The ServiceAccount admission plugin on pod create, as
//! plugin/pkg/admission/serviceaccount/admission.go does it: the pod runs
//! as `spec.serviceAccountName` (`default` when empty), which must exist;
//! unless `automountServiceAccountToken` is false on the pod (or, when the
//! pod does not say, on the ServiceAccount), a projected volume
//! `kube-api-access-<5 chars>` (`TokenVolumeSource`: the token, the
//! `kube-root-ca.crt` ConfigMap's `ca.crt` and the namespace, mode 0644) is
//! added and mounted read-only at [`TOKEN_MOUNT_PATH`] in every container
//! and init container that has no mount there already.

use serde_json::{json, Value};

use crate::controllers::root_ca;
use crate::status::ApiError;

/// `DefaultAPITokenMountPath`.
const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// `ServiceAccountVolumeName`: the prefix of the injected volume's name.
const VOLUME_PREFIX: &str = "kube-api-access-";

/// Admits a new pod; `service_account` looks a ServiceAccount of the pod's
/// namespace up by name.
pub fn admit_pod(
    pod: &mut Value,
    service_account: impl Fn(&str) -> Option<Value>,
) -> Result<(), ApiError> {
    let ns = pod["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let name = match pod["spec"]["serviceAccountName"].as_str() {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => "default".to_string(),
    };
    pod["spec"]["serviceAccountName"] = json!(name);
    // The deprecated alias, as the API server's conversion fills it.
    pod["spec"]["serviceAccount"] = json!(name);
    let Some(account) = service_account(&name) else {
        let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
        return Err(ApiError::Forbidden(format!(
            "pods \"{pod_name}\" is forbidden: error looking up service account {ns}/{name}: serviceaccount \"{name}\" not found"
        )));
    };
    if should_automount(&account, pod) {
        mount_token(pod);
    }
    Ok(())
}

/// `shouldAutomount`: the pod's setting, else the ServiceAccount's, else
/// true.
fn should_automount(account: &Value, pod: &Value) -> bool {
    [
        &pod["spec"]["automountServiceAccountToken"],
        &account["automountServiceAccountToken"],
    ]
    .into_iter()
    .find_map(Value::as_bool)
    .unwrap_or(true)
}

/// `mountServiceAccountToken`.
fn mount_token(pod: &mut Value) {
    let existing = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .find(|n| n.starts_with(VOLUME_PREFIX))
        .map(String::from);
    let volume = existing
        .clone()
        .unwrap_or_else(|| format!("{VOLUME_PREFIX}{}", crate::store::generate_suffix()));
    let mount = json!({"name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        for container in pod["spec"][list].as_array_mut().into_iter().flatten() {
            let mounted = container["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["mountPath"] == TOKEN_MOUNT_PATH);
            if mounted {
                continue;
            }
            if !container["volumeMounts"].is_array() {
                container["volumeMounts"] = json!([]);
            }
            if let Some(mounts) = container["volumeMounts"].as_array_mut() {
                mounts.push(mount.clone());
                needed = true;
            }
        }
    }
    if existing.is_none() && needed {
        if !pod["spec"]["volumes"].is_array() {
            pod["spec"]["volumes"] = json!([]);
        }
        if let Some(volumes) = pod["spec"]["volumes"].as_array_mut() {
            volumes.push(json!({"name": volume, "projected": token_volume_source()}));
        }
    }
}

/// `TokenVolumeSource`.
fn token_volume_source() -> Value {
    json!({
        "defaultMode": 0o644,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": crate::auth::token::REQUESTED_SECONDS, "path": "token"}},
            {"configMap": {"name": root_ca::CONFIG_MAP, "items": [{"key": root_ca::KEY, "path": root_ca::KEY}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec})
    }

    fn account(automount: Option<bool>) -> impl Fn(&str) -> Option<Value> {
        move |name| {
            (name == "default" || name == "driver").then(|| match automount {
                Some(a) => json!({"metadata": {"name": name}, "automountServiceAccountToken": a}),
                None => json!({"metadata": {"name": name}}),
            })
        }
    }

    #[test]
    fn every_container_mounts_one_injected_token_volume() {
        let mut p = pod(json!({
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "a"}, {"name": "b", "volumeMounts": [{"name": "x", "mountPath": "/x"}]}],
        }));
        admit_pod(&mut p, account(None)).expect("admitted");
        assert_eq!(p["spec"]["serviceAccountName"], "default");
        let volumes = p["spec"]["volumes"].as_array().expect("volumes");
        assert_eq!(volumes.len(), 1);
        let name = volumes[0]["name"].as_str().expect("name");
        assert!(name.starts_with(VOLUME_PREFIX) && name.len() == VOLUME_PREFIX.len() + 5);
        assert_eq!(volumes[0]["projected"], token_volume_source());
        for c in [&p["spec"]["initContainers"][0], &p["spec"]["containers"][0]] {
            assert_eq!(
                c["volumeMounts"],
                json!([{"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH}])
            );
        }
        assert_eq!(p["spec"]["containers"][1]["volumeMounts"][1]["name"], name);
    }

    #[test]
    fn automount_false_on_the_pod_or_its_account_mounts_nothing() {
        let mut p = pod(json!({"serviceAccountName": "driver", "containers": [{"name": "a"}]}));
        admit_pod(&mut p, account(Some(false))).expect("admitted");
        assert!(p["spec"]["volumes"].is_null());
        // The pod's own setting wins over its account's.
        let mut p =
            pod(json!({"automountServiceAccountToken": true, "containers": [{"name": "a"}]}));
        admit_pod(&mut p, account(Some(false))).expect("admitted");
        assert_eq!(p["spec"]["volumes"].as_array().map(Vec::len), Some(1));
        let mut p =
            pod(json!({"automountServiceAccountToken": false, "containers": [{"name": "a"}]}));
        admit_pod(&mut p, account(None)).expect("admitted");
        assert!(p["spec"]["containers"][0]["volumeMounts"].is_null());
    }

    #[test]
    fn an_own_mount_at_the_token_path_is_kept_and_a_missing_account_is_forbidden() {
        let own = json!([{"name": "mine", "mountPath": TOKEN_MOUNT_PATH}]);
        let mut p = pod(json!({"volumes": [{"name": "mine", "emptyDir": {}}],
            "containers": [{"name": "a", "volumeMounts": own}]}));
        admit_pod(&mut p, account(None)).expect("admitted");
        assert_eq!(p["spec"]["containers"][0]["volumeMounts"], own);
        assert_eq!(p["spec"]["volumes"].as_array().map(Vec::len), Some(1));
        let mut p = pod(json!({"serviceAccountName": "ghost", "containers": [{"name": "a"}]}));
        let err = admit_pod(&mut p, account(None)).expect_err("forbidden");
        assert_eq!(err.code(), 403);
        assert!(
            err.to_string()
                .contains("error looking up service account ns/ghost"),
            "{err}"
        );
    }
}
