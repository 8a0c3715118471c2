//! Sender and receiver sessions.
//!
//! Each side is a small pipeline: an async task reads frames, one writes them,
//! and blocking worker threads do the file work (walking and delta on the
//! sender; comparing, signing and patching on the receiver). The frames that
//! are legal at each point are decided by an explicit [`sender::State`] /
//! [`receiver::State`] machine with a `step` function.
//!
//! No step waits for a reply per file: the file list is credit-limited, the
//! requests are bounded in flight, and everything else streams, so thousands
//! of small files cost no round trip each and memory stays bounded.

mod flow;
pub mod local;
pub mod receiver;
pub mod sender;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::protocol::{AbortReason, ProtocolError};
use crate::stats::Progress;
pub use receiver::remove::{wipe, Removed};

/// How often a side with nothing to send says it is still there.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// The shortest idle timeout that heartbeats can keep alive.
pub const MIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Receives progress events (about twice a second, and once at the end).
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;
/// Told each block checkpoint as it is recorded (its encoding): what a
/// driver keeps to seed the next attempt's receiver, whose state directory
/// may not outlive its pod.
#[cfg(feature = "engine")]
pub type CheckpointFn =
    Arc<dyn Fn(&crate::block::checkpoint::BlockCheckpoint, &[u8]) + Send + Sync>;

/// Why a session failed as a whole (per-file problems are counted in the summary instead).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error("the peer ended the session: {}", .0.message)]
    PeerAbort(AbortReason),
    #[error("{context}: {source}")]
    Local { context: String, source: io::Error },
    #[error("{0}")]
    Usage(String),
    /// A worker stopped because another part of the session failed first.
    #[error("the session ended early")]
    Cancelled,
    /// Stopped on request (SIGTERM, SIGINT): nothing half-written is left behind.
    #[error("interrupted")]
    Interrupted,
    /// Source entries this sender may not read (permission denied to its
    /// uid and groups); everything else was sent.
    #[error(
        "{count} source entries could not be read as uid {uid} gid {gid} (permission denied): {}{}",
        paths.join(", "),
        match count.saturating_sub(paths.len() as u64) {
            0 => String::new(),
            more => format!(" and {more} more"),
        }
    )]
    Unreadable {
        count: u64,
        paths: Vec<String>,
        uid: u32,
        gid: u32,
    },
    #[error("internal error: {0}")]
    Internal(String),
    /// `receive --wipe` could not empty the destination: `what` names the
    /// first entry that could not be removed. Not retryable whatever the
    /// error: the same entry would stop the next wipe.
    #[error("cannot wipe the destination: {what}: {source}")]
    Wipe { what: String, source: io::Error },
    /// A block session's destination is smaller than its source: refused
    /// before anything is written, and again next time.
    #[error(
        "the destination holds {destination} bytes, less than the source's {wanted}: a block \
         copy needs at least the source's size (nothing was written)"
    )]
    TooSmall { destination: u64, wanted: u64 },
    /// A block session's destination cannot be written for good (a mounted
    /// device, a path that is neither a device nor a file).
    #[error("{0}")]
    Unusable(String),
    /// What a block session wrote does not hash to what the sender read:
    /// the next attempt compares every block again.
    #[error("{0}")]
    Differs(String),
}

impl SessionError {
    pub fn local(context: impl Into<String>, source: io::Error) -> SessionError {
        SessionError::Local {
            context: context.into(),
            source,
        }
    }

    /// Whether a new attempt may succeed where this one failed.
    pub fn is_retryable(&self) -> bool {
        use rustix::io::Errno;
        match self {
            SessionError::Protocol(p) => p.is_retryable(),
            SessionError::PeerAbort(r) => r.retryable,
            SessionError::Tls(t) => t.is_retryable(),
            SessionError::Local { source, .. } => !matches!(
                source.raw_os_error().map(Errno::from_raw_os_error),
                Some(
                    Errno::NOSPC
                        | Errno::DQUOT
                        | Errno::ACCESS
                        | Errno::PERM
                        | Errno::ROFS
                        | Errno::NOENT
                        | Errno::NOTDIR
                )
            ),
            SessionError::Cancelled | SessionError::Interrupted => true,
            SessionError::Usage(_) | SessionError::Internal(_) => false,
            // The sender would be the same identity next time.
            SessionError::Unreadable { .. } => false,
            SessionError::Wipe { .. } => false,
            SessionError::TooSmall { .. } | SessionError::Unusable(_) => false,
            SessionError::Differs(_) => true,
        }
    }

    /// The documented process exit code (rsync's numbering where it has one).
    pub fn exit_code(&self) -> i32 {
        match self {
            SessionError::Usage(_) => 1,
            SessionError::Tls(t) => t.exit_code(),
            SessionError::Protocol(
                ProtocolError::NotMover
                | ProtocolError::Incompatible { .. }
                | ProtocolError::PeerSpeaksTls,
            ) => 2,
            SessionError::Protocol(ProtocolError::Io(_) | ProtocolError::Closed(_)) => 10,
            SessionError::Local { .. }
            | SessionError::Wipe { .. }
            | SessionError::TooSmall { .. }
            | SessionError::Unusable(_) => 11,
            SessionError::Protocol(ProtocolError::Violation(_) | ProtocolError::Decode(_)) => 12,
            SessionError::PeerAbort(_) => 13,
            SessionError::Cancelled | SessionError::Internal(_) => 14,
            SessionError::Interrupted => 20,
            // rsync's "partial transfer due to error".
            SessionError::Unreadable { .. } | SessionError::Differs(_) => 23,
        }
    }

    /// How much this error explains a failure: a worker that stopped because
    /// its channel closed explains nothing, a dropped connection little, a
    /// local or protocol error most.
    pub(crate) fn weight(&self) -> u8 {
        match self {
            SessionError::Cancelled => 0,
            SessionError::Protocol(ProtocolError::Io(_) | ProtocolError::Closed(_)) => 1,
            SessionError::PeerAbort(_) => 2,
            _ => 3,
        }
    }

    /// What to tell the peer about this failure.
    pub fn to_abort(&self) -> AbortReason {
        AbortReason {
            message: self.to_string(),
            retryable: self.is_retryable(),
            exit_code: self.exit_code(),
        }
    }
}

/// Prints a per-file warning on stderr.
fn warn(msg: impl std::fmt::Display) {
    use std::io::Write;
    // A warning that cannot be written must not stop the session.
    let _ = writeln!(std::io::stderr(), "mover: {msg}");
}

/// The error of a worker whose channel closed because another part failed first.
pub(crate) fn cancelled() -> SessionError {
    SessionError::Cancelled
}

/// Errors after which nothing else can be written either.
pub fn is_fatal(err: &io::Error) -> bool {
    use rustix::io::Errno;
    matches!(
        err.raw_os_error().map(Errno::from_raw_os_error),
        Some(Errno::NOSPC | Errno::ROFS | Errno::DQUOT)
    )
}
