//! Hostile senders of a block session, played with hand-made frames
//! against the real receiver: a shape, a size or options a block session
//! does not allow, ops that do not tile the source, a start it was not
//! offered, compressed literals that lie. (Hostile receivers are in
//! `hostile_block_receiver.rs`.)
//!
//! Each must end in bounded time with a clear error on the receiver (a
//! protocol violation is exit code 12), which the sender is told, and the
//! receiver writes nothing past what the sender had legally sent.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::random_bytes;
use common::wire::*;
use mover::block::checkpoint::{BlockCheckpoint, StateDir};
use mover::block::{BlockShape, MAX_SIZE};
use mover::delta::{Op, LITERAL_CHUNK};
use mover::protocol::{BlockSource, BlockTarget, FileOutcome, Frame, SessionOptions, WireOp};
use mover::treehash::{block_cv, BlockRoot};

const B: u64 = 16 << 10;
/// Four blocks, the last short.
const SIZE: u64 = 3 * B + 100;
/// The destination is a block longer than the source: its tail must stay.
const DST_SIZE: u64 = SIZE + B;
/// No hostile case may take longer than this.
const BOUND: Duration = Duration::from_secs(10);

fn src_bytes() -> Vec<u8> {
    random_bytes("hostile-block-source", SIZE as usize)
}

fn old_bytes() -> Vec<u8> {
    random_bytes("hostile-block-destination", DST_SIZE as usize)
}

fn source_of(size: u64) -> BlockSource {
    BlockSource {
        size,
        block_len: BlockShape::for_size(size).block_len,
        image_mtime: None,
        zero_tail: false,
    }
}

fn block_opts(source: BlockSource) -> SessionOptions {
    SessionOptions {
        block: Some(source),
        ..SessionOptions::default()
    }
}

fn literal(data: &[u8]) -> WireOp {
    WireOp::Plain(Op::Literal(data.to_vec()))
}

fn ops(ops: Vec<WireOp>) -> Frame {
    Frame::Ops { id: 0, ops }
}

fn plain(op: Op) -> Frame {
    ops(vec![WireOp::Plain(op)])
}

fn file_end() -> Frame {
    Frame::FileEnd {
        id: 0,
        outcome: FileOutcome::Sent(*blake3::hash(&src_bytes()).as_bytes()),
    }
}

/// A scratch directory with the destination image `dst.img` holding `old_bytes()`.
fn destination() -> (tempfile::TempDir, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let dst = t.path().join("dst.img");
    fs::write(&dst, old_bytes()).unwrap();
    (t, dst)
}

// ---------------------------------------------------------------------------
// A hostile sender: the real receiver.

/// A receiver into `dst`, past the handshake, and the `BlockTarget` it sent.
async fn receiver_past_hello(dst: &Path, opts: SessionOptions) -> (InProcess, BlockTarget) {
    let (mut w, receiver) = in_process(dst);
    w.handshake(opts).await;
    let target = w
        .expect("BlockTarget", |f| match f {
            Frame::BlockTarget(t) => Some(t.clone()),
            Frame::Abort(a) => panic!("the receiver aborted: {}", a.message),
            _ => None,
        })
        .await
        .expect("the receiver hung up before its BlockTarget");
    ((w, receiver), target)
}

/// Sends `BlockStart(start)` and `script`; the receiver's outcome, in bounded time.
async fn play(dst: &Path, opts: SessionOptions, start: u64, script: Vec<Frame>) -> Outcome {
    let ((mut w, receiver), target) = receiver_past_hello(dst, opts).await;
    assert_eq!(target.size, fs::metadata(dst).unwrap().len());
    let started = Instant::now();
    w.send(Frame::BlockStart(start)).await;
    w.send_all(script).await;
    let r = outcome(receiver).await;
    assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
    if r.is_err() {
        // The receiver's error reaches the sender, with its exit code.
        let code = r.as_ref().err().map(|e| e.exit_code());
        assert_eq!(w.abort().await.map(|a| a.exit_code), code);
    }
    r
}

/// A session the receiver refuses at `Hello`: its `Abort` message, checked
/// against its own error (a protocol violation).
async fn refused_at_hello(dst: &Path, opts: SessionOptions, what: &str, words: &[&str]) {
    let (mut w, receiver) = in_process(dst);
    let said = w.hello(opts).await.expect_err(what);
    let r = outcome(receiver).await;
    let msg = assert_protocol_error(&r, what, words);
    assert!(
        said.contains(&msg) || msg.contains(&said),
        "{said:?} / {msg:?}"
    );
}

/// `dst` holds the source's bytes (or its old ones) up to `legal`, and its
/// old bytes from there on: nothing past what was legally sent.
fn assert_nothing_past(dst: &Path, legal: u64, what: &str) {
    let (now, src, old) = (fs::read(dst).unwrap(), src_bytes(), old_bytes());
    assert_eq!(
        now.len(),
        old.len(),
        "{what}: the destination's size changed"
    );
    let legal = legal as usize;
    assert!(now[legal..] == old[legal..], "{what}: written past {legal}");
    let stray = (0..legal).find(|&i| now[i] != src[i] && now[i] != old[i]);
    assert_eq!(stray, None, "{what}: a byte that is neither old nor sent");
}

#[tokio::test]
async fn a_block_len_other_than_the_shapes_is_refused_before_the_destination_is_opened() {
    let big = 10u64 << 30;
    let cases = [
        (SIZE, 4096),
        (SIZE, 8192),
        (SIZE, 2 * B as u32),
        (SIZE, 0),
        (SIZE, u32::MAX),
        (big, 16 << 10),
        (big, 1 << 20),
        (0, 1),
    ];
    for (size, block_len) in cases {
        assert_ne!(BlockShape::for_size(size).block_len, block_len);
        let what = format!("{size} bytes in blocks of {block_len}");
        let source = BlockSource {
            block_len,
            ..source_of(size)
        };
        let (t, dst) = destination();
        refused_at_hello(&dst, block_opts(source), &what, &["in blocks of"]).await;
        assert_nothing_past(&dst, 0, &what);
        // A destination that is not there is not made.
        let missing = t.path().join("new.img");
        refused_at_hello(&missing, block_opts(source), &what, &["in blocks of"]).await;
        assert!(!missing.exists(), "{what}: the destination was made");
        assert_eq!(names(t.path()).len(), 1, "{what}: {:?}", names(t.path()));
    }
}

#[tokio::test]
async fn a_source_over_the_largest_size_is_refused() {
    for size in [MAX_SIZE + 1, MAX_SIZE << 1, u64::MAX] {
        let what = format!("a source of {size} bytes");
        let (t, dst) = destination();
        let words = [&format!("{size} bytes")[..]];
        refused_at_hello(&dst, block_opts(source_of(size)), &what, &words).await;
        assert_nothing_past(&dst, 0, &what);
        let missing = t.path().join("new.img");
        refused_at_hello(&missing, block_opts(source_of(size)), &what, &words).await;
        assert!(!missing.exists(), "{what}: the destination was made");
    }
}

#[tokio::test]
async fn tree_options_in_a_block_session_are_refused() {
    let base = block_opts(source_of(SIZE));
    let cases = [
        (
            "--delete",
            SessionOptions {
                delete: true,
                ..base.clone()
            },
        ),
        (
            "--exclude",
            SessionOptions {
                excludes: vec!["*.tmp".into()],
                ..base.clone()
            },
        ),
        (
            "--checksum",
            SessionOptions {
                checksum: true,
                ..base.clone()
            },
        ),
        (
            "--inplace",
            SessionOptions {
                inplace: true,
                ..base.clone()
            },
        ),
    ];
    for (what, opts) in cases {
        let (_t, dst) = destination();
        refused_at_hello(&dst, opts, what, &["tree options: true"]).await;
        assert_nothing_past(&dst, 0, what);
    }
}

/// One hostile data script: the sender's options, the frames after
/// `BlockStart(0)`, the bytes legally written before the fault, and what
/// the receiver's error must say.
struct Script {
    what: &'static str,
    whole_file: bool,
    frames: Vec<Frame>,
    legal: u64,
    words: Vec<&'static str>,
}

fn data_scripts() -> Vec<Script> {
    let src = src_bytes();
    let (b, size) = (B as usize, SIZE as usize);
    let s = |what, whole_file, frames, legal, words| Script {
        what,
        whole_file,
        frames,
        legal,
        words,
    };
    vec![
        s(
            "a copy of the wrong block",
            false,
            vec![plain(Op::Copy { block: 1, count: 1 })],
            0,
            vec!["copy of blocks 1..+1 at offset 0"],
        ),
        s(
            "a copy past the last block",
            false,
            vec![plain(Op::Copy { block: 0, count: 5 })],
            0,
            vec!["copy of blocks 0..+5"],
        ),
        s(
            "a copy of u32::MAX blocks",
            false,
            vec![plain(Op::Copy {
                block: 0,
                count: u32::MAX,
            })],
            0,
            vec!["copy of blocks 0.."],
        ),
        s(
            "a copy of no block",
            false,
            vec![plain(Op::Copy { block: 0, count: 0 })],
            0,
            vec!["copy of blocks 0..+0"],
        ),
        s(
            "a copy in the middle of a block",
            false,
            vec![ops(vec![
                literal(&src[..100]),
                WireOp::Plain(Op::Copy { block: 0, count: 1 }),
            ])],
            100,
            vec!["copy of blocks 0..+1 at offset 100"],
        ),
        s(
            "a copy without sums (whole file)",
            true,
            vec![plain(Op::Copy { block: 0, count: 1 })],
            0,
            vec!["without sums"],
        ),
        s(
            "a literal past the end",
            true,
            vec![ops(vec![literal(&src[..3 * b]), literal(&[7; 200])])],
            3 * B,
            vec!["literal of 200 bytes at offset 49152"],
        ),
        s(
            "an empty literal",
            true,
            vec![ops(vec![literal(&src[..10]), literal(&[])])],
            10,
            vec!["literal of 0 bytes"],
        ),
        s(
            "zeros of 0 bytes",
            true,
            vec![plain(Op::Zeros(0))],
            0,
            vec!["zeros of 0 bytes at offset 0"],
        ),
        s(
            "zeros past the end",
            true,
            vec![ops(vec![
                literal(&src[..b]),
                WireOp::Plain(Op::Zeros(SIZE)),
            ])],
            B,
            vec!["zeros of 49252 bytes at offset 16384"],
        ),
        s(
            "zeros of u64::MAX bytes",
            true,
            vec![ops(vec![
                literal(&src[..1]),
                WireOp::Plain(Op::Zeros(u64::MAX)),
            ])],
            1,
            vec!["zeros of 18446744073709551615 bytes"],
        ),
        s(
            "data after FileEnd",
            true,
            vec![
                ops(vec![literal(&src)]),
                file_end(),
                ops(vec![literal(&[1])]),
            ],
            SIZE,
            vec!["unexpected Ops frame", "Ended"],
        ),
        s(
            "a second FileEnd",
            true,
            vec![ops(vec![literal(&src)]), file_end(), file_end()],
            SIZE,
            vec!["unexpected FileEnd frame"],
        ),
        s(
            "FileEnd before the end",
            true,
            vec![ops(vec![literal(&src[..b])]), file_end(), Frame::DataEnd],
            B,
            vec!["the data ended at offset 16384 of 49252"],
        ),
        s(
            "DataEnd without FileEnd",
            true,
            vec![ops(vec![literal(&src[..size])]), Frame::DataEnd],
            SIZE,
            vec!["unexpected DataEnd frame"],
        ),
        s(
            "a FileEnd without the source's hash",
            true,
            vec![
                ops(vec![literal(&src)]),
                Frame::FileEnd {
                    id: 0,
                    outcome: FileOutcome::Vanished,
                },
                Frame::DataEnd,
            ],
            SIZE,
            vec!["without its hash"],
        ),
        s(
            "ops of another file",
            true,
            vec![Frame::Ops {
                id: 1,
                ops: vec![literal(&src[..10])],
            }],
            0,
            vec!["unexpected Ops frame"],
        ),
        s(
            "a tree's frame",
            true,
            vec![dir("")],
            0,
            vec!["unexpected Entry frame"],
        ),
    ]
}

#[tokio::test]
async fn ops_that_do_not_tile_the_source_are_refused_and_nothing_past_them_is_written() {
    for script in data_scripts() {
        let (_t, dst) = destination();
        let opts = SessionOptions {
            whole_file: script.whole_file,
            ..block_opts(source_of(SIZE))
        };
        let r = play(&dst, opts, 0, script.frames).await;
        assert_protocol_error(&r, script.what, &script.words);
        assert_nothing_past(&dst, script.legal, script.what);
    }
}

#[tokio::test]
async fn honest_frames_from_the_same_helpers_are_taken() {
    // The scripts above fail for the reason they name, not for the helpers'.
    let (_t, dst) = destination();
    let src = src_bytes();
    let opts = block_opts(source_of(SIZE));
    let script = vec![ops(vec![literal(&src)]), file_end(), Frame::DataEnd];
    let r = play(&dst, opts, 0, script).await;
    let summary = r.expect("an honest session");
    assert_eq!(summary.bytes_literal, SIZE);
    let now = fs::read(&dst).unwrap();
    assert!(
        now[..SIZE as usize] == src[..] && now[SIZE as usize..] == old_bytes()[SIZE as usize..]
    );
}

#[tokio::test]
async fn a_start_other_than_zero_or_the_offered_one_is_refused() {
    for start in [1, B, 3 * B, SIZE, u64::MAX] {
        let what = format!("BlockStart({start}) with nothing offered");
        let (_t, dst) = destination();
        let r = play(&dst, block_opts(source_of(SIZE)), start, Vec::new()).await;
        assert_protocol_error(&r, &what, &[&format!("a start at {start} where 0")]);
        assert_nothing_past(&dst, 0, &what);
    }
    // An earlier attempt verified two blocks: only 0 or 2 blocks may start.
    for start in [B, 3 * B, 2 * B + 1, u64::MAX] {
        let what = format!("BlockStart({start}) with {} offered", 2 * B);
        let (_t, dst) = destination();
        let (state, verified) = checkpoint_of_two_blocks(&dst);
        let opts = SessionOptions {
            operation_id: Some("op".into()),
            attempt: 2,
            ..block_opts(source_of(SIZE))
        };
        let before = fs::read(&dst).unwrap();
        let ((mut w, receiver), target) = receiver_past_hello(&dst, opts).await;
        let offered = target.resume.as_ref().map(|r| r.offset);
        assert_eq!(offered, Some(verified), "the setup offers nothing");
        w.send(Frame::BlockStart(start)).await;
        let r = outcome(receiver).await;
        assert_protocol_error(
            &r,
            &what,
            &[&format!("a start at {start} where {verified}")],
        );
        assert!(fs::read(&dst).unwrap() == before, "{what}: written");
        // The checkpoint still says what the destination holds.
        assert!(
            state.load().unwrap().is_some(),
            "{what}: checkpoint dropped"
        );
    }
}

/// Makes `dst`'s first two blocks the source's, with the checkpoint an
/// earlier attempt of operation `op` would have left; returns its state
/// directory and the verified length.
fn checkpoint_of_two_blocks(dst: &Path) -> (StateDir, u64) {
    use std::os::unix::fs::FileExt;
    let src = src_bytes();
    let f = fs::OpenOptions::new().write(true).open(dst).unwrap();
    f.write_all_at(&src[..2 * B as usize], 0).unwrap();
    let mut root = BlockRoot::new();
    let mut probe = [0; 32];
    for i in 0..2 {
        let at = i * B;
        probe = block_cv(at, &src[at as usize..(at + B) as usize]);
        root.push(B, probe);
    }
    let state = StateDir::open(&StateDir::beside(dst).unwrap()).unwrap();
    state
        .save(&BlockCheckpoint {
            operation_id: "op".into(),
            attempt: 1,
            source_size: SIZE,
            block_len: B as u32,
            source_mtime: None,
            destination_size: DST_SIZE,
            verified: 2 * B,
            head: root.head().pieces(),
            probe,
        })
        .unwrap();
    (state, 2 * B)
}

#[tokio::test]
async fn compressed_literals_that_lie_about_their_size_are_refused() {
    let src = src_bytes();
    let b = B as usize;
    let packed = zstd::bulk::compress(&src[b..2 * b], 3).unwrap();
    let huge = zstd::bulk::compress(&vec![0u8; 2 * LITERAL_CHUNK], 3).unwrap();
    let zstd = |raw_len: u32, data: &[u8]| WireOp::Zstd {
        raw_len,
        data: data.to_vec(),
    };
    let cases: Vec<(&str, WireOp, &str)> = vec![
        (
            "raw_len too small",
            zstd(B as u32 - 1, &packed),
            "compressed literal",
        ),
        (
            "raw_len too large",
            zstd(B as u32 + 1, &packed),
            "wrong size",
        ),
        (
            "raw_len over the literal bound",
            zstd(LITERAL_CHUNK as u32 + 1, &packed),
            "compressed literal of 262145 bytes",
        ),
        (
            "raw_len u32::MAX",
            zstd(u32::MAX, &huge),
            "compressed literal of",
        ),
        (
            "a bomb under a small raw_len",
            zstd(100, &huge),
            "compressed literal",
        ),
        (
            "not zstd at all",
            zstd(B as u32, &[0xAB; 64]),
            "compressed literal",
        ),
        ("raw_len 0", zstd(0, &packed), "compressed literal"),
    ];
    for (what, op, word) in cases {
        let (_t, dst) = destination();
        let opts = SessionOptions {
            compress: Some(3),
            whole_file: true,
            ..block_opts(source_of(SIZE))
        };
        let script = vec![
            ops(vec![literal(&src[..b]), op]),
            file_end(),
            Frame::DataEnd,
        ];
        let r = play(&dst, opts, 0, script).await;
        assert_protocol_error(&r, what, &[word]);
        assert_nothing_past(&dst, B, what);
    }
}
