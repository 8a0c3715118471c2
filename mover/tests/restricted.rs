//! The mover under a restricted PodSecurity profile: a non-root user with
//! every capability dropped and no privilege escalation (`setpriv`), over
//! TLS. Ownership cannot be preserved there; the transfer must still complete,
//! say so once, and give every file to the user it runs as.

mod common;

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::*;

const NOBODY: u32 = 65534;
const MESSAGE: &str = "owner and group are not preserved";

/// `setpriv` arguments for `uid` with no capabilities at all, or `None` when
/// this machine cannot run the test.
fn restricted(uid: u32) -> Option<Vec<OsString>> {
    // The first element is the program: run with `Proc::spawn_program`.
    common::users::as_user(uid)
}

fn chown_tree(root: &Path, uid: u32) {
    for (_, path, _) in walk(root) {
        lchown(&path, uid, uid);
    }
}

/// Opens the source to everyone (group/other bits): a reader without
/// CAP_DAC_READ_SEARCH or CAP_DAC_OVERRIDE reads by mode bits only.
fn readable_by_others(src: &Path) {
    for (_, path, md) in walk(src) {
        if md.is_file() {
            set_mode(&path, 0o644);
        } else if md.is_dir() {
            set_mode(&path, 0o755);
        }
    }
}

fn source(tmp: &Path) -> std::path::PathBuf {
    let src = tmp.join("src");
    mkdirs(&src.join("sub"));
    write_file(&src.join("big.bin"), &random_bytes("big", 2 * MIB), 0o644);
    write_file(&src.join("sub/a.txt"), b"a\n", 0o640);
    write_file(&src.join("sub/b.txt"), b"b\n", 0o600);
    ln_s("a.txt", &src.join("sub/link"));
    set_tree_mtimes(&src);
    src
}

#[test]
fn non_root_without_capabilities_copies_over_tls_and_says_so_once() {
    let Some(prefix) = restricted(NOBODY) else {
        return;
    };
    let tmp = scratch();
    let src = source(tmp.path());
    // Files of someone else: they become the receiver's user's.
    chown_tree(&src, 1234);
    readable_by_others(&src);
    let keys = tmp.path().join("keys");
    run_mover([
        "keygen".as_ref(),
        "--out".as_ref(),
        keys.as_os_str(),
        "--operation-id".as_ref(),
        "op-r".as_ref(),
    ])
    .assert_ok();
    chown_tree(&keys, NOBODY);
    let dst_parent = tmp.path().join("volume");
    mkdirs(&dst_parent);
    lchown(&dst_parent, NOBODY, NOBODY);
    set_mode(tmp.path(), 0o755);
    let dst = dst_parent.join("data");

    let keys_arg = keys.to_str().unwrap();
    let receiver = spawn_restricted_receiver(&prefix, &dst, keys_arg);
    let mut sender: Vec<OsString> = prefix.clone();
    sender.extend(
        [
            MOVER,
            "send",
            "--to",
            &receiver.1,
            "--root",
            src.to_str().unwrap(),
            "--tls-dir",
            keys_arg,
        ]
        .map(OsString::from),
    );
    let sent = Proc::spawn_program(&sender[0], &sender[1..]).wait(RUN_TIMEOUT);
    sent.assert_ok();
    let (mut proc, _) = receiver;
    let received = proc.wait(Duration::from_secs(30));
    received.assert_ok();
    assert_eq!(
        received.stderr.matches(MESSAGE).count(),
        1,
        "said once: {}",
        received.describe()
    );
    assert!(
        received.stderr.contains("no CAP_CHOWN"),
        "{}",
        received.describe()
    );
    let opts = CompareOpts {
        check_owner: false,
        ..CompareOpts::default()
    };
    assert_trees_equal(&src, &dst, opts, "restricted receiver");
    for (rel, _, md) in walk(&dst) {
        assert_eq!((md.uid(), md.gid()), (NOBODY, NOBODY), "{}", show(&rel));
    }
}

#[test]
fn root_with_capabilities_dropped_does_not_preserve_owners_either() {
    let Some(prefix) = restricted(0) else {
        return;
    };
    let tmp = scratch();
    let src = source(tmp.path());
    chown_tree(&src, 1234);
    // Without CAP_DAC_READ_SEARCH, even root reads others' files by their mode bits.
    readable_by_others(&src);
    let dst = tmp.path().join("dst");
    let mut args = prefix;
    args.extend([MOVER.into(), "sync".into(), slash(&src), dst.clone().into()]);
    let out = Proc::spawn_program(&args[0], &args[1..]).wait(RUN_TIMEOUT);
    out.assert_ok();
    assert_eq!(out.stderr.matches(MESSAGE).count(), 1, "{}", out.describe());
    for (rel, _, md) in walk(&dst) {
        assert_eq!(
            md.uid(),
            0,
            "{} kept its owner without CAP_CHOWN",
            show(&rel)
        );
    }
}

/// What the sender's identity may not read is not left out quietly: the
/// rest is copied, then the session fails for good (exit 23, not worth
/// retrying), naming the entries.
#[test]
fn entries_the_sender_may_not_read_fail_the_copy_by_name() {
    let Some(prefix) = restricted(NOBODY) else {
        return;
    };
    let tmp = scratch();
    let src = source(tmp.path());
    readable_by_others(&src);
    // Someone else's, for them alone: a file, and a directory's listing.
    write_file(&src.join("sub/secret.key"), b"k\n", 0o600);
    lchown(&src.join("sub/secret.key"), 1234, 1234);
    mkdirs(&src.join("private"));
    write_file(&src.join("private/notes"), b"n\n", 0o644);
    set_mode(&src.join("private"), 0o700);
    lchown(&src.join("private"), 1234, 1234);
    set_mode(tmp.path(), 0o755);
    let dst_parent = tmp.path().join("volume");
    mkdirs(&dst_parent);
    lchown(&dst_parent, NOBODY, NOBODY);
    let dst = dst_parent.join("data");

    let mut args = prefix;
    args.extend([
        MOVER.into(),
        "sync".into(),
        "--progress".into(),
        "json".into(),
        slash(&src),
        dst.clone().into(),
    ]);
    let out = Proc::spawn_program(&args[0], &args[1..]).wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(23), "{}", out.describe());
    let summary = out
        .json_lines()
        .into_iter()
        .find(|l| l["event"] == "summary")
        .unwrap_or_else(|| panic!("no summary: {}", out.describe()));
    assert_eq!(summary["retryable"], false, "{summary}");
    let error = summary["error"].as_str().unwrap_or_default();
    assert_eq!(
        error,
        "2 source entries could not be read as uid 65534 gid 65534 (permission denied): \
         private, sub/secret.key",
        "{}",
        out.describe()
    );
    // Everything it may read is there.
    assert_eq!(
        std::fs::read(dst.join("sub/a.txt")).ok().as_deref(),
        Some(&b"a\n"[..])
    );
    assert!(dst.join("big.bin").exists());
}

/// A volume's root belongs to whoever made it (root, with the kubelet's
/// fsGroup): a receiver without capabilities fills it, leaves its mode and
/// times alone, and the verified copy succeeds.
#[test]
fn a_root_the_receiver_does_not_own_keeps_its_mode_and_the_copy_verifies() {
    let Some(prefix) = restricted(NOBODY) else {
        return;
    };
    let tmp = scratch();
    let src = source(tmp.path());
    chown_tree(&src, NOBODY);
    set_mode(&src, 0o2770);
    set_mode(tmp.path(), 0o755);
    let dst = tmp.path().join("volume");
    mkdirs(&dst);
    set_mode(&dst, 0o777);

    let mut args = prefix;
    args.extend([
        MOVER.into(),
        "sync".into(),
        "--verify".into(),
        slash(&src),
        dst.clone().into(),
    ]);
    let out = Proc::spawn_program(&args[0], &args[1..]).wait(RUN_TIMEOUT);
    out.assert_ok();
    assert!(
        out.stderr
            .contains("the destination root is not this user's"),
        "{}",
        out.describe()
    );
    let root = std::fs::metadata(&dst).expect("root");
    assert_eq!((root.uid(), root.mode() & 0o7777), (0, 0o777));
    assert_eq!(
        std::fs::read(dst.join("sub/a.txt")).ok().as_deref(),
        Some(&b"a\n"[..])
    );
}

/// A receiver started under `prefix`; returns it with its address.
fn spawn_restricted_receiver(prefix: &[OsString], dst: &Path, keys: &str) -> (Proc, String) {
    let addr_file = dst.with_file_name("addr");
    let mut args: Vec<OsString> = prefix.to_vec();
    args.extend(
        [
            MOVER,
            "receive",
            "--listen",
            "127.0.0.1:0",
            "--root",
            dst.to_str().unwrap(),
            "--tls-dir",
            keys,
            "--addr-file",
            addr_file.to_str().unwrap(),
        ]
        .map(OsString::from),
    );
    let mut proc = Proc::spawn_program(&args[0], &args[1..]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(addr) = std::fs::read_to_string(&addr_file) {
            if !addr.trim().is_empty() {
                return (proc, addr.trim().to_string());
            }
        }
        if proc.exited() || std::time::Instant::now() > deadline {
            panic!(
                "receiver did not listen: {}",
                proc.wait(Duration::ZERO).describe()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
