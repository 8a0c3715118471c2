//! `mover`: copy and re-sync directory trees, locally or between two hosts.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mover::protocol::SessionOptions;
use mover::session::receiver::{receive, ReceiverConfig};
use mover::session::sender::{send, SenderConfig};
use mover::session::{local, ProgressFn, SessionError, MIN_TIMEOUT};
use mover::stats::{Progress, Summary};
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// Chunked, resumable rsync-style delta transfer of directory trees (volmig's data mover).
///
/// Exit codes: 0 ok; 1 usage; 2 incompatible peer; 10 connection; 11 local file I/O;
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
        output: OutputArgs,
    },
    /// Send the tree at --root to a receiver.
    Send {
        /// The receiver's address, HOST:PORT.
        #[arg(long, value_name = "ADDR")]
        to: String,
        /// The source directory.
        #[arg(long)]
        root: PathBuf,
        #[command(flatten)]
        transfer: TransferArgs,
        #[command(flatten)]
        operation: OperationArgs,
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
        /// The destination directory (created if missing).
        #[arg(long)]
        root: PathBuf,
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
        #[command(flatten)]
        connection: ConnectionArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Print what a destination holds of an operation (its checkpoint) as JSON.
    Inspect {
        /// The destination directory.
        #[arg(long)]
        root: PathBuf,
    },
}

#[derive(Args, Debug)]
struct OperationArgs {
    /// The operation this run is an attempt of: the receiver keeps a checkpoint
    /// at DST/.volmig and a later attempt resumes from it.
    #[arg(long, value_name = "ID", value_parser = parse_operation_id)]
    operation_id: Option<String>,
    /// The attempt number; an attempt older than the checkpoint's is refused.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "operation_id",
          value_parser = clap::value_parser!(u32).range(1..))]
    attempt: u32,
    /// After the transfer, compare both trees entry by entry (contents by BLAKE3 and metadata).
    #[arg(long)]
    verify: bool,
}

fn parse_operation_id(s: &str) -> Result<String, String> {
    mover::checkpoint::check_operation_id(s).map(|()| s.to_string())
}

#[derive(Args, Debug)]
struct TransferArgs {
    /// Delete destination entries that are not in the source (excluded ones are kept).
    #[arg(long)]
    delete: bool,
    /// Compare contents (BLAKE3) instead of size and modification time.
    #[arg(short = 'c', long)]
    checksum: bool,
    /// Skip entries matching PATTERN (rsync rules: `*.log`, `/top-only`, `dirs-only/`, `**`). Repeatable.
    #[arg(long, value_name = "PATTERN")]
    exclude: Vec<String>,
    /// Compress literal data with zstd.
    #[arg(short = 'z', long)]
    compress: bool,
    /// zstd level for --compress: 1 is fast and compresses text well; higher levels suit slow links.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    compress_level: i32,
    /// Cap outgoing bandwidth: KiB/s, or with a suffix K, M, G (e.g. 20M).
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    bwlimit: Option<u64>,
    /// Update destination files in place instead of temp file + fsync + rename.
    #[arg(long)]
    inplace: bool,
    /// Send whole files, no delta (the default for `sync`).
    #[arg(short = 'W', long, conflicts_with = "no_whole_file")]
    whole_file: bool,
    /// Use the delta algorithm even for a local `sync`.
    #[arg(long)]
    no_whole_file: bool,
}

impl TransferArgs {
    fn options(&self, local: bool, op: &OperationArgs) -> SessionOptions {
        SessionOptions {
            delete: self.delete,
            checksum: self.checksum,
            excludes: self.exclude.clone(),
            compress: self.compress.then_some(self.compress_level),
            inplace: self.inplace,
            whole_file: self.whole_file || (local && !self.no_whole_file),
            operation_id: op.operation_id.clone(),
            attempt: op.attempt,
            verify: op.verify,
        }
    }
}

#[derive(Args, Debug)]
struct ConnectionArgs {
    /// Give up when the peer sends nothing, not even a heartbeat, for this many
    /// seconds (heartbeats go out every 2 s; at least 5; 0 waits forever).
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = parse_timeout)]
    timeout: u64,
}

impl ConnectionArgs {
    fn timeout(&self) -> Option<Duration> {
        (self.timeout > 0).then(|| Duration::from_secs(self.timeout))
    }
}

fn parse_timeout(s: &str) -> Result<u64, String> {
    let secs: u64 = s
        .parse()
        .map_err(|_| format!("invalid timeout {s:?}: whole seconds"))?;
    if secs != 0 && secs < MIN_TIMEOUT.as_secs() {
        return Err(format!(
            "a timeout under {}s would cut live peers between heartbeats",
            MIN_TIMEOUT.as_secs()
        ));
    }
    Ok(secs)
}

#[derive(Args, Debug)]
struct OutputArgs {
    /// Progress events: `json` prints one JSON object per line on stdout.
    #[arg(long, value_enum, default_value_t = ProgressMode::None)]
    progress: ProgressMode,
    /// No human-readable summary on stderr.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ProgressMode {
    None,
    Json,
}

/// A JSON line on stdout: `{"event": ..., fields...}`.
#[derive(Serialize)]
struct Event<'a, T: Serialize> {
    event: &'a str,
    #[serde(flatten)]
    data: T,
}

#[derive(Serialize)]
struct Outcome<'a> {
    ok: bool,
    exit_code: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retryable: Option<bool>,
    #[serde(flatten)]
    summary: Option<&'a Summary>,
}

fn emit<T: Serialize>(event: &str, data: T) {
    if let Ok(line) = serde_json::to_string(&Event { event, data }) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

fn progress_sink(mode: ProgressMode) -> Option<ProgressFn> {
    (mode == ProgressMode::Json).then(|| {
        let last = Arc::new(Mutex::new(None::<Progress>));
        Arc::new(move |p: &Progress| {
            // Identical consecutive events carry no news.
            if let Ok(mut last) = last.lock() {
                if last.as_ref() == Some(p) {
                    return;
                }
                *last = Some(p.clone());
            }
            emit("progress", p);
        }) as ProgressFn
    })
}

/// Reports a session's end and returns the exit code.
fn finish(result: Result<Summary, SessionError>, output: &OutputArgs) -> u8 {
    match result {
        Ok(summary) => {
            let code = summary.exit_code();
            emit(
                "summary",
                Outcome {
                    ok: code == 0,
                    exit_code: code,
                    error: None,
                    retryable: None,
                    summary: Some(&summary),
                },
            );
            if !output.quiet {
                eprintln!("mover: {}", summary.human());
            }
            code as u8
        }
        Err(e) => {
            let code = e.exit_code();
            let msg = e.to_string();
            emit(
                "summary",
                Outcome {
                    ok: false,
                    exit_code: code,
                    error: Some(&msg),
                    retryable: Some(e.is_retryable()),
                    summary: None,
                },
            );
            eprintln!("mover: error: {msg}");
            code as u8
        }
    }
}

/// Parses an rsync-style rate into bytes per second.
fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches(['b', 'B']);
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1 << 10),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("invalid rate {s:?} (examples: 500, 20M, 1.5G)"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err(format!("rate must be positive: {s:?}"));
    }
    Ok(((v * mult as f64) as u64).max(1))
}

/// Writes `addr` to `path` atomically.
fn write_addr_file(path: &Path, addr: SocketAddr) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    std::fs::write(&tmp, addr.to_string())?;
    std::fs::rename(&tmp, path)
}

/// Cancels `token` on SIGTERM (a pod being deleted) or SIGINT: the session
/// then stops cleanly, removes its temporary files, tells its peer, exits 20.
fn cancel_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("mover: cannot watch for SIGTERM: {e}");
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        eprintln!("mover: interrupted, stopping");
        token.cancel();
        // A second signal means now.
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        eprintln!("mover: interrupted again, exiting");
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
            output,
        } => {
            let result = local::sync(
                src,
                dst,
                transfer.options(true, &operation),
                local::LocalConfig {
                    bwlimit: transfer.bwlimit,
                    progress: progress_sink(output.progress),
                    keep_checkpoint,
                    cancel,
                },
            )
            .await;
            finish(result, &output)
        }
        Command::Inspect { root } => inspect(&root),
        Command::Send {
            to,
            root,
            transfer,
            operation,
            connection,
            output,
        } => {
            // A missing source is the user's to fix: say so before touching the network.
            if let Err(e) = std::fs::read_dir(&root) {
                let err = SessionError::local(format!("source {}", root.display()), e);
                return finish(Err(err), &output);
            }
            let connected = tokio::select! {
                c = TcpStream::connect(&to) => c,
                () = cancel.cancelled() => return finish(Err(SessionError::Interrupted), &output),
            };
            let stream = match connected {
                Ok(s) => s,
                Err(e) => {
                    let err = SessionError::Protocol(
                        std::io::Error::new(e.kind(), format!("cannot connect to {to}: {e}"))
                            .into(),
                    );
                    return finish(Err(err), &output);
                }
            };
            let _ = stream.set_nodelay(true);
            let cfg = SenderConfig {
                root,
                options: transfer.options(false, &operation),
                bwlimit: transfer.bwlimit,
                progress: progress_sink(output.progress),
                timeout: connection.timeout(),
                cancel,
            };
            finish(send(stream, cfg).await, &output)
        }
        Command::Receive {
            listen,
            root,
            keep_serving,
            addr_file,
            bwlimit,
            operation_id,
            attempt,
            keep_checkpoint,
            connection,
            output,
        } => {
            let listener = match TcpListener::bind(listen).await {
                Ok(l) => l,
                Err(e) => {
                    let err = SessionError::Protocol(
                        std::io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}"))
                            .into(),
                    );
                    return finish(Err(err), &output);
                }
            };
            let addr = listener.local_addr().unwrap_or(listen);
            eprintln!("mover: listening on {addr}");
            if let Some(path) = &addr_file {
                if let Err(e) = write_addr_file(path, addr) {
                    let err = SessionError::local(format!("writing {}", path.display()), e);
                    return finish(Err(err), &output);
                }
            }
            let mut cfg = ReceiverConfig::new(root);
            cfg.bwlimit = bwlimit;
            cfg.progress = progress_sink(output.progress);
            cfg.timeout = connection.timeout();
            cfg.cancel = cancel.clone();
            cfg.operation_id = operation_id;
            cfg.attempt = attempt;
            cfg.keep_checkpoint = keep_checkpoint;
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    () = cancel.cancelled() => return finish(Err(SessionError::Interrupted), &output),
                };
                let code = match accepted {
                    Ok((stream, peer)) => {
                        let _ = stream.set_nodelay(true);
                        if !output.quiet {
                            eprintln!("mover: session from {peer}");
                        }
                        finish(receive(stream, cfg.clone()).await, &output)
                    }
                    Err(e) => finish(Err(SessionError::Protocol(e.into())), &output),
                };
                if !keep_serving {
                    return code;
                }
                // Serving stops on a signal even when the last session completed.
                if cancel.is_cancelled() {
                    return 20;
                }
            }
        }
    }
}

/// `mover inspect`: the checkpoint at a destination, as one JSON object.
fn inspect(root: &Path) -> u8 {
    if let Err(e) = std::fs::read_dir(root) {
        eprintln!("mover: error: {}: {e}", root.display());
        return 11;
    }
    let root_text = root.display().to_string();
    let value = match mover::checkpoint::read(root) {
        Ok(cp) => serde_json::json!({
            "root": root_text,
            "checkpoint": cp.map(|cp| cp.describe()),
        }),
        Err(mover::checkpoint::CheckpointError::Io(e)) => {
            eprintln!("mover: error: reading the checkpoint: {e}");
            return 11;
        }
        Err(e) => serde_json::json!({
            "root": root_text,
            "checkpoint": null,
            "problem": e.to_string(),
        }),
    };
    println!("{value}");
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
            eprintln!("mover: error: cannot start the runtime: {e}");
            return ExitCode::from(14);
        }
    };
    ExitCode::from(runtime.block_on(run(cli)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_follow_rsync_units() {
        assert_eq!(parse_rate("100"), Ok(100 * 1024));
        assert_eq!(parse_rate("20M"), Ok(20 << 20));
        assert_eq!(parse_rate("1.5g"), Ok(3 << 29));
        assert_eq!(parse_rate("4KB"), Ok(4096));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0").is_err());
    }

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
}
