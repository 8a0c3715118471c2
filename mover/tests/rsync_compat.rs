//! The mover must produce exactly what `rsync -aHS --numeric-ids` produces.
//! Every test is skipped (with a note) when `rsync` is not on PATH.

mod common;

use std::ffi::OsStr;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

macro_rules! require_rsync {
    () => {
        if !Command::new("rsync")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            eprintln!("note: rsync is not on PATH; skipping this test");
            return;
        }
    };
}

/// `--modify-window=-1`: compare (and hence fix) mtimes with nanoseconds. Without it rsync leaves
/// a destination mtime alone when only the sub-second part differs.
const RSYNC_BASE: [&str; 3] = ["-aHS", "--numeric-ids", "--modify-window=-1"];

/// `rsync -aHS --numeric-ids EXTRA... -- SRC/ DST/`, asserting success.
fn rsync(src: &Path, dst: &Path, extra: &[&str]) {
    let mut args: Vec<OsString> = RSYNC_BASE.iter().map(OsString::from).collect();
    args.extend(extra.iter().map(OsString::from));
    args.extend([OsString::from("--"), slash(src), slash(dst)]);
    let out = Command::new("rsync")
        .args(&args)
        .output()
        .expect("run rsync");
    assert!(
        out.status.success(),
        "rsync {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `mover sync EXTRA... SRC DST`, asserting exit code 0.
fn mover_sync(src: &Path, dst: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<OsString> = vec!["sync".into()];
    args.extend(extra.iter().map(OsString::from));
    args.extend([src.into(), dst.into()]);
    let out = run_mover(&args);
    out.assert_ok();
    out.json_lines(); // every stdout line must be JSON
    out
}

/// A scratch directory with paths for a source, rsync's copy and mover's copy.
fn three_trees() -> (Scratch, PathBuf, PathBuf, PathBuf) {
    let tmp = scratch();
    let p = |name: &str| tmp.path().join(name);
    let (src, rdst, mdst) = (p("src"), p("rsync-dst"), p("mover-dst"));
    (tmp, src, rdst, mdst)
}

fn all() -> CompareOpts {
    CompareOpts::default()
}

#[test]
fn first_sync_matches_rsync() {
    require_rsync!();
    let (_tmp, src, rdst, mdst) = three_trees();
    build_tricky_tree(&src);

    rsync(&src, &rdst, &[]);
    assert_trees_equal(
        &src,
        &rdst,
        all(),
        "sanity check: rsync's copy vs the source",
    );

    let out = mover_sync(&src, &mdst, &[]);
    assert_trees_equal(
        &rdst,
        &mdst,
        all(),
        "rsync destination (A) vs mover destination (B)",
    );
    assert_trees_equal(&src, &mdst, all(), "source (A) vs mover destination (B)");
    assert!(
        out.stat("files_total") > 0,
        "summary counts no files: {}",
        out.summary()
    );
    assert!(
        out.stat("files_transferred") > 0,
        "first sync transferred nothing: {}",
        out.summary()
    );
}

/// Changes the source tree built by `build_tricky_tree` in many ways at once.
fn modify_source(src: &Path) {
    let p = |rel: &str| src.join(rel);
    // Flip one byte in the middle of the big file, same size.
    let big = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p("big.bin"))
        .unwrap();
    let mid = big.metadata().unwrap().len() / 2;
    let mut byte = [0u8];
    big.read_exact_at(&mut byte, mid).unwrap();
    big.write_all_at(&[!byte[0]], mid).unwrap();
    drop(big);
    set_mtime(&p("big.bin"), 1_700_000_123, 456_789_012);
    // A mode change only.
    set_mode(&p("script.sh"), 0o700);
    // New files, including a new name for an existing hard-link group.
    write_file(&p("added.txt"), b"added\n", 0o644);
    write_file(
        &p("dirs/empty/new-in-empty.txt"),
        &random_bytes("new", 5000),
        0o600,
    );
    hard_link(&p("hard/a/one"), &p("hard/b/four"));
    // Removed files and directories.
    fs::remove_file(p("empty.txt")).unwrap();
    fs::remove_file(p("names/with space.txt")).unwrap();
    fs::remove_file(p("hard/pair-2")).unwrap();
    fs::remove_dir_all(p("dirs/nested-empty")).unwrap();
    fs::remove_dir_all(p("deep/d00/d01/d02")).unwrap();
    // --delete must empty a read-only (0555) directory (chmod first so that we can, too).
    set_mode(&p("dirs/readonly-dir"), 0o755);
    fs::remove_dir_all(p("dirs/readonly-dir")).unwrap();
    // A file replaced by a symlink, a directory by a file, a symlink by a directory,
    // a file by a FIFO, a file by a hard link to another file.
    fs::remove_file(p("one-byte")).unwrap();
    ln_s("readonly.txt", &p("one-byte"));
    fs::remove_dir_all(p("dirs/to-be-file")).unwrap();
    write_file(&p("dirs/to-be-file"), b"now a file\n", 0o640);
    fs::remove_file(p("links/dangling")).unwrap();
    mkdirs(&p("links/dangling"));
    write_file(&p("links/dangling/inside"), b"was a symlink\n", 0o644);
    fs::remove_file(p("dirs/private/secret")).unwrap();
    mkfifo(&p("dirs/private/secret"), 0o600);
    fs::remove_file(p("names/-dash")).unwrap();
    hard_link(&p("hard/pair-1"), &p("names/-dash"));
    // Metadata-only changes: a symlink's target (same mtime), a directory's mode, an owner.
    let old = fs::symlink_metadata(p("links/rel")).unwrap();
    fs::remove_file(p("links/rel")).unwrap();
    ln_s("../big.bin", &p("links/rel"));
    set_mtime(&p("links/rel"), old.mtime(), old.mtime_nsec());
    set_mode(&p("dirs/sticky"), 0o1770);
    if is_root() {
        lchown(&p("dirs/sticky/file"), 777, 888);
    }
}

/// Initial sync, `modify_source`, then a re-sync with `--delete`; the mover runs locally
/// (`sync`) or over TCP (`send`/`receive` with `--no-whole-file`). `opts` go to rsync and mover.
fn resync_scenario(over_tcp: bool, opts: &[&str]) {
    let (_tmp, src, rdst, mdst) = three_trees();
    let with =
        |extra: &[&'static str]| -> Vec<&str> { opts.iter().chain(extra).copied().collect() };
    let mover = |extra: &[&'static str]| {
        if over_tcp {
            tcp_transfer_ok(&src, &mdst, &with(&[extra, &["--no-whole-file"]].concat())).0
        } else {
            mover_sync(&src, &mdst, &with(extra))
        }
    };
    build_tricky_tree(&src);
    if over_tcp {
        mkdirs(&mdst);
    }
    rsync(&src, &rdst, &with(&[]));
    mover(&[]);
    assert_trees_equal(&rdst, &mdst, all(), "initial sync: rsync (A) vs mover (B)");

    modify_source(&src);
    rsync(&src, &rdst, &with(&["--delete"]));
    assert_trees_equal(
        &src,
        &rdst,
        all(),
        "sanity check: rsync's re-sync vs the source",
    );

    let out = mover(&["--delete"]);
    assert_trees_equal(
        &rdst,
        &mdst,
        all(),
        "re-sync with --delete: rsync (A) vs mover (B)",
    );
    assert_trees_equal(
        &src,
        &mdst,
        all(),
        "re-sync with --delete: source (A) vs mover (B)",
    );
    let (total, sent) = (out.stat("files_total"), out.stat("files_transferred"));
    assert!(sent > 0, "re-sync transferred nothing: {}", out.summary());
    assert!(
        sent < total,
        "re-sync re-sent every file (quick check not used?): {}",
        out.summary()
    );
}

#[test]
fn resync_with_delete_matches_rsync() {
    require_rsync!();
    resync_scenario(false, &[]);
}

#[test]
fn tcp_delta_resync_with_delete_matches_rsync() {
    require_rsync!();
    resync_scenario(true, &[]);
}

#[test]
fn inplace_resync_with_delete_matches_rsync() {
    require_rsync!();
    resync_scenario(false, &["--inplace"]);
}

#[test]
fn tcp_inplace_delta_resync_with_delete_matches_rsync() {
    require_rsync!();
    resync_scenario(true, &["--inplace"]);
}

const EXCLUDES: [&str; 6] = [
    "--exclude",
    "*.log",
    "--exclude",
    "/top-only",
    "--exclude",
    "cache/",
];

/// Which names the excludes (and --delete's protection of excluded names) must drop or keep.
fn check_excluded(dst: &Path, what: &str) {
    let exists = |rel: &str| dst.join(rel).symlink_metadata().is_ok();
    let mut wrong = Vec::new();
    for gone in [
        "app.log",
        "logs/deep/x.log",
        "top-only",
        "cache/blob",
        "dirs/cache",
        "extra.txt",
    ] {
        if exists(gone) {
            wrong.push(format!("{gone} should not exist"));
        }
    }
    for kept in [
        "logs/keep.txt",
        "dirs/top-only",
        "names/cache",
        "stale.log",
        "cache/old",
        "big.bin",
    ] {
        if !exists(kept) {
            wrong.push(format!("{kept} should exist"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{what} after --exclude/--delete: {wrong:?}"
    );
}

#[test]
fn exclude_and_delete_match_rsync() {
    require_rsync!();
    let (_tmp, src, rdst, mdst) = three_trees();
    build_tricky_tree(&src);
    let s = |rel: &str| src.join(rel);
    mkdirs(&s("logs/deep"));
    write_file(&s("app.log"), b"excluded at the top\n", 0o644);
    write_file(&s("logs/deep/x.log"), b"excluded deep down\n", 0o644);
    write_file(&s("logs/keep.txt"), b"kept\n", 0o644);
    write_file(&s("top-only"), b"anchored exclude\n", 0o644);
    write_file(&s("dirs/top-only"), b"not at the root: kept\n", 0o644);
    mkdirs(&s("cache"));
    write_file(&s("cache/blob"), b"excluded dir\n", 0o644);
    mkdirs(&s("dirs/cache"));
    write_file(&s("dirs/cache/blob"), b"excluded dir, deeper\n", 0o644);
    write_file(&s("names/cache"), b"a *file* named cache: kept\n", 0o644);

    // Both destinations start with the same pre-existing content: excluded names must survive
    // --delete, other extras must go.
    for dst in [&rdst, &mdst] {
        mkdirs(&dst.join("cache"));
        write_file(&dst.join("cache/old"), b"protected\n", 0o644);
        write_file(&dst.join("stale.log"), b"protected\n", 0o644);
        write_file(&dst.join("extra.txt"), b"to be deleted\n", 0o644);
        set_tree_mtimes(dst);
    }

    let mut extra = EXCLUDES.to_vec();
    extra.push("--delete");
    rsync(&src, &rdst, &extra);
    mover_sync(&src, &mdst, &extra);

    check_excluded(&rdst, "sanity check: rsync destination");
    check_excluded(&mdst, "mover destination");
    assert_trees_equal(
        &rdst,
        &mdst,
        all(),
        "--exclude + --delete: rsync (A) vs mover (B)",
    );
}

/// More pattern shapes, one at a time, each compared with rsync on a small tree.
#[test]
fn exclude_pattern_shapes_match_rsync() {
    require_rsync!();
    let tmp = scratch();
    let src = tmp.path().join("src");
    let files = [
        "x/sub/file",
        "sub/file",
        "a/z.txt",
        "a/b/z.txt",
        "a/b/c/z.txt",
        "x/a/b/z.txt",
    ];
    let more = [
        "dir.tmp/f",
        "file.tmp",
        "dar",
        "a.txt",
        "c.txt",
        "q/a.txt",
        "q/r/a.txt",
        "sp ace",
    ];
    for f in files.iter().chain(&more) {
        mkdirs(src.join(f).parent().unwrap());
        write_file(&src.join(f), f.as_bytes(), 0o644);
    }
    set_tree_mtimes(&src);
    let patterns = [
        "sub/file",
        "a/**/z.txt",
        "**/c",
        "a/**",
        "*.tmp/",
        "d?r",
        "[ab].txt",
        "/q/*",
        "sp ace",
    ];
    let mut failures = Vec::new();
    for (i, pat) in patterns.iter().enumerate() {
        let (rdst, mdst) = (
            tmp.path().join(format!("r{i}")),
            tmp.path().join(format!("m{i}")),
        );
        rsync(&src, &rdst, &["--exclude", pat]);
        mover_sync(&src, &mdst, &["--exclude", pat]);
        let diffs = compare_trees(&rdst, &mdst);
        if !diffs.is_empty() {
            failures.push(format!(
                "--exclude {pat:?}: rsync (A) vs mover (B):\n    {}",
                diffs.join("\n    ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Source names that look like the mover's own bookkeeping (temp files, a state directory)
/// are ordinary user data: they must be copied, and deleted by --delete, like any other name.
#[test]
fn names_resembling_mover_internals_are_ordinary_data() {
    require_rsync!();
    let (_tmp, src, rdst, mdst) = three_trees();
    let files = [
        ".volmig-user.tmp",
        "d/.volmig-x-1.tmp",
        "d/.volmig/inner",
        ".partial",
    ];
    for f in files {
        mkdirs(src.join(f).parent().unwrap());
        write_file(&src.join(f), f.as_bytes(), 0o644);
    }
    set_tree_mtimes(&src);
    rsync(&src, &rdst, &[]);
    mover_sync(&src, &mdst, &[]);
    assert_trees_equal(
        &rdst,
        &mdst,
        all(),
        "names like .volmig*: rsync (A) vs mover (B)",
    );

    for f in [".volmig-user.tmp", "d"] {
        let path = src.join(f);
        if path.is_dir() {
            fs::remove_dir_all(path).unwrap()
        } else {
            fs::remove_file(path).unwrap()
        }
    }
    rsync(&src, &rdst, &["--delete"]);
    mover_sync(&src, &mdst, &["--delete"]);
    assert_trees_equal(
        &rdst,
        &mdst,
        all(),
        "--delete of names like .volmig*: rsync (A) vs mover (B)",
    );
}

#[test]
fn root_state_dir_is_reserved_and_said_so() {
    // `.volmig` at the destination root holds the receiver's state: a source
    // directory of that name is not copied, with a warning, and one already at
    // the destination survives --delete.
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src.join(".volmig"));
    write_file(&src.join(".volmig/state"), b"user data", 0o644);
    write_file(&src.join("f"), b"f", 0o644);
    mkdirs(&dst.join(".volmig"));
    write_file(&dst.join(".volmig/keep"), b"receiver state", 0o644);
    let out = run_mover([
        OsStr::new("sync"),
        OsStr::new("--delete"),
        src.as_os_str(),
        dst.as_os_str(),
    ]);
    assert_eq!(out.code, Some(0), "{}", out.describe());
    assert!(
        out.stderr.contains(".volmig") && out.stderr.contains("reserved"),
        "{}",
        out.describe()
    );
    assert!(dst.join("f").exists());
    assert!(!dst.join(".volmig/state").exists());
    assert!(dst.join(".volmig/keep").exists());
}

#[test]
fn tcp_delta_first_sync_matches_rsync() {
    require_rsync!();
    let tmp = scratch();
    let (src, rdst, tdst) = (
        tmp.path().join("src"),
        tmp.path().join("rsync-dst"),
        tmp.path().join("tcp-dst"),
    );
    build_tricky_tree(&src);
    rsync(&src, &rdst, &[]);
    mkdirs(&tdst);

    tcp_transfer_ok(&src, &tdst, &["--no-whole-file"]);
    assert_trees_equal(&rdst, &tdst, all(), "over TCP: rsync (A) vs mover (B)");
    assert_trees_equal(&src, &tdst, all(), "over TCP: source (A) vs mover (B)");
}

/// The tree builder must be deterministic and the comparison helper must notice differences
/// (otherwise the tests above prove nothing).
#[test]
fn compare_trees_detects_differences() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    build_tricky_tree(&src);
    build_tricky_tree(&dst);
    assert_trees_equal(&src, &dst, all(), "two builds of the tricky tree");

    let d = |rel: &str| dst.join(rel);
    let f = fs::OpenOptions::new()
        .write(true)
        .open(d("big.bin"))
        .unwrap();
    f.write_all_at(b"!", 12345).unwrap();
    drop(f);
    set_mtime(&d("big.bin"), 1, 1);
    set_mode(&d("script.sh"), 0o744);
    set_mtime(&d("links/rel"), 2, 2);
    fs::remove_file(d("hard/a/two")).unwrap();
    fs::copy(d("hard/a/one"), d("hard/a/two")).unwrap();
    fs::remove_file(d("special/fifo")).unwrap();
    write_file(&d("special/fifo"), b"", 0o640);
    let sparse = d("sparse.img");
    fs::write(&sparse, fs::read(&sparse).unwrap()).unwrap();
    write_file(&d("new-file"), b"", 0o644);
    fs::remove_file(d("links/dangling")).unwrap();
    ln_s("does/not/exist2", &d("links/dangling"));
    set_mtime(&d("links/dangling"), 3, 3);
    set_mtime(&d("deep/d00"), 4, 4);
    if is_root() {
        lchown(&d("owned/l-1234-5678"), 1234, 1);
    }

    let diffs = compare_trees(&src, &dst).join("\n");
    let owner = if is_root() {
        "\"owned/l-1234-5678\": owner 1234:5678 in A, 1234:1 in B"
    } else {
        ""
    };
    for expected in [
        "\"big.bin\": contents differ",
        "\"big.bin\": mtime",
        "\"script.sh\": mode 0755 in A, 0744 in B",
        "\"links/rel\": mtime",
        "hard links differ",
        "\"special/fifo\": type fifo in A, regular file in B",
        "\"sparse.img\": sparse in A, not sparse in B",
        "\"new-file\": only in B",
        "\"links/dangling\": symlink target \"does/not/exist\" in A, \"does/not/exist2\" in B",
        "\"deep/d00\": mtime",
        owner,
    ] {
        assert!(
            diffs.contains(expected),
            "compare_trees missed {expected:?}; it reported:\n{diffs}"
        );
    }
}

#[test]
fn delete_keeps_excluded_names_inside_deleted_directories() {
    require_rsync!();
    let (_tmp, src, rdst, mdst) = three_trees();
    mkdirs(&src);
    write_file(&src.join("kept"), b"k", 0o644);
    for dst in [&rdst, &mdst] {
        mkdirs(&dst.join("old/deeper"));
        write_file(&dst.join("old/data.keep"), b"protected", 0o644);
        write_file(&dst.join("old/junk"), b"j", 0o644);
        write_file(&dst.join("old/deeper/junk"), b"j", 0o644);
        mkdirs(&dst.join("gone/sub"));
        write_file(&dst.join("gone/sub/junk"), b"j", 0o644);
        set_tree_mtimes(dst);
    }
    set_tree_mtimes(&src);
    let args = ["--delete", "--exclude", "*.keep"];
    rsync(&src, &rdst, &args);
    mover_sync(&src, &mdst, &args);
    // "old" is not in the source: its mtime is whenever each tool deleted in it.
    for dst in [&rdst, &mdst] {
        set_mtime(&dst.join("old"), 1_000_000, 0);
    }
    assert_trees_equal(
        &rdst,
        &mdst,
        CompareOpts {
            skip_root_mtime: true,
            ..all()
        },
        "--delete with excluded names in deleted dirs",
    );
    assert!(mdst.join("old/data.keep").exists());
    assert!(!mdst.join("gone").exists());
}
