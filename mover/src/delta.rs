//! The sender's half of the delta algorithm: turn a file into copy and literal
//! instructions against the receiver's block signatures.
//!
//! Streams: memory is one window of literal data plus one block, whatever the
//! file size. The whole-file BLAKE3 of what was read is computed on the way,
//! so the receiver can verify the file it rebuilt.

use std::io::{self, Read};

use serde::{Deserialize, Serialize};

use crate::rolling::Rolling;
use crate::signature::Index;
use crate::treehash::TreeHasher;

/// Most literal bytes carried by one [`Op::Literal`].
pub const LITERAL_CHUNK: usize = 256 * 1024;

/// One instruction for rebuilding a file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Copy `count` consecutive basis blocks starting at `block`.
    Copy { block: u32, count: u32 },
    /// New bytes.
    Literal(#[serde(with = "bytes_serde")] Vec<u8>),
    /// `len` zero bytes (a hole in a sparse file, or zero-filled data).
    Zeros(u64),
}

/// Serializes `Vec<u8>` as a byte string instead of a sequence of integers.
pub(crate) mod bytes_serde {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// What the delta of one file amounted to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeltaSummary {
    /// Bytes read from the source.
    pub len: u64,
    /// Bytes sent as literals (zero runs excluded).
    pub literal: u64,
    /// Bytes reused from the basis.
    pub matched: u64,
    /// BLAKE3 of the whole source content.
    pub hash: [u8; 32],
}

/// A [`DeltaSummary`] without the hash, for a caller that finalizes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeltaCounts {
    pub len: u64,
    pub literal: u64,
    pub matched: u64,
}

/// Options for one delta run.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeltaOptions {
    /// The receiver rewrites the basis in place: only blocks at or after the
    /// current output offset may be referenced.
    pub inplace: bool,
    /// The source's expected length, if known: buffers are sized to it, so a
    /// small file costs a small buffer.
    pub len_hint: Option<u64>,
    /// The basis is the receiver's copy of this very data at the same
    /// offsets (a resumed file's unverified rest): each block is compared
    /// with the signature at its own offset only, no search. Implies
    /// `inplace`.
    pub positional: bool,
}

/// Reads `src` to its end and emits ops rebuilding it from the basis described
/// by `index` (no index: the whole file as literals).
pub fn delta<R: Read, E: From<io::Error>>(
    src: R,
    index: Option<&Index>,
    opts: DeltaOptions,
    emit: &mut dyn FnMut(Op) -> Result<(), E>,
) -> Result<DeltaSummary, E> {
    delta_with(src, index, opts, TreeHasher::new(), emit)
}

/// Like [`delta`], for the rest of a file whose beginning is already hashed
/// into `hasher`: the summary's hash is then the whole file's.
pub fn delta_with<R: Read, E: From<io::Error>>(
    src: R,
    index: Option<&Index>,
    opts: DeltaOptions,
    hasher: impl Into<TreeHasher>,
    emit: &mut dyn FnMut(Op) -> Result<(), E>,
) -> Result<DeltaSummary, E> {
    let mut hasher = hasher.into();
    let c = delta_hashing(src, index, opts, &mut hasher, emit)?;
    Ok(DeltaSummary {
        len: c.len,
        literal: c.literal,
        matched: c.matched,
        hash: *hasher.finalize().as_bytes(),
    })
}

/// Like [`delta_with`], leaving the hash to the caller: `hasher` gets every
/// byte read, and may still wait for the file's beginning, hashed elsewhere
/// meanwhile ([`TreeHasher::join`]).
pub fn delta_hashing<R: Read, E: From<io::Error>>(
    src: R,
    index: Option<&Index>,
    opts: DeltaOptions,
    hasher: &mut TreeHasher,
    emit: &mut dyn FnMut(Op) -> Result<(), E>,
) -> Result<DeltaCounts, E> {
    let mut d = Delta {
        src,
        hasher,
        counts: DeltaCounts::default(),
        emit,
        pending_copy: None,
        out_offset: 0,
        len_hint: opts.len_hint,
    };
    match index {
        Some(idx) if idx.block_count() > 0 && opts.positional => d.run_positional(idx)?,
        Some(idx) if idx.block_count() > 0 => d.run_matching(idx, opts)?,
        _ => d.run_literal()?,
    }
    d.flush_copy()?;
    Ok(d.counts)
}

struct Delta<'a, R, E> {
    src: R,
    hasher: &'a mut TreeHasher,
    counts: DeltaCounts,
    emit: &'a mut dyn FnMut(Op) -> Result<(), E>,
    /// A run of copied blocks not yet emitted: `(first block, count)`.
    pending_copy: Option<(u32, u32)>,
    /// Bytes of output described so far.
    out_offset: u64,
    len_hint: Option<u64>,
}

impl<R: Read, E: From<io::Error>> Delta<'_, R, E> {
    /// Appends to `buf` until it holds `want` bytes or the source ends; returns false at EOF.
    fn fill(&mut self, buf: &mut Vec<u8>, want: usize) -> io::Result<bool> {
        // Past the expected length one byte is enough to see the end.
        let want = match self.len_hint {
            Some(h) => want.min(buf.len() + h.saturating_sub(self.counts.len) as usize + 1),
            None => want,
        };
        while buf.len() < want {
            let start = buf.len();
            buf.resize(want, 0);
            let n = loop {
                match self.src.read(&mut buf[start..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        buf.truncate(start);
                        return Err(e);
                    }
                }
            };
            buf.truncate(start + n);
            self.hasher.update(&buf[start..]);
            self.counts.len += n as u64;
            if n == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn run_literal(&mut self) -> Result<(), E> {
        let mut buf = Vec::with_capacity(self.buffer_len(LITERAL_CHUNK));
        loop {
            buf.clear();
            let more = self.fill(&mut buf, LITERAL_CHUNK)?;
            self.literal(&buf)?;
            if !more {
                return Ok(());
            }
        }
    }

    /// The positional check: block `i` of the source (at the same offset as
    /// block `i` of the basis) is copied onto itself if it still matches,
    /// else sent; past the basis everything is literal. Reads whole blocks,
    /// about `LITERAL_CHUNK` at a time.
    fn run_positional(&mut self, idx: &Index) -> Result<(), E> {
        let shape = idx.shape();
        let bl = shape.block_len as u64;
        let step = (LITERAL_CHUNK as u64).div_ceil(bl) * bl;
        let mut buf: Vec<u8> = Vec::with_capacity(self.buffer_len(step as usize));
        let mut base = 0u64; // offset of buf[0]
        let mut block = 0u64;
        loop {
            let want = buf.len() + step as usize;
            let more = self.fill(&mut buf, want)?;
            let mut lit = 0;
            while block < shape.block_count() {
                let at = (block * bl - base) as usize;
                let end = at + shape.len_of(block);
                if end > buf.len() {
                    break;
                }
                if idx.matches_at(block as u32, &buf[at..end]) {
                    self.literal(&buf[lit..at])?;
                    self.copy(block as u32, end - at)?;
                    lit = end;
                }
                block += 1;
            }
            // Everything before the next block to check is decided (all of
            // it past the basis); a partial block waits for more data.
            let decided = if block < shape.block_count() {
                ((block * bl - base) as usize).min(buf.len())
            } else {
                buf.len()
            };
            self.literal(&buf[lit..decided])?;
            buf.drain(..decided);
            base += decided as u64;
            if !more {
                return self.literal(&buf);
            }
            if block >= shape.block_count() {
                return self.run_literal();
            }
        }
    }

    fn run_matching(&mut self, idx: &Index, opts: DeltaOptions) -> Result<(), E> {
        let bl = idx.shape().block_len as usize;
        let mut buf: Vec<u8> = Vec::with_capacity(self.buffer_len(bl + 2 * LITERAL_CHUNK));
        let mut pos = 0; // window start
        let mut lit = 0; // start of literal bytes not yet emitted
        let mut eof = false;
        let mut roll: Option<Rolling> = None;
        let mut hint: Option<u32> = None;
        loop {
            // Keep at least one byte beyond the window so it can slide.
            if !eof && buf.len() - pos <= bl {
                buf.drain(..lit);
                pos -= lit;
                lit = 0;
                eof = !self.fill(&mut buf, pos + bl + LITERAL_CHUNK)?;
                continue;
            }
            let avail = buf.len() - pos;
            if avail == 0 {
                break;
            }
            let wlen = avail.min(bl);
            let window = &buf[pos..pos + wlen];
            let out_at = self.out_offset + (pos - lit) as u64;
            // In place, blocks before the write position are overwritten already.
            let min_block = if opts.inplace {
                out_at
                    .div_ceil(idx.shape().block_len as u64)
                    .min(u32::MAX as u64) as u32
            } else {
                0
            };
            // In place past the basis's last block, nothing can match any
            // more (the write position only grows): the rest is literal.
            if min_block as usize >= idx.block_count() {
                self.literal(&buf[lit..])?;
                return if eof { Ok(()) } else { self.run_literal() };
            }
            // Unchanged data continues with the block after the last match:
            // try that one by strong hash before computing any weak checksum.
            let next_in_run = match hint {
                Some(h) if roll.is_none() && h >= min_block && idx.is_block(h, window) => Some(h),
                _ => None,
            };
            let found = next_in_run.or_else(|| {
                let r = *roll.get_or_insert_with(|| Rolling::new(window));
                idx.find(r.digest(), window, hint, min_block)
            });
            if let Some(block) = found {
                self.literal(&buf[lit..pos])?;
                self.copy(block, wlen)?;
                pos += wlen;
                lit = pos;
                roll = None;
                hint = Some(block + 1);
                continue;
            }
            if pos - lit >= LITERAL_CHUNK {
                self.literal(&buf[lit..pos])?;
                lit = pos;
            }
            let r = roll.as_mut().expect("set above");
            if avail > bl {
                r.roll(buf[pos], buf[pos + bl]);
            } else if wlen > 1 {
                r.roll_out(buf[pos]);
            } else {
                roll = None;
            }
            pos += 1;
        }
        self.literal(&buf[lit..pos])
    }

    /// `len`, or less when the source is known to be shorter.
    fn buffer_len(&self, len: usize) -> usize {
        self.len_hint.map_or(len, |h| len.min(h as usize + 1))
    }

    fn copy(&mut self, block: u32, len: usize) -> Result<(), E> {
        self.counts.matched += len as u64;
        self.out_offset += len as u64;
        match &mut self.pending_copy {
            Some((first, count)) if *first + *count == block => *count += 1,
            _ => {
                self.flush_copy()?;
                self.pending_copy = Some((block, 1));
            }
        }
        Ok(())
    }

    fn flush_copy(&mut self) -> Result<(), E> {
        if let Some((block, count)) = self.pending_copy.take() {
            (self.emit)(Op::Copy { block, count })?;
        }
        Ok(())
    }

    fn literal(&mut self, data: &[u8]) -> Result<(), E> {
        if data.is_empty() {
            return Ok(());
        }
        self.flush_copy()?;
        self.out_offset += data.len() as u64;
        for chunk in data.chunks(LITERAL_CHUNK) {
            if is_zero(chunk) {
                (self.emit)(Op::Zeros(chunk.len() as u64))?;
            } else {
                self.counts.literal += chunk.len() as u64;
                (self.emit)(Op::Literal(chunk.to_vec()))?;
            }
        }
        Ok(())
    }
}

/// Whether every byte is zero.
pub fn is_zero(data: &[u8]) -> bool {
    let (words, rest) = data.as_chunks::<16>();
    words.iter().all(|w| u128::from_ne_bytes(*w) == 0) && rest.iter().all(|&b| b == 0)
}
