//! The receiver's half of the delta algorithm: rebuild a file from ops.
//!
//! Every op from the peer is bounds-checked against the basis before use, the
//! output is hashed as it is written, and zero runs become holes (rsync's
//! `--sparse`) unless the file is rewritten in place.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use crate::delta::{is_zero, Op, LITERAL_CHUNK};
use crate::signature::SigShape;
use crate::treehash::TreeHasher;

#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("peer referenced basis blocks {block}..{end} but the basis has {count}")]
    BlockOutOfRange { block: u32, end: u64, count: u64 },
    #[error("peer sent a copy instruction but there is no basis file")]
    NoBasis,
    #[error("file would exceed {limit} bytes")]
    TooLong { limit: u64 },
    #[error("basis file changed while it was read: {0}")]
    BasisShort(io::Error),
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl PatchError {
    /// Out-of-range references are protocol violations; I/O may be transient.
    pub fn is_retryable(&self) -> bool {
        matches!(self, PatchError::Io(_) | PatchError::BasisShort(_))
    }
}

/// Granularity of hole detection: the common file-system block size.
const HOLE_GRAIN: usize = 4096;
/// Written bytes after which write-back to disk is started.
const WRITEBACK_EVERY: u64 = 8 * 1024 * 1024;

/// Starts write-back of a written range without waiting for it, so the fsync
/// at commit finds little left to do and disk writes overlap the transfer.
fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: plain system call on a valid open descriptor; it only schedules
    // I/O and its failure is harmless (the fsync at commit still runs).
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as i64,
            len as i64,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// Writes a file sequentially, turning aligned zero blocks into holes.
pub struct OutFile {
    file: File,
    offset: u64,
    sparse: bool,
    /// The output is the basis itself (`--inplace`).
    inplace: bool,
    /// A seek is owed before the next write.
    seek_pending: bool,
    /// Offset up to which write-back has been started.
    writeback_from: u64,
}

impl OutFile {
    pub fn new(file: File, sparse: bool, inplace: bool) -> OutFile {
        OutFile {
            file,
            offset: 0,
            sparse: sparse && !inplace,
            inplace,
            seek_pending: false,
            writeback_from: 0,
        }
    }

    /// Continues a partial file in place after its first `offset` bytes.
    pub fn resume(file: File, offset: u64) -> OutFile {
        OutFile {
            file,
            offset,
            sparse: false,
            inplace: true,
            seek_pending: true,
            writeback_from: offset,
        }
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Makes the file as long as what was written, so a trailing hole is on
    /// disk too (a checkpoint is about to say the prefix is there).
    pub fn settle(&mut self) -> io::Result<()> {
        if self.seek_pending && !self.inplace {
            self.file.set_len(self.offset)?;
        }
        Ok(())
    }

    pub fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        if !self.sparse {
            return self.write_dense(data);
        }
        // Whole zero grains become holes; everything between them goes out
        // in one write, not one per grain.
        let mut dense = 0;
        let mut at = self.offset;
        while dense < data.len() {
            let to_grain = HOLE_GRAIN - (at % HOLE_GRAIN as u64) as usize;
            let n = to_grain.min(data.len() - dense);
            let grain = &data[dense..dense + n];
            if n == HOLE_GRAIN && is_zero(grain) {
                self.write_dense(&data[..dense])?;
                self.skip(n as u64);
                data = &data[dense + n..];
                dense = 0;
            } else {
                dense += n;
            }
            at += n as u64;
        }
        self.write_dense(data)
    }

    /// `len` zero bytes: a hole when sparse, otherwise written out.
    pub fn zeros(&mut self, mut len: u64) -> io::Result<()> {
        if self.sparse {
            let head = ((HOLE_GRAIN as u64 - self.offset % HOLE_GRAIN as u64) % HOLE_GRAIN as u64)
                .min(len);
            self.write_dense(&vec![0; head as usize])?;
            len -= head;
            let holes = len / HOLE_GRAIN as u64 * HOLE_GRAIN as u64;
            self.skip(holes);
            return self.write_dense(&vec![0; (len - holes) as usize]);
        }
        let zero = [0u8; 64 * 1024];
        while len > 0 {
            let n = len.min(zero.len() as u64) as usize;
            self.write_dense(&zero[..n])?;
            len -= n as u64;
        }
        Ok(())
    }

    /// Leaves `len` bytes as they are (a hole in a new file, unchanged data in place).
    pub fn skip(&mut self, len: u64) {
        if len > 0 {
            self.offset += len;
            self.seek_pending = true;
        }
    }

    fn write_dense(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if self.seek_pending {
            self.file.seek(SeekFrom::Start(self.offset))?;
            self.seek_pending = false;
        }
        self.file.write_all(data)?;
        self.offset += data.len() as u64;
        if self.offset >= self.writeback_from + WRITEBACK_EVERY {
            start_writeback(
                &self.file,
                self.writeback_from,
                self.offset - self.writeback_from,
            );
            self.writeback_from = self.offset;
        }
        Ok(())
    }

    /// Sets the final length (trailing holes, or a shorter file in place) and returns the file.
    pub fn finish(self) -> io::Result<File> {
        if self.seek_pending || self.inplace {
            self.file.set_len(self.offset)?;
        }
        Ok(self.file)
    }
}

/// Applies ops to an [`OutFile`], reading copied blocks from `basis`.
pub struct Patcher {
    basis: Option<(File, SigShape)>,
    /// Where block 0 of the basis starts in the basis file.
    basis_offset: u64,
    out: OutFile,
    hasher: TreeHasher,
    limit: u64,
    buf: Vec<u8>,
}

impl Patcher {
    /// `limit` bounds the rebuilt length (the size the sender announced).
    pub fn new(basis: Option<(File, SigShape)>, out: OutFile, limit: u64) -> Patcher {
        Patcher {
            basis,
            basis_offset: 0,
            out,
            hasher: TreeHasher::new(),
            limit,
            buf: Vec::new(),
        }
    }

    /// Continues a file whose first bytes are already written (and hashed
    /// into `hasher`): `out` starts after them, and the basis, if any, is the
    /// rest of the same file from `basis_offset` on.
    pub fn resume(
        basis: Option<(File, SigShape)>,
        basis_offset: u64,
        out: OutFile,
        limit: u64,
        hasher: impl Into<TreeHasher>,
    ) -> Patcher {
        Patcher {
            basis,
            basis_offset,
            out,
            hasher: hasher.into(),
            limit,
            buf: Vec::new(),
        }
    }

    /// The length written so far and the hasher over it, for a checkpoint.
    pub fn prefix(&mut self) -> io::Result<(u64, &TreeHasher)> {
        self.out.settle()?;
        Ok((self.out.offset(), &self.hasher))
    }

    pub fn written(&self) -> u64 {
        self.out.offset()
    }

    pub fn apply(&mut self, op: &Op) -> Result<(), PatchError> {
        let len = match op {
            Op::Literal(d) => d.len() as u64,
            Op::Zeros(n) => *n,
            Op::Copy { block, count } => self.copy_len(*block, *count)?,
        };
        if self
            .out
            .offset()
            .checked_add(len)
            .is_none_or(|end| end > self.limit)
        {
            return Err(PatchError::TooLong { limit: self.limit });
        }
        match op {
            Op::Literal(d) => {
                self.hasher.update(d);
                self.out.write(d)?;
            }
            Op::Zeros(n) => {
                hash_zeros(&mut self.hasher, *n);
                self.out.zeros(*n)?;
            }
            Op::Copy { block, .. } => self.copy(*block, len)?,
        }
        Ok(())
    }

    fn copy_len(&self, block: u32, count: u32) -> Result<u64, PatchError> {
        let (_, shape) = self.basis.as_ref().ok_or(PatchError::NoBasis)?;
        let end = block as u64 + count as u64;
        if count == 0 || end > shape.block_count() {
            return Err(PatchError::BlockOutOfRange {
                block,
                end,
                count: shape.block_count(),
            });
        }
        let start = block as u64 * shape.block_len as u64;
        Ok(shape.len_of(end - 1) as u64 + (end - 1) * shape.block_len as u64 - start)
    }

    fn copy(&mut self, block: u32, len: u64) -> Result<(), PatchError> {
        let (basis, shape) = self.basis.as_ref().ok_or(PatchError::NoBasis)?;
        let mut at = self.basis_offset + block as u64 * shape.block_len as u64;
        let mut left = len;
        while left > 0 {
            let n = left.min(LITERAL_CHUNK as u64) as usize;
            self.buf.resize(n, 0);
            basis
                .read_exact_at(&mut self.buf, at)
                .map_err(PatchError::BasisShort)?;
            self.hasher.update(&self.buf);
            if self.out.inplace && at == self.out.offset() {
                // The data is already where it belongs.
                self.out.skip(n as u64);
            } else {
                self.out.write(&self.buf)?;
            }
            at += n as u64;
            left -= n as u64;
        }
        Ok(())
    }

    /// The rebuilt file and the BLAKE3 of its contents.
    pub fn finish(self) -> io::Result<(File, [u8; 32])> {
        Ok((self.out.finish()?, *self.hasher.finalize().as_bytes()))
    }
}

fn hash_zeros(hasher: &mut TreeHasher, mut n: u64) {
    const Z: [u8; 16 * 1024] = [0; 16 * 1024];
    while n > 0 {
        let k = n.min(Z.len() as u64) as usize;
        hasher.update(&Z[..k]);
        n -= k as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;

    /// The write of one grain at a time that `OutFile::write` replaced.
    fn write_grainwise(out: &mut OutFile, mut data: &[u8]) {
        while !data.is_empty() {
            let to_grain = HOLE_GRAIN - (out.offset % HOLE_GRAIN as u64) as usize;
            let n = to_grain.min(data.len());
            if n == HOLE_GRAIN && is_zero(&data[..n]) {
                out.skip(n as u64);
            } else {
                out.write_dense(&data[..n]).unwrap();
            }
            data = &data[n..];
        }
    }

    /// Sparse writes in pieces of any size and alignment: the same bytes and
    /// the same holes as writing grain by grain.
    #[test]
    fn sparse_writes_equal_grain_by_grain_writes() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for round in 0..20 {
            let grains = 64;
            let mut data = vec![0u8; grains * HOLE_GRAIN + 123];
            for g in 0..grains {
                if next() % 3 != 0 {
                    let at = g * HOLE_GRAIN + (next() % HOLE_GRAIN as u64) as usize;
                    data[at] = 1 + (next() % 255) as u8;
                }
            }
            data[grains * HOLE_GRAIN] = 9;
            let pieces: Vec<usize> = std::iter::from_fn(|| Some((next() % 40_000) as usize + 1))
                .scan(0, |end, n| {
                    let start = *end;
                    *end = (start + n).min(data.len());
                    (start < data.len()).then_some(*end)
                })
                .collect();
            let write = |grainwise: bool| {
                let mut out = OutFile::new(tempfile::tempfile().unwrap(), true, false);
                let mut start = 0;
                for &end in &pieces {
                    if grainwise {
                        write_grainwise(&mut out, &data[start..end]);
                    } else {
                        out.write(&data[start..end]).unwrap();
                    }
                    start = end;
                }
                let mut file = out.finish().unwrap();
                file.sync_all().unwrap();
                let mut back = Vec::new();
                file.seek(SeekFrom::Start(0)).unwrap();
                file.read_to_end(&mut back).unwrap();
                (back, file.metadata().unwrap().blocks())
            };
            let (fast, fast_blocks) = write(false);
            let (slow, slow_blocks) = write(true);
            assert!(
                fast == data && slow == data,
                "round {round}: contents differ"
            );
            assert_eq!(
                fast_blocks, slow_blocks,
                "round {round}: allocation differs"
            );
        }
    }
}
