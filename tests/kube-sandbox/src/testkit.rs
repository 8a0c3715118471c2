//! Support for tests and demos that run the workspace's own binaries in a
//! sandbox: finding them next to the running test, and building them when
//! they are missing or older than their sources.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// `target/<profile>/<bin>` of package `package` (a directory at the
/// workspace root, or under `tests/`), built with cargo when missing or
/// older than what it is built from. `cargo test --workspace` has usually
/// built it already; `cargo test -p <one>` after a change may not have.
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
            inputs(&workspace, package)
                .iter()
                .all(|s| newest(s).is_none_or(|t| t <= b))
        });
        if !fresh {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut build = std::process::Command::new(cargo);
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

/// The directory of workspace package `package`: at the root, or under
/// `tests/`.
fn package_dir(workspace: &Path, package: &str) -> PathBuf {
    let top = workspace.join(package);
    if top.join("Cargo.toml").is_file() {
        top
    } else {
        workspace.join("tests").join(package)
    }
}

/// What a binary of `package` is built from: the workspace's `Cargo.toml`
/// and `Cargo.lock`, and of the package and each workspace package it
/// depends on (`path = ...` under `[dependencies]` or
/// `[build-dependencies]`, followed through), everything in its
/// directory but `tests/`, `benches/` and `examples/`.
fn inputs(workspace: &Path, package: &str) -> Vec<PathBuf> {
    let mut out = vec![workspace.join("Cargo.toml"), workspace.join("Cargo.lock")];
    let mut packages = vec![package_dir(workspace, package)];
    let mut seen: Vec<PathBuf> = Vec::new();
    while let Some(dir) = packages.pop() {
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        if seen.contains(&dir) {
            continue;
        }
        let Ok(listing) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in listing.flatten() {
            let name = entry.file_name();
            if !["tests", "benches", "examples"].iter().any(|t| name == *t) {
                out.push(entry.path());
            }
        }
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        packages.extend(path_dependencies(&manifest).map(|p| dir.join(p)));
        seen.push(dir);
    }
    out
}

/// The `path = "..."` of a manifest's dependencies and build dependencies
/// (a line-wise reading of the workspace's own manifests, not TOML).
fn path_dependencies(manifest: &str) -> impl Iterator<Item = &str> {
    let mut linked = false;
    manifest.lines().filter_map(move |line| {
        let line = line.trim();
        if line.starts_with('[') {
            linked = line == "[dependencies]"
                || line == "[build-dependencies]"
                || (line.starts_with("[target.") && !line.ends_with(".dev-dependencies]"));
            return None;
        }
        if !linked || line.starts_with('#') {
            return None;
        }
        let rest = line.split("path = \"").nth(1)?;
        rest.split('"').next()
    })
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

    #[test]
    fn a_binary_is_built_from_its_path_dependencies_not_its_dev_dependencies() {
        let manifest = r#"
[package]
name = "p"

[dependencies]
a = { path = "../a", default-features = false }
b.workspace = true
# c = { path = "../c" }

[target.'cfg(unix)'.dependencies]
d = { path = "../d" }

[dev-dependencies]
e = { path = "../e" }

[build-dependencies]
f = { path = "../f" }
"#;
        let deps: Vec<&str> = path_dependencies(manifest).collect();
        assert_eq!(deps, ["../a", "../d", "../f"]);
    }

    #[test]
    fn the_plugin_is_built_from_the_mover_library_but_not_the_tests() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let plugin = inputs(&workspace, "kubectl-volmig");
        let names: Vec<String> = plugin
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .filter_map(|p| {
                p.strip_prefix(std::fs::canonicalize(&workspace).ok()?)
                    .ok()
                    .map(|r| r.display().to_string())
            })
            .collect();
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
        let sandbox = inputs(&workspace, "kube-sandbox");
        assert!(
            sandbox.iter().any(|p| p.ends_with("kube-sandbox/src")),
            "{sandbox:?}"
        );
    }
}
