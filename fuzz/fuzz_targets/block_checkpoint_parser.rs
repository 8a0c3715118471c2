//! `block::checkpoint::BlockCheckpoint::decode` (a block receiver reads its
//! state directory's `checkpoint`, which anyone with write access there can
//! change) on untrusted bytes.
//!
//! Input layout, as `checkpoint_parser`'s:
//!
//! ```text
//! byte 0, bit 0 clear: the rest is a whole checkpoint file, decoded as is.
//! byte 0, bit 0 set:   the rest is a checkpoint *body* (postcard); the target
//!                      wraps it in a correct header and BLAKE3, so the fuzzer
//!                      reaches postcard decoding and validation instead of
//!                      stopping at the checksum it cannot forge.
//! ```
//!
//! On `Ok`, what `validate` promises holds (the shape is the source size's,
//! the prefix is whole blocks within the source, the source fits the
//! destination, the hash state covers exactly the prefix, and `head()` does
//! not panic); `describe()` renders; and the checkpoint round-trips:
//! `decode(encode(cp)) == cp`, and encoding that again gives the same bytes.
//! When the input was a whole file in canonical postcard (the only
//! encoding mover writes), `encode(cp)` is that file byte for byte; postcard
//! also accepts overlong varints, so only canonical inputs are compared.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mover::block::checkpoint::BlockCheckpoint;
use mover::block::BlockShape;

#[path = "common.rs"]
mod common;

const MAGIC: &[u8; 8] = b"VOLMIGBK";
const FORMAT: u16 = 1;
const HEADER_LEN: usize = 14;

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
    match BlockCheckpoint::decode(bytes) {
        Ok(cp) => check(&cp, bytes),
        Err(e) => {
            let _ = (e.to_string(), e.is_retryable());
        }
    }
}

/// A checkpoint file around `body`, laid out as `BlockCheckpoint::encode` does.
fn wrap(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len() + 32);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(blake3::hash(body).as_bytes());
    out
}

fn check(cp: &BlockCheckpoint, input: &[u8]) {
    let shape = BlockShape::for_size(cp.source_size);
    assert_eq!(
        cp.block_len, shape.block_len,
        "a block length not the shape's"
    );
    assert!(cp.verified.is_multiple_of(shape.block_len()));
    assert!(cp.verified <= cp.source_size && cp.source_size <= cp.destination_size);
    assert!(cp.attempt > 0);
    assert_eq!(
        cp.head().len(),
        cp.verified,
        "a hash state not the prefix's"
    );
    let described = cp.describe();
    let _ = described.to_string();
    assert_eq!(described["operation_id"], cp.operation_id.as_str());
    assert_eq!(described["bytes_done"], cp.verified);

    let encoded = cp.encode();
    let again = BlockCheckpoint::decode(&encoded)
        .unwrap_or_else(|e| panic!("a decoded checkpoint does not decode after encode: {e}"));
    assert_eq!(&again, cp, "decode(encode(cp)) != cp");
    assert_eq!(
        again.encode(),
        encoded,
        "encoding not stable across a round trip"
    );
    if encoded.len() == input.len() {
        // Same length: no overlong varint, so the same bytes.
        assert_eq!(
            encoded, input,
            "a canonical checkpoint re-encodes differently"
        );
    }
}

mod seeds {
    use super::*;
    use mover::meta::Mtime;
    use mover::treehash::{block_cv, BlockRoot};

    fn checkpoints() -> Vec<(&'static str, BlockCheckpoint)> {
        let b = 16u64 << 10;
        let data = vec![5u8; 3 * b as usize];
        let mut root = BlockRoot::new();
        let mut probe = [0; 32];
        for i in 0..3 {
            probe = block_cv(i * b, &data[(i * b) as usize..((i + 1) * b) as usize]);
            root.push(b, probe);
        }
        let three = BlockCheckpoint {
            operation_id: "op-1".into(),
            attempt: 2,
            source_size: 1 << 20,
            block_len: b as u32,
            source_mtime: Some(Mtime {
                sec: 1_763_700_000,
                nsec: 5,
            }),
            destination_size: 2 << 20,
            verified: 3 * b,
            head: root.head().pieces(),
            probe,
        };
        let empty = BlockCheckpoint {
            operation_id: "migrate.pvc-7_a".into(),
            attempt: 1,
            source_size: 10 << 30,
            block_len: BlockShape::for_size(10 << 30).block_len,
            source_mtime: None,
            destination_size: 10 << 30,
            verified: 0,
            head: Vec::new(),
            probe: [0; 32],
        };
        vec![("three-blocks", three), ("nothing-verified", empty)]
    }

    pub fn all() -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        for (name, cp) in checkpoints() {
            let file = cp.encode();
            let body = file[HEADER_LEN..file.len() - 32].to_vec();
            assert_eq!(
                wrap(&body),
                file,
                "wrap() lays a checkpoint out as encode() does"
            );
            assert_eq!(BlockCheckpoint::decode(&file).expect("a seed decodes"), cp);
            out.push((format!("file-{name}"), [&[0u8][..], &file].concat()));
            out.push((format!("body-{name}"), [&[1u8][..], &body].concat()));
        }
        out.push(("garbage".into(), b"\0VOLMIGBK not a checkpoint".to_vec()));
        out
    }
}
