//! The commands of `kubectl volmig`, behind the thin binary.
//!
//! - [`args`]: clap definitions (kubectl's global flags, the subcommands);
//! - [`migrate`], [`control`] (resume, abort, cleanup), [`cutover`]
//!   (commit, rollback), [`show`] (status, logs): the commands;
//! - [`detach`]: `--detach`, and `drive`, what the in-cluster driver runs;
//! - [`drain`]: `drain NODE`, a cutover of every claim on a node;
//! - [`report`]: progress bars on a TTY, plain lines otherwise;
//! - [`notes`]: what is said on taking an operation up or letting it go;
//! - [`complete`]: shell completion, for `kubectl-volmig` and through
//!   kubectl's plugin completion.

/// `eprintln!` that does not panic on a closed pipe: see [`mover::stdio`].
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::err(&format!("{}\n", format_args!($($arg)*)))
    };
}

pub mod args;
mod clusters;
pub mod complete;
pub mod control;
mod cutover;
mod detach;
mod drain;
mod many;
mod migrate;
mod notes;
mod redirect;
mod rehome;
mod report;
mod set;
mod show;
mod sync;

pub use args::{Cli, Command, Output};

use crate::cluster::{self, Cluster, ClusterError};
use crate::driver::DriverError;
use crate::plan;
use crate::record::store::StoreError;
use crate::record::VolumeMigration;

/// Exit codes of `kubectl volmig`.
pub mod exit {
    /// The command did what it was asked (a migration succeeded).
    pub const OK: i32 = 0;
    /// An error: a refusal, an unreachable cluster, an invalid record.
    pub const ERROR: i32 = 1;
    /// Usage (clap's code).
    pub const USAGE: i32 = 2;
    /// The migration failed (out of attempts, or a failure no retry fixes).
    pub const FAILED: i32 = 3;
    /// The migration was aborted.
    pub const ABORTED: i32 = 4;
    /// A cutover was rolled back (by itself, after a failed final sync):
    /// the app runs on its old volume.
    pub const ROLLED_BACK: i32 = 5;
    /// Ctrl-C: the operation goes on in the cluster.
    pub const INTERRUPTED: i32 = 130;
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Refused(#[from] plan::Refusal),
    #[error(transparent)]
    Driver(Box<DriverError>),
    #[error(transparent)]
    Record(Box<StoreError>),
    #[error("cannot {action}: {message}")]
    Kube {
        action: String,
        message: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("{0}")]
    Usage(String),
    #[error("cannot print: {0}")]
    Print(String),
}

impl From<DriverError> for CliError {
    fn from(e: DriverError) -> Self {
        CliError::Driver(Box::new(e))
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        CliError::Record(Box::new(e))
    }
}

impl CliError {
    pub fn kube(action: impl Into<String>, source: kube::Error) -> CliError {
        CliError::Kube {
            action: action.into(),
            message: crate::cluster::kube_message(&source),
            source: Box::new(source),
        }
    }

    /// Whether the same command may work when run again.
    pub fn is_retryable(&self) -> bool {
        match self {
            CliError::Cluster(e) => e.is_retryable(),
            CliError::Refused(e) => e.is_retryable(),
            CliError::Driver(e) => e.is_retryable(),
            CliError::Record(e) => e.is_retryable(),
            CliError::Kube { source, .. } => {
                !matches!(source.as_ref(), kube::Error::Api(e) if e.code < 500)
            }
            CliError::Usage(_) | CliError::Print(_) => false,
        }
    }
}

/// Runs a parsed command line; returns the process exit code.
pub async fn run(cli: Cli) -> Result<i32, CliError> {
    // What needs no cluster.
    match &cli.command {
        Command::Version => return version(cli.output),
        Command::Completion(args) => {
            let mut script = Vec::new();
            complete::script(args.shell, &mut script);
            out(&String::from_utf8_lossy(&script));
            return Ok(exit::OK);
        }
        _ => {}
    }
    let cluster = cluster::connect(&cli.cluster_args()).await?;
    // Given the source's context, a cross-cluster operation is driven from
    // where its record is.
    let cluster = match clusters::operation_of(&cli.command) {
        Some(op) => clusters::with_record(cluster, op).await?,
        None => cluster,
    };
    let output = cli.output;
    let cli_paths = (cli.kubeconfig.clone(), cli.context.clone());
    match cli.command {
        Command::Migrate(args) => migrate::run(&cluster, *args, output).await,
        Command::Drain(args) => drain::run(&cluster, *args, output).await,
        Command::Rehome(args) => rehome::run(&cluster, args, output).await,
        Command::Status(args) => show::status(&cluster, args, output).await,
        Command::Logs(args) => show::logs(&cluster, args).await,
        Command::Resume(args) => control::resume(&cluster, args, output).await,
        Command::Sync(args) => sync::run(&cluster, args, output).await,
        Command::Drive(args) => detach::drive(&cluster, args).await,
        Command::Abort(args) => control::abort(&cluster, args, output).await,
        Command::Cleanup(args) => control::cleanup(&cluster, args).await,
        Command::Commit(args) => cutover::commit(&cluster, args, output).await,
        Command::Rollback(args) => cutover::rollback(&cluster, args, output).await,
        Command::Monitor(args) => monitor(&cluster, &cli_paths, args).await,
        Command::Version | Command::Completion(_) => Ok(exit::OK),
    }
}

/// What `kubectl volmig version` reports.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionInfo {
    pub version: &'static str,
    /// The commit built, as the release build recorded it.
    pub revision: &'static str,
    /// The image `migrate` runs unless `--mover-image` says otherwise.
    pub mover_image: &'static str,
    /// The image the in-cluster driver runs (`migrate --detach`).
    pub driver_image: &'static str,
    /// `os/arch` of this binary.
    pub platform: String,
}

impl VersionInfo {
    pub fn this() -> VersionInfo {
        VersionInfo {
            version: env!("CARGO_PKG_VERSION"),
            revision: option_env!("VOLMIG_GIT_REVISION").unwrap_or("unknown"),
            mover_image: crate::spec::DEFAULT_MOVER_IMAGE,
            driver_image: crate::spec::DEFAULT_DRIVER_IMAGE,
            // As kubectl and krew name platforms (Go's GOOS/GOARCH).
            platform: format!(
                "{}/{}",
                match std::env::consts::OS {
                    "macos" => "darwin",
                    os => os,
                },
                match std::env::consts::ARCH {
                    "x86_64" => "amd64",
                    "aarch64" => "arm64",
                    arch => arch,
                }
            ),
        }
    }
}

fn version(output: Output) -> Result<i32, CliError> {
    let info = VersionInfo::this();
    let text = match output {
        Output::Table => format!(
            "kubectl-volmig {} ({}, revision {})\ndefault mover image: {}\ndriver image: {}\n",
            info.version, info.platform, info.revision, info.mover_image, info.driver_image
        ),
        Output::Json => serde_json::to_string_pretty(&info)
            .map(|j| j + "\n")
            .map_err(|e| CliError::Print(e.to_string()))?,
        Output::Yaml => {
            serde_saphyr::to_string(&info).map_err(|e| CliError::Print(e.to_string()))?
        }
    };
    out(&text);
    Ok(exit::OK)
}

/// Writes `text` to stdout. `false` when it cannot be written: the caller
/// stops printing. A closed pipe (`| head`) ends the process quietly, as it
/// ends kubectl ([`mover::stdio`]), instead of panicking as `print!` would.
pub(crate) fn out(text: &str) -> bool {
    mover::stdio::out(text)
}

/// Writes `text` to stderr, as [`out`] does to stdout.
pub(crate) fn err(text: &str) {
    mover::stdio::err(text);
}

/// `kubectl volmig monitor`: the TUI until the user quits.
async fn monitor(
    cluster: &Cluster,
    (kubeconfig, context): &(Option<std::path::PathBuf>, Option<String>),
    args: args::MonitorArgs,
) -> Result<i32, CliError> {
    // `r` starts `resume` as a process of its own, on the same cluster.
    if let Some(k) = kubeconfig {
        let _ = crate::tui::app::KUBECONFIG.set(k.clone());
    }
    if let Some(c) = context {
        let _ = crate::tui::app::CONTEXT.set(c.clone());
    }
    let _ = crate::tui::app::WHO.set(crate::names::who(cluster.user.as_deref()));
    let scope = if args.all_namespaces {
        crate::tui::Scope::All
    } else {
        crate::tui::Scope::Namespace(cluster.namespace.clone())
    };
    crate::tui::app::run(cluster.client.clone(), scope, args.operation)
        .await
        .map_err(|e| CliError::Usage(e.to_string()))?;
    Ok(exit::OK)
}

/// A change the record declined (it is not in the state the command
/// needs) is the user's to look at, as a usage error; other store errors
/// stay what they are.
pub(crate) fn declined_as_usage(e: StoreError) -> CliError {
    match e {
        StoreError::Changed(m) => CliError::Usage(m),
        e => e.into(),
    }
}

/// The exit code for an operation's phase.
pub fn exit_for(vm: &VolumeMigration) -> i32 {
    exit_for_phase(vm.status.phase)
}

/// The exit code for a phase (of a claim, or of a set).
pub fn exit_for_phase(phase: crate::record::Phase) -> i32 {
    use crate::record::Phase;
    match phase {
        Phase::Succeeded | Phase::Running | Phase::Pending => exit::OK,
        Phase::Failed => exit::FAILED,
        Phase::Aborted => exit::ABORTED,
        Phase::RolledBack => exit::ROLLED_BACK,
    }
}
