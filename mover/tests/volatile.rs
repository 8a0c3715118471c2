//! Sources that change under the sender: files that vanish or keep changing
//! while they are read are reported, the session completes with exit code 24,
//! and the destination never holds a half-written file.

mod common;

use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;

const KIB: usize = 1024;

#[test]
fn files_that_vanish_before_they_are_read_are_reported() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    for i in 0..40 {
        write_file(
            &src.join(format!("f{i:02}")),
            &random_bytes(&format!("v{i}"), 1024 * KIB),
            0o644,
        );
    }
    // The list goes out at once, the data at 8 MiB/s: when the last ten files
    // are deleted, the sender has read at most its queues' worth (~10 MiB).
    let receiver = spawn_receiver(&dst, &[]);
    let mut sender = spawn_sender(receiver.addr, &src, &["--bwlimit", "8M"]);
    // Once data arrives the whole list has been sent (it goes out first, in one
    // batch); the sender is then still far from the last files.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fs::read_dir(&dst).map_or(0, |d| d.count()) == 0 {
        assert!(std::time::Instant::now() < deadline, "no data arrived");
        std::thread::sleep(Duration::from_millis(10));
    }
    for i in 30..40 {
        fs::remove_file(src.join(format!("f{i:02}"))).unwrap();
    }
    let s = sender.wait(Duration::from_secs(60));
    let r = receiver.wait(Duration::from_secs(10));
    assert_eq!(s.code, Some(24), "sender: {}", s.describe());
    assert_eq!(r.code, Some(24), "receiver: {}", r.describe());
    assert_eq!(s.stat("files_vanished"), 10, "{}", s.describe());
    assert!(r.stderr.contains("vanished"), "{}", r.describe());
    for i in 0..30 {
        let name = format!("f{i:02}");
        assert_eq!(
            fs::read(dst.join(&name)).unwrap(),
            fs::read(src.join(&name)).unwrap(),
            "{name}"
        );
    }
    for i in 30..40 {
        assert!(!dst.join(format!("f{i:02}")).exists());
    }
    let leftovers: Vec<_> = fs::read_dir(&dst)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".volmig-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn a_file_that_keeps_changing_is_flagged_and_never_half_written() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    let busy = src.join("busy.log");
    write_file(&busy, &random_bytes("busy", 16 * 1024 * KIB), 0o644);
    write_file(&src.join("calm"), b"calm", 0o644);
    mkdirs(&dst);
    write_file(&dst.join("busy.log"), b"previous version", 0o644);

    // Keep changing the file's mtime while the transfer runs: every read of
    // it sees a different file at the end than at the start.
    let stop = Arc::new(AtomicBool::new(false));
    let toucher = {
        let (stop, busy) = (stop.clone(), busy.clone());
        std::thread::spawn(move || {
            let mut n = 0i64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                set_mtime(&busy, 1_000_000 + n, 0);
            }
        })
    };
    let out = run_mover([
        std::ffi::OsStr::new("sync"),
        src.as_os_str(),
        dst.as_os_str(),
    ]);
    stop.store(true, Ordering::Relaxed);
    toucher.join().unwrap();

    assert_eq!(out.code, Some(24), "{}", out.describe());
    assert_eq!(out.stat("files_changed"), 1, "{}", out.describe());
    assert!(
        out.stderr.contains("busy.log") && out.stderr.contains("changed while it was read"),
        "{}",
        out.describe()
    );
    assert_eq!(
        fs::read(dst.join("busy.log")).unwrap(),
        b"previous version",
        "the old copy stays whole"
    );
    assert_eq!(fs::read(dst.join("calm")).unwrap(), b"calm");
}
