//! `mover`: copy and re-sync directory trees, locally or between two hosts.

// Output goes through `mover::stdio`: `println!` panics on a closed pipe.
#![warn(clippy::print_stdout, clippy::print_stderr)]

/// `eprintln!` that does not panic on a closed pipe (see `mover::stdio`).
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = mover::stdio::err(&format!("{}\n", format_args!($($arg)*)));
    }};
}

mod args;
mod net;
mod output;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use args::{
    check_attempt, parse_duration, parse_operation_id, BlockArgs, ConnectionArgs, OperationArgs,
    OutputArgs, TransferArgs,
};
use clap::{Parser, Subcommand};
use mover::session::local;
use mover::session::receiver::ReceiverConfig;
use mover::units::parse_rate;
use output::{finish, progress_sink};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// Chunked, resumable rsync-style delta transfer of directory trees (volmig's data mover).
///
/// Exit codes: 0 ok; 1 usage; 2 incompatible peer; 3 authentication refused (TLS); 10 connection; 11 local file I/O;
/// 12 protocol error; 13 the peer failed; 14 internal error; 20 interrupted (SIGTERM,
/// SIGINT); 23 partial transfer (some entries failed); 24 partial transfer (source files
/// vanished or kept changing).
#[derive(Parser, Debug)]
#[command(name = "mover", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Copy or re-sync the contents of SRC into DST on this machine.
    Sync {
        src: PathBuf,
        dst: PathBuf,
        #[command(flatten)]
        transfer: TransferArgs,
        #[command(flatten)]
        operation: OperationArgs,
        /// Keep the checkpoint (marked complete) after a clean finish.
        #[arg(long, requires = "operation_id")]
        keep_checkpoint: bool,
        #[command(flatten)]
        block: BlockArgs,
        /// Where a block session keeps its checkpoint (default for an image
        /// D/NAME: D/.NAME.volmig; a device has none).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Send the tree at --root to a receiver.
    Send {
        /// The receiver's address, HOST:PORT.
        #[arg(long, value_name = "ADDR", required_unless_present = "listen")]
        to: Option<String>,
        /// Keep trying to connect for this long while the receiver is not
        /// reachable yet (a Service whose endpoint is still being set up).
        #[arg(
            long,
            value_name = "SECONDS",
            default_value_t = 0,
            conflicts_with = "listen"
        )]
        connect_retry: u64,
        /// Listen on IP:PORT and take the receiver's connection instead of
        /// connecting to it (a tunnel that can only dial in, such as a port
        /// forward). The sender stays the TLS client; a connection that fails
        /// the handshake is refused and the wait goes on.
        #[arg(long, value_name = "ADDR", conflicts_with = "to")]
        listen: Option<SocketAddr>,
        /// With --listen: give up when no receiver has connected for this
        /// many seconds (default 0: wait until one does, or a signal).
        // (`requires` alone lets `--to` stand in: clap waives a requirement
        // that conflicts with an argument given.)
        #[arg(
            long,
            value_name = "SECONDS",
            requires = "listen",
            conflicts_with = "to"
        )]
        accept_timeout: Option<u64>,
        /// With --listen: write the bound address to this file once listening.
        #[arg(long, value_name = "PATH", requires = "listen", conflicts_with = "to")]
        addr_file: Option<PathBuf>,
        /// The source: a directory, or a block device or image file.
        #[arg(long)]
        root: PathBuf,
        #[command(flatten)]
        transfer: TransferArgs,
        #[command(flatten)]
        operation: OperationArgs,
        #[command(flatten)]
        block: BlockArgs,
        #[command(flatten)]
        connection: ConnectionArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Receive a tree into --root from one sender (or more with --keep-serving).
    Receive {
        /// Address to listen on, IP:PORT (port 0 picks a free port).
        #[arg(long, value_name = "ADDR")]
        listen: SocketAddr,
        /// The destination: a directory (created if missing), or for a block
        /// session a block device or image file (an image is created if missing).
        #[arg(long)]
        root: PathBuf,
        /// Serve block sessions only: a sender with a directory tree is refused.
        #[arg(long)]
        block: bool,
        /// A block checkpoint an earlier receiver told (`{"event":"checkpoint"}`'s
        /// `data`, base64): resumed from when the state directory holds none as recent.
        #[arg(long, value_name = "BASE64", value_parser = parse_seed, requires = "block")]
        checkpoint_seed: Option<Seed>,
        /// Where a block session keeps its checkpoint (default for an image
        /// D/NAME: D/.NAME.volmig; a device has none).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// Serve one session after another instead of exiting after the first.
        #[arg(long)]
        keep_serving: bool,
        /// Write the bound address to this file once listening.
        #[arg(long, value_name = "PATH")]
        addr_file: Option<PathBuf>,
        /// Outgoing bandwidth cap (see `send --bwlimit`).
        #[arg(long, value_name = "RATE", value_parser = parse_rate)]
        bwlimit: Option<u64>,
        /// Serve only this operation (by default: whatever operation the sender names).
        #[arg(long, value_name = "ID", value_parser = parse_operation_id)]
        operation_id: Option<String>,
        /// Serve only this attempt of the operation.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        attempt: Option<u32>,
        /// Keep the checkpoint (marked complete) after a clean finish.
        #[arg(long)]
        keep_checkpoint: bool,
        /// Empty the destination before the first session: every entry below
        /// --root goes, the checkpoint (.volmig) and temporary files included;
        /// the root itself stays. An entry that cannot be removed (a mount
        /// point, an immutable file) fails the receiver: exit 11, not retryable.
        #[arg(long)]
        wipe: bool,
        /// What the destination can hold, in bytes: the session fails (disk
        /// full, not retryable) as soon as the files listed add up to more,
        /// before the destination fills up. Sparse files count at their length.
        #[arg(long, value_name = "BYTES")]
        capacity: Option<u64>,
        #[command(flatten)]
        connection: ConnectionArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Create the key material of one operation (a CA that signs a sender and a
    /// receiver certificate, then is forgotten) for `--tls-dir`.
    Keygen {
        /// Directory to write into (created, mode 0700); existing files are never overwritten.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The operation the material is for.
        #[arg(long, value_name = "ID", value_parser = parse_operation_id)]
        operation_id: String,
        /// How long the certificates stay valid: seconds, or with s, m, h, d.
        #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = parse_duration)]
        valid_for: Duration,
    },
    /// Print what a destination holds, as JSON: its checkpoint, its files,
    /// and with --against how much of a source it holds already.
    Inspect {
        /// The destination directory.
        #[arg(long)]
        root: PathBuf,
        /// A source directory to quick-check the destination against (same
        /// size and modification time: what a session would not send again).
        #[arg(long, value_name = "DIR")]
        against: Option<PathBuf>,
        /// A block destination's state directory (see `receive --state-dir`).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
}

/// Cancels `token` on SIGTERM (a pod being deleted) or SIGINT: the session
/// then stops cleanly, removes its temporary files, tells its peer, exits 20.
fn cancel_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                say!("mover: cannot watch for SIGTERM: {e}");
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        say!("mover: interrupted, stopping");
        token.cancel();
        // A second signal means now.
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        say!("mover: interrupted again, exiting");
        std::process::exit(20);
    });
}

async fn run(cli: Cli) -> u8 {
    let cancel = CancellationToken::new();
    cancel_on_signal(cancel.clone());
    match cli.command {
        Command::Sync {
            src,
            dst,
            transfer,
            operation,
            keep_checkpoint,
            block,
            state_dir,
            output,
        } => {
            let options = transfer.options(true, &operation);
            if let Err(e) = check_attempt(&options).and_then(|()| block.check(&src)) {
                return finish(Err(e), &output);
            }
            let result = local::sync(
                src,
                dst,
                options,
                local::LocalConfig {
                    bwlimit: transfer.bwlimit,
                    progress: progress_sink(output.progress),
                    keep_checkpoint,
                    cancel,
                    zero_tail: block.zero_tail,
                    state_dir,
                },
            )
            .await;
            finish(result, &output)
        }
        Command::Inspect {
            root,
            against,
            state_dir,
        } => match mover::block::kind_of(&root) {
            Some(_) => inspect_block(&root, state_dir.as_deref()),
            None => inspect(&root, against.as_deref()),
        },
        Command::Send {
            to,
            connect_retry,
            listen,
            accept_timeout,
            addr_file,
            root,
            transfer,
            operation,
            block,
            connection,
            output,
        } => {
            if let Err(e) = block.check(&root) {
                return finish(Err(e), &output);
            }
            let link = match (listen, to) {
                (Some(addr), _) => net::Link::Listen {
                    addr,
                    accept_timeout: accept_timeout
                        .filter(|secs| *secs > 0)
                        .map(Duration::from_secs),
                    addr_file,
                },
                (None, to) => net::Link::Dial {
                    // clap requires one of --to and --listen.
                    to: to.unwrap_or_default(),
                    retry: Duration::from_secs(connect_retry),
                },
            };
            let job = net::SendJob {
                link,
                root,
                options: transfer.options(false, &operation),
                bwlimit: transfer.bwlimit,
                zero_tail: block.zero_tail,
            };
            net::run_send(job, connection, output, cancel).await
        }
        Command::Receive {
            listen,
            root,
            block,
            checkpoint_seed,
            state_dir,
            keep_serving,
            addr_file,
            bwlimit,
            operation_id,
            attempt,
            keep_checkpoint,
            wipe,
            capacity,
            connection,
            output,
        } => {
            let mut cfg = ReceiverConfig::new(root);
            cfg.capacity = capacity;
            cfg.bwlimit = bwlimit;
            cfg.operation_id = operation_id;
            cfg.attempt = attempt;
            cfg.keep_checkpoint = keep_checkpoint;
            cfg.block_only = block;
            cfg.state_dir = state_dir;
            cfg.checkpoint_seed = checkpoint_seed.map(|s| s.0);
            cfg.on_checkpoint = output::checkpoint_sink(output.progress);
            let job = net::ReceiveJob {
                listen,
                keep_serving,
                addr_file,
                wipe,
                cfg,
            };
            net::run_receive(job, connection, output, cancel).await
        }
        Command::Keygen {
            out,
            operation_id,
            valid_for,
        } => net::keygen(&out, &operation_id, valid_for),
    }
}

/// `mover inspect`: what a destination holds (its checkpoint, its files,
/// and how much of `against` by the quick check), as one JSON object.
fn inspect(root: &Path, against: Option<&Path>) -> u8 {
    if let Err(e) = std::fs::read_dir(root) {
        say!("mover: error: {}: {e}", root.display());
        return 11;
    }
    let root_text = root.display().to_string();
    if let Some(Err(e)) = against.map(std::fs::read_dir) {
        say!("mover: error: {}: {e}", against.unwrap_or(root).display());
        return 11;
    }
    let mut value = match mover::checkpoint::read(root) {
        Ok(cp) => serde_json::json!({
            "root": root_text,
            "checkpoint": cp.map(|cp| cp.describe()),
        }),
        Err(mover::checkpoint::CheckpointError::Io(e)) => {
            say!("mover: error: reading the checkpoint: {e}");
            return 11;
        }
        Err(e) => serde_json::json!({
            "root": root_text,
            "checkpoint": null,
            "problem": e.to_string(),
        }),
    };
    value["holds"] = serde_json::json!(mover::survey::holdings(root));
    if let Some(source) = against {
        value["quick_check"] = serde_json::json!(mover::survey::quick_check(source, root));
    }
    mover::stdio::out(&format!("{value}\n"));
    0
}

/// `--checkpoint-seed`'s bytes.
#[derive(Debug, Clone)]
struct Seed(Vec<u8>);

fn parse_seed(s: &str) -> Result<Seed, String> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map(Seed)
        .map_err(|e| format!("not base64: {e}"))
}

/// `mover inspect` of a block device or image: its size, and the
/// checkpoint its state directory holds.
fn inspect_block(root: &Path, state_dir: Option<&Path>) -> u8 {
    use mover::block::checkpoint::StateDir;
    let size = match mover::block::Source::open(root) {
        Ok(s) => s.size,
        Err(e) => {
            say!("mover: error: {}: {e}", root.display());
            return 11;
        }
    };
    let dir = state_dir
        .map(Path::to_path_buf)
        .or_else(|| StateDir::beside(root).filter(|d| d.is_dir()));
    let loaded = dir.map(|d| StateDir::at(&d).load());
    let mut value = serde_json::json!({
        "root": root.display().to_string(),
        "kind": "block",
        "size": size,
        "checkpoint": null,
    });
    match loaded {
        Some(Ok(Some(cp))) => value["checkpoint"] = cp.describe(),
        Some(Err(e)) => value["problem"] = e.to_string().into(),
        _ => {}
    }
    mover::stdio::out(&format!("{value}\n"));
    0
}

/// Appliers, prefetch lanes and commit groups keep files open at once: use the
/// hard limit on open files, since the soft one is often a low 1024.
fn raise_open_files_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

fn main() -> ExitCode {
    raise_open_files_limit();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 1 } else { 0 });
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say!("mover: error: cannot start the runtime: {e}");
            return ExitCode::from(14);
        }
    };
    ExitCode::from(runtime.block_on(run(cli)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_defaults_to_whole_file_and_send_to_delta() {
        let cli = Cli::try_parse_from(["mover", "sync", "a", "b"]).unwrap();
        let Command::Sync {
            transfer,
            operation,
            ..
        } = cli.command
        else {
            panic!()
        };
        assert!(transfer.options(true, &operation).whole_file);
        assert!(!transfer.options(false, &operation).whole_file);
        let cli =
            Cli::try_parse_from(["mover", "sync", "--no-whole-file", "-z", "a", "b"]).unwrap();
        let Command::Sync {
            transfer,
            operation,
            ..
        } = cli.command
        else {
            panic!()
        };
        assert!(!transfer.options(true, &operation).whole_file);
        assert_eq!(transfer.options(true, &operation).compress, Some(1));
    }

    #[test]
    fn send_either_dials_or_listens() {
        let send = |more: &[&str]| {
            let head = ["mover", "send", "--root", "src", "--insecure"];
            Cli::try_parse_from(head.iter().chain(more))
        };
        let listen = ["--listen", "127.0.0.1:0", "--accept-timeout", "30"];
        let Command::Send {
            to,
            listen: Some(addr),
            accept_timeout: Some(30),
            ..
        } = send(&listen).unwrap().command
        else {
            panic!("not a listening sender")
        };
        assert_eq!((to, addr.port()), (None, 0));
        assert!(send(&["--to", "10.0.0.1:7000"]).is_ok());
        // One of the two, never both; each one's options only with it.
        for refused in [
            &[][..],
            &["--to", "10.0.0.1:7000", "--listen", "127.0.0.1:0"],
            &["--listen", "127.0.0.1:0", "--connect-retry", "30"],
            &["--to", "10.0.0.1:7000", "--accept-timeout", "30"],
            &["--to", "10.0.0.1:7000", "--addr-file", "addr"],
            &["--listen", "receiver:7000"],
        ] {
            let e = send(refused).expect_err(&format!("{refused:?}"));
            assert!(e.use_stderr(), "{refused:?}: {e}");
        }
    }
}
