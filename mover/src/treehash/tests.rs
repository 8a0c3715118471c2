//! Every result compared with `blake3::hash` of the same bytes.

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

#[test]
fn a_hasher_goes_on_from_its_stored_head() {
    let d = data(3 * SEGMENT as usize + 4321, 11);
    let f = file_of(&d);
    for len in [
        0usize,
        1,
        1024,
        5000,
        SEGMENT as usize,
        SEGMENT as usize + 1,
        2 * SEGMENT as usize + 77,
        d.len(),
    ] {
        let mut h = TreeHasher::new();
        for part in d[..len].chunks(100_003) {
            h.update(part);
        }
        let head = h.head();
        assert!(head.len() < len as u64 || len == 0, "{len}");
        assert!(len as u64 - head.len() <= SEGMENT, "{len}: {}", head.len());
        assert!(head.pieces.len() <= MAX_HEAD_PIECES);
        // Stored, reloaded, and continued from the file: the same hash.
        let stored = Head::from_pieces(&head.pieces()).unwrap();
        assert_eq!(stored.len(), head.len());
        let mut again = TreeHasher::continued(&f, stored, len as u64).unwrap();
        assert_eq!(again.finalize(), blake3::hash(&d[..len]), "{len}");
        again.update(&d[len..]);
        assert_eq!(again.finalize(), blake3::hash(&d), "{len}");
        // ...and so does a hasher that was itself continued.
        assert!(!again.head().is_empty());
    }
    // A head from the parallel prefix check is stored the same way.
    let h = hash_file_prefix(&f, d.len() as u64 - 3, 2).unwrap();
    let head = Head::from_pieces(&h.head().pieces()).unwrap();
    let c = TreeHasher::continued(&f, head, d.len() as u64).unwrap();
    assert_eq!(c.finalize(), blake3::hash(&d));
}

#[test]
fn heads_that_are_not_subtrees_are_refused() {
    let cv = [1u8; 32];
    for bad in [
        vec![(1000, cv)],
        vec![(3 * CHUNK, cv)],
        vec![(CHUNK, cv), (2 * CHUNK, cv)],
        vec![(0, cv)],
        vec![(1 << 63, cv), (1 << 63, cv)],
        vec![(CHUNK, cv); MAX_HEAD_PIECES + 1],
    ] {
        assert!(
            matches!(Head::from_pieces(&bad), Err(TreeError::BadHead(_))),
            "{bad:?}"
        );
    }
    let ok = Head::from_pieces(&[(4 * CHUNK, cv), (CHUNK, cv), (CHUNK, cv)]).unwrap();
    assert_eq!(ok.len(), 6 * CHUNK);
    // Too long for the file it should continue.
    let f = file_of(&data(4096, 1));
    assert!(TreeHasher::continued(&f, ok, 4096).is_err());
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

    /// Any head that passes validation, whatever its chaining values,
    /// joins a hasher of at least one more byte and finalizes (to some
    /// hash) without a panic.
    #[test]
    fn any_valid_head_joins_without_panic(
        shifts in proptest::collection::vec(0u32..12, 0..20),
        cv in any::<[u8; 32]>(),
        more in 1usize..5000,
    ) {
        let mut pieces = Vec::new();
        let mut at = 0u64;
        for s in shifts {
            // The largest aligned power of two at `at`, at most 2^s chunks.
            let mut len = CHUNK << s;
            while !at.is_multiple_of(len) {
                len /= 2;
            }
            pieces.push((len, cv));
            at += len;
        }
        let head = Head::from_pieces(&pieces).unwrap();
        let mut h = TreeHasher::starting_at(head.len());
        h.update(&data(more, 1));
        if !head.is_empty() {
            h.join(head).unwrap();
        }
        let _ = h.finalize();
        let _ = h.head();
    }
}
