//! `volmig-demo`: a first run of `kubectl volmig` without a cluster.
//!
//! Builds `mover` and `kubectl-volmig`, starts the local cluster of
//! `tests/kube-sandbox` with an app writing to a ReadWriteOnce claim on a
//! tainted node, runs the real plugin against it (progress bars included),
//! and explains what happened. The emulator stays out of the plugin: the
//! plugin only ever sees a kubeconfig.
//!
//!     sudo -E cargo run --release --bin volmig-demo [-- --keep]

// Output goes through `say!` and `tell!`: `println!` panics on a closed pipe.
#![warn(clippy::print_stdout, clippy::print_stderr)]

/// `println!` that ignores a closed pipe. The demo does not end on one as
/// kubectl would: it must live to stop the local cluster's pod processes,
/// which only its own shutdown stops.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that ignores a closed pipe (see `say!`).
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod app;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_sandbox::kubelet::{ImageMapping, OciArchive};
use kube_sandbox::testkit::workspace_binary;
use kube_sandbox::{Sandbox, SandboxConfig};
use serde_json::Value;

const USAGE: &str = "\
volmig-demo: run `kubectl volmig migrate` against a local cluster, no cluster needed

Usage: volmig-demo [--keep] [--mover-image-archive PATH]

  --keep   keep the local cluster up after the demo, until Ctrl-C, to explore it
           with kubectl and kubectl-volmig
  --mover-image-archive PATH
           run the mover pods from this image (an OCI archive, such as
           dist/mover_v0.1.0_linux_amd64.oci.tar from `cargo xtask dist`) instead
           of the workspace's mover binary

Needs root: the local cluster runs each pod in its own mount namespace.";

const NS: &str = "default";
const APP_NODE: &str = "node-2";
const DESTINATION: &str = "app-data-fast";
/// The image the sandbox runs with the workspace's `mover` (any tag).
const MOVER_IMAGE: &str = "ghcr.io/volmig/mover";
const MOVER_REF: &str = "ghcr.io/volmig/mover:0.1.0";

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(code) => code,
        Err(e) => {
            tell!("volmig-demo: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<ExitCode> {
    let mut keep = false;
    let mut archive: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--keep" => keep = true,
            "--mover-image-archive" => {
                let path = args.next().context("--mover-image-archive takes a PATH")?;
                archive = Some(PathBuf::from(path));
            }
            "-h" | "--help" => {
                say!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            other => bail!("unexpected argument {other:?} (see --help)"),
        }
    }
    if !rustix::process::geteuid().is_root() {
        bail!("volmig-demo needs root: the local cluster runs each pod in its own mount namespace (try `sudo -E cargo run --release --bin volmig-demo`)");
    }

    say!(
        "volmig-demo: a local stand-in for Kubernetes (API, scheduler, volumes, kubelets running\n\
         pods as processes), an app writing to a ReadWriteOnce claim, and the real `kubectl volmig`\n\
         moving that claim to node-local storage while the app keeps running."
    );
    let mover_from = match &archive {
        Some(path) if !path.is_file() => {
            bail!("--mover-image-archive {}: no such file", path.display())
        }
        Some(path) => format!("the image {}", path.display()),
        None => "the workspace's mover binary".to_string(),
    };
    step("Building mover and kubectl-volmig when stale (the first time takes a few minutes)");
    let build_mover = archive.is_none();
    let (mover, plugin) = tokio::task::spawn_blocking(move || {
        let mover = build_mover.then(|| workspace_binary("mover", "mover"));
        (mover, workspace_binary("kubectl-volmig", "kubectl-volmig"))
    })
    .await
    .context("building the workspace's binaries (cargo's output is above)")?;

    step(&format!(
        "Starting a local cluster: 3 nodes, {APP_NODE} tainted dedicated=db:NoSchedule; \
         {MOVER_IMAGE} runs {mover_from}"
    ));
    let taint = format!("{APP_NODE}:dedicated=db:NoSchedule")
        .parse()
        .map_err(anyhow::Error::msg)?;
    let sandbox = Sandbox::start(SandboxConfig {
        taints: vec![taint],
        images: mover
            .map(|binary| ImageMapping {
                image: MOVER_IMAGE.into(),
                binary,
            })
            .into_iter()
            .collect(),
        oci_archives: archive
            .map(|path| OciArchive::new(MOVER_IMAGE, path))
            .into_iter()
            .collect(),
        ..SandboxConfig::default()
    })
    .await
    .context("starting the local cluster (volmig-demo needs root: mount namespaces)")?;

    // Ctrl-C must drop the sandbox, which kills the pods' processes.
    let result = tokio::select! {
        r = demo(&sandbox, &plugin) => r,
        _ = tokio::signal::ctrl_c() => {
            tell!("\ninterrupted: stopping the local cluster");
            return Ok(ExitCode::from(130));
        }
    };
    if keep {
        explore(&sandbox, &plugin);
        tokio::signal::ctrl_c().await?;
        tell!("\nstopping the local cluster");
    } else if result.is_ok() {
        say!("\nRun with `-- --keep` to keep the cluster up and look around with kubectl.");
    }
    drop(sandbox);
    result.map(|()| ExitCode::SUCCESS)
}

/// The scenario: the app, the migration, the explanation.
async fn demo(sandbox: &Sandbox, plugin: &Path) -> anyhow::Result<()> {
    let kubeconfig = sandbox.kubeconfig_path();
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let client = kube::Client::try_from(config)?;

    step(&format!(
        "Deploying `app` on {APP_NODE} (it tolerates the taint), writing to claim {} (ReadWriteOnce, class standard)",
        app::CLAIM
    ));
    app::deploy(&client, NS, APP_NODE).await?;
    let (pod, source_dir) = app::await_dataset(&client, NS).await?;
    let written = app::tree_size(&source_dir)?;
    say!(
        "    pod {pod} is Running and wrote {} entries, {}",
        written.entries,
        human(written.bytes)
    );

    step(&format!(
        "Migrating {} to a new claim {DESTINATION} of class `local` (node-local, provisioned where the receiver runs):",
        app::CLAIM
    ));
    say!(
        "    $ kubectl volmig migrate {} --to {DESTINATION} --to-storage-class local --mover-image {MOVER_REF}\n",
        app::CLAIM
    );
    let migrate = plugin_command(plugin, kubeconfig)
        .args([
            "migrate",
            app::CLAIM,
            "--to",
            DESTINATION,
            "--to-storage-class",
            "local",
        ])
        .args(["--mover-image", MOVER_REF])
        .status()
        .await
        .context("running kubectl-volmig")?;

    step("kubectl volmig status");
    plugin_command(plugin, kubeconfig)
        .arg("status")
        .status()
        .await?;
    let output = plugin_command(plugin, kubeconfig)
        .args(["status", "-o", "json"])
        .output()
        .await?;
    let list: Value = serde_json::from_slice(&output.stdout).context("reading `status -o json`")?;
    let record = list["items"].get(0).context("no operation recorded")?;
    if !migrate.success() {
        bail!(
            "kubectl volmig migrate failed ({migrate}); `kubectl volmig logs {}` shows the movers' logs (run with --keep to look)",
            record["metadata"]["name"].as_str().unwrap_or("OP")
        );
    }
    let destination_dir = app::claim_dir(&client, NS, DESTINATION)
        .await?
        .with_context(|| format!("{DESTINATION} is not bound"))?;
    let compared = app::compare_trees(&source_dir, &destination_dir)
        .context("the destination differs from the source")?;
    let volume_node = app::claim_node(&client, NS, DESTINATION).await?;
    explain(record, volume_node.as_deref(), compared);
    Ok(())
}

/// `kubectl-volmig --kubeconfig PATH`, killed if the demo stops first.
fn plugin_command(plugin: &Path, kubeconfig: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(plugin);
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .kill_on_drop(true);
    command
}

/// What the run showed, from the operation record, the destination's
/// volume and the host.
fn explain(record: &Value, volume_node: Option<&str>, compared: app::TreeSize) {
    let status = &record["status"];
    let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let attempts = status["attempts"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let last = attempts.last().unwrap_or(&Value::Null);
    let tolerations: Vec<String> = status["placement"]["sender"]["tolerations"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|t| {
            format!(
                "{}={}:{}",
                text(&t["key"]),
                text(&t["value"]),
                text(&t["effect"])
            )
        })
        .collect();
    step("What happened");
    say!(
        "  placement   The sender ran on {}, next to the app: {} is ReadWriteOnce and mounted there,",
        text(&last["sender"]["node"]),
        app::CLAIM
    );
    if tolerations.is_empty() {
        say!("              so volmig pinned the sender to that node.");
    } else {
        say!(
            "              so volmig pinned the sender to that node with the app's toleration ({}).",
            tolerations.join(", ")
        );
    }
    say!(
        "  receiver    The scheduler put the receiver on {}; the `local` class binds on first use,",
        text(&last["receiver"]["node"])
    );
    say!(
        "              so {DESTINATION}'s volume was created on {}.",
        volume_node.unwrap_or("its node")
    );
    let allowed = record["spec"]["retry"]["backoffLimit"]
        .as_u64()
        .map(|b| b + 1);
    say!(
        "  attempts    {} of {} allowed, the last {}; a failed attempt resumes from the receiver's checkpoint.",
        attempts.len(),
        allowed.map_or("?".into(), |a| a.to_string()),
        text(&last["phase"]).to_lowercase()
    );
    match status["summary"]["verifiedEntries"].as_u64() {
        Some(v) => say!("  verified    Both sides hashed their tree with BLAKE3 after the copy: {v} entries matched."),
        None => say!("  verified    The copy was not verified by BLAKE3 (--no-verify)."),
    }
    say!(
        "  host check  This demo compared both volume directories byte for byte: {} entries, {}, identical.",
        compared.entries,
        human(compared.bytes)
    );
}

/// How to look around while `--keep` holds the cluster.
fn explore(sandbox: &Sandbox, plugin: &Path) {
    let kubeconfig = sandbox.kubeconfig_path().display();
    step("The local cluster stays up until Ctrl-C. Try:");
    say!("    export KUBECONFIG={kubeconfig}");
    say!("    kubectl get pods,pvc,pv -o wide");
    say!("    {} status <operation>", plugin.display());
    say!("    {} logs <operation>", plugin.display());
    say!("    (volumes, pod logs: {})", sandbox.data_dir().display());
}

fn step(text: &str) {
    say!("\n==> {text}");
}

/// `9.6 MiB`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
