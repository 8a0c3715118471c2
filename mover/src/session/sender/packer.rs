//! Compression of the sender's literals, on threads of their own.
//!
//! zstd costs far more than reading and diffing, so with `--compress` the
//! delta thread hands its frames to [`PACKERS`] packer threads, at most one
//! per core, in turn: frame `n` to packer `n % k`. A merger takes their
//! results back in the same turn, so frames leave in the order the delta
//! thread made them, whatever each one cost to compress.

use tokio::sync::mpsc;

use crate::delta::Op;
use crate::protocol::{Frame, WireOp};
use crate::session::flow::outbox::{recv_or_flush, FrameOut, Outbox};
use crate::session::{cancelled, SessionError};

/// Most packer threads.
const PACKERS: usize = 4;
/// Frames queued for, and from, each packer.
const PACK_QUEUE: usize = 8;

/// Runs `produce` with a [`FrameOut`] whose frames are compressed at `level`
/// and then pushed to `out`, in order.
pub fn packed(
    level: i32,
    out: Outbox,
    produce: impl FnOnce(Packers) -> Result<(), SessionError>,
) -> Result<(), SessionError> {
    let k = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, PACKERS);
    let mut zstds = Vec::with_capacity(k);
    for _ in 0..k {
        zstds.push(zstd::bulk::Compressor::new(level).map_err(|e| SessionError::local("zstd", e))?);
    }
    std::thread::scope(|scope| {
        let mut inputs = Vec::with_capacity(k);
        let mut workers = Vec::with_capacity(k);
        let mut outputs = Vec::with_capacity(k);
        for zstd in zstds {
            let (in_tx, in_rx) = mpsc::channel(PACK_QUEUE);
            let (out_tx, out_rx) = mpsc::channel(PACK_QUEUE);
            workers.push(scope.spawn(move || pack(zstd, in_rx, out_tx)));
            inputs.push(in_tx);
            outputs.push(out_rx);
        }
        let merger = scope.spawn(move || merge(outputs, out));
        let mut results = vec![produce(Packers { inputs, next: 0 })];
        for worker in workers {
            results.push(
                worker
                    .join()
                    .map_err(|_| SessionError::Internal("packer panicked".into()))?,
            );
        }
        results.push(
            merger
                .join()
                .map_err(|_| SessionError::Internal("merger panicked".into()))?,
        );
        // When several stopped, the one that failed for a reason of its own
        // is the cause; the others only saw their channels close.
        results
            .into_iter()
            .filter_map(Result::err)
            .max_by_key(SessionError::weight)
            .map_or(Ok(()), Err)
    })
}

/// The producer's side: each frame to the next packer in turn.
pub struct Packers {
    inputs: Vec<mpsc::Sender<Frame>>,
    next: usize,
}

impl FrameOut for Packers {
    fn push(&mut self, frame: Frame) -> Result<(), SessionError> {
        self.inputs[self.next]
            .blocking_send(frame)
            .map_err(|_| cancelled())?;
        self.next = (self.next + 1) % self.inputs.len();
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SessionError> {
        Ok(())
    }
}

/// A packer: compresses the literals of the frames it is given (keeping a
/// literal as it is when compression does not make it smaller).
fn pack(
    mut zstd: zstd::bulk::Compressor<'static>,
    mut rx: mpsc::Receiver<Frame>,
    tx: mpsc::Sender<Frame>,
) -> Result<(), SessionError> {
    while let Some(frame) = rx.blocking_recv() {
        let frame = match frame {
            Frame::Ops { id, ops } => {
                let ops = ops
                    .into_iter()
                    .map(|op| compress(&mut zstd, op))
                    .collect::<Result<_, _>>()?;
                Frame::Ops { id, ops }
            }
            other => other,
        };
        tx.blocking_send(frame).map_err(|_| cancelled())?;
    }
    Ok(())
}

/// Takes the packers' frames back in the order they were handed out. The
/// producer's last frame went to some packer `j`; packer `j + 1` then ends
/// with nothing more, and so ends the merge.
fn merge(mut outputs: Vec<mpsc::Receiver<Frame>>, mut out: Outbox) -> Result<(), SessionError> {
    let mut next = 0;
    while let Some(frame) = recv_or_flush(&mut outputs[next], &mut out)? {
        out.push(frame)?;
        next = (next + 1) % outputs.len();
    }
    out.flush()
}

fn compress(
    zstd: &mut zstd::bulk::Compressor<'static>,
    op: WireOp,
) -> Result<WireOp, SessionError> {
    Ok(match op {
        WireOp::Plain(Op::Literal(data)) => {
            let packed = zstd
                .compress(&data)
                .map_err(|e| SessionError::local("compressing", e))?;
            if packed.len() < data.len() {
                WireOp::Zstd {
                    raw_len: data.len() as u32,
                    data: packed,
                }
            } else {
                WireOp::Plain(Op::Literal(data))
            }
        }
        other => other,
    })
}
