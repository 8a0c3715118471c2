//! What a container runs as: its command (a mapped image's binary when it
//! has none), environment and mounts, assembled as the kubelet does before
//! the runtime starts it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::volumes::HostVolume;
use super::{env, runtime, Shared};

/// Where a mapped image's binary appears in its containers.
const MAPPED_BIN: &str = "/volmig/bin";

/// What to run for container `spec` of `pod`: argv, env, mounts, with its
/// scratch directory under `pod_dir`. Err: (waiting reason, message).
pub fn build(
    shared: &Shared,
    pod_dir: &Path,
    pod: &Value,
    spec: &Value,
    volumes: &HashMap<String, HostVolume>,
    log_path: PathBuf,
) -> Result<runtime::Launch, (&'static str, String)> {
    let image = spec["image"].as_str().unwrap_or_default();
    let name = spec["name"].as_str().unwrap_or_default();
    let mapping = shared.images.iter().find(|m| m.matches(image));
    let mut mounts = Vec::new();
    let mut entrypoint = Vec::new();
    if let Some(m) = mapping {
        let file = m
            .binary
            .file_name()
            .map(|f| f.to_string_lossy().to_string())
            .unwrap_or_default();
        let in_container = format!("{MAPPED_BIN}/{file}");
        mounts.push(runtime::Mount {
            host_path: m.binary.clone(),
            container_path: PathBuf::from(&in_container),
            read_only: true,
        });
        entrypoint.push(in_container);
    }
    let env = env::build(&shared.store, pod, spec, mapping.map(|_| MAPPED_BIN))
        .map_err(|e| ("CreateContainerConfigError", e))?;
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| runtime::expand_vars(s.as_str().unwrap_or_default(), &env))
            .collect()
    };
    let command = strings(&spec["command"]);
    let args = strings(&spec["args"]);
    let mut argv = if command.is_empty() {
        entrypoint
    } else {
        command
    };
    if argv.is_empty() {
        return Err((
            "CreateContainerError",
            format!("kube-sandbox runs containers as host commands: container {name:?} (image {image:?}) has no command"),
        ));
    }
    argv.extend(args);
    for m in spec["volumeMounts"].as_array().into_iter().flatten() {
        mounts.push(mount(m, volumes)?);
    }
    let scratch_dir = pod_dir.join("containers").join(name);
    std::fs::create_dir_all(&scratch_dir).map_err(|e| ("CreateContainerError", e.to_string()))?;
    if let Some(parent) = log_path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| ("CreateContainerError", e.to_string()))?;
    }
    Ok(runtime::Launch {
        argv,
        env,
        working_dir: spec["workingDir"].as_str().map(PathBuf::from),
        mounts,
        scratch_dir,
        log_path,
    })
}

/// A container's `volumeMounts` entry on the host: the volume's directory,
/// or the `subPath` in it (created when missing).
fn mount(
    m: &Value,
    volumes: &HashMap<String, HostVolume>,
) -> Result<runtime::Mount, (&'static str, String)> {
    let config_error = |message: String| ("CreateContainerConfigError", message);
    let volume_name = m["name"].as_str().unwrap_or_default();
    let volume = volumes
        .get(volume_name)
        .ok_or_else(|| config_error(format!("volume {volume_name:?} not found")))?;
    let mut host_path = volume.path.clone();
    if let Some(sub) = m["subPath"].as_str().filter(|s| !s.is_empty()) {
        if sub.split('/').any(|c| c == "..") || sub.starts_with('/') {
            return Err(config_error(format!("invalid subPath {sub:?}")));
        }
        host_path = host_path.join(sub);
        std::fs::create_dir_all(&host_path)
            .map_err(|e| config_error(format!("subPath {sub:?}: {e}")))?;
    }
    Ok(runtime::Mount {
        host_path,
        container_path: PathBuf::from(m["mountPath"].as_str().unwrap_or_default()),
        read_only: volume.read_only || m["readOnly"] == json!(true),
    })
}
