//! What a release is built from: the workspace, its version, its commit.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why the project could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{command} failed: {stderr}")]
    Failed { command: String, stderr: String },
    #[error("cannot read `cargo metadata`: {0}")]
    Metadata(String),
    #[error("the crates disagree on the version: kubectl-volmig {plugin}, mover {mover} (a release has one version)")]
    VersionMismatch { plugin: String, mover: String },
}

/// Where and what the release is.
#[derive(Debug, Clone)]
pub struct Project {
    /// The workspace root.
    pub root: PathBuf,
    /// `kubectl-volmig`'s (and `mover`'s) version, without the `v`.
    pub version: String,
    /// The commit built (`git rev-parse HEAD`), `-dirty` when the work
    /// tree has changes; `unknown` outside git.
    pub revision: String,
    /// The commit's time in seconds since the epoch: the time stamp of
    /// every file in the archives and the image, so a rebuild of the same
    /// commit gives the same bytes (`SOURCE_DATE_EPOCH` when set).
    pub epoch: u64,
}

impl Project {
    /// The release's tag: `v` and the version.
    pub fn tag(&self) -> String {
        format!("v{}", self.version)
    }

    /// Reads the workspace at `root`.
    pub fn read(root: &Path) -> Result<Project, ProjectError> {
        let metadata = output(
            Command::new(cargo())
                .args(["metadata", "--no-deps", "--format-version", "1"])
                .current_dir(root),
        )?;
        let metadata: serde_json::Value =
            serde_json::from_str(&metadata).map_err(|e| ProjectError::Metadata(e.to_string()))?;
        let version_of = |name: &str| -> Result<String, ProjectError> {
            metadata["packages"]
                .as_array()
                .and_then(|packages| packages.iter().find(|p| p["name"] == name))
                .and_then(|p| p["version"].as_str())
                .map(str::to_string)
                .ok_or_else(|| ProjectError::Metadata(format!("no package {name}")))
        };
        let version = version_of("kubectl-volmig")?;
        let mover = version_of("mover")?;
        if mover != version {
            return Err(ProjectError::VersionMismatch {
                plugin: version,
                mover,
            });
        }
        let git = |args: &[&str]| output(Command::new("git").args(args).current_dir(root));
        let (revision, commit_time) = match git(&["rev-parse", "HEAD"]) {
            Ok(rev) => {
                let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                    .map(|s| !s.trim().is_empty())
                    .unwrap_or(false);
                let time = git(&["log", "-1", "--format=%ct"])?;
                let rev = rev.trim().to_string();
                (
                    if dirty { format!("{rev}-dirty") } else { rev },
                    time.trim().parse().ok(),
                )
            }
            Err(_) => ("unknown".to_string(), None),
        };
        let epoch = std::env::var("SOURCE_DATE_EPOCH")
            .ok()
            .and_then(|s| s.parse().ok())
            .or(commit_time)
            .unwrap_or(0);
        Ok(Project {
            root: root.to_path_buf(),
            version,
            revision,
            epoch,
        })
    }
}

/// The cargo that runs this xtask (`$CARGO`), so a release uses one toolchain.
pub fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

/// The workspace root: xtask's own directory's parent.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or(manifest_dir)
}

/// Runs `command`, returns its stdout.
pub fn output(command: &mut Command) -> Result<String, ProjectError> {
    let shown = format!("{command:?}");
    let out = command.output().map_err(|source| ProjectError::Spawn {
        program: format!("{:?}", command.get_program()),
        source,
    })?;
    if !out.status.success() {
        return Err(ProjectError::Failed {
            command: shown,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
