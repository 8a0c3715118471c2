//! Hostile senders below the frame API: paths no honest mover can build
//! (escaping the root, absolute, with NUL bytes, odd components, names or
//! paths longer than any file system takes), sent as raw bytes in every
//! frame that carries a path.
//!
//! Each must be refused at decode time with a protocol error (exit code 12)
//! that names the problem, without a panic and with nothing written outside
//! the root. The longest legal names and paths still go through.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::io::Read as _;
use std::path::Path;

use common::wire::*;
use mover::meta::Kind;
use mover::path::{RelPath, MAX_NAME_LEN, MAX_PATH_LEN};
use mover::protocol::SessionOptions;
use rustix::fs::{Mode, OFlags};

#[test]
fn the_raw_layout_is_the_codecs() {
    let kinds = [
        (RawKind::File, Kind::File),
        (RawKind::Dir, Kind::Dir),
        (RawKind::Symlink(b"../t".to_vec()), symlink_kind("../t")),
        (RawKind::HardLink(b"d/y".to_vec()), Kind::HardLink(p("d/y"))),
    ];
    for (raw, kind) in kinds {
        let size = if kind == Kind::File { 7 } else { 0 };
        let honest = encode(entry("d/x", kind.clone(), size));
        assert_eq!(raw_entry(b"d/x", raw, size), honest, "{kind:?}");
    }
    assert_eq!(
        raw_frame(&RawFrame::DirDone(b"d".to_vec())),
        encode(done("d"))
    );
    // A path over 127 bytes has a two-byte length.
    let long = format!("{}/{}", "x".repeat(MAX_NAME_LEN), "y".repeat(MAX_NAME_LEN));
    assert_eq!(
        raw_entry(long.as_bytes(), RawKind::File, 1),
        encode(entry(&long, Kind::File, 1))
    );
}

/// Paths no `RelPath` can hold, and what the refusal must say. `t` is the
/// test's directory, two levels above the root (`t/up/dst`), so that `..`
/// twice still lands inside it.
fn hostile_paths(t: &Path) -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let dots = "'..', '.' or empty component";
    let in_dir = |name: Vec<u8>| [&b"a/"[..], &name].concat();
    vec![
        ("two levels up", b"../../etc/x".to_vec(), dots),
        ("one level up", b"../x".to_vec(), dots),
        ("up after a name", b"a/../../x".to_vec(), dots),
        ("absolute", b"/etc/x".to_vec(), "path is absolute: /etc/x"),
        (
            "absolute, into the test directory",
            bytes_of(&t.join("abs")),
            "path is absolute",
        ),
        ("a NUL byte", b"x\0y".to_vec(), "path contains a NUL byte"),
        (
            "a NUL byte before an escape",
            b"a\0/../../x".to_vec(),
            "path contains a NUL byte",
        ),
        ("an empty component", b"a//x".to_vec(), dots),
        ("a trailing slash", b"a/".to_vec(), dots),
        ("a lone dot", b".".to_vec(), dots),
        ("a dot component", b"a/./x".to_vec(), dots),
        ("a lone dot-dot", b"..".to_vec(), dots),
        (
            "over 4096 bytes",
            vec![b'x'; MAX_PATH_LEN + 1],
            "path is 4097 bytes long, longer than 4096",
        ),
        (
            "a 256-byte name",
            vec![b'n'; MAX_NAME_LEN + 1],
            "path has a name of 256 bytes, longer than 255",
        ),
        (
            "a 4000-byte name in a directory",
            in_dir(vec![b'n'; 4000]),
            "path has a name of 4000 bytes, longer than 255",
        ),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Carrier {
    /// The path of a directory entry (made without any data).
    DirEntry,
    /// The path of a file entry.
    FileEntry,
    /// The target of a hard link (`h` links to it).
    HardLinkTarget,
    /// The directory a `DirDone` closes (with `--delete`, its extras go).
    DirDone,
}

fn carry(carrier: Carrier, path: &[u8]) -> Vec<u8> {
    match carrier {
        Carrier::DirEntry => raw_entry(path, RawKind::Dir, 0),
        Carrier::FileEntry => raw_entry(path, RawKind::File, 5),
        Carrier::HardLinkTarget => raw_entry(b"a/h", RawKind::HardLink(path.to_vec()), 0),
        Carrier::DirDone => raw_frame(&RawFrame::DirDone(path.to_vec())),
    }
}

/// Plays one hostile path; returns the receiver's error message.
async fn play_hostile_path(t: &Path, carrier: Carrier, what: &str, path: &[u8]) -> String {
    let root = t.join("up").join("dst");
    fs::create_dir_all(&root).unwrap();
    let before = outside(t, &root);
    let (mut w, receiver) = in_process(&root);
    w.handshake(delete()).await;
    w.send_all(vec![dir(""), dir("a")]).await;
    w.raw(&carry(carrier, path)).await;
    // Were the path taken, the session would go on.
    w.send_all(vec![done("a"), done(""), list_end()]).await;
    let r = outcome(receiver).await;
    let what = format!("{what} as {carrier:?}");
    let msg = assert_protocol_error(&r, &what, &[]);
    let told = w
        .abort()
        .await
        .unwrap_or_else(|| panic!("{what}: no Abort"));
    assert_eq!(told.exit_code, 12, "{what}: {told:?}");
    assert!(!told.retryable, "{what}: {told:?}");
    assert_eq!(told.message, msg, "{what}: the sender is told otherwise");
    assert_eq!(
        outside(t, &root),
        before,
        "{what}: written outside the root"
    );
    let made = names(&root);
    assert!(
        made.is_empty() || made == BTreeSet::from(["a".to_string()]),
        "{what}: the root holds {made:?}"
    );
    assert!(temp_files(&root).is_empty(), "{what}");
    msg
}

#[tokio::test]
async fn paths_that_leave_the_root_are_refused_on_the_wire() {
    let etc_x = Path::new("/etc/x").exists();
    let top = tempfile::tempdir().unwrap();
    let carriers = [
        Carrier::DirEntry,
        Carrier::FileEntry,
        Carrier::HardLinkTarget,
        Carrier::DirDone,
    ];
    let cases = hostile_paths(top.path()).len();
    let (mut played, mut said) = (0, BTreeSet::new());
    for carrier in carriers {
        for i in 0..cases {
            let t = top.path().join(format!("{carrier:?}-{i}"));
            let (what, path, says) = hostile_paths(&t).swap_remove(i);
            // Even refused, a directory is not worth risking in the real /etc.
            if path == b"/etc/x" && matches!(carrier, Carrier::DirEntry) {
                continue;
            }
            let msg = play_hostile_path(&t, carrier, what, &path).await;
            // The user reads that the peer sent a bad path, and why.
            let why = RelPath::new(path.clone()).expect_err(what);
            let expected = format!("protocol violation: the peer sent an invalid path ({why})");
            assert_eq!(msg, expected, "{what} as {carrier:?}");
            assert!(msg.contains(says), "{what} as {carrier:?}: {msg:?}");
            said.insert(msg);
            for escape in ["abs", "etc", "x", "up/x"] {
                assert!(!t.join(escape).exists(), "{what} as {carrier:?}: {escape}");
            }
            played += 1;
        }
    }
    eprintln!("hostile paths: {played} refused, saying {said:#?}");
    assert_eq!(played, 4 * cases - 1);
    assert_eq!(Path::new("/etc/x").exists(), etc_x, "/etc/x appeared");
}

/// The refusal names the path and the problem; the decoder's own error
/// ("Serde Deserialization Error") says neither.
#[tokio::test]
async fn a_refused_path_is_named_in_the_error() {
    let top = tempfile::tempdir().unwrap();
    let cases: [(Carrier, &[u8], &str); 3] = [
        (
            Carrier::FileEntry,
            b"../../etc/x",
            "path has a '..', '.' or empty component: ../../etc/x",
        ),
        (
            Carrier::HardLinkTarget,
            &[b'n'; 300],
            "path has a name of 300 bytes, longer than 255",
        ),
        (Carrier::DirDone, b"/etc", "path is absolute: /etc"),
    ];
    for (i, (carrier, path, says)) in cases.into_iter().enumerate() {
        let t = top.path().join(i.to_string());
        let msg = play_hostile_path(&t, carrier, says, path).await;
        assert_eq!(
            msg,
            format!("protocol violation: the peer sent an invalid path ({says})")
        );
        assert!(!msg.contains("Deserialization"), "{msg:?}");
    }
}

/// The limits are the file system's: names of 255 bytes, and a path of
/// 4095 (16 such names) are taken and made.
#[tokio::test]
async fn the_longest_names_and_paths_are_taken() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("dst");
    let name = |c: u8| String::from_utf8(vec![c; MAX_NAME_LEN]).unwrap();
    // d/e/f/.../r (15 directories), then a file in the deepest one.
    let dirs: Vec<String> = (0..15u8)
        .scan(String::new(), |path, i| {
            if !path.is_empty() {
                path.push('/');
            }
            path.push_str(&name(b'd' + i));
            Some(path.clone())
        })
        .collect();
    let deepest = dirs.last().unwrap().clone();
    let file = format!("{deepest}/{}", name(b'z'));
    assert_eq!(file.len(), 16 * (MAX_NAME_LEN + 1) - 1);
    // In the walk's order: a directory's entries, its DirDone, then its subdirectories.
    let mut list = vec![dir("")];
    let mut parent = String::new();
    for d in &dirs {
        list.extend([dir(d), done(&parent)]);
        parent.clone_from(d);
    }
    list.extend([entry(&file, Kind::File, 4), done(&deepest), list_end()]);
    let files: &[(&str, &[u8])] = &[(&file, b"deep")];
    let s = transfer(&root, SessionOptions::default(), list, files)
        .await
        .expect("the longest legal names");
    assert_eq!((s.files_failed, s.files_transferred), (0, 1), "{s:?}");
    assert_eq!(s.dirs, 15, "{s:?}");
    // Deeper than PATH_MAX from /: read it from halfway down.
    let (top, rest) = file.split_at(dirs[7].len() + 1);
    let halfway = fs::File::open(root.join(top)).unwrap();
    let fd = rustix::fs::openat(&halfway, rest, OFlags::RDONLY, Mode::empty()).unwrap();
    let mut data = Vec::new();
    fs::File::from(fd).read_to_end(&mut data).unwrap();
    assert_eq!(data, b"deep");
}
