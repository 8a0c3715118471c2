//! Why a migration cannot work. Each [`Refusal`] names the object at fault
//! and says what to do, in the words of a kubectl error, so that the user
//! can fix the command or the cluster and run it again.

use mover::units::RateError;

use super::quantity::QuantityError;

/// The access modes a claim may ask for.
pub(super) const ACCESS_MODES: [&str; 4] = [
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];

/// A migration that cannot work, with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `--to-size` is not a byte size.
    #[error("invalid --to-size {value:?}: {error}{}", example(.error, "a size such as 20Gi, 500M or 1e9"))]
    InvalidSize {
        value: String,
        #[source]
        error: QuantityError,
    },

    /// `--to` or `--to-namespace` is a name the API server refuses.
    #[error("invalid {flag} {value:?}: {rule}")]
    InvalidName {
        /// `--to` or `--to-namespace`.
        flag: String,
        value: String,
        /// What such a name must be, in the API server's words.
        rule: String,
    },

    /// `--bwlimit` is not a rate the mover takes.
    #[error("invalid --bwlimit {value:?}: {error}")]
    InvalidRate {
        value: String,
        #[source]
        error: RateError,
    },

    /// A mover pod resource (`--mover-cpu`, `--mover-memory`,
    /// `--mover-memory-limit`) is not a quantity.
    #[error("invalid {flag} {value:?}: {error}{}", example(.error, resource_example(.flag)))]
    InvalidResource {
        flag: String,
        value: String,
        #[source]
        error: QuantityError,
    },

    /// The mover pods' memory limit is below their request.
    #[error(
        "--mover-memory-limit {limit} is below --mover-memory {request}: \
         the API server refuses a limit below the request; raise the limit or lower the request"
    )]
    MemoryLimitBelowRequest { limit: String, request: String },

    /// `--mover-image` is empty or has spaces around it.
    #[error(
        "invalid --mover-image {value:?}: give an image reference such as \
         ghcr.io/volmig/mover:0.1.0, without spaces around it"
    )]
    InvalidImage { value: String },

    /// `--start-timeout 0` would fail every attempt before its pods start.
    #[error(
        "invalid --start-timeout {seconds}: a mover pod needs time to start \
         (scheduling, volume attachment, image pull); give at least 1 second (default 300)"
    )]
    InvalidStartTimeout { seconds: u64 },

    /// An `--access-mode` is not one Kubernetes knows.
    #[error(
        "invalid access mode {value:?}{}: use ReadWriteOnce, ReadOnlyMany, ReadWriteMany or ReadWriteOncePod",
        access_mode_hint(.value)
    )]
    InvalidAccessMode { value: String },

    /// `--to` names the source claim itself.
    #[error(
        "the destination is the source itself, persistentvolumeclaim {name:?} in namespace {namespace:?}: \
         choose another --to (a new claim name, or another namespace)"
    )]
    SameClaim { namespace: String, name: String },

    /// `--cutover` keeps the claim's name in its namespace.
    #[error(
        "--cutover moves the app onto a new volume under the claim's own name, in its own \
         namespace {namespace:?}; --to-namespace {to:?} cannot go with it \
         (copy to another namespace without --cutover)"
    )]
    CutoverAcrossNamespaces { namespace: String, to: String },

    /// `--cutover` stops the app and starts it on the new volume; volmig
    /// cannot start an app in another cluster.
    #[error(
        "--cutover cannot move an app into another cluster (--to-context {context}): volmig \
         would stop it here and has nothing to start it with there. Copy without --cutover, \
         then stop the app and run the final round yourself: kubectl volmig sync OP --final"
    )]
    CutoverAcrossClusters { context: String },

    /// `--security baseline` where a mover's namespace enforces
    /// `restricted`: the API server would refuse the pods.
    #[error(
        "--security baseline: namespace {namespace:?} enforces the restricted Pod Security \
         profile ({label}), which refuses root movers with capabilities; use --security \
         restricted (or auto), which runs them as the app's own user"
    )]
    BaselineForbidden { namespace: String, label: String },

    /// `--security baseline` on OpenShift without the SCC that admits it.
    #[error(
        "--security baseline on OpenShift: {}; the default SCC, restricted-v2, refuses root movers \
         with capabilities. Use --security restricted (or auto), or ask for the privileged SCC",
        if *checked {
            "you may not use the privileged SCC (a SelfSubjectAccessReview of `use` on \
             securitycontextconstraints.security.openshift.io/privileged said no)"
        } else {
            "whether an SCC admits the movers could not be checked"
        }
    )]
    SccForbidsBaseline { checked: bool },

    /// `--security baseline --detach` on OpenShift: the driver's own
    /// ServiceAccount would create the movers, and no SCC of it admits them.
    #[error(
        "--security baseline --detach on OpenShift: the in-cluster driver creates the movers as \
         its own ServiceAccount, which volmig gives no SCC, so restricted-v2 would refuse them; \
         run it without --detach (the movers are then created as you), or use --security restricted"
    )]
    DetachedBaselineOnOpenShift,

    /// Restricted movers, and no identity to run them as.
    #[error(
        "restricted movers run as the user that can read {namespace}/{claim}, and none is known: {}, \
         and namespace {namespace:?} has no OpenShift UID range; pass --run-as UID[:GID] \
         (the user and group the app writes as)",
        if unknown_users.is_empty() {
            "no running pod mounts the claim".to_string()
        } else {
            format!("its pods ({}) leave the user to their image", list(unknown_users, 3))
        }
    )]
    NoMoverIdentity {
        namespace: String,
        claim: String,
        unknown_users: Vec<String>,
    },

    /// The app runs as root: restricted movers cannot.
    #[error(
        "{namespace}/{claim} is used as root ({from}); restricted movers cannot run as root: \
         use --security baseline where the namespace allows it"
    )]
    RootApp {
        namespace: String,
        claim: String,
        from: String,
    },

    /// `--detach` by a user who may not create the in-cluster driver's
    /// objects, or who lacks a grant they would give it (Kubernetes lets
    /// no one grant what they do not hold).
    #[error(
        "--detach: {user} may not start the in-cluster driver; the API server answered no to:\n  {}\n{}",
        missing.join("\n  "),
        if *lacks_grants {
            "The driver needs these grants to do its work, and a role can only grant what its \
             creator holds: ask for them (the permissions are in docs/kubectl-volmig.md#permissions)."
        } else {
            "Run it without --detach: the driver then runs here, with your own permissions \
             (if this client stops, `kubectl volmig resume` picks the operation up)."
        }
    )]
    DetachForbidden {
        /// The kubeconfig user, or "you".
        user: String,
        /// Each check as `kubectl auth can-i` takes it.
        missing: Vec<String>,
        /// Some missing permission is one of the driver's own (not only
        /// the right to create its objects).
        lacks_grants: bool,
    },

    /// `--update-owner` for a claim no StatefulSet's template made.
    #[error(
        "--update-owner: no StatefulSet that mounts {namespace}/{claim} made it from its \
         volumeClaimTemplates (a claim TEMPLATE-STATEFULSET-ORDINAL); leave --update-owner out"
    )]
    NoOwnerTemplate { namespace: String, claim: String },

    /// Consumers of the claim that scaling cannot stop.
    #[error(
        "cannot cut {namespace}/{claim} over: {}; nothing was changed",
        consumers.join("; ")
    )]
    Unquiescable {
        namespace: String,
        claim: String,
        /// Each consumer, why, and what to do.
        consumers: Vec<String>,
    },

    #[error(
        "persistentvolumeclaim {name:?} not found in namespace {namespace:?}: \
         check the name and the namespace (kubectl get pvc -n {namespace})"
    )]
    SourceNotFound { namespace: String, name: String },

    /// The source claim has no volume to read yet (or any more).
    #[error(
        "persistentvolumeclaim {name:?} in namespace {namespace:?} is {phase}, not Bound{}",
        not_bound_advice(.phase, .namespace, .name)
    )]
    SourceNotBound {
        namespace: String,
        name: String,
        phase: String,
    },

    /// The source claim is bound to a volume that does not exist.
    #[error(
        "persistentvolumeclaim {name:?} in namespace {namespace:?} is bound to persistentvolume {volume:?}, \
         which does not exist: check it with kubectl get pv {volume}; if it was deleted, \
         there is no data left to migrate"
    )]
    SourceVolumeMissing {
        namespace: String,
        name: String,
        volume: String,
    },

    /// Neither the volume nor the claim says how big the source is.
    #[error(
        "persistentvolume {volume:?} (the source) has no valid capacity: \
         check its spec.capacity.storage (kubectl get pv {volume} -o yaml)"
    )]
    SourceCapacityUnknown { volume: String },

    /// A ReadWriteOncePod source is mounted by a pod: no other pod can,
    /// and (`no_copy`, with `auto`) neither a snapshot nor a clone can be
    /// read instead.
    #[error(
        "persistentvolumeclaim {name:?} in namespace {namespace:?} is ReadWriteOncePod and used by pod {pod:?}: \
         no other pod may mount it{}",
        match .no_copy {
            None => ": read a snapshot or a clone of it instead (--copy-method snapshot or clone), \
                     or stop the app (scale its workload to 0)".to_string(),
            Some(why) => format!(", and it cannot be read through a copy: {why}; stop the app (scale its workload to 0) and migrate again"),
        }
    )]
    SourceInUseReadWriteOncePod {
        namespace: String,
        name: String,
        pod: String,
        no_copy: Option<String>,
    },

    /// `--copy-method snapshot` on a cluster without the snapshot CRDs.
    #[error(
        "the cluster does not serve the VolumeSnapshot API (snapshot.storage.k8s.io/v1): \
         install the external-snapshotter's CRDs and snapshot-controller, or use --copy-method clone or direct"
    )]
    NoSnapshotApi,

    /// Only CSI volumes are snapshotted or cloned.
    #[error(
        "persistentvolume {volume:?} (the source) is a {kind} volume, not a CSI one: \
         only CSI drivers {method} volumes; use --copy-method direct"
    )]
    NotCsi {
        volume: String,
        kind: String,
        /// `snapshot` or `clone`.
        method: String,
    },

    /// `--snapshot-class` names a class of another driver.
    #[error(
        "volumesnapshotclass {name:?} is for driver {class_driver:?}, but the source volume's driver is {driver:?}: \
         pass a class of {driver:?} (classes: {})",
        list(.classes, 8)
    )]
    SnapshotClassDriver {
        name: String,
        class_driver: String,
        driver: String,
        classes: Vec<String>,
    },

    /// `--snapshot-class` names no class.
    #[error(
        "volumesnapshotclass {name:?} not found{}: pass a class of driver {driver:?} (classes: {})",
        unreadable_note(.unreadable),
        list(.classes, 8)
    )]
    SnapshotClassNotFound {
        name: String,
        driver: String,
        classes: Vec<String>,
        unreadable: Option<String>,
    },

    /// No one default class for the source's driver, and none asked for.
    #[error(
        "{} for the source volume's driver {driver:?}{} (its classes: {}): \
         pass --snapshot-class NAME, or make one the default \
         (kubectl annotate volumesnapshotclass NAME snapshot.storage.kubernetes.io/is-default-class=true)",
        match .defaults.len() {
            0 => "no VolumeSnapshotClass is the default".to_string(),
            n => format!("{n} VolumeSnapshotClasses are the default ({})", .defaults.join(", ")),
        },
        unreadable_note(.unreadable),
        list(.classes, 8)
    )]
    NoSnapshotClass {
        driver: String,
        classes: Vec<String>,
        defaults: Vec<String>,
        unreadable: Option<String>,
    },

    /// The temporary claim needs a class of the source's driver.
    #[error(
        "no storage class provisions with driver {driver:?}{}: the claim restored from a snapshot \
         or clone needs one; create a StorageClass with provisioner {driver:?}",
        .source_class.as_ref().map(|c| format!(" (the source's class {c:?} does not)")).unwrap_or_default()
    )]
    NoClassForDriver {
        driver: String,
        source_class: Option<String>,
    },

    /// `--snapshot-class` without a snapshot.
    #[error(
        "--snapshot-class is for --copy-method snapshot (or auto); {method} reads no snapshot"
    )]
    SnapshotClassUnused { method: String },

    #[error(
        "namespace {namespace:?} not found: create it (kubectl create namespace {namespace}) \
         or migrate into an existing namespace"
    )]
    DestinationNamespaceNotFound { namespace: String },

    /// `--to-node` names no node.
    #[error(
        "node {name:?} not found (nodes: {}): pass an existing --to-node",
        list(.available, 8)
    )]
    NodeNotFound {
        name: String,
        available: Vec<String>,
    },

    /// `--to-node` names a cordoned node: no new pod goes there.
    #[error(
        "node {name:?} is cordoned (spec.unschedulable): neither the receiver nor, after a cutover, \
         the app could be scheduled there; uncordon it (kubectl uncordon {name}) or choose another --to-node"
    )]
    NodeCordoned { name: String },

    /// A cutover onto `--to-node` where the app's pods could not run.
    #[error(
        "the app's pod {pod:?} could not run on node {node:?} after the cutover: {why}; \
         choose a node the workload may run on, or change the workload first"
    )]
    NodeMisfit {
        node: String,
        pod: String,
        why: String,
    },

    /// `--to-storage-class` names no class.
    #[error(
        "storageclass {name:?} not found (classes: {}): pass an existing --to-storage-class{}",
        classes(.available, .default.as_deref()),
        default_advice(.default.as_deref())
    )]
    StorageClassNotFound {
        name: String,
        available: Vec<String>,
        default: Option<String>,
    },

    /// `--reuse` names a claim that does not exist.
    #[error(
        "persistentvolumeclaim {name:?} not found in namespace {namespace:?}: \
         --reuse copies into an existing claim; check --to and --to-namespace \
         (kubectl get pvc -n {namespace}), or leave out --reuse to have volmig create it"
    )]
    ReuseMissing { namespace: String, name: String },

    /// The destination claim exists and reusing it was not asked for.
    #[error(
        "persistentvolumeclaim {name:?} already exists in namespace {namespace:?}: \
         pass --reuse to copy into it (only the differences are sent), or choose another --to"
    )]
    DestinationExists { namespace: String, name: String },

    /// The destination claim exists but cannot hold data: Lost, or going.
    #[error(
        "persistentvolumeclaim {name:?} in namespace {namespace:?} exists but is {state}{}",
        unusable_advice(.state, .namespace, .name)
    )]
    DestinationUnusable {
        namespace: String,
        name: String,
        state: String,
    },

    /// The reused destination claim is smaller than the source.
    #[error(
        "persistentvolumeclaim {name:?} in namespace {namespace:?} holds {capacity} but the source holds {needed}: \
         expand it to at least {needed} (if its class allows expansion), choose another --to, \
         or pass --allow-shrink if the data fits (the copy then stops, as on a full disk, \
         as soon as the source's files add up to more than the claim holds)"
    )]
    DestinationTooSmall {
        namespace: String,
        name: String,
        capacity: String,
        needed: String,
    },

    /// `--to-size` is below the source's capacity.
    #[error(
        "--to-size {requested} is smaller than the source's capacity {source_capacity}: \
         pass a --to-size of at least {source_capacity}, or --allow-shrink if the data fits \
         (the copy then stops, as on a full disk, as soon as the source's files add up to \
         more than {requested})"
    )]
    ShrinkNotAllowed {
        requested: String,
        source_capacity: String,
    },

    /// A Block source asked to shrink: every byte of a device is data.
    #[error(
        "a Block claim cannot shrink: every byte of the device is the app's data (the source \
         holds {source_capacity}, {requested} was asked for): leave --to-size out, or give \
         one of at least {source_capacity}"
    )]
    BlockShrink {
        requested: String,
        source_capacity: String,
    },

    /// A reused claim of the other volume mode.
    #[error(
        "cannot move a {source_mode} claim into a {} one: {claim} is volumeMode \
         {source_mode}, {destination} is {}; migrate into a new claim (volmig creates it with \
         the source's mode) or reuse a {source_mode} claim: converting needs a file system \
         volmig cannot choose for you",
        .source_mode.other(),
        .source_mode.other()
    )]
    VolumeModeConversion {
        claim: String,
        /// `persistentvolumeclaim "NAME" in namespace "NS"`.
        destination: String,
        source_mode: super::VolumeMode,
    },

    /// A reused claim's class or access modes are not the ones asked for.
    #[error(
        "persistentvolumeclaim {name:?} in namespace {namespace:?} has {what} {existing}, not the requested {requested}: \
         ask for what it has (or nothing) to reuse it as it is, or choose another --to"
    )]
    DestinationDiffers {
        namespace: String,
        name: String,
        /// `storage class` or `access modes`.
        what: String,
        existing: String,
        requested: String,
    },

    /// `--to-node` is not where the reused destination volume lives.
    #[error(
        "persistentvolumeclaim {name:?} in namespace {namespace:?} has its volume on {}, not on --to-node {node:?}: \
         drop --to-node, or choose another --to to create a volume there",
        list(.pinned_to, 8)
    )]
    DestinationPinnedElsewhere {
        namespace: String,
        name: String,
        pinned_to: Vec<String>,
        node: String,
    },

    /// Two claims of a set would be copied into one destination.
    #[error(
        "claims {} would all be copied into persistentvolumeclaim {name:?} in namespace {namespace:?}: \
         leave all but one out, or drop --to-namespace",
        list(.sources, 8)
    )]
    DuplicateDestination {
        namespace: String,
        name: String,
        sources: Vec<String>,
    },

    /// Some claims of a set cannot be moved (each was named with why).
    #[error(
        "{refused} of the {total} claims cannot be moved (see above): fix them, leave them out \
         of the selection, or pass --skip-refused to move the other {}",
        total - refused
    )]
    ClaimsRefused { refused: usize, total: usize },

    /// Another operation that has not ended copies into the destination.
    #[error("{0}")]
    DestinationBusy(String),

    /// Under `--cutover`, a claim whose StatefulSet would stop, with
    /// replica claims of that StatefulSet left out of the set.
    #[error(
        "statefulset {sts:?} in namespace {namespace:?} stops all its replicas for the cutover, \
         but its claims {} are not in this operation: add them, or take the whole set with \
         --workload statefulset/{sts}",
        list(.missing, 8)
    )]
    PartialStatefulSet {
        namespace: String,
        sts: String,
        missing: Vec<String>,
    },

    /// `--skip-refused` left nothing to move.
    #[error("none of the {total} claims selected can be moved (see above)")]
    NothingToMove { total: usize },
}

impl Refusal {
    /// Whether the same migration may work later with nothing changed: only
    /// a source claim still Pending (it binds by itself) is worth a wait.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Refusal::SourceNotBound { phase, .. } if phase == "Pending")
    }
}

/// `" (the classes could not be listed: ...)"` when they could not.
fn unreadable_note(error: &Option<String>) -> String {
    error
        .as_ref()
        .map(|e| format!(" (the classes could not be listed: {e})"))
        .unwrap_or_default()
}

/// Up to `max` names, comma-separated, with how many more there are.
fn list(names: &[String], max: usize) -> String {
    if names.is_empty() {
        return "none".to_string();
    }
    let shown = names[..names.len().min(max)].join(", ");
    match names.len().saturating_sub(max) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// Class names, the default marked as `kubectl get storageclass` does.
fn classes(available: &[String], default: Option<&str>) -> String {
    let marked: Vec<String> = available
        .iter()
        .map(|c| match default {
            Some(d) if d == c => format!("{c} (default)"),
            _ => c.clone(),
        })
        .collect();
    list(&marked, usize::MAX)
}

fn default_advice(default: Option<&str>) -> String {
    match default {
        Some(d) => format!(", or leave it out for the default, {d:?}"),
        None => String::new(),
    }
}

fn not_bound_advice(phase: &str, namespace: &str, name: &str) -> String {
    match phase {
        "Lost" => format!(
            " (its volume is gone): restore the persistentvolume it was bound to \
             (kubectl describe pvc {name} -n {namespace})"
        ),
        _ => format!(
            ": wait until it is Bound (kubectl get pvc {name} -n {namespace} -w); \
             a WaitForFirstConsumer claim binds when a pod first mounts it"
        ),
    }
}

fn unusable_advice(state: &str, namespace: &str, name: &str) -> String {
    match state {
        "Lost" => format!(
            " (its volume is gone): delete it (kubectl delete pvc {name} -n {namespace}) \
             or choose another --to"
        ),
        _ => ": wait until it is gone and run again, or choose another --to".to_string(),
    }
}

/// What a valid value of a mover resource flag looks like.
fn resource_example(flag: &str) -> &'static str {
    match flag {
        "--mover-cpu" => "a CPU quantity such as 100m, 0.5 or 2",
        _ => "a memory size such as 64Mi, 512Mi or 1Gi",
    }
}

/// `: give EXAMPLE`, unless the error already says what to write instead.
fn example(error: &QuantityError, example: &str) -> String {
    match error {
        QuantityError::UnknownSuffix { .. } => String::new(),
        _ => format!(": give {example}"),
    }
}

/// `did you mean …` for the short names kubectl prints (`RWO`).
fn access_mode_hint(value: &str) -> String {
    let full = match value.to_ascii_uppercase().as_str() {
        "RWO" => "ReadWriteOnce",
        "ROX" => "ReadOnlyMany",
        "RWX" => "ReadWriteMany",
        "RWOP" => "ReadWriteOncePod",
        _ => {
            return match ACCESS_MODES.iter().find(|m| m.eq_ignore_ascii_case(value)) {
                Some(m) => format!(" (did you mean {m}?)"),
                None => String::new(),
            }
        }
    };
    format!(" (did you mean {full}?)")
}
