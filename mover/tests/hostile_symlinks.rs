//! Hostile senders and symlink games: a symlink the sender listed and then
//! writes through, symlinks already at the destination, listed directories
//! and files that replace them, symlink targets stored verbatim (or refused
//! when no file system could hold them), and hard links through symlinks.
//!
//! Nothing may be written, linked or deleted outside the root.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};

use common::wire::*;
use mover::meta::Kind;
use mover::protocol::{SessionOptions, MAX_SYMLINK_TARGET};

fn link_target(path: &Path) -> Vec<u8> {
    bytes_of(&fs::read_link(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// A directory outside every root, with something in it worth protecting.
fn precious(t: &Path) -> PathBuf {
    let outside = t.join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("victim"), b"precious").unwrap();
    outside
}

#[tokio::test]
async fn a_file_through_a_symlink_the_sender_listed_is_refused() {
    let top = tempfile::tempdir().unwrap();
    for i in 0..4 {
        let t = top.path().join(format!("case{i}"));
        fs::create_dir(&t).unwrap();
        let outside_dir = precious(&t);
        let target = match i {
            0 => b"..".to_vec(),
            1 => b"../..".to_vec(),
            2 => b"/".to_vec(),
            _ => bytes_of(&outside_dir),
        };
        let root = t.join("dst");
        let before = outside(&t, &root);
        let (mut w, receiver) = in_process(&root);
        w.handshake(delete()).await;
        w.send_all(vec![
            dir(""),
            entry("link", Kind::Symlink(target.clone()), 0),
            entry("link/x", Kind::File, 5),
            entry("link/victim", Kind::File, 5),
            done(""),
            list_end(),
        ])
        .await;
        let r = outcome(receiver).await;
        let what = format!("link -> {}", String::from_utf8_lossy(&target));
        assert_protocol_error(
            &r,
            &what,
            &["link/x", "not inside a directory listed before it"],
        );
        assert_eq!(outside(&t, &root), before, "{what}: written outside");
        assert_eq!(fs::read(outside_dir.join("victim")).unwrap(), b"precious");
        // The symlink itself was legitimate: made, and with its target verbatim.
        assert_eq!(link_target(&root.join("link")), target, "{what}");
        assert_eq!(names(&root), BTreeSet::from(["link".to_string()]), "{what}");
    }
}

#[tokio::test]
async fn a_symlink_already_at_the_destination_is_not_entered() {
    let top = tempfile::tempdir().unwrap();
    let kinds = [
        Kind::File,
        Kind::Dir,
        symlink_kind("/"),
        Kind::Fifo,
        Kind::HardLink(p("f")),
    ];
    for (i, kind) in kinds.into_iter().enumerate() {
        for (j, evil) in ["sub/evil", "sub/victim", "rel/evil"]
            .into_iter()
            .enumerate()
        {
            let t = top.path().join(format!("case{i}-{j}"));
            fs::create_dir(&t).unwrap();
            let outside_dir = precious(&t);
            let root = t.join("dst");
            fs::create_dir(&root).unwrap();
            symlink(&outside_dir, root.join("sub")).unwrap();
            symlink("../outside", root.join("rel")).unwrap();
            let before = outside(&t, &root);
            let (mut w, receiver) = in_process(&root);
            w.handshake(delete()).await;
            let size = if kind == Kind::File { 5 } else { 0 };
            w.send_all(vec![
                dir(""),
                entry("f", Kind::File, 0),
                entry(evil, kind.clone(), size),
                done(""),
                list_end(),
            ])
            .await;
            let r = outcome(receiver).await;
            let what = format!("{evil} as a {} under a symlink", kind.name());
            assert_protocol_error(
                &r,
                &what,
                &[evil, "not inside a directory listed before it"],
            );
            assert_eq!(outside(&t, &root), before, "{what}: written outside");
            assert_eq!(link_target(&root.join("sub")), bytes_of(&outside_dir));
            assert_eq!(link_target(&root.join("rel")), b"../outside");
        }
    }
}

#[tokio::test]
async fn a_listed_directory_replaces_a_symlink_instead_of_entering_it() {
    let t = tempfile::tempdir().unwrap();
    let outside_dir = precious(t.path());
    let root = t.path().join("dst");
    fs::create_dir(&root).unwrap();
    symlink(&outside_dir, root.join("sub")).unwrap();
    symlink("../outside", root.join("rel")).unwrap();
    let before = outside(t.path(), &root);
    // In the walk's order: a directory's entries, its DirDone, then its subdirectories.
    let list = vec![
        dir(""),
        dir("rel"),
        dir("sub"),
        done(""),
        entry("rel/victim", Kind::File, 5),
        done("rel"),
        entry("sub/evil", Kind::File, 5),
        entry("sub/link", symlink_kind("../../.."), 0),
        entry("sub/victim", Kind::File, 5),
        done("sub"),
        list_end(),
    ];
    let files: &[(&str, &[u8])] = &[
        ("rel/victim", b"pwned"),
        ("sub/evil", b"pwned"),
        ("sub/victim", b"pwned"),
    ];
    let s = transfer(&root, delete(), list, files)
        .await
        .expect("an honest transfer over symlinks");
    assert_eq!((s.files_failed, s.files_transferred), (0, 3), "{s:?}");
    assert_eq!(
        outside(t.path(), &root),
        before,
        "written through a symlink"
    );
    assert_eq!(
        fs::read(outside_dir.join("victim")).unwrap(),
        b"precious".to_vec()
    );
    for d in ["sub", "rel"] {
        let md = fs::symlink_metadata(root.join(d)).unwrap();
        assert!(md.is_dir(), "{d} is still {:?}", md.file_type());
    }
    assert_eq!(fs::read(root.join("sub/evil")).unwrap(), b"pwned");
    assert_eq!(fs::read(root.join("sub/victim")).unwrap(), b"pwned");
    assert_eq!(fs::read(root.join("rel/victim")).unwrap(), b"pwned");
    assert_eq!(link_target(&root.join("sub/link")), b"../../..");
}

#[tokio::test]
async fn a_listed_file_replaces_a_symlink_instead_of_writing_through_it() {
    for inplace in [false, true] {
        let t = tempfile::tempdir().unwrap();
        let outside_dir = precious(t.path());
        let root = t.path().join("dst");
        fs::create_dir(&root).unwrap();
        symlink(outside_dir.join("victim"), root.join("abs")).unwrap();
        symlink("../outside/victim", root.join("rel")).unwrap();
        let before = outside(t.path(), &root);
        let opts = SessionOptions {
            inplace,
            ..SessionOptions::default()
        };
        let list = vec![
            dir(""),
            entry("abs", Kind::File, 5),
            entry("rel", Kind::File, 5),
            done(""),
            list_end(),
        ];
        let files: &[(&str, &[u8])] = &[("abs", b"pwned"), ("rel", b"pwned")];
        let s = transfer(&root, opts, list, files).await.unwrap();
        assert_eq!(s.files_failed, 0, "inplace {inplace}: {s:?}");
        assert_eq!(
            outside(t.path(), &root),
            before,
            "inplace {inplace}: written through a symlink"
        );
        for f in ["abs", "rel"] {
            let md = fs::symlink_metadata(root.join(f)).unwrap();
            assert!(md.is_file(), "inplace {inplace}: {f} is {md:?}");
            assert_eq!(fs::read(root.join(f)).unwrap(), b"pwned");
        }
    }
}

#[tokio::test]
async fn symlink_targets_are_stored_verbatim_and_never_followed() {
    let t = tempfile::tempdir().unwrap();
    let outside_dir = precious(t.path());
    let root = t.path().join("dst");
    fs::create_dir(&root).unwrap();
    // Already there, pointing out: replaced, not followed.
    symlink(&outside_dir, root.join("l0")).unwrap();
    symlink(outside_dir.join("victim"), root.join("l1")).unwrap();
    let before = outside(t.path(), &root);
    let long: Vec<u8> = b"a/".repeat(2047).into_iter().chain(*b"z").collect();
    assert_eq!(long.len(), MAX_SYMLINK_TARGET);
    let targets: Vec<Vec<u8>> = vec![
        b"..".to_vec(),
        b"../outside/victim".to_vec(),
        b"../../../../../../../../etc/passwd".to_vec(),
        b"/etc/shadow".to_vec(),
        bytes_of(&outside_dir),
        b"a/../../b".to_vec(),
        b"./x/./y/".to_vec(),
        b"caf\xe9 \xff\xfe".to_vec(),
        b"with\nnewline and spaces ".to_vec(),
        b"dangling".to_vec(),
        long,
    ];
    let mut list = vec![dir("")];
    for (i, target) in targets.iter().enumerate() {
        list.push(entry(format!("l{i}"), Kind::Symlink(target.clone()), 0));
    }
    list.extend([done(""), list_end()]);
    let s = transfer(&root, delete(), list, &[]).await.unwrap();
    assert_eq!(s.files_failed, 0, "{s:?}");
    assert_eq!(s.symlinks, targets.len() as u64);
    for (i, target) in targets.iter().enumerate() {
        assert_eq!(&link_target(&root.join(format!("l{i}"))), target, "l{i}");
    }
    assert_eq!(
        outside(t.path(), &root),
        before,
        "written through a symlink"
    );
}

/// A target the kernel would refuse (empty, over `PATH_MAX`, or with a NUL)
/// is refused when its entry is read, before it is kept anywhere.
#[tokio::test]
async fn symlink_targets_no_file_system_can_hold_are_refused() {
    let targets: [(&str, Vec<u8>); 4] = [
        ("empty", Vec::new()),
        ("4096 bytes", vec![b'a'; MAX_SYMLINK_TARGET + 1]),
        ("1 MiB", vec![b'a'; 1 << 20]),
        ("a NUL byte", b"a\0b".to_vec()),
    ];
    for (what, target) in targets {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("dst");
        let (mut w, receiver) = in_process(&root);
        w.handshake(delete()).await;
        w.send_all(vec![
            dir(""),
            entry("ok", symlink_kind("t"), 0),
            entry("l", Kind::Symlink(target), 0),
            done(""),
            list_end(),
        ])
        .await;
        let r = outcome(receiver).await;
        let words =
            format!("l: a symlink target must be 1 to {MAX_SYMLINK_TARGET} bytes without NUL");
        assert_protocol_error(&r, what, &[&words]);
        assert_eq!(w.abort().await.map(|a| a.exit_code), Some(12), "{what}");
        assert!(
            fs::symlink_metadata(root.join("l")).is_err(),
            "{what}: l was made"
        );
    }
}

#[tokio::test]
async fn a_hard_link_through_a_symlink_is_not_made() {
    for listed in [true, false] {
        let t = tempfile::tempdir().unwrap();
        let outside_dir = precious(t.path());
        let root = t.path().join("dst");
        fs::create_dir(&root).unwrap();
        let mut list = vec![dir("")];
        if listed {
            list.push(entry("a", Kind::Symlink(bytes_of(&outside_dir)), 0));
        } else {
            // Not listed, and kept (no --delete).
            symlink(&outside_dir, root.join("a")).unwrap();
        }
        list.extend([
            entry("h", Kind::HardLink(p("a/victim")), 0),
            done(""),
            list_end(),
        ]);
        let before = outside(t.path(), &root);
        let r = transfer(&root, SessionOptions::default(), list, &[]).await;
        let what = if listed { "listed" } else { "already there" };
        eprintln!("hard link through a symlink {what}: {r:?}");
        match &r {
            Ok(s) => assert!(s.files_failed >= 1, "{what}: {s:?}"),
            Err(e) => assert_eq!(e.exit_code(), 12, "{what}: {e}"),
        }
        assert!(!root.join("h").exists(), "{what}: h was linked");
        assert_eq!(outside(t.path(), &root), before, "{what}");
        assert_eq!(fs::metadata(outside_dir.join("victim")).unwrap().nlink(), 1);
    }
}
