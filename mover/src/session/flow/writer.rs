//! The task that owns a connection's write half.

use std::time::Duration;

use futures::SinkExt;
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::codec::FramedWrite;

use crate::session::HEARTBEAT;

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

/// Closes the queue to the writer task and waits until it has sent
/// everything queued and flushed the connection.
pub async fn finish(
    out: mpsc::Sender<Vec<Frame>>,
    writer: JoinHandle<Result<(), ProtocolError>>,
) -> Result<(), crate::session::SessionError> {
    drop(out);
    writer
        .await
        .map_err(|e| crate::session::SessionError::Internal(e.to_string()))??;
    Ok(())
}

/// How far behind its pace a `--bwlimit` writer may fall (while it has nothing
/// to send) and then catch up at full speed.
const MAX_CREDIT: Duration = Duration::from_millis(100);

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
    // Pacing: `sent - base_sent` bytes are due `base + (sent - base_sent) / rate`.
    let (mut base, mut base_sent) = (Instant::now(), 0u64);
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
        for frame in crate::protocol::pack::coalesce(batch) {
            sink.feed(frame).await?;
        }
        if let Some(rate) = bwlimit {
            sink.flush().await?;
            let now = sent.get();
            let due = Duration::from_secs_f64((now - base_sent) as f64 / rate as f64);
            // Time spent with nothing to send is not saved up for a burst at
            // full speed afterwards: at most MAX_CREDIT of it counts.
            if base.elapsed() > due + MAX_CREDIT {
                (base, base_sent) = (Instant::now() - MAX_CREDIT, now);
                continue;
            }
            // A slow cap can mean long pauses: keep heartbeats going through them.
            while let Some(wait) = due.checked_sub(base.elapsed()) {
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

    #[tokio::test(start_paused = true)]
    async fn idle_time_is_not_saved_up_for_a_burst() {
        use crate::delta::Op;
        use crate::protocol::WireOp;
        let (a, b) = tokio::io::duplex(1 << 20);
        let (tx, rx) = mpsc::channel(8);
        let counter = WireCounter::default();
        let sink = FramedWrite::new(a, FrameCodec::new(counter.clone()));
        let writer = tokio::spawn(run(sink, rx, Some(1000), counter, None));
        let reader = tokio::spawn(async move {
            FramedRead::new(b, FrameCodec::new(WireCounter::default()))
                .collect::<Vec<_>>()
                .await
        });
        // Ten seconds (of the test's paused clock) with nothing to send...
        tokio::time::sleep(Duration::from_secs(10)).await;
        let start = Instant::now();
        for _ in 0..4 {
            let ops = vec![WireOp::Plain(Op::Literal(vec![7; 500]))];
            tx.send(vec![Frame::Ops { id: 0, ops }]).await.unwrap();
        }
        drop(tx);
        writer.await.unwrap().unwrap();
        // ...then about 2000 bytes at 1000 B/s: paced, less only the first
        // batch and MAX_CREDIT, not sent at once on the credit of those ten seconds.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(1300), "{took:?}");
        assert_eq!(reader.await.unwrap().len(), 4);
    }
}
