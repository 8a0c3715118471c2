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

/// The capability a name (any case, without `CAP_`) stands for; None for
/// a name the runtime does not know (runc ignores those). rustix's flags
/// are named as Kubernetes spells capabilities.
pub fn capability(name: &str) -> Option<CapabilitySet> {
    CapabilitySet::from_name(&name.to_ascii_uppercase())
}

/// Every capability the runtime knows, `CHOWN` (bit 0) to
/// `CHECKPOINT_RESTORE` (bit 40): what `privileged` and `add: [ALL]` give.
/// (rustix's `all()` also holds the bits it does not name.)
pub fn all_capabilities() -> CapabilitySet {
    CapabilitySet::from_bits_retain((CapabilitySet::CHECKPOINT_RESTORE.bits() << 1) - 1)
}

/// containerd's default set (`defaultUnixCaps`).
pub fn default_capabilities() -> CapabilitySet {
    use CapabilitySet as C;
    C::CHOWN
        | C::DAC_OVERRIDE
        | C::FSETID
        | C::FOWNER
        | C::MKNOD
        | C::NET_RAW
        | C::SETGID
        | C::SETUID
        | C::SETFCAP
        | C::SETPCAP
        | C::NET_BIND_SERVICE
        | C::SYS_CHROOT
        | C::KILL
        | C::AUDIT_WRITE
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
