//! Block signatures of a basis file and the index the sender searches them with.
//!
//! The receiver cuts the file it already has into blocks and sends, per block,
//! the rolling weak checksum and the first bytes of a strong sum (XXH3-128),
//! as many as the file needs ([`SigShape::strong_len`]). The sender looks
//! every window of the new file up in an [`Index`]: a bitmap rejects most
//! windows in one memory access, a sorted table finds the candidates, and the
//! strong hash confirms a match.

use std::io;

use serde::{Deserialize, Serialize};

use crate::rolling::Rolling;

/// Bytes of strong sum kept per block, at most.
pub const STRONG_LEN: usize = 16;
/// Fewest bytes of strong sum sent per block.
pub const MIN_STRONG_LEN: usize = 2;
/// Bits beyond what a file's comparisons use up, in the strong sum's length:
/// a false match (every check passes for a block that differs) happens in
/// about one file in 2^25. It costs no data, only time: the whole-file BLAKE3
/// catches it and the file is sent again whole. rsync uses 10.
const SUM_BIAS: u32 = 24;
/// rsync's minimum block length.
pub const MIN_BLOCK_LEN: u32 = 700;
/// rsync's maximum block length (protocol 30 and later).
pub const MAX_BLOCK_LEN: u32 = 128 * 1024;
/// Most blocks a file is cut into: past 128 GiB blocks grow beyond
/// [`MAX_BLOCK_LEN`] instead, so a signature stays within a few tens of MiB.
pub const MAX_BLOCKS: u64 = 1 << 20;

/// The signature of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSig {
    pub weak: u32,
    pub strong: [u8; STRONG_LEN],
}

/// How the basis file was cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigShape {
    pub block_len: u32,
    pub file_len: u64,
}

impl SigShape {
    /// The shape rsync would choose: about `sqrt(len)`, a multiple of 8,
    /// clamped; for files past 128 GiB, whatever keeps [`MAX_BLOCKS`] blocks.
    pub fn for_len(file_len: u64) -> SigShape {
        let block_len = if file_len <= (MIN_BLOCK_LEN as u64).pow(2) {
            MIN_BLOCK_LEN
        } else {
            let root = (file_len as f64).sqrt() as u64 & !7;
            let floor = file_len.div_ceil(MAX_BLOCKS).next_multiple_of(8);
            let len = root
                .clamp(MIN_BLOCK_LEN as u64, MAX_BLOCK_LEN as u64)
                .max(floor);
            len.min(u32::MAX as u64 & !7) as u32
        };
        SigShape {
            block_len,
            file_len,
        }
    }

    pub fn block_count(&self) -> u64 {
        self.file_len.div_ceil(self.block_len as u64)
    }

    /// Bytes of each block's strong sum that are sent and compared: as in
    /// rsync, enough that the `file_len` windows the sender tries against
    /// `block_count` blocks, on 32 bits of weak sum and these, all miss
    /// unless equal, with [`SUM_BIAS`] bits to spare.
    pub fn strong_len(&self) -> usize {
        let log2 = |n: u64| 63 - n.max(1).leading_zeros();
        let bits = (SUM_BIAS + 2 * log2(self.file_len)).saturating_sub(log2(self.block_len as u64));
        // One bit more, less the weak sum's 32, rounded up to whole bytes.
        let bytes = (bits + 1).saturating_sub(32).div_ceil(8) as usize;
        bytes.clamp(MIN_STRONG_LEN, STRONG_LEN)
    }

    /// Length of block `i` (the last one may be short).
    pub fn len_of(&self, i: u64) -> usize {
        let start = i * self.block_len as u64;
        (self.file_len - start).min(self.block_len as u64) as usize
    }
}

impl BlockSig {
    /// Keeps the first `len` bytes of the strong sum, zeroing the rest: the
    /// form both sides compare in.
    pub fn truncated(mut self, len: usize) -> BlockSig {
        self.strong[len.min(STRONG_LEN)..].fill(0);
        self
    }

    /// The signature of one block's bytes.
    pub fn of(block: &[u8]) -> BlockSig {
        BlockSig {
            weak: Rolling::new(block).digest(),
            strong: strong(block),
        }
    }
}

/// The strong sum of a block: XXH3-128, several times faster than BLAKE3
/// on blocks of a few KiB. It need not resist forgery: a block matched by a
/// forged or unlucky sum is caught by the whole-file BLAKE3 both sides check,
/// and the file is then sent again whole, so the worst a hostile source can
/// do is cost itself that resend.
pub fn strong(data: &[u8]) -> [u8; STRONG_LEN] {
    xxhash_rust::xxh3::xxh3_128(data).to_le_bytes()
}

/// Files at least this large are signed by several threads.
const PARALLEL_MIN: u64 = 16 * 1024 * 1024;

/// The signature of an open file, read with positioned reads; large files are
/// split into contiguous ranges signed by up to `threads` threads.
pub fn sign_file(
    file: &std::fs::File,
    shape: SigShape,
    threads: usize,
) -> io::Result<Vec<BlockSig>> {
    sign_file_from(file, 0, shape, threads)
}

/// Like [`sign_file`], for the part of `file` that starts at `offset`.
pub fn sign_file_from(
    file: &std::fs::File,
    offset: u64,
    shape: SigShape,
    threads: usize,
) -> io::Result<Vec<BlockSig>> {
    let count = shape.block_count();
    let threads = if shape.file_len >= PARALLEL_MIN {
        threads.max(1) as u64
    } else {
        1
    };
    let per = count.div_ceil(threads).max(1);
    let ranges: Vec<_> = (0..count)
        .step_by(per as usize)
        .map(|s| s..(s + per).min(count))
        .collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = ranges
            .into_iter()
            .map(|range| scope.spawn(move || sign_range(file, offset, shape, range)))
            .collect();
        let mut sigs = Vec::with_capacity(count as usize);
        for h in handles {
            sigs.extend(
                h.join()
                    .map_err(|_| io::Error::other("signature thread panicked"))??,
            );
        }
        Ok(sigs)
    })
}

fn sign_range(
    file: &std::fs::File,
    offset: u64,
    shape: SigShape,
    blocks: std::ops::Range<u64>,
) -> io::Result<Vec<BlockSig>> {
    use std::os::unix::fs::FileExt;
    const READ: usize = 1 << 20;
    let bl = shape.block_len as usize;
    let per_read = (READ / bl).max(1) as u64;
    let mut buf = vec![0u8; per_read as usize * bl];
    let mut sigs = Vec::with_capacity((blocks.end - blocks.start) as usize);
    let mut b = blocks.start;
    while b < blocks.end {
        let n = per_read.min(blocks.end - b);
        let start = offset + b * bl as u64;
        let len = ((n - 1) * bl as u64 + shape.len_of(b + n - 1) as u64) as usize;
        file.read_exact_at(&mut buf[..len], start)?;
        for block in buf[..len].chunks(bl) {
            sigs.push(BlockSig::of(block));
        }
        b += n;
    }
    Ok(sigs)
}

/// Blocks whose strong hash is compared with one window at most. Equal
/// blocks share their strong hash too, so the first allowed one matches; only
/// blocks that differ and share a weak checksum (rare, or forged by a peer)
/// come in numbers, and past this they are sent as literal data instead.
const MAX_CANDIDATES: usize = 16;

/// A searchable set of block signatures.
#[derive(Debug)]
pub struct Index {
    shape: SigShape,
    sigs: Vec<BlockSig>,
    /// `(weak, block)` sorted by weak checksum.
    table: Vec<(u32, u32)>,
    bitmap: Vec<u64>,
    bits: u32,
}

impl Index {
    /// Strong sums are compared in their first `shape.strong_len()` bytes.
    pub fn new(shape: SigShape, mut sigs: Vec<BlockSig>) -> Index {
        let len = shape.strong_len();
        for s in &mut sigs {
            *s = s.truncated(len);
        }
        let mut table: Vec<(u32, u32)> = sigs
            .iter()
            .enumerate()
            .map(|(i, s)| (s.weak, i as u32))
            .collect();
        table.sort_unstable();
        // 32 bits per block: about one window in 30 that matches no block
        // gets past the bitmap to the table's binary search (at 8 bits per
        // block, one in 9 did, and that search was a sixth of the sender's
        // time on a delta). At most 4 MiB, for MAX_BLOCKS blocks.
        let bits = (sigs.len().max(64) * 32)
            .next_power_of_two()
            .trailing_zeros();
        let mut bitmap = vec![0u64; (1usize << bits) / 64];
        for s in &sigs {
            let h = bucket(s.weak, bits);
            bitmap[h / 64] |= 1 << (h % 64);
        }
        Index {
            shape,
            sigs,
            table,
            bitmap,
            bits,
        }
    }

    pub fn shape(&self) -> SigShape {
        self.shape
    }

    /// `window`'s strong sum as the signatures hold theirs.
    fn strong(&self, window: &[u8]) -> [u8; STRONG_LEN] {
        let mut sum = strong(window);
        sum[self.shape.strong_len()..].fill(0);
        sum
    }

    pub fn block_count(&self) -> usize {
        self.sigs.len()
    }

    /// Offset in the basis file of block `i`.
    pub fn offset_of(&self, block: u32) -> u64 {
        block as u64 * self.shape.block_len as u64
    }

    /// Whether block `block` has exactly this content (checked by strong hash only).
    pub fn is_block(&self, block: u32, window: &[u8]) -> bool {
        (block as usize) < self.sigs.len()
            && self.shape.len_of(block as u64) == window.len()
            && self.sigs[block as usize].strong == self.strong(window)
    }

    /// Whether block `block` has exactly this content, weak checksum first
    /// (for a block compared at its own offset, without search).
    pub fn matches_at(&self, block: u32, window: &[u8]) -> bool {
        (block as usize) < self.sigs.len()
            && self.shape.len_of(block as u64) == window.len()
            && self.sigs[block as usize].weak == Rolling::new(window).digest()
            && self.sigs[block as usize].strong == self.strong(window)
    }

    /// Cheap pre-test: false means no block has this weak checksum.
    #[inline]
    pub fn may_contain(&self, weak: u32) -> bool {
        let h = bucket(weak, self.bits);
        self.bitmap[h / 64] & (1 << (h % 64)) != 0
    }

    /// The block whose contents equal `window`, among blocks `min_block` and
    /// after (in place, the ones before are already overwritten), preferring
    /// `hint` (the block after the previous match, so runs of unchanged
    /// blocks stay in order), else the first.
    ///
    /// The table is sorted by (checksum, block), so both the hint and the
    /// first allowed block are found by binary search: a basis of many equal
    /// blocks (zeros) costs no walk over the ones that are not allowed. At
    /// most [`MAX_CANDIDATES`] strong hashes are compared.
    pub fn find(&self, weak: u32, window: &[u8], hint: Option<u32>, min_block: u32) -> Option<u32> {
        if !self.may_contain(weak) {
            return None;
        }
        let strong_hash = std::cell::OnceCell::new();
        let matches = |block: u32| {
            self.shape.len_of(block as u64) == window.len()
                && self.sigs[block as usize].strong
                    == *strong_hash.get_or_init(|| self.strong(window))
        };
        if let Some(h) = hint.filter(|&h| h >= min_block) {
            if self.table.binary_search(&(weak, h)).is_ok() && matches(h) {
                return Some(h);
            }
        }
        let first = self.table.partition_point(|&e| e < (weak, min_block));
        self.table[first..]
            .iter()
            .take_while(|&&(w, _)| w == weak)
            .take(MAX_CANDIDATES)
            .map(|&(_, b)| b)
            .find(|&b| matches(b))
    }
}

#[inline]
fn bucket(weak: u32, bits: u32) -> usize {
    (weak.wrapping_mul(0x9E37_79B1) >> (32 - bits)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strong_sums_are_as_long_as_the_file_needs() {
        let len = |file_len: u64| SigShape::for_len(file_len).strong_len();
        // rsync's formula with a bias of 24 bits instead of 10.
        assert_eq!(len(0), MIN_STRONG_LEN);
        assert_eq!(len(8 << 10), 2);
        assert_eq!(len(256 << 20), 5);
        assert_eq!(len(1 << 40), 7);
        assert_eq!(len(u64::MAX), 11);
        for shift in 0..64 {
            let shape = SigShape::for_len(1u64 << shift);
            let (blocks, windows) = (shape.block_count().max(1), shape.file_len.max(1));
            // Every window against every block, on the weak and strong bits.
            let tries = (windows as f64).log2() + (blocks as f64).log2();
            let bits = 32.0 + 8.0 * shape.strong_len() as f64;
            assert!(
                bits - tries >= SUM_BIAS as f64 - 1.0,
                "{shift}: {bits} bits for 2^{tries}"
            );
        }
    }

    #[test]
    fn truncated_sums_still_find_their_blocks() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let shape = SigShape::for_len(data.len() as u64);
        let idx = Index::new(shape, sign_bytes(&data, shape));
        let block = &data[..shape.block_len as usize];
        let w = Rolling::new(block).digest();
        assert_eq!(idx.find(w, block, None, 0), Some(0));
        assert!(idx.matches_at(0, block));
        let mut other = block.to_vec();
        other[5] ^= 1;
        assert!(!idx.is_block(0, &other));
    }

    #[test]
    fn block_len_follows_rsync() {
        assert_eq!(SigShape::for_len(0).block_len, 700);
        assert_eq!(SigShape::for_len(490_000).block_len, 700);
        assert_eq!(SigShape::for_len(1 << 30).block_len, 32768);
        assert_eq!(SigShape::for_len(1 << 34).block_len, MAX_BLOCK_LEN);
        let huge = SigShape::for_len(1 << 40);
        assert_eq!(huge.block_len, 1 << 20);
        assert!(huge.block_count() <= MAX_BLOCKS);
        let s = SigShape::for_len(1500);
        assert_eq!(s.block_count(), 3);
        assert_eq!(s.len_of(2), 100);
    }

    /// The signature of `data`, through a real file as the receiver makes it.
    fn sign_bytes(data: &[u8], shape: SigShape) -> Vec<BlockSig> {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, data).unwrap();
        sign_file(&f, shape, 1).unwrap()
    }

    #[test]
    fn finds_blocks_and_prefers_hint() {
        let data: Vec<u8> = [
            vec![7u8; 700],
            vec![7u8; 700],
            (0..300).map(|i| i as u8).collect(),
        ]
        .concat();
        let shape = SigShape::for_len(data.len() as u64);
        let sigs = sign_bytes(&data, shape);
        let idx = Index::new(shape, sigs);
        let w = |d: &[u8]| Rolling::new(d).digest();
        let block = &data[..700];
        assert_eq!(idx.find(w(block), block, Some(1), 0), Some(1));
        assert_eq!(idx.find(w(block), block, None, 0), Some(0));
        assert_eq!(idx.find(w(block), block, None, 1), Some(1));
        assert_eq!(idx.find(w(block), block, Some(0), 1), Some(1));
        assert_eq!(idx.find(w(block), block, None, 2), None);
        let tail = &data[1400..];
        assert_eq!(idx.find(w(tail), tail, None, 0), Some(2));
        assert_eq!(idx.find(w(&[1; 700]), &[1; 700], None, 0), None);
    }

    #[test]
    fn parallel_signing_equals_sequential() {
        let data: Vec<u8> = (0..(PARALLEL_MIN as usize + 12_345))
            .map(|i| (i * 31 / 7) as u8)
            .collect();
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &data).unwrap();
        let shape = SigShape::for_len(data.len() as u64);
        let seq: Vec<_> = (0..shape.block_count())
            .map(|i| {
                let start = (i * shape.block_len as u64) as usize;
                BlockSig::of(&data[start..start + shape.len_of(i)])
            })
            .collect();
        assert_eq!(sign_file(&f, shape, 3).unwrap(), seq);
        assert_eq!(
            sign_file(
                &f,
                SigShape {
                    block_len: 700,
                    file_len: 1500
                },
                2
            )
            .unwrap()
            .len(),
            3
        );
        let long = SigShape {
            block_len: 700,
            file_len: data.len() as u64 + 1,
        };
        assert!(
            sign_file(&f, long, 2).is_err(),
            "a basis shorter than its shape is an error"
        );
    }

    #[test]
    fn short_file_is_an_error() {
        let shape = SigShape {
            block_len: 700,
            file_len: 2000,
        };
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &[0u8; 100]).unwrap();
        assert!(sign_file(&f, shape, 1).is_err());
    }
}
