//! A local copy: a sender and a receiver in one process, joined by an in-memory pipe.

use std::path::PathBuf;

use super::receiver::{receive, ReceiverConfig};
use super::sender::{send, SenderConfig};
use super::{ProgressFn, SessionError};
use crate::protocol::SessionOptions;
use crate::stats::Summary;

/// Bytes buffered in each direction of the in-memory pipe.
const PIPE: usize = 4 * 1024 * 1024;

/// Copies or re-syncs `src` into `dst` with the same engine as the network path.
pub async fn sync(
    src: PathBuf,
    dst: PathBuf,
    options: SessionOptions,
    progress: Option<ProgressFn>,
) -> Result<Summary, SessionError> {
    let (a, b) = tokio::io::duplex(PIPE);
    let mut rcfg = ReceiverConfig::new(dst);
    rcfg.progress = progress;
    let scfg = SenderConfig {
        root: src,
        options,
        bwlimit: None,
        progress: None,
    };
    let receiver = tokio::spawn(receive(b, rcfg));
    let sent = send(a, scfg).await;
    let received = receiver
        .await
        .map_err(|e| SessionError::Internal(e.to_string()))?;
    // The receiver's error is the more telling one when both fail.
    match (sent, received) {
        (_, Err(e)) | (Err(e), Ok(_)) => Err(e),
        // The receiver counted both directions of the pipe.
        (Ok(_), Ok(s)) => Ok(s),
    }
}
