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
