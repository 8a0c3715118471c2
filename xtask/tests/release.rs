//! The release as `cargo xtask dist` built it: what a user downloads,
//! installs with krew, and pulls onto their nodes.
//!
//! `cargo xtask test` builds the release into `VOLMIG_DIST` before it runs
//! the tests; run alone, these tests need `cargo xtask dist --out
//! target/xtask-dist` first.

use std::path::{Path, PathBuf};
use std::process::Command;

use xtask::archive;
use xtask::elf::{self, Linkage};
use xtask::image;
use xtask::krew::{self, Plugin};
use xtask::platform::{self, Platform};
use xtask::project::{self, Project};

fn project() -> Project {
    Project::read(&project::workspace_root()).expect("the workspace reads")
}

fn dist() -> PathBuf {
    let dir = std::env::var_os("VOLMIG_DIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| xtask::build::target_dir(&project::workspace_root()).join("xtask-dist"));
    assert!(
        dir.join("volmig.yaml").is_file(),
        "no release in {}: run `cargo xtask test`, or `cargo xtask dist --out {}` first",
        dir.display(),
        dir.display()
    );
    dir
}

fn host() -> Platform {
    platform::host().expect("a release platform")
}

/// The binaries the release build linked (before they were archived).
fn built(name: &str) -> PathBuf {
    xtask::build::target_dir(&project::workspace_root())
        .join(host().target)
        .join(xtask::build::PROFILE)
        .join(name)
}

fn unpack(archive: &Path, into: &Path) {
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(archive)
        .arg("-C")
        .arg(into)
        .status()
        .expect("tar runs");
    assert!(status.success(), "tar -xzf {}", archive.display());
}

#[test]
fn the_krew_manifest_passes_krew_validation_and_matches_the_archives() {
    let dist = dist();
    let text = std::fs::read_to_string(dist.join("volmig.yaml")).expect("dist/volmig.yaml");
    let plugin = Plugin::parse(&text).expect("a krew Plugin");
    plugin.validate(krew::NAME).expect("krew's rules");
    assert_eq!(
        plugin.spec.version,
        project().tag(),
        "the manifest's version is the crates'"
    );
    assert!(!plugin.spec.platforms.is_empty());
    for entry in &plugin.spec.platforms {
        let file = entry.uri.rsplit('/').next().expect("a file name");
        let path = dist.join(file);
        assert_eq!(
            archive::sha256_file(&path).expect("the archive the manifest names"),
            entry.sha256,
            "{file}"
        );
        let bytes = std::fs::read(&path).expect("read");
        let listed: Vec<String> = archive::list(&bytes, true)
            .expect("a tar.gz")
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert!(
            listed.contains(&entry.bin),
            "{file} lacks bin {}",
            entry.bin
        );
        for op in entry.files.iter().flatten() {
            assert!(listed.contains(&op.from), "{file} lacks {}", op.from);
        }
    }
    // The committed manifest is the same plugin (its checksums are those
    // of the last release build, which need not be this machine's).
    let committed =
        std::fs::read_to_string(project::workspace_root().join("krew-manifest/volmig.yaml"))
            .expect("krew-manifest/volmig.yaml");
    let committed = Plugin::parse(&committed).expect("a krew Plugin");
    committed.validate(krew::NAME).expect("krew's rules");
    assert_eq!(committed.spec.version, plugin.spec.version);
    assert_eq!(
        committed.spec.short_description,
        plugin.spec.short_description
    );
    assert_eq!(committed.spec.description, plugin.spec.description);
    assert_eq!(committed.spec.caveats, plugin.spec.caveats);
}

#[test]
fn release_binaries_are_static() {
    for name in xtask::build::BINARIES {
        assert_eq!(
            elf::linkage(&built(name)).expect("an ELF file"),
            Linkage::Static,
            "{name}"
        );
    }
    // `ldd`, where it is, agrees.
    if let Ok(out) = Command::new("ldd").arg(built("kubectl-volmig")).output() {
        let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("not a dynamic executable") || said.contains("statically linked"),
            "ldd: {said}"
        );
    }
}

#[test]
fn the_archive_installs_as_a_kubectl_plugin() {
    let dist = dist();
    let tag = project().tag();
    let archive = dist.join(host().archive_name(&tag));
    let sha = archive::read_checksum(&archive).expect("the .sha256 beside it");
    assert_eq!(archive::sha256_file(&archive).expect("hash"), sha);
    let dir = tempfile::tempdir().expect("temp dir");
    unpack(&archive, dir.path());
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["LICENSE", "kubectl-volmig", "kubectl_complete-volmig"]
    );

    // kubectl finds the plugin on PATH, as after `kubectl krew install`.
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(&kubectl)
        .args(["volmig", "version", "-o", "json"])
        .env("PATH", &path)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let p = project();
    assert_eq!(info["version"], p.version);
    assert_eq!(info["revision"], p.revision);
    assert_eq!(
        info["moverImage"],
        format!("{}:{}", image::MOVER.repository, p.version)
    );
    assert_eq!(
        info["driverImage"],
        format!("{}:{}", image::DRIVER.repository, p.version)
    );
    assert_eq!(info["platform"], format!("{}/{}", host().os, host().arch));

    // kubectl 1.26+ runs kubectl_complete-volmig for `kubectl volmig <TAB>`.
    let out = Command::new(dir.path().join("kubectl_complete-volmig"))
        .args(["res"])
        .env("PATH", &path)
        .output()
        .expect("the completion helper runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("resume\t"), "{said}");
    assert!(said.ends_with(":4\n"), "{said}");
}

#[test]
fn each_image_holds_only_its_static_binary() {
    let p = project();
    for kind in image::IMAGES {
        let path = dist().join(host().image_name(kind.name, &p.tag()));
        let seen = image::inspect(&path).expect("a valid OCI archive");
        let config = seen.config.config().as_ref().expect("a config");
        let entrypoint = format!("/{}", kind.binary);
        assert_eq!(config.entrypoint().as_deref(), Some(&[entrypoint][..]));
        let labels = config.labels().as_ref().expect("labels");
        assert_eq!(labels["org.opencontainers.image.version"], p.version);
        assert_eq!(labels["org.opencontainers.image.revision"], p.revision);
        assert_eq!(
            labels["org.opencontainers.image.source"],
            "https://github.com/volmig/volmig"
        );
        assert_eq!(seen.config.os().to_string(), "linux");
        assert_eq!(
            seen.root,
            [
                (kind.binary.to_string(), 0o755),
                ("LICENSE".to_string(), 0o644)
            ]
        );
        let layer = &seen.manifest.layers()[0];
        assert!(
            layer.size() <= 10 * 1024 * 1024,
            "{}: the compressed layer is {} bytes, over 10 MiB",
            kind.name,
            layer.size()
        );
        assert_eq!(
            archive::read_checksum(&path).expect("the .sha256 beside it"),
            archive::sha256_file(&path).expect("hash")
        );
    }
}

#[test]
fn completion_scripts_are_valid_shell() {
    let plugin = built("kubectl-volmig");
    for (shell, checker) in [("bash", "bash"), ("zsh", "zsh"), ("fish", "fish")] {
        let out = Command::new(&plugin)
            .args(["completion", shell])
            .output()
            .expect("the plugin runs");
        assert!(out.status.success());
        assert!(!out.stdout.is_empty(), "{shell}: an empty script");
        let dir = tempfile::tempdir().expect("temp dir");
        let script = dir.path().join("script");
        std::fs::write(&script, &out.stdout).expect("write");
        let Ok(check) = Command::new(checker).arg("-n").arg(&script).output() else {
            eprintln!("{checker} is not installed: {shell}'s script is not checked");
            continue;
        };
        assert!(
            check.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
}
