//! A pod's `fsGroup` applied to its volumes before its containers start,
//! as the kubelet's volume plugins call `SetVolumeOwnership`
//! (pkg/volume/volume_linux.go):
//!
//! - every file, directory and symlink gets the group `fsGroup` (`lchown`,
//!   the owner kept); files and directories (not symlinks) get `rw` for
//!   owner and group (`r` for a read-only volume), directories also `x`
//!   for both and the setgid bit, so that what is created in them later
//!   belongs to the group too. Children first, the root last. A failed
//!   `chown` or `chmod` is only logged; a directory that cannot be read
//!   fails the mount;
//! - `fsGroupChangePolicy: OnRootMismatch` skips all of it when the root
//!   already has the group, those permissions and the setgid bit.
//!
//! Which volumes: emptyDir, and secret, configMap and projected volumes
//! (read-only), always and whatever the policy, as those plugins pass
//! none; a claim's `local` volume by the policy, unless mounted read-only
//! or already used by another running pod on the node (then an
//! `AlreadyMountedVolume` warning when its group differs); a claim's
//! `hostPath` volume and `hostPath` volumes never: the hostPath plugin
//! does not manage ownership, so a pod on a claim of the sandbox's shared
//! classes sees its directory as the provisioner made it.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use serde_json::Value;

use super::volumes::{mount_failed, HostVolume, NotReady};
use crate::registry;
use crate::store::Store;

/// How a volume's plugin manages its ownership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Managed {
    /// hostPath: never.
    No,
    /// emptyDir, secret, configMap, projected: every time, recursively.
    Always,
    /// A `local` volume: by `fsGroupChangePolicy`, once per node user.
    ByPolicy,
}

const SETGID: u32 = 0o2000;
const RW: u32 = 0o660;
const RO: u32 = 0o440;
const SEARCH: u32 = 0o110;

/// A warning event to record about the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub reason: &'static str,
    pub message: String,
}

/// Gives `pod`'s volumes (set up on `node`) to its `fsGroup`; warnings to
/// record. Nothing happens without an `fsGroup`.
pub fn apply(
    store: &Store,
    pod: &Value,
    node: &str,
    volumes: &HashMap<String, HostVolume>,
) -> Result<Vec<Warning>, NotReady> {
    let context = &pod["spec"]["securityContext"];
    let Some(group) = context["fsGroup"]
        .as_u64()
        .and_then(|g| u32::try_from(g).ok())
    else {
        return Ok(Vec::new());
    };
    let on_root_mismatch = context["fsGroupChangePolicy"] == "OnRootMismatch";
    let mut warnings = Vec::new();
    for (name, volume) in volumes {
        let policy = match volume.managed {
            Managed::No => continue,
            Managed::Always => false,
            Managed::ByPolicy if volume.read_only => continue,
            Managed::ByPolicy => {
                if let Some(claim) = volume.claim.as_deref() {
                    if used_by_another_pod(store, pod, node, claim) {
                        warnings.extend(shared_warning(&volume.path, group, name));
                        continue;
                    }
                }
                on_root_mismatch
            }
        };
        set_volume_ownership(&volume.path, group, volume.read_only, policy)
            .map_err(|e| mount_failed(name, e))?;
    }
    Ok(warnings)
}

/// Whether another pod on `node` runs with claim `claim` of the pod's
/// namespace (the local plugin counts the mounts of other pods).
fn used_by_another_pod(store: &Store, pod: &Value, node: &str, claim: &str) -> bool {
    let ns = &pod["metadata"]["namespace"];
    let (pods, _) = store.list(registry::get("pods"), ns.as_str());
    pods.iter().any(|other| {
        other["metadata"]["uid"] != pod["metadata"]["uid"]
            && other["spec"]["nodeName"] == node
            && other["status"]["phase"] == "Running"
            && other["spec"]["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["persistentVolumeClaim"]["claimName"] == claim)
    })
}

fn shared_warning(root: &Path, group: u32, volume: &str) -> Option<Warning> {
    let old = std::fs::metadata(root).ok()?.gid();
    (old != group).then(|| Warning {
        reason: "AlreadyMountedVolume",
        message: format!(
            "The requested fsGroup is {group}, but the volume {volume} has GID {old}. The volume may not be shareable."
        ),
    })
}

/// `SetVolumeOwnership` on the directory `root`; `on_root_mismatch`
/// skips it when the root is already as it would leave it.
pub fn set_volume_ownership(
    root: &Path,
    group: u32,
    read_only: bool,
    on_root_mismatch: bool,
) -> io::Result<()> {
    let mask = if read_only { RO } else { RW };
    if on_root_mismatch && !needs_change(root, group, mask) {
        return Ok(());
    }
    walk(root, &|path: &Path, meta: &std::fs::Metadata| {
        change(path, meta, group, mask)
    })
}

/// `requiresPermissionChange`: the root's group, its permissions (a
/// superset of the mask with search) and its setgid bit.
fn needs_change(root: &Path, group: u32, mask: u32) -> bool {
    let Ok(meta) = std::fs::metadata(root) else {
        return true;
    };
    let wanted = mask | SEARCH;
    meta.gid() != group
        || !meta.is_dir()
        || meta.mode() & wanted != wanted
        || meta.mode() & SETGID == 0
}

/// Depth first, each directory after its entries, symlinks not followed.
fn walk(path: &Path, visit: &dyn Fn(&Path, &std::fs::Metadata)) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            walk(&entry?.path(), visit)?;
        }
    }
    visit(path, &meta);
    Ok(())
}

fn change(path: &Path, meta: &std::fs::Metadata, group: u32, mask: u32) {
    if let Err(e) = std::os::unix::fs::lchown(path, None, Some(group)) {
        tracing::warn!("fsGroup: chown of {}: {e}", path.display());
    }
    if meta.file_type().is_symlink() {
        return;
    }
    let mut mode = meta.mode() & 0o7777 | mask;
    if meta.is_dir() {
        mode |= SETGID | SEARCH;
    }
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        tracing::warn!("fsGroup: chmod of {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn mode(path: &Path) -> (u32, u32) {
        let meta = fs::symlink_metadata(path).expect("stat");
        (meta.mode() & 0o7777, meta.gid())
    }

    #[test]
    fn the_tree_gets_the_group_its_modes_and_setgid_directories() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("vol");
        fs::create_dir_all(root.join("sub")).expect("dirs");
        fs::write(root.join("sub/secret"), "x").expect("file");
        fs::set_permissions(root.join("sub/secret"), fs::Permissions::from_mode(0o600))
            .expect("chmod");
        fs::write(root.join("run"), "x").expect("file");
        fs::set_permissions(root.join("run"), fs::Permissions::from_mode(0o4755)).expect("chmod");
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).expect("chmod");
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).expect("link");
        let passwd_mode = mode(Path::new("/etc/passwd"));

        set_volume_ownership(&root, 2000, false, false).expect("ownership");
        assert_eq!(mode(&root), (0o2770, 2000));
        assert_eq!(mode(&root.join("sub")), (0o2775, 2000));
        assert_eq!(mode(&root.join("sub/secret")), (0o660, 2000));
        assert_eq!(mode(&root.join("run")), (0o4775, 2000));
        assert_eq!(
            fs::symlink_metadata(root.join("link")).expect("link").gid(),
            2000
        );
        assert_eq!(
            mode(Path::new("/etc/passwd")),
            passwd_mode,
            "links not followed"
        );

        // The root as it is left: OnRootMismatch does nothing more.
        fs::set_permissions(root.join("sub/secret"), fs::Permissions::from_mode(0o600))
            .expect("chmod");
        set_volume_ownership(&root, 2000, false, true).expect("skipped");
        assert_eq!(mode(&root.join("sub/secret")), (0o600, 2000));
        // Another group is a mismatch.
        set_volume_ownership(&root, 3000, false, true).expect("ownership");
        assert_eq!(mode(&root.join("sub/secret")), (0o660, 3000));
    }

    #[test]
    fn a_read_only_volume_gets_group_read() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("vol");
        fs::create_dir(&root).expect("dir");
        fs::write(root.join("key"), "x").expect("file");
        fs::set_permissions(root.join("key"), fs::Permissions::from_mode(0o400)).expect("chmod");
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).expect("chmod");
        set_volume_ownership(&root, 7, true, false).expect("ownership");
        assert_eq!(mode(&root.join("key")), (0o440, 7));
        assert_eq!(mode(&root), (0o2755, 7));
    }
}
