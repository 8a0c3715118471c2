//! Projected volumes, as the kubelet's projected volume plugin writes them
//! (pkg/volume/projected): one directory holding each source's files —
//! `serviceAccountToken` (a token for the pod's ServiceAccount, bound to
//! the pod, as the kubelet gets one from the TokenRequest API), `configMap`
//! and `secret` keys, and `downwardAPI` fields — with the volume's
//! `defaultMode` unless an item says otherwise. This is what the injected
//! `kube-api-access-*` volume needs. Written once at start, like the other
//! volumes here: the token is never refreshed (it lives a year).

use std::path::Path;

use serde_json::{json, Value};

use super::volumes::{make_dir, mount_failed, write_file, write_keys, NotReady};
use crate::auth::{Authority, Subject, Validity};
use crate::registry;
use crate::store::Store;

/// Writes the projected volume `volume` of `pod` (on `node`) into `dir`.
pub fn write(
    store: &Store,
    authority: &Authority,
    pod: &Value,
    node: &str,
    projected: &Value,
    dir: &Path,
    volume: &str,
) -> Result<(), NotReady> {
    let default_mode = projected["defaultMode"].as_u64().unwrap_or(0o644);
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    make_dir(dir, volume)?;
    for source in projected["sources"].as_array().into_iter().flatten() {
        if let Some(token) = source["serviceAccountToken"].as_object() {
            let path = token.get("path").and_then(Value::as_str).unwrap_or("token");
            let text = service_account_token(store, authority, pod, node)
                .map_err(|e| mount_failed(volume, e))?;
            // With an fsGroup or a user every container runs as, the token
            // is 0600 (the fsGroup then adds group read) and that user's.
            let fs_user = fs_user(pod);
            let mode = match (fs_user, &pod["spec"]["securityContext"]["fsGroup"]) {
                (None, Value::Null) => file_mode(default_mode),
                _ => 0o600,
            };
            write_file(dir, path, text.as_bytes(), mode, volume)?;
            if let Some(uid) = fs_user {
                std::os::unix::fs::lchown(dir.join(path), Some(uid), None)
                    .map_err(|e| mount_failed(volume, e))?;
            }
        } else if let Some((plural, object)) = keyed(source) {
            let mut keys = object.clone();
            keys["defaultMode"] = json!(default_mode);
            let name = object["name"].as_str().unwrap_or_default();
            write_keys(store, plural, ns, name, &keys, dir, volume)?;
        } else if source["downwardAPI"].is_object() {
            for item in source["downwardAPI"]["items"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let path = item["path"].as_str().unwrap_or_default();
                let field = item["fieldRef"]["fieldPath"].as_str().unwrap_or_default();
                let value = super::env::field(pod, field).map_err(|e| mount_failed(volume, e))?;
                let mode = item["mode"].as_u64().unwrap_or(default_mode);
                write_file(dir, path, value.as_bytes(), file_mode(mode), volume)?;
            }
        } else {
            return Err(mount_failed(
                volume,
                "kube-sandbox projects serviceAccountToken, configMap, secret and downwardAPI sources only",
            ));
        }
    }
    Ok(())
}

/// A `configMap` or `secret` projection: the resource and the source.
fn keyed(source: &Value) -> Option<(&'static str, &Value)> {
    if source["configMap"].is_object() {
        Some(("configmaps", &source["configMap"]))
    } else if source["secret"].is_object() {
        Some(("secrets", &source["secret"]))
    } else {
        None
    }
}

/// A token bound to the pod, for its ServiceAccount.
fn service_account_token(
    store: &Store,
    authority: &Authority,
    pod: &Value,
    node: &str,
) -> Result<String, String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or("default");
    let account = store
        .get(registry::get("serviceaccounts"), ns, name)
        .map_err(|_| format!("failed to fetch token: serviceaccounts \"{name}\" not found"))?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let subject = Subject {
        namespace: ns.to_string(),
        service_account: name.to_string(),
        service_account_uid: text(&account["metadata"]["uid"]),
        pod: text(&pod["metadata"]["name"]),
        pod_uid: text(&pod["metadata"]["uid"]),
        node: node.to_string(),
    };
    authority
        .issue(&subject, &Validity::projected())
        .map(|(token, _)| token)
        .map_err(|e| format!("failed to fetch token: {e}"))
}

/// `FsUserFrom`: the `runAsUser` every container and init container runs
/// with (its own, else the pod's), when they all have the same one.
fn fs_user(pod: &Value) -> Option<u32> {
    let spec = &pod["spec"];
    let mut users = ["initContainers", "containers"]
        .into_iter()
        .flat_map(|list| spec[list].as_array().into_iter().flatten())
        .map(|c| {
            c["securityContext"]["runAsUser"]
                .as_u64()
                .or(spec["securityContext"]["runAsUser"].as_u64())
        });
    let first = users.next()??;
    users
        .all(|u| u == Some(first))
        .then(|| u32::try_from(first).ok())
        .flatten()
}

/// A file's permission bits from a (default) mode; the rest left out.
fn file_mode(mode: u64) -> u32 {
    u32::try_from(mode & 0o777).unwrap_or(0o644)
}
