//! Pod volumes on the node: a claim's volume directory, a Secret's or
//! ConfigMap's keys written as files, a projected volume
//! ([`super::projected`]), an emptyDir, a hostPath. The result
//! is a host directory per volume name, which container mounts bind.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use base64::prelude::{Engine as _, BASE64_STANDARD};
use k8s_openapi::api::core::v1::PersistentVolume;
use serde_json::Value;

use super::ownership::Managed;
use crate::auth::Authority;
use crate::controllers::placement;
use crate::registry;
use crate::store::Store;

/// Why a pod cannot start yet: an event to record and the waiting reason.
#[derive(Debug, Clone, PartialEq)]
pub struct NotReady {
    pub reason: &'static str,
    pub message: String,
}

/// A volume on the host, whether its source makes it read-only, and how
/// its ownership follows the pod's `fsGroup`.
#[derive(Debug, Clone)]
pub struct HostVolume {
    pub path: PathBuf,
    pub read_only: bool,
    pub managed: Managed,
    /// The claim it comes from, if it does.
    pub claim: Option<String>,
    /// A Block volume's image file; `path` is then what containers bind
    /// at a `devicePath` (see [`super::devices`]) once it is mapped.
    pub block: Option<PathBuf>,
}

impl HostVolume {
    fn new(path: PathBuf, read_only: bool, managed: Managed) -> HostVolume {
        HostVolume {
            path,
            read_only,
            managed,
            claim: None,
            block: None,
        }
    }
}

/// Resolves every volume of `pod`, materializing Secrets, ConfigMaps and
/// emptyDirs under `pod_dir/volumes`; the CSI driver's volumes are under
/// `data_dir/volumes`.
pub fn prepare(
    store: &Store,
    authority: &Authority,
    pod: &Value,
    node: &Value,
    (data_dir, pod_dir): (&Path, &Path),
) -> Result<HashMap<String, HostVolume>, NotReady> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let (mounted, mapped) = (used_in(pod, "volumeMounts"), used_in(pod, "volumeDevices"));
    let mut mismatched = Vec::new();
    let mut out = HashMap::new();
    for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let name = volume["name"].as_str().unwrap_or_default();
        let own_dir = pod_dir.join("volumes").join(name);
        let hv = if let Some(claim) = volume["persistentVolumeClaim"].as_object() {
            let claim_name = claim
                .get("claimName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let (path, managed, block) = claim_path(store, ns, claim_name, node, data_dir)?;
            let read_only = claim.get("readOnly") == Some(&Value::Bool(true));
            // The desired-state populator's checks, made for each volume
            // before any is set up.
            let (mode, wrong_list) = match block {
                true => ("Block", mounted.contains(&name).then_some("volumeMounts")),
                false => (
                    "Filesystem",
                    mapped.contains(&name).then_some("volumeDevices"),
                ),
            };
            if let Some(list) = wrong_list {
                mismatched.push((
                    name.to_string(),
                    format!("volume {name} has volumeMode {mode}, but is specified in {list}"),
                ));
                continue;
            }
            HostVolume {
                claim: Some(claim_name.to_string()),
                block: block.then(|| path.clone()),
                ..HostVolume::new(path, read_only, if block { Managed::No } else { managed })
            }
        } else if let Some((plural, source, object)) = keys_source(volume) {
            write_keys(store, plural, ns, object, source, &own_dir, name)?;
            HostVolume::new(own_dir, true, Managed::Always)
        } else if volume["projected"].is_object() {
            let node_name = node["metadata"]["name"].as_str().unwrap_or_default();
            let projected = &volume["projected"];
            super::projected::write(store, authority, pod, node_name, projected, &own_dir, name)?;
            HostVolume::new(own_dir, true, Managed::Always)
        } else if volume["emptyDir"].is_object() {
            // Anyone may write there, as the emptyDir plugin makes it.
            make_dir(&own_dir, name)?;
            std::fs::set_permissions(&own_dir, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| mount_failed(name, e))?;
            HostVolume::new(own_dir, false, Managed::Always)
        } else if let Some(path) = volume["hostPath"]["path"].as_str() {
            let path = PathBuf::from(path);
            if volume["hostPath"]["type"] == "DirectoryOrCreate" {
                make_dir(&path, name)?;
            }
            HostVolume::new(path, false, Managed::No)
        } else {
            return Err(NotReady {
                reason: "FailedMount",
                message: format!("volume {name:?}: only persistentVolumeClaim, secret, configMap, projected, emptyDir and hostPath volumes are supported by kube-sandbox"),
            });
        };
        out.insert(name.to_string(), hv);
    }
    if !mismatched.is_empty() {
        return Err(unprocessed(&mismatched));
    }
    Ok(out)
}

/// The names of the volumes the pod's containers (init containers too)
/// list in `field` (`volumeMounts` or `volumeDevices`).
pub(super) fn used_in<'a>(pod: &'a Value, field: &str) -> Vec<&'a str> {
    ["initContainers", "containers"]
        .iter()
        .flat_map(|list| pod["spec"][*list].as_array().into_iter().flatten())
        .flat_map(|c| c[field].as_array().into_iter().flatten())
        .filter_map(|m| m["name"].as_str())
        .collect()
}

/// The kubelet's FailedMount for volumes its populator could not process:
/// `WaitForAttachAndMount`'s error, the populator's errors joined.
fn unprocessed(failed: &[(String, String)]) -> NotReady {
    let mut names: Vec<&str> = failed.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    let list = names.join(" ");
    let errors: Vec<&str> = failed.iter().map(|(_, e)| e.as_str()).collect();
    NotReady {
        reason: "FailedMount",
        message: format!(
            "Unable to attach or mount volumes: unmounted volumes=[{list}], unattached volumes=[], failed to process volumes=[{list}]: {}",
            errors.join("; ")
        ),
    }
}

/// A Secret or ConfigMap volume's source: the resource, the source, and
/// the object's name.
fn keys_source(volume: &Value) -> Option<(&'static str, &Value, &str)> {
    let (plural, source, name_field) = if volume["secret"].is_object() {
        ("secrets", &volume["secret"], "secretName")
    } else if volume["configMap"].is_object() {
        ("configmaps", &volume["configMap"], "name")
    } else {
        return None;
    };
    Some((
        plural,
        source,
        source[name_field].as_str().unwrap_or_default(),
    ))
}

pub(super) fn mount_failed(volume: &str, why: impl std::fmt::Display) -> NotReady {
    NotReady {
        reason: "FailedMount",
        message: format!("MountVolume.SetUp failed for volume \"{volume}\" : {why}"),
    }
}

pub(super) fn make_dir(dir: &Path, volume: &str) -> Result<(), NotReady> {
    std::fs::create_dir_all(dir).map_err(|e| mount_failed(volume, e))
}

/// The directory of the volume a claim is bound to, when this node can
/// mount it: the claim is not being deleted and the volume's node affinity
/// admits the node (all nodes share one filesystem here, so this check is
/// what keeps a node-local volume on its node). With how its plugin
/// manages ownership: a `local` volume by policy, a `hostPath` one not, a
/// volume of the sandbox's CSI driver by policy (its CSIDriver would say
/// `fsGroupPolicy: File`, as csi-driver-host-path's does).
fn claim_path(
    store: &Store,
    ns: &str,
    claim_name: &str,
    node: &Value,
    data_dir: &Path,
) -> Result<(PathBuf, Managed, bool), NotReady> {
    let waiting = |message: String| NotReady {
        reason: "FailedMount",
        message,
    };
    let claim = store
        .get(registry::get("persistentvolumeclaims"), ns, claim_name)
        .map_err(|_| waiting(format!("persistentvolumeclaim \"{claim_name}\" not found")))?;
    if !claim["metadata"]["deletionTimestamp"].is_null() {
        return Err(waiting(format!(
            "error processing PVC {ns}/{claim_name}: PVC is being deleted"
        )));
    }
    let pv_name = claim["spec"]["volumeName"].as_str().unwrap_or_default();
    if claim["status"]["phase"] != "Bound" || pv_name.is_empty() {
        return Err(waiting(format!(
            "persistentvolumeclaim \"{claim_name}\" is not bound"
        )));
    }
    let pv = store
        .get(registry::get("persistentvolumes"), "", pv_name)
        .map_err(|_| waiting(format!("persistentvolume \"{pv_name}\" not found")))?;
    let typed: Option<PersistentVolume> = serde_json::from_value(pv.clone()).ok();
    let labels: BTreeMap<String, String> =
        serde_json::from_value(node["metadata"]["labels"].clone()).unwrap_or_default();
    if typed.is_some_and(|pv| !placement::volume_admits(&pv, &labels)) {
        return Err(waiting(format!(
            "MountVolume.NodeAffinity check failed for volume \"{pv_name}\" : no matching NodeSelectorTerms"
        )));
    }
    let block = pv["spec"]["volumeMode"] == "Block";
    if let Some(csi) = pv["spec"]["csi"].as_object() {
        let (dir, managed) = csi_path(pv_name, csi, data_dir)?;
        return Ok(match block {
            true => (dir.join(super::devices::IMAGE), managed, true),
            false => (dir, managed, false),
        });
    }
    let (path, managed) = match (
        pv["spec"]["hostPath"]["path"].as_str(),
        pv["spec"]["local"]["path"].as_str(),
    ) {
        (Some(path), _) => (path, Managed::No),
        (None, Some(path)) => (path, Managed::ByPolicy),
        (None, None) => {
            return Err(waiting(format!(
                "persistentvolume \"{pv_name}\" has no hostPath, local or csi source"
            )))
        }
    };
    Ok((PathBuf::from(path), managed, block))
}

/// A CSI volume's directory: the sandbox's driver is the only one
/// registered on its nodes, and keeps a volume under its handle.
fn csi_path(
    pv_name: &str,
    csi: &serde_json::Map<String, Value>,
    data_dir: &Path,
) -> Result<(PathBuf, Managed), NotReady> {
    let driver = csi
        .get("driver")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let handle = csi
        .get("volumeHandle")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if driver != crate::controllers::volumes::CSI {
        return Err(NotReady {
            reason: "FailedMount",
            message: format!("MountVolume.MountDevice failed for volume \"{pv_name}\" : kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: driver name {driver} not found in the list of registered CSI drivers"),
        });
    }
    let dir = data_dir.join("volumes").join(handle);
    if handle.is_empty() || handle.contains('/') || !dir.is_dir() {
        return Err(NotReady {
            reason: "FailedMount",
            message: format!("MountVolume.SetUp failed for volume \"{pv_name}\" : rpc error: code = NotFound desc = volume id {handle} does not exist in the volumes list"),
        });
    }
    Ok((dir, Managed::ByPolicy))
}

/// Writes a Secret's or ConfigMap's keys (or the listed `items`) as files.
pub(super) fn write_keys(
    store: &Store,
    plural: &str,
    ns: &str,
    name: &str,
    source: &Value,
    dir: &Path,
    volume: &str,
) -> Result<(), NotReady> {
    let res = registry::get(plural);
    let obj = match store.get(res, ns, name) {
        Ok(obj) => obj,
        Err(_) if source["optional"] == Value::Bool(true) => return make_dir(dir, volume),
        Err(_) => {
            let kind = &res.singular;
            return Err(mount_failed(volume, format!("{kind} \"{name}\" not found")));
        }
    };
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for (field, encoded) in [("data", plural == "secrets"), ("binaryData", true)] {
        for (k, v) in obj[field].as_object().into_iter().flatten() {
            let text = v.as_str().unwrap_or_default();
            let bytes = if encoded {
                BASE64_STANDARD
                    .decode(text)
                    .map_err(|e| mount_failed(volume, format!("key {k}: {e}")))?
            } else {
                text.as_bytes().to_vec()
            };
            files.push((k.clone(), bytes));
        }
    }
    let default_mode = source["defaultMode"].as_u64().unwrap_or(0o644) as u32;
    let items = source["items"].as_array();
    make_dir(dir, volume)?;
    for (key, bytes) in &files {
        let (path, mode) = match items {
            Some(items) => match items.iter().find(|i| i["key"] == *key.as_str()) {
                Some(item) => (
                    item["path"].as_str().unwrap_or(key).to_string(),
                    item["mode"].as_u64().map_or(default_mode, |m| m as u32),
                ),
                None => continue,
            },
            None => (key.clone(), default_mode),
        };
        write_file(dir, &path, bytes, mode, volume)?;
    }
    Ok(())
}

/// Writes `bytes` to `path` under the volume's directory `dir` with
/// `mode`, making the directories on the way. A path with a `..` or an
/// empty component (a leading '/' among them) is refused.
pub(super) fn write_file(
    dir: &Path,
    path: &str,
    bytes: &[u8],
    mode: u32,
    volume: &str,
) -> Result<(), NotReady> {
    if path.split('/').any(|c| c == ".." || c.is_empty()) {
        return Err(mount_failed(volume, format!("invalid path {path:?}")));
    }
    let file = dir.join(path);
    if let Some(parent) = file.parent() {
        make_dir(parent, volume)?;
    }
    std::fs::write(&file, bytes).map_err(|e| mount_failed(volume, e))?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode))
        .map_err(|e| mount_failed(volume, e))
}
