//! The receiver's side of a block session's data: positional ops from the
//! sender applied to the destination in order, each finished block hashed
//! into the whole content's BLAKE3.
//!
//! The ops must tile `[from, size)` exactly, in order: `Literal` bytes and
//! `Zeros` at the current offset, `Copy` runs of whole blocks already at
//! the destination (their chaining values come from the receiver's own
//! signer, in block order). Anything else is the sender's fault, refused
//! before it touches the destination, so this is safe to feed a hostile
//! peer's ops (see the `block_writer` fuzz target).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use blake3::hazmat::{ChainingValue, HasherExt};

use super::zero::Zeroer;
use super::{BlockShape, ZEROS};
use crate::delta::Op;
use crate::treehash::{BlockRoot, Head};

/// Why the ops could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// The sender's ops break the rules: never worth a retry.
    #[error("{0}")]
    Violation(String),
    #[error("writing the destination: {0}")]
    Io(#[from] io::Error),
    /// The signer stopped before the chaining value a block needs.
    #[error("the destination's signer stopped")]
    Stopped,
}

impl WriterError {
    pub fn is_retryable(&self) -> bool {
        !matches!(self, WriterError::Violation(_))
    }
}

/// The chaining values of the destination's own blocks, in order: what the
/// signer computed before the data came (`None` when there is no signer,
/// with `whole_file`).
pub type Cvs<'a> = Option<&'a mut dyn FnMut(u64) -> Result<ChainingValue, WriterError>>;

/// Counts of what the writer did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    pub literal: u64,
    pub matched: u64,
    pub zeroed: u64,
}

/// Applies one session's ops to `file`.
pub struct Writer<'f> {
    file: &'f File,
    shape: BlockShape,
    /// Offset of the next byte.
    cur: u64,
    /// The block being filled by bytes: its hasher.
    open: Option<blake3::Hasher>,
    root: BlockRoot,
    /// The last block's length and chaining value, once it is done.
    last: Option<(u64, ChainingValue)>,
    /// The chaining value of the latest whole block done (the probe).
    probe: Option<ChainingValue>,
    pub zeroer: Zeroer,
    pub written: Written,
}

impl<'f> Writer<'f> {
    /// A writer that starts at `from` (a block boundary), with the hash
    /// state of `[0, from)`.
    pub fn new(file: &'f File, shape: BlockShape, from: u64, head: Head) -> Writer<'f> {
        debug_assert_eq!(head.len(), from);
        Writer {
            file,
            shape,
            cur: from,
            open: None,
            root: BlockRoot::from_head(head),
            last: None,
            probe: None,
            zeroer: Zeroer::new(),
            written: Written::default(),
        }
    }

    /// Offset of the next byte the ops must give.
    pub fn position(&self) -> u64 {
        self.cur
    }

    /// Bytes from 0 in finished blocks: what a checkpoint may claim, once
    /// made durable.
    pub fn settled(&self) -> u64 {
        self.root.len()
    }

    /// The hash state of [`Writer::settled`] bytes, and the chaining value
    /// of the last of its blocks.
    pub fn head(&self) -> (&Head, Option<ChainingValue>) {
        (self.root.head(), self.probe)
    }

    /// Applies one op.
    pub fn apply(&mut self, op: Op, cvs: &mut Cvs<'_>) -> Result<(), WriterError> {
        let size = self.shape.size;
        match op {
            Op::Literal(data) => {
                let len = data.len() as u64;
                self.check_room(len, "literal")?;
                self.file.write_all_at(&data, self.cur)?;
                self.written.literal += len;
                self.feed(&data, cvs)
            }
            Op::Zeros(len) => {
                self.check_room(len, "zeros")?;
                self.zeroer.zero(self.file, self.cur, len)?;
                self.written.zeroed += len;
                let mut left = len;
                while left > 0 {
                    let n = left.min(ZEROS.len() as u64) as usize;
                    self.feed(&ZEROS[..n], cvs)?;
                    left -= n as u64;
                }
                Ok(())
            }
            Op::Copy { block, count } => {
                let (block, count) = (block as u64, count as u64);
                let blocks = self.shape.count();
                let fits = count >= 1 && block.checked_add(count).is_some_and(|e| e <= blocks);
                if self.open.is_some() || self.cur != self.shape.offset(block) || !fits {
                    return Err(WriterError::Violation(format!(
                        "copy of blocks {block}..+{count} at offset {} of {size}",
                        self.cur
                    )));
                }
                let Some(next) = cvs.as_mut() else {
                    return Err(WriterError::Violation(
                        "a copy in a session without sums".into(),
                    ));
                };
                for i in block..block + count {
                    let cv = next(i)?;
                    let len = self.shape.len_of(i);
                    self.written.matched += len;
                    self.cur += len;
                    self.done(i, len, cv);
                }
                Ok(())
            }
        }
    }

    fn check_room(&self, len: u64, what: &str) -> Result<(), WriterError> {
        if len == 0
            || self
                .cur
                .checked_add(len)
                .is_none_or(|end| end > self.shape.size)
        {
            return Err(WriterError::Violation(format!(
                "{what} of {len} bytes at offset {} of {}",
                self.cur, self.shape.size
            )));
        }
        Ok(())
    }

    /// Hashes bytes just written at `cur`, finishing blocks as it goes.
    fn feed(&mut self, mut data: &[u8], cvs: &mut Cvs<'_>) -> Result<(), WriterError> {
        while !data.is_empty() {
            let i = self.cur / self.shape.block_len();
            let block_start = self.shape.offset(i);
            let len = self.shape.len_of(i);
            let in_block = self.cur - block_start;
            let n = ((len - in_block) as usize).min(data.len());
            let hasher = self.open.get_or_insert_with(|| {
                let mut h = blake3::Hasher::new();
                h.set_input_offset(block_start);
                h
            });
            hasher.update(&data[..n]);
            self.cur += n as u64;
            data = &data[n..];
            if in_block + n as u64 == len {
                let cv = self.open.take().expect("open").finalize_non_root();
                // The signer's value for this block was of what it replaced.
                if let Some(next) = cvs.as_mut() {
                    next(i)?;
                }
                self.done(i, len, cv);
            }
        }
        Ok(())
    }

    fn done(&mut self, i: u64, len: u64, cv: ChainingValue) {
        if i + 1 == self.shape.count() {
            self.last = Some((len, cv));
        } else {
            self.root.push(self.shape.block_len(), cv);
            self.probe = Some(cv);
        }
    }

    /// The BLAKE3 of `[0, size)` as written, once every op is in.
    pub fn finish(&self) -> Result<blake3::Hash, WriterError> {
        if self.cur != self.shape.size {
            return Err(WriterError::Violation(format!(
                "the data ended at offset {} of {}",
                self.cur, self.shape.size
            )));
        }
        if self.shape.count() <= 1 {
            // One block: its root is no chaining value's; read it back.
            let mut all = vec![0u8; self.shape.size as usize];
            self.file.read_exact_at(&mut all, 0)?;
            return Ok(blake3::hash(&all));
        }
        let (len, cv) = self.last.expect("the last block is done at the end");
        self.root
            .finish(len, cv)
            .ok_or_else(|| WriterError::Violation("no root of the blocks".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::treehash::block_cv;

    const B: usize = 16 << 10;

    fn source() -> Vec<u8> {
        let mut s: Vec<u8> = (0..5 * B + 300).map(|i| (i % 253) as u8).collect();
        s[B..2 * B].fill(0);
        s
    }

    #[test]
    fn literals_zeros_and_copies_rebuild_the_source_and_its_hash() {
        let src = source();
        let shape = BlockShape::for_size(src.len() as u64);
        assert_eq!(shape.block_len as usize, B);
        // The destination already holds blocks 2 and 3.
        let f = tempfile::tempfile().unwrap();
        f.set_len(src.len() as u64).unwrap();
        f.write_all_at(&src[2 * B..4 * B], 2 * B as u64).unwrap();
        let own: Vec<ChainingValue> = (0..shape.count())
            .map(|i| {
                let mut b = vec![0u8; shape.len_of(i) as usize];
                f.read_exact_at(&mut b, shape.offset(i)).unwrap();
                block_cv(shape.offset(i), &b)
            })
            .collect();
        let mut asked = Vec::new();
        let mut next = |i: u64| {
            asked.push(i);
            Ok(own[i as usize])
        };
        let mut cvs: Cvs<'_> = Some(&mut next);
        let mut w = Writer::new(&f, shape, 0, Head::empty());
        let ops = [
            Op::Literal(src[..100].to_vec()),
            Op::Literal(src[100..B].to_vec()),
            Op::Zeros(B as u64),
            Op::Copy { block: 2, count: 2 },
            Op::Literal(src[4 * B..].to_vec()),
        ];
        for op in ops {
            w.apply(op, &mut cvs).unwrap();
        }
        assert_eq!(w.finish().unwrap(), blake3::hash(&src));
        assert_eq!(asked, [0, 1, 2, 3, 4, 5]);
        let mut back = vec![0u8; src.len()];
        f.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(back, src);
        assert_eq!(w.written.matched, 2 * B as u64);
        assert_eq!(w.settled(), 5 * B as u64);
    }

    #[test]
    fn ops_that_do_not_tile_the_source_are_refused_before_writing() {
        let src = source();
        let shape = BlockShape::for_size(src.len() as u64);
        let f = tempfile::tempfile().unwrap();
        f.set_len(src.len() as u64).unwrap();
        let bad: [(Op, &str); 5] = [
            (Op::Copy { block: 0, count: 1 }, "copy without sums"),
            (Op::Literal(vec![1; src.len() + 1]), "past the end"),
            (Op::Zeros(0), "nothing"),
            (Op::Zeros(u64::MAX), "overflow"),
            (Op::Literal(Vec::new()), "empty"),
        ];
        for (op, why) in bad {
            let mut w = Writer::new(&f, shape, 0, Head::empty());
            let err = w.apply(op, &mut None).expect_err(why);
            assert!(!err.is_retryable(), "{why}: {err}");
        }
        // A copy that is not at the current block.
        let own = |_| Ok([0u8; 32]);
        let mut own = own;
        let mut cvs: Cvs<'_> = Some(&mut own);
        let mut w = Writer::new(&f, shape, 0, Head::empty());
        w.apply(Op::Literal(vec![1; 10]), &mut cvs).unwrap();
        assert!(w.apply(Op::Copy { block: 0, count: 1 }, &mut cvs).is_err());
        assert!(w.apply(Op::Copy { block: 1, count: 1 }, &mut cvs).is_err());
        assert!(w.finish().is_err(), "ended early");
    }
}
