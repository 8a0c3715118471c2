//! Reading what the peer sends: each wait bounded by the idle timeout (on
//! bytes, so a slow link is not a dead one), heartbeats dropped, and an
//! `Abort` turned into the error it carries.

use std::time::Duration;

use futures::{FutureExt, SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio_util::codec::{FramedRead, FramedWrite};

use super::liveness::{Idle, Metered};
use super::outbox::weight;
use crate::protocol::{Frame, FrameCodec, Hello, ProtocolError, SessionOptions, WireCounter};
use crate::session::SessionError;

/// A session's connection: its two halves framed, metered for the idle
/// timeout, and counted for the summary.
pub struct Connection<S> {
    pub frames: FramedRead<ReadHalf<Metered<S>>, FrameCodec>,
    pub sink: FramedWrite<WriteHalf<Metered<S>>, FrameCodec>,
    pub idle: Idle,
    pub wire: Wire,
}

impl<S: AsyncRead + AsyncWrite> Connection<S> {
    /// `stream`, with no byte for `timeout` ending any wait on the peer.
    pub fn open(stream: S, timeout: Option<Duration>) -> Connection<S> {
        let (stream, activity) = Metered::new(stream);
        let idle = Idle::new(timeout, activity);
        let (rd, wr) = tokio::io::split(stream);
        let wire = Wire::default();
        Connection {
            frames: FramedRead::new(rd, FrameCodec::new(wire.rx.clone())),
            sink: FramedWrite::new(wr, FrameCodec::new(wire.tx.clone())),
            idle,
            wire,
        }
    }

    /// [`Connection::open`], then this side's `Hello` with `options`: how
    /// every session starts.
    pub async fn greet(
        stream: S,
        timeout: Option<Duration>,
        options: SessionOptions,
    ) -> Result<Connection<S>, ProtocolError> {
        let mut connection = Connection::open(stream, timeout);
        connection
            .sink
            .send(Frame::Hello(Hello::new(options)))
            .await?;
        Ok(connection)
    }
}

/// Bytes that crossed a connection, each way.
#[derive(Debug, Clone, Default)]
pub struct Wire {
    pub rx: WireCounter,
    pub tx: WireCounter,
}

impl Wire {
    /// Both directions: the summary's `bytes_on_wire`.
    pub fn bytes(&self) -> u64 {
        self.rx.get() + self.tx.get()
    }
}

/// What a frame from the peer means here: `None` for a heartbeat.
fn screen(frame: Result<Frame, ProtocolError>) -> Result<Option<Frame>, SessionError> {
    match frame? {
        Frame::Abort(reason) => Err(SessionError::PeerAbort(reason)),
        Frame::Heartbeat => Ok(None),
        frame => Ok(Some(frame)),
    }
}

/// The peer's next frame; `when` says, if it hung up, what it hung up during.
pub async fn next_frame<S>(
    frames: &mut S,
    idle: &Idle,
    when: &'static str,
) -> Result<Frame, SessionError>
where
    S: Stream<Item = Result<Frame, ProtocolError>> + Unpin,
{
    loop {
        let Some(frame) = idle.reading(frames.next()).await? else {
            return Err(ProtocolError::Closed(when).into());
        };
        if let Some(frame) = screen(frame)? {
            return Ok(frame);
        }
    }
}

/// The peer's first frame: one that cannot even be decoded, or is too large,
/// comes from something that is not a mover (the codec has already told a
/// mover of another version apart).
pub async fn first_frame<S>(
    frames: &mut S,
    idle: &Idle,
    when: &'static str,
) -> Result<Frame, SessionError>
where
    S: Stream<Item = Result<Frame, ProtocolError>> + Unpin,
{
    match next_frame(frames, idle, when).await {
        Err(SessionError::Protocol(ProtocolError::Decode(_) | ProtocolError::Violation(_))) => {
            Err(ProtocolError::NotMover.into())
        }
        other => other,
    }
}

/// Frames handed on together at most (one wake-up per batch downstream).
const BATCH_FRAMES: usize = 256;
/// Decoded size of a batch, by [`weight`], after which no more frames are
/// added: a fast peer never has more than this plus one frame decoded and
/// waiting here, however many frames its bytes would make.
const BATCH_WEIGHT: usize = 1 << 20;

/// The peer's next frames: the first one waited for, then those already
/// decoded, up to [`BATCH_FRAMES`] or [`BATCH_WEIGHT`].
pub async fn next_frames<S>(frames: &mut S, idle: &Idle) -> Result<Vec<Frame>, SessionError>
where
    S: Stream<Item = Result<Frame, ProtocolError>> + Unpin,
{
    let first = next_frame(frames, idle, "before the transfer finished").await?;
    let mut total = weight(&first);
    let mut batch = vec![first];
    while batch.len() < BATCH_FRAMES && total < BATCH_WEIGHT {
        // Not ready, or closed: the batch ends here (a close is reported by
        // the next call).
        let Some(Some(frame)) = frames.next().now_or_never() else {
            break;
        };
        if let Some(frame) = screen(frame)? {
            total += weight(&frame);
            batch.push(frame);
        }
    }
    Ok(batch)
}
