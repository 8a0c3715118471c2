//! `mover receive --wipe`, with the real binary: the destination is emptied
//! once, before the receiver listens, and a wipe that cannot finish fails the
//! receiver for good (exit 11, not retryable) without serving a session.

mod common;

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::users::{as_nobody, NOBODY};
use common::*;
use mover::manifest::{Manifest, ManifestOptions};
use serde_json::{json, Value};

fn assert_manifests_equal(src: &Path, dst: &Path) {
    let opts = ManifestOptions::default();
    let (a, b) = (Manifest::of(src, opts), Manifest::of(dst, opts));
    assert_eq!(a.unwrap().lines, b.unwrap().lines, "source and destination");
}

fn is_empty(dir: &Path) -> bool {
    fs::read_dir(dir).unwrap().next().is_none()
}

/// Summary lines that report a wipe.
fn wipes(out: &Output) -> Vec<Value> {
    let summaries = out
        .json_lines()
        .into_iter()
        .filter(|v| v["event"] == "summary");
    summaries.filter_map(|v| v.get("wiped").cloned()).collect()
}

#[test]
fn a_wiped_destination_becomes_the_source() {
    let tmp = scratch();
    let (src, dst, outside) = (
        tmp.path().join("src"),
        tmp.path().join("dst"),
        tmp.path().join("outside"),
    );
    mkdirs(&src.join("sub"));
    write_file(&src.join("a.txt"), b"new a\n", 0o644);
    write_file(&src.join("sub/b.bin"), &random_bytes("b", 64 * KIB), 0o600);
    ln_s("../a.txt", &src.join("sub/link"));
    set_tree_mtimes(&src);
    // Stale data that a transfer without --delete would keep, a checkpoint
    // that would otherwise be read, a leftover temporary file, a read-only
    // directory, and a link out of the destination.
    mkdirs(&dst.join("old/deep"));
    write_file(&dst.join("a.txt"), b"stale a, longer\n", 0o644);
    write_file(&dst.join("old/deep/c"), &[0; 1000], 0o644);
    write_file(&dst.join("sub"), b"a file where a dir goes\n", 0o644);
    mkdirs(&dst.join(".volmig"));
    write_file(&dst.join(".volmig/checkpoint"), b"{not json", 0o600);
    write_file(&dst.join(".volmig-a.txt.0123abcd-1.tmp"), b"part", 0o600);
    set_mode(&dst.join("old"), 0o555);
    mkdirs(&outside);
    write_file(&outside.join("kept"), b"kept", 0o644);
    ln_s(&outside, &dst.join("escape"));

    let receiver = spawn_receiver(&dst, &["--wipe"]);
    // The address is written once the wipe is done.
    assert!(is_empty(&dst), "not wiped before listening");
    let sent = run_sender(receiver.addr, &src, &[]);
    let received = receiver.wait(Duration::from_secs(30));
    sent.assert_ok();
    received.assert_ok();

    assert_manifests_equal(&src, &dst);
    assert_eq!(fs::read(outside.join("kept")).unwrap(), b"kept");
    // a.txt old old/deep old/deep/c sub .volmig .volmig/checkpoint, the
    // temporary file, escape; 16 + 1000 + 24 + 9 + 4 bytes.
    assert_eq!(wipes(&received), [json!({"entries": 9, "bytes": 1053})]);
    assert!(
        received
            .stderr
            .contains("mover: wiped the destination: 9 entries, 1053 bytes\n"),
        "{}",
        received.describe()
    );
    // The plugin reads the summary line as a `Summary` (kubectl-volmig's
    // driver/logs.rs): the added field must not stop it.
    let read = serde_json::from_value::<mover::stats::Summary>(received.summary());
    assert_eq!(read.unwrap().files_total, 2);
    // The sender's summary is the receiver's as sent, which has no wipe.
    assert!(wipes(&sent).is_empty(), "{}", sent.describe());
}

#[test]
fn a_receiver_that_keeps_serving_wipes_only_before_its_first_session() {
    let tmp = scratch();
    let (one, two, dst) = (
        tmp.path().join("one"),
        tmp.path().join("two"),
        tmp.path().join("dst"),
    );
    for dir in [&one, &two, &dst] {
        mkdirs(dir);
    }
    write_file(&one.join("first"), b"1", 0o644);
    write_file(&two.join("second"), b"2", 0o644);
    write_file(&dst.join("stale"), b"old", 0o644);
    let receiver = spawn_receiver(&dst, &["--wipe", "--keep-serving"]);
    run_sender(receiver.addr, &one, &[]).assert_ok();
    run_sender(receiver.addr, &two, &[]).assert_ok();
    receiver.proc.terminate();
    let received = receiver.wait(Duration::from_secs(30));
    assert_eq!(received.code, Some(20), "{}", received.describe());
    // Without --delete, the second session adds to what the first wrote.
    let mut names: Vec<_> = fs::read_dir(&dst)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["first", "second"]);
    let summaries: Vec<Value> = received
        .json_lines()
        .into_iter()
        .filter(|v| v["event"] == "summary")
        .collect();
    assert_eq!(summaries.len(), 3, "{}", received.describe());
    assert_eq!(summaries[0]["wiped"], json!({"entries": 1, "bytes": 3}));
    assert_eq!(wipes(&received).len(), 1, "{}", received.describe());
}

/// `TMP/volume/data`, created: the volume (where the address file goes) is
/// nobody's, as the data directory will be.
fn volume(tmp: &Path) -> std::path::PathBuf {
    set_mode(tmp, 0o755);
    let volume = tmp.join("volume");
    mkdirs(&volume.join("data"));
    lchown(&volume, NOBODY, NOBODY);
    volume.join("data")
}

/// `mover receive --wipe` as `prefix` (a `setpriv` command) into `dst`; the
/// address file is `dst`'s sibling `addr`.
fn receive_as(prefix: &[OsString], dst: &Path) -> Proc {
    let mut args = prefix.to_vec();
    args.extend(
        [
            MOVER,
            "receive",
            "--wipe",
            "--insecure",
            "--listen",
            "127.0.0.1:0",
        ]
        .map(OsString::from),
    );
    args.extend(["--root".into(), dst.into(), "--addr-file".into()]);
    args.push(dst.with_file_name("addr").into());
    Proc::spawn_program(&args[0], &args[1..])
}

/// Without root's capabilities, the receiver opens up the read-only
/// directories it owns (the root included) to empty them, and the root
/// gets its mode back.
#[test]
fn an_unprivileged_receiver_wipes_read_only_directories() {
    let Some(prefix) = as_nobody() else {
        return;
    };
    let tmp = scratch();
    let dst = volume(tmp.path());
    mkdirs(&dst.join("ro/closed"));
    write_file(&dst.join("ro/f"), b"f", 0o444);
    write_file(&dst.join("ro/closed/g"), b"gg", 0o644);
    for (_, path, _) in walk(&dst) {
        lchown(&path, NOBODY, NOBODY);
    }
    set_mode(&dst.join("ro/closed"), 0o000);
    set_mode(&dst.join("ro"), 0o555);
    set_mode(&dst, 0o555);
    let mut receiver = receive_as(&prefix, &dst);
    let addr = dst.with_file_name("addr");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !addr.exists() && !receiver.exited() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    receiver.terminate();
    let out = receiver.wait(Duration::from_secs(30));
    assert_eq!(out.code, Some(20), "{}", out.describe());
    assert!(is_empty(&dst), "{}", out.describe());
    assert_eq!(fs::metadata(&dst).unwrap().mode() & 0o7777, 0o555);
    assert_eq!(wipes(&out), [json!({"entries": 4, "bytes": 3})]);
}

/// An entry the receiver may not remove (here another user's, the
/// deterministic stand-in for a busy mount point or an immutable file):
/// exit 11, not retryable, naming it, and no session is served.
#[test]
fn an_entry_the_receiver_cannot_remove_fails_it_before_it_listens() {
    let Some(prefix) = as_nobody() else {
        return;
    };
    let tmp = scratch();
    let dst = volume(tmp.path());
    mkdirs(&dst.join("foreign"));
    write_file(&dst.join("foreign/file"), b"f", 0o644);
    // The destination is nobody's; "foreign" stays root's (0755).
    lchown(&dst, NOBODY, NOBODY);
    let out = receive_as(&prefix, &dst).wait(Duration::from_secs(30));
    assert_eq!(out.code, Some(11), "{}", out.describe());
    let summary = out.summary();
    let error = "cannot wipe the destination: cannot remove foreign/file: \
                 Permission denied (os error 13)";
    assert_eq!(summary["error"], error, "{}", out.describe());
    assert_eq!(summary["retryable"], false);
    assert!(out.stderr.contains(&format!("mover: error: {error}")));
    assert!(!out.stderr.contains("listening"), "{}", out.describe());
    assert!(!dst.with_file_name("addr").exists());
    assert!(dst.join("foreign/file").exists());
}
