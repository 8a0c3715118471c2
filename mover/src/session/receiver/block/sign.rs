//! The signer thread of a block receiver: its own blocks hashed ahead of
//! the data, their sums sent to the sender, their chaining values handed
//! to the writer in order.

use std::sync::mpsc as sync_mpsc;

use blake3::hazmat::ChainingValue;

use crate::block::{sum_of, BlockShape, Destination};
use crate::protocol::Frame;
use crate::session::flow::outbox::{Out, Outbox};
use crate::session::SessionError;
use crate::treehash::block_cv;

/// Sums per `BlockSums` frame.
const SUMS_BATCH: usize = 4096;

/// The signer thread: hashes the destination's own blocks from `from`,
/// sends their sums ahead of the data, and hands their chaining values to
/// the writer in order.
pub(super) fn sign(
    dest: &Destination,
    shape: BlockShape,
    from: u64,
    out: Out,
    cvs: sync_mpsc::SyncSender<(u64, ChainingValue)>,
) -> Result<(), SessionError> {
    use std::os::unix::fs::FileExt;
    let mut out = Outbox::new(out);
    let mut buf = vec![0u8; shape.block_len() as usize];
    let first = from / shape.block_len();
    let mut sums = Vec::with_capacity(SUMS_BATCH);
    let mut batch_first = first;
    for i in first..shape.count() {
        let (at, len) = (shape.offset(i), shape.len_of(i) as usize);
        dest.file
            .read_exact_at(&mut buf[..len], at)
            .map_err(|e| SessionError::local("reading the destination", e))?;
        let cv = block_cv(at, &buf[..len]);
        sums.push(sum_of(&cv));
        if sums.len() == SUMS_BATCH {
            let batch = std::mem::replace(&mut sums, Vec::with_capacity(SUMS_BATCH));
            out.push(Frame::BlockSums {
                first: batch_first,
                sums: batch,
            })?;
            batch_first = i + 1;
        }
        if let Err(sync_mpsc::TrySendError::Full(v)) = cvs.try_send((i, cv)) {
            // The writer is behind: what the sender waits for leaves first.
            if !sums.is_empty() {
                let batch = std::mem::replace(&mut sums, Vec::with_capacity(SUMS_BATCH));
                out.push(Frame::BlockSums {
                    first: batch_first,
                    sums: batch,
                })?;
                batch_first = i + 1;
            }
            out.flush()?;
            if cvs.send(v).is_err() {
                return Ok(());
            }
        }
    }
    if !sums.is_empty() {
        out.push(Frame::BlockSums {
            first: batch_first,
            sums,
        })?;
    }
    out.flush()
}
