//! `FrameCodec` (the wire decoder of every session) on untrusted bytes.
//!
//! Input layout (all of it is fuzzer-chosen):
//!
//! ```text
//! byte 0   bits 0-2: k, how many split points follow
//!          bit 3:    end the stream with decode_eof (as FramedRead does at EOF)
//!          bit 4:    "framed" mode: the body is records [len: u16 LE][payload],
//!                    each sent with a correct u32 BE length prefix, so the
//!                    fuzzer spends its effort on postcard payloads
//! k x u16 LE         lengths of the first k chunks the stream is fed in
//! rest               the body (raw stream, or records in framed mode)
//! ```
//!
//! The stream is fed chunk by chunk into one `BytesMut`, decoding after each
//! chunk until the codec wants more (`Ok(None)`) or fails; an error ends the
//! stream, as it ends a session. Checked for every decoded frame:
//!
//! - the wire counter equals the bytes consumed so far;
//! - `name`, `file_id`, `check_limits` and (for `Hello`) `check` do not panic;
//! - a `Request`'s prefix state that passes `prefix_head` (the sender's check)
//!   joins a hasher of the rest and finalizes without a panic;
//! - the frame re-encodes (the codec never refuses to send what it accepted),
//!   the encoding decodes to a frame with the same `Debug` text (`Frame` has no
//!   `PartialEq`), and encoding that one again gives the same bytes.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use mover::protocol::{check_limits, Frame, FrameCodec, WireCounter, MAX_FRAME_LEN};
use mover::treehash::TreeHasher;
use tokio_util::codec::{Decoder, Encoder};

#[path = "common.rs"]
mod common;

/// Frames above this size are compared by encoding only (their `Debug` text is slow).
const DEBUG_COMPARE_MAX: usize = 64 * 1024;

fuzz_target!(init: common::write_seeds_if_asked(seeds::all), |data: &[u8]| {
    run(data);
});

fn run(data: &[u8]) {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let k = (flags & 7) as usize;
    let eof = flags & 8 != 0;
    let framed = flags & 16 != 0;
    let mut splits = Vec::with_capacity(k);
    for _ in 0..k {
        if rest.len() < 2 {
            break;
        }
        splits.push(u16::from_le_bytes([rest[0], rest[1]]) as usize);
        rest = &rest[2..];
    }
    let stream = if framed { reframe(rest) } else { rest.to_vec() };

    let counter = WireCounter::default();
    let mut codec = FrameCodec::new(counter.clone());
    let mut buf = BytesMut::new();
    let mut fed = 0usize;
    // Bytes of the frames decoded before the current one.
    let mut counted = 0u64;
    let mut input = &stream[..];
    let mut chunks = splits.into_iter();
    loop {
        let n = chunks.next().unwrap_or(input.len()).min(input.len());
        buf.extend_from_slice(&input[..n]);
        fed += n;
        input = &input[n..];
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    let consumed = (fed - buf.len()) as u64;
                    assert_eq!(counter.get(), consumed, "wire counter");
                    check_frame(frame, (consumed - counted - 4) as usize);
                    counted = consumed;
                }
                Ok(None) => break,
                Err(e) => {
                    let _ = (e.to_string(), e.is_retryable());
                    return;
                }
            }
        }
        if input.is_empty() {
            break;
        }
    }
    if eof {
        loop {
            match codec.decode_eof(&mut buf) {
                Ok(Some(frame)) => {
                    let consumed = (fed - buf.len()) as u64;
                    assert_eq!(counter.get(), consumed, "wire counter");
                    check_frame(frame, (consumed - counted - 4) as usize);
                    counted = consumed;
                }
                Ok(None) => {
                    assert!(buf.is_empty(), "decode_eof ended with bytes left");
                    break;
                }
                Err(e) => {
                    let _ = (e.to_string(), e.is_retryable());
                    break;
                }
            }
        }
    }
}

/// Framed mode: `[len: u16 LE][payload]` records to a length-prefixed stream.
fn reframe(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 16);
    while body.len() >= 2 {
        let len = (u16::from_le_bytes([body[0], body[1]]) as usize).min(body.len() - 2);
        out.extend_from_slice(&(len as u32).to_be_bytes());
        out.extend_from_slice(&body[2..2 + len]);
        body = &body[2 + len..];
    }
    out
}

/// `payload_len`: the size the frame had on the wire (length prefix excluded).
fn check_frame(frame: Frame, payload_len: usize) {
    let name = frame.name();
    let _ = frame.file_id();
    // The receiver's per-frame limits (session/receiver/mod.rs) on what decoded.
    if let Err(e) = check_limits(&frame) {
        let _ = e.to_string();
    }
    if let Frame::Hello(h) = &frame {
        let _ = h.check();
    }
    if let Frame::Request(req) = &frame {
        if let Ok(Some(head)) = req.prefix_head() {
            // What the sender does with it: a hasher of the rest, joined.
            assert!(
                head.len() < req.resume_from,
                "a prefix state past the prefix"
            );
            let mut h = TreeHasher::starting_at(head.len());
            h.update(b"the rest");
            h.join(head).expect("a checked prefix state joins");
            let _ = h.finalize();
        }
    }
    let text = (payload_len <= DEBUG_COMPARE_MAX).then(|| format!("{frame:?}"));
    let mut codec = FrameCodec::new(WireCounter::default());
    let mut first = BytesMut::new();
    codec
        .encode(frame, &mut first)
        .unwrap_or_else(|e| panic!("a decoded {name} frame does not re-encode: {e}"));
    assert!(
        first.len() - 4 <= payload_len.min(MAX_FRAME_LEN),
        "re-encoded {name} frame is longer than the one accepted ({} > {payload_len})",
        first.len() - 4
    );
    let mut buf = first.clone();
    let again = codec
        .decode(&mut buf)
        .expect("a re-encoded frame decodes")
        .expect("a re-encoded frame is complete");
    assert!(buf.is_empty(), "re-encoded frame left bytes over");
    if let Some(text) = text {
        assert_eq!(format!("{again:?}"), text, "decode(encode(frame)) differs");
    }
    let mut second = BytesMut::new();
    codec.encode(again, &mut second).expect("re-encodes twice");
    assert_eq!(first, second, "encoding is not stable across a round trip");
}

mod seeds {
    use super::*;
    use mover::delta::Op;
    use mover::meta::{Kind, Meta, Mtime};
    use mover::path::RelPath;
    use mover::protocol::{
        AbortReason, BlockResume, BlockSource, BlockTarget, Entry, FileOutcome, Hello, ListStats,
        PrefixState, Request, SessionOptions, WireOp,
    };
    use mover::protocol::pack::{EntryBatch, SigBatch};
    use mover::signature::{BlockSig, SigShape};
    use mover::stats::{Progress, Summary};

    fn p(s: &str) -> RelPath {
        RelPath::new(s.as_bytes().to_vec()).expect("valid path")
    }

    fn frames() -> Vec<Frame> {
        let meta = Meta {
            perm: 0o644,
            uid: 1000,
            gid: 1000,
            mtime: Mtime {
                sec: 1_700_000_000,
                nsec: 5,
            },
            size: 3000,
        };
        let opts = SessionOptions {
            delete: true,
            checksum: false,
            excludes: vec!["*.tmp".into(), "/cache/".into()],
            compress: Some(3),
            inplace: false,
            whole_file: false,
            operation_id: Some("op-1".into()),
            attempt: 2,
            verify: true,
            block: None,
        };
        // A block session's options: an image of 1 GiB and 5 bytes.
        let block = SessionOptions {
            whole_file: false,
            compress: Some(1),
            operation_id: Some("blk".into()),
            attempt: 3,
            block: Some(BlockSource {
                size: (1 << 30) + 5,
                block_len: 32 << 10,
                image_mtime: Some(Mtime { sec: 7, nsec: 9 }),
                zero_tail: true,
            }),
            ..SessionOptions::default()
        };
        vec![
            Frame::Hello(Hello::new(opts.clone())),
            Frame::Accept(opts),
            Frame::Hello(Hello::new(block.clone())),
            Frame::Accept(block),
            Frame::BlockTarget(BlockTarget {
                size: 2 << 30,
                resume: None,
            }),
            Frame::BlockTarget(BlockTarget {
                size: 2 << 30,
                resume: Some(BlockResume {
                    offset: 96 << 10,
                    head: vec![(64 << 10, [3; 32]), (32 << 10, [4; 32])],
                    source_mtime: Some(Mtime { sec: 7, nsec: 9 }),
                }),
            }),
            Frame::BlockStart(96 << 10),
            Frame::BlockSums {
                first: 3,
                sums: vec![[1; 16], [2; 16], [0; 16]],
            },
            Frame::Ops {
                id: 0,
                ops: vec![
                    WireOp::Plain(Op::Copy { block: 3, count: 7 }),
                    WireOp::Plain(Op::Zeros(32 << 10)),
                    WireOp::Plain(Op::Literal(vec![0xAB; 300])),
                ],
            },
            Frame::BlockVerify([8; 32]),
            Frame::Abort(AbortReason {
                message: "disk full".into(),
                retryable: true,
                exit_code: 12,
            }),
            Frame::Entry(Entry {
                path: p("a/b.txt"),
                kind: Kind::File,
                meta,
                checksum: Some([7; 32]),
            }),
            Frame::Entry(Entry {
                path: p("a/link"),
                kind: Kind::Symlink(b"../x".to_vec()),
                meta: Meta::default(),
                checksum: None,
            }),
            Frame::Entry(Entry {
                path: p("a/hard"),
                kind: Kind::HardLink(p("a/b.txt")),
                meta,
                checksum: None,
            }),
            Frame::Entries(EntryBatch(vec![
                Entry {
                    path: p("a"),
                    kind: Kind::Dir,
                    meta,
                    checksum: None,
                },
                Entry {
                    path: p("a/c.txt"),
                    kind: Kind::File,
                    meta,
                    checksum: Some([9; 32]),
                },
                Entry {
                    path: p("a/dev"),
                    kind: Kind::CharDev(0x0103),
                    meta: Meta::default(),
                    checksum: None,
                },
                Entry {
                    path: p("a/link2"),
                    kind: Kind::HardLink(p("a/c.txt")),
                    meta,
                    checksum: None,
                },
            ])),
            Frame::DirDone(p("a")),
            Frame::ListEnd(ListStats {
                failed: 1,
                vanished: 2,
            }),
            Frame::Credit(8192),
            Frame::Request(Request {
                id: 1,
                path: p("a/b.txt"),
                basis: Some(SigShape::for_len(1500)),
                resume_from: 0,
                prefix: None,
            }),
            Frame::Request(Request {
                id: 2,
                path: p("a/big"),
                basis: Some(SigShape::for_len(3 << 20)),
                resume_from: 5 << 20,
                prefix: Some(PrefixState {
                    size: 8 << 20,
                    mtime: Mtime { sec: 9, nsec: 3 },
                    head: vec![(4 << 20, [5; 32]), (512 << 10, [6; 32])],
                }),
            }),
            Frame::Sigs {
                id: 1,
                sigs: SigBatch::new(
                    SigShape::for_len(1500).strong_len(),
                    &[
                        BlockSig::of(&[1; 700]),
                        BlockSig::of(&[2; 700]),
                        BlockSig::of(&[3; 100]),
                    ],
                ),
            },
            Frame::RequestsEnd,
            Frame::FileBegin { id: 1, meta },
            Frame::Ops {
                id: 1,
                ops: vec![
                    WireOp::Plain(Op::Copy { block: 0, count: 2 }),
                    WireOp::Plain(Op::Literal(b"hello".to_vec())),
                    WireOp::Plain(Op::Zeros(4096)),
                    WireOp::Zstd {
                        raw_len: 5,
                        data: vec![0x28, 0xb5, 0x2f, 0xfd, 0, 0x58, 0x29, 0, 0, b'h', b'e'],
                    },
                ],
            },
            Frame::FileEnd {
                id: 1,
                outcome: FileOutcome::Sent([9; 32]),
            },
            Frame::FileEnd {
                id: 2,
                outcome: FileOutcome::Vanished,
            },
            Frame::DataEnd,
            Frame::Progress(Progress {
                operation_id: Some("op-1".into()),
                attempt: 1,
                files_done: 3,
                files_total: 10,
                bytes_done: 1 << 20,
                bytes_total: 1 << 30,
                listing_done: true,
                current: Some("a/b.txt".into()),
                elapsed_ms: 1000,
                rate: 1 << 20,
                eta_s: Some(1000),
                bytes_prior: 0,
            }),
            Frame::Done(Summary {
                files_total: 10,
                operation_id: Some("op-1".into()),
                checkpoint_problem: Some("stale".into()),
                ..Summary::default()
            }),
            Frame::Heartbeat,
            Frame::Verify,
        ]
    }

    fn encode_all(frames: Vec<Frame>) -> Vec<Vec<u8>> {
        let mut codec = FrameCodec::new(WireCounter::default());
        frames
            .into_iter()
            .map(|f| {
                let mut b = BytesMut::new();
                codec.encode(f, &mut b).expect("seed frame encodes");
                b.to_vec()
            })
            .collect()
    }

    pub fn all() -> Vec<(String, Vec<u8>)> {
        let encoded = encode_all(frames());
        let names: Vec<&str> = frames().iter().map(|f| f.name()).collect();
        let mut out = Vec::new();
        // The whole session as one raw stream, in one piece and in four.
        let stream: Vec<u8> = encoded.concat();
        out.push(("stream".into(), [&[8u8][..], &stream].concat()));
        let mut split = vec![8 | 3];
        for n in [3u16, 40, 1] {
            split.extend_from_slice(&n.to_le_bytes());
        }
        split.extend_from_slice(&stream);
        out.push(("stream-split".into(), split));
        // Each frame alone, in framed mode: [u16 len][payload].
        for (i, (e, name)) in encoded.iter().zip(&names).enumerate() {
            let payload = &e[4..];
            let mut s = vec![16 | 8];
            s.extend_from_slice(&(payload.len() as u16).to_le_bytes());
            s.extend_from_slice(payload);
            out.push((format!("{i:02}-{name}"), s));
        }
        // Not a mover, and a mover of a newer protocol.
        out.push(("http".into(), b"\x08\0\0\0\x04HTTP".to_vec()));
        let mut newer = vec![8u8, 0, 0, 0, 12, 0];
        newer.extend_from_slice(b"VOLMIG");
        newer.extend_from_slice(&[9, 7, 0xff, 0xff, 0xff]);
        out.push(("newer-hello".into(), newer));
        out
    }
}
