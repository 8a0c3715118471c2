//! The task that owns a connection's write half.

use std::time::{Duration, Instant};

use futures::SinkExt;
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::codec::FramedWrite;

use super::HEARTBEAT;

use crate::protocol::{Frame, FrameCodec, ProtocolError, WireCounter};

/// Batches queued for the writer before senders wait.
pub const QUEUE: usize = 8;

/// Starts the writer task for a connection: frames sent on the returned
/// channel go out in order, with heartbeats every [`HEARTBEAT`] of silence.
pub fn start<W: AsyncWrite + Unpin + Send + 'static>(
    sink: FramedWrite<W, FrameCodec>,
    bwlimit: Option<u64>,
    sent: WireCounter,
) -> (
    mpsc::Sender<Vec<Frame>>,
    JoinHandle<Result<(), ProtocolError>>,
) {
    let (tx, rx) = mpsc::channel(QUEUE);
    (
        tx,
        tokio::spawn(run(sink, rx, bwlimit, sent, Some(HEARTBEAT))),
    )
}

/// Writes queued frames until the queue closes, flushing whenever it runs dry
/// (so small frames share system calls) and pacing to `bwlimit` bytes/s
/// (`sent` is the counter of the codec inside `sink`). After `heartbeat` with
/// nothing to send it sends a `Heartbeat`, so the peer can tell a quiet phase
/// (a long scan, a slow disk) from a dead connection.
pub async fn run<W: AsyncWrite + Unpin>(
    mut sink: FramedWrite<W, FrameCodec>,
    mut rx: mpsc::Receiver<Vec<Frame>>,
    bwlimit: Option<u64>,
    sent: WireCounter,
    heartbeat: Option<Duration>,
) -> Result<(), ProtocolError> {
    let start = Instant::now();
    loop {
        let next = match heartbeat {
            Some(every) => match tokio::time::timeout(every, rx.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    sink.send(Frame::Heartbeat).await?;
                    continue;
                }
            },
            None => rx.recv().await,
        };
        let Some(batch) = next else { break };
        for frame in batch {
            sink.feed(frame).await?;
        }
        if let Some(rate) = bwlimit {
            sink.flush().await?;
            let due = Duration::from_secs_f64(sent.get() as f64 / rate as f64);
            // A slow cap can mean long pauses: keep heartbeats going through them.
            while let Some(wait) = due.checked_sub(start.elapsed()) {
                match heartbeat {
                    Some(every) if wait > every => {
                        tokio::time::sleep(every).await;
                        sink.send(Frame::Heartbeat).await?;
                    }
                    _ => {
                        tokio::time::sleep(wait).await;
                        break;
                    }
                }
            }
        } else if rx.is_empty() {
            sink.flush().await?;
        }
    }
    sink.flush().await?;
    sink.close().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use tokio_util::codec::FramedRead;

    #[tokio::test]
    async fn a_quiet_writer_sends_heartbeats() {
        let (a, b) = tokio::io::duplex(1024);
        let (tx, rx) = mpsc::channel(1);
        let sink = FramedWrite::new(a, FrameCodec::new(WireCounter::default()));
        let writer = tokio::spawn(run(
            sink,
            rx,
            None,
            WireCounter::default(),
            Some(Duration::from_millis(20)),
        ));
        let mut frames = FramedRead::new(b, FrameCodec::new(WireCounter::default()));
        assert!(matches!(frames.next().await, Some(Ok(Frame::Heartbeat))));
        assert!(matches!(frames.next().await, Some(Ok(Frame::Heartbeat))));
        drop(tx);
        writer.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn heartbeats_continue_through_bandwidth_pauses() {
        use crate::delta::Op;
        use crate::protocol::WireOp;
        let (a, b) = tokio::io::duplex(1 << 16);
        let (tx, rx) = mpsc::channel(1);
        let counter = WireCounter::default();
        let sink = FramedWrite::new(a, FrameCodec::new(counter.clone()));
        // About 500 bytes at 1000 B/s: half a second of pacing.
        let writer = tokio::spawn(run(
            sink,
            rx,
            Some(1000),
            counter,
            Some(Duration::from_millis(50)),
        ));
        let ops = vec![WireOp::Plain(Op::Literal(vec![7; 500]))];
        tx.send(vec![Frame::Ops { id: 0, ops }]).await.unwrap();
        drop(tx);
        let frames: Vec<_> = FramedRead::new(b, FrameCodec::new(WireCounter::default()))
            .collect()
            .await;
        writer.await.unwrap().unwrap();
        let beats = frames
            .iter()
            .filter(|f| matches!(f, Ok(Frame::Heartbeat)))
            .count();
        assert!(beats >= 3, "{beats} heartbeats during the pause");
    }
}
