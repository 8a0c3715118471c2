//! `Checkpoint::decode` (the receiver reads `DST/.volmig/checkpoint`, which
//! anyone with write access to the destination can change) on untrusted bytes.
//!
//! Input layout:
//!
//! ```text
//! byte 0, bit 0 clear: the rest is a whole checkpoint file, decoded as is.
//! byte 0, bit 0 set:   the rest is a checkpoint *body* (postcard); the target
//!                      wraps it in a correct header and BLAKE3, so the fuzzer
//!                      reaches postcard decoding and validation instead of
//!                      stopping at the checksum it cannot forge.
//! ```
//!
//! On `Ok`: each partial's stored hash state (`Partial::head`, when it fits)
//! joins a hasher of the rest of its prefix and finalizes without a panic;
//! `describe()` is called and rendered as JSON text, and the
//! checkpoint must round-trip: `decode(encode(cp)) == cp`, and encoding that
//! again gives the same bytes. (`validate` is private: `decode` runs it, and
//! the round trip runs it again on the re-encoded checkpoint.)

#![no_main]

use libfuzzer_sys::fuzz_target;
use mover::checkpoint::{Checkpoint, FORMAT};
use mover::treehash::TreeHasher;

#[path = "common.rs"]
mod common;

const MAGIC: &[u8; 8] = b"VOLMIGCP";

fuzz_target!(init: common::write_seeds_if_asked(seeds::all), |data: &[u8]| {
    run(data);
});

fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let wrapped;
    let bytes = if mode & 1 == 0 {
        rest
    } else {
        wrapped = wrap(rest);
        &wrapped[..]
    };
    match Checkpoint::decode(bytes) {
        Ok(cp) => check(cp),
        Err(e) => {
            let _ = (e.to_string(), e.is_retryable());
        }
    }
}

/// A checkpoint file around `body`, laid out as `Checkpoint::encode` does.
fn wrap(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(14 + body.len() + 32);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(blake3::hash(body).as_bytes());
    out
}

fn check(cp: Checkpoint) {
    for p in &cp.partials {
        if let Some(head) = p.head() {
            assert!(head.len() < p.verified_len, "a hash state past its prefix");
            let mut h = TreeHasher::starting_at(head.len());
            h.update(b"the rest of the prefix");
            h.join(head).expect("a checked hash state joins");
            let _ = h.finalize();
        }
    }
    let described = cp.describe();
    let _ = described.to_string();
    assert_eq!(described["operation_id"], cp.operation_id.as_str());
    let encoded = cp.encode();
    let again = Checkpoint::decode(&encoded)
        .unwrap_or_else(|e| panic!("a decoded checkpoint does not decode after encode: {e}"));
    assert_eq!(again, cp, "decode(encode(cp)) != cp");
    assert_eq!(
        again.encode(),
        encoded,
        "encoding not stable across a round trip"
    );
}

mod seeds {
    use super::*;
    use mover::checkpoint::{Fingerprint, Partial};
    use mover::meta::Mtime;
    use mover::path::RelPath;

    fn p(s: &str) -> RelPath {
        RelPath::new(s.as_bytes().to_vec()).expect("valid path")
    }

    fn checkpoints() -> Vec<(&'static str, Checkpoint)> {
        let empty = Checkpoint::new("op-1".into(), 1);
        let mut full = Checkpoint::new("migrate.pvc-7_a".into(), 3);
        full.files_done = 10;
        full.bytes_done = 1 << 20;
        full.files_total = Some(100);
        full.bytes_total = Some(1 << 30);
        full.source = Some(Fingerprint {
            entries: 120,
            files: 100,
            bytes: 1 << 30,
            digest: [0xab; 32],
        });
        full.elapsed_ms_total = 123_456;
        full.updated_unix_ms = 1_763_700_000_000;
        for (path, temp) in [
            ("a/big", "a/.volmig-big.1-0.tmp"),
            ("top", ".volmig-top.3-7.tmp"),
        ] {
            full.partials.push(Partial {
                path: p(path),
                temp: p(temp),
                size: 1 << 30,
                mtime: Mtime { sec: 5, nsec: 7 },
                verified_len: 1 << 20,
                prefix_hash: [9; 32],
                head: vec![(512 << 10, [1; 32]), (256 << 10, [2; 32])],
                temp_ino: 1234,
                recorded_at: Mtime {
                    sec: 1_763_700_000,
                    nsec: 5,
                },
            });
        }
        let mut done = full.clone();
        done.complete = true;
        done.partials.clear();
        vec![("empty", empty), ("full", full), ("complete", done)]
    }

    pub fn all() -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        for (name, cp) in checkpoints() {
            let file = cp.encode();
            let body = file[14..file.len() - 32].to_vec();
            assert_eq!(
                wrap(&body),
                file,
                "wrap() lays a checkpoint out as encode() does"
            );
            assert_eq!(Checkpoint::decode(&file).expect("a seed decodes"), cp);
            out.push((format!("file-{name}"), [&[0u8][..], &file].concat()));
            out.push((format!("body-{name}"), [&[1u8][..], &body].concat()));
        }
        out.push(("garbage".into(), b"\0not a checkpoint".to_vec()));
        out
    }
}
