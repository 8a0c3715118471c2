//! Hostile receivers of a block session, played with hand-made frames
//! against the real sender: sums out of order, too many, unasked for or
//! over the frame limit, a resume offer whose hash state does not fit its
//! offset, a target smaller than the source, something else instead of the
//! target, and a receiver that ends before its sums. (Hostile senders are
//! in `hostile_block.rs`.)
//!
//! Each must end in bounded time with a clear error on the sender (a
//! protocol violation is exit code 12), which the receiver is told; the
//! source is never written.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::random_bytes;
use common::wire::Wire;
use mover::block::BlockShape;
use mover::protocol::{
    BlockResume, BlockSource, BlockTarget, Frame, Hello, SessionOptions, SUMS_PER_FRAME,
};
use mover::session::sender::{send, SenderConfig};
use mover::session::SessionError;
use mover::stats::Summary;
use mover::treehash::{block_cv, BlockRoot};
use tokio::io::{DuplexStream, WriteHalf};
use tokio::task::JoinHandle;

const B: u64 = 16 << 10;
/// Four blocks, the last short.
const SIZE: u64 = 3 * B + 100;
/// No hostile case may take longer than this.
const BOUND: Duration = Duration::from_secs(10);

fn src_bytes() -> Vec<u8> {
    random_bytes("hostile-block-source", SIZE as usize)
}

fn block_opts(size: u64) -> SessionOptions {
    SessionOptions {
        block: Some(BlockSource {
            size,
            block_len: BlockShape::for_size(size).block_len,
            image_mtime: None,
            zero_tail: false,
        }),
        ..SessionOptions::default()
    }
}

type Sending = (
    Wire<WriteHalf<DuplexStream>>,
    JoinHandle<Result<Summary, SessionError>>,
);

/// A sender of a `SIZE`-byte image `src.img` under `dir`, and the
/// receiver's end of its connection, before anything was said.
fn sender_of(dir: &Path, options: SessionOptions) -> Sending {
    let src = dir.join("src.img");
    fs::write(&src, src_bytes()).unwrap();
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let cfg = SenderConfig {
        root: src,
        options,
        bwlimit: None,
        progress: None,
        timeout: None,
        cancel: Default::default(),
        zero_tail: false,
    };
    let sender = tokio::spawn(send(theirs, cfg));
    let (rd, wr) = tokio::io::split(ours);
    (Wire::new(rd, wr), sender)
}

/// Plays the receiver: `Hello`, `Accept`, `target`, then (once the sender
/// said where it starts) `script`. The sender's outcome, in bounded time.
async fn against_sender(
    options: SessionOptions,
    target: BlockTarget,
    script: Vec<Frame>,
) -> Result<Summary, SessionError> {
    let t = tempfile::tempdir().unwrap();
    let (mut w, sender) = sender_of(t.path(), options);
    let proposed = w
        .expect("the sender's Hello", |f| match f {
            Frame::Hello(h) => Some(h.options.clone()),
            _ => None,
        })
        .await
        .expect("the sender hung up");
    let block = proposed.block.expect("a block session");
    assert_eq!((block.size, block.block_len), (SIZE, B as u32));
    let started = Instant::now();
    w.send(Frame::Hello(Hello::new(SessionOptions::default())))
        .await;
    w.send(Frame::Accept(proposed)).await;
    w.send(Frame::BlockTarget(target)).await;
    let start = w
        .expect("BlockStart or Abort", |f| match f {
            Frame::BlockStart(at) => Some(Ok(*at)),
            Frame::Abort(a) => Some(Err(a.clone())),
            _ => None,
        })
        .await;
    let mut abort = None;
    match start {
        Some(Ok(_)) => {
            w.send_all(script).await;
        }
        Some(Err(a)) => abort = Some(a),
        None => {}
    }
    let r = tokio::time::timeout(BOUND, sender)
        .await
        .expect("the sender hung")
        .expect("the sender panicked");
    assert!(started.elapsed() < BOUND);
    if let Err(e) = &r {
        // The receiver is told why, with the sender's exit code.
        if abort.is_none() {
            abort = w.abort().await;
        }
        assert_eq!(abort.map(|a| a.exit_code), Some(e.exit_code()), "{e}");
    }
    // The source is read, never written.
    assert!(fs::read(t.path().join("src.img")).unwrap() == src_bytes());
    r
}

fn assert_sender_violation(r: &Result<Summary, SessionError>, what: &str, words: &[&str]) {
    let e = match r {
        Ok(s) => panic!("{what}: the sender succeeded: {s:?}"),
        Err(e) => e,
    };
    assert_eq!(e.exit_code(), 12, "{what}: {e:?}");
    assert!(!e.is_retryable(), "{what}: {e} is called retryable");
    let msg = e.to_string();
    for word in words {
        assert!(msg.contains(word), "{what}: {msg:?} does not say {word:?}");
    }
}

fn target() -> BlockTarget {
    BlockTarget {
        size: SIZE,
        resume: None,
    }
}

fn sums(first: u64, n: usize) -> Frame {
    Frame::BlockSums {
        first,
        sums: vec![[0; 16]; n],
    }
}

#[tokio::test]
async fn sums_out_of_order_too_many_or_unasked_for_are_refused_by_the_sender() {
    let whole = SessionOptions {
        whole_file: true,
        ..SessionOptions::default()
    };
    let cases: Vec<(&str, SessionOptions, Vec<Frame>, &str)> = vec![
        (
            "sums from block 1",
            SessionOptions::default(),
            vec![sums(1, 1)],
            "sums of blocks 1..",
        ),
        (
            "a block summed twice",
            SessionOptions::default(),
            vec![sums(0, 2), sums(1, 1)],
            "where block 2",
        ),
        (
            "more sums than blocks",
            SessionOptions::default(),
            vec![sums(0, 5)],
            "(5 of them)",
        ),
        (
            "one sum past the last",
            SessionOptions::default(),
            vec![sums(0, 4), sums(4, 1)],
            "sums of blocks 4..",
        ),
        (
            "sums from u64::MAX",
            SessionOptions::default(),
            vec![sums(u64::MAX, 1)],
            "sums of blocks",
        ),
        (
            "sums under whole_file",
            whole,
            vec![sums(0, 1)],
            "sums of blocks 0..",
        ),
        (
            "more sums than a frame may hold",
            SessionOptions::default(),
            vec![sums(0, SUMS_PER_FRAME + 1)],
            "block sums in one frame",
        ),
        (
            "a tree's request",
            SessionOptions::default(),
            vec![Frame::RequestsEnd],
            "unexpected RequestsEnd",
        ),
    ];
    for (what, options, script, word) in cases {
        let r = against_sender(options, target(), script).await;
        assert_sender_violation(&r, what, &[word]);
    }
}

#[tokio::test]
async fn a_receiver_that_ends_before_its_sums_is_refused_in_bounded_time() {
    let done = Frame::Done(Summary::default());
    for (what, script) in [
        ("Done before any sum", vec![done]),
        (
            "Done after one sum of four",
            vec![sums(0, 1), Frame::Done(Summary::default())],
        ),
        ("Verify before any sum", vec![Frame::Verify]),
    ] {
        let r = against_sender(SessionOptions::default(), target(), script).await;
        assert_sender_violation(&r, what, &["before the sums of every block"]);
    }
}

/// A hash state of `blocks` blocks of the source, as an offer would carry.
fn head_of(blocks: u64) -> Vec<mover::treehash::HeadPiece> {
    let src = src_bytes();
    let mut root = BlockRoot::new();
    for i in 0..blocks {
        let at = (i * B) as usize;
        let cv = match src.get(at..at + B as usize) {
            Some(block) => block_cv(i * B, block),
            // Past the source's whole blocks: any value will do.
            None => [i as u8; 32],
        };
        root.push(B, cv);
    }
    root.head().pieces()
}

#[tokio::test]
async fn a_resume_offer_that_does_not_fit_its_offset_is_refused_by_the_sender() {
    let offer = |offset: u64, head| BlockTarget {
        size: SIZE,
        resume: Some(BlockResume {
            offset,
            head,
            source_mtime: None,
        }),
    };
    let cases = [
        (
            "a head of two blocks at one",
            offer(B, head_of(2)),
            "a resume offer of 16384",
        ),
        (
            "no head at one block",
            offer(B, Vec::new()),
            "a resume offer of 16384",
        ),
        (
            "a head of one block at two",
            offer(2 * B, head_of(1)),
            "a resume offer of 32768",
        ),
        (
            "the whole source offered",
            offer(4 * B, head_of(4)),
            "a resume offer of 65536",
        ),
        (
            "past the source",
            offer(8 * B, head_of(8)),
            "a resume offer of 131072",
        ),
        (
            "not a block boundary",
            offer(100, vec![(100, [1; 32])]),
            "resume:",
        ),
        (
            "pieces that are no subtrees",
            offer(3 * 1024, vec![(1024, [1; 32]), (2048, [2; 32])]),
            "resume:",
        ),
        (
            "an offset of u64::MAX",
            offer(u64::MAX, head_of(1)),
            "a resume offer of",
        ),
    ];
    for (what, target, word) in cases {
        let r = against_sender(SessionOptions::default(), target, Vec::new()).await;
        assert_sender_violation(&r, what, &[word]);
    }
}

#[tokio::test]
async fn a_target_smaller_than_the_source_is_refused_by_the_sender() {
    for size in [0, 1, SIZE - 1] {
        let target = BlockTarget { size, resume: None };
        let r = against_sender(SessionOptions::default(), target, Vec::new()).await;
        match r {
            Err(SessionError::TooSmall {
                destination,
                wanted,
            }) => assert_eq!((destination, wanted), (size, SIZE)),
            other => panic!("a target of {size} bytes: {other:?}"),
        }
    }
}

#[tokio::test]
async fn something_else_instead_of_a_block_target_is_refused_by_the_sender() {
    let t = tempfile::tempdir().unwrap();
    let (mut w, sender) = sender_of(t.path(), SessionOptions::default());
    w.send(Frame::Hello(Hello::new(SessionOptions::default())))
        .await;
    w.send(Frame::Accept(block_opts(SIZE))).await;
    w.send(sums(0, 1)).await;
    let r = tokio::time::timeout(BOUND, sender)
        .await
        .expect("the sender hung")
        .expect("the sender panicked");
    assert_sender_violation(
        &r,
        "sums before the target",
        &["expected BlockTarget, got BlockSums"],
    );
    assert_eq!(w.abort().await.map(|a| a.exit_code), Some(12));
}
