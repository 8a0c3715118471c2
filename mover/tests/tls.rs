//! The authenticated channel, with the real binary: only the two holders of
//! one operation's key material can talk, and whoever else connects is
//! refused at the handshake with the destination untouched.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::*;
use mover::tls::{KeyMaterial, Role};

const DAY: Duration = Duration::from_secs(86400);

fn setup() -> (Scratch, PathBuf, PathBuf) {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src.join("sub"));
    write_file(&src.join("big.bin"), &random_bytes("big", 3 * MIB), 0o644);
    write_file(&src.join("sub/small.txt"), b"small\n", 0o600);
    (tmp, src, dst)
}

fn tls(dir: &str) -> [&str; 2] {
    ["--tls-dir", dir]
}

/// The receiver must not have created, let alone written, its root.
fn assert_untouched(dst: &Path, context: &str) {
    assert!(!dst.exists(), "{context}: the destination was created");
}

#[test]
fn authenticated_transfer_copies_the_tree_under_the_material_operation() {
    let (tmp, src, dst) = setup();
    let keys = keygen(&tmp.path().join("keys"), "op-tls");
    let (sent, received) = tcp_transfer(&src, &dst, &tls(&keys), &tls(&keys));
    sent.assert_ok();
    received.assert_ok();
    assert_trees_equal(&src, &dst, CompareOpts::default(), "over TLS");
    // The material names the operation: both sides ran as part of it.
    assert_eq!(sent.summary()["operation_id"], "op-tls");
    assert_eq!(received.summary()["operation_id"], "op-tls");
    assert!(
        received.stderr.contains("authenticated session"),
        "{}",
        received.describe()
    );
    // A later attempt of the operation needs nothing but the material.
    let second = ["--tls-dir", &keys, "--attempt", "2"];
    let (sent, received) = tcp_transfer(&src, &dst, &second, &tls(&keys));
    sent.assert_ok();
    received.assert_ok();
    assert_eq!(received.summary()["attempt"], 2);
    assert_eq!(sent.stat("files_up_to_date"), 2);
}

#[test]
fn keygen_writes_private_files_once() {
    let tmp = scratch();
    let dir = tmp.path().join("keys");
    keygen(&dir, "op-k");
    assert_eq!(
        fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "ca.crt",
            "operation-id",
            "receiver.crt",
            "receiver.key",
            "sender.crt",
            "sender.key"
        ]
    );
    for name in &names {
        let mode = fs::metadata(dir.join(name)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{name}");
    }
    let before = fs::read(dir.join("sender.key")).unwrap();
    let again = run_mover([
        "keygen".as_ref(),
        "--out".as_ref(),
        dir.as_os_str(),
        "--operation-id".as_ref(),
        "op-k".as_ref(),
    ]);
    again.assert_failed(&[1], "keygen over existing material");
    assert!(
        again.stderr.contains("never overwritten"),
        "{}",
        again.describe()
    );
    assert_eq!(fs::read(dir.join("sender.key")).unwrap(), before);
    // An explicit operation id must agree with the material's.
    let (_t, src, dst) = setup();
    let keys = dir.to_str().unwrap();
    let out = run_sender(
        "127.0.0.1:9".parse().unwrap(),
        &src,
        &["--tls-dir", keys, "--operation-id", "other"],
    );
    out.assert_failed(&[1], "operation id against the material");
    assert!(
        out.stderr.contains("is for operation op-k"),
        "{}",
        out.describe()
    );
    assert_untouched(&dst, "mismatched operation id");
}

/// One receiver with op-1's material faces every kind of wrong peer in turn,
/// refuses each at the handshake, stays up, and still serves the real sender.
#[test]
fn wrong_peers_are_refused_and_the_real_sender_still_gets_through() {
    let (tmp, src, dst) = setup();
    let keys = keygen(&tmp.path().join("keys"), "op-1");
    let other = keygen(&tmp.path().join("other"), "op-2");
    // A sender that shows the receiver's certificate (a role swap).
    let swapped = tmp.path().join("swapped");
    fs::create_dir(&swapped).unwrap();
    for (from, to) in [
        ("ca.crt", "ca.crt"),
        ("operation-id", "operation-id"),
        ("receiver.crt", "sender.crt"),
        ("receiver.key", "sender.key"),
    ] {
        fs::copy(Path::new(&keys).join(from), swapped.join(to)).unwrap();
    }
    let swapped = swapped.to_str().unwrap();
    let receiver = spawn_receiver(&dst, &["--tls-dir", &keys, "--timeout", "5"]);

    let refused = |extra: &[&str], expect: &str, context: &str| {
        let out = run_sender(receiver.addr, &src, extra);
        assert!(
            out.code == Some(3) || out.code == Some(2),
            "{context}: {}",
            out.describe()
        );
        assert!(out.stderr.contains(expect), "{context}: {}", out.describe());
        assert_untouched(&dst, context);
    };
    refused(
        &tls(&other),
        "not from this operation's key material",
        "another operation's material",
    );
    refused(&[], "the peer speaks TLS", "an --insecure sender");
    refused(
        &tls(swapped),
        "made for the other role",
        "the receiver's own certificate",
    );

    // A TLS client that trusts the CA but shows no certificate.
    no_certificate_client(receiver.addr, Path::new(&keys));
    assert_untouched(&dst, "no client certificate");
    // Plain bytes, and a connection that says nothing until the handshake times out.
    let mut plain = TcpStream::connect(receiver.addr).unwrap();
    plain.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut sink = Vec::new();
    let _ = plain.read_to_end(&mut sink);
    let silent = TcpStream::connect(receiver.addr).unwrap();
    std::thread::sleep(Duration::from_secs(6));
    drop(silent);
    assert_untouched(&dst, "plain and silent connections");

    let good = run_sender(receiver.addr, &src, &tls(&keys));
    good.assert_ok();
    let out = receiver.wait(Duration::from_secs(30));
    out.assert_ok();
    assert_trees_equal(&src, &dst, CompareOpts::default(), "after the refusals");
    for expect in [
        "the sender refused the connection (UnknownCA)",
        "the sender does not speak TLS",
        "not a sender's",
        "the sender presented no certificate",
        "no handshake within 5s",
    ] {
        assert!(
            out.stderr.contains(expect),
            "receiver log lacks {expect:?}: {}",
            out.describe()
        );
    }
    assert_eq!(
        out.stderr.matches("refused a connection").count(),
        6,
        "{}",
        out.describe()
    );
}

/// Connects with rustls trusting the operation's CA but without a client
/// certificate: the receiver must refuse before any frame.
fn no_certificate_client(addr: std::net::SocketAddr, keys: &Path) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(keys.join("ca.crt")).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(mover::tls::RECEIVER_NAME).unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let _ = tls.write_all(b"anything");
    let _ = tls.flush();
    let mut buf = [0u8; 64];
    let err = tls.read(&mut buf).expect_err("the receiver must refuse");
    assert!(
        err.to_string().contains("CertificateRequired"),
        "unexpected error {err}"
    );
}

#[test]
fn expired_material_is_refused_on_both_sides() {
    let (tmp, src, dst) = setup();
    let dir = tmp.path().join("expired");
    let now = SystemTime::now();
    KeyMaterial::generate_valid("op-old", now - 10 * DAY, now - DAY)
        .unwrap()
        .write(&dir)
        .unwrap();
    let keys = dir.to_str().unwrap();
    let receiver = spawn_receiver(&dst, &["--tls-dir", keys, "--timeout", "5"]);
    let out = run_sender(receiver.addr, &src, &tls(keys));
    out.assert_failed(&[3], "expired material");
    assert!(
        out.stderr.contains("certificate has expired"),
        "{}",
        out.describe()
    );
    receiver.proc.terminate();
    let log = receiver.wait(Duration::from_secs(10));
    assert!(
        log.stderr.contains("refused a connection"),
        "{}",
        log.describe()
    );
    assert_untouched(&dst, "expired material");
}

#[test]
fn a_tls_sender_is_refused_by_a_plain_receiver() {
    let (tmp, src, dst) = setup();
    let keys = keygen(&tmp.path().join("keys"), "op-p");
    let receiver = spawn_receiver(&dst, &[]);
    let out = run_sender(receiver.addr, &src, &tls(&keys));
    out.assert_failed(&[3], "TLS sender, plain receiver");
    assert!(
        out.stderr.contains("does not speak TLS"),
        "{}",
        out.describe()
    );
    let log = receiver.wait(Duration::from_secs(10));
    log.assert_failed(&[2], "plain receiver");
    assert!(
        log.stderr.contains("the peer speaks TLS"),
        "{}",
        log.describe()
    );
    assert_untouched(&dst, "plain receiver");
}

#[test]
fn each_side_gets_only_its_own_files() {
    let m = KeyMaterial::generate("op-f", DAY).unwrap();
    let names = |role| m.files_for(role).map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(
        names(Role::Sender),
        ["operation-id", "ca.crt", "sender.crt", "sender.key"]
    );
    assert_eq!(
        names(Role::Receiver),
        ["operation-id", "ca.crt", "receiver.crt", "receiver.key"]
    );
    assert!(
        !format!("{m:?}").contains("PRIVATE KEY"),
        "Debug leaks keys"
    );
}

/// Handshakes run side by side: a client that connected first and says
/// nothing (its handshake may last the receiver's whole 60 s timeout) does
/// not keep out a sender that gives up after 5 s.
#[test]
fn a_silent_client_does_not_keep_the_sender_out() {
    let (tmp, src, dst) = setup();
    let keys = keygen(&tmp.path().join("keys"), "op-s");
    let receiver = spawn_receiver(&dst, &tls(&keys));
    let silent = TcpStream::connect(receiver.addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let sent = run_sender(receiver.addr, &src, &["--tls-dir", &keys, "--timeout", "5"]);
    sent.assert_ok();
    let out = receiver.wait(Duration::from_secs(30));
    out.assert_ok();
    drop(silent);
    assert_trees_equal(&src, &dst, CompareOpts::default(), "past a silent client");
}
