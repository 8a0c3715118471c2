//! `--verify` tells a live source from a destination that does not hold what was sent: a source
//! file rewritten after it was sent is "changed during the copy" (exit 24, named in the
//! summary); a destination file whose contents no longer match what was sent, at the same
//! size and modification time, is a verification failure (exit 23) and is removed, so the next
//! attempt sends it again.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

/// `a.txt`, sent first, and an 8 MiB file that keeps the session going for a few seconds at
/// 2 MiB/s.
fn setup() -> (Scratch, PathBuf, PathBuf) {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    mkdirs(&dst);
    write_file(&src.join("a.txt"), b"version one\n", 0o644);
    write_file(
        &src.join("big.bin"),
        &random_bytes("verify big", 8 * MIB),
        0o644,
    );
    set_tree_mtimes(&src);
    (tmp, src, dst)
}

/// Waits (up to 3 s) until `path` exists at the destination as a regular file.
fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while !fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_source_rewritten_after_it_was_sent_is_changed_not_corrupt() {
    let (_tmp, src, dst) = setup();
    let mut receiver = spawn_receiver(&dst, &[]);
    let mut sender = spawn_sender(receiver.addr, &src, &["--verify", "--bwlimit", "2M"]);
    // Once a.txt is in place, the app rewrites it (new size, new mtime).
    wait_for(&dst.join("a.txt"));
    write_file(&src.join("a.txt"), b"version two, longer\n", 0o644);
    let s = sender.wait(Duration::from_secs(60));
    let r = receiver.proc.wait(Duration::from_secs(10));
    for (side, out) in [("sender", &s), ("receiver", &r)] {
        assert_eq!(out.code, Some(24), "{side}: {}", out.describe());
    }
    let v = &r.summary()["verify"];
    assert_eq!(
        v["passed"], true,
        "nothing the destination holds is wrong: {v}"
    );
    assert_eq!(v["differences"], 0, "{v}");
    assert_eq!(v["changed"], 1, "{v}");
    assert_eq!(v["changed_paths"], serde_json::json!(["a.txt"]), "{v}");
    assert!(
        r.stderr.contains("a.txt changed during the copy"),
        "{}",
        r.describe()
    );
    // The destination keeps the version that was sent.
    assert_eq!(fs::read(dst.join("a.txt")).unwrap(), b"version one\n");
}

#[test]
fn a_destination_that_no_longer_holds_what_was_sent_fails_verification() {
    let (_tmp, src, dst) = setup();
    let mut receiver = spawn_receiver(&dst, &[]);
    let mut sender = spawn_sender(receiver.addr, &src, &["--verify", "--bwlimit", "2M"]);
    // Once a.txt is in place, its bytes rot: same size, same mtime, other contents.
    let there = dst.join("a.txt");
    wait_for(&there);
    let md = fs::metadata(&there).unwrap();
    fs::write(&there, b"version 0ne\n").unwrap();
    let mtime = filetime(&md);
    set_mtime(&there, mtime);
    let s = sender.wait(Duration::from_secs(60));
    let r = receiver.proc.wait(Duration::from_secs(10));
    for (side, out) in [("sender", &s), ("receiver", &r)] {
        assert_eq!(out.code, Some(23), "{side}: {}", out.describe());
    }
    let v = &r.summary()["verify"];
    assert_eq!(v["passed"], false, "{v}");
    assert_eq!(
        (v["differences"].as_u64(), v["changed"].as_u64()),
        (Some(1), Some(0)),
        "{v}"
    );
    assert!(
        !there.exists(),
        "a file whose contents differ is removed, so the next attempt sends it again"
    );
}

fn filetime(md: &fs::Metadata) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    (md.mtime(), md.mtime_nsec())
}

fn set_mtime(path: &Path, (sec, nsec): (i64, i64)) {
    use rustix::fs::{AtFlags, Timespec, Timestamps, CWD};
    let ts = Timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    let times = Timestamps {
        last_access: ts,
        last_modification: ts,
    };
    rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}
