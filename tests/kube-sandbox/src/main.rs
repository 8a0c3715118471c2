//! `kube-sandbox`: starts a local cluster for end-to-end tests, writes its
//! kubeconfig, and runs until interrupted.

// `println!` panics on a closed pipe: write with `writeln!` and ignore it.
#![warn(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use kube_sandbox::kubelet::{BlockBacking, ImageMapping, OciArchive};
use kube_sandbox::sandbox::Taint;
use kube_sandbox::{Sandbox, SandboxConfig};
use tokio::signal::unix::{signal, SignalKind};

#[derive(Parser)]
#[command(
    version,
    about = "A local Kubernetes for volmig's end-to-end tests (API emulator, controllers, kubelets running pods as processes)"
)]
struct Args {
    /// Where to write the kubeconfig (server on https://127.0.0.1:PORT, with
    /// the cluster CA and the admin token)
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Number of nodes, named node-1 .. node-N
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// A node taint, NODE:KEY[=VALUE]:EFFECT (repeatable)
    #[arg(long = "taint")]
    taints: Vec<Taint>,
    /// Volumes, pod directories and logs (default: a temporary directory)
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// API server port on 127.0.0.1 (0 picks a free one)
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Run containers of IMAGE with a local binary, IMAGE=PATH, or in the
    /// image of an OCI image archive, IMAGE=oci-archive:PATH (repeatable),
    /// e.g. ghcr.io/volmig/mover=target/debug/mover
    #[arg(long = "image")]
    images: Vec<String>,
    /// What a Block volume's device is: a loop device when one can be had
    /// (auto), always (loop), or the image file itself (file)
    #[arg(long, default_value = "auto")]
    block_backing: BlockBacking,
}

/// An `--image` flag: `IMAGE=PATH` (a host binary) or
/// `IMAGE=oci-archive:PATH` (an OCI image archive).
enum ImageFlag {
    Binary(ImageMapping),
    Archive(OciArchive),
}

fn image_mapping(s: &str) -> anyhow::Result<ImageFlag> {
    let (image, target) = s
        .split_once('=')
        .context("--image takes IMAGE=PATH or IMAGE=oci-archive:PATH")?;
    let (archive, path) = match target.strip_prefix("oci-archive:") {
        Some(path) => (true, path),
        None => (false, target),
    };
    let path = std::fs::canonicalize(path).with_context(|| format!("--image {s}: {path}"))?;
    Ok(if archive {
        ImageFlag::Archive(OciArchive::new(image, path))
    } else {
        ImageFlag::Binary(ImageMapping {
            image: image.to_string(),
            binary: path,
        })
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .init();
    let args = Args::parse();
    let (mut images, mut oci_archives) = (Vec::new(), Vec::new());
    for flag in &args.images {
        match image_mapping(flag)? {
            ImageFlag::Binary(mapping) => images.push(mapping),
            ImageFlag::Archive(archive) => oci_archives.push(archive),
        }
    }
    let sandbox = Sandbox::start(SandboxConfig {
        nodes: args.nodes,
        taints: args.taints,
        data_dir: args.data_dir,
        port: args.port,
        kubeconfig: Some(args.kubeconfig),
        images,
        oci_archives,
        block_backing: args.block_backing,
        ..SandboxConfig::default()
    })
    .await
    .context("starting the sandbox")?;
    // Not `eprintln!`, which panics on a closed pipe: the sandbox must live
    // to stop its pods' processes, which only its own shutdown stops.
    let _ = writeln!(
        std::io::stderr(),
        "kube-sandbox: {} nodes, API at {}, kubeconfig {}, data in {}",
        sandbox.node_names().len(),
        sandbox.server_url(),
        sandbox.kubeconfig_path().display(),
        sandbox.data_dir().display()
    );
    // Until SIGINT or SIGTERM: either way the sandbox is dropped, which
    // stops every pod's processes (a plain kill would orphan them).
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    drop(sandbox);
    Ok(())
}
