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

/// Pre-order walk (lstat only, sorted by name) returning (relative path bytes, absolute path,
/// metadata); the root itself comes first with an empty relative path.
pub fn walk(root: &Path) -> Vec<(Vec<u8>, PathBuf, fs::Metadata)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(abs) = stack.pop() {
        let md = check(fs::symlink_metadata(&abs), "lstat", &abs);
        if md.is_dir() {
            let entries = check(fs::read_dir(&abs), "read_dir", &abs);
            let mut children: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
            children.sort_by(|a, b| b.cmp(a)); // reversed: popped in ascending order
            stack.extend(children);
        }
        let rel = abs
            .strip_prefix(root)
            .unwrap()
            .as_os_str()
            .as_bytes()
            .to_vec();
        out.push((rel, abs, md));
    }
    out
}

/// Fewer than half of the apparent size is allocated (st_blocks * 512 < st_size / 2).
pub fn is_sparse(path: &Path) -> bool {
    sparse_md(&check(fs::symlink_metadata(path), "lstat", path))
}

fn sparse_md(md: &fs::Metadata) -> bool {
    md.blocks() * 512 < md.size() / 2
}

/// Human-readable rendering of a relative path given as bytes (escapes newlines, bad UTF-8).
pub fn show(rel: &[u8]) -> String {
    if rel.is_empty() {
        ".".to_string()
    } else {
        format!("{:?}", OsStr::from_bytes(rel))
    }
}

#[derive(Debug, Clone, Copy)]
pub struct CompareOpts {
    /// Ignore the mtime of the two roots themselves.
    pub skip_root_mtime: bool,
    /// Compare uid/gid; defaults to "running as root".
    pub check_owner: bool,
}

impl Default for CompareOpts {
    fn default() -> Self {
        CompareOpts {
            skip_root_mtime: false,
            check_owner: is_root(),
        }
    }
}

struct Entry {
    kind: &'static str,
    md: fs::Metadata,
    hash: Option<blake3::Hash>,
    target: Option<PathBuf>,
}

fn kind_of(ft: fs::FileType) -> &'static str {
    let kinds = [
        (ft.is_symlink(), "symlink"),
        (ft.is_dir(), "directory"),
        (ft.is_file(), "regular file"),
        (ft.is_fifo(), "fifo"),
        (ft.is_char_device(), "char device"),
        (ft.is_block_device(), "block device"),
        (ft.is_socket(), "socket"),
    ];
    kinds.iter().find(|k| k.0).map_or("unknown", |k| k.1)
}

fn scan(root: &Path) -> BTreeMap<Vec<u8>, Entry> {
    let mut map = BTreeMap::new();
    for (rel, abs, md) in walk(root) {
        let kind = kind_of(md.file_type());
        let hash = (kind == "regular file").then(|| {
            let f = check(fs::File::open(&abs), "open", &abs);
            blake3::Hasher::new().update_reader(f).unwrap().finalize()
        });
        let target = md
            .is_symlink()
            .then(|| check(fs::read_link(&abs), "readlink", &abs));
        map.insert(
            rel,
            Entry {
                kind,
                md,
                hash,
                target,
            },
        );
    }
    map
}

/// Compares everything (see [`compare_trees_opts`]) including the roots' mtimes.
pub fn compare_trees(a: &Path, b: &Path) -> Vec<String> {
    compare_trees_opts(a, b, CompareOpts::default())
}

/// Walks both trees with lstat and lists every difference ("A" is `a`, "B" is `b`):
/// paths, file types, mode & 0o7777, uid/gid (when `check_owner`), mtime sec+nsec for every
/// entry, size + BLAKE3 of regular files, sparseness of regular files >= 1 MiB (sparse in A
/// implies sparse in B), symlink targets, device numbers and hard-link structure.
pub fn compare_trees_opts(a: &Path, b: &Path, opts: CompareOpts) -> Vec<String> {
    let (ta, tb) = (scan(a), scan(b));
    let mut diffs = Vec::new();
    for (rel, e) in ta.iter().filter(|(k, _)| !tb.contains_key(*k)) {
        diffs.push(format!("{}: only in A ({})", show(rel), e.kind));
    }
    for (rel, e) in tb.iter().filter(|(k, _)| !ta.contains_key(*k)) {
        diffs.push(format!("{}: only in B ({})", show(rel), e.kind));
    }
    for (rel, x) in &ta {
        let Some(y) = tb.get(rel) else { continue };
        let mut d = |what: String| diffs.push(format!("{}: {what}", show(rel)));
        let (m, n) = (&x.md, &y.md);
        if x.kind != y.kind {
            d(format!("type {} in A, {} in B", x.kind, y.kind));
            continue;
        }
        if m.mode() & 0o7777 != n.mode() & 0o7777 {
            d(format!(
                "mode {:04o} in A, {:04o} in B",
                m.mode() & 0o7777,
                n.mode() & 0o7777
            ));
        }
        if opts.check_owner && (m.uid(), m.gid()) != (n.uid(), n.gid()) {
            d(format!(
                "owner {}:{} in A, {}:{} in B",
                m.uid(),
                m.gid(),
                n.uid(),
                n.gid()
            ));
        }
        let (ta, tb) = ((m.mtime(), m.mtime_nsec()), (n.mtime(), n.mtime_nsec()));
        if ta != tb && !(rel.is_empty() && opts.skip_root_mtime) {
            d(format!(
                "mtime {}.{:09} in A, {}.{:09} in B",
                ta.0, ta.1, tb.0, tb.1
            ));
        }
        if x.kind == "regular file" && m.size() != n.size() {
            d(format!("size {} in A, {} in B", m.size(), n.size()));
        } else if x.hash != y.hash {
            d("contents differ (BLAKE3)".to_string());
        }
        if x.kind == "regular file" && m.size() >= MIB as u64 && sparse_md(m) && !sparse_md(n) {
            d("sparse in A, not sparse in B".to_string());
        }
        if x.target != y.target {
            let t = |e: &Entry| {
                show(
                    e.target
                        .as_deref()
                        .unwrap_or(Path::new(""))
                        .as_os_str()
                        .as_bytes(),
                )
            };
            d(format!("symlink target {} in A, {} in B", t(x), t(y)));
        }
        if x.kind.ends_with("device") && m.rdev() != n.rdev() {
            d(format!(
                "device number {:#x} in A, {:#x} in B",
                m.rdev(),
                n.rdev()
            ));
        }
    }
    diffs.extend(compare_hard_links(&ta, &tb));
    diffs
}

/// For each non-directory path present in both trees, the set of common paths sharing its inode
/// must be the same in both trees.
fn compare_hard_links(ta: &BTreeMap<Vec<u8>, Entry>, tb: &BTreeMap<Vec<u8>, Entry>) -> Vec<String> {
    let is_dir = |e: Option<&Entry>| e.is_none_or(|e| e.kind == "directory");
    let common: Vec<&Vec<u8>> = ta
        .keys()
        .filter(|k| !is_dir(ta.get(*k)) && !is_dir(tb.get(*k)))
        .collect();
    let inode = |e: &Entry| (e.md.dev(), e.md.ino());
    let groups = |t: &BTreeMap<Vec<u8>, Entry>| {
        let mut g: HashMap<(u64, u64), BTreeSet<Vec<u8>>> = HashMap::new();
        for k in &common {
            g.entry(inode(&t[*k])).or_default().insert((*k).clone());
        }
        g
    };
    let (ga, gb) = (groups(ta), groups(tb));
    let mut seen = BTreeSet::new();
    let mut diffs = Vec::new();
    for k in &common {
        let (sa, sb) = (&ga[&inode(&ta[*k])], &gb[&inode(&tb[*k])]);
        if sa != sb && seen.insert((sa, sb)) {
            let list =
                |s: &BTreeSet<Vec<u8>>| s.iter().map(|p| show(p)).collect::<Vec<_>>().join(", ");
            let (la, lb) = (list(sa), list(sb));
            diffs.push(format!(
                "{}: hard links differ: inode shared by [{la}] in A, by [{lb}] in B",
                show(k)
            ));
        }
    }
    diffs
}

/// Panics listing all differences if the trees differ.
pub fn assert_trees_equal(a: &Path, b: &Path, opts: CompareOpts, context: &str) {
    let diffs = compare_trees_opts(a, b, opts);
    let (n, a, b, all) = (diffs.len(), a.display(), b.display(), diffs.join("\n  "));
    assert!(
        diffs.is_empty(),
        "{context}: {n} difference(s) between A={a} and B={b}:\n  {all}"
    );
}

// ---------------------------------------------------------------------------------------------
// Running the mover.

pub const MOVER: &str = env!("CARGO_BIN_EXE_mover");
pub const RUN_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Debug)]
pub struct Output {
    pub what: String,
    /// None if killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The process did not exit in time and was killed.
    pub timed_out: bool,
}

impl Output {
    pub fn describe(&self) -> String {
        let killed = if self.timed_out {
            " (TIMED OUT, killed)"
        } else {
            ""
        };
        let (what, code, out, err) = (&self.what, self.code, &self.stdout, &self.stderr);
        let head = format!("{what}\n  exit code: {code:?}{killed}");
        format!("{head}\n  --- stdout ---\n{out}\n  --- stderr ---\n{err}")
    }

    pub fn assert_ok(&self) -> &Self {
        assert_eq!(self.code, Some(0), "command failed: {}", self.describe());
        self
    }

    /// Every non-empty stdout line parsed as JSON (panics on an invalid line).
    pub fn json_lines(&self) -> Vec<Value> {
        let parse = |l: &str| {
            let r = serde_json::from_str(l);
            r.unwrap_or_else(|e| {
                panic!("stdout line is not JSON ({e}): {l:?}\n{}", self.describe())
            })
        };
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(parse)
            .collect()
    }

    /// The last `{"event":"summary",...}` line of stdout.
    pub fn summary(&self) -> Value {
        let found = self.stdout.lines().rev().find_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v.get("event")? == "summary").then_some(v)
        });
        found.unwrap_or_else(|| panic!("no summary line on stdout: {}", self.describe()))
    }

    /// A numeric field of the summary.
    pub fn stat(&self, field: &str) -> u64 {
        let s = self.summary();
        let v = s.get(field).and_then(Value::as_u64);
        v.unwrap_or_else(|| panic!("summary has no numeric {field:?}: {s}"))
    }
}

/// A running mover process; stdout/stderr go to files (no pipe can fill up). Killed on drop.
pub struct Proc {
    what: String,
    child: Child,
    logs: TempDir,
}

impl Proc {
    pub fn spawn<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Proc {
        let logs = TempDir::new().unwrap();
        let mut cmd = Command::new(MOVER);
        cmd.args(args).stdin(Stdio::null());
        cmd.stdout(fs::File::create(logs.path().join("out")).unwrap());
        cmd.stderr(fs::File::create(logs.path().join("err")).unwrap());
        let what = format!("{cmd:?}");
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        Proc { what, child, logs }
    }

    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// SIGKILLs the process (if still running).
    pub fn kill(&mut self) {
        if !self.exited() {
            let _ = self.child.kill();
        }
    }

    /// Waits for exit; on timeout kills the process and reports `timed_out`.
    pub fn wait(&mut self, timeout: Duration) -> Output {
        let deadline = Instant::now() + timeout;
        let status = loop {
            match self.child.try_wait().unwrap() {
                Some(st) => break Some(st),
                None if Instant::now() > deadline => break None,
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let read = |f: &str| {
            String::from_utf8_lossy(&fs::read(self.logs.path().join(f)).unwrap()).into_owned()
        };
        let (stdout, stderr) = (read("out"), read("err"));
        let (what, code, timed_out) = (
            self.what.clone(),
            status.and_then(|s| s.code()),
            status.is_none(),
        );
        Output {
            what,
            code,
            stdout,
            stderr,
            timed_out,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `mover ARGS...` (bounded by [`RUN_TIMEOUT`]) and captures its output.
pub fn run_mover<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Output {
    Proc::spawn(args).wait(RUN_TIMEOUT)
}

/// A `mover receive` process listening on an ephemeral port of 127.0.0.1.
pub struct Receiver {
    pub addr: SocketAddr,
    pub proc: Proc,
    _dir: TempDir,
}

/// Spawns `mover receive --listen 127.0.0.1:0 --addr-file F --root ROOT EXTRA...` and waits
/// (at most 10 s) for the address file.
pub fn spawn_receiver(root: &Path, extra: &[&str]) -> Receiver {
    let mut args: Vec<OsString> = ["receive", "--listen", "127.0.0.1:0", "--root"]
        .map(OsString::from)
        .into();
    args.push(root.into());
    args.extend(extra.iter().map(OsString::from));
    let dir = TempDir::new().unwrap();
    let addr_file = dir.path().join("addr");
    args.extend([OsString::from("--addr-file"), addr_file.clone().into()]);
    let mut proc = Proc::spawn(&args);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = fs::read_to_string(&addr_file) {
            if !text.trim().is_empty() {
                let parsed = text.trim().parse();
                let addr =
                    parsed.unwrap_or_else(|e| panic!("bad address {text:?} in addr file: {e}"));
                return Receiver {
                    addr,
                    proc,
                    _dir: dir,
                };
            }
        }
        if proc.exited() || Instant::now() > deadline {
            let out = proc.wait(Duration::ZERO);
            panic!(
                "receiver wrote no address file (within 10 s): {}",
                out.describe()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Receiver {
    /// Waits (bounded) for the receiver to exit; kills it on timeout (`timed_out` is then set).
    pub fn wait(mut self, timeout: Duration) -> Output {
        self.proc.wait(timeout)
    }
}

/// Starts `mover send --to ADDR --root SRC EXTRA...`.
pub fn spawn_sender(addr: SocketAddr, src: &Path, extra: &[&str]) -> Proc {
    let mut args: Vec<OsString> = vec!["send".into(), "--to".into(), addr.to_string().into()];
    args.extend([OsString::from("--root"), src.into()]);
    args.extend(extra.iter().map(OsString::from));
    Proc::spawn(&args)
}

/// Runs `mover send --to ADDR --root SRC EXTRA...` (bounded by [`RUN_TIMEOUT`]).
pub fn run_sender(addr: SocketAddr, src: &Path, extra: &[&str]) -> Output {
    spawn_sender(addr, src, extra).wait(RUN_TIMEOUT)
}

/// One TCP session: a fresh receiver into `dst`, a sender from `src`; returns (sender, receiver).
/// Does not check exit codes.
pub fn tcp_transfer(
    src: &Path,
    dst: &Path,
    send_args: &[&str],
    recv_args: &[&str],
) -> (Output, Output) {
    let receiver = spawn_receiver(dst, recv_args);
    let sender = run_sender(receiver.addr, src, send_args);
    let secs = if sender.code == Some(0) { 30 } else { 10 };
    (sender, receiver.wait(Duration::from_secs(secs)))
}

/// Like [`tcp_transfer`] but asserts both sides exit 0.
pub fn tcp_transfer_ok(src: &Path, dst: &Path, send_args: &[&str]) -> (Output, Output) {
    let (s, r) = tcp_transfer(src, dst, send_args, &[]);
    let ok = s.code == Some(0) && r.code == Some(0);
    assert!(
        ok,
        "TCP transfer failed\n=== sender: {}\n=== receiver: {}",
        s.describe(),
        r.describe()
    );
    (s, r)
}

/// `path` as an OsString with a trailing slash (rsync "contents of" semantics).
pub fn slash(path: &Path) -> OsString {
    let mut s = path.as_os_str().to_owned();
    s.push("/");
    s
}
