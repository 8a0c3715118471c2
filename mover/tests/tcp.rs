//! `mover send` / `mover receive` over TCP on 127.0.0.1, with the real binary.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use tempfile::TempDir;

const BIG: usize = 8 * MIB;

/// A small tree with one large random file; returns (tempdir, src, dst) with dst created empty.
fn setup() -> (TempDir, PathBuf, PathBuf) {
    let tmp = TempDir::new().unwrap();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src.join("sub/deeper"));
    mkdirs(&dst);
    write_file(&src.join("large.bin"), &random_bytes("large", BIG), 0o644);
    write_file(&src.join("small.txt"), b"small\n", 0o600);
    write_file(&src.join("sub/a.bin"), &random_bytes("a", 50 * KIB), 0o644);
    write_file(&src.join("sub/deeper/b.txt"), b"bbb\n", 0o644);
    ln_s("../small.txt", &src.join("sub/link"));
    set_tree_mtimes(&src);
    (tmp, src, dst)
}

fn assert_same(src: &Path, dst: &Path, context: &str) {
    assert_trees_equal(src, dst, CompareOpts::default(), context);
}

#[test]
fn delta_resync_sends_only_changes() {
    let (_tmp, src, dst) = setup();
    let (first, _) = tcp_transfer_ok(&src, &dst, &["--no-whole-file"]);
    assert_same(&src, &dst, "after the initial copy");
    assert!(
        first.stat("bytes_literal") >= BIG as u64,
        "initial copy: {}",
        first.summary()
    );

    // A few small edits: two overwrites (same size) and a 100-byte insertion.
    let path = src.join("large.bin");
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(b"EDIT-ONE", 1_000_000).unwrap();
    f.write_all_at(b"EDIT-TWO", 7_000_000).unwrap();
    drop(f);
    let mut data = fs::read(&path).unwrap();
    data.splice(4_000_000..4_000_000, [b'+'; 100]);
    fs::write(&path, &data).unwrap();
    set_mtime(&path, 1_700_000_000, 123_456_789);

    let (s, _) = tcp_transfer_ok(&src, &dst, &["--no-whole-file"]);
    assert_same(&src, &dst, "after the delta re-sync");
    let (literal, matched) = (s.stat("bytes_literal"), s.stat("bytes_matched"));
    assert!(
        matched > 0,
        "delta re-sync matched nothing: {}",
        s.summary()
    );
    assert!(literal < (BIG / 8) as u64, "delta re-sync sent {literal} literal bytes for a few small edits of an {BIG}-byte file: {}", s.summary());
    assert!(
        s.stat("bytes_on_wire") < (BIG / 4) as u64,
        "delta re-sync put too much on the wire: {}",
        s.summary()
    );
    assert_eq!(
        s.stat("files_transferred"),
        1,
        "only large.bin changed: {}",
        s.summary()
    );
}

#[test]
fn compress_shrinks_wire_bytes() {
    let tmp = TempDir::new().unwrap();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    mkdirs(&dst);
    let text: String = (0..100_000)
        .map(|i| format!("line {i}: the quick brown fox jumps over the lazy dog\n"))
        .collect();
    write_file(&src.join("text.txt"), text.as_bytes(), 0o644);
    write_file(&src.join("zeros.bin"), &vec![0u8; 2 * MIB], 0o644);

    let (s, _) = tcp_transfer_ok(&src, &dst, &["--compress"]);
    assert_same(&src, &dst, "after a compressed transfer");
    let (total, wire) = (s.stat("bytes_total"), s.stat("bytes_on_wire"));
    assert!(
        total >= (text.len() + 2 * MIB) as u64,
        "bytes_total too small: {}",
        s.summary()
    );
    assert!(
        wire < total / 2,
        "--compress: {wire} bytes on the wire for {total} bytes of text/zeros: {}",
        s.summary()
    );
}

#[test]
fn noop_resync_transfers_nothing() {
    let (_tmp, src, dst) = setup();
    tcp_transfer_ok(&src, &dst, &[]);
    assert_same(&src, &dst, "after the initial copy");
    let (s, _) = tcp_transfer_ok(&src, &dst, &[]);
    assert_same(&src, &dst, "after the no-op re-sync");
    assert_eq!(
        s.stat("files_transferred"),
        0,
        "no-op re-sync: {}",
        s.summary()
    );
    assert_eq!(s.stat("bytes_literal"), 0, "no-op re-sync: {}", s.summary());
    assert!(s.stat("files_total") >= 4, "files_total: {}", s.summary());
}

#[test]
fn delete_removes_extras() {
    let (_tmp, src, dst) = setup();
    tcp_transfer_ok(&src, &dst, &[]);
    let extras = [
        "extra.txt",
        "extra-dir",
        "extra-link",
        "sub/deeper/extra-nested",
    ];
    write_file(&dst.join("extra.txt"), b"x", 0o644);
    mkdirs(&dst.join("extra-dir/inner"));
    write_file(&dst.join("extra-dir/inner/f"), b"f", 0o644);
    ln_s("small.txt", &dst.join("extra-link"));
    write_file(&dst.join("sub/deeper/extra-nested"), b"n", 0o644);

    tcp_transfer_ok(&src, &dst, &[]);
    for e in extras {
        assert!(
            dst.join(e).symlink_metadata().is_ok(),
            "{e} was removed without --delete"
        );
    }
    tcp_transfer_ok(&src, &dst, &["--delete"]);
    for e in extras {
        assert!(
            dst.join(e).symlink_metadata().is_err(),
            "{e} survived --delete"
        );
    }
    assert_same(&src, &dst, "after --delete");
}

#[test]
fn receiver_exits_after_one_session() {
    let (_tmp, src, dst) = setup();
    let receiver = spawn_receiver(&dst, &[]);
    let addr = receiver.addr;
    let s = run_sender(addr, &src, &[]);
    s.assert_ok();
    let r = receiver.wait(Duration::from_secs(15));
    assert_eq!(
        r.code,
        Some(0),
        "receiver did not exit cleanly after one session: {}",
        r.describe()
    );
    assert!(
        r.stderr.contains(&format!("listening on {addr}")),
        "no 'listening on' line: {}",
        r.describe()
    );
    assert!(
        TcpStream::connect(addr).is_err(),
        "{addr} still accepts connections after the receiver exited"
    );
    assert_same(&src, &dst, "after one session");
}

#[test]
fn receiver_rejects_garbage() {
    let tmp = TempDir::new().unwrap();
    let root = tmp.path().join("root");
    mkdirs(&root);
    let receiver = spawn_receiver(&root, &[]);

    let mut conn = TcpStream::connect(receiver.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut junk = b"GET / HTTP/1.1\r\nHost: volmig\r\n\r\n".to_vec();
    junk.extend(random_bytes("junk", 4 * KIB));
    let _ = conn.write_all(&junk); // the receiver may hang up early
    let _ = conn.shutdown(Shutdown::Write);
    let _ = conn.read_to_end(&mut Vec::new());
    drop(conn);

    let r = receiver.wait(Duration::from_secs(15));
    assert!(
        matches!(r.code, Some(2 | 10 | 12)),
        "expected exit code 2 (incompatible peer), 10 (connection I/O) or 12 (protocol error): {}",
        r.describe()
    );
    let diagnostics: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| !l.contains("listening on") && !l.trim().is_empty())
        .collect();
    assert!(
        !diagnostics.is_empty(),
        "no error message on stderr: {}",
        r.describe()
    );
    let left: Vec<_> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "receiver wrote {left:?} into its root after garbage input"
    );
}

#[test]
fn sender_connection_refused_exits_10() {
    let tmp = TempDir::new().unwrap();
    let src = tmp.path().join("src");
    mkdirs(&src);
    write_file(&src.join("f"), b"f", 0o644);
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap(); // bound then closed
    let s = run_sender(addr, &src, &[]);
    assert_eq!(
        s.code,
        Some(10),
        "sender to a closed port: {}",
        s.describe()
    );
    assert!(
        !s.stderr.trim().is_empty(),
        "no error message on stderr: {}",
        s.describe()
    );
}

#[test]
fn progress_json_lines() {
    let tmp = TempDir::new().unwrap();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    mkdirs(&dst);
    for i in 0..12 {
        write_file(
            &src.join(format!("f{i:02}.bin")),
            &random_bytes(&format!("p{i}"), MIB),
            0o644,
        );
    }
    // Rate-limited so that a time-based progress reporter gets a chance to fire (~1.5 s).
    let (s, r) = tcp_transfer(
        &src,
        &dst,
        &["--progress", "json", "--bwlimit", "8M"],
        &["--progress", "json"],
    );
    s.assert_ok();
    r.assert_ok();
    assert_same(&src, &dst, "after a transfer with --progress json");

    let lines = s.json_lines();
    for v in &lines {
        assert!(
            v.get("event").is_some_and(|e| e.is_string()),
            "JSON line without an \"event\": {v}"
        );
    }
    assert!(
        lines.iter().any(|v| v["event"] == "progress"),
        "sender emitted no progress event: {}",
        s.describe()
    );
    let last = lines.last().expect("no stdout at all");
    assert_eq!(
        last["event"],
        "summary",
        "the last stdout line must be the summary: {}",
        s.describe()
    );
    assert_eq!(s.stat("files_transferred"), 12, "{}", s.summary());
    r.json_lines(); // the receiver's stdout must be JSON lines too
}
