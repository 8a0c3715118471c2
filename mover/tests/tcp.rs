//! `mover send` / `mover receive` over TCP on 127.0.0.1, with the real binary.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

const BIG: usize = 8 * MIB;

/// A small tree with one large random file; returns (tempdir, src, dst) with dst created empty.
fn setup() -> (Scratch, PathBuf, PathBuf) {
    let tmp = scratch();
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
    let summary = s.summary();
    assert!(
        literal < (BIG / 8) as u64,
        "delta re-sync sent {literal} literal bytes for 3 small edits of {BIG} bytes: {summary}"
    );
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
    let tmp = scratch();
    let (src, plain, packed) = (
        tmp.path().join("src"),
        tmp.path().join("plain"),
        tmp.path().join("packed"),
    );
    for d in [&src, &plain, &packed] {
        mkdirs(d);
    }
    let text: String = (0..100_000)
        .map(|i| format!("line {i}: the quick brown fox jumps over the lazy dog\n"))
        .collect();
    write_file(&src.join("text.txt"), text.as_bytes(), 0o644);

    let (s, _) = tcp_transfer_ok(&src, &packed, &["--compress"]);
    assert_same(&src, &packed, "after a compressed transfer");
    let (total, wire) = (s.stat("bytes_total"), s.stat("bytes_on_wire"));
    assert!(
        total >= text.len() as u64,
        "bytes_total too small: {}",
        s.summary()
    );
    assert!(
        wire < total / 2,
        "--compress: {wire} bytes on the wire for {total} bytes of text: {}",
        s.summary()
    );
    // Control: the same transfer without --compress puts (much) more on the wire.
    let (p, _) = tcp_transfer_ok(&src, &plain, &[]);
    assert_same(&src, &plain, "after an uncompressed transfer");
    let plain_wire = p.stat("bytes_on_wire");
    assert!(
        plain_wire > 3 * wire,
        "{plain_wire} bytes on the wire without --compress vs {wire} with it"
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
    let tmp = scratch();
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
    let tmp = scratch();
    let src = tmp.path().join("src");
    mkdirs(&src);
    write_file(&src.join("f"), b"f", 0o644);
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap(); // bound then closed
    run_sender(addr, &src, &[]).assert_failed(&[10], "sender to a closed port");
}

#[test]
fn sender_waits_for_a_receiver_that_is_not_there_yet() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    write_file(&src.join("f"), b"late", 0o644);
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap(); // bound then closed: refused until the receiver comes
    let mut sender = spawn_sender(addr, &src, &["--connect-retry", "20"]);
    std::thread::sleep(Duration::from_millis(1500));
    let listen = addr.to_string();
    let mut receiver = Proc::spawn([
        "receive".as_ref(),
        "--listen".as_ref(),
        listen.as_ref(),
        "--root".as_ref(),
        dst.as_os_str(),
        "--insecure".as_ref(),
    ] as [&std::ffi::OsStr; 6]);
    let sent = sender.wait(RUN_TIMEOUT);
    let received = receiver.wait(RUN_TIMEOUT);
    assert_eq!(sent.code, Some(0), "{}", sent.describe());
    assert_eq!(received.code, Some(0), "{}", received.describe());
    assert_eq!(fs::read(dst.join("f")).unwrap(), b"late");
}

#[test]
fn progress_json_lines() {
    let tmp = scratch();
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

#[test]
fn checksum_catches_same_size_same_mtime_change() {
    let (_tmp, src, dst) = setup();
    tcp_transfer_ok(&src, &dst, &[]);
    // Same size, same mtime, different contents: invisible to the size+mtime quick check.
    let path = src.join("sub/deeper/b.txt");
    let md = fs::symlink_metadata(&path).unwrap();
    fs::write(&path, b"ccc\n").unwrap();
    set_mtime(&path, md.mtime(), md.mtime_nsec());

    let (s, _) = tcp_transfer_ok(&src, &dst, &[]);
    assert_eq!(
        s.stat("files_transferred"),
        0,
        "quick check should skip: {}",
        s.summary()
    );
    assert_eq!(
        fs::read(dst.join("sub/deeper/b.txt")).unwrap(),
        b"bbb\n",
        "without -c the file must be left alone"
    );
    let (s, _) = tcp_transfer_ok(&src, &dst, &["--checksum"]);
    assert_eq!(
        s.stat("files_transferred"),
        1,
        "--checksum must find the change: {}",
        s.summary()
    );
    assert_same(&src, &dst, "after --checksum");
}

#[test]
fn bwlimit_plain_number_is_kib_per_second() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    mkdirs(&dst);
    write_file(&src.join("f.bin"), &random_bytes("bw", 3 * MIB), 0o644);
    let start = Instant::now();
    tcp_transfer_ok(&src, &dst, &["--bwlimit", "1024"]); // 1024 KiB/s: about 3 s for 3 MiB
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1500),
        "3 MiB at --bwlimit 1024 (KiB/s) took only {elapsed:?}"
    );
    assert!(
        elapsed <= Duration::from_secs(60),
        "3 MiB at --bwlimit 1024 (KiB/s) took {elapsed:?}"
    );
    assert_same(&src, &dst, "after a rate-limited transfer");
}

#[test]
fn keep_serving_handles_two_sessions() {
    let (_tmp, src, dst) = setup();
    let mut receiver = spawn_receiver(&dst, &["--keep-serving"]);
    run_sender(receiver.addr, &src, &[]).assert_ok();
    assert_same(&src, &dst, "after the first session");
    write_file(&src.join("second.txt"), b"second session\n", 0o644);
    let s = run_sender(receiver.addr, &src, &[]);
    s.assert_ok();
    assert_eq!(
        s.stat("files_transferred"),
        1,
        "second session: {}",
        s.summary()
    );
    assert!(
        !receiver.proc.exited(),
        "--keep-serving receiver exited after two sessions"
    );
    receiver.proc.kill();
    assert_same(&src, &dst, "after the second session");
}

#[test]
fn sender_rejects_a_non_mover_peer() {
    let tmp = scratch();
    let src = tmp.path().join("src");
    mkdirs(&src);
    write_file(&src.join("f"), b"f", 0o644);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let server = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok((mut conn, _)) = listener.accept() {
                let _ = conn.set_nonblocking(false);
                let _ = conn.write_all(b"SSH-2.0-OpenSSH_9.6\r\n");
                let _ = conn.write_all(&random_bytes("peer junk", 2000));
                std::thread::sleep(Duration::from_millis(500));
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let s = spawn_sender(addr, &src, &[]).wait(Duration::from_secs(30));
    server.join().unwrap();
    s.assert_failed(&[2, 10, 12], "sender against a non-mover peer");
}

#[test]
fn receiver_killed_mid_transfer() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    mkdirs(&dst);
    write_file(&src.join("a.bin"), &random_bytes("killed", 4 * MIB), 0o644);
    write_file(&src.join("b.txt"), b"b\n", 0o644);
    set_tree_mtimes(&src);

    let mut receiver = spawn_receiver(&dst, &[]);
    let mut sender = spawn_sender(receiver.addr, &src, &["--bwlimit", "1M"]); // about 4 s
    std::thread::sleep(Duration::from_millis(1000));
    receiver.proc.kill();
    let s = sender.wait(Duration::from_secs(60));
    assert_eq!(
        s.code,
        Some(10),
        "sender whose receiver died mid-transfer: {}",
        s.describe()
    );

    // A later session completes the job; --delete also removes any leftovers of the first one.
    tcp_transfer_ok(&src, &dst, &["--delete"]);
    assert_same(&src, &dst, "after re-running the interrupted transfer");
}

#[test]
fn usage_and_missing_source_exit_codes() {
    let tmp = scratch();
    let (missing, dst) = (tmp.path().join("missing"), tmp.path().join("dst"));
    for args in [
        &["sync"][..],
        &["sync", "--no-such-flag", "a", "b"],
        &["frobnicate"],
    ] {
        let out = run_mover(args);
        assert_eq!(out.code, Some(1), "usage error: {}", out.describe());
    }
    let out = run_mover([
        std::ffi::OsStr::new("sync"),
        missing.as_os_str(),
        dst.as_os_str(),
    ]);
    assert_eq!(
        out.code,
        Some(11),
        "sync from a missing source: {}",
        out.describe()
    );
    assert!(
        !dst.exists(),
        "sync from a missing source created its destination"
    );
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = run_sender(port, &missing, &[]);
    assert_eq!(
        out.code,
        Some(11),
        "send from a missing source: {}",
        out.describe()
    );
}

#[test]
fn sigterm_stops_a_receiver_cleanly() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    write_file(&src.join("big"), &random_bytes("term", 8 * MIB), 0o644);
    let receiver = spawn_receiver(&dst, &[]);
    let mut sender = spawn_sender(receiver.addr, &src, &["--bwlimit", "2M"]); // about 4 s
    let deadline = Instant::now() + Duration::from_secs(30);
    while fs::read_dir(&dst).map_or(0, |d| d.count()) == 0 {
        assert!(Instant::now() < deadline, "no data arrived");
        std::thread::sleep(Duration::from_millis(10));
    }
    receiver.proc.terminate();
    let r = receiver.wait(Duration::from_secs(30));
    let s = sender.wait(Duration::from_secs(30));
    assert_eq!(r.code, Some(20), "receiver: {}", r.describe());
    assert!(r.stderr.contains("interrupted"), "{}", r.describe());
    assert_eq!(s.code, Some(13), "sender is told: {}", s.describe());
    assert!(s.stderr.contains("interrupted"), "{}", s.describe());
    let left: Vec<_> = fs::read_dir(&dst)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "nothing half-written stays: {left:?}");
}

#[test]
fn a_silent_client_does_not_hold_a_receiver_forever() {
    let tmp = scratch();
    let dst = tmp.path().join("dst");
    let receiver = spawn_receiver(&dst, &["--timeout", "5"]);
    let _silent = std::net::TcpStream::connect(receiver.addr).unwrap();
    let r = receiver.wait(Duration::from_secs(30));
    r.assert_failed(&[10], "receiver whose client says nothing");
    assert!(
        r.stderr.contains("nothing from the peer for 5s"),
        "{}",
        r.describe()
    );
    assert!(
        fs::read_dir(&dst).map_or(true, |d| d.count() == 0),
        "nothing written"
    );
}

/// The source is opened read-only and left as it was: contents, mtimes,
/// inode change times, and access times too (O_NOATIME, which root may use
/// on any file), through a copy, a checksum re-sync and a verification.
#[test]
fn the_source_is_left_exactly_as_it_was_access_times_included() {
    if !is_root() {
        eprintln!("skipped: O_NOATIME on files of any owner needs root (CAP_FOWNER)");
        return;
    }
    let (_tmp, src, dst) = setup();
    // Access times older than a day and newer than mtimes: under the common
    // `relatime` mount option any read would move them.
    let day = 86_400;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // Listed once, before the times are set: reading a directory is an access.
    let entries: Vec<_> = walk(&src)
        .into_iter()
        .filter(|(_, _, md)| !md.file_type().is_symlink())
        .map(|(rel, path, _)| (rel, path))
        .collect();
    for (_, path) in &entries {
        set_times(path, now - 3 * day, now - 4 * day);
    }
    let before = stamps(&entries);
    tcp_transfer_ok(&src, &dst, &["--verify"]);
    tcp_transfer_ok(&src, &dst, &["--checksum", "--verify", "--delete"]);
    assert_eq!(stamps(&entries), before, "the source changed");
    assert_same(&src, &dst, "after the copies");
}

fn set_times(path: &Path, atime: i64, mtime: i64) {
    use rustix::fs::{AtFlags, Timespec, Timestamps, CWD};
    let ts = |sec| Timespec {
        tv_sec: sec,
        tv_nsec: 0,
    };
    let times = Timestamps {
        last_access: ts(atime),
        last_modification: ts(mtime),
    };
    rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

/// (path, atime, mtime, ctime) of each entry, by `lstat` (which reads nothing).
fn stamps(entries: &[(Vec<u8>, PathBuf)]) -> Vec<(String, i64, i64, i64, i64)> {
    entries
        .iter()
        .map(|(rel, path)| {
            let md = fs::symlink_metadata(path).unwrap();
            let c = (md.ctime(), md.ctime_nsec());
            (show(rel), md.atime(), md.mtime(), c.0, c.1)
        })
        .collect()
}
