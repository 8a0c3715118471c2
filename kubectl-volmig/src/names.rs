//! Names and labels of everything volmig creates, so that any client can
//! find an operation's objects by label, and clean them up.

use std::collections::BTreeMap;

/// `app.kubernetes.io/managed-by` on every object volmig creates.
pub const MANAGED_BY_KEY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "kubectl-volmig";
/// The operation an object belongs to.
pub const OPERATION_KEY: &str = "volmig.io/operation";
/// What the object is to the operation: see [`Component`].
pub const COMPONENT_KEY: &str = "volmig.io/component";
/// The attempt a mover pod runs.
pub const ATTEMPT_KEY: &str = "volmig.io/attempt";
/// On the record: the operation's phase, for `kubectl get -l`.
pub const PHASE_KEY: &str = "volmig.io/phase";
/// On a destination claim volmig created: the source claim (`ns.name`).
pub const SOURCE_KEY: &str = "volmig.io/source";
/// On the head of a set of claims: how many it holds.
pub const CLAIMS_KEY: &str = "volmig.io/claims";
/// On a claim's record in a set: the set's operation id, its namespace,
/// and the claim's key in it.
pub const GROUP_KEY: &str = "volmig.io/group";
pub const GROUP_NAMESPACE_KEY: &str = "volmig.io/group-namespace";
pub const CLAIM_KEY: &str = "volmig.io/claim";

/// The port the receiver listens on, in its pod and on its Service.
pub const MOVER_PORT: i32 = 7000;
/// The port a sender listens on for the tunnel (`mover send --listen`).
pub const SENDER_PORT: i32 = 7001;

/// The roles of volmig's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Record,
    Keys,
    Transport,
    Receiver,
    Sender,
    Destination,
    /// The in-cluster driver and its RBAC objects.
    Driver,
    /// The head record of a set of claims.
    Operation,
    /// A snapshot of the source, or a claim restored or cloned from it,
    /// that an attempt's sender reads (issue 24).
    SourceCopy,
    /// The record of a rehome (issue 19).
    Rehome,
    /// A destination claim given up for a fresh one (issue 20), kept until
    /// `cleanup`.
    AbandonedDestination,
    /// Where a cross-cluster operation's record is, in the source
    /// namespace (issue 23), kept until `cleanup`.
    RecordPointer,
}

impl Component {
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Record => "record",
            Component::Keys => "keys",
            Component::Transport => "transport",
            Component::Receiver => "receiver",
            Component::Sender => "sender",
            Component::Destination => "destination",
            Component::Driver => "driver",
            Component::Operation => "operation",
            Component::SourceCopy => "source-copy",
            Component::Rehome => "rehome",
            Component::AbandonedDestination => "abandoned-destination",
            Component::RecordPointer => "record-pointer",
        }
    }
}

/// Labels for an object of `component` in operation `op`.
pub fn labels(op: &str, component: Component) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_KEY.to_string(), MANAGED_BY.to_string()),
        (OPERATION_KEY.to_string(), op.to_string()),
        (COMPONENT_KEY.to_string(), component.as_str().to_string()),
    ])
}

/// Selects every object of operation `op`.
pub fn operation_selector(op: &str) -> String {
    format!("{MANAGED_BY_KEY}={MANAGED_BY},{OPERATION_KEY}={op}")
}

/// Selects what an ended operation no longer needs: pods, the Service and
/// the key Secret (not the record, not the destination claim).
pub fn disposable_selector(op: &str) -> String {
    format!(
        "{},{COMPONENT_KEY} in (keys,transport,receiver,sender)",
        operation_selector(op)
    )
}

/// Selects every record.
pub fn record_selector() -> String {
    component_selector(Component::Record)
}

/// Selects everything volmig made that is a `component`.
pub fn component_selector(component: Component) -> String {
    format!(
        "{MANAGED_BY_KEY}={MANAGED_BY},{COMPONENT_KEY}={}",
        component.as_str()
    )
}

/// Selects every head of a set of claims.
pub fn group_selector() -> String {
    component_selector(Component::Operation)
}

/// Selects the records of set `op`'s claims.
pub fn members_selector(op: &str) -> String {
    format!("{},{GROUP_KEY}={op}", record_selector())
}

/// The operation id of claim `key` of set `op`: its record, pods, Service
/// and key Secret carry it.
pub fn member_operation(op: &str, key: u32) -> String {
    format!("{op}-{key}")
}

/// The record ConfigMap of operation `op`.
pub fn record_name(op: &str) -> String {
    format!("volmig-{op}")
}

/// The ConfigMap in a cross-cluster operation's source namespace that
/// points at its record.
pub fn pointer_name(op: &str) -> String {
    format!("volmig-{op}-record-pointer")
}

/// The pod that inspects a reused destination before the first attempt.
pub fn inspect_pod_name(op: &str) -> String {
    format!("volmig-{op}-inspect")
}

/// The Secret with the operation's TLS key material.
pub fn keys_name(op: &str) -> String {
    format!("volmig-{op}-keys")
}

/// The claim a cutover's rollback binds to the old volume, to copy the
/// app's writes on the new volume back into it.
pub fn sync_back_claim(op: &str) -> String {
    format!("volmig-{op}-back")
}

/// The VolumeSnapshot of the source that attempt `attempt` reads.
pub fn snapshot_name(op: &str, attempt: u32) -> String {
    format!("volmig-{op}-snap-{attempt}")
}

/// The claim attempt `attempt`'s sender mounts when it reads a snapshot
/// or a clone of the source.
pub fn read_claim_name(op: &str, attempt: u32) -> String {
    format!("volmig-{op}-read-{attempt}")
}

/// Selects the snapshots and temporary claims of operation `op`.
pub fn source_copy_selector(op: &str) -> String {
    format!(
        "{},{COMPONENT_KEY}={}",
        operation_selector(op),
        Component::SourceCopy.as_str()
    )
}

/// The receiver's ClusterIP Service.
pub fn service_name(op: &str) -> String {
    format!("volmig-{op}")
}

/// A mover pod of attempt `attempt`.
pub fn pod_name(op: &str, component: Component, attempt: u32) -> String {
    format!("volmig-{op}-{}-{attempt}", component.as_str())
}

/// An operation id: the source claim's name (cut to leave room for the
/// longest derived name, a pod's, within 63 characters) and five random
/// characters. It is a valid label value and mover operation id.
pub fn new_operation_id(source: &str, random: [u8; 5]) -> String {
    operation_id(source, random, 0)
}

/// An operation id for a set of claims named after `what` (the workload,
/// the class): room is left for a claim's `-<key>` (up to 9999).
pub fn new_group_id(what: &str, random: [u8; 5]) -> String {
    operation_id(what, random, "-9999".len())
}

fn operation_id(source: &str, random: [u8; 5], reserve: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    // "volmig-" + op + "-receiver-" + up to 4 digits ≤ 63
    let keep = 63 - "volmig-".len() - "-receiver-9999".len() - 6 - reserve;
    // Service names are DNS-1035 labels: a claim's dots become dashes.
    let stem: String = source
        .chars()
        .take(keep)
        .map(|c| if c == '.' { '-' } else { c })
        .collect();
    let stem = stem.trim_end_matches('-');
    let suffix: String = random
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    if stem.is_empty() {
        format!("op-{suffix}")
    } else {
        format!("{stem}-{suffix}")
    }
}

/// A fresh operation id for `source`, from the OS's random source.
pub fn generate_operation_id(source: &str) -> String {
    new_operation_id(source, random())
}

/// A fresh operation id for a set of claims named after `what`.
pub fn generate_group_id(what: &str) -> String {
    new_group_id(what, random())
}

fn random() -> [u8; 5] {
    let mut random = [0u8; 5];
    // Without randomness the id is still unique enough per second.
    if getrandom::fill(&mut random).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        random = (nanos as u64).to_le_bytes()[..5]
            .try_into()
            .unwrap_or([0; 5]);
    }
    random
}

/// Who drives an operation: `host/pid`, or `pod/NAME` for the in-cluster
/// driver.
pub fn holder() -> String {
    match std::env::var(DRIVER_POD_ENV) {
        Ok(pod) if !pod.is_empty() => format!("{POD_HOLDER}{pod}"),
        _ => format!("{}/{}", host(), std::process::id()),
    }
}

/// Where the in-cluster driver's Job puts its pod's name (the downward
/// API): a driver that finds it holds the lease as `pod/NAME`.
pub const DRIVER_POD_ENV: &str = "VOLMIG_DRIVER_POD";
const POD_HOLDER: &str = "pod/";

/// The pod of a `pod/NAME` holder: the in-cluster driver.
pub fn holder_pod(holder: &str) -> Option<&str> {
    holder.strip_prefix(POD_HOLDER)
}

fn host() -> String {
    hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".into())
}

/// Whether `holder` (`host/pid`) is a process of this machine that has
/// gone: a driver that died here (killed, crashed) needs no wait for its
/// heartbeat to go stale. Known only where `/proc` lists processes; a pid
/// reused since only means waiting for the heartbeat, as elsewhere.
pub fn holder_gone(holder: &str) -> bool {
    let Some((host_part, pid)) = holder.rsplit_once('/') else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    let proc = std::path::Path::new("/proc");
    host_part == host() && proc.join("self").exists() && !proc.join(pid.to_string()).exists()
}

/// Who acts, as the record says it (`abort`): `host/pid`, and the
/// kubeconfig user when there is one: `laptop/4242 (user admin)`.
pub fn who(user: Option<&str>) -> String {
    match user {
        Some(user) => format!("{} (user {user})", holder()),
        None => holder(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_of_this_machine_that_has_gone_is_known_gone() {
        assert!(!holder_gone(&holder()), "this process runs");
        let dead = format!("{}/{}", host(), u32::MAX);
        assert_eq!(
            holder_gone(&dead),
            std::path::Path::new("/proc/self").exists()
        );
        assert!(!holder_gone("another-host/1"));
        assert!(!holder_gone("garbage"));
    }

    #[test]
    fn operation_ids_fit_every_derived_name() {
        let long = "a".repeat(253);
        let op = new_operation_id(&long, [1, 2, 3, 4, 5]);
        assert!(pod_name(&op, Component::Receiver, 9999).len() <= 63, "{op}");
        assert!(op.len() <= 63);
        assert_eq!(new_operation_id("data-", [0; 5]), "data-bbbbb");
        assert_eq!(new_operation_id("", [0; 5]), "op-bbbbb");
        assert_eq!(new_operation_id("data.v1", [0; 5]), "data-v1-bbbbb");
        assert_eq!(new_operation_id("1.2.", [0; 5]), "1-2-bbbbb");
        let group = new_group_id(&long, [1, 2, 3, 4, 5]);
        let member = member_operation(&group, 9999);
        assert!(
            pod_name(&member, Component::Receiver, 9999).len() <= 63,
            "{member}"
        );
        assert!(keys_name(&member).len() <= 63);
        assert!(read_claim_name(&member, 9999).len() <= 63);
        assert!(snapshot_name(&member, 9999).len() <= 63);
    }

    #[test]
    fn disposable_objects_exclude_record_and_claim() {
        let s = disposable_selector("x-1");
        assert!(s.contains("volmig.io/operation=x-1"));
        assert!(!s.contains("record") && !s.contains("destination"));
    }
}
