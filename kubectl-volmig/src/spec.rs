//! What the user asked for: a migration's spec, as recorded in the
//! operation record and printed by `-o yaml`.

use serde::{Deserialize, Serialize};

mod clusters;

pub use clusters::{ClusterRef, Clusters, NetworkMode, NetworkPath};

/// The default mover image; its tag follows the plugin's version.
pub const DEFAULT_MOVER_IMAGE: &str = concat!("ghcr.io/volmig/mover:", env!("CARGO_PKG_VERSION"));

/// The in-cluster driver's image (`kubectl-volmig` alone, `FROM scratch`);
/// its tag follows the plugin's version.
pub const DEFAULT_DRIVER_IMAGE: &str = concat!("ghcr.io/volmig/driver:", env!("CARGO_PKG_VERSION"));

/// Attempts after the first that a failure may cost before the operation
/// fails (as a Job's `backoffLimit`).
pub const DEFAULT_BACKOFF_LIMIT: u32 = 6;

/// A migration: copy one claim's data into another claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationSpec {
    pub source: ClaimRef,
    pub destination: DestinationSpec,
    pub transfer: TransferOptions,
    pub retry: RetryPolicy,
    pub mover: MoverOptions,
    /// Move the app onto the new volume under the source claim's name
    /// (`--cutover`); absent: copy only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cutover: Option<CutoverSpec>,
    /// Into another cluster (`--to-context`); absent: one cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Clusters>,
}

impl MigrationSpec {
    /// `source` copied into `destination` with every option at its default:
    /// the destination's class, size and access modes left to the planner,
    /// verification on, the default retries and mover.
    pub fn new(source: ClaimRef, destination: ClaimRef) -> MigrationSpec {
        MigrationSpec {
            source,
            destination: DestinationSpec {
                namespace: destination.namespace,
                name: destination.name,
                storage_class: None,
                size: None,
                access_modes: Vec::new(),
                node: None,
                reuse: false,
                allow_shrink: false,
            },
            transfer: TransferOptions::default(),
            retry: RetryPolicy::default(),
            mover: MoverOptions::default(),
            cutover: None,
            clusters: None,
        }
    }
}

/// The longest final sync the pre-copy rounds aim for (`--max-downtime`).
pub const DEFAULT_MAX_DOWNTIME_SECONDS: u64 = 30;
/// The most pre-copy rounds before the app is stopped anyway
/// (`--precopy-rounds`).
pub const DEFAULT_PRECOPY_ROUNDS: u32 = 5;

/// How the app moves onto the new volume (`--cutover`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CutoverSpec {
    /// Pre-copy rounds go on until the last one predicts a final sync
    /// this short (seconds).
    pub max_downtime_seconds: u64,
    /// ... or until this many rounds have run (at least 1).
    pub precopy_rounds: u32,
    /// Delete the old volume once the app runs on the new one (`--commit`);
    /// otherwise it waits for `kubectl volmig commit`.
    #[serde(default)]
    pub commit: bool,
    /// Re-create the StatefulSet that made the claim with the new class in
    /// its claim template (`--update-owner`).
    #[serde(default)]
    pub update_owner: bool,
}

impl Default for CutoverSpec {
    fn default() -> Self {
        CutoverSpec {
            max_downtime_seconds: DEFAULT_MAX_DOWNTIME_SECONDS,
            precopy_rounds: DEFAULT_PRECOPY_ROUNDS,
            commit: false,
            update_owner: false,
        }
    }
}

/// A claim by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
}

impl ClaimRef {
    pub fn new(namespace: &str, name: &str) -> ClaimRef {
        ClaimRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The destination claim as requested. `None` fields are decided by the
/// planner (from the source) and recorded in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationSpec {
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    /// A Kubernetes quantity (`10Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// `ReadWriteOnce`, `ReadWriteMany`, `ReadOnlyMany`, `ReadWriteOncePod`;
    /// empty: the source's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_modes: Vec<String>,
    /// Pin the receiver (and so a node-local destination volume) here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Copy into an existing claim (only differences are sent).
    #[serde(default)]
    pub reuse: bool,
    /// Allow a destination smaller than the source's capacity.
    #[serde(default)]
    pub allow_shrink: bool,
}

/// Options handed to the mover (rsync's vocabulary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransferOptions {
    /// Delete destination files the source does not have.
    #[serde(default)]
    pub delete: bool,
    /// zstd on literal data.
    #[serde(default)]
    pub compress: bool,
    /// Compare both trees by BLAKE3 after the copy.
    #[serde(default = "yes")]
    pub verify: bool,
    /// The mover's `--bwlimit` (`20M`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bwlimit: Option<String>,
    /// Where the sender reads (`--copy-method`); the plan records what
    /// `auto` resolved to.
    #[serde(default, skip_serializing_if = "CopyMethod::is_auto")]
    pub copy_method: CopyMethod,
    /// The VolumeSnapshotClass of `--copy-method snapshot`; none: the
    /// default class of the source volume's CSI driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_class: Option<String>,
}

/// What `--copy-method` asks for: what the sender mounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
pub enum CopyMethod {
    /// `direct`, unless the source cannot be mounted beside its app (a
    /// ReadWriteOncePod claim in use): then `snapshot`, else `clone`.
    #[default]
    Auto,
    /// The source claim itself.
    Direct,
    /// A claim restored from a VolumeSnapshot of the source, taken for
    /// each attempt (each pre-copy round of a cutover).
    Snapshot,
    /// A CSI clone of the source (`dataSource: PersistentVolumeClaim`).
    Clone,
}

impl CopyMethod {
    pub fn is_auto(&self) -> bool {
        *self == CopyMethod::Auto
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CopyMethod::Auto => "auto",
            CopyMethod::Direct => "direct",
            CopyMethod::Snapshot => "snapshot",
            CopyMethod::Clone => "clone",
        }
    }
}

impl Default for TransferOptions {
    /// No deletes, no compression, no rate cap; verification on.
    fn default() -> Self {
        TransferOptions {
            delete: false,
            compress: false,
            verify: true,
            bwlimit: None,
            copy_method: CopyMethod::Auto,
            snapshot_class: None,
        }
    }
}

/// How failed attempts are retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Retries after the first attempt before the operation fails.
    pub backoff_limit: u32,
    /// First delay between attempts; it doubles, up to 5 minutes.
    pub backoff_seconds: u32,
    /// `--reuse-wait`: how long a destination whose node is away is waited
    /// for before a fresh one is made.
    #[serde(default = "default_reuse_wait")]
    pub reuse_wait_seconds: u64,
    /// `--reuse-limit`: attempts in a row that may fail on the
    /// destination's data before it is emptied.
    #[serde(default = "default_reuse_limit")]
    pub reuse_limit: u32,
}

/// `--reuse-wait` by default: long enough for a node to reboot.
pub const DEFAULT_REUSE_WAIT_SECONDS: u64 = 600;
/// `--reuse-limit` by default.
pub const DEFAULT_REUSE_LIMIT: u32 = 3;

fn default_reuse_wait() -> u64 {
    DEFAULT_REUSE_WAIT_SECONDS
}

fn default_reuse_limit() -> u32 {
    DEFAULT_REUSE_LIMIT
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            backoff_limit: DEFAULT_BACKOFF_LIMIT,
            backoff_seconds: 10,
            reuse_wait_seconds: DEFAULT_REUSE_WAIT_SECONDS,
            reuse_limit: DEFAULT_REUSE_LIMIT,
        }
    }
}

/// The mover pods' image and resources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MoverOptions {
    pub image: String,
    pub cpu_request: String,
    pub memory_request: String,
    pub memory_limit: String,
    /// `--security`: the Pod Security profile the movers must meet.
    #[serde(default)]
    pub security: SecurityMode,
    /// `--run-as UID[:GID]`: who restricted movers run as when no app
    /// pod or namespace says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<RunAs>,
}

/// What `--security` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
pub enum SecurityMode {
    /// `restricted` where a mover's namespace enforces it (or on
    /// OpenShift), `baseline` elsewhere.
    #[default]
    Auto,
    /// Root with the few capabilities each side needs: every owner kept.
    Baseline,
    /// The app's own identity, no capability: owners are not kept.
    Restricted,
}

/// `--run-as UID[:GID]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    pub uid: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<i64>,
}

impl std::str::FromStr for RunAs {
    type Err = String;

    fn from_str(text: &str) -> Result<RunAs, String> {
        let id = |s: &str| {
            s.parse::<u32>()
                .map(i64::from)
                .map_err(|_| format!("{s:?} is not a numeric user or group id"))
        };
        let (uid, gid) = match text.split_once(':') {
            Some((u, g)) => (id(u)?, Some(id(g)?)),
            None => (id(text)?, None),
        };
        if uid == 0 {
            return Err("restricted movers cannot run as root (uid 0)".to_string());
        }
        Ok(RunAs { uid, gid })
    }
}

impl Default for MoverOptions {
    fn default() -> Self {
        MoverOptions {
            image: DEFAULT_MOVER_IMAGE.to_string(),
            cpu_request: "100m".to_string(),
            memory_request: "64Mi".to_string(),
            memory_limit: "512Mi".to_string(),
            security: SecurityMode::Auto,
            run_as: None,
        }
    }
}

fn yes() -> bool {
    true
}
