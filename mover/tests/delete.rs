//! `--delete` with the real binaries, where the destination is not an
//! ordinary tree: a mount point the source no longer has (a tmpfs, a bind
//! mount) is not entered, what is mounted there keeps its contents, and the
//! receiver reports it as an entry it could not delete; read-only
//! directories are emptied by a receiver without root's capabilities.
//! Mounting and changing users need root: without it these tests say so
//! and pass.

mod common;

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::users::{as_nobody, NOBODY};
use common::*;

/// A file system mounted for a test, unmounted (lazily) when dropped:
/// before the scratch directory, whose removal would reach into it.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Mounts with `mount ARGS... AT`, or says why this test cannot run here.
fn mount(args: &[&Path], at: &Path) -> Option<Mounted> {
    if !is_root() {
        eprintln!("skipped: mounting a file system needs root");
        return None;
    }
    match Command::new("mount").args(args).arg(at).status() {
        Ok(status) if status.success() => Some(Mounted(at.to_path_buf())),
        other => {
            eprintln!("skipped: cannot mount here ({other:?})");
            None
        }
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn delete_keeps_what_is_mounted_below_the_destination() {
    let tmp = scratch();
    let p = |name: &str| tmp.path().join(name);
    let (src, dst, elsewhere, outside) = (p("src"), p("dst"), p("elsewhere"), p("outside"));
    mkdirs(&src.join("sub"));
    write_file(&src.join("kept.txt"), b"kept\n", 0o644);
    write_file(&src.join("sub/f"), b"f\n", 0o644);
    set_tree_mtimes(&src);
    mkdirs(&dst);
    tcp_transfer_ok(&src, &dst, &[]);

    // Entries the source does not have: ordinary ones, which go...
    write_file(&dst.join("extra.txt"), b"x", 0o644);
    mkdirs(&dst.join("old/deeper"));
    write_file(&dst.join("old/junk"), b"j", 0o644);
    write_file(&dst.join("old/deeper/junk"), b"j", 0o644);
    write_file(&dst.join("old/data.keep"), b"excluded", 0o644);
    mkdirs(&dst.join("ro"));
    write_file(&dst.join("ro/g"), b"g", 0o644);
    set_mode(&dst.join("ro"), 0o555);
    // ...a link out of the destination, removed and not followed...
    mkdirs(&outside.join("d"));
    write_file(&outside.join("d/secret"), b"s", 0o644);
    ln_s(&outside, &dst.join("escape"));
    ln_s("../../outside/d", &dst.join("sub/escape-dir"));
    // ...and mount points: a tmpfs two levels down, a bind mount of the same
    // file system (same device) at the top, a file bind-mounted over a file.
    mkdirs(&dst.join("gone/mnt"));
    write_file(&dst.join("gone/other"), b"o", 0o644);
    mkdirs(&dst.join("bound"));
    mkdirs(&elsewhere.join("inner"));
    write_file(&elsewhere.join("precious"), b"p", 0o644);
    write_file(&elsewhere.join("inner/deep"), b"d", 0o644);
    write_file(&dst.join("file-mount"), b"", 0o644);
    write_file(&p("file-source"), b"file source", 0o644);
    let tmpfs = [
        Path::new("-t"),
        Path::new("tmpfs"),
        Path::new("volmig-test"),
    ];
    let Some(_tmpfs) = mount(&tmpfs, &dst.join("gone/mnt")) else {
        return;
    };
    let bind = |from: &Path, to: &Path| mount(&[Path::new("--bind"), from], to);
    let (Some(_bound), Some(_file)) = (
        bind(&elsewhere, &dst.join("bound")),
        bind(&p("file-source"), &dst.join("file-mount")),
    ) else {
        return;
    };
    mkdirs(&dst.join("gone/mnt/sub"));
    write_file(&dst.join("gone/mnt/inside"), b"i", 0o644);
    write_file(&dst.join("gone/mnt/sub/inside"), b"i", 0o644);

    let (sent, received) = tcp_transfer(&src, &dst, &["--delete", "--exclude", "*.keep"], &[]);
    let both = format!("{}\n{}", sent.describe(), received.describe());
    assert_eq!(received.code, Some(23), "{both}");

    // What is mounted is kept, whole, and each mount point is reported.
    assert_eq!(names(&dst.join("gone/mnt")), ["inside", "sub"], "{both}");
    assert_eq!(names(&dst.join("gone/mnt/sub")), ["inside"], "{both}");
    assert_eq!(names(&elsewhere), ["inner", "precious"], "{both}");
    assert_eq!(names(&elsewhere.join("inner")), ["deep"], "{both}");
    assert_eq!(fs::read(p("file-source")).unwrap(), b"file source");
    for line in [
        "mover: deleting gone/mnt: is a mount point: not entered, \
         what is mounted there is kept\n",
        "mover: deleting bound: is a mount point: not entered, \
         what is mounted there is kept\n",
        "mover: deleting file-mount: Device or resource busy (os error 16)\n",
    ] {
        assert!(received.stderr.contains(line), "{line:?} not said: {both}");
    }
    assert_eq!(received.stat("files_failed"), 3, "{both}");
    // Everything else went as before: extra.txt old/junk old/deeper
    // old/deeper/junk ro ro/g escape sub/escape-dir gone/other. "old" stays
    // for its excluded name and "gone" for its mount point, uncounted and
    // unreported.
    assert_eq!(received.stat("deleted"), 9, "{both}");
    assert_eq!(
        names(&dst),
        ["bound", "file-mount", "gone", "kept.txt", "old", "sub"],
        "{both}"
    );
    assert_eq!(names(&dst.join("old")), ["data.keep"]);
    assert_eq!(names(&dst.join("gone")), ["mnt"]);
    assert_eq!(names(&dst.join("sub")), ["f"]);
    assert_eq!(names(&outside.join("d")), ["secret"]);
    assert!(!received.stderr.contains("deleting gone:"), "{both}");
    assert!(!received.stderr.contains("deleting old:"), "{both}");
}

/// Without root's capabilities, read-only and closed directories are
/// opened up to be emptied, one that stays for an excluded name gets its
/// mode back, and another user's entries are reported, not deleted.
#[test]
fn delete_without_capabilities_opens_up_its_own_directories_only() {
    let Some(mut cmd) = as_nobody() else {
        return;
    };
    let tmp = scratch();
    set_mode(tmp.path(), 0o755);
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    write_file(&src.join("a.txt"), b"a\n", 0o644);
    for dir in ["ro", "closed", "stays", "foreign", "foreign-ro"] {
        mkdirs(&dst.join(dir));
        write_file(&dst.join(dir).join("f"), b"f", 0o644);
    }
    write_file(&dst.join("stays/data.keep"), b"k", 0o644);
    for (_, path, _) in walk(&dst) {
        if !path.starts_with(dst.join("foreign")) && !path.starts_with(dst.join("foreign-ro")) {
            lchown(&path, NOBODY, NOBODY);
        }
    }
    lchown(&dst, NOBODY, NOBODY);
    set_mode(&dst.join("ro"), 0o555);
    set_mode(&dst.join("closed"), 0o000);
    set_mode(&dst.join("stays"), 0o555);
    set_mode(&dst.join("foreign-ro"), 0o555);

    cmd.extend([MOVER, "sync", "--delete", "--exclude", "*.keep"].map(OsString::from));
    cmd.extend([src.into_os_string(), dst.clone().into_os_string()]);
    let out = Proc::spawn_program(&cmd[0], &cmd[1..]).wait(RUN_TIMEOUT);
    let said = out.describe();
    assert_eq!(out.code, Some(23), "{said}");
    // ro ro/f closed closed/f stays/f
    assert_eq!(out.stat("deleted"), 5, "{said}");
    assert_eq!(out.stat("files_failed"), 2, "{said}");
    for line in [
        "mover: deleting foreign/f: Permission denied (os error 13)\n",
        "mover: deleting foreign-ro: Operation not permitted (os error 1)\n",
    ] {
        assert!(out.stderr.contains(line), "{line:?} not said: {said}");
    }
    assert_eq!(
        names(&dst),
        ["a.txt", "foreign", "foreign-ro", "stays"],
        "{said}"
    );
    assert_eq!(names(&dst.join("stays")), ["data.keep"]);
    let mode = |dir: &str| fs::metadata(dst.join(dir)).unwrap().mode() & 0o7777;
    assert_eq!((mode("stays"), mode("foreign-ro")), (0o555, 0o555));
    assert_eq!(names(&dst.join("foreign")), ["f"]);
    assert_eq!(names(&dst.join("foreign-ro")), ["f"]);
}
