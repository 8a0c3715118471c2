//! A container's identity from its security context, its pod's and its
//! image, as the kubelet hands it to the runtime
//! (`determineEffectiveSecurityContext`, `verifyRunAsNonRoot`) and
//! containerd's CRI plugin resolves it against the container's files
//! (`WithUser`, `WithAdditionalGIDs`, `WithSupplementalGroups`,
//! `WithCapabilities`):
//!
//! - the user is `runAsUser` (the container's, else the pod's), else the
//!   image's `User` (its part before `:`; a name is looked up in the
//!   container's `/etc/passwd`), else root. The group is `runAsGroup`,
//!   else the user's in `/etc/passwd`, else 0: the group part of the
//!   image's `User` is dropped on the way, as the kubelet passes on only
//!   the image's user;
//! - `runAsNonRoot: true` with a `runAsUser` of 0, an image user 0 (or
//!   none) or an image user by name is `CreateContainerConfigError`;
//! - the supplementary groups are the primary group, the groups of
//!   `/etc/group` that list the user, `fsGroup` and `supplementalGroups`,
//!   sorted without repeats; with `supplementalGroupsPolicy: Strict` only
//!   the last two;
//! - the capabilities are containerd's default set, all of them when
//!   `privileged` or when `add` has `ALL`, none when `drop` has `ALL`,
//!   then the other names of `add` added and those of `drop` removed;
//! - `allowPrivilegeEscalation: false` sets `no_new_privs`.
//!
//! `/etc/passwd` and `/etc/group` are the host's for host commands and
//! mapped binaries (their root is a view of the host's), the image's for
//! an image archive, read with symlinks resolved inside its root.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;

use rustix::thread::CapabilitySet;
use serde_json::Value;

use super::runtime::identity::{all_capabilities, capability, default_capabilities};
use super::runtime::Identity;

/// The identity container `spec` of `pod` runs with, its image's `User`
/// given and its root (None: the host's). Err: (waiting reason, message).
pub fn identity(
    pod: &Value,
    spec: &Value,
    image_user: Option<&str>,
    root: Option<&Path>,
) -> Result<Identity, (&'static str, String)> {
    let context = Context { pod, spec };
    let run_as_user = context.field("runAsUser").and_then(Value::as_u64);
    let run_as_group = context.field("runAsGroup").and_then(Value::as_u64);
    let (image_uid, image_name) = image_identity(image_user);
    context
        .verify_run_as_non_root(run_as_user, image_uid, image_name)
        .map_err(|message| ("CreateContainerConfigError", message))?;
    let accounts = Accounts::read(root);
    let as_id = |id: u64| u32::try_from(id).unwrap_or(u32::MAX);
    let (uid, gid, name) = match (run_as_user.or(image_uid), image_name) {
        (Some(uid), _) => {
            let uid = as_id(uid);
            let entry = accounts.users.iter().find(|u| u.id == uid);
            let gid = run_as_group
                .map(as_id)
                .or(entry.map(|u| u.group))
                .unwrap_or(0);
            (uid, gid, entry.map(|u| u.name.clone()))
        }
        (None, Some(name)) => {
            let Some(entry) = accounts.users.iter().find(|u| u.name == name) else {
                return Err((
                    "CreateContainerError",
                    format!("unable to find user {name}: no matching entries in passwd file"),
                ));
            };
            let gid = run_as_group.map(as_id).unwrap_or(entry.group);
            (entry.id, gid, Some(name.to_string()))
        }
        (None, None) => (0, run_as_group.map(as_id).unwrap_or(0), None),
    };
    let pod_context = &pod["spec"]["securityContext"];
    let mut groups = BTreeSet::new();
    if pod_context["supplementalGroupsPolicy"] != "Strict" {
        groups.insert(gid);
        groups.extend(
            name.map(|n| accounts.groups_listing(&n))
                .unwrap_or_default(),
        );
    }
    let supplemental = pod_context["supplementalGroups"].as_array();
    for group in [&pod_context["fsGroup"]]
        .into_iter()
        .chain(supplemental.into_iter().flatten())
    {
        if let Some(id) = group.as_u64() {
            groups.insert(as_id(id));
        }
    }
    Ok(Identity {
        uid,
        gid,
        groups: groups.into_iter().collect(),
        capabilities: capabilities(&spec["securityContext"]),
        no_new_privs: spec["securityContext"]["allowPrivilegeEscalation"] == false,
    })
}

/// The pod and one of its containers, for the security context fields a
/// container inherits from its pod.
struct Context<'a> {
    pod: &'a Value,
    spec: &'a Value,
}

impl Context<'_> {
    /// The container's setting, else the pod's.
    fn field(&self, name: &str) -> Option<&Value> {
        [
            &self.spec["securityContext"][name],
            &self.pod["spec"]["securityContext"][name],
        ]
        .into_iter()
        .find(|v| !v.is_null())
    }

    /// `verifyRunAsNonRoot`, with the image's uid or user name.
    fn verify_run_as_non_root(
        &self,
        run_as_user: Option<u64>,
        image_uid: Option<u64>,
        image_name: Option<&str>,
    ) -> Result<(), String> {
        if self.field("runAsNonRoot") != Some(&Value::Bool(true)) {
            return Ok(());
        }
        let meta = &self.pod["metadata"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let whose = format!(
            "(pod: \"{}_{}({})\", container: {})",
            text(&meta["name"]),
            text(&meta["namespace"]),
            text(&meta["uid"]),
            text(&self.spec["name"])
        );
        match (run_as_user, image_uid, image_name) {
            (Some(0), _, _) => Err(format!(
                "container's runAsUser breaks non-root policy {whose}"
            )),
            (Some(_), _, _) => Ok(()),
            (None, None, Some(name)) => Err(format!(
                "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root {whose}"
            )),
            (None, Some(0) | None, _) => Err(format!(
                "container has runAsNonRoot and image will run as root {whose}"
            )),
            (None, Some(_), _) => Ok(()),
        }
    }
}

/// The image's user as the runtime reports it to the kubelet: the part
/// before `:`, a uid when numeric, else a name; neither when unset.
fn image_identity(user: Option<&str>) -> (Option<u64>, Option<&str>) {
    let Some(user) = user.map(|u| u.split(':').next().unwrap_or(u)) else {
        return (None, None);
    };
    match user.parse::<u64>() {
        Ok(uid) => (Some(uid), None),
        Err(_) if user.is_empty() => (None, None),
        Err(_) => (None, Some(user)),
    }
}

/// containerd's `WithCapabilities` on its default set.
fn capabilities(context: &Value) -> CapabilitySet {
    if context["privileged"] == true {
        return all_capabilities();
    }
    let names = |list: &str| -> Vec<String> {
        context["capabilities"][list]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_str().map(str::to_ascii_uppercase))
            .collect()
    };
    let (add, drop) = (names("add"), names("drop"));
    let mut set = default_capabilities();
    if add.iter().any(|c| c == "ALL") {
        set = all_capabilities();
    }
    if drop.iter().any(|c| c == "ALL") {
        set = CapabilitySet::empty();
    }
    set |= add
        .iter()
        .filter_map(|c| capability(c))
        .fold(CapabilitySet::empty(), |a, c| a | c);
    for cap in drop.iter().filter_map(|c| capability(c)) {
        set.remove(cap);
    }
    set
}

struct User {
    name: String,
    id: u32,
    group: u32,
}

struct Group {
    name: String,
    id: u32,
    members: Vec<String>,
}

/// The users and groups of a container's root.
#[derive(Default)]
struct Accounts {
    users: Vec<User>,
    groups: Vec<Group>,
}

impl Accounts {
    /// `/etc/passwd` and `/etc/group` of `root` (None: the host's); a file
    /// that is missing or unreadable has no entries.
    fn read(root: Option<&Path>) -> Accounts {
        let lines = |path: &str| -> Vec<Vec<String>> {
            read_in_root(root, path)
                .unwrap_or_default()
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .map(|l| l.split(':').map(str::to_string).collect())
                .collect()
        };
        let id = |field: Option<&String>| field.and_then(|f| f.trim().parse::<u32>().ok());
        let users = lines("etc/passwd")
            .into_iter()
            .filter_map(|f| {
                Some(User {
                    name: f.first()?.clone(),
                    id: id(f.get(2))?,
                    group: id(f.get(3))?,
                })
            })
            .collect();
        let groups = lines("etc/group")
            .into_iter()
            .filter_map(|f| {
                let members = f.get(3).map_or_else(Vec::new, |m| {
                    m.split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                });
                Some(Group {
                    name: f.first()?.clone(),
                    id: id(f.get(2))?,
                    members,
                })
            })
            .collect();
        Accounts { users, groups }
    }

    /// The groups that list `user` as a member, other than one named as
    /// the user (`WithAdditionalGIDs`).
    fn groups_listing(&self, user: &str) -> Vec<u32> {
        self.groups
            .iter()
            .filter(|g| g.name != user && g.members.iter().any(|m| m == user))
            .map(|g| g.id)
            .collect()
    }
}

/// A file of a container's root by its path relative to it, symlinks
/// resolved as the container would (never out of an image's root).
fn read_in_root(root: Option<&Path>, path: &str) -> std::io::Result<String> {
    use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};
    let Some(root) = root else {
        return std::fs::read_to_string(Path::new("/").join(path));
    };
    let dir = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())?;
    let file = openat2(
        &dir,
        path,
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT,
    )?;
    let mut text = String::new();
    std::fs::File::from(file).read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(context: Value, container: Value) -> (Value, Value) {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
            "spec": {"securityContext": context, "containers": [container.clone()]}});
        (pod, container)
    }

    /// A root with these accounts.
    fn root(passwd: &str, group: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("root");
        std::fs::create_dir(dir.path().join("etc")).expect("etc");
        std::fs::write(dir.path().join("etc/passwd"), passwd).expect("passwd");
        std::fs::write(dir.path().join("etc/group"), group).expect("group");
        dir
    }

    #[test]
    fn run_as_fields_win_and_groups_merge_sorted() {
        let accounts = root(
            "root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/:/bin/sh\n",
            "root:x:0:\napp:x:1000:app\nvideo:x:44:app,root\n",
        );
        let (p, c) = pod(
            json!({"runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 2000, "supplementalGroups": [5, 3000]}),
            json!({"name": "c", "securityContext": {"capabilities": {"drop": ["ALL"]}, "allowPrivilegeEscalation": false}}),
        );
        let id = identity(&p, &c, Some("0"), Some(accounts.path())).expect("identity");
        assert_eq!((id.uid, id.gid), (1000, 2000));
        assert_eq!(id.groups, [5, 44, 2000, 3000]);
        assert!(id.capabilities.is_empty() && id.no_new_privs);

        let (p, c) = pod(
            json!({"supplementalGroupsPolicy": "Strict", "fsGroup": 7}),
            json!({"name": "c"}),
        );
        let id = identity(&p, &c, Some("app:44"), Some(accounts.path())).expect("identity");
        assert_eq!((id.uid, id.gid, id.groups), (1000, 1000, vec![7]));
        assert_eq!(id.capabilities.bits(), 0xa804_25fb);

        let (p, c) = pod(json!({}), json!({"name": "c"}));
        let id = identity(&p, &c, Some("app"), Some(accounts.path())).expect("by name");
        assert_eq!((id.uid, id.gid, id.groups), (1000, 1000, vec![44, 1000]));
        let missing = identity(&p, &c, Some("nobody"), Some(accounts.path()));
        assert_eq!(missing.expect_err("unknown").0, "CreateContainerError");
    }

    #[test]
    fn run_as_non_root_is_verified_as_the_kubelet_does() {
        let refused = |context: Value, image: Option<&str>| {
            let (p, c) = pod(context, json!({"name": "mover"}));
            identity(&p, &c, image, None).expect_err("refused")
        };
        assert_eq!(
            refused(json!({"runAsNonRoot": true}), None),
            (
                "CreateContainerConfigError",
                "container has runAsNonRoot and image will run as root (pod: \"p_ns(u-1)\", container: mover)".to_string()
            )
        );
        assert_eq!(
            refused(json!({"runAsNonRoot": true, "runAsUser": 0}), Some("1000")).1,
            "container's runAsUser breaks non-root policy (pod: \"p_ns(u-1)\", container: mover)"
        );
        assert_eq!(
            refused(json!({"runAsNonRoot": true}), Some("app:app")).1,
            "container has runAsNonRoot and image has non-numeric user (app), cannot verify user is non-root (pod: \"p_ns(u-1)\", container: mover)"
        );
        let (p, c) = pod(json!({"runAsNonRoot": true}), json!({"name": "c"}));
        assert_eq!(
            identity(&p, &c, Some("1234:5"), None).expect("numeric").uid,
            1234
        );
    }

    #[test]
    fn capabilities_as_containerd_composes_them() {
        let caps = |context: Value| capabilities(&context);
        assert_eq!(caps(json!({})), default_capabilities());
        assert_eq!(
            caps(json!({"capabilities": {"drop": ["ALL"], "add": ["net_bind_service", "BOGUS"]}})),
            CapabilitySet::NET_BIND_SERVICE
        );
        let most = caps(json!({"capabilities": {"add": ["ALL"], "drop": ["SYS_ADMIN"]}}));
        assert!(!most.contains(CapabilitySet::SYS_ADMIN) && most.contains(CapabilitySet::BPF));
        assert_eq!(caps(json!({"privileged": true})), all_capabilities());
        let fewer = caps(json!({"capabilities": {"drop": ["NET_RAW", "KILL"]}}));
        assert_eq!(
            fewer,
            default_capabilities() - CapabilitySet::NET_RAW - CapabilitySet::KILL
        );
    }

    #[test]
    fn an_image_cannot_point_its_accounts_out_of_its_root() {
        let dir = tempfile::tempdir().expect("root");
        std::fs::create_dir(dir.path().join("etc")).expect("etc");
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "evil:x:0:0::/:/bin/sh\n").expect("outside");
        let image = dir.path().join("image");
        std::fs::create_dir_all(image.join("etc")).expect("image etc");
        std::os::unix::fs::symlink(&outside, image.join("etc/passwd")).expect("symlink");
        let accounts = Accounts::read(Some(&image));
        assert!(
            accounts.users.is_empty(),
            "the link resolves inside the image"
        );
    }
}
