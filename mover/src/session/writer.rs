//! The task that owns a connection's write half.

use std::time::{Duration, Instant};

use futures::SinkExt;
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio_util::codec::FramedWrite;

use crate::protocol::{Frame, FrameCodec, ProtocolError, WireCounter};

/// Batches queued for the writer before senders wait.
pub const QUEUE: usize = 8;

/// Writes queued frames until the queue closes, flushing whenever it runs dry
/// (so small frames share system calls) and pacing to `bwlimit` bytes/s
/// (`sent` is the counter of the codec inside `sink`).
pub async fn run<W: AsyncWrite + Unpin>(
    mut sink: FramedWrite<W, FrameCodec>,
    mut rx: mpsc::Receiver<Vec<Frame>>,
    bwlimit: Option<u64>,
    sent: WireCounter,
) -> Result<(), ProtocolError> {
    let start = Instant::now();
    while let Some(batch) = rx.recv().await {
        for frame in batch {
            sink.feed(frame).await?;
        }
        if let Some(rate) = bwlimit {
            sink.flush().await?;
            let due = Duration::from_secs_f64(sent.get() as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        } else if rx.is_empty() {
            sink.flush().await?;
        }
    }
    sink.flush().await?;
    sink.close().await?;
    Ok(())
}
