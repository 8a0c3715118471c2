//! Who a container's process runs as and which capabilities it holds, as
//! containerd's CRI plugin writes them into the OCI spec and runc applies
//! them.
//!
//! runc (`finalizeNamespace`) drops the bounding set to the spec's, keeps
//! its capabilities across `setgroups`/`setgid`/`setuid` (`PR_SET_KEEPCAPS`),
//! then sets the effective, permitted and inheritable sets and the ambient
//! set. containerd puts the container's capabilities in the bounding,
//! effective and permitted sets and none in the inheritable or ambient
//! ones (Kubernetes has no field for ambient capabilities). So a root
//! process keeps them across `execve`, while a non-root one loses them
//! all there: without file capabilities, `execve` gives a non-root
//! process an empty permitted and effective set whatever it held before,
//! and only the bounding set shows what it could have had. A non-root
//! container that adds NET_BIND_SERVICE still cannot bind port 80, as on
//! a real node.

use rustix::thread::CapabilitySet;

/// The identity and privileges of a container's process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// The supplementary groups, in the order `setgroups` gets them.
    pub groups: Vec<u32>,
    /// The bounding, permitted and effective sets.
    pub capabilities: CapabilitySet,
    /// `PR_SET_NO_NEW_PRIVS` before `execve` (`allowPrivilegeEscalation:
    /// false`): setuid binaries and file capabilities grant nothing.
    pub no_new_privs: bool,
}

impl Identity {
    /// Root with the runtime's default capabilities, as a container that
    /// says nothing runs in an image without a user.
    pub fn root() -> Identity {
        Identity {
            uid: 0,
            gid: 0,
            groups: vec![0],
            capabilities: default_capabilities(),
            no_new_privs: false,
        }
    }
}

/// Capability names as Kubernetes spells them (without `CAP_`), by bit.
const NAMES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The capability a name (any case, without `CAP_`) stands for; None for
/// a name the runtime does not know (runc ignores those).
pub fn capability(name: &str) -> Option<CapabilitySet> {
    let upper = name.to_ascii_uppercase();
    NAMES
        .iter()
        .position(|n| *n == upper)
        .map(|bit| CapabilitySet::from_bits_retain(1 << bit))
}

/// Every capability the runtime knows: what `privileged` and `add: [ALL]`
/// give.
pub fn all_capabilities() -> CapabilitySet {
    CapabilitySet::from_bits_retain((1 << NAMES.len()) - 1)
}

/// containerd's default set (`defaultUnixCaps`).
pub fn default_capabilities() -> CapabilitySet {
    [
        "CHOWN",
        "DAC_OVERRIDE",
        "FSETID",
        "FOWNER",
        "MKNOD",
        "NET_RAW",
        "SETGID",
        "SETUID",
        "SETFCAP",
        "SETPCAP",
        "NET_BIND_SERVICE",
        "SYS_CHROOT",
        "KILL",
        "AUDIT_WRITE",
    ]
    .into_iter()
    .filter_map(capability)
    .fold(CapabilitySet::empty(), |set, cap| set | cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_set_is_the_runtimes() {
        assert_eq!(default_capabilities().bits(), 0xa804_25fb);
        assert_eq!(
            capability("net_bind_service"),
            Some(CapabilitySet::NET_BIND_SERVICE)
        );
        assert_eq!(capability("CAP_CHOWN"), None);
        assert_eq!(
            capability("CHECKPOINT_RESTORE"),
            Some(CapabilitySet::CHECKPOINT_RESTORE)
        );
        assert!(all_capabilities().contains(CapabilitySet::SYS_ADMIN | CapabilitySet::BPF));
    }
}
