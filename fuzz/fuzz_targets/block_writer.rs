//! `block::writer::Writer` (the receiver of a block session applying the
//! sender's positional ops to its destination) on untrusted ops.
//!
//! Each run makes a destination image in `/dev/shm` (a temporary file
//! elsewhere if there is none): `size` bytes of the source's shape plus a
//! `tail` the source does not cover, filled from a seed byte. The writer
//! starts at 0, or at a whole block `from` with the hash state of the
//! destination's own `[0, from)` (a resumed attempt). With sums on, it gets
//! the chaining values of the destination's own blocks, as the receiver's
//! signer computed them before the data, in order (the callback asserts the
//! writer asks for exactly the next one), optionally running out after some
//! blocks (the signer stopped).
//!
//! Every op goes to the real writer and to a model of the file, which
//! predicts the exact outcome. Checked:
//!
//! - no panic, no I/O error; each op's result (`Ok`, `Violation` of the
//!   kind the model names, or `Stopped`) is the model's;
//! - a refused op changes nothing (the run goes on with the next op);
//! - after each op, `position()`, `settled()` and the probe (the chaining
//!   value of the last settled block, equal to that block as the file holds
//!   it now) are the model's;
//! - at the end the file, read back whole, is the model (never a byte past
//!   `size`, zeros read back as zeros, copied blocks untouched, the file's
//!   length unchanged), and `finish()` is refused unless the ops reached
//!   `size`, where it equals the BLAKE3 of the file's first `size` bytes.
//!
//! Input layout (integers little-endian; missing bytes read as zero):
//!
//! ```text
//! u8  flags   bit 0: sums (the destination's chaining values; copies allowed)
//!             bit 1: resume from a whole block; bit 2: the sums run out
//! u32 size    % (MAX_SIZE + 1)
//! u8  from    resume: from = (from % blocks) * block_len
//! u16 tail    % (MAX_TAIL + 1)
//! u8  seed    the destination's old bytes: seed + i * 7 (mod 256), 0 if seed = 0
//! u16 supply  bit 2: blocks the sums cover before they run out
//! then, to the end, ops: u8 tag % 8, then
//!   0 Literal      u16 len, u8 byte       len bytes of byte ^ (i mod 251)
//!   1 LiteralBlock u8 byte                to the end of the current block
//!   2 LiteralEnd   u8 byte                to `size`
//!   3 Zeros        u32 len
//!   4 ZerosBlock                          to the end of the current block
//!   5 ZerosWide    u64 len
//!   6 CopyHere     u8 count               Copy { block: position / block_len, count }
//!   7 Copy         u32 block, u32 count
//! ```

#![no_main]

use std::fs::File;
use std::os::unix::fs::FileExt;

use libfuzzer_sys::fuzz_target;
use mover::block::writer::{Cvs, Writer, WriterError};
use mover::block::BlockShape;
use mover::delta::Op;
use mover::treehash::{block_cv, BlockRoot, Head};

#[path = "common.rs"]
mod common;

/// Largest source: 20 blocks of 16 KiB, past `LITERAL_CHUNK`.
const MAX_SIZE: u32 = 320 << 10;
/// Largest part of the destination past the source.
const MAX_TAIL: u16 = 8192;
/// Most ops taken from one input.
const MAX_OPS: usize = 256;

fuzz_target!(init: common::write_seeds_if_asked(seeds::all), |data: &[u8]| {
    run(data);
});

/// Reads little-endian integers; missing bytes read as zero.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn int(&mut self, n: usize) -> u64 {
        let mut v = 0u64;
        for i in 0..n {
            let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
            self.0 = rest;
            v |= (b as u64) << (8 * i);
        }
        v
    }
    fn u8(&mut self) -> u8 {
        self.int(1) as u8
    }
    fn u16(&mut self) -> u16 {
        self.int(2) as u16
    }
    fn u32(&mut self) -> u32 {
        self.int(4) as u32
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What the model expects of one op.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    Ok,
    /// A violation whose message starts so.
    Violation(&'static str),
    Stopped,
}

fn pattern(byte: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| byte ^ (i % 251) as u8).collect()
}

fn image() -> File {
    tempfile::tempfile_in("/dev/shm")
        .or_else(|_| tempfile::tempfile())
        .expect("a temporary file")
}

fn run(data: &[u8]) {
    let mut input = Bytes(data);
    let flags = input.u8();
    let (sums, resume, runs_out) = (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0);
    let size = (input.u32() % (MAX_SIZE + 1)) as u64;
    let shape = BlockShape::for_size(size);
    let (b, blocks) = (shape.block_len(), shape.count());
    let from_pick = input.u8() as u64;
    let from = match resume && blocks > 0 {
        true => (from_pick % blocks) * b,
        false => 0,
    };
    let tail = (input.u16() % (MAX_TAIL + 1)) as u64;
    let seed = input.u8();
    let supply = input.u16() as u64;

    // The destination as it was, and its blocks' chaining values.
    let mut model: Vec<u8> = (0..size + tail)
        .map(|i| match seed {
            0 => 0,
            s => s.wrapping_add(((i % 256) as u8).wrapping_mul(7)),
        })
        .collect();
    let file = image();
    file.write_all_at(&model, 0).expect("writing the image");
    let own: Vec<[u8; 32]> = (0..blocks)
        .map(|i| {
            let (at, len) = (shape.offset(i), shape.len_of(i));
            block_cv(at, &model[at as usize..(at + len) as usize])
        })
        .collect();
    let mut head = BlockRoot::new();
    for cv in &own[..(from / b.max(1)) as usize] {
        head.push(b, *cv);
    }
    let head: Head = head.head().clone();
    assert_eq!(head.len(), from);

    // The signer's values: asked for in block order, from `from` on.
    let first = from / b;
    let limit = match runs_out {
        true => first + supply % (blocks + 1),
        false => u64::MAX,
    };
    let mut next_asked = first;
    let mut supply_fn = |i: u64| -> Result<[u8; 32], WriterError> {
        assert_eq!(
            i, next_asked,
            "the writer skipped or repeated a block's value"
        );
        if i >= limit {
            return Err(WriterError::Stopped);
        }
        next_asked += 1;
        Ok(own[i as usize])
    };
    let mut cvs: Cvs<'_> = match sums {
        true => Some(&mut supply_fn),
        false => None,
    };

    let mut w = Writer::new(&file, shape, from, head);
    let mut m = Model {
        shape,
        cur: from,
        used: first,
        limit,
        sums,
        probe: None,
    };
    let mut stopped = false;
    for _ in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        let op = m.op(&mut input);
        let expect = m.expect(&op);
        let got = w.apply(op.clone(), &mut cvs);
        match (&expect, &got) {
            (Expect::Ok, Ok(())) => m.apply(&op, &mut model, &own),
            (Expect::Violation(kind), Err(WriterError::Violation(msg))) => {
                assert!(msg.starts_with(kind), "{op:?}: {msg:?}, expected {kind:?}");
            }
            (Expect::Stopped, Err(WriterError::Stopped)) => {
                // Bytes are written before their blocks are hashed.
                m.write(&op, &mut model);
                stopped = true;
                break;
            }
            _ => panic!(
                "{op:?} at {} of {size}: {got:?}, the model expected {expect:?}",
                m.cur
            ),
        }
        assert_eq!(w.position(), m.cur, "{op:?}");
        assert_eq!(w.settled(), m.settled(), "{op:?}");
        let (h, probe) = w.head();
        assert_eq!(h.len(), w.settled());
        assert_eq!(probe, m.probe, "{op:?}");
        if let Some(probe) = probe {
            let at = w.settled() - b;
            let block = &model[at as usize..(at + b) as usize];
            assert_eq!(probe, block_cv(at, block), "the probe is not the block");
        }
    }

    // The file is the model: nothing past `size`, nothing a refused op did.
    let mut back = vec![0u8; model.len()];
    file.read_exact_at(&mut back, 0).expect("reading back");
    assert_eq!(file.metadata().expect("stat").len(), size + tail);
    assert!(back == model, "the file is not the model");
    if stopped {
        return;
    }
    match (w.finish(), m.cur == size) {
        (Ok(root), true) => assert_eq!(root, blake3::hash(&back[..size as usize])),
        (Err(WriterError::Violation(msg)), false) => {
            assert!(msg.starts_with("the data ended at offset"), "{msg}")
        }
        (r, done) => panic!("finish() at {} of {size}: {r:?} (done: {done})", m.cur),
    }
}

/// The file as the ops should leave it.
struct Model {
    shape: BlockShape,
    cur: u64,
    /// Values the supply has given (the next block to ask for).
    used: u64,
    limit: u64,
    sums: bool,
    probe: Option<[u8; 32]>,
}

impl Model {
    fn op(&self, input: &mut Bytes<'_>) -> Op {
        let b = self.shape.block_len();
        let to_block_end = (self.cur / b + 1) * b;
        let block_left = to_block_end.min(self.shape.size).saturating_sub(self.cur);
        match input.u8() % 8 {
            0 => {
                let len = input.u16() as usize;
                Op::Literal(pattern(input.u8(), len))
            }
            1 => Op::Literal(pattern(input.u8(), block_left as usize)),
            2 => Op::Literal(pattern(
                input.u8(),
                self.shape.size.saturating_sub(self.cur) as usize,
            )),
            3 => Op::Zeros(input.u32() as u64),
            4 => Op::Zeros(block_left),
            5 => Op::Zeros(input.int(8)),
            6 => Op::Copy {
                block: (self.cur / b) as u32,
                count: input.u8() as u32,
            },
            _ => Op::Copy {
                block: input.u32(),
                count: input.u32(),
            },
        }
    }

    /// Whether the writer has a block partly filled.
    fn open(&self) -> bool {
        !self.cur.is_multiple_of(self.shape.block_len()) && self.cur != self.shape.size
    }

    /// Blocks finished by bytes that end at `end`: do they outrun the supply?
    fn supply_lasts(&self, end: u64) -> bool {
        if !self.sums {
            return true;
        }
        let b = self.shape.block_len();
        let finished = (self.cur / b..self.shape.count())
            .filter(|&i| self.shape.offset(i) + self.shape.len_of(i) <= end)
            .count() as u64;
        self.used + finished <= self.limit
    }

    fn expect(&self, op: &Op) -> Expect {
        match op {
            Op::Literal(d) => self.room(d.len() as u64, "literal of"),
            Op::Zeros(len) => self.room(*len, "zeros of"),
            Op::Copy { block, count } => {
                let (block, count) = (*block as u64, *count as u64);
                let fits = count >= 1 && block + count <= self.shape.count();
                if self.open() || self.cur != self.shape.offset(block) || !fits {
                    return Expect::Violation("copy of blocks");
                }
                if !self.sums {
                    return Expect::Violation("a copy in a session without sums");
                }
                match self.used + count <= self.limit {
                    true => Expect::Ok,
                    false => Expect::Stopped,
                }
            }
        }
    }

    fn room(&self, len: u64, kind: &'static str) -> Expect {
        if len == 0
            || self
                .cur
                .checked_add(len)
                .is_none_or(|e| e > self.shape.size)
        {
            return Expect::Violation(kind);
        }
        match self.supply_lasts(self.cur + len) {
            true => Expect::Ok,
            false => Expect::Stopped,
        }
    }

    /// An accepted op: the file and the position move on.
    fn apply(&mut self, op: &Op, file: &mut [u8], own: &[[u8; 32]]) {
        let b = self.shape.block_len();
        let start = self.cur;
        let end = self.write(op, file);
        // Blocks finished: each took a value from the supply (with sums);
        // the probe is the last whole one's, as the file holds it (a copied
        // block's value is the destination's own).
        for i in start / b..self.shape.count() {
            let block_end = self.shape.offset(i) + self.shape.len_of(i);
            if block_end > end {
                break;
            }
            if self.sums {
                self.used += 1;
            }
            if i + 1 < self.shape.count() {
                let at = self.shape.offset(i);
                self.probe = Some(match op {
                    Op::Copy { .. } => own[i as usize],
                    _ => block_cv(at, &file[at as usize..(at + b) as usize]),
                });
            }
        }
        self.cur = end;
    }

    /// The bytes an op writes (none for a copy); where it ends.
    fn write(&self, op: &Op, file: &mut [u8]) -> u64 {
        let cur = self.cur as usize;
        match op {
            Op::Literal(d) => {
                file[cur..cur + d.len()].copy_from_slice(d);
                self.cur + d.len() as u64
            }
            Op::Zeros(len) => {
                file[cur..cur + *len as usize].fill(0);
                self.cur + len
            }
            Op::Copy { block, count } => self
                .shape
                .offset(*block as u64 + *count as u64)
                .min(self.shape.size),
        }
    }

    /// Bytes in finished whole blocks (the last block never counts).
    fn settled(&self) -> u64 {
        let whole = self.shape.count().saturating_sub(1);
        (self.cur / self.shape.block_len()).min(whole) * self.shape.block_len()
    }
}

mod seeds {
    /// Little-endian bytes of an input, as `run` reads them.
    struct Input(Vec<u8>);

    impl Input {
        fn new(flags: u8, size: u32, from: u8, tail: u16, seed: u8, supply: u16) -> Input {
            let mut v = vec![flags];
            v.extend_from_slice(&size.to_le_bytes());
            v.push(from);
            v.extend_from_slice(&tail.to_le_bytes());
            v.push(seed);
            v.extend_from_slice(&supply.to_le_bytes());
            Input(v)
        }
        fn op(mut self, tag: u8, args: &[u8]) -> Input {
            self.0.push(tag);
            self.0.extend_from_slice(args);
            self
        }
    }

    pub fn all() -> Vec<(String, Vec<u8>)> {
        let b = 16u32 << 10;
        let size = 5 * b + 300;
        let seeds = [
            // The whole source as literals, block by block.
            (
                "literals",
                Input::new(0, size, 0, 100, 9, 0)
                    .op(1, &[1])
                    .op(1, &[2])
                    .op(1, &[3])
                    .op(1, &[4])
                    .op(1, &[5])
                    .op(2, &[6]),
            ),
            // Copies, zeros and literals with sums, as a re-sync sends them.
            (
                "mixed",
                Input::new(1, size, 0, 4096, 3, 0)
                    .op(6, &[2])
                    .op(4, &[])
                    .op(0, &[100, 0, 7])
                    .op(1, &[8])
                    .op(6, &[1])
                    .op(2, &[9]),
            ),
            // Resumed from block 2, then zeros to the end.
            (
                "resume",
                Input::new(3, size, 2, 0, 5, 0)
                    .op(6, &[2])
                    .op(3, &(b + 300).to_le_bytes()),
            ),
            // The sums run out in the middle of a copy.
            ("stopped", Input::new(5, size, 0, 10, 1, 2).op(6, &[4])),
            // Refused ops, then a legal end.
            (
                "refused",
                Input::new(1, size, 0, 10, 1, 0)
                    .op(7, &[1, 0, 0, 0, 1, 0, 0, 0])
                    .op(3, &[0, 0, 0, 0])
                    .op(5, &[0xff; 8])
                    .op(0, &[0xff, 0xff, 1])
                    .op(2, &[1])
                    .op(2, &[1]),
            ),
            ("empty", Input::new(0, 0, 0, 10, 1, 0)),
            (
                "one-short-block",
                Input::new(0, 1000, 0, 10, 1, 0).op(2, &[3]),
            ),
            (
                "largest",
                Input::new(1, super::MAX_SIZE, 0, 0, 0, 0)
                    .op(4, &[])
                    .op(6, &[18])
                    .op(2, &[1]),
            ),
        ];
        seeds
            .into_iter()
            .map(|(name, input)| {
                // Each seed runs clean before it is written.
                super::run(&input.0);
                (name.to_string(), input.0)
            })
            .collect()
    }
}
