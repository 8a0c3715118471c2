//! Property tests of the delta algorithm: whatever the basis and the new
//! contents, the ops rebuild the new contents exactly, and unchanged data is
//! reused rather than sent.

use std::io::Write;

use mover::delta::{delta, DeltaOptions, Op};
use mover::patch::{OutFile, Patcher};
use mover::signature::{sign_file, Index, SigShape};
use proptest::prelude::*;

/// Runs delta + patch through real files and returns (rebuilt bytes, literal, matched).
fn round_trip(
    basis: &[u8],
    new: &[u8],
    block_len: Option<u32>,
    inplace: bool,
    sparse: bool,
) -> (Vec<u8>, u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let basis_path = dir.path().join("basis");
    std::fs::write(&basis_path, basis).unwrap();
    let mut shape = SigShape::for_len(basis.len() as u64);
    if let Some(bl) = block_len {
        shape.block_len = bl;
    }
    let sigs = sign_file(&std::fs::File::open(&basis_path).unwrap(), shape, 1).unwrap();
    let index = Index::new(shape, sigs);
    let mut ops = Vec::new();
    let summary = delta::<_, std::io::Error>(
        new,
        Some(&index),
        DeltaOptions {
            inplace,
            len_hint: small_hint(new.len()),
            positional: false,
        },
        &mut |op| {
            ops.push(op);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(summary.hash, *blake3::hash(new).as_bytes());

    let out_path = if inplace {
        basis_path.clone()
    } else {
        dir.path().join("out")
    };
    let out = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(&out_path)
        .unwrap();
    let basis_file = std::fs::File::open(&basis_path).unwrap();
    let mut patcher = Patcher::new(
        Some((basis_file, shape)),
        OutFile::new(out, sparse, inplace),
        new.len() as u64,
    );
    for op in &ops {
        patcher.apply(op).unwrap();
    }
    let (mut f, hash) = patcher.finish().unwrap();
    f.flush().unwrap();
    assert_eq!(hash, summary.hash);
    (
        std::fs::read(&out_path).unwrap(),
        summary.literal,
        summary.matched,
    )
}

/// Exact hints for some lengths, none for others: results must not depend on it.
fn small_hint(len: usize) -> Option<u64> {
    len.is_multiple_of(2).then_some(len as u64)
}

/// A basis and an edited copy of it.
fn edited() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    (
        proptest::collection::vec(any::<u8>(), 0..20_000),
        proptest::collection::vec(
            (
                any::<u16>(),
                0u8..4,
                proptest::collection::vec(any::<u8>(), 0..300),
            ),
            0..6,
        ),
    )
        .prop_map(|(basis, edits)| {
            let mut new = basis.clone();
            for (at, kind, bytes) in edits {
                let at = if new.is_empty() {
                    0
                } else {
                    at as usize % new.len()
                };
                let end = (at + bytes.len()).min(new.len());
                match kind {
                    0 => drop(new.splice(at..at, bytes)),  // insert
                    1 => drop(new.drain(at..end)),         // delete
                    2 => drop(new.splice(at..end, bytes)), // overwrite
                    _ => drop(new.splice(at..at, vec![0u8; bytes.len() * 30])), // zero run
                }
            }
            (basis, new)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn rebuilds_exactly((basis, new) in edited(), small_blocks in any::<bool>(), sparse in any::<bool>()) {
        let bl = small_blocks.then_some(64);
        let (got, literal, matched) = round_trip(&basis, &new, bl, false, sparse);
        prop_assert_eq!(&got, &new);
        prop_assert!(literal + matched <= new.len() as u64);
    }

    #[test]
    fn rebuilds_in_place((basis, new) in edited()) {
        let (got, _, _) = round_trip(&basis, &new, Some(64), true, false);
        prop_assert_eq!(got, new);
    }
}

#[test]
fn unchanged_data_is_matched_not_sent() {
    let basis: Vec<u8> = (0..1_000_000u32)
        .flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes())
        .collect();
    let mut new = basis.clone();
    new[500_000..500_010].copy_from_slice(b"0123456789");
    new.splice(100..100, *b"inserted");
    let (got, literal, matched) = round_trip(&basis, &new, None, false, false);
    assert_eq!(got, new);
    let block = SigShape::for_len(basis.len() as u64).block_len as u64;
    assert!(
        literal <= 3 * block,
        "literal {literal} with blocks of {block}"
    );
    assert_eq!(literal + matched, new.len() as u64);
}

#[test]
fn zero_runs_become_holes() {
    let mut new = vec![0u8; 4 << 20];
    new[0] = 1;
    new[(4 << 20) - 1] = 1;
    let (got, _, _) = round_trip(b"", &new, None, false, true);
    assert_eq!(got, new);
}

#[test]
fn whole_file_without_index_is_all_literal() {
    let data = vec![7u8; 600_000];
    let mut ops = Vec::new();
    let s = delta::<_, std::io::Error>(&data[..], None, DeltaOptions::default(), &mut |op| {
        ops.push(op);
        Ok(())
    })
    .unwrap();
    assert_eq!(s.literal, 600_000);
    assert!(ops
        .iter()
        .all(|o| matches!(o, Op::Literal(d) if d.len() <= mover::delta::LITERAL_CHUNK)));
}

/// A partial file an earlier attempt left of `source`: its first `verified`
/// bytes are right, and so (where not corrupted) is what was written after
/// them, up to `written` bytes, maybe with garbage beyond.
fn partial() -> impl Strategy<Value = (Vec<u8>, usize, Vec<u8>)> {
    (
        proptest::collection::vec(any::<u8>(), 0..60_000),
        0.0f64..=1.0,
        0.0f64..=1.0,
        proptest::collection::vec((any::<u16>(), any::<u8>()), 0..5),
        proptest::collection::vec(any::<u8>(), 0..3000),
    )
        .prop_map(|(source, v, w, flips, garbage)| {
            let verified = (source.len() as f64 * v) as usize;
            let written = verified + ((source.len() - verified) as f64 * w) as usize;
            let mut temp = source[..written].to_vec();
            for (at, x) in flips {
                if written > verified {
                    let at = verified + at as usize % (written - verified);
                    temp[at] ^= x.max(1);
                }
            }
            temp.extend(garbage);
            (source, verified, temp)
        })
}

/// Resumes `temp` (whose first `verified` bytes are `source`'s) into
/// `source` as the sender and receiver do: the basis is the signature of
/// the unverified rest, checked block by block at the same offsets; the
/// sender hashes the prefix on other threads while the rest is sent, the
/// receiver hashes its prefix with threads first. Returns the rebuilt
/// file and the bytes matched.
fn resume_round_trip(
    source: &[u8],
    verified: usize,
    temp: &[u8],
    block_len: Option<u32>,
) -> (Vec<u8>, u64) {
    use mover::treehash::{self, TreeHasher};
    let dir = tempfile::tempdir().unwrap();
    let (src_path, temp_path) = (dir.path().join("src"), dir.path().join("temp"));
    std::fs::write(&src_path, source).unwrap();
    std::fs::write(&temp_path, temp).unwrap();
    let temp_file = std::fs::File::open(&temp_path).unwrap();
    let rest = temp.len().min(source.len()) - verified;
    let mut shape = SigShape::for_len(rest as u64);
    if let Some(bl) = block_len {
        shape.block_len = bl;
    }
    let index = (rest > 0).then(|| {
        Index::new(
            shape,
            mover::signature::sign_file_from(&temp_file, verified as u64, shape, 2).unwrap(),
        )
    });

    // Sender: the head of the source is hashed by another thread meanwhile.
    let src = std::fs::File::open(&src_path).unwrap();
    let head_len = treehash::head_len(verified as u64);
    let mut hasher = TreeHasher::starting_at(head_len);
    hasher.update(&source[head_len as usize..verified]);
    let mut ops = Vec::new();
    let opts = DeltaOptions {
        inplace: true,
        len_hint: small_hint(source.len() - verified),
        positional: true,
    };
    let (head, counts) = std::thread::scope(|s| {
        let head = s.spawn(|| treehash::hash_head(&src, head_len, 2, &|| false).unwrap());
        let counts = mover::delta::delta_hashing::<_, std::io::Error>(
            &source[verified..],
            index.as_ref(),
            opts,
            &mut hasher,
            &mut |op| {
                ops.push(op);
                Ok(())
            },
        )
        .unwrap();
        (head.join().unwrap(), counts)
    });
    if head_len > 0 {
        hasher.join(head).unwrap();
    }
    let sent_hash = *hasher.finalize().as_bytes();
    assert_eq!(sent_hash, *blake3::hash(source).as_bytes());
    assert_eq!(counts.len, (source.len() - verified) as u64);

    // Receiver: its prefix is hashed with threads (and checked), then the rest applied.
    let prefix = treehash::hash_file_prefix(&temp_file, verified as u64, 2).unwrap();
    assert_eq!(prefix.finalize(), blake3::hash(&source[..verified]));
    let out = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&temp_path)
        .unwrap();
    let basis = index.as_ref().map(|_| (out.try_clone().unwrap(), shape));
    let mut patcher = Patcher::resume(
        basis,
        verified as u64,
        OutFile::resume(out, verified as u64),
        source.len() as u64,
        prefix,
    );
    for op in &ops {
        patcher.apply(op).unwrap();
    }
    let (mut f, hash) = patcher.finish().unwrap();
    f.flush().unwrap();
    assert_eq!(hash, sent_hash);
    (std::fs::read(&temp_path).unwrap(), counts.matched)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_resumed_tail_rebuilds_exactly((source, verified, temp) in partial(), small_blocks in any::<bool>()) {
        let bl = small_blocks.then_some(64);
        let (got, matched) = resume_round_trip(&source, verified, &temp, bl);
        prop_assert_eq!(&got, &source);
        // Every block of the rest that is still right is reused, not sent.
        let rest = temp.len().min(source.len()) - verified;
        let mut shape = SigShape::for_len(rest as u64);
        if let Some(bl) = bl {
            shape.block_len = bl;
        }
        let intact: u64 = (0..shape.block_count())
            .map(|b| {
                let at = verified + (b * shape.block_len as u64) as usize;
                let len = shape.len_of(b);
                if source.get(at..at + len) == temp.get(at..at + len) { len as u64 } else { 0 }
            })
            .sum();
        prop_assert_eq!(matched, intact);
    }
}

#[test]
fn a_resumed_tail_is_checked_in_place_without_search() {
    // The rest holds the right data one byte off: a search would find it,
    // the positional check must not (it would copy blocks onto other
    // offsets of the file being rewritten).
    let source = random(300_000, 11);
    let verified = 100_000;
    let mut temp = source[..verified].to_vec();
    temp.push(0);
    temp.extend_from_slice(&source[verified..250_000]);
    let (got, matched) = resume_round_trip(&source, verified, &temp, Some(1024));
    assert_eq!(got, source);
    assert_eq!(matched, 0);
    // Blocks in place are reused.
    let temp = source[..250_000].to_vec();
    let (got, matched) = resume_round_trip(&source, verified, &temp, Some(1024));
    assert_eq!(got, source);
    assert_eq!(matched, 150_000);
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
