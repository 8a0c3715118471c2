//! A local copy: a sender and a receiver in one process, joined by an in-memory pipe.

use std::path::PathBuf;

use super::receiver::{receive, ReceiverConfig};
use super::sender::{send, SenderConfig};
use super::{ProgressFn, SessionError};
use crate::filter::Filter;
use crate::protocol::SessionOptions;
use crate::stats::Summary;
use tokio_util::sync::CancellationToken;

/// Bytes buffered in each direction of the in-memory pipe.
const PIPE: usize = 1024 * 1024;

/// How a local copy runs.
#[derive(Clone, Default)]
pub struct LocalConfig {
    pub bwlimit: Option<u64>,
    pub progress: Option<ProgressFn>,
    /// Keep the checkpoint (marked complete) after a clean finish.
    pub keep_checkpoint: bool,
    pub cancel: CancellationToken,
    /// A block session zeroes the destination past the source's size.
    pub zero_tail: bool,
    /// Where a block session keeps its checkpoint.
    pub state_dir: Option<PathBuf>,
}

/// Copies or re-syncs `src` into `dst` with the same engine as the network path.
pub async fn sync(
    src: PathBuf,
    dst: PathBuf,
    options: SessionOptions,
    cfg: LocalConfig,
) -> Result<Summary, SessionError> {
    let LocalConfig {
        bwlimit,
        progress,
        keep_checkpoint,
        cancel,
        zero_tail,
        state_dir,
    } = cfg;
    // Usage errors are reported as such, not as the broken pipe they would cause.
    Filter::new(&options.excludes).map_err(|e| SessionError::Usage(e.to_string()))?;
    if crate::block::kind_of(&src).is_none() {
        // A bad source must not leave an empty destination behind.
        std::fs::read_dir(&src)
            .map_err(|e| SessionError::local(format!("source {}", src.display()), e))?;
        refuse_nested(&src, &dst)?;
    }
    let (a, b) = tokio::io::duplex(PIPE);
    let mut rcfg = ReceiverConfig::new(dst);
    rcfg.progress = progress;
    rcfg.cancel = cancel.clone();
    rcfg.keep_checkpoint = keep_checkpoint;
    rcfg.state_dir = state_dir;
    // An in-memory pipe cannot go half-open: no idle timeout.
    let scfg = SenderConfig {
        root: src,
        options,
        bwlimit,
        progress: None,
        timeout: None,
        cancel,
        zero_tail,
    };
    let receiver = tokio::spawn(receive(b, rcfg));
    let sent = send(a, scfg).await;
    let received = receiver
        .await
        .map_err(|e| SessionError::Internal(e.to_string()))?;
    match (sent, received) {
        // The receiver counted both directions of the pipe; only the
        // sender knows what it read.
        (Ok(sent), Ok(mut s)) => {
            s.source_bytes_read = sent.source_bytes_read;
            Ok(s)
        }
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

/// A destination inside the source would be walked while it is written, and
/// copied into itself again and again.
fn refuse_nested(src: &std::path::Path, dst_arg: &std::path::Path) -> Result<(), SessionError> {
    let src = std::fs::canonicalize(src)
        .map_err(|e| SessionError::local(format!("source {}", src.display()), e))?;
    // The destination may not exist yet: resolve its nearest existing ancestor.
    let mut probe = dst_arg.to_path_buf();
    let resolved = loop {
        match std::fs::canonicalize(&probe) {
            Ok(p) => break p,
            Err(_) if probe.pop() && !probe.as_os_str().is_empty() => continue,
            Err(_) => break std::env::current_dir().unwrap_or_default(),
        }
    };
    // The part that does not exist yet can only be resolved by its words.
    let mut dst = resolved;
    for part in dst_arg.strip_prefix(&probe).unwrap_or(dst_arg).components() {
        match part {
            std::path::Component::ParentDir => {
                dst.pop();
            }
            std::path::Component::Normal(name) => dst.push(name),
            _ => {}
        }
    }
    if dst.starts_with(&src) {
        return Err(SessionError::Usage(format!(
            "the destination {} is inside the source {}: choose another destination",
            dst.display(),
            src.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destination_inside_the_source_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir(&src).unwrap();
        assert!(refuse_nested(&src, &src.join("backup")).is_err());
        assert!(refuse_nested(&src, &src.join("a/b/c")).is_err());
        assert!(refuse_nested(&src, &src).is_err());
        assert!(refuse_nested(&src, &t.path().join("dst")).is_ok());
        assert!(refuse_nested(&src, &t.path().join("src-copy")).is_ok());
        let back_in = t.path().join("other/missing/../../src/x");
        assert!(
            refuse_nested(&src, &back_in).is_err(),
            "'..' cannot hide the source"
        );
        let out_again = src.join("new/../../elsewhere");
        assert!(
            refuse_nested(&src, &out_again).is_ok(),
            "'..' can leave the source"
        );
    }
}
