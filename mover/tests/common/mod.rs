//! Shared helpers for the mover integration tests: building a tree full of edge cases,
//! comparing two trees by lstat metadata and contents, and running the `mover` binary.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, FileExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, FileType, Gid, Mode, Timespec, Timestamps, Uid, CWD};
use serde_json::Value;
use tempfile::TempDir;

pub mod attempts;
mod compare;
pub mod proxy;
mod run;
pub mod users;
pub mod wire;
pub use compare::*;
pub use run::*;

pub const KIB: usize = 1024;
pub const MIB: usize = 1024 * 1024;

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Deterministic pseudo-random bytes (BLAKE3 XOF keyed by `seed`).
pub fn random_bytes(seed: &str, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    blake3::Hasher::new()
        .update(seed.as_bytes())
        .finalize_xof()
        .fill(&mut out);
    out
}

/// Panics with the operation and path when an fs call fails.
fn check<T>(r: std::io::Result<T>, op: &str, path: &Path) -> T {
    r.unwrap_or_else(|e| panic!("{op} {}: {e}", path.display()))
}

pub fn write_file(path: &Path, data: &[u8], mode: u32) {
    check(fs::write(path, data), "write", path);
    set_mode(path, mode);
}

pub fn mkdirs(path: &Path) {
    check(fs::create_dir_all(path), "mkdir", path);
}

/// chmod (follows symlinks: never call it on a symlink).
pub fn set_mode(path: &Path, mode: u32) {
    check(
        fs::set_permissions(path, fs::Permissions::from_mode(mode)),
        "chmod",
        path,
    );
}

/// Sets atime and mtime of `path` without following a final symlink.
pub fn set_mtime(path: &Path, sec: i64, nsec: i64) {
    let ts = Timespec {
        tv_sec: sec,
        tv_nsec: nsec as _,
    };
    let times = Timestamps {
        last_access: ts,
        last_modification: ts,
    };
    let r = rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW);
    check(r.map_err(Into::into), "utimensat", path);
}

pub fn lchown(path: &Path, uid: u32, gid: u32) {
    let (u, g) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
    let r = rustix::fs::chownat(CWD, path, u, g, AtFlags::SYMLINK_NOFOLLOW);
    check(r.map_err(Into::into), "lchown", path);
}

pub fn ln_s(target: impl AsRef<OsStr>, link: &Path) {
    check(symlink(target.as_ref(), link), "symlink", link);
}

pub fn hard_link(orig: &Path, link: &Path) {
    check(fs::hard_link(orig, link), "link", link);
}

fn mknod(path: &Path, ft: FileType, mode: u32, dev: u64) -> rustix::io::Result<()> {
    rustix::fs::mknodat(CWD, path, ft, Mode::from_raw_mode(mode), dev)
}

pub fn mkfifo(path: &Path, mode: u32) {
    check(
        mknod(path, FileType::Fifo, mode, 0).map_err(Into::into),
        "mkfifo",
        path,
    );
}

/// A temporary directory that, when dropped, first makes its read-only directories writable so
/// that the cleanup also works when not running as root.
pub struct Scratch(Option<TempDir>);

pub fn scratch() -> Scratch {
    Scratch(Some(TempDir::new().unwrap()))
}

impl Scratch {
    pub fn path(&self) -> &Path {
        self.0.as_ref().unwrap().path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !is_root() && fs::symlink_metadata(self.path()).is_ok() {
            for (_, abs, md) in walk(self.path()) {
                if md.is_dir() {
                    let _ = fs::set_permissions(&abs, fs::Permissions::from_mode(0o700));
                }
            }
        }
        drop(self.0.take());
    }
}

/// Builds a tree exercising every kind of entry and metadata the mover must preserve.
/// `root` is created if missing. All mtimes (files, dirs, symlinks, root) are set explicitly
/// with non-zero nanoseconds, so two builds produce identical metadata (except inode numbers).
pub fn build_tricky_tree(root: &Path) {
    let p = |rel: &str| root.join(rel);
    let dirs = [
        "links",
        "hard/a",
        "hard/b",
        "special",
        "owned",
        "dirs/empty",
    ];
    let dirs2 = [
        "dirs/nested-empty/a/b/c",
        "dirs/private",
        "dirs/readonly-dir/sub",
    ];
    let dirs3 = ["dirs/setgid", "dirs/sticky", "dirs/to-be-file", "names"];
    for d in dirs.iter().chain(&dirs2).chain(&dirs3) {
        mkdirs(&p(d));
    }
    // Regular files of various sizes and permissions (special modes are applied at the end).
    let files: [(&str, &[u8], u32); 16] = [
        ("empty.txt", b"", 0o644),
        ("one-byte", b"x", 0o600),
        ("medium.bin", &random_bytes("medium", 100 * KIB), 0o644),
        ("big.bin", &random_bytes("big", 3 * MIB), 0o644),
        ("script.sh", b"#!/bin/sh\necho hi\n", 0o755),
        ("readonly.txt", b"read only\n", 0o644),
        ("setuid-prog", b"not really a program\n", 0o644),
        ("hard/a/one", b"three names, one inode\n", 0o644),
        ("hard/pair-1", &random_bytes("pair", 10 * KIB), 0o600),
        ("dirs/private/secret", b"secret\n", 0o600),
        ("dirs/readonly-dir/f1", b"f1\n", 0o644),
        ("dirs/readonly-dir/f2", b"f2\n", 0o444),
        ("dirs/readonly-dir/sub/f3", b"f3\n", 0o644),
        ("dirs/setgid/file", b"in setgid dir\n", 0o664),
        ("dirs/sticky/file", b"in sticky dir\n", 0o666),
        ("dirs/to-be-file/inner", b"inner\n", 0o644),
    ];
    for (rel, data, mode) in files {
        write_file(&p(rel), data, mode);
    }
    // Sparse file: 8 MiB apparent size, data only in two 4 KiB regions.
    let sparse = check(fs::File::create(p("sparse.img")), "create", root);
    sparse.set_len(8 * MIB as u64).unwrap();
    sparse
        .write_all_at(&random_bytes("s1", 4 * KIB), MIB as u64)
        .unwrap();
    sparse
        .write_all_at(&random_bytes("s2", 4 * KIB), 6 * MIB as u64)
        .unwrap();
    set_mode(&p("sparse.img"), 0o640);
    // Dense runs of zeros, which `-S` turns into holes on the destination.
    let mut mixed = random_bytes("m1", 100 * KIB);
    mixed.extend(vec![0u8; 2 * MIB]);
    mixed.extend(random_bytes("m2", 100 * KIB));
    write_file(&p("zeros-dense.img"), &vec![0u8; 2 * MIB], 0o644);
    write_file(&p("zeros-mixed.img"), &mixed, 0o644);
    // Symlinks: relative, absolute to outside the tree, dangling, to a directory, non-UTF-8.
    ln_s("../medium.bin", &p("links/rel"));
    ln_s("/etc/passwd", &p("links/abs-outside"));
    ln_s("does/not/exist", &p("links/dangling"));
    ln_s("../dirs/private", &p("links/to-dir"));
    ln_s(
        OsStr::from_bytes(b"../names/caf\xe9"),
        &p("links/non-utf8-target"),
    );
    // Hard links: a group of three names across two directories, and a pair.
    hard_link(&p("hard/a/one"), &p("hard/a/two"));
    hard_link(&p("hard/a/one"), &p("hard/b/three"));
    hard_link(&p("hard/pair-1"), &p("hard/pair-2"));
    // Special files: a FIFO, and (root only, where permitted) a char device like /dev/null.
    mkfifo(&p("special/fifo"), 0o640);
    if is_root() {
        let dev = rustix::fs::makedev(1, 3);
        if let Err(e) = mknod(
            &p("special/null-dev"),
            FileType::CharacterDevice,
            0o600,
            dev,
        ) {
            eprintln!("note: cannot create a device node ({e}); leaving it out");
        }
    }
    // Awkward names: non-UTF-8 (file and directory), space, newline, unicode, glob characters.
    let names = p("names");
    write_file(
        &names.join(OsStr::from_bytes(b"caf\xe9")),
        b"latin-1\n",
        0o644,
    );
    let bad_dir = names.join(OsStr::from_bytes(b"dir\xff\xfe"));
    mkdirs(&bad_dir);
    write_file(&bad_dir.join("x"), b"inside a non-UTF-8 dir\n", 0o644);
    for n in [
        "with space.txt",
        "new\nline",
        "ünïcødé-日本語.txt",
        "-dash",
        "back\\slash*?[x]",
    ] {
        write_file(&names.join(n), n.as_bytes(), 0o644);
    }
    // Deep path: 40 nested directories.
    let deep: PathBuf = std::iter::once("deep".to_string())
        .chain((0..40).map(|i| format!("d{i:02}")))
        .collect();
    mkdirs(&root.join(&deep));
    write_file(&root.join(&deep).join("leaf.txt"), b"deep leaf\n", 0o644);
    // Odd numeric owners (root only), before the chmods below since chown may clear set[ug]id.
    if is_root() {
        write_file(&p("owned/f-1234-5678"), b"owned\n", 0o640);
        mkdirs(&p("owned/d-0-4321"));
        write_file(&p("owned/d-0-4321/inner"), b"inner\n", 0o644);
        ln_s("f-1234-5678", &p("owned/l-1234-5678"));
        lchown(&p("owned/f-1234-5678"), 1234, 5678);
        lchown(&p("owned/d-0-4321"), 0, 4321);
        lchown(&p("owned/d-0-4321/inner"), 4321, 0);
        lchown(&p("owned/l-1234-5678"), 1234, 5678);
    }
    // Final modes (directories once they are filled).
    let modes = [
        ("readonly.txt", 0o444),
        ("setuid-prog", 0o4755),
        ("dirs/private", 0o700),
        ("dirs/setgid", 0o2775),
        ("dirs/sticky", 0o1777),
        ("dirs/readonly-dir", 0o555),
        ("", 0o755),
    ];
    for (rel, mode) in modes {
        set_mode(&p(rel), mode);
    }
    set_tree_mtimes(root);
    // Edge-case timestamps: before 1970, after 2038, and 1 ns after the epoch (a directory).
    mkdirs(&p("times/epoch-dir"));
    write_file(&p("times/pre-1970"), b"old\n", 0o644);
    write_file(&p("times/y2100"), b"future\n", 0o644);
    set_mtime(&p("times/pre-1970"), -1_000_000, 500_000_000);
    set_mtime(&p("times/y2100"), 4_102_444_800, 7);
    set_mtime(&p("times/epoch-dir"), 0, 1);
    set_mtime(&p("times"), 1_234_567_890, 123_456_789);
    set_mtime(root, 1_600_000_000, 999_999_999);
}

/// Sets a deterministic mtime (derived from the relative path, non-zero nanoseconds) on every
/// entry under `root`, children before parents, symlinks themselves rather than their targets.
pub fn set_tree_mtimes(root: &Path) {
    for (rel, abs, _) in walk(root).into_iter().rev() {
        let h = blake3::hash(&rel);
        let n = |i: usize| {
            i64::from(u32::from_le_bytes(
                h.as_bytes()[i..i + 4].try_into().unwrap(),
            ))
        };
        set_mtime(
            &abs,
            1_500_000_000 + n(0) % 200_000_000,
            1 + n(4) % 999_999_998,
        );
    }
}
