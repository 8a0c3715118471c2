//! The tunnel's shape, with the real binary: a port forward can only dial
//! into pods, so both movers listen (`receive --listen`, `send --listen`)
//! and a relay connects to each and copies bytes between them, passing on
//! no half-close. The sender stays the TLS client and refuses whatever
//! cannot prove to be the receiver without giving up its wait.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream as StdStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use common::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Copies `from` into `to` until `from` ends, counting what it moved.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    moved: &AtomicU64,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; MIB];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buf[..n]).await?;
        moved.fetch_add(n as u64, Relaxed);
    }
}

/// What the tunnel does, on plain sockets: connects to the receiver, then to
/// the sender, copies both ways at once, and as soon as either way ends
/// closes both connections. Returns the bytes moved (to the receiver, to
/// the sender).
async fn relay(receiver: SocketAddr, sender: SocketAddr) -> (u64, u64) {
    let to_receiver = TcpStream::connect(receiver).await.expect("the receiver");
    let to_sender = TcpStream::connect(sender).await.expect("the sender");
    let (mut from_r, mut to_r) = to_receiver.into_split();
    let (mut from_s, mut to_s) = to_sender.into_split();
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    tokio::select! {
        _ = pump(&mut from_s, &mut to_r, &up) => {}
        _ = pump(&mut from_r, &mut to_s, &down) => {}
    }
    // Both closed: each side sees its connection end, whichever ended
    // first. Reading what is left (nobody gets it) closes with a FIN
    // rather than a reset.
    let _ = to_r.shutdown().await;
    let _ = to_s.shutdown().await;
    let drain = async {
        let (mut sink_r, mut sink_s) = (tokio::io::sink(), tokio::io::sink());
        let _ = tokio::join!(
            tokio::io::copy(&mut from_r, &mut sink_r),
            tokio::io::copy(&mut from_s, &mut sink_s),
        );
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), drain).await;
    (up.into_inner(), down.into_inner())
}

/// Both movers listen; the relay joins them; returns (sender, receiver,
/// bytes to the receiver, bytes to the sender).
fn through_relay(
    src: &Path,
    dst: &Path,
    send_args: &[&str],
    recv_args: &[&str],
    before: impl FnOnce(&mut ListeningSender),
) -> (Output, Output, u64, u64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receiver = spawn_receiver(dst, recv_args);
    let mut sender = spawn_listening_sender(src, send_args);
    before(&mut sender);
    let relayed = rt.spawn(relay(receiver.addr, sender.addr));
    let sent = sender.proc.wait(RUN_TIMEOUT);
    let received = receiver.wait(Duration::from_secs(30));
    let (up, down) = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), relayed).await })
        .expect("the relay ends with the movers")
        .expect("the relay");
    (sent, received, up, down)
}

#[test]
fn a_relay_joins_a_listening_sender_to_a_listening_receiver() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    build_tricky_tree(&src);
    let keys = keygen(&tmp.path().join("keys"), "op-tunnel");
    let tls = ["--tls-dir", keys.as_str()];
    let (sent, received, up, down) = through_relay(&src, &dst, &tls, &tls, |_| {});
    sent.assert_ok();
    received.assert_ok();
    assert_trees_equal(&src, &dst, CompareOpts::default(), "through the relay");
    assert!(
        sent.stderr.contains("mover: listening on 127.0.0.1:")
            && sent.stderr.contains("(TLS 1.3, peer certificate required)"),
        "the sender says it listens as the receiver does: {}",
        sent.describe()
    );
    assert!(
        sent.stderr
            .contains("authenticated session from 127.0.0.1:"),
        "{}",
        sent.describe()
    );
    // The same session as `send --to`: the operation of the material, and
    // every byte on the wire (TLS adds its own) went through the relay.
    assert_eq!(sent.summary()["operation_id"], "op-tunnel");
    assert_eq!(received.summary()["operation_id"], "op-tunnel");
    let wire = sent.stat("bytes_on_wire");
    assert!(
        up + down >= wire,
        "{up} + {down} bytes relayed, {wire} on the wire"
    );
    assert!(up >= sent.stat("bytes_literal") && down > 0);
    // A later attempt through a new relay has nothing left to send.
    let second = ["--tls-dir", keys.as_str(), "--attempt", "2"];
    let (sent, received, _, _) = through_relay(&src, &dst, &second, &tls, |_| {});
    sent.assert_ok();
    received.assert_ok();
    assert_eq!(sent.stat("files_transferred"), 0, "{}", sent.describe());
    assert_trees_equal(&src, &dst, CompareOpts::default(), "the second attempt");
}

/// Strangers on the sender's port (garbage, a silent client, a probe that
/// connects and leaves) are refused one by one; the sender keeps waiting
/// and then serves the relay.
#[test]
fn stray_connections_do_not_end_a_listening_sender() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src.join("sub"));
    write_file(&src.join("big.bin"), &random_bytes("big", 3 * MIB), 0o644);
    write_file(&src.join("sub/small.txt"), b"small\n", 0o600);
    let keys = keygen(&tmp.path().join("keys"), "op-stray");
    let tls = ["--tls-dir", keys.as_str()];
    let mut held = Vec::new();
    let strangers = |sender: &mut ListeningSender| {
        // A client that says nothing holds one handshake open meanwhile.
        held.push(StdStream::connect(sender.addr).expect("connect"));
        let mut garbage = StdStream::connect(sender.addr).expect("connect");
        garbage
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        garbage
            .write_all(&random_bytes("garbage", 64 * KIB))
            .unwrap();
        garbage
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut got = Vec::new();
        let ended = garbage.read_to_end(&mut got);
        assert!(
            ended.is_ok() || ended.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "the sender hangs up on garbage"
        );
        drop(StdStream::connect(sender.addr).expect("a probe"));
        std::thread::sleep(Duration::from_millis(500));
        assert!(!sender.proc.exited(), "strangers ended the sender");
    };
    let (sent, received, _, _) = through_relay(&src, &dst, &tls, &tls, strangers);
    sent.assert_ok();
    received.assert_ok();
    assert_trees_equal(&src, &dst, CompareOpts::default(), "after strangers");
    let refusals = sent.stderr.matches("mover: refused a connection").count();
    assert!(refusals >= 2, "garbage and the probe: {}", sent.describe());
    drop(held);
}

#[test]
fn a_listening_sender_gives_up_after_its_accept_timeout() {
    let tmp = scratch();
    let src = tmp.path().join("src");
    mkdirs(&src);
    let mut sender = spawn_listening_sender(&src, &["--accept-timeout", "1"]);
    let out = sender.proc.wait(Duration::from_secs(30));
    out.assert_failed(&[10], "nobody connected");
    assert!(
        out.stderr.contains("(plain TCP, --insecure)")
            && out
                .stderr
                .contains("no receiver connected within 1s (--accept-timeout)"),
        "{}",
        out.describe()
    );
    assert_eq!(out.summary()["retryable"], true, "{}", out.describe());
}
