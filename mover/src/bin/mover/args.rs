//! Command-line arguments shared by the subcommands, and their parsers.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use mover::protocol::SessionOptions;
use mover::session::{SessionError, MIN_TIMEOUT};
use mover::units::parse_rate;

#[derive(Args, Debug)]
pub struct OperationArgs {
    /// The operation this run is an attempt of: the receiver keeps a checkpoint
    /// at DST/.volmig and a later attempt resumes from it.
    #[arg(long, value_name = "ID", value_parser = parse_operation_id)]
    pub operation_id: Option<String>,
    /// The attempt number; an attempt older than the checkpoint's is refused.
    /// Needs an operation: --operation-id, or --tls-dir whose material names one.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub attempt: u32,
    /// After the transfer, compare both trees entry by entry (contents by BLAKE3 and metadata).
    #[arg(long)]
    pub verify: bool,
}

/// An attempt after the first is an attempt of some operation.
pub fn check_attempt(opts: &SessionOptions) -> Result<(), SessionError> {
    if opts.attempt > 1 && opts.operation_id.is_none() {
        return Err(SessionError::Usage(format!(
            "--attempt {} needs an operation: --operation-id, or --tls-dir with its key material",
            opts.attempt
        )));
    }
    Ok(())
}

pub fn parse_operation_id(s: &str) -> Result<String, String> {
    mover::checkpoint::check_operation_id(s).map(|()| s.to_string())
}

#[derive(Args, Debug)]
pub struct TransferArgs {
    /// Delete destination entries that are not in the source (excluded ones are kept).
    #[arg(long)]
    pub delete: bool,
    /// Compare contents (BLAKE3) instead of size and modification time.
    #[arg(short = 'c', long)]
    pub checksum: bool,
    /// Skip entries matching PATTERN (rsync rules: `*.log`, `/top-only`, `dirs-only/`, `**`). Repeatable.
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,
    /// Compress literal data with zstd.
    #[arg(short = 'z', long)]
    pub compress: bool,
    /// zstd level for --compress: 1 is fast and compresses text well; higher levels suit slow links.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub compress_level: i32,
    /// Cap outgoing bandwidth: KiB/s, or with a suffix K, M, G (e.g. 20M).
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    pub bwlimit: Option<u64>,
    /// Update destination files in place instead of temp file + fsync + rename.
    #[arg(long)]
    pub inplace: bool,
    /// Send whole files, no delta (the default for `sync`).
    #[arg(short = 'W', long, conflicts_with = "no_whole_file")]
    pub whole_file: bool,
    /// Use the delta algorithm even for a local `sync`.
    #[arg(long)]
    pub no_whole_file: bool,
}

impl TransferArgs {
    pub fn options(&self, local: bool, op: &OperationArgs) -> SessionOptions {
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
            block: None,
        }
    }
}

/// How a block device or image is copied (a source that is one is copied
/// as a block session whether or not `--block` is given).
#[derive(Args, Debug)]
pub struct BlockArgs {
    /// The source must be a block device or a regular file (an image),
    /// copied as one: refused for a directory.
    #[arg(long)]
    pub block: bool,
    /// Zero the destination past the source's size (block sessions; by
    /// default that tail is kept).
    #[arg(long)]
    pub zero_tail: bool,
}

impl BlockArgs {
    /// `--block` given for a source that is not a device or a file.
    pub fn check(&self, source: &std::path::Path) -> Result<(), SessionError> {
        if self.block && mover::block::kind_of(source).is_none() {
            return Err(SessionError::Usage(format!(
                "--block: {} is not a block device or a regular file",
                source.display()
            )));
        }
        Ok(())
    }
}

#[derive(Args, Debug)]
pub struct ConnectionArgs {
    /// Give up when the peer sends nothing, not even a heartbeat, for this many
    /// seconds (heartbeats go out every 2 s; at least 5; 0 waits forever).
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = parse_timeout)]
    pub timeout: u64,
    /// Key material from `mover keygen` (or the operation's Secret): the peers
    /// authenticate each other with TLS 1.3. Implies the material's operation id.
    #[arg(long, value_name = "DIR", required_unless_present = "insecure")]
    pub tls_dir: Option<PathBuf>,
    /// Plain TCP: no encryption, and anyone who can reach the port is served.
    /// Only for trusted networks and tests.
    #[arg(long, conflicts_with = "tls_dir")]
    pub insecure: bool,
}

impl ConnectionArgs {
    pub fn timeout(&self) -> Option<Duration> {
        (self.timeout > 0).then(|| Duration::from_secs(self.timeout))
    }

    /// How long a TLS handshake may take: a connection that says nothing is
    /// not allowed to hold a receiver that waits for its real sender.
    pub fn handshake_timeout(&self) -> Duration {
        self.timeout().unwrap_or(Duration::from_secs(60))
    }
}

pub fn parse_timeout(s: &str) -> Result<u64, String> {
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
pub struct OutputArgs {
    /// Progress events: `json` prints one JSON object per line on stdout.
    #[arg(long, value_enum, default_value_t = ProgressMode::None)]
    pub progress: ProgressMode,
    /// No human-readable summary on stderr.
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    None,
    Json,
}

/// Parses a duration: whole seconds, or with a suffix s, m, h, d (e.g. `7d`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c),
        _ => (t, 's'),
    };
    let mult = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86400,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: use s, m, h or d (e.g. 7d)"
            ))
        }
    };
    match num.parse::<u64>() {
        Ok(n) if n > 0 => Ok(Duration::from_secs(n.saturating_mul(mult))),
        _ => Err(format!(
            "invalid duration {s:?}: a positive whole number with s, m, h or d"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86400)));
        assert!(parse_duration("0h").is_err());
        assert!(parse_duration("2w").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
