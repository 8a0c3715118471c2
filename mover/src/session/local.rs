//! A local copy: a sender and a receiver in one process, joined by an in-memory pipe.

use std::path::PathBuf;

use super::receiver::{receive, ReceiverConfig};
use super::sender::{send, SenderConfig};
use super::{ProgressFn, SessionError};
use crate::filter::Filter;
use crate::protocol::SessionOptions;
use crate::stats::Summary;

/// Bytes buffered in each direction of the in-memory pipe.
const PIPE: usize = 1024 * 1024;

/// Copies or re-syncs `src` into `dst` with the same engine as the network path.
pub async fn sync(
    src: PathBuf,
    dst: PathBuf,
    options: SessionOptions,
    bwlimit: Option<u64>,
    progress: Option<ProgressFn>,
) -> Result<Summary, SessionError> {
    // Usage errors are reported as such, not as the broken pipe they would cause.
    Filter::new(&options.excludes).map_err(|e| SessionError::Usage(e.to_string()))?;
    // A bad source must not leave an empty destination behind.
    std::fs::read_dir(&src)
        .map_err(|e| SessionError::local(format!("source {}", src.display()), e))?;
    let (a, b) = tokio::io::duplex(PIPE);
    let mut rcfg = ReceiverConfig::new(dst);
    rcfg.progress = progress;
    let scfg = SenderConfig {
        root: src,
        options,
        bwlimit,
        progress: None,
    };
    let receiver = tokio::spawn(receive(b, rcfg));
    let sent = send(a, scfg).await;
    let received = receiver
        .await
        .map_err(|e| SessionError::Internal(e.to_string()))?;
    match (sent, received) {
        // The receiver counted both directions of the pipe.
        (Ok(_), Ok(s)) => Ok(s),
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
        // Each side reports the other's failure as an abort: show the cause.
        (Err(s), Err(r)) => Err(match (s, r) {
            (SessionError::PeerAbort(_), r) => r,
            (s, SessionError::PeerAbort(_)) => s,
            (s, r) if s.weight() > r.weight() => s,
            (_, r) => r,
        }),
    }
}
