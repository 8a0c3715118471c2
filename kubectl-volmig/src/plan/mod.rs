//! Planning: the cluster's objects in, a plan (or a refusal that says what
//! to do) out. Pure: no I/O, so every rule is tested on fixtures.
//!
//! - [`build`]: [`plan`], the checks and the destination claim's shape;
//! - [`fit`]: whether a pod may run on a node (`--to-node` of a cutover);
//! - [`placement`]: where the sender and the receiver run, and why;
//! - [`quantity`]: Kubernetes quantities to bytes and back;
//! - [`quiesce`]: who must stop for a cutover, and how (issue 16; not yet
//!   used by a command);
//! - [`refusal`]: why a migration cannot work, with what to do about it;
//! - [`rehome`]: a node-local volume's PV made again for the node its
//!   disks moved to (issue 19; not yet used by a command);
//! - [`select`]: which claims an operation of several migrates (issue 18);
//! - [`source`]: where the sender reads: the source itself, a snapshot or
//!   a clone of it (issue 24);
//! - [`values`]: the command's own values, refused before anything is read
//!   or created when the API server or the mover would reject them.

mod build;
pub mod fit;
pub mod many;
pub mod placement;
pub mod quantity;
pub mod quiesce;
mod refusal;
pub mod rehome;
pub mod security;
pub mod select;
pub mod source;
#[cfg(test)]
mod tests;
mod values;

pub use build::plan;
pub use refusal::Refusal;
pub use security::MoverSecurity;
pub use source::{Method, SnapshotSupport, SourceMethod};
pub use values::{check_values, mover_resources, start_timeout, MoverResources};

use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, Toleration,
};
use k8s_openapi::api::storage::v1::StorageClass;
use serde::{Deserialize, Serialize};

use crate::spec::MigrationSpec;

/// What the planner reads from the cluster. `None` is "not found".
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// The source claim (`spec.source`).
    pub source_claim: Option<PersistentVolumeClaim>,
    /// The volume the source claim is bound to.
    pub source_volume: Option<PersistentVolume>,
    /// Every storage class in the cluster.
    pub storage_classes: Vec<StorageClass>,
    /// The pods in the source claim's namespace.
    pub pods: Vec<Pod>,
    /// The destination namespace.
    pub destination_namespace: Option<Namespace>,
    /// The destination claim, if it exists already.
    pub destination_claim: Option<PersistentVolumeClaim>,
    /// The volume an existing destination claim is bound to.
    pub destination_volume: Option<PersistentVolume>,
    /// Every node (for `--to-node` and the app pods' nodes).
    pub nodes: Vec<Node>,
    /// The source namespace (its Pod Security labels, OpenShift ranges).
    pub source_namespace: Option<Namespace>,
    /// Set when the cluster is OpenShift.
    pub openshift: Option<security::OpenShift>,
    /// The VolumeSnapshot API and its classes, as served.
    pub snapshots: SnapshotSupport,
    /// The destination's cluster, when it is another one (`--to-context`);
    /// the fields above are then the source cluster's, but the destination
    /// namespace, claim and volume.
    pub remote: Option<RemoteInputs>,
}

/// What the planner reads of a destination in another cluster.
#[derive(Debug, Clone, Default)]
pub struct RemoteInputs {
    /// Every storage class of the destination's cluster.
    pub storage_classes: Vec<StorageClass>,
    /// Every node of the destination's cluster.
    pub nodes: Vec<Node>,
    /// Set when the destination's cluster is OpenShift.
    pub openshift: Option<security::OpenShift>,
}

impl Inputs {
    /// The storage classes the destination claim may be of.
    pub fn destination_classes(&self) -> &[StorageClass] {
        match &self.remote {
            Some(r) => &r.storage_classes,
            None => &self.storage_classes,
        }
    }

    /// The nodes the receiver may run on.
    pub fn destination_nodes(&self) -> &[Node] {
        match &self.remote {
            Some(r) => &r.nodes,
            None => &self.nodes,
        }
    }

    /// OpenShift on either side: its SCCs admit the movers there.
    pub fn openshift(&self) -> Option<security::OpenShift> {
        let remote = self.remote.as_ref().and_then(|r| r.openshift);
        self.openshift.or(remote)
    }
}

/// A migration that can run: the spec with every choice made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// The operation id (names and labels every object).
    pub operation: String,
    /// The request, as given.
    pub spec: MigrationSpec,
    pub source: SourceVolume,
    pub destination: DestinationClaim,
    pub placement: Placement,
    /// The movers' Pod Security profile and identity.
    #[serde(default)]
    pub security: MoverSecurity,
    /// Where the sender reads, and why (records before issue 24: direct).
    #[serde(default)]
    pub source_method: SourceMethod,
    /// What the user should know before it starts (printed with the plan;
    /// not recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Plan {
    /// The claim attempt `attempt`'s sender mounts: the source, or the
    /// snapshot's or clone's claim made for the attempt.
    pub fn sender_claim(&self, attempt: u32) -> String {
        match self.source_method.method.reads_copy() {
            true => crate::names::read_claim_name(&self.operation, attempt),
            false => self.spec.source.name.clone(),
        }
    }
}

/// The source as found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceVolume {
    /// The PV.
    pub volume: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    /// The PV's capacity (a quantity) and in bytes.
    pub capacity: String,
    pub capacity_bytes: u64,
    pub access_modes: Vec<String>,
    /// `Block`: a raw device, copied as one (records before issue 21:
    /// Filesystem).
    #[serde(default, skip_serializing_if = "VolumeMode::is_filesystem")]
    pub volume_mode: VolumeMode,
    /// Pods that mount the claim and have not finished.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub used_by: Vec<String>,
}

/// The destination claim: created by volmig or reused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationClaim {
    pub namespace: String,
    pub name: String,
    /// `None`: the cluster's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    /// The requested size (a quantity) and in bytes.
    pub size: String,
    pub size_bytes: u64,
    pub access_modes: Vec<String>,
    /// The source's, always: volmig never converts between modes.
    #[serde(default, skip_serializing_if = "VolumeMode::is_filesystem")]
    pub volume_mode: VolumeMode,
    /// `Create`: volmig creates the claim. `Reuse`: it exists; only the
    /// differences are sent.
    pub action: ClaimAction,
}

/// A volume's `volumeMode`: a file system mounted at a path, or a raw block
/// device mapped at a device path. Unset means Filesystem, as the API
/// server defaults it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum VolumeMode {
    #[default]
    Filesystem,
    Block,
}

impl VolumeMode {
    /// The mode a claim or volume spec names (`None`: Filesystem).
    pub fn of(mode: Option<&str>) -> VolumeMode {
        match mode {
            Some("Block") => VolumeMode::Block,
            _ => VolumeMode::Filesystem,
        }
    }

    pub fn is_filesystem(&self) -> bool {
        *self == VolumeMode::Filesystem
    }

    pub fn is_block(&self) -> bool {
        *self == VolumeMode::Block
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            VolumeMode::Filesystem => "Filesystem",
            VolumeMode::Block => "Block",
        }
    }

    /// The mode this one is not.
    pub fn other(&self) -> VolumeMode {
        match self {
            VolumeMode::Filesystem => VolumeMode::Block,
            VolumeMode::Block => VolumeMode::Filesystem,
        }
    }
}

impl std::fmt::Display for VolumeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClaimAction {
    Create,
    Reuse,
}

/// Where the two mover pods run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    pub sender: NodePlacement,
    pub receiver: NodePlacement,
}

/// One pod's placement: a required node (by `kubernetes.io/hostname`
/// affinity, never `nodeName`, so WaitForFirstConsumer claims still bind),
/// the tolerations it needs there, and the reason, in words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePlacement {
    /// `None`: the scheduler chooses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// That node's `kubernetes.io/hostname` label: what the affinity
    /// matches (usually, not always, the node's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    pub reason: String,
    /// The app pod whose node this is, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_pod: Option<String>,
    /// With no `node`: the hostnames the scheduler must not choose, full
    /// with a set's movers (`--per-node`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub avoid: Vec<String>,
}
