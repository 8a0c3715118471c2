//! `Patcher` (the receiver rebuilding a file from a peer's ops) on untrusted ops.
//!
//! Each run builds a basis file from fuzz bytes, cuts it as the receiver does
//! (`SigShape::for_len`) and signs it (`sign_file_from`), then sets up one of
//! the receiver's four ways of writing a file (see `session/receiver/applier.rs`):
//!
//! - `Dense` / `Sparse`: a new temporary file (`OutFile::new(tmp, sparse, false)`),
//!   the basis a separate file (or none);
//! - `InPlace`: the basis file itself is rewritten (`OutFile::new(f, true, true)`);
//! - `Resume`: a partial file whose first `prefix_len` bytes are verified is
//!   continued after them, its unverified tail being the basis
//!   (`OutFile::resume` + `Patcher::resume`).
//!
//! The ops are either fuzzer-chosen (a local mirror enum, [`FuzzOp`], turned
//! into `mover::delta::Op`), or, in "delta" mode, what mover's own sender
//! computes (`delta_with`) for a fuzzer-built target made of basis ranges,
//! new bytes and zero runs.
//!
//! Every op is applied to the real `Patcher` and to an in-memory model of the
//! file, which predicts the exact result (`Ok`, or which `PatchError` with
//! which fields), the bytes written so far, and the hash. Checked:
//!
//! - no panic, no I/O error;
//! - `written()` never exceeds `limit`, and the finished file is no longer than `limit`;
//! - result of each op, `written()`, `prefix()` and the final contents and
//!   BLAKE3 equal the model's; the BLAKE3 `finish` returns is that of the file;
//! - delta mode: every op is accepted and the file rebuilt is the target,
//!   with the hash the sender computed.
//!
//! Input layout (read with `arbitrary::Unstructured`; integers little-endian,
//! missing bytes read as zero):
//!
//! ```text
//! u8  mode      % 4: Dense, Sparse, InPlace, Resume
//! u8  flags     bit 0: there is a basis; bit 1: delta mode; bit 2: the basis
//!               shrinks after it is signed; bit 3: basis = seed repeated;
//!               bit 4: large basis; bit 5: large limit (delta mode: large target)
//! u32 basis_len % (MAX_BASIS + 1), or % 65536 without bit 4
//! u32 shrink_to % (basis_len + 1)           (used with flag bit 2)
//! u16 prefix_len                            (Resume only)
//! u32 limit     % (MAX_LIMIT + 1), or % 65536 without bit 5
//!                                           (Resume: prefix_len + this; delta mode: unused,
//!                                           the target is cut at MAX_TARGET, or
//!                                           SMALL_TARGET without bit 5)
//! u8  n, then n seed bytes                  (basis and prefix contents derive from them)
//! then, to the end: ops, or in delta mode pieces (formats at `FuzzOp` and `Piece`)
//! ```

#![no_main]

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};

use arbitrary::{Arbitrary, Result as AResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use mover::delta::{delta_with, DeltaOptions, Op, LITERAL_CHUNK};
use mover::patch::{OutFile, PatchError, Patcher};
use mover::signature::{sign_file_from, Index, SigShape};

#[path = "common.rs"]
mod common;

/// Largest basis: past `LITERAL_CHUNK`, so a copy can take several reads.
const MAX_BASIS: u32 = 320 * 1024;
/// Largest `limit` (the size the sender announced).
const MAX_LIMIT: u32 = 4 << 20;
/// Most ops (or pieces) taken from one input.
const MAX_OPS: usize = 256;
/// Largest `Fill` literal.
const MAX_FILL: u32 = 2 * LITERAL_CHUNK as u32;
/// Largest delta-mode target (without flag bit 5: `SMALL_TARGET`).
const MAX_TARGET: usize = 512 * 1024;
/// Bound of basis, limit and target sizes without their "large" flag bits:
/// most runs stay small and fast.
const SMALL: u32 = 1 << 16;
/// Largest delta-mode target without flag bit 5.
const SMALL_TARGET: usize = 16 * 1024;

fuzz_target!(init: common::write_seeds_if_asked(seeds::all), |data: &[u8]| {
    if let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) {
        run(input);
    }
});

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Dense,
    Sparse,
    InPlace,
    Resume,
}

#[derive(Debug)]
struct Input {
    mode: Mode,
    with_basis: bool,
    shrink_to: Option<u32>,
    repeat: bool,
    basis_len: u32,
    prefix_len: u16,
    limit: u32,
    max_target: usize,
    seed: Vec<u8>,
    body: Body,
}

#[derive(Debug)]
enum Body {
    Ops(Vec<FuzzOp>),
    Delta(Vec<Piece>),
}

/// The local mirror of `mover::delta::Op`, plus a probe of `Patcher::prefix`.
///
/// ```text
/// u8 tag % 8:
///   0 Copy  { block: u32, count: u32 }
///   1 Copy  { block: u8,  count: u8 }
///   2 Literal: u16 len, then that many bytes (fewer if the input ends)
///   3 Fill  { len: u32 % (MAX_FILL + 1), byte: u8 }   (a Literal of one repeated byte)
///   4 Zeros(u64)
///   5 Zeros { n: u16, shift: u8 % 16 }                (n << shift zeros)
///   6 Prefix                                          (call Patcher::prefix)
///   7 Copy  { block: u16, count: u16 }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
enum FuzzOp {
    Copy { block: u32, count: u32 },
    Literal(Vec<u8>),
    Fill { len: u32, byte: u8 },
    Zeros(u64),
    Prefix,
}

impl FuzzOp {
    fn to_op(&self) -> Option<Op> {
        Some(match *self {
            FuzzOp::Copy { block, count } => Op::Copy { block, count },
            FuzzOp::Literal(ref d) => Op::Literal(d.clone()),
            FuzzOp::Fill { len, byte } => Op::Literal(vec![byte; len as usize]),
            FuzzOp::Zeros(n) => Op::Zeros(n),
            FuzzOp::Prefix => return None,
        })
    }
}

/// A piece of a delta-mode target.
///
/// ```text
/// u8 tag % 3:
///   0 Basis { start: u32, len: u16 }   (clamped to the basis)
///   1 Bytes: u8 len, then that many bytes
///   2 Zeros(u16)
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Basis { start: u32, len: u16 },
    Bytes(Vec<u8>),
    Zeros(u16),
}

fn take_bytes(u: &mut Unstructured, len: usize) -> AResult<Vec<u8>> {
    let n = len.min(u.len());
    Ok(u.bytes(n)?.to_vec())
}

impl<'a> Arbitrary<'a> for FuzzOp {
    fn arbitrary(u: &mut Unstructured<'a>) -> AResult<Self> {
        Ok(match u8::arbitrary(u)? % 8 {
            0 => FuzzOp::Copy {
                block: u32::arbitrary(u)?,
                count: u32::arbitrary(u)?,
            },
            1 => FuzzOp::Copy {
                block: u8::arbitrary(u)? as u32,
                count: u8::arbitrary(u)? as u32,
            },
            2 => {
                let len = u16::arbitrary(u)? as usize;
                FuzzOp::Literal(take_bytes(u, len)?)
            }
            3 => FuzzOp::Fill {
                len: u32::arbitrary(u)? % (MAX_FILL + 1),
                byte: u8::arbitrary(u)?,
            },
            4 => FuzzOp::Zeros(u64::arbitrary(u)?),
            5 => {
                let n = u16::arbitrary(u)? as u64;
                FuzzOp::Zeros(n << (u8::arbitrary(u)? % 16))
            }
            6 => FuzzOp::Prefix,
            _ => FuzzOp::Copy {
                block: u16::arbitrary(u)? as u32,
                count: u16::arbitrary(u)? as u32,
            },
        })
    }
}

impl<'a> Arbitrary<'a> for Piece {
    fn arbitrary(u: &mut Unstructured<'a>) -> AResult<Self> {
        Ok(match u8::arbitrary(u)? % 3 {
            0 => Piece::Basis {
                start: u32::arbitrary(u)?,
                len: u16::arbitrary(u)?,
            },
            1 => {
                let len = u8::arbitrary(u)? as usize;
                Piece::Bytes(take_bytes(u, len)?)
            }
            _ => Piece::Zeros(u16::arbitrary(u)?),
        })
    }
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> AResult<Self> {
        let mode = match u8::arbitrary(u)? % 4 {
            0 => Mode::Dense,
            1 => Mode::Sparse,
            2 => Mode::InPlace,
            _ => Mode::Resume,
        };
        let flags = u8::arbitrary(u)?;
        let large_basis = flags & 16 != 0;
        let large_limit = flags & 32 != 0;
        let basis_len = u32::arbitrary(u)? % if large_basis { MAX_BASIS + 1 } else { SMALL };
        let shrink_to = u32::arbitrary(u)? % (basis_len + 1);
        let prefix_len = u16::arbitrary(u)?;
        let limit = u32::arbitrary(u)? % if large_limit { MAX_LIMIT + 1 } else { SMALL };
        let seed_len = u8::arbitrary(u)? as usize;
        let seed = take_bytes(u, seed_len)?;
        let delta_mode = flags & 2 != 0;
        let body = if delta_mode {
            let mut pieces = Vec::new();
            while !u.is_empty() && pieces.len() < MAX_OPS {
                pieces.push(Piece::arbitrary(u)?);
            }
            Body::Delta(pieces)
        } else {
            let mut ops = Vec::new();
            while !u.is_empty() && ops.len() < MAX_OPS {
                ops.push(FuzzOp::arbitrary(u)?);
            }
            Body::Ops(ops)
        };
        Ok(Input {
            mode,
            with_basis: flags & 1 != 0,
            // The sender's signature describes the basis it was sent; shrinking
            // is only meaningful against fuzzer-chosen ops.
            shrink_to: (flags & 4 != 0 && !delta_mode).then_some(shrink_to),
            repeat: flags & 8 != 0,
            basis_len,
            prefix_len: if mode == Mode::Resume { prefix_len } else { 0 },
            limit,
            max_target: if large_limit {
                MAX_TARGET
            } else {
                SMALL_TARGET
            },
            seed,
            body,
        })
    }
}

/// `len` bytes from `seed`: repeated, or followed by a BLAKE3 output stream
/// keyed by the seed (fast even under the sanitizer; byte loops here are not).
fn expand(seed: &[u8], len: usize, repeat: bool, salt: u8) -> Vec<u8> {
    let mut out = vec![0u8; len];
    if seed.is_empty() {
        return out;
    }
    let head = seed.len().min(len);
    out[..head].copy_from_slice(&seed[..head]);
    if repeat {
        // Doubling copies of the seed.
        let mut filled = head;
        while filled < len {
            let n = filled.min(len - filled);
            out.copy_within(..n, filled);
            filled += n;
        }
    } else {
        let mut h = blake3::Hasher::new();
        h.update(&[salt]).update(seed);
        h.finalize_xof().fill(&mut out[head..]);
    }
    out
}

fn tempfile() -> File {
    tempfile::tempfile_in("/dev/shm")
        .or_else(|_| tempfile::tempfile())
        .expect("temporary file")
}

fn file_with(data: &[u8]) -> File {
    let mut f = tempfile();
    f.write_all(data).expect("write");
    f.seek(SeekFrom::Start(0)).expect("seek");
    f
}

fn read_all(f: &mut File) -> Vec<u8> {
    let mut v = Vec::new();
    f.seek(SeekFrom::Start(0)).expect("seek");
    f.read_to_end(&mut v).expect("read back");
    v
}

/// Where the model's copies read from.
enum Src {
    None,
    /// A basis file of its own.
    Separate(Vec<u8>),
    /// The output file itself (in place, resume).
    Same,
}

/// What an op should come to.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    BlockOutOfRange { block: u32, end: u64, count: u64 },
    NoBasis,
    TooLong { limit: u64 },
    BasisShort,
}

fn expect_of(e: &PatchError) -> Expect {
    match e {
        PatchError::BlockOutOfRange { block, end, count } => Expect::BlockOutOfRange {
            block: *block,
            end: *end,
            count: *count,
        },
        PatchError::NoBasis => Expect::NoBasis,
        PatchError::TooLong { limit } => Expect::TooLong { limit: *limit },
        PatchError::BasisShort(_) => Expect::BasisShort,
        PatchError::Io(e) => panic!("unexpected I/O error from the patcher: {e}"),
    }
}

/// An in-memory model of the output file and what `Patcher` does to it.
struct Model {
    /// The output file's contents (holes as zeros).
    file: Vec<u8>,
    src: Src,
    shape: Option<SigShape>,
    basis_offset: u64,
    offset: u64,
    limit: u64,
    hasher: blake3::Hasher,
}

impl Model {
    fn write(&mut self, data: &[u8]) {
        let start = self.offset as usize;
        let end = start + data.len();
        if self.file.len() < end {
            self.file.resize(end, 0);
        }
        self.file[start..end].copy_from_slice(data);
        self.offset = end as u64;
    }

    fn apply(&mut self, op: &Op) -> Result<(), Expect> {
        let len = match op {
            Op::Literal(d) => d.len() as u64,
            Op::Zeros(n) => *n,
            Op::Copy { block, count } => {
                let shape = self.shape.ok_or(Expect::NoBasis)?;
                let bl = shape.block_len as u64;
                let blocks = shape.file_len.div_ceil(bl);
                let end = *block as u64 + *count as u64;
                if *count == 0 || end > blocks {
                    return Err(Expect::BlockOutOfRange {
                        block: *block,
                        end,
                        count: blocks,
                    });
                }
                (end * bl).min(shape.file_len) - *block as u64 * bl
            }
        };
        match self.offset.checked_add(len) {
            Some(end) if end <= self.limit => {}
            _ => return Err(Expect::TooLong { limit: self.limit }),
        }
        match op {
            Op::Literal(d) => {
                self.hasher.update(d);
                self.write(d);
            }
            Op::Zeros(n) => {
                let z = vec![0u8; *n as usize];
                self.hasher.update(&z);
                self.write(&z);
            }
            Op::Copy { block, .. } => {
                let shape = self.shape.expect("checked above");
                let mut at = self.basis_offset + *block as u64 * shape.block_len as u64;
                let mut left = len;
                while left > 0 {
                    let n = left.min(LITERAL_CHUNK as u64);
                    let src: &[u8] = match &self.src {
                        Src::Separate(b) => b,
                        Src::Same => &self.file,
                        Src::None => unreachable!("a shape without a basis"),
                    };
                    if at + n > src.len() as u64 {
                        return Err(Expect::BasisShort);
                    }
                    let chunk = src[at as usize..(at + n) as usize].to_vec();
                    self.hasher.update(&chunk);
                    self.write(&chunk);
                    at += n;
                    left -= n;
                }
            }
        }
        Ok(())
    }
}

struct Setup {
    patcher: Patcher,
    model: Model,
    /// The verified prefix (Resume), hashed before any op.
    prefix: Vec<u8>,
    basis: Vec<u8>,
    index: Option<Index>,
}

fn setup(input: &Input, limit: u64) -> Setup {
    let basis = expand(&input.seed, input.basis_len as usize, input.repeat, 1);
    let prefix = expand(&input.seed, input.prefix_len as usize, false, 2);
    let shape = SigShape::for_len(basis.len() as u64);
    let from = prefix.len() as u64;
    // The file holding the basis (for InPlace and Resume, also the output).
    let (holder, out_file) = match input.mode {
        Mode::Dense | Mode::Sparse => (
            input.with_basis.then(|| file_with(&basis)),
            Some(tempfile()),
        ),
        Mode::InPlace | Mode::Resume => (Some(file_with(&[&prefix[..], &basis].concat())), None),
    };
    let same = out_file.is_none();
    let mut index = None;
    let mut model_src = Src::None;
    let mut basis_arg = None;
    let mut file_now = if same {
        [&prefix[..], &basis].concat()
    } else {
        Vec::new()
    };
    if let (true, Some(f)) = (input.with_basis, &holder) {
        let sigs = sign_file_from(f, from, shape, 1).expect("sign the basis");
        assert_eq!(
            sigs.len() as u64,
            shape.block_count(),
            "one signature per block"
        );
        index = Some(Index::new(shape, sigs));
        let mut visible = basis.clone();
        if let Some(to) = input.shrink_to {
            // The basis changes after it was signed.
            f.set_len(from + to as u64).expect("shrink");
            visible.truncate(to as usize);
            file_now.truncate((from + to as u64) as usize);
        }
        model_src = if same {
            Src::Same
        } else {
            Src::Separate(visible)
        };
        basis_arg = Some((f.try_clone().expect("clone"), shape));
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update(&prefix);
    let patcher = match input.mode {
        Mode::Dense | Mode::Sparse => Patcher::new(
            basis_arg,
            OutFile::new(
                out_file.expect("new file"),
                input.mode == Mode::Sparse,
                false,
            ),
            limit,
        ),
        Mode::InPlace => Patcher::new(
            basis_arg,
            OutFile::new(holder.expect("the basis file"), true, true),
            limit,
        ),
        Mode::Resume => Patcher::resume(
            basis_arg,
            from,
            OutFile::resume(holder.expect("the partial file"), from),
            limit,
            hasher.clone(),
        ),
    };
    let model = Model {
        file: file_now,
        src: model_src,
        shape: input.with_basis.then_some(shape),
        basis_offset: from,
        offset: from,
        limit,
        hasher,
    };
    Setup {
        patcher,
        model,
        prefix,
        basis,
        index,
    }
}

/// Applies `ops` to the patcher and the model until the first error, then
/// finishes the file and compares it with the model. Returns whether every op
/// was accepted, and the file's hash.
fn apply_and_check(s: Setup, ops: &[FuzzOp]) -> (bool, [u8; 32], Vec<u8>) {
    let Setup {
        mut patcher,
        mut model,
        ..
    } = s;
    let limit = model.limit;
    let mut all_ok = true;
    for op in ops {
        let Some(real) = op.to_op() else {
            let (len, hasher) = patcher.prefix().expect("prefix");
            assert_eq!(len, model.offset, "prefix() length");
            assert_eq!(hasher.finalize(), model.hasher.finalize(), "prefix() hash");
            continue;
        };
        let want = model.apply(&real);
        let got = patcher.apply(&real).map_err(|e| expect_of(&e));
        assert_eq!(got, want, "result of {op:?}");
        assert_eq!(patcher.written(), model.offset, "written() after {op:?}");
        assert!(
            patcher.written() <= limit,
            "written {} > limit {limit}",
            patcher.written()
        );
        if got.is_err() {
            all_ok = false;
            break;
        }
    }
    let (mut file, hash) = patcher.finish().expect("finish");
    model.file.resize(model.offset as usize, 0);
    let len = file.metadata().expect("metadata").len();
    assert!(len <= limit, "finished file of {len} bytes > limit {limit}");
    assert_eq!(len, model.offset, "finished length");
    let content = read_all(&mut file);
    assert!(content == model.file, "file contents differ from the model");
    assert_eq!(
        hash,
        *model.hasher.finalize().as_bytes(),
        "hash differs from the model"
    );
    assert_eq!(
        hash,
        *blake3::hash(&content).as_bytes(),
        "hash is not the file's"
    );
    (all_ok, hash, content)
}

/// Returns whether every op was accepted.
fn run(input: Input) -> bool {
    match &input.body {
        Body::Ops(ops) => {
            let limit = input.prefix_len as u64 + input.limit as u64;
            let s = setup(&input, limit);
            apply_and_check(s, ops).0
        }
        Body::Delta(pieces) => {
            // The target the sender reads: the same basis for its ranges.
            let basis = expand(&input.seed, input.basis_len as usize, input.repeat, 1);
            let mut target = Vec::new();
            for p in pieces {
                if target.len() >= input.max_target {
                    break;
                }
                match p {
                    Piece::Basis { start, len } if !basis.is_empty() => {
                        let start = *start as usize % basis.len();
                        let end = (start + *len as usize).min(basis.len());
                        target.extend_from_slice(&basis[start..end]);
                    }
                    Piece::Basis { .. } => {}
                    Piece::Bytes(b) => target.extend_from_slice(b),
                    Piece::Zeros(n) => target.resize(target.len() + *n as usize, 0),
                }
            }
            target.truncate(input.max_target);
            let limit = input.prefix_len as u64 + target.len() as u64;
            let s = setup(&input, limit);
            assert_eq!(s.basis, basis);
            let mut prefix_hasher = blake3::Hasher::new();
            prefix_hasher.update(&s.prefix);
            let opts = DeltaOptions {
                // As serve.rs: in place, or resuming a partial file.
                inplace: matches!(input.mode, Mode::InPlace | Mode::Resume),
                len_hint: Some(target.len() as u64),
                positional: input.mode == Mode::Resume,
            };
            let mut ops = Vec::new();
            let summary = delta_with::<_, std::io::Error>(
                &target[..],
                s.index.as_ref(),
                opts,
                prefix_hasher,
                &mut |op| {
                    ops.push(match op {
                        Op::Copy { block, count } => FuzzOp::Copy { block, count },
                        Op::Literal(d) => FuzzOp::Literal(d),
                        Op::Zeros(n) => FuzzOp::Zeros(n),
                    });
                    Ok(())
                },
            )
            .expect("delta of an in-memory source");
            assert_eq!(
                summary.len,
                target.len() as u64,
                "delta read the whole target"
            );
            let want: Vec<u8> = [&s.prefix[..], &target].concat();
            let (all_ok, hash, content) = apply_and_check(s, &ops);
            assert!(all_ok, "the patcher refused an op of mover's own delta");
            assert!(content == want, "delta + patch did not rebuild the target");
            assert_eq!(hash, summary.hash, "receiver and sender hashes differ");
            true
        }
    }
}

#[path = "delta_seeds.rs"]
mod seeds;
