//! Batching of outgoing frames from the worker threads.
//!
//! A worker pushes frames into its own [`Outbox`], which hands them to the
//! writer task in batches: one channel message and one wake-up per batch
//! instead of per frame. A worker must [`Outbox::flush`] before anything that
//! may wait (reading its input, waiting for credit or room in flight), so
//! nothing it has produced sits unsent while it sleeps.

use tokio::sync::mpsc;

use crate::delta::Op;
use crate::protocol::{Frame, WireOp};
use crate::session::{cancelled, SessionError};

/// Frames per batch before it is handed over.
const BATCH_FRAMES: usize = 128;
/// Payload bytes per batch before it is handed over.
const BATCH_BYTES: usize = 1 << 20;

/// The channel to a connection's writer task.
pub type Out = mpsc::Sender<Vec<Frame>>;

pub struct Outbox {
    tx: Out,
    buf: Vec<Frame>,
    bytes: usize,
}

impl Outbox {
    pub fn new(tx: Out) -> Outbox {
        Outbox {
            tx,
            buf: Vec::new(),
            bytes: 0,
        }
    }

    pub fn push(&mut self, frame: Frame) -> Result<(), SessionError> {
        self.bytes += weight(&frame);
        self.buf.push(frame);
        if self.buf.len() >= BATCH_FRAMES || self.bytes >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> Result<(), SessionError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.bytes = 0;
        let batch = std::mem::take(&mut self.buf);
        self.tx.blocking_send(batch).map_err(|_| cancelled())
    }
}

/// Rough decoded size of a frame, for batching and memory budgets.
pub fn weight(frame: &Frame) -> usize {
    match frame {
        Frame::Ops { ops, .. } => ops
            .iter()
            .map(|op| match op {
                WireOp::Plain(Op::Literal(d)) | WireOp::Zstd { data: d, .. } => d.len(),
                _ => 0,
            } + std::mem::size_of::<WireOp>())
            .sum(),
        Frame::Sigs { sigs, .. } => sigs.sigs.len() * 24,
        // A list entry carries its path and, for a symlink, a target of up to
        // a frame's length (refused later, by the reader's state machine): a
        // batch of them must not be weighed as if they were all small.
        Frame::Entry(e) => {
            let target = match &e.kind {
                crate::meta::Kind::Symlink(t) => t.len(),
                _ => 0,
            };
            64 + e.path.as_bytes().len() + target
        }
        Frame::DirDone(p) => 64 + p.as_bytes().len(),
        _ => 64,
    }
}

/// Where a worker puts the frames it produces.
pub trait FrameOut {
    fn push(&mut self, frame: Frame) -> Result<(), SessionError>;
    /// Hands over what is buffered; called before the worker may wait.
    fn flush(&mut self) -> Result<(), SessionError>;
}

impl FrameOut for Outbox {
    fn push(&mut self, frame: Frame) -> Result<(), SessionError> {
        Outbox::push(self, frame)
    }

    fn flush(&mut self) -> Result<(), SessionError> {
        Outbox::flush(self)
    }
}

/// Receives the next batch, flushing `outbox` first if the worker would have to wait.
pub fn recv_or_flush<T>(
    rx: &mut mpsc::Receiver<T>,
    outbox: &mut impl FrameOut,
) -> Result<Option<T>, SessionError> {
    recv_or(rx, || outbox.flush())
}

/// Receives the next batch, running `before_wait` first (handing over what
/// the worker holds) if it would have to wait.
pub fn recv_or<T>(
    rx: &mut mpsc::Receiver<T>,
    before_wait: impl FnOnce() -> Result<(), SessionError>,
) -> Result<Option<T>, SessionError> {
    match rx.try_recv() {
        Ok(item) => Ok(Some(item)),
        Err(mpsc::error::TryRecvError::Disconnected) => Ok(None),
        Err(mpsc::error::TryRecvError::Empty) => {
            before_wait()?;
            Ok(rx.blocking_recv())
        }
    }
}
