//! The release binaries: `cargo build --profile dist` for one target.
//!
//! On Linux they are linked statically against glibc (`+crt-static`):
//! the plugin runs on any distribution, and the mover in an image that
//! holds nothing else. glibc's name resolver would still load NSS modules
//! at run time, so neither binary uses it: the plugin resolves names in
//! Rust (`kubectl-volmig`'s `cluster::resolve`), the mover is given IPs.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::platform::Platform;
use crate::project::{self, Project};

/// The binaries a Linux release ships: the plugin, and the mover for its
/// image.
pub const BINARIES: [&str; 2] = ["kubectl-volmig", "mover"];

/// The binaries built for `platform`: the mover runs only on Linux (in
/// pods); elsewhere the plugin alone.
pub fn binaries(platform: Platform) -> &'static [&'static str] {
    if platform.is_linux() {
        &BINARIES
    } else {
        &BINARIES[..1]
    }
}

/// The profile in the workspace's `Cargo.toml`: release, stripped, no
/// debug info.
pub const PROFILE: &str = "dist";

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("cannot run cargo: {0}")]
    Spawn(std::io::Error),
    #[error("cargo build for {target} failed ({status})")]
    Failed { target: String, status: String },
    #[error("cargo built no {0}")]
    Missing(PathBuf),
}

/// Builds the release binaries for `platform`; returns the directory
/// holding them.
pub fn release_binaries(project: &Project, platform: Platform) -> Result<PathBuf, BuildError> {
    let mut cargo = Command::new(project::cargo());
    cargo
        .current_dir(project::workspace_root())
        .args(["build", "--locked", "--profile", PROFILE, "--target"])
        .arg(platform.target);
    for bin in binaries(platform) {
        cargo.args(["--bin", bin]);
    }
    // `kubectl volmig version` and the default mover image name this commit.
    cargo.env("VOLMIG_GIT_REVISION", &project.revision);
    // Flags for the target only: with `--target`, build scripts and proc
    // macros are built without them (they cannot be static).
    let flags_var = format!(
        "CARGO_TARGET_{}_RUSTFLAGS",
        platform.target.to_uppercase().replace('-', "_")
    );
    let mut flags = remap_flags(&project.root);
    if platform.is_linux() || platform.os == "windows" {
        flags.insert(0, "-Ctarget-feature=+crt-static".to_string());
    }
    cargo.env(flags_var, flags.join(" "));
    let status = cargo.status().map_err(BuildError::Spawn)?;
    if !status.success() {
        return Err(BuildError::Failed {
            target: platform.target.to_string(),
            status: status.to_string(),
        });
    }
    let dir = target_dir(&project.root)
        .join(platform.target)
        .join(PROFILE);
    for bin in binaries(platform) {
        let path = dir.join(format!("{bin}{}", platform.exe_suffix()));
        if !path.is_file() {
            return Err(BuildError::Missing(path));
        }
    }
    Ok(dir)
}

/// Paths of the build machine (the checkout, cargo's registry) become
/// fixed prefixes in panic messages, so the same commit builds the same
/// bytes wherever it is checked out.
fn remap_flags(root: &Path) -> Vec<String> {
    let mut flags = vec![format!("--remap-path-prefix={}=/volmig", root.display())];
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    if let Some(home) = cargo_home {
        flags.push(format!("--remap-path-prefix={}=/cargo", home.display()));
    }
    flags
}

/// `CARGO_TARGET_DIR`, else the workspace's `target/`.
pub fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}
