//! `cargo xtask`: volmig's release build and test runner.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use xtask::archive::{self, Entry};
use xtask::platform::{self, Platform};
use xtask::project::{self, Project};
use xtask::{build, elf, image, krew};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "volmig's release build and test runner")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Build the release: static binaries, the plugin's archive, the mover
    /// image, and the krew manifest, into dist/.
    Dist {
        /// The Rust target to build for (default: this machine's).
        #[arg(long)]
        target: Option<String>,
        /// Where to write (default: dist/ in the workspace).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Render the krew manifest from every plugin archive in DIR (the
    /// release workflow, once all platforms are built).
    Manifest {
        #[arg(long, value_name = "DIR")]
        dist: Option<PathBuf>,
    },
    /// Run every test: install what the tests need, check formatting and
    /// lints, build the release (the end-to-end tests run its mover image),
    /// then `cargo test --workspace`. Arguments after `--` go to cargo test.
    Test {
        /// Skip `cargo fmt --check` and clippy.
        #[arg(long)]
        no_lint: bool,
        #[arg(last = true)]
        cargo_test_args: Vec<String>,
    },
}

const LICENSE: &str = "LICENSE";
const MANIFEST: &str = "krew-manifest/volmig.yaml";

/// `kubectl_complete-volmig`: kubectl 1.26 and newer runs it to complete
/// `kubectl volmig ...`, with the words after `volmig` as arguments.
const COMPLETE_SCRIPT: &str = "#!/bin/sh\n\
# kubectl (1.26 and newer) runs this to complete `kubectl volmig ...`.\n\
exec kubectl-volmig __complete \"$@\"\n";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = project::workspace_root();
    let result = match cli.command {
        Task::Dist { target, out } => {
            let out = out.unwrap_or_else(|| root.join("dist"));
            dist(&root, target.as_deref(), &out, true).map(|_| ExitCode::SUCCESS)
        }
        Task::Manifest { dist } => {
            let dist = dist.unwrap_or_else(|| root.join("dist"));
            Project::read(&root)
                .map_err(Into::into)
                .and_then(|p| manifest(&p, &dist, true))
                .map(|_| ExitCode::SUCCESS)
        }
        Task::Test {
            no_lint,
            cargo_test_args,
        } => test(&root, no_lint, &cargo_test_args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("xtask: {e:#}");
        ExitCode::FAILURE
    })
}

/// `cargo xtask dist`.
/// `release`: also rewrite `krew-manifest/volmig.yaml` (not when the test
/// command builds the release for its own use).
fn dist(root: &Path, target: Option<&str>, out: &Path, release: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    let project = Project::read(root)?;
    let platform = match target {
        Some(t) => Platform::of_target(t)
            .with_context(|| format!("volmig is not released for {t} (targets: {})", targets()))?,
        None => platform::host().context("this machine is not a release platform")?,
    };
    let tag = project.tag();
    eprintln!(
        "xtask: building {tag} ({}) for {}",
        project.revision, platform.target
    );
    let bins = build::release_binaries(&project, platform)?;
    let exe = |name: &str| bins.join(format!("{name}{}", platform.exe_suffix()));
    if platform.is_linux() {
        for bin in build::BINARIES {
            match elf::linkage(&exe(bin))? {
                elf::Linkage::Static => {}
                elf::Linkage::Dynamic { interpreter, needed } => bail!(
                    "{bin} is linked dynamically (interpreter {interpreter:?}, {} libraries): a release binary must be static",
                    needed.len()
                ),
            }
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let license = std::fs::read(root.join(LICENSE)).context("cannot read LICENSE")?;

    let mut entries = vec![Entry::executable(
        &format!("kubectl-volmig{}", platform.exe_suffix()),
        &exe("kubectl-volmig"),
    )?];
    if platform.os != "windows" {
        entries.push(Entry::file(
            "kubectl_complete-volmig",
            0o755,
            COMPLETE_SCRIPT,
        ));
    }
    entries.push(Entry::file(LICENSE, 0o644, license.clone()));
    let archive_path = out.join(platform.archive_name(&tag));
    archive::write_tar_gz(&archive_path, &entries, project.epoch)?;

    let mut summary = vec![
        format!(
            "{:>8}  kubectl-volmig (static, stripped)",
            size(&exe("kubectl-volmig"))
        ),
        format!("{:>8}  mover (static, stripped)", size(&exe("mover"))),
        format!("{:>8}  {}", size(&archive_path), archive_path.display()),
    ];
    if platform.is_linux() {
        let arch = match platform.arch {
            "arm64" => oci_spec::image::Arch::ARM64,
            _ => oci_spec::image::Arch::Amd64,
        };
        for kind in image::IMAGES {
            let image_path = out.join(platform.image_name(kind.name, &tag));
            let built = image::write(
                &project,
                arch.clone(),
                &kind,
                &exe(kind.binary),
                &license,
                &image_path,
            )?;
            summary.push(format!(
                "{:>8}  {} (layer {} compressed; {}:{}@{})",
                size(&image_path),
                image_path.display(),
                human(built.compressed_size),
                kind.repository,
                project.version,
                built.manifest_digest
            ));
        }
    }
    let manifest_path = manifest(&project, out, release)?;
    summary.push(format!(
        "{:>8}  {}",
        size(&manifest_path),
        manifest_path.display()
    ));
    eprintln!("xtask: {tag} built in {:.0?}:", started.elapsed());
    for line in summary {
        eprintln!("  {line}");
    }
    Ok(())
}

/// Renders the krew manifest from the plugin archives of this version in
/// `dist`, validates it, and writes it to `dist/volmig.yaml` (and, for a
/// `release`, to `krew-manifest/volmig.yaml`); returns the former.
fn manifest(project: &Project, dist: &Path, release: bool) -> anyhow::Result<PathBuf> {
    let tag = project.tag();
    let mut archives = Vec::new();
    let listing =
        std::fs::read_dir(dist).with_context(|| format!("cannot list {}", dist.display()))?;
    for entry in listing {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&format!("kubectl-volmig_{tag}_")) {
            continue;
        }
        let Some(platform) = Platform::of_archive(&name) else {
            continue;
        };
        let path = dist.join(&name);
        let sha256 = archive::sha256_file(&path)?;
        if archive::read_checksum(&path)? != sha256 {
            bail!("{name} does not match its .sha256 file");
        }
        archives.push(krew::Archive {
            platform,
            file_name: name,
            sha256,
        });
    }
    if archives.is_empty() {
        bail!("no kubectl-volmig_{tag}_*.tar.gz in {}", dist.display());
    }
    let source = project.root.join(MANIFEST);
    let text = std::fs::read_to_string(&source)
        .with_context(|| format!("cannot read {}", source.display()))?;
    let plugin = krew::Plugin::parse(&text)?.render(&tag, &archives);
    plugin.validate(krew::NAME)?;
    let yaml = format!("{}{}", header(&text), plugin.to_yaml()?);
    let written = dist.join("volmig.yaml");
    std::fs::write(&written, &yaml)?;
    if release {
        std::fs::write(&source, &yaml)?;
    }
    Ok(written)
}

/// The manifest's leading comment lines, kept when it is rewritten.
fn header(text: &str) -> String {
    text.lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `cargo xtask test`.
fn test(root: &Path, no_lint: bool, cargo_test_args: &[String]) -> anyhow::Result<ExitCode> {
    prerequisites()?;
    let cargo = || {
        let mut c = Command::new(project::cargo());
        c.current_dir(root);
        c
    };
    if !no_lint {
        eprintln!("xtask: cargo fmt --check");
        run(cargo().args(["fmt", "--all", "--", "--check"]))?;
        eprintln!("xtask: cargo clippy");
        run(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--quiet",
            "--",
            "-D",
            "warnings",
        ]))?;
    }
    let dist_dir = build::target_dir(root).join("xtask-dist");
    eprintln!("xtask: cargo xtask dist (the end-to-end tests run its mover image)");
    dist(root, None, &dist_dir, false)?;
    eprintln!("xtask: cargo test --workspace");
    let mut test = cargo();
    test.args(["test", "--workspace"])
        .args(cargo_test_args)
        .env("VOLMIG_DIST", &dist_dir);
    let output = tee(&mut test)?;
    let (passed, failed) = count(&output.text);
    eprintln!("tests: {passed} passed, {failed} failed");
    Ok(if output.success {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What the tests need beyond cargo: installed with apt when missing and
/// possible, else named in one line.
fn prerequisites() -> anyhow::Result<()> {
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let wanted = [
        ("rsync", "rsync"), // rsync_compat.rs compares with the real thing
        ("tmux", "tmux"),   // the monitor's end-to-end test
        (kubectl.as_str(), "kubernetes-client"), // every end-to-end test
    ];
    let mut missing: Vec<&str> = wanted
        .iter()
        .filter(|(cmd, _)| !on_path(cmd))
        .map(|(_, package)| *package)
        .collect();
    // Static release binaries link glibc's static libraries.
    if !Path::new("/usr/lib/x86_64-linux-gnu/libc.a").exists() && cfg!(target_arch = "x86_64") {
        missing.push("libc6-dev");
    }
    let root = is_root();
    if !missing.is_empty() {
        if root && on_path("apt-get") {
            eprintln!("xtask: installing {}", missing.join(" "));
            run(Command::new("apt-get").args(["update", "-qq"]))?;
            run(Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"))?;
        } else {
            bail!(
                "the tests need {} (Debian/Ubuntu: sudo apt-get install {})",
                missing.join(", "),
                missing.join(" ")
            );
        }
    }
    if !root {
        bail!("the end-to-end tests need root: the local cluster runs each pod in its own mount namespace (sudo -E cargo xtask test)");
    }
    Ok(())
}

/// Whether this runs as root (`id -u`: one call is not worth a libc
/// dependency).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.trim_ascii() == b"0")
        .unwrap_or(false)
}

fn on_path(cmd: &str) -> bool {
    if cmd.contains('/') {
        return Path::new(cmd).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(cmd).is_file()))
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot run {:?}", command.get_program()))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}

struct Teed {
    text: String,
    success: bool,
}

/// Runs `command` with its stdout passed through and kept.
fn tee(command: &mut Command) -> anyhow::Result<Teed> {
    use std::io::{BufRead, BufReader, Write};
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {:?}", command.get_program()))?;
    let mut text = String::new();
    if let Some(stdout) = child.stdout.take() {
        let mut out = std::io::stdout().lock();
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            let _ = writeln!(out, "{line}");
            text.push_str(&line);
            text.push('\n');
        }
    }
    Ok(Teed {
        text,
        success: child.wait()?.success(),
    })
}

/// Passed and failed tests over every `test result:` line.
fn count(output: &str) -> (u64, u64) {
    let mut passed = 0;
    let mut failed = 0;
    for line in output.lines().filter(|l| l.starts_with("test result:")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        for pair in words.windows(2) {
            let n = pair[0].parse::<u64>().unwrap_or(0);
            if pair[1].starts_with("passed") {
                passed += n;
            } else if pair[1].starts_with("failed") {
                failed += n;
            }
        }
    }
    (passed, failed)
}

fn targets() -> String {
    platform::ALL
        .iter()
        .map(|p| p.target)
        .collect::<Vec<_>>()
        .join(", ")
}

fn size(path: &Path) -> String {
    std::fs::metadata(path)
        .map(|m| human(m.len()))
        .unwrap_or_else(|_| "?".into())
}

fn human(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
