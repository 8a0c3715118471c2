//! BLAKE3 in parts: the same hash as [`blake3::Hasher`], but the beginning of
//! the input can be hashed elsewhere — by several threads at once, or while
//! the rest streams by — and joined afterwards.
//!
//! BLAKE3 is a tree: 1 KiB chunks, and parent nodes whose left child is always
//! a complete subtree of a power-of-two number of chunks. Any complete,
//! aligned subtree can be hashed on its own (its "chaining value", with
//! `blake3::hazmat`) and the root computed from such subtrees by descending
//! the tree. A [`TreeHasher`] keeps the subtrees it has finished
//! and the one it is in; a [`Head`] is the beginning of an input hashed as
//! subtrees, in parallel ([`hash_head`]). Tests compare every result with
//! `blake3::hash` of the same bytes.

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

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("a head of {head} bytes cannot join a hasher that starts at {start}")]
    Misaligned { head: u64, start: u64 },
    #[error("nothing was hashed after the head")]
    Empty,
}

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
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
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
        }
    }
}

impl TreeHasher {
    pub fn new() -> TreeHasher {
        blake3::Hasher::new().into()
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
        hazmat::max_subtree_len(self.start)
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
    let head_len = head_len(len);
    let head = hash_head(file, head_len, threads, &|| false)?;
    let mut rest = vec![0u8; (len - head_len) as usize];
    file.read_exact_at(&mut rest, head_len)?;
    let mut h = TreeHasher::starting_at(head_len);
    h.update(&rest);
    if head_len == 0 {
        return Ok(h);
    }
    h.join(head).map_err(io::Error::other)?;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn data(len: usize, seed: u8) -> Vec<u8> {
        let mut x = seed as u32 | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    fn file_of(d: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, d).unwrap();
        f
    }

    /// Splits `d` at `at`: the head hashed from a file, the rest fed in `step`-byte updates.
    fn joined(d: &[u8], at: usize, step: usize, threads: usize) -> TreeHasher {
        let f = file_of(d);
        let head = head_len(at as u64);
        let mut h = TreeHasher::starting_at(head);
        for part in d[head as usize..].chunks(step.max(1)) {
            h.update(part);
        }
        if head > 0 {
            h.join(hash_head(&f, head, threads, &|| false).unwrap())
                .unwrap();
        }
        h
    }

    #[test]
    fn plain_use_equals_blake3() {
        for len in [0, 1, 1023, 1024, 1025, 2048, 5000, 1 << 20] {
            let d = data(len, 3);
            let mut h = TreeHasher::new();
            h.update(&d);
            assert_eq!(h.finalize(), blake3::hash(&d), "{len}");
        }
    }

    #[test]
    fn heads_of_every_small_shape_join() {
        for len in 1..40usize {
            let d = data(len * 512 + 7, len as u8);
            for at in 0..=d.len() / 300 {
                let at = at * 300;
                assert_eq!(
                    joined(&d, at, 333, 2).finalize(),
                    blake3::hash(&d),
                    "len {} at {at}",
                    d.len()
                );
            }
        }
    }

    #[test]
    fn heads_at_power_of_two_boundaries_join() {
        for total in [
            1025usize, 2048, 2049, 3072, 4096, 4097, 8192, 8193, 65536, 65537,
        ] {
            let d = data(total, 7);
            for at in [1, 1024, 1025, 2048, 2049, 4096, total - 1, total] {
                if at <= total {
                    assert_eq!(
                        joined(&d, at, 4096, 1).finalize(),
                        blake3::hash(&d),
                        "{total} at {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_large_head_is_hashed_in_parallel() {
        let d = data((PARALLEL_MIN as usize) * 2 + 77_777, 9);
        for threads in [1, 2, 3, 8] {
            let at = d.len() - 50_000;
            assert_eq!(
                joined(&d, at, 1 << 16, threads).finalize(),
                blake3::hash(&d)
            );
        }
        let f = file_of(&d);
        let h = hash_file_prefix(&f, d.len() as u64 - 5, 2).unwrap();
        assert_eq!(h.finalize(), blake3::hash(&d[..d.len() - 5]));
        let mut h = h;
        h.update(&d[d.len() - 5..]);
        assert_eq!(h.finalize(), blake3::hash(&d));
    }

    #[test]
    fn heads_merge_into_few_pieces() {
        let d = data(3 << 20, 1);
        let head = hash_head(&file_of(&d), (3 << 20) - 4096, 2, &|| false).unwrap();
        assert!(head.pieces.len() <= 64, "{}", head.pieces.len());
    }

    #[test]
    fn misuse_is_refused() {
        let d = data(10_000, 5);
        let f = file_of(&d);
        let mut h = TreeHasher::starting_at(4096);
        assert!(matches!(
            h.join(hash_head(&f, 4096, 1, &|| false).unwrap()),
            Err(TreeError::Empty)
        ));
        h.update(&d[4096..]);
        assert!(matches!(
            h.join(hash_head(&f, 2048, 1, &|| false).unwrap()),
            Err(TreeError::Misaligned { .. })
        ));
        assert_ne!(h.finalize(), blake3::hash(&d), "no head, no hash");
        h.join(hash_head(&f, 4096, 1, &|| false).unwrap()).unwrap();
        assert_eq!(h.finalize(), blake3::hash(&d));
        assert!(
            hash_head(&f, 16384, 1, &|| false).is_err(),
            "a file shorter than the head"
        );
        let stopped = hash_head(&file_of(&data(PARALLEL_MIN as usize, 1)), 16384, 1, &|| {
            true
        });
        assert_eq!(stopped.unwrap_err().kind(), io::ErrorKind::Interrupted);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn any_split_any_updates_equal_blake3(
            len in 0usize..200_000,
            at in 0.0f64..=1.0,
            step in 1usize..70_000,
            seed in any::<u8>(),
            threads in 1usize..4,
        ) {
            let d = data(len, seed);
            let at = (len as f64 * at) as usize;
            let mut h = joined(&d, at, step, threads);
            prop_assert_eq!(h.finalize(), blake3::hash(&d));
            // A clone goes on independently.
            let c = h.clone();
            h.update(b"more");
            prop_assert_eq!(c.finalize(), blake3::hash(&d));
            let mut more = d.clone();
            more.extend_from_slice(b"more");
            prop_assert_eq!(h.finalize(), blake3::hash(&more));
            // Every length along the way is a valid prefix hash.
            let f = file_of(&d);
            let p = hash_file_prefix(&f, at as u64, threads).unwrap();
            prop_assert_eq!(p.finalize(), blake3::hash(&d[..at]));
        }
    }
}
