//! The writer thread of a block receiver: the sender's ops applied
//! ([`crate::block::writer`]), and a checkpoint recorded as blocks become
//! durable.

use std::sync::mpsc as sync_mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use blake3::hazmat::ChainingValue;
use tokio::sync::mpsc;

use crate::block::checkpoint::{BlockCheckpoint, StateDir};
use crate::block::writer::{Cvs, Writer, WriterError};
use crate::block::zero::Zeroer;
use crate::block::{BlockShape, Destination};
use crate::delta::{Op, LITERAL_CHUNK};
use crate::protocol::{violation, BlockSource, FileOutcome, Frame, WireOp};
use crate::session::{warn, CheckpointFn, SessionError};
use crate::stats::Counters;
use crate::treehash::Head;

/// A checkpoint is recorded at most this often, or every [`CHECKPOINT_BYTES`].
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
const CHECKPOINT_BYTES: u64 = 64 << 20;
/// A checkpoint is told (`on_checkpoint`: a log line) at most this often,
/// and when the session stops.
const TELL_EVERY: Duration = Duration::from_secs(10);

/// What the writer thread works with.
pub(super) struct WriteJob {
    pub(super) dest: Arc<Destination>,
    pub(super) shape: BlockShape,
    pub(super) source: BlockSource,
    pub(super) from: u64,
    pub(super) head: Head,
    pub(super) state: Option<StateDir>,
    pub(super) operation: Option<(String, u32)>,
    pub(super) on_checkpoint: Option<CheckpointFn>,
    pub(super) counters: Arc<Counters>,
    pub(super) cvs: Option<sync_mpsc::Receiver<(u64, ChainingValue)>>,
}

/// What the writer did.
pub(super) struct Written {
    pub(super) root: blake3::Hash,
    pub(super) counts: crate::block::writer::Written,
    pub(super) zeroer: Zeroer,
    pub(super) tail_zeroed: u64,
    pub(super) source: BlockSource,
}

impl WriteJob {
    pub(super) fn run(self, mut rx: mpsc::Receiver<Vec<Frame>>) -> Result<Written, SessionError> {
        let file = &self.dest.file;
        let mut w = Writer::new(file, self.shape, self.from, self.head.clone());
        let mut next_cv = |i: u64| -> Result<ChainingValue, WriterError> {
            match self.cvs.as_ref().map(|rx| rx.recv()) {
                Some(Ok((at, cv))) if at == i => Ok(cv),
                _ => Err(WriterError::Stopped),
            }
        };
        let mut cvs: Cvs<'_> = match self.cvs.is_some() {
            true => Some(&mut next_cv),
            false => None,
        };
        let mut recorded = (Instant::now(), w.settled());
        let mut told = Instant::now();
        let mut sent_root = None;
        let outcome = loop {
            let Some(batch) = rx.blocking_recv() else {
                break Err(SessionError::Cancelled);
            };
            let mut ended = false;
            for frame in batch {
                match frame {
                    Frame::Ops { ops, .. } => {
                        for op in ops {
                            let before = w.position();
                            w.apply(plain(op)?, &mut cvs).map_err(writer_error)?;
                            self.counters.settled_bytes((w.position() - before) as i64);
                        }
                    }
                    Frame::FileEnd { outcome, .. } => sent_root = Some(outcome),
                    Frame::DataEnd => ended = true,
                    _ => {}
                }
            }
            if ended {
                break Ok(());
            }
            let due = recorded.0.elapsed() >= CHECKPOINT_EVERY
                || w.settled() >= recorded.1 + CHECKPOINT_BYTES;
            if due && w.settled() > recorded.1 {
                let tell = told.elapsed() >= TELL_EVERY;
                self.record(&w, tell)?;
                recorded = (Instant::now(), w.settled());
                if tell {
                    told = Instant::now();
                }
            }
        };
        if let Err(e) = outcome {
            // What is settled is kept for the next attempt.
            if w.settled() > recorded.1 || told < recorded.0 {
                if let Err(ce) = self.record(&w, true) {
                    warn(format_args!(
                        "cannot record progress for the next attempt: {ce}"
                    ));
                }
            }
            return Err(e);
        }
        let root = match sent_root {
            Some(FileOutcome::Sent(root)) => root,
            Some(FileOutcome::Changed) => {
                return Err(SessionError::Differs(
                    "the source changed size while it was read".into(),
                ))
            }
            Some(FileOutcome::Unreadable) => {
                return Err(SessionError::Differs(
                    "the sender could not read its source".into(),
                ))
            }
            _ => return Err(violation("the data ended without its hash").into()),
        };
        let ours = w.finish().map_err(writer_error)?;
        if ours.as_bytes() != &root {
            self.drop_checkpoint();
            return Err(SessionError::Differs(format!(
                "the destination does not hold what was sent: its BLAKE3 is {}, the source's {}",
                ours.to_hex(),
                blake3::Hash::from(root).to_hex()
            )));
        }
        let mut zeroer = std::mem::take(&mut w.zeroer);
        let counts = w.written;
        let tail = self.dest.size - self.shape.size;
        let tail_zeroed = match self.source.zero_tail && tail > 0 {
            true => {
                zeroer
                    .zero(file, self.shape.size, tail)
                    .map_err(|e| SessionError::local("zeroing the tail", e))?;
                tail
            }
            false => 0,
        };
        file.sync_data()
            .map_err(|e| SessionError::local("syncing the destination", e))?;
        if let Some(state) = &self.state {
            state
                .remove_all()
                .map_err(|e| SessionError::local("removing the checkpoint", e))?;
        }
        Ok(Written {
            root: ours,
            counts,
            zeroer,
            tail_zeroed,
            source: self.source,
        })
    }

    /// Makes the settled blocks durable, then says so in the checkpoint
    /// (and, with `tell`, to `on_checkpoint`).
    fn record(&self, w: &Writer<'_>, tell: bool) -> Result<(), SessionError> {
        let (Some(state), Some((id, attempt))) = (&self.state, &self.operation) else {
            return Ok(());
        };
        let (head, probe) = w.head();
        let Some(probe) = probe else {
            return Ok(());
        };
        self.dest
            .file
            .sync_data()
            .map_err(|e| SessionError::local("syncing the destination", e))?;
        let cp = BlockCheckpoint {
            operation_id: id.clone(),
            attempt: *attempt,
            source_size: self.shape.size,
            block_len: self.shape.block_len,
            source_mtime: self.source.image_mtime,
            destination_size: self.dest.size,
            verified: w.settled(),
            head: head.pieces(),
            probe,
        };
        let bytes = cp.encode();
        state
            .save_encoded(&bytes)
            .map_err(|e| SessionError::local("recording the checkpoint", e))?;
        if let Some(to) = self.on_checkpoint.as_ref().filter(|_| tell) {
            to(&cp, &bytes);
        }
        Ok(())
    }

    fn drop_checkpoint(&self) {
        if let Some(state) = &self.state {
            if let Err(e) = state.remove() {
                warn(format_args!("cannot drop the checkpoint: {e}"));
            }
        }
    }
}

/// A wire op as the writer takes it: literals decompressed (within the
/// literal bound whatever the frame claims).
fn plain(op: WireOp) -> Result<Op, SessionError> {
    match op {
        WireOp::Plain(op) => Ok(op),
        WireOp::Zstd { raw_len, data } => {
            if raw_len as usize > LITERAL_CHUNK {
                return Err(violation(format!("a compressed literal of {raw_len} bytes")).into());
            }
            let out = zstd::bulk::decompress(&data, raw_len as usize)
                .map_err(|e| violation(format!("a compressed literal: {e}")))?;
            if out.len() != raw_len as usize {
                return Err(violation("a compressed literal of the wrong size").into());
            }
            Ok(Op::Literal(out))
        }
    }
}

fn writer_error(e: WriterError) -> SessionError {
    match e {
        WriterError::Violation(m) => violation(m).into(),
        WriterError::Io(io) => SessionError::local("writing the destination", io),
        WriterError::Stopped => SessionError::Cancelled,
    }
}
