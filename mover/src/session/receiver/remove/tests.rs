use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

fn write(path: &Path, len: usize) {
    fs::write(path, vec![b'x'; len]).unwrap();
}

fn chmod_path(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
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
fn wipe_empties_the_tree_and_keeps_the_root_and_what_links_point_to() {
    let t = tempfile::tempdir().unwrap();
    let (root, outside) = (t.path().join("root"), t.path().join("outside"));
    fs::create_dir_all(root.join("d/e")).unwrap();
    fs::create_dir(&outside).unwrap();
    write(&outside.join("secret"), 6);
    write(&root.join("a.txt"), 10);
    write(&root.join("d/b.bin"), 1000);
    write(&root.join("d/e/empty"), 0);
    // A second name: its bytes count once.
    fs::hard_link(root.join("a.txt"), root.join("d/h")).unwrap();
    // Links out of the root, to a file and to a directory: they go, their
    // targets stay.
    symlink(outside.join("secret"), root.join("to_file")).unwrap();
    symlink("../outside", root.join("d/to_dir")).unwrap();
    // Read-only and closed directories are still emptied.
    fs::create_dir(root.join("ro")).unwrap();
    write(&root.join("ro/g"), 5);
    chmod_path(&root.join("ro"), 0o555);
    fs::create_dir(root.join("closed")).unwrap();
    write(&root.join("closed/x"), 3);
    chmod_path(&root.join("closed"), 0o000);
    // volmig's own: the checkpoint directory and a temporary file.
    fs::create_dir(root.join(".volmig")).unwrap();
    write(&root.join(".volmig/checkpoint"), 7);
    write(&root.join(".volmig-a.txt.tok-1.tmp"), 4);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("fifo"),
        FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    chmod_path(&root, 0o751);
    let when = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_600_000_000, 5);
    let f = File::open(&root).unwrap();
    f.set_times(FileTimes::new().set_accessed(when).set_modified(when))
        .unwrap();
    let before = fs::metadata(&root).unwrap();

    let removed = wipe(&root, &CancellationToken::new()).unwrap();

    // (Before the root is read again, which sets its atime.)
    let after = fs::metadata(&root).unwrap();
    assert!(names(&root).is_empty(), "left: {:?}", names(&root));
    // a.txt d d/e d/e/empty d/b.bin d/h d/to_dir to_file ro ro/g closed
    // closed/x .volmig .volmig/checkpoint the temporary file, fifo
    assert_eq!(
        removed,
        Removed {
            entries: 16,
            bytes: 10 + 1000 + 5 + 3 + 7 + 4
        }
    );
    assert_eq!(after.mode(), before.mode(), "the root's mode");
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
    assert_eq!(after.modified().unwrap(), when, "the root's mtime");
    assert_eq!(after.accessed().unwrap(), when, "the root's atime");
    assert_eq!(names(&outside), ["secret"]);
    assert_eq!(fs::metadata(outside.join("secret")).unwrap().len(), 6);
}

#[test]
fn wipe_of_an_empty_or_missing_root_removes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    assert_eq!(wipe(t.path(), &stop).unwrap(), Removed::default());
    let missing = t.path().join("missing");
    assert_eq!(wipe(&missing, &stop).unwrap(), Removed::default());
    assert!(
        !missing.exists(),
        "the session creates the root, not the wipe"
    );
}

#[test]
fn wipe_of_a_root_that_is_a_file_says_so() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("file");
    write(&file, 1);
    let err = wipe(&file, &CancellationToken::new()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("cannot wipe the destination: cannot open ") && msg.contains("directory"),
        "{msg}"
    );
    assert_eq!((err.exit_code(), err.is_retryable()), (11, false));
}

#[test]
fn a_stopped_wipe_is_an_interruption() {
    let t = tempfile::tempdir().unwrap();
    write(&t.path().join("f"), 1);
    let stop = CancellationToken::new();
    stop.cancel();
    let err = wipe(t.path(), &stop).unwrap_err();
    assert!(matches!(err, SessionError::Interrupted), "{err}");
    assert!(t.path().join("f").exists());
}

#[test]
fn a_failed_wipe_is_not_retryable_whatever_the_error() {
    // EBUSY and EIO are retryable for other local errors.
    for errno in [rustix::io::Errno::BUSY, rustix::io::Errno::IO] {
        let err = SessionError::Wipe {
            what: "cannot remove big/dir".into(),
            source: errno.into(),
        };
        assert_eq!((err.exit_code(), err.is_retryable()), (11, false), "{err}");
    }
}

#[test]
fn remove_tree_removes_links_not_their_targets() {
    let t = tempfile::tempdir().unwrap();
    let (dir, outside) = (t.path().join("dir"), t.path().join("outside"));
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::create_dir(&outside).unwrap();
    write(&outside.join("kept"), 1);
    symlink(&outside, dir.join("sub/out")).unwrap();
    fs::create_dir(dir.join("sub/ro")).unwrap();
    write(&dir.join("sub/ro/f"), 1);
    chmod_path(&dir.join("sub/ro"), 0o500);
    remove_tree(&dir).unwrap();
    assert!(!dir.exists());
    assert_eq!(names(&outside), ["kept"]);
}

/// A file system mounted for a test, unmounted (lazily) when dropped:
/// before the temporary directory, whose removal would reach into it.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Mounts with `mount ARGS... AT`, or says why this test cannot run here:
/// mounting needs root (CAP_SYS_ADMIN), which CI has; elsewhere it is skipped.
fn mount(args: &[&Path], at: &Path) -> Option<Mounted> {
    if !rustix::process::geteuid().is_root() {
        crate::stdio::err("skipped: mounting a file system needs root\n");
        return None;
    }
    match Command::new("mount").args(args).arg(at).status() {
        Ok(status) if status.success() => Some(Mounted(at.to_path_buf())),
        other => {
            crate::stdio::err(&format!("skipped: cannot mount here ({other:?})\n"));
            None
        }
    }
}

/// A mount point below the root stops the wipe, naming it, and what is
/// mounted there keeps its contents (`rm -r` would have emptied it).
#[test]
fn a_mount_point_stops_the_wipe_and_keeps_its_contents() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    fs::create_dir_all(root.join("big/dir")).unwrap();
    let tmpfs = [
        Path::new("-t"),
        Path::new("tmpfs"),
        Path::new("volmig-test"),
    ];
    let Some(_mounted) = mount(&tmpfs, &root.join("big/dir")) else {
        return;
    };
    write(&root.join("big/dir/inside"), 9);
    let err = wipe(&root, &CancellationToken::new()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot wipe the destination: cannot remove big/dir: \
         Device or resource busy (os error 16)"
    );
    assert_eq!((err.exit_code(), err.is_retryable()), (11, false));
    assert_eq!(names(&root.join("big/dir")), ["inside"]);
}

/// A bind mount of the same file system has the same device number: the
/// mount, not the device, is what stops the descent.
#[test]
fn a_bind_mount_stops_the_wipe_and_keeps_its_source() {
    let t = tempfile::tempdir().unwrap();
    let (root, elsewhere) = (t.path().join("root"), t.path().join("elsewhere"));
    fs::create_dir_all(root.join("bound")).unwrap();
    fs::create_dir(&elsewhere).unwrap();
    write(&elsewhere.join("precious"), 2);
    let Some(_mounted) = mount(&[Path::new("--bind"), &elsewhere], &root.join("bound")) else {
        return;
    };
    let err = wipe(&root, &CancellationToken::new()).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("cannot remove bound: Device or resource busy (os error 16)"),
        "{err}"
    );
    assert_eq!(names(&elsewhere), ["precious"]);
}
