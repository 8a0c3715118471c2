//! Support for tests and demos that run the workspace's own binaries in a
//! sandbox: finding them next to the running test, and building them when
//! they are missing or older than their sources.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use serde::Deserialize;

/// `target/<profile>/<bin>` of workspace package `package`, built with
/// cargo when missing or older than what it is built from. `cargo test
/// --workspace` has usually built it already; `cargo test -p <one>` after
/// a change may not have.
///
/// What it is built from is [`inputs`]: the package's and its path
/// dependencies' sources, not their tests. A test or fixture edited after
/// the build does not count: the build cargo would run then resolves
/// features for this one package, unlike `cargo test --workspace`, and
/// compiles much of the dependency tree again for nothing (minutes).
///
/// Panics when it cannot be built: it is for tests.
pub fn workspace_binary(package: &str, bin: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let exe = std::env::current_exe().expect("current executable path");
    // target/debug/deps/<test> or target/debug/<bin> → target/debug
    let mut dir = exe.parent().expect("target dir").to_path_buf();
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    let path = dir.join(bin);
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if !built.iter().any(|b| b == bin) {
        let stamp = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        let fresh = stamp.is_some_and(|b| {
            match Metadata::read(&workspace).and_then(|m| inputs(&m, package)) {
                Ok(inputs) => inputs.iter().all(|s| newest(s).is_none_or(|t| t <= b)),
                // Stale, then: the build says what is wrong, if anything.
                Err(e) => {
                    eprintln!("rebuilding {bin}: {e}");
                    false
                }
            }
        });
        if !fresh {
            let mut build = Command::new(cargo());
            build
                .current_dir(&workspace)
                .args(["build", "--quiet", "-p", package, "--bin", bin]);
            if dir.ends_with("release") {
                build.arg("--release");
            }
            let status = build.status().expect("cargo runs");
            assert!(status.success(), "building {bin} failed");
        }
        built.push(bin.to_string());
    }
    assert!(path.exists(), "{} missing", path.display());
    path
}

/// Why the inputs of a binary are not known.
#[derive(Debug, thiserror::Error)]
enum MetadataError {
    #[error("running cargo metadata: {0}")]
    Spawn(#[from] io::Error),
    #[error("cargo metadata failed: {0}")]
    Failed(String),
    #[error("reading cargo metadata's output: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("no package {0:?} in the workspace")]
    NoPackage(String),
}

/// The workspace as `cargo metadata --no-deps --format-version 1`
/// describes it, as far as [`inputs`] needs it. Cargo has read the
/// manifests: dependency tables in any form (inline, dotted keys,
/// `[dependencies.NAME]`), inherited from `[workspace.dependencies]`,
/// per target.
#[derive(Debug, Deserialize)]
struct Metadata {
    workspace_root: PathBuf,
    packages: Vec<Package>,
}

/// A workspace member.
#[derive(Debug, Deserialize)]
struct Package {
    name: String,
    manifest_path: PathBuf,
    dependencies: Vec<Dependency>,
}

/// A dependency of a member, of any target: `kind` is `None` for a
/// `[dependencies]` one, else `"build"` or `"dev"`; `path` is the
/// directory of a path dependency, absolute.
#[derive(Debug, Deserialize)]
struct Dependency {
    kind: Option<String>,
    path: Option<PathBuf>,
}

impl Metadata {
    /// Asks cargo about the workspace at `workspace` (a directory).
    fn read(workspace: &Path) -> Result<Metadata, MetadataError> {
        let out = Command::new(cargo())
            .current_dir(workspace)
            .args(["metadata", "--no-deps", "--format-version", "1"])
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(MetadataError::Failed(stderr.trim().to_string()));
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }
}

impl Package {
    fn dir(&self) -> &Path {
        self.manifest_path.parent().unwrap_or(&self.manifest_path)
    }
}

/// The cargo that runs this test, else the one on `PATH`.
fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// What a binary of `package` is built from: the workspace's `Cargo.toml`
/// and `Cargo.lock`, and of the package and each package it depends on
/// through a path (its dependencies and build dependencies, not its
/// dev-dependencies; followed through the workspace's members),
/// everything in its directory but `tests/`, `benches/` and `examples/`.
fn inputs(metadata: &Metadata, package: &str) -> Result<Vec<PathBuf>, MetadataError> {
    let root = &metadata.workspace_root;
    let mut out = vec![root.join("Cargo.toml"), root.join("Cargo.lock")];
    let first = metadata
        .packages
        .iter()
        .find(|p| p.name == package)
        .ok_or_else(|| MetadataError::NoPackage(package.to_string()))?;
    let mut dirs = vec![first.dir().to_path_buf()];
    let mut seen: Vec<PathBuf> = Vec::new();
    while let Some(dir) = dirs.pop() {
        if seen.contains(&dir) {
            continue;
        }
        if let Ok(listing) = std::fs::read_dir(&dir) {
            for entry in listing.flatten() {
                let name = entry.file_name();
                if !["tests", "benches", "examples"].iter().any(|t| name == *t) {
                    out.push(entry.path());
                }
            }
        }
        // A path dependency outside the workspace counts as its directory;
        // cargo metadata --no-deps does not describe its own dependencies.
        if let Some(member) = metadata.packages.iter().find(|p| p.dir() == dir) {
            dirs.extend(
                member
                    .dependencies
                    .iter()
                    .filter(|d| d.kind.as_deref() != Some("dev"))
                    .filter_map(|d| d.path.clone()),
            );
        }
        seen.push(dir);
    }
    Ok(out)
}

/// The newest modification time of `path`, or of the files under it.
fn newest(path: &Path) -> Option<std::time::SystemTime> {
    if path.is_file() {
        return std::fs::metadata(path).and_then(|m| m.modified()).ok();
    }
    let mut newest = None;
    let mut stack = vec![path.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(t) = entry.metadata().and_then(|m| m.modified()) {
                newest = newest.max(Some(t));
            }
        }
    }
    newest
}

/// The release `cargo xtask test` built before the tests (`VOLMIG_DIST`),
/// else `target/xtask-dist` (`cargo xtask dist --out target/xtask-dist`).
///
/// Panics when there is none: it is for tests.
pub fn release_dir() -> PathBuf {
    let dir = std::env::var_os("VOLMIG_DIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
            target.join("xtask-dist")
        });
    assert!(
        dir.join("volmig.yaml").is_file(),
        "no release build in {}: run the tests with `cargo xtask test` (it builds one), \
         or `cargo xtask dist --out {}` first",
        dir.display(),
        dir.display()
    );
    dir
}

/// `PREFIX_vVERSION_linux_amd64SUFFIX` of the release (the workspace's
/// crates share one version): `release_file("mover", ".oci.tar")` is the
/// mover image.
pub fn release_file(prefix: &str, suffix: &str) -> PathBuf {
    let version = env!("CARGO_PKG_VERSION");
    let path = release_dir().join(format!("{prefix}_v{version}_linux_amd64{suffix}"));
    assert!(
        path.is_file(),
        "{} is not in the release build",
        path.display()
    );
    path
}

/// Holds the machine's loop devices for one test at a time, across test
/// binaries (an exclusive `flock` on a file in the temporary directory),
/// until dropped: a test that needs loop devices takes it, so that
/// sandboxes running side by side do not exhaust them (a machine may have
/// eight). Blocking: call it from `spawn_blocking` in async tests.
pub struct LoopLock(#[allow(dead_code)] std::fs::File);

pub fn loop_lock() -> std::io::Result<LoopLock> {
    let path = std::env::temp_dir().join("volmig-loop-devices.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(LoopLock(file))
}

/// Whether this process may attach loop devices (root and
/// `/dev/loop-control`); loop-only tests say they were skipped otherwise.
pub fn loops_available() -> bool {
    crate::kubelet::devices::loops_available()
}

/// Writes one kubeconfig holding each sandbox as its admin under a context
/// of the given name (cluster, context and user all take that name; the
/// namespace is `default`), the first context current, as a user's
/// kubeconfig holds several clusters: `kubectl --context dst`,
/// kube-rs's `KubeConfigOptions { context: Some("dst".into()), .. }`.
///
/// ```no_run
/// # async fn f(src: &kube_sandbox::Sandbox, dst: &kube_sandbox::Sandbox) -> std::io::Result<()> {
/// let path = src.data_dir().join("two-clusters");
/// kube_sandbox::testkit::merged_kubeconfig(&[(src, "src"), (dst, "dst")], &path)?;
/// # Ok(()) }
/// ```
pub fn merged_kubeconfig(
    sandboxes: &[(&crate::Sandbox, &str)],
    path: &Path,
) -> std::io::Result<()> {
    let servers: Vec<String> = sandboxes.iter().map(|(sb, _)| sb.server_url()).collect();
    let contexts: Vec<crate::kubeconfig::Context> = sandboxes
        .iter()
        .zip(&servers)
        .map(|((sb, name), server)| crate::kubeconfig::Context {
            name,
            server,
            ca_pem: sb.ca_pem(),
            user: name,
            token: sb.admin_token(),
            namespace: "default",
        })
        .collect();
    let mut names: Vec<&str> = contexts.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    if names.len() != contexts.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "each sandbox needs its own context name",
        ));
    }
    crate::kubeconfig::write(path, &contexts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace in a temporary directory: `(name, manifest body)`
    /// per member, each with an empty `src/lib.rs` and a `tests/` file.
    fn workspace(root: &str, members: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temporary directory");
        let names: Vec<String> = members.iter().map(|(n, _)| format!("{n:?}")).collect();
        let root = format!("[workspace]\nmembers = [{}]\n{root}", names.join(", "));
        std::fs::write(dir.path().join("Cargo.toml"), root).expect("workspace manifest");
        for (name, body) in members {
            let member = dir.path().join(name);
            std::fs::create_dir_all(member.join("src")).expect("src");
            std::fs::create_dir_all(member.join("tests")).expect("tests");
            std::fs::write(member.join("src/lib.rs"), "").expect("lib.rs");
            std::fs::write(member.join("tests/t.rs"), "").expect("t.rs");
            let manifest = format!(
                "[package]\nname = {name:?}\nversion = \"0.1.0\"\nedition = \"2021\"\n{body}"
            );
            std::fs::write(member.join("Cargo.toml"), manifest).expect("manifest");
        }
        dir
    }

    /// The inputs of `package`, relative to the root of the workspace at
    /// `dir`, sorted.
    fn relative_inputs(dir: &Path, package: &str) -> Vec<String> {
        let metadata = Metadata::read(dir).expect("cargo metadata");
        let root = &metadata.workspace_root;
        let mut names: Vec<String> = inputs(&metadata, package)
            .expect("inputs")
            .iter()
            .filter_map(|p| Some(p.strip_prefix(root).ok()?.display().to_string()))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_binary_is_built_from_its_path_dependencies_not_its_dev_dependencies() {
        let members = [
            (
                "p",
                r#"
[dependencies]
a = { path = "../a", default-features = false }
b.workspace = true
# c = { path = "../c" }

[dependencies.g]
# a table of its own, over several lines
version = "0.1"
path = "../g"

[target.'cfg(unix)'.dependencies]
d = { path = "../d" }

[dev-dependencies]
e = { path = "../e" }

[build-dependencies]
f = { path = "../f" }
"#,
            ),
            ("a", "[dependencies]\nh = { path = \"../h\" }\n"),
            ("b", ""),
            ("c", ""),
            ("d", ""),
            ("e", ""),
            ("f", ""),
            ("g", ""),
            ("h", ""),
        ];
        let dir = workspace("[workspace.dependencies]\nb = { path = \"b\" }\n", &members);
        let mut wanted = vec!["Cargo.lock".to_string(), "Cargo.toml".to_string()];
        for package in ["a", "b", "d", "f", "g", "h", "p"] {
            wanted.push(format!("{package}/Cargo.toml"));
            wanted.push(format!("{package}/src"));
        }
        wanted.sort();
        assert_eq!(relative_inputs(dir.path(), "p"), wanted);
    }

    #[test]
    fn the_plugin_is_built_from_the_mover_library_but_not_the_tests() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let names = relative_inputs(&workspace, "kubectl-volmig");
        for wanted in ["kubectl-volmig/src", "mover/src", "Cargo.lock"] {
            assert!(names.iter().any(|n| n == wanted), "{wanted}: {names:?}");
        }
        for unwanted in [
            "kubectl-volmig/tests",
            "mover/tests",
            "tests/kube-sandbox/src",
        ] {
            assert!(
                !names.iter().any(|n| n == unwanted),
                "{unwanted}: {names:?}"
            );
        }
        let sandbox = relative_inputs(&workspace, "kube-sandbox");
        assert!(
            sandbox.iter().any(|n| n == "tests/kube-sandbox/src"),
            "{sandbox:?}"
        );
    }
}
