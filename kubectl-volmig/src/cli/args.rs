//! The command line, as clap parses it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use clap_complete::engine::ArgValueCandidates;

use crate::cluster::ClusterArgs;
use crate::spec;

/// Move a PersistentVolumeClaim's data to a new claim (another storage
/// class, size or namespace), with resumable retries and exact progress.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl volmig",
    bin_name = "kubectl volmig",
    version,
    after_help = "Examples:\n  kubectl volmig migrate data --to data-fast --to-storage-class fast\n  kubectl volmig status\n  kubectl volmig resume data-x7k2p"
)]
pub struct Cli {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        help_heading = "Global options"
    )]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        help_heading = "Global options"
    )]
    pub context: Option<String>,
    /// Namespace (default: the context's). Operations live in their destination namespace.
    #[arg(
        short = 'n',
        long,
        global = true,
        value_name = "NS",
        help_heading = "Global options"
    )]
    pub namespace: Option<String>,
    /// Output format for commands that print operations.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table, help_heading = "Global options")]
    pub output: Output,
    /// Log what volmig does on stderr (-v: info, -vv: debug).
    #[arg(short = 'v', long, global = true, action = clap::ArgAction::Count, help_heading = "Global options")]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    pub fn cluster_args(&self) -> ClusterArgs {
        ClusterArgs {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            namespace: self.namespace.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Copy a claim's data to a new (or existing) claim.
    Migrate(Box<MigrateArgs>),
    /// Move every node-local claim off NODE, apps included (a cutover of
    /// them all): --to-node N2, or --to-storage-class SC; migrate's flags.
    Drain(Box<DrainArgs>),
    /// Pin node-local volumes to the node their disks moved to: each PV made
    /// again with a new node affinity, the app stopped meanwhile; no data moves.
    Rehome(RehomeArgs),
    /// Show operations in the namespace, or one in detail.
    Status(StatusArgs),
    /// Print the mover logs of an operation's attempt.
    Logs(LogsArgs),
    /// Reattach to an operation, or run its attempts again if no one drives it.
    Resume(ResumeArgs),
    /// Copy what changed since an operation's last copy (another round);
    /// --final, once the app is stopped, verifies and ends it.
    Sync(SyncArgs),
    /// Stop an operation's pods and mark it Aborted (the destination keeps its data).
    Abort(OpArgs),
    /// Remove everything an operation created except the destination claim.
    Cleanup(CleanupArgs),
    /// Finish a cutover: delete the old volume (and its data, if its reclaim policy was Delete).
    Commit(OpArgs),
    /// Undo a cutover: the claim goes back to its old volume (writes made since are synced back).
    Rollback(RollbackArgs),
    /// A live view of the operations: progress, attempts, placement, logs.
    Monitor(MonitorArgs),
    /// Print the plugin's version, git revision and default mover image.
    Version,
    /// What the in-cluster driver's pod runs (--detach): drive OP until it
    /// ends, following another live driver first.
    #[command(hide = true)]
    Drive(DriveArgs),
    /// Print a shell completion script for `kubectl-volmig` (see `--help`).
    #[command(long_about = COMPLETION_HELP)]
    Completion(CompletionArgs),
}

const COMPLETION_HELP: &str = "Print a shell completion script for `kubectl-volmig`.

For `kubectl volmig <TAB>` (kubectl 1.26 and newer), put the release archive's
kubectl_complete-volmig on PATH instead: kubectl runs it, and it asks
`kubectl-volmig __complete`, which also completes operation names from the cluster.

  bash:        source <(kubectl-volmig completion bash)
  zsh:         kubectl-volmig completion zsh > \"${fpath[1]}/_kubectl-volmig\"
  fish:        kubectl-volmig completion fish | source
  powershell:  kubectl-volmig completion powershell | Out-String | Invoke-Expression";

#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct MonitorArgs {
    /// Open this operation's details.
    #[arg(value_name = "OP", add = ArgValueCandidates::new(super::complete::operations))]
    pub operation: Option<String>,
    /// Operations in every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

/// `migrate`: which claims, and how.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub claims: ClaimArgs,
    #[command(flatten)]
    pub options: MigrateOptions,
}

/// `migrate`'s flags are read as `args.to_node`; the claims as `args.claims`.
impl std::ops::Deref for MigrateArgs {
    type Target = MigrateOptions;

    fn deref(&self) -> &MigrateOptions {
        &self.options
    }
}

/// Which claims `migrate` moves.
#[derive(Debug, Default, Args)]
#[command(group(clap::ArgGroup::new("claims").required(true).args(["source", "workload", "selector", "all", "from_storage_class", "from_node"])))]
pub struct ClaimArgs {
    /// The claims to copy (in -n's namespace); several make one operation.
    #[arg(value_name = "SOURCE_PVC")]
    pub source: Vec<String>,
    /// Every claim the pods of this workload mount (deployment/NAME,
    /// statefulset/NAME: all its replicas' claims; replicaset/NAME, pod/NAME).
    #[arg(long, value_name = "KIND/NAME", help_heading = "Several claims")]
    pub workload: Option<String>,
    /// Every claim with these labels (a label selector: tier=db,app!=x).
    #[arg(
        short = 'l',
        long,
        value_name = "SELECTOR",
        help_heading = "Several claims"
    )]
    pub selector: Option<String>,
    /// Every claim in the namespace.
    #[arg(long, help_heading = "Several claims")]
    pub all: bool,
    /// Every claim of this storage class (its volume's class, else its own).
    #[arg(long, value_name = "SC", help_heading = "Several claims")]
    pub from_storage_class: Option<String>,
    /// Every claim whose volume is pinned to this node by node affinity (a
    /// node-local volume), in every namespace.
    #[arg(long, value_name = "NODE", help_heading = "Several claims")]
    pub from_node: Option<String>,
    /// With -l or --from-storage-class: in every namespace.
    #[arg(short = 'A', long, help_heading = "Several claims")]
    pub all_namespaces: bool,
}

/// How `migrate` (and `drain`) move the claims.
#[derive(Debug, Args)]
pub struct MigrateOptions {
    /// How many claims copy at once.
    #[arg(long, value_name = "N", default_value_t = crate::record::group::DEFAULT_PARALLEL, value_parser = clap::value_parser!(u32).range(1..=64), help_heading = "Several claims")]
    pub parallel: u32,
    /// The most mover pods on one node at once.
    #[arg(long, value_name = "M", default_value_t = crate::record::group::DEFAULT_PER_NODE, value_parser = clap::value_parser!(u32).range(2..=256), help_heading = "Several claims")]
    pub per_node: u32,
    /// Go on without the claims the plan refuses (each is named, with why).
    #[arg(long, help_heading = "Several claims")]
    pub skip_refused: bool,
    /// Destination claim name (default: SOURCE_PVC-migrated, or SOURCE_PVC in another namespace); one claim only.
    #[arg(long, value_name = "NAME")]
    pub to: Option<String>,
    /// Destination namespace (default: the source's).
    #[arg(long, value_name = "NS")]
    pub to_namespace: Option<String>,
    /// Copy into the cluster of this kubeconfig context: the receiver, the
    /// destination claim and the record live there (default claim name:
    /// the source's).
    #[arg(long, value_name = "CTX", help_heading = "Another cluster")]
    pub to_context: Option<String>,
    /// The kubeconfig file that has --to-context (default: the source's).
    #[arg(
        long,
        value_name = "PATH",
        requires = "to_context",
        help_heading = "Another cluster"
    )]
    pub to_kubeconfig: Option<PathBuf>,
    /// How the sender reaches the receiver in the other cluster:
    /// loadbalancer (a LoadBalancer Service's address), nodeport (a
    /// destination node's address), tunnel (through both API servers and
    /// this client); auto tries them in that order.
    #[arg(long, value_enum, value_name = "PATH", default_value_t = spec::NetworkMode::Auto,
          requires = "to_context", help_heading = "Another cluster")]
    pub network: spec::NetworkMode,
    /// Destination storage class (default: the cluster's default class; with
    /// --to-node, the source's).
    #[arg(long, value_name = "SC")]
    pub to_storage_class: Option<String>,
    /// Destination size, a quantity such as 20Gi (default: the source's capacity).
    #[arg(long, value_name = "SIZE")]
    pub to_size: Option<String>,
    /// Destination access mode (repeatable; default: the source's).
    #[arg(long, value_name = "MODE")]
    pub to_access_mode: Vec<String>,
    /// Run the receiver on this node (a node-local destination is created there).
    #[arg(long, value_name = "NODE")]
    pub to_node: Option<String>,
    /// Copy into an existing destination claim (only differences are sent).
    #[arg(long)]
    pub reuse: bool,
    /// Allow a destination smaller than the source's capacity (the copy fails if the data does not fit).
    #[arg(long)]
    pub allow_shrink: bool,
    /// Failed attempts retried before the operation fails.
    #[arg(long, value_name = "N", default_value_t = spec::DEFAULT_BACKOFF_LIMIT)]
    pub backoff_limit: u32,
    /// Delay before the first retry, in seconds; it doubles up to 5 minutes.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub backoff: u32,
    /// How long to wait for a destination whose node is away (NotReady,
    /// unreachable) before making a fresh one and copying in full.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub reuse_wait: std::time::Duration,
    /// Attempts in a row that may fail on the destination's data (verification
    /// differences, I/O errors) before it is emptied and filled afresh.
    #[arg(long, value_name = "N", default_value_t = spec::DEFAULT_REUSE_LIMIT,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub reuse_limit: u32,
    /// How long a mover pod may take to start, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub start_timeout: u64,
    /// The mover image.
    #[arg(long, value_name = "IMAGE", default_value = spec::DEFAULT_MOVER_IMAGE)]
    pub mover_image: String,
    /// CPU request of each mover pod.
    #[arg(long, value_name = "CPU", default_value = "100m")]
    pub mover_cpu: String,
    /// Memory request of each mover pod.
    #[arg(long, value_name = "MEMORY", default_value = "64Mi")]
    pub mover_memory: String,
    /// Memory limit of each mover pod.
    #[arg(long, value_name = "MEMORY", default_value = "512Mi")]
    pub mover_memory_limit: String,
    /// The Pod Security profile the mover pods meet: restricted runs them as
    /// the app's own user and groups with no capability (owners are not
    /// kept); auto picks restricted where a mover's namespace enforces it.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = spec::SecurityMode::Auto)]
    pub security: spec::SecurityMode,
    /// Who restricted movers run as when no pod of the app says it (and the
    /// namespace has no OpenShift UID range): a numeric uid, and gid.
    #[arg(long, value_name = "UID[:GID]")]
    pub run_as: Option<spec::RunAs>,
    /// Delete destination files the source does not have (rsync --delete).
    #[arg(long)]
    pub delete: bool,
    /// Compress data on the wire (zstd).
    #[arg(short = 'z', long)]
    pub compress: bool,
    /// Skip the BLAKE3 comparison of both trees after the copy.
    #[arg(long)]
    pub no_verify: bool,
    /// Cap the transfer rate (rsync's units: 500 = KiB/s, 20M, 1.5G).
    #[arg(long, value_name = "RATE")]
    pub bwlimit: Option<String>,
    /// What the sender reads: the source itself (direct), a claim restored
    /// from a VolumeSnapshot of it taken for each attempt (snapshot), or a
    /// CSI clone of it (clone). auto: direct, unless the source is a
    /// ReadWriteOncePod claim in use; then snapshot, else clone. With
    /// --cutover, the final sync reads the source itself.
    #[arg(long, value_enum, default_value_t = spec::CopyMethod::Auto, value_name = "METHOD")]
    pub copy_method: spec::CopyMethod,
    /// The VolumeSnapshotClass for --copy-method snapshot (default: the one
    /// default class of the source volume's CSI driver).
    #[arg(long, value_name = "CLASS")]
    pub snapshot_class: Option<String>,
    /// Print the plan and the objects it would create; create nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Drive the operation from the cluster (a Job in the destination
    /// namespace, with only the permissions it needs) and return: it goes on,
    /// cutover included, without this client.
    #[arg(long)]
    pub detach: bool,
    /// The image of the in-cluster driver (--detach).
    #[arg(long, value_name = "IMAGE", default_value = spec::DEFAULT_DRIVER_IMAGE)]
    pub driver_image: String,
    /// Move the app onto the new volume under the claim's own name: pre-copy
    /// while it runs, stop it, final sync, swap, start it again.
    #[arg(long, help_heading = "Cutover")]
    pub cutover: bool,
    /// The downtime the pre-copy rounds aim for: they stop once the last one
    /// took this long or less (30s, 2m, 1m30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Cutover")]
    pub max_downtime: Option<std::time::Duration>,
    /// The most pre-copy rounds before the app is stopped anyway.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100), help_heading = "Cutover")]
    pub precopy_rounds: Option<u32>,
    /// Delete the old volume as soon as the app runs on the new one (without
    /// it, `kubectl volmig commit` does that, and `rollback` is still possible).
    #[arg(long, help_heading = "Cutover")]
    pub commit: bool,
    /// For a StatefulSet's claim: re-create the StatefulSet (its pods and
    /// claims stay) with the new class in its claim template, so new replicas
    /// get it too.
    #[arg(long, help_heading = "Cutover")]
    pub update_owner: bool,
}

impl MigrateOptions {
    /// The cutover flags given without `--cutover`, which they need.
    pub fn cutover_flags_without_cutover(&self) -> Option<&'static str> {
        if self.cutover {
            return None;
        }
        [
            (self.max_downtime.is_some(), "--max-downtime"),
            (self.precopy_rounds.is_some(), "--precopy-rounds"),
            (self.commit, "--commit"),
            (self.update_owner, "--update-owner"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}

/// `drain NODE`: `migrate --from-node NODE --cutover` of every namespace.
#[derive(Debug, Args)]
pub struct DrainArgs {
    /// The node to free of node-local volumes.
    #[arg(value_name = "NODE")]
    pub node: String,
    #[command(flatten)]
    pub options: MigrateOptions,
}

/// `rehome CLAIM|pv/NAME --to-node NODE | --topology KEY=VALUE`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["volume", "all_from_node"])))]
#[command(group(clap::ArgGroup::new("where").required(true).args(["to_node", "topology"])))]
pub struct RehomeArgs {
    /// A claim (in -n's namespace), or a volume as pv/NAME.
    #[arg(value_name = "CLAIM|pv/NAME")]
    pub volume: Option<String>,
    /// Every volume pinned to this node (which may be gone).
    #[arg(long, value_name = "NODE")]
    pub all_from_node: Option<String>,
    /// The node the disks are attached to now.
    #[arg(long, value_name = "NODE")]
    pub to_node: Option<String>,
    /// Pin to a node label instead of a host, such as a pool's own key
    /// that may move again.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_label)]
    pub topology: Option<(String, String)>,
    /// The ZFS pool or LVM volume group the disks are in on the new node,
    /// when it has another name there.
    #[arg(long, value_name = "POOL")]
    pub pool: Option<String>,
    /// Print every change (each PV before and after) and make none.
    #[arg(long)]
    pub dry_run: bool,
}

/// `KEY=VALUE`.
fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err("not KEY=VALUE".to_string()),
    }
}

/// A duration as `30s`, `2m`, `1m30s` or `PT30S`.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let d: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("not a duration such as 30s, 2m or 1m30s: {e}"))?;
    std::time::Duration::try_from(d).map_err(|_| "a duration cannot be negative".to_string())
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// One operation, in detail.
    #[arg(value_name = "OP", add = ArgValueCandidates::new(super::complete::operations))]
    pub operation: Option<String>,
    /// Operations in every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The operation (its name, as `status` lists it; in -n's namespace, the destination's).
    #[arg(value_name = "OP", add = ArgValueCandidates::new(super::complete::operations))]
    pub operation: String,
    /// The attempt (default: the latest).
    #[arg(long, value_name = "N")]
    pub attempt: Option<u32>,
    /// Only this side.
    #[arg(long, value_enum)]
    pub role: Option<Role>,
    /// Follow the log while the pod runs (the receiver's, unless --role).
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The in-cluster driver's log (--detach), every pod its Job ran.
    #[arg(long, conflicts_with_all = ["attempt", "role"])]
    pub driver: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    Receiver,
    Sender,
}

/// `sync OP [--final]`.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The operation (its name, as `status` lists it; in -n's namespace, the destination's).
    #[arg(value_name = "OP", add = ArgValueCandidates::new(super::complete::operations))]
    pub operation: String,
    /// The last round, run once the app is stopped: it verifies both trees,
    /// then ends the operation (no round runs after it).
    #[arg(long = "final")]
    pub r#final: bool,
    /// How long a mover pod may take to start, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub start_timeout: u64,
}

/// `resume OP`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The operation (its name, as `status` lists it; in -n's namespace, the destination's).
    #[arg(value_name = "OP", add = ArgValueCandidates::new(super::complete::operations))]
    pub operation: String,
    /// Hand the operation to a driver in the cluster (as `migrate --detach`)
    /// and return.
    #[arg(long, conflicts_with = "force")]
    pub detach: bool,
    /// The image of the in-cluster driver (--detach).
    #[arg(long, value_name = "IMAGE", default_value = spec::DEFAULT_DRIVER_IMAGE)]
    pub driver_image: String,
    /// Take over even if another client's heartbeat is recent.
    #[arg(long)]
    pub force: bool,
    /// How long a mover pod may take to start, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub start_timeout: u64,
    /// Give the destination up for a fresh one on this node (its node is
    /// away, say): the next attempt copies in full there, without waiting.
    #[arg(long, value_name = "NODE")]
    pub to_node: Option<String>,
    /// Give the destination up for a fresh one of this class.
    #[arg(long, value_name = "CLASS")]
    pub to_storage_class: Option<String>,
}

#[derive(Debug, Args)]
pub struct DriveArgs {
    /// The operation, in -n's namespace.
    #[arg(value_name = "OP")]
    pub operation: String,
    /// How long a mover pod may take to start, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub start_timeout: u64,
}

#[derive(Debug, Args)]
pub struct OpArgs {
    /// The operation (its name, as `status` lists it; in -n's namespace, the destination's).
    #[arg(value_name = "OP", add = ArgValueCandidates::new(super::complete::operations))]
    pub operation: String,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The operation (its name, as `status` lists it; in -n's namespace, the destination's).
    #[arg(value_name = "OP", add = ArgValueCandidates::new(super::complete::operations))]
    pub operation: String,
    /// After the cutover succeeded, do not copy the app's writes on the new volume back.
    #[arg(long)]
    pub discard_new_writes: bool,
    /// Delete the new volume afterwards (it is kept for inspection by default).
    #[arg(long)]
    pub delete_new: bool,
    /// Take over even if another client's heartbeat is recent.
    #[arg(long)]
    pub force: bool,
    /// How long a mover pod may take to start, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub start_timeout: u64,
}

#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// The operation (its name, as `status` lists it; in -n's namespace, the destination's).
    #[arg(value_name = "OP", add = ArgValueCandidates::new(super::complete::operations))]
    pub operation: String,
    /// Clean up even an operation another client is driving.
    #[arg(long)]
    pub force: bool,
}
