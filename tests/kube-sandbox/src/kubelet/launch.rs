//! What a container runs as: its command, environment and mounts,
//! assembled as the kubelet and the runtime do before the runtime starts
//! it, from the container's spec and its image ([`Files`]).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};

use super::image::Image;
use super::volumes::HostVolume;
use super::{env, runtime, security, Shared};

/// Where a mapped image's binary appears in its containers.
const MAPPED_BIN: &str = "/volmig/bin";

/// Where a container's files come from, its image pulled.
#[derive(Debug, Clone)]
pub enum Files {
    /// No mapping: a host command on a view of the host's `/`.
    Host,
    /// A host binary at `/volmig/bin/<name>`, on that view of the host.
    Binary(PathBuf),
    /// An unpacked OCI image, the container's root.
    Image(Arc<Image>),
}

/// What to run for container `spec` of `pod`: argv, env, mounts, with its
/// scratch directory under `pod_dir`. Err: (waiting reason, message).
pub fn build(
    shared: &Shared,
    pod_dir: &Path,
    pod: &Value,
    spec: &Value,
    files: &Files,
    volumes: &HashMap<String, HostVolume>,
    log_path: PathBuf,
) -> Result<runtime::Launch, (&'static str, String)> {
    let image = spec["image"].as_str().unwrap_or_default();
    let name = spec["name"].as_str().unwrap_or_default();
    let scratch_dir = pod_dir.join("containers").join(name);
    let create_error = |e: std::io::Error| ("CreateContainerError", e.to_string());
    std::fs::create_dir_all(&scratch_dir).map_err(create_error)?;
    let mut mounts = Vec::new();
    let (mut entrypoint, mut cmd, mut base_env, mut image_root, mut working_dir) =
        (None, None, Vec::new(), None, None);
    match files {
        Files::Host => {}
        Files::Binary(binary) => {
            let file = binary
                .file_name()
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_default();
            let in_container = format!("{MAPPED_BIN}/{file}");
            mounts.push(runtime::Mount {
                host_path: binary.clone(),
                container_path: PathBuf::from(&in_container),
                read_only: true,
            });
            entrypoint = Some(vec![in_container]);
            let path = format!("{MAPPED_BIN}:{}", runtime::DEFAULT_PATH);
            base_env.push(("PATH".to_string(), path));
        }
        Files::Image(pulled) => {
            let config = &pulled.config;
            (entrypoint, cmd) = (config.entrypoint.clone(), config.cmd.clone());
            base_env.clone_from(&config.env);
            image_root = Some(pulled.root.clone());
            working_dir = config.working_dir.as_ref().map(PathBuf::from);
            mounts.extend(injected(pod_dir, &scratch_dir, pod, spec).map_err(create_error)?);
        }
    }
    let env = env::build(&shared.store, pod, spec, &base_env)
        .map_err(|e| ("CreateContainerConfigError", e))?;
    let (image_user, root) = match files {
        Files::Image(pulled) => (pulled.config.user.as_deref(), Some(pulled.root.as_path())),
        Files::Host | Files::Binary(_) => (None, None),
    };
    let identity = security::identity(pod, spec, image_user, root)?;
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| runtime::expand_vars(s.as_str().unwrap_or_default(), &env))
            .collect()
    };
    let (command, args) = (strings(&spec["command"]), strings(&spec["args"]));
    // An unmapped image is taken as one without Entrypoint or Cmd (as
    // busybox has no Entrypoint): `args` alone run too (`kubectl run X
    // --image=busybox -- sh -c ...`).
    if matches!(files, Files::Host) && command.is_empty() && args.is_empty() {
        return Err((
            "CreateContainerError",
            format!("kube-sandbox runs containers as host commands: container {name:?} (image {image:?}) has no command"),
        ));
    }
    let argv = process_args(command, args, entrypoint, cmd);
    if argv.is_empty() {
        return Err((
            "CreateContainerError",
            format!("container {name:?} (image {image:?}): no command specified"),
        ));
    }
    for m in spec["volumeMounts"].as_array().into_iter().flatten() {
        mounts.push(mount(m, volumes)?);
    }
    let mut watched = Vec::new();
    for d in spec["volumeDevices"].as_array().into_iter().flatten() {
        let (device, image) = device(d, volumes)?;
        mounts.push(device);
        watched.push(image);
    }
    if let Some(parent) = log_path.parent() {
        std::fs::create_dir_all(parent).map_err(create_error)?;
    }
    if let Some(dir) = spec["workingDir"].as_str().filter(|d| !d.is_empty()) {
        working_dir = Some(PathBuf::from(dir));
    }
    Ok(runtime::Launch {
        argv,
        env,
        working_dir,
        mounts,
        watched,
        image_root,
        scratch_dir,
        log_path,
        identity,
    })
}

/// The process's arguments, as containerd's CRI plugin decides them
/// (`WithProcessArgs`): the container's `command` replaces the image's
/// `Entrypoint` and then `Cmd` is dropped; its `args` replace `Cmd`; an
/// `Entrypoint` of one empty string is none.
fn process_args(
    command: Vec<String>,
    args: Vec<String>,
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
) -> Vec<String> {
    let (mut argv, args) = if command.is_empty() {
        let args = if args.is_empty() {
            cmd.unwrap_or_default()
        } else {
            args
        };
        let entrypoint = entrypoint
            .filter(|e| !(e.len() == 1 && e[0].is_empty()))
            .unwrap_or_default();
        (entrypoint, args)
    } else {
        (command, args)
    };
    argv.extend(args);
    argv
}

/// The files the kubelet and the runtime put into a container of an
/// image: `/etc/hosts` (the kubelet's managed hosts file), `/etc/hostname`
/// and `/etc/resolv.conf` (the sandbox's, written by the runtime; with no
/// cluster DNS, the kubelet falls back to the node's resolver
/// configuration) and the termination message file. A path the container
/// mounts a volume at itself is left to it.
fn injected(
    pod_dir: &Path,
    scratch_dir: &Path,
    pod: &Value,
    spec: &Value,
) -> std::io::Result<Vec<runtime::Mount>> {
    let hostname = pod["spec"]["hostname"]
        .as_str()
        .or(pod["metadata"]["name"].as_str())
        .unwrap_or_default();
    let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
    let hosts = format!(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
         {ip}\t{hostname}\n"
    );
    let resolv = match std::fs::read("/etc/resolv.conf") {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let termination = spec["terminationMessagePath"]
        .as_str()
        .filter(|p| !p.is_empty())
        .unwrap_or("/dev/termination-log");
    let files = [
        (pod_dir.join("etc-hosts"), "/etc/hosts", hosts.into_bytes()),
        (
            pod_dir.join("hostname"),
            "/etc/hostname",
            format!("{hostname}\n").into_bytes(),
        ),
        (pod_dir.join("resolv.conf"), "/etc/resolv.conf", resolv),
        (scratch_dir.join("termination-log"), termination, Vec::new()),
    ];
    let claimed: Vec<&str> = spec["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    let mut mounts = Vec::new();
    for (host_path, at, content) in files {
        if claimed.contains(&at) {
            continue;
        }
        std::fs::write(&host_path, content)?;
        // Any user may write its termination message, as the kubelet
        // makes the file.
        if at == termination {
            std::fs::set_permissions(&host_path, std::fs::Permissions::from_mode(0o666))?;
        }
        mounts.push(runtime::Mount {
            host_path,
            container_path: PathBuf::from(at),
            read_only: false,
        });
    }
    Ok(mounts)
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

/// A container's `volumeDevices` entry on the host: the mapped device
/// (or image file) bound at `devicePath`, and the image behind it.
fn device(
    d: &Value,
    volumes: &HashMap<String, HostVolume>,
) -> Result<(runtime::Mount, PathBuf), (&'static str, String)> {
    let config_error = |message: String| ("CreateContainerConfigError", message);
    let name = d["name"].as_str().unwrap_or_default();
    let volume = volumes
        .get(name)
        .ok_or_else(|| config_error(format!("volume {name:?} not found")))?;
    let image = volume
        .block
        .clone()
        .ok_or_else(|| config_error(format!("volume {name:?} is not a block volume")))?;
    let mount = runtime::Mount {
        host_path: volume.path.clone(),
        container_path: PathBuf::from(d["devicePath"].as_str().unwrap_or_default()),
        read_only: volume.read_only,
    };
    Ok((mount, image))
}

#[cfg(test)]
mod tests {
    use super::process_args;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn command_and_args_override_entrypoint_and_cmd_as_containerd_does() {
        let (entrypoint, cmd) = (Some(v(&["/ep", "-x"])), Some(v(&["c1", "c2"])));
        let run = |command: &[&str], args: &[&str]| {
            process_args(v(command), v(args), entrypoint.clone(), cmd.clone())
        };
        assert_eq!(run(&[], &[]), v(&["/ep", "-x", "c1", "c2"]));
        assert_eq!(run(&[], &["a"]), v(&["/ep", "-x", "a"]));
        assert_eq!(run(&["/bin/x"], &[]), v(&["/bin/x"]), "Cmd is dropped");
        assert_eq!(run(&["/bin/x"], &["a"]), v(&["/bin/x", "a"]));
        let none = process_args(Vec::new(), Vec::new(), Some(v(&[""])), Some(v(&["c"])));
        assert_eq!(none, v(&["c"]), "an empty Entrypoint is none");
    }
}
