//! BLAKE3 in parts: the same hash as [`blake3::Hasher`], but the beginning of
//! the input can be hashed elsewhere — by several threads at once, or while
//! the rest streams by — and joined afterwards.
//!
//! BLAKE3 is a tree: 1 KiB chunks, and parent nodes whose left child is always
//! a complete subtree of a power-of-two number of chunks. Any complete,
//! aligned subtree can be hashed on its own (its "chaining value", with
//! `blake3::hazmat`) and the root computed from such subtrees by descending
//! the tree. A [`TreeHasher`] keeps the subtrees it has finished (of at most
//! [`SEGMENT`] bytes, merged as siblings complete) and the one it is in; a
//! [`Head`] is the beginning of an input hashed as subtrees, in parallel
//! ([`hash_head`]), or the finished subtrees of a hasher ([`TreeHasher::head`]),
//! which a checkpoint stores so that a later attempt goes on without reading
//! that beginning again. Tests compare every result with `blake3::hash` of
//! the same bytes.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use blake3::hazmat::{self, ChainingValue, HasherExt, Mode};

/// BLAKE3's chunk length: subtrees start at multiples of it.
pub const CHUNK: u64 = blake3::CHUNK_LEN as u64;
/// Largest subtree one thread hashes in one go when a head is split among threads.
const PIECE_MAX: u64 = 8 << 20;
/// Heads shorter than this are hashed by one thread.
const PARALLEL_MIN: u64 = 16 << 20;
/// Bytes read at a time.
const READ: usize = 1 << 20;
/// Largest subtree a hasher keeps open: its [head](TreeHasher::head) ends at
/// most this far before the bytes hashed so far.
pub const SEGMENT: u64 = 1 << 20;
/// Most pieces a [`Head`] may have. A hasher's head is a binary decomposition
/// of its length in chunks (at most 54 pieces below 2^64 bytes).
pub const MAX_HEAD_PIECES: usize = 64;

/// Misuse of a hasher, or a head from outside that is not one. Never worth
/// a retry: the same input gives the same error.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("a head of {head} bytes cannot join a hasher that starts at {start}")]
    Misaligned { head: u64, start: u64 },
    #[error("nothing was hashed after the head")]
    Empty,
    #[error("not a head of complete subtrees: {0}")]
    BadHead(String),
}

impl TreeError {
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// One piece of a head as stored or sent: its length and chaining value (it
/// starts where the previous one ends, the first at 0).
pub type HeadPiece = (u64, [u8; 32]);

/// A complete subtree: `len` bytes from `start`, and its chaining value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    start: u64,
    len: u64,
    cv: ChainingValue,
}

/// The first `len` bytes of an input, hashed as complete subtrees, to be
/// [joined](TreeHasher::join) by a hasher that goes on from there.
#[derive(Clone, Debug)]
pub struct Head {
    len: u64,
    pieces: Vec<Piece>,
}

impl Head {
    /// The head of nothing.
    pub fn empty() -> Head {
        Head {
            len: 0,
            pieces: Vec::new(),
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The head as stored or sent.
    pub fn pieces(&self) -> Vec<HeadPiece> {
        self.pieces.iter().map(|p| (p.len, p.cv)).collect()
    }

    /// A head from untrusted pieces: at most [`MAX_HEAD_PIECES`], each a
    /// power-of-two number of chunks starting at a multiple of its length,
    /// one after the other from 0. Such pieces are nodes of the BLAKE3 tree
    /// of any longer input, so joining them never fails for their shape
    /// (their chaining values may of course be wrong: then the hash is).
    pub fn from_pieces(pieces: &[HeadPiece]) -> Result<Head, TreeError> {
        if pieces.len() > MAX_HEAD_PIECES {
            return Err(TreeError::BadHead(format!("{} pieces", pieces.len())));
        }
        let mut out = Vec::with_capacity(pieces.len());
        let mut start = 0u64;
        for &(len, cv) in pieces {
            let chunks = len / CHUNK;
            if !len.is_multiple_of(CHUNK) || !chunks.is_power_of_two() || !start.is_multiple_of(len)
            {
                return Err(TreeError::BadHead(format!(
                    "a piece of {len} bytes at {start}"
                )));
            }
            out.push(Piece { start, len, cv });
            start = start
                .checked_add(len)
                .ok_or_else(|| TreeError::BadHead("longer than 2^64 bytes".into()))?;
        }
        Ok(Head {
            len: start,
            pieces: out,
        })
    }
}

/// An incremental BLAKE3 hasher, equal in output to [`blake3::Hasher`], that
/// can also start after a [`Head`] hashed elsewhere.
#[derive(Clone, Debug)]
pub struct TreeHasher {
    /// Where the bytes hashed here begin: 0, or, until a head is joined, a
    /// chunk boundary.
    base: u64,
    /// Complete subtrees from `base` to `start`, in order.
    done: Vec<Piece>,
    /// The subtree being hashed, from `start`: without bound when `start`
    /// is 0 (then it is a plain `blake3::Hasher` over everything).
    cur: blake3::Hasher,
    start: u64,
    cur_len: u64,
    /// Whether subtrees close every [`SEGMENT`] from 0 on; not for a hasher
    /// made from a plain `blake3::Hasher`, which may be past that already.
    bounded: bool,
}

impl Default for TreeHasher {
    fn default() -> Self {
        TreeHasher::new()
    }
}

impl From<blake3::Hasher> for TreeHasher {
    /// Goes on from a plain hasher (of an input from its first byte).
    fn from(cur: blake3::Hasher) -> TreeHasher {
        TreeHasher {
            base: 0,
            done: Vec::new(),
            cur_len: cur.count(),
            cur,
            start: 0,
            bounded: false,
        }
    }
}

impl TreeHasher {
    /// A hasher of an input from its first byte, whose [head](Self::head)
    /// follows it within [`SEGMENT`] bytes.
    pub fn new() -> TreeHasher {
        TreeHasher {
            bounded: true,
            ..blake3::Hasher::new().into()
        }
    }

    /// A hasher for the bytes from `offset` (rounded down to a chunk
    /// boundary) on; the head before that must be [joined](Self::join)
    /// before [finalizing](Self::finalize).
    pub fn starting_at(offset: u64) -> TreeHasher {
        let start = offset / CHUNK * CHUNK;
        let mut cur = blake3::Hasher::new();
        cur.set_input_offset(start);
        TreeHasher {
            base: start,
            done: Vec::new(),
            cur,
            start,
            cur_len: 0,
            bounded: true,
        }
    }

    /// The hasher of `[0, len)` of `file` whose first `head.len()` bytes are
    /// `head` (hashed earlier, e.g. stored in a checkpoint): only the bytes
    /// after the head are read. `head` must be shorter than `len`, or empty.
    pub fn continued(file: &File, head: Head, len: u64) -> io::Result<TreeHasher> {
        if head.len > 0 && head.len >= len {
            return Err(io::Error::other(TreeError::Misaligned {
                head: head.len,
                start: len,
            }));
        }
        let mut h = TreeHasher::starting_at(head.len);
        hash_range(file, head.len, len, &mut h)?;
        if !head.is_empty() {
            h.join(head).map_err(io::Error::other)?;
        }
        Ok(h)
    }

    /// The complete subtrees hashed so far from the input's first byte (empty
    /// until a head is joined, and for a hasher made from a plain one): the
    /// state a later hasher can go on from ([`TreeHasher::continued`]), less
    /// at most [`SEGMENT`] bytes, and never all of a non-empty input.
    pub fn head(&self) -> Head {
        if self.base > 0 {
            return Head::empty();
        }
        Head {
            len: self.start,
            pieces: self.done.clone(),
        }
    }

    /// Where this hasher's input begins (0 once a head is joined).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The length of the input so far, from its first byte.
    pub fn len(&self) -> u64 {
        self.start + self.cur_len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Most bytes the current subtree may hold, `None` for no bound.
    fn cap(&self) -> Option<u64> {
        match hazmat::max_subtree_len(self.start) {
            None if !self.bounded => None,
            None => Some(SEGMENT),
            Some(align) => Some(align.min(SEGMENT)),
        }
    }

    pub fn update(&mut self, mut data: &[u8]) -> &mut TreeHasher {
        while !data.is_empty() {
            let room = match self.cap() {
                None => data.len(),
                Some(cap) if cap == self.cur_len => {
                    // Full, and more follows: it is a complete subtree.
                    self.close();
                    continue;
                }
                Some(cap) => (cap - self.cur_len).min(data.len() as u64) as usize,
            };
            self.cur.update(&data[..room]);
            self.cur_len += room as u64;
            data = &data[room..];
        }
        self
    }

    fn close(&mut self) {
        push(
            &mut self.done,
            Piece {
                start: self.start,
                len: self.cur_len,
                cv: self.cur.finalize_non_root(),
            },
        );
        self.start += self.cur_len;
        self.cur = blake3::Hasher::new();
        self.cur.set_input_offset(self.start);
        self.cur_len = 0;
    }

    /// Puts `head` before what was hashed here, which must begin where the
    /// head ends and hold at least one byte.
    pub fn join(&mut self, head: Head) -> Result<(), TreeError> {
        if head.len != self.base {
            return Err(TreeError::Misaligned {
                head: head.len,
                start: self.base,
            });
        }
        if self.base > 0 && self.len() == self.base {
            return Err(TreeError::Empty);
        }
        let mut done = head.pieces;
        for p in std::mem::take(&mut self.done) {
            push(&mut done, p);
        }
        self.done = done;
        self.base = 0;
        Ok(())
    }

    /// The hash of the whole input. A hasher that still waits for its head
    /// hashes what it has as if it were all (a wrong but well-defined value).
    pub fn finalize(&self) -> blake3::Hash {
        if self.start == 0 {
            return self.cur.finalize();
        }
        if self.base > 0 {
            // No head: only reachable by misuse, and never equal to the
            // input's hash in practice.
            let mut h = blake3::Hasher::new();
            for p in &self.done {
                h.update(&p.cv);
            }
            h.update(&self.cur.count().to_le_bytes());
            return h.finalize();
        }
        let mut pieces = self.done.clone();
        if self.cur_len > 0 {
            pieces.push(Piece {
                start: self.start,
                len: self.cur_len,
                cv: self.cur.finalize_non_root(),
            });
        }
        root(self.len(), &pieces).expect("the pieces are complete subtrees of the input")
    }
}

/// Appends a complete subtree, merging it with its sibling when both are
/// there (so a head of any length keeps at most one piece per bit of its
/// chunk count). Never forms the root: the input goes on after `pieces`.
fn push(pieces: &mut Vec<Piece>, p: Piece) {
    pieces.push(p);
    while let [.., l, r] = pieces.as_slice() {
        if l.len != r.len || l.start % (2 * l.len) != 0 {
            break;
        }
        let merged = Piece {
            start: l.start,
            len: 2 * l.len,
            cv: hazmat::merge_subtrees_non_root(&l.cv, &r.cv, Mode::Hash),
        };
        pieces.truncate(pieces.len() - 2);
        pieces.push(merged);
    }
}

/// The root hash of an input of `total` bytes covered by `pieces`, each a
/// node of its tree, in order; `None` if they are not.
fn root(total: u64, pieces: &[Piece]) -> Option<blake3::Hash> {
    if total <= CHUNK {
        return None;
    }
    let left = hazmat::left_subtree_len(total);
    let l = node(pieces, 0, left)?;
    let r = node(pieces, left, total - left)?;
    Some(hazmat::merge_subtrees_root(&l, &r, Mode::Hash))
}

fn node(pieces: &[Piece], start: u64, len: u64) -> Option<ChainingValue> {
    let i = pieces.partition_point(|p| p.start < start);
    if let Some(p) = pieces.get(i).filter(|p| p.start == start && p.len == len) {
        return Some(p.cv);
    }
    if len <= CHUNK {
        return None;
    }
    let left = hazmat::left_subtree_len(len);
    let l = node(pieces, start, left)?;
    let r = node(pieces, start + left, len - left)?;
    Some(hazmat::merge_subtrees_non_root(&l, &r, Mode::Hash))
}

/// Where a hasher of a `len`-byte input's rest starts so that a head can be
/// joined: the beginning of the chunk that holds the input's last byte (it
/// takes the input's last partial chunk, and never nothing).
pub fn head_len(len: u64) -> u64 {
    len.saturating_sub(1) / CHUNK * CHUNK
}

/// Complete subtrees that cover `[0, len)`, `len` a multiple of [`CHUNK`]:
/// the largest aligned power-of-two runs of chunks, cut at `max` bytes.
fn cut(len: u64, max: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < len {
        let mut size = prev_power_of_two(len - pos).min(max);
        if let Some(align) = hazmat::max_subtree_len(pos) {
            size = size.min(align);
        }
        out.push((pos, size));
        pos += size;
    }
    out
}

fn prev_power_of_two(n: u64) -> u64 {
    1 << (63 - n.leading_zeros())
}

/// Asked now and then by a long hashing job: whether to give up.
pub type Stop<'a> = &'a (dyn Fn() -> bool + Sync);

/// Reads and hashes `[0, len)` of `file` (`len` a multiple of [`CHUNK`],
/// and the input goes on after it) with up to `threads` threads, each
/// reading one contiguous range. Once `stop()` says so it ends early, with
/// an `Interrupted` error.
pub fn hash_head(file: &File, len: u64, threads: usize, stop: Stop) -> io::Result<Head> {
    assert_eq!(len % CHUNK, 0, "a head ends on a chunk boundary");
    let threads = if len >= PARALLEL_MIN {
        threads.max(1)
    } else {
        1
    };
    let cuts = cut(len, PIECE_MAX.max(prev_power_of_two(len.max(1)) / 64));
    let per = cuts.len().div_ceil(threads).max(1);
    let pieces = std::thread::scope(|scope| {
        let handles: Vec<_> = cuts
            .chunks(per)
            .map(|part| scope.spawn(move || hash_pieces(file, part, stop)))
            .collect();
        let mut pieces = Vec::new();
        for h in handles {
            for p in h
                .join()
                .map_err(|_| io::Error::other("hashing thread panicked"))??
            {
                push(&mut pieces, p);
            }
        }
        Ok::<_, io::Error>(pieces)
    })?;
    Ok(Head { len, pieces })
}

fn hash_pieces(file: &File, cuts: &[(u64, u64)], stop: Stop) -> io::Result<Vec<Piece>> {
    let (Some(&(from, _)), Some(&(last, last_len))) = (cuts.first(), cuts.last()) else {
        return Ok(Vec::new());
    };
    let _ = rustix::fs::fadvise(
        file,
        from,
        std::num::NonZeroU64::new(last + last_len - from),
        rustix::fs::Advice::Sequential,
    );
    let mut buf = vec![0u8; READ];
    let mut out = Vec::with_capacity(cuts.len());
    for &(start, len) in cuts {
        let mut h = blake3::Hasher::new();
        h.set_input_offset(start);
        let mut at = start;
        while at < start + len {
            if stop() {
                return Err(io::Error::new(io::ErrorKind::Interrupted, "stopped"));
            }
            let n = (start + len - at).min(READ as u64) as usize;
            file.read_exact_at(&mut buf[..n], at)?;
            h.update(&buf[..n]);
            at += n as u64;
        }
        out.push(Piece {
            start,
            len,
            cv: h.finalize_non_root(),
        });
    }
    Ok(out)
}

/// The hasher of `[0, len)` of `file`, read with up to `threads` threads.
pub fn hash_file_prefix(file: &File, len: u64, threads: usize) -> io::Result<TreeHasher> {
    let head = hash_head(file, head_len(len), threads, &|| false)?;
    TreeHasher::continued(file, head, len)
}

/// Reads `[from, to)` of `file` into `h`, a megabyte at a time.
pub fn hash_range(file: &File, from: u64, to: u64, h: &mut TreeHasher) -> io::Result<()> {
    let mut buf = vec![0u8; (to.saturating_sub(from)).min(READ as u64) as usize];
    let mut at = from;
    while at < to {
        let n = (to - at).min(READ as u64) as usize;
        file.read_exact_at(&mut buf[..n], at)?;
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(())
}

mod blocks;
pub use blocks::{block_cv, BlockRoot};

#[cfg(test)]
mod tests;
