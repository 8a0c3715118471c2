//! Peers that break the protocol on purpose, spoken to frame by frame through
//! the library's own codec: each attempt ends the session with a protocol
//! error, without hanging, panicking or touching anything outside the root.

use std::path::Path;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use mover::delta::Op;
use mover::meta::{Kind, Meta, Mtime};
use mover::path::RelPath;
use mover::protocol::{
    Entry, FileOutcome, Frame, FrameCodec, Hello, ListStats, PrefixState, Request, SessionOptions,
    WireCounter, WireOp,
};
use mover::session::receiver::{receive, ReceiverConfig};
use mover::session::sender::{send, SenderConfig};
use mover::session::SessionError;
use mover::signature::SigShape;
use tokio::io::DuplexStream;
use tokio_util::codec::{FramedRead, FramedWrite};

fn p(s: &str) -> RelPath {
    RelPath::new(s.as_bytes().to_vec()).unwrap()
}

fn entry(path: &str, kind: Kind, size: u64) -> Frame {
    Frame::Entry(Entry {
        path: p(path),
        kind,
        meta: Meta {
            perm: 0o755,
            size,
            ..Meta::default()
        },
        checksum: None,
    })
}

type Peer = (
    FramedRead<tokio::io::ReadHalf<DuplexStream>, FrameCodec>,
    FramedWrite<tokio::io::WriteHalf<DuplexStream>, FrameCodec>,
);

fn peer(stream: DuplexStream) -> Peer {
    let (rd, wr) = tokio::io::split(stream);
    (
        FramedRead::new(rd, FrameCodec::new(WireCounter::default())),
        FramedWrite::new(wr, FrameCodec::new(WireCounter::default())),
    )
}

/// Plays a sender that sends `script` after the handshake; returns the receiver's result.
async fn against_receiver(
    root: &Path,
    script: Vec<Frame>,
) -> Result<mover::stats::Summary, SessionError> {
    let (a, b) = tokio::io::duplex(1 << 20);
    let receiver = tokio::spawn(receive(b, ReceiverConfig::new(root.to_path_buf())));
    let (mut rx, mut tx) = peer(a);
    tx.send(Frame::Hello(Hello::new(SessionOptions {
        delete: true,
        ..SessionOptions::default()
    })))
    .await
    .unwrap();
    // Drain whatever the receiver says so it never blocks on us.
    let drain = tokio::spawn(async move { while let Some(Ok(_)) = rx.next().await {} });
    for frame in script {
        if tx.send(frame).await.is_err() {
            break;
        }
    }
    let result = tokio::time::timeout(Duration::from_secs(20), receiver)
        .await
        .expect("receiver hung")
        .unwrap();
    drain.abort();
    result
}

fn assert_violation(r: Result<mover::stats::Summary, SessionError>, what: &str) {
    match r {
        Err(e) => assert_eq!(
            e.exit_code(),
            12,
            "{what}: expected a protocol error, got {e}"
        ),
        Ok(s) => panic!("{what}: session succeeded: {s:?}"),
    }
}

#[tokio::test]
async fn a_file_through_a_listed_symlink_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let (root, outside) = (t.path().join("root"), t.path().join("outside"));
    std::fs::create_dir(&outside).unwrap();
    let script = vec![
        entry("", Kind::Dir, 0),
        entry(
            "a",
            Kind::Symlink(outside.as_os_str().as_encoded_bytes().to_vec()),
            0,
        ),
        entry("a/pwn", Kind::File, 1),
        Frame::DirDone(RelPath::root()),
        Frame::DirDone(p("a")),
        Frame::ListEnd(ListStats::default()),
    ];
    assert_violation(
        against_receiver(&root, script).await,
        "file through a symlink",
    );
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing may appear outside the root"
    );
}

#[tokio::test]
async fn entries_must_follow_their_directory_and_the_root_comes_first() {
    let t = tempfile::tempdir().unwrap();
    let cases = [
        vec![entry("x", Kind::File, 0)],
        vec![entry("", Kind::Dir, 0), entry("d/x", Kind::File, 0)],
        vec![entry("", Kind::Dir, 0), Frame::DirDone(p("never-listed"))],
        vec![entry("", Kind::File, 0)],
        // Listed as a directory, then again (as a symlink) once its run moved on.
        vec![
            entry("", Kind::Dir, 0),
            entry("a", Kind::Dir, 0),
            entry("b", Kind::File, 0),
            entry("a", Kind::Symlink(b"/".to_vec()), 0),
        ],
        // The receiver's own state directory.
        vec![
            entry("", Kind::Dir, 0),
            entry(".volmig", Kind::Symlink(b"/etc".to_vec()), 0),
        ],
        // Back into a directory whose run of children is over.
        vec![
            entry("", Kind::Dir, 0),
            entry("a", Kind::Dir, 0),
            entry("a/x", Kind::File, 0),
            entry("b", Kind::File, 0),
        ],
    ];
    for (i, script) in cases.into_iter().enumerate() {
        let root = t.path().join(format!("r{i}"));
        assert_violation(against_receiver(&root, script).await, &format!("case {i}"));
    }
}

#[tokio::test]
async fn data_cannot_end_before_the_requests_are_answered() {
    let t = tempfile::tempdir().unwrap();
    let script = vec![
        entry("", Kind::Dir, 0),
        entry("f", Kind::File, 10),
        Frame::DirDone(RelPath::root()),
        Frame::ListEnd(ListStats::default()),
        Frame::DataEnd,
    ];
    assert_violation(
        against_receiver(&t.path().join("root"), script).await,
        "early DataEnd",
    );
}

#[tokio::test]
async fn zero_runs_cannot_overflow_the_announced_size() {
    let t = tempfile::tempdir().unwrap();
    let meta = Meta {
        perm: 0o644,
        size: 100,
        ..Meta::default()
    };
    let script = vec![
        entry("", Kind::Dir, 0),
        entry("f", Kind::File, 100),
        Frame::DirDone(RelPath::root()),
        Frame::ListEnd(ListStats::default()),
        Frame::FileBegin { id: 0, meta },
        Frame::Ops {
            id: 0,
            ops: vec![
                WireOp::Plain(Op::Literal(b"x".to_vec())),
                WireOp::Plain(Op::Zeros(u64::MAX)),
            ],
        },
        Frame::FileEnd {
            id: 0,
            outcome: FileOutcome::Sent([0; 32]),
        },
    ];
    let root = t.path().join("root");
    assert_violation(against_receiver(&root, script).await, "Zeros(u64::MAX)");
    assert!(!root.join("f").exists());
}

/// Sends `req` to a sender serving a 4-byte file `f` and returns how it ended.
async fn sender_given(req: Request) -> Result<mover::stats::Summary, SessionError> {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("f"), b"data").unwrap();
    let (a, b) = tokio::io::duplex(1 << 20);
    let cfg = SenderConfig {
        root: t.path().to_path_buf(),
        options: SessionOptions::default(),
        bwlimit: None,
        progress: None,
        timeout: None,
        cancel: Default::default(),
        zero_tail: false,
    };
    let sender = tokio::spawn(send(a, cfg));
    let (mut rx, mut tx) = peer(b);
    tx.send(Frame::Hello(Hello::new(SessionOptions::default())))
        .await
        .unwrap();
    tx.send(Frame::Accept(SessionOptions::default()))
        .await
        .unwrap();
    tx.send(Frame::Request(req)).await.unwrap();
    let drain = tokio::spawn(async move { while let Some(Ok(_)) = rx.next().await {} });
    let r = tokio::time::timeout(Duration::from_secs(20), sender)
        .await
        .expect("sender hung")
        .unwrap();
    drain.abort();
    r
}

#[tokio::test]
async fn a_request_with_a_zero_block_length_is_refused_by_the_sender() {
    let shape = SigShape {
        block_len: 0,
        file_len: 4,
    };
    let r = sender_given(Request {
        id: 0,
        path: p("f"),
        basis: Some(shape),
        resume_from: 0,
        prefix: None,
    })
    .await;
    match r {
        Err(e) => assert_eq!(e.exit_code(), 12, "{e}"),
        Ok(s) => panic!("sender accepted a zero block length: {s:?}"),
    }
}

#[tokio::test]
async fn a_prefix_state_that_does_not_fit_is_refused_by_the_sender() {
    let cv = [7u8; 32];
    for (head, resume_from, why) in [
        (vec![(1000, cv)], 4096, "not whole chunks"),
        (vec![(1024, cv), (2048, cv)], 4096, "misaligned"),
        (vec![(4096, cv)], 4096, "as long as the prefix"),
        (vec![(1 << 63, cv), (1 << 63, cv)], u64::MAX, "past 2^64"),
        (vec![(1024, cv); 65], u64::MAX, "too many pieces"),
    ] {
        let r = sender_given(Request {
            id: 0,
            path: p("f"),
            basis: None,
            resume_from,
            prefix: Some(PrefixState {
                size: 4,
                mtime: Mtime::default(),
                head,
            }),
        })
        .await;
        match r {
            Err(e) => assert_eq!(e.exit_code(), 12, "{why}: {e}"),
            Ok(s) => panic!("sender accepted a prefix state ({why}): {s:?}"),
        }
    }
}

#[tokio::test]
async fn a_silent_peer_times_out_and_heartbeats_keep_a_quiet_one_alive() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = tokio::io::duplex(1 << 20);
    let mut cfg = ReceiverConfig::new(t.path().join("root"));
    cfg.timeout = Some(Duration::from_millis(500));
    let started = std::time::Instant::now();
    let receiver = tokio::spawn(receive(b, cfg));
    let (mut rx, mut tx) = peer(a);
    let drain = tokio::spawn(async move { while let Some(Ok(_)) = rx.next().await {} });
    tx.send(Frame::Hello(Hello::new(SessionOptions::default())))
        .await
        .unwrap();
    // Quiet but alive for a second: heartbeats every 50 ms.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if tx.send(Frame::Heartbeat).await.is_err() {
            break;
        }
    }
    let quiet_phase = started.elapsed();
    // Then silent, with the connection still open.
    let r = tokio::time::timeout(Duration::from_secs(20), receiver)
        .await
        .expect("receiver hung")
        .unwrap();
    drain.abort();
    let e = r.expect_err("a silent peer must end the session");
    assert_eq!(e.exit_code(), 10, "{e}");
    assert!(e.to_string().contains("nothing from the peer"), "{e}");
    assert!(
        started.elapsed() >= quiet_phase,
        "the heartbeat phase was survived"
    );
    assert!(quiet_phase >= Duration::from_millis(900));
    drop(tx);
}
