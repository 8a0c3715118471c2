//! Hostile senders that break the protocol's limits: length prefixes over the
//! frame limit, compressed literals that lie about their size, `Ops` frames
//! with too many ops, lists that ignore their credit, exclude patterns beyond
//! their limits, and connections cut in the middle of a file.
//!
//! Each must end in a clear error, in bounded time, without a panic and with
//! no partial file under a final name; what stays within the limits is taken.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use common::wire::*;
use mover::delta::{Op, LITERAL_CHUNK};
use mover::meta::Kind;
use mover::protocol::{
    FileOutcome, Frame, ProtocolError, SessionOptions, WireOp, INITIAL_CREDIT, MAX_EXCLUDES,
    MAX_EXCLUDE_BYTES, MAX_EXCLUDE_LEN, MAX_FRAME_LEN, OPS_PER_FRAME,
};
use mover::session::SessionError;
use tokio::io::AsyncWriteExt;

const MIB: u64 = common::MIB as u64;

// ---------------------------------------------------------------------------
// Frames over the size limit.

#[tokio::test]
async fn an_oversized_length_prefix_is_refused_without_waiting_for_it() {
    for len in [MAX_FRAME_LEN as u32 + 1, 1 << 30, u32::MAX] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("dst");
        let (mut w, receiver) = in_process(&root);
        w.handshake(delete()).await;
        w.send(dir("")).await;
        let started = Instant::now();
        let mut bytes = len.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[7; 100]);
        w.raw(&bytes).await;
        // The connection stays open: the refusal must not wait for the frame.
        let r = outcome(receiver).await;
        let what = format!("a {len}-byte frame");
        assert_protocol_error(
            &r,
            &what,
            &[&format!("frame longer than {MAX_FRAME_LEN} bytes")],
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{what}");
        assert_eq!(w.abort().await.map(|a| a.exit_code), Some(12), "{what}");
        assert!(temp_files(&root).is_empty());
    }
    // Instead of a Hello: not a mover at all.
    let t = tempfile::tempdir().unwrap();
    let (mut w, receiver) = in_process(&t.path().join("dst"));
    w.raw(&(MAX_FRAME_LEN as u32 + 1).to_be_bytes()).await;
    let e = outcome(receiver).await.expect_err("a huge first frame");
    assert!(
        matches!(e, SessionError::Protocol(ProtocolError::NotMover)),
        "{e:?}"
    );
    assert!(e.to_string().contains("not a volmig mover"), "{e}");
}

// ---------------------------------------------------------------------------
// Compressed literals that lie about their size.

fn zstd_of(data: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(data, 3).unwrap()
}

/// `len` zero bytes, zstd-compressed as a stream (no content size in the header).
fn zstd_stream_of_zeros(len: u64) -> Vec<u8> {
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    let chunk = vec![0u8; MIB as usize];
    let mut left = len;
    while left > 0 {
        let n = left.min(MIB);
        enc.write_all(&chunk[..n as usize]).unwrap();
        left -= n;
    }
    enc.finish().unwrap()
}

fn zstd_op(raw_len: u32, data: Vec<u8>) -> WireOp {
    WireOp::Zstd { raw_len, data }
}

/// Lists `f` of `size` bytes, answers its request with `ops` (in one
/// frame), and ends it; returns the receiver's outcome.
async fn play_file_data(root: &Path, size: u64, ops: Vec<WireOp>) -> Outcome {
    let (mut w, receiver) = in_process(root);
    let opts = SessionOptions {
        compress: Some(3),
        ..SessionOptions::default()
    };
    w.handshake(opts).await;
    let id = w.list_one_file(size).await;
    let mut frames = vec![Frame::FileBegin {
        id,
        meta: meta(0o644, size),
    }];
    frames.push(Frame::Ops { id, ops });
    frames.push(Frame::FileEnd {
        id,
        outcome: FileOutcome::Sent([0; 32]),
    });
    w.send_all(frames).await;
    outcome(receiver).await
}

#[tokio::test]
async fn zstd_literals_that_lie_about_their_size_are_refused() {
    let chunk = LITERAL_CHUNK as u32;
    let zeros_chunk = zstd_of(&vec![0; LITERAL_CHUNK]);
    let cases: Vec<(&str, u64, Vec<WireOp>, &str)> = vec![
        (
            "an announced size over the literal limit",
            u64::from(u32::MAX),
            vec![zstd_op(chunk + 1, zstd_of(&vec![0; LITERAL_CHUNK + 1]))],
            "compressed literal of 262145 bytes",
        ),
        (
            "4 GiB announced",
            u64::from(u32::MAX),
            vec![zstd_op(u32::MAX, zstd_of(b"tiny"))],
            "compressed literal of 4294967295 bytes",
        ),
        (
            "1 MiB (in the header) behind 1000 announced bytes",
            10 * MIB,
            vec![zstd_op(1000, zstd_of(&vec![0; MIB as usize]))],
            "bad compressed literal",
        ),
        (
            "1 GiB (no size in the header) behind the largest announced literal",
            10 * MIB,
            vec![zstd_op(chunk, zstd_stream_of_zeros(1 << 30))],
            "bad compressed literal",
        ),
        (
            "fewer bytes than announced",
            10 * MIB,
            vec![zstd_op(4096, zstd_of(&[1; 10]))],
            "compressed literal has the wrong length",
        ),
        (
            "not zstd at all",
            10 * MIB,
            vec![zstd_op(10, b"not zstd at all".to_vec())],
            "bad compressed literal",
        ),
        (
            "more data than the file's announced size",
            MIB,
            vec![zstd_op(chunk, zeros_chunk.clone()); 8],
            "f: file would exceed 1048576 bytes",
        ),
        (
            "plain literals over the file's announced size",
            MIB,
            vec![WireOp::Plain(Op::Literal(vec![1; LITERAL_CHUNK])); 5],
            "f: file would exceed 1048576 bytes",
        ),
    ];
    for (what, size, ops, word) in cases {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("dst");
        let started = Instant::now();
        let r = play_file_data(&root, size, ops).await;
        assert_protocol_error(&r, what, &[word]);
        assert!(started.elapsed() < Duration::from_secs(30), "{what}");
        assert!(!root.join("f").exists(), "{what}: f was committed");
        assert!(temp_files(&root).is_empty(), "{what}: temp files left");
    }
}

// ---------------------------------------------------------------------------
// Ops frames with more ops than an honest sender puts in one.

/// A 3-byte op decodes to tens of bytes, so the frame size alone would let
/// 4 MiB on the wire become over 40 MiB decoded: one frame holds at most
/// `OPS_PER_FRAME` ops, as many as an honest sender puts in one.
#[tokio::test]
async fn an_ops_frame_over_the_op_limit_is_refused() {
    for n in [OPS_PER_FRAME, OPS_PER_FRAME + 1, 100_000] {
        let what = format!("{n} one-byte zero runs in one frame");
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("dst");
        let (mut w, receiver) = in_process(&root);
        w.handshake(SessionOptions::default()).await;
        let size = n as u64;
        let id = w.list_one_file(size).await;
        let data = vec![0; n];
        w.send_all(vec![
            Frame::FileBegin {
                id,
                meta: meta(0o644, size),
            },
            Frame::Ops {
                id,
                ops: vec![WireOp::Plain(Op::Zeros(1)); n],
            },
            Frame::FileEnd {
                id,
                outcome: FileOutcome::Sent(*blake3::hash(&data).as_bytes()),
            },
        ])
        .await;
        if n <= OPS_PER_FRAME {
            w.serve(&HashMap::new()).await;
            let s = outcome(receiver).await.expect(&what);
            assert_eq!((s.files_failed, s.files_transferred), (0, 1), "{what}");
            assert_eq!(fs::read(root.join("f")).unwrap(), data, "{what}");
        } else {
            let r = outcome(receiver).await;
            let words = format!("{n} ops in one frame (at most {OPS_PER_FRAME})");
            assert_protocol_error(&r, &what, &[&words]);
            assert!(!root.join("f").exists(), "{what}: f was committed");
            assert!(temp_files(&root).is_empty(), "{what}: temp files left");
        }
    }
}

// ---------------------------------------------------------------------------
// A list that ignores its credit.

#[tokio::test]
async fn a_sender_that_ignores_its_list_credit_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("dst");
    let (mut w, receiver) = in_process(&root);
    w.handshake(delete()).await;
    w.send(dir("")).await;
    // Files (never answered) keep the generator waiting for room in flight,
    // so the list piles up at the receiver unless it stops reading.
    let mut sent = 1u64;
    'flood: for batch in 0..1000u64 {
        let mut bytes = Vec::new();
        for i in 0..100 {
            bytes.extend(encode(entry(
                format!("f{:06}", batch * 100 + i),
                Kind::File,
                1,
            )));
        }
        if !w.raw(&bytes).await {
            break 'flood;
        }
        sent += 100;
    }
    let r = outcome(receiver).await;
    assert_protocol_error(&r, "credit ignored", &["sender exceeded its list credit"]);
    let mut granted = u64::from(INITIAL_CREDIT);
    while let Some(f) = w.from_receiver.recv().await {
        if let Frame::Credit(n) = f {
            granted += u64::from(n);
        }
    }
    assert!(
        sent > granted,
        "the flood stayed within its credit: {sent} sent, {granted} granted"
    );
    assert!(temp_files(&root).is_empty());
}

// ---------------------------------------------------------------------------
// Exclude patterns beyond their limits.

/// Each exclude pattern the sender proposes is compiled to a regex at the
/// receiver: they are limited in number, in length and in all.
#[tokio::test]
async fn exclude_patterns_beyond_their_limits_are_refused() {
    let many = |n: usize| (0..n).map(|i| format!("p{i}")).collect::<Vec<_>>();
    let long = |n: usize, len: usize| {
        (0..n)
            .map(|i| format!("{i:02}{}", "x".repeat(len - 2)))
            .collect::<Vec<_>>()
    };
    let all = MAX_EXCLUDE_BYTES / MAX_EXCLUDE_LEN;
    let cases = [
        ("as many as allowed", many(MAX_EXCLUDES), None),
        (
            "the longest, as many as fit",
            long(all, MAX_EXCLUDE_LEN),
            None,
        ),
        (
            "one too many",
            many(MAX_EXCLUDES + 1),
            Some("4097 exclude patterns of"),
        ),
        (
            "one byte too long",
            long(1, MAX_EXCLUDE_LEN + 1),
            Some("1 exclude patterns of 4097 bytes, the longest 4097"),
        ),
        (
            "too many bytes in all",
            long(17, 4000),
            Some("17 exclude patterns of 68000 bytes, the longest 4000"),
        ),
    ];
    let limits = format!(
        "(at most {MAX_EXCLUDES} patterns, {MAX_EXCLUDE_LEN} bytes each, {MAX_EXCLUDE_BYTES} in all)"
    );
    for (what, excludes, refusal) in cases {
        let t = tempfile::tempdir().unwrap();
        let (mut w, receiver) = in_process(&t.path().join("dst"));
        let started = Instant::now();
        let answer = w
            .hello(SessionOptions {
                excludes,
                ..SessionOptions::default()
            })
            .await;
        assert!(started.elapsed() < Duration::from_secs(10), "{what}");
        match refusal {
            None => assert_eq!(answer, Ok(()), "{what}"),
            Some(says) => {
                let told = answer.expect_err(what);
                let msg = assert_protocol_error(&outcome(receiver).await, what, &[says, &limits]);
                assert_eq!(told, msg, "{what}");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// A connection cut in the middle of a file.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cut {
    /// After half of the file's data.
    HalfwayThroughTheData,
    /// After all of the data, before `FileEnd`.
    BeforeFileEnd,
    /// In the middle of an `Ops` frame.
    InsideAFrame,
    /// After `FileEnd`, before `DataEnd`.
    AfterFileEnd,
}

const OLD: &[u8] = b"old contents";

/// Replaces `f` (holding [`OLD`]) with 1 MiB of new data, cut as `cut` says.
async fn cut_transfer(root: &Path, cut: Cut, opts: SessionOptions) -> (Outcome, Vec<u8>) {
    fs::create_dir_all(root).unwrap();
    fs::write(root.join("f"), OLD).unwrap();
    let data: Vec<u8> = (0..MIB).map(|i| (i * 7 % 251) as u8).collect();
    let (mut w, receiver) = in_process(root);
    w.handshake(opts).await;
    let id = w.list_one_file(MIB).await;
    let frames = file_frames(id, &data);
    // FileBegin, four Ops of 256 KiB, FileEnd.
    assert_eq!(frames.len(), 6);
    let mut frames = frames.into_iter();
    let upto = match cut {
        Cut::HalfwayThroughTheData | Cut::InsideAFrame => 3,
        Cut::BeforeFileEnd => 5,
        Cut::AfterFileEnd => 6,
    };
    w.send_all(frames.by_ref().take(upto).collect()).await;
    if cut == Cut::InsideAFrame {
        let next = encode(frames.next().unwrap());
        w.raw(&next[..next.len() / 2]).await;
    }
    if cut != Cut::AfterFileEnd {
        // The partial file exists before the cut: the test cuts a real one.
        let deadline = Instant::now() + STEP;
        while temp_files(root).is_empty() {
            assert!(Instant::now() < deadline, "{cut:?}: no temp file appeared");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    w.wr.shutdown().await.unwrap();
    (outcome(receiver).await, data)
}

fn assert_cut(r: &Outcome, what: &str) {
    let e = r.as_ref().expect_err(what);
    assert!(
        matches!(e, SessionError::Protocol(ProtocolError::Closed(_))),
        "{what}: {e:?}"
    );
    assert_eq!(e.exit_code(), 10, "{what}: {e}");
    assert!(e.is_retryable(), "{what}: {e}");
    assert!(
        e.to_string().contains("connection closed by peer"),
        "{what}: {e}"
    );
}

#[tokio::test]
async fn a_connection_cut_in_the_middle_of_a_file_commits_nothing() {
    for cut in [
        Cut::HalfwayThroughTheData,
        Cut::BeforeFileEnd,
        Cut::InsideAFrame,
        Cut::AfterFileEnd,
    ] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("dst");
        let (r, data) = cut_transfer(&root, cut, delete()).await;
        let what = format!("{cut:?}");
        assert_cut(&r, &what);
        if cut == Cut::InsideAFrame {
            let msg = r.as_ref().unwrap_err().to_string();
            assert!(msg.contains("in the middle of a frame"), "{msg}");
        }
        let f = fs::read(root.join("f")).unwrap();
        if cut == Cut::AfterFileEnd {
            // A complete, verified file may be committed; never a part of one.
            assert!(f == OLD || f == data, "{what}: f holds {} bytes", f.len());
        } else {
            assert_eq!(f, OLD, "{what}: the old f was replaced");
        }
        assert!(
            temp_files(&root).is_empty(),
            "{what}: {:?}",
            snapshot(&root)
        );
        assert_eq!(names(&root), BTreeSet::from(["f".to_string()]), "{what}");
    }
}

#[tokio::test]
async fn a_cut_operation_keeps_only_its_temp_file() {
    for cut in [Cut::HalfwayThroughTheData, Cut::InsideAFrame] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("dst");
        let opts = SessionOptions {
            operation_id: Some("hostile-op".into()),
            attempt: 1,
            ..SessionOptions::default()
        };
        let (r, _) = cut_transfer(&root, cut, opts).await;
        let what = format!("{cut:?} with an operation id");
        assert_cut(&r, &what);
        assert_eq!(fs::read(root.join("f")).unwrap(), OLD, "{what}");
        let temps = temp_files(&root);
        assert!(temps.len() <= 1, "{what}: {temps:?}");
        for name in names(&root) {
            let ok = name == "f" || name == ".volmig" || is_temp(Path::new(&name));
            assert!(ok, "{what}: unexpected {name:?} in the root");
        }
        for temp in &temps {
            let name = temp.to_string_lossy();
            assert!(name.starts_with(".volmig-f."), "{what}: {name}");
        }
    }
}

/// Files finished but not yet committed when the connection is cut (in an
/// applier's batch, its committer's queue or its commit group) leave no
/// temporary file behind but those the checkpoint names, for the next
/// attempt.
#[tokio::test]
async fn files_cut_off_from_their_commit_leave_only_journaled_temp_files() {
    const FILES: usize = 300;
    for operation_id in [None, Some("cut-op")] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("dst");
        let what = format!("operation {operation_id:?}");
        let opts = SessionOptions {
            operation_id: operation_id.map(String::from),
            attempt: 1,
            ..SessionOptions::default()
        };
        let (mut w, receiver) = in_process(&root);
        w.handshake(opts).await;
        let mut list = vec![dir("")];
        list.extend((0..FILES).map(|i| entry(format!("f{i:03}"), Kind::File, 4)));
        list.extend([done(""), list_end()]);
        w.send_all(list).await;
        for _ in 0..FILES {
            let id = w
                .expect("a request", |f| match f {
                    Frame::Request(r) => Some(r.id),
                    _ => None,
                })
                .await
                .unwrap_or_else(|| panic!("{what}: the receiver hung up"));
            w.send_all(file_frames(id, b"data")).await;
        }
        // Every file written: waiting for its commit (a group waits up to
        // 2 s), or committed already.
        let written = || {
            let done = names(&root).iter().filter(|n| n.starts_with('f')).count();
            done + temp_files(&root).len()
        };
        let deadline = Instant::now() + STEP;
        while written() < FILES {
            assert!(Instant::now() < deadline, "{what}: {} written", written());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let waiting = temp_files(&root).len();
        w.wr.shutdown().await.unwrap();
        assert_cut(&outcome(receiver).await, &what);
        for name in names(&root).iter().filter(|n| n.starts_with('f')) {
            assert_eq!(
                fs::read(root.join(name)).unwrap(),
                b"data",
                "{what}: {name}"
            );
        }
        let left: BTreeSet<String> = temp_files(&root)
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let named: BTreeSet<String> = match operation_id {
            None => BTreeSet::new(),
            Some(_) => {
                let store = mover::checkpoint::Store::open(&root).unwrap();
                let cp = store.load().unwrap().expect("a checkpoint");
                cp.partials.iter().map(|p| p.temp.to_string()).collect()
            }
        };
        assert_eq!(
            left, named,
            "{what}: temporary files left (of {waiting} waiting) and named by the checkpoint"
        );
    }
}
