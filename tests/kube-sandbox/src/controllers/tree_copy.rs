//! A point-in-time copy of a volume's directory, as the sandbox's CSI
//! driver cuts snapshots, restores them and clones volumes: every file,
//! directory and symlink with its mode, owner and group (as far as this
//! process may set them) and modification time; hard links become separate
//! files. A file that vanishes while the tree is walked is skipped, as a
//! crash-consistent snapshot of a volume in use would miss it. Files are
//! copied sparse ([`copy_image`]): a Block volume's image keeps its holes.

use std::io;
use std::os::unix::fs::{lchown, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{utimensat, AtFlags, Timespec, Timestamps, CWD};

/// Copies the tree at `from` to `to` (which must not exist): written
/// under a temporary name beside `to` and renamed, so that `to` is either
/// absent or complete. Returns the bytes of the regular files copied.
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<u64> {
    let name = to
        .file_name()
        .ok_or_else(|| io::Error::other(format!("{}: no file name", to.display())))?;
    let temp = to.with_file_name(format!(".{}.partial", name.to_string_lossy()));
    match std::fs::remove_dir_all(&temp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let bytes = copy_dir(from, &temp)?;
    std::fs::rename(&temp, to)?;
    Ok(bytes)
}

/// The bytes of the regular files under `dir` (what a restore needs).
pub fn tree_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) if m.is_file() => total += m.len(),
                _ => {}
            }
        }
    }
    total
}

fn copy_dir(from: &Path, to: &Path) -> io::Result<u64> {
    let meta = std::fs::symlink_metadata(from)?;
    std::fs::create_dir(to)?;
    let mut bytes = 0;
    for entry in std::fs::read_dir(from)? {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        match copy_entry(&source, &target) {
            Ok(n) => bytes += n,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !source.exists() => {}
            Err(e) => return Err(context(e, &source)),
        }
    }
    // Last, so that writing the children does not move the time.
    finish(to, &meta)?;
    Ok(bytes)
}

fn copy_entry(source: &Path, target: &PathBuf) -> io::Result<u64> {
    let meta = std::fs::symlink_metadata(source)?;
    let kind = meta.file_type();
    if kind.is_dir() {
        return copy_dir(source, target);
    }
    let mut bytes = 0;
    if kind.is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(source)?, target)?;
    } else if kind.is_file() {
        bytes = copy_image(source, target)?;
    } else {
        // Sockets, FIFOs and devices have no data to copy: skipped.
        return Ok(0);
    }
    finish(target, &meta)?;
    Ok(bytes)
}

/// Copies the regular file `from` to the new file `to`, sparse: only the
/// extents `SEEK_DATA`/`SEEK_HOLE` find holding data are copied (by
/// `copy_file_range`, or read and written where it is refused), the rest
/// left holes of the same length. Returns the file's length.
pub fn copy_image(from: &Path, to: &Path) -> io::Result<u64> {
    use rustix::fs::SeekFrom;
    let source = std::fs::File::open(from)?;
    let target = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)?;
    let len = source.metadata()?.len();
    target.set_len(len)?;
    let mut at = 0;
    while at < len {
        let start = match rustix::fs::seek(&source, SeekFrom::Data(at)) {
            Ok(start) => start,
            // No data after `at`: the rest is a hole.
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        let end = rustix::fs::seek(&source, SeekFrom::Hole(start))?.min(len);
        copy_range(&source, &target, start, end)?;
        at = end;
    }
    target.sync_data()?;
    Ok(len)
}

/// Copies bytes `start..end` of `source` to the same offsets of `target`.
fn copy_range(
    source: &std::fs::File,
    target: &std::fs::File,
    start: u64,
    end: u64,
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut at = start;
    while at < end {
        let (mut from, mut to) = (at, at);
        let want = usize::try_from(end - at).unwrap_or(usize::MAX).min(1 << 30);
        match rustix::fs::copy_file_range(source, Some(&mut from), target, Some(&mut to), want) {
            Ok(0) => break,
            Ok(n) => at += n as u64,
            Err(rustix::io::Errno::XDEV | rustix::io::Errno::NOSYS | rustix::io::Errno::INVAL) => {
                let mut buffer = vec![0u8; 1 << 20];
                while at < end {
                    let chunk = usize::try_from(end - at)
                        .unwrap_or(usize::MAX)
                        .min(buffer.len());
                    let n = source.read_at(&mut buffer[..chunk], at)?;
                    if n == 0 {
                        return Ok(());
                    }
                    target.write_all_at(&buffer[..n], at)?;
                    at += n as u64;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Owner, mode and times of `path` as `meta` has them; a `chown` this
/// process may not make is left undone.
fn finish(path: &Path, meta: &std::fs::Metadata) -> io::Result<()> {
    match lchown(path, Some(meta.uid()), Some(meta.gid())) {
        Err(e) if e.kind() != io::ErrorKind::PermissionDenied => return Err(e),
        _ => {}
    }
    if !meta.file_type().is_symlink() {
        // After the chown, which clears the setuid and setgid bits.
        let mode = meta.permissions().mode() & 0o7777;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    let time = |sec: i64, nsec: i64| Timespec {
        tv_sec: sec,
        tv_nsec: nsec as _,
    };
    let times = Timestamps {
        last_access: time(meta.atime(), meta.atime_nsec()),
        last_modification: time(meta.mtime(), meta.mtime_nsec()),
    };
    utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(io::Error::from)
}

fn context(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn copies_modes_times_symlinks_and_nested_directories() {
        let dir = tempfile::tempdir().expect("tempdir");
        let from = dir.path().join("from");
        std::fs::create_dir_all(from.join("a/b")).expect("dirs");
        std::fs::write(from.join("a/b/file"), b"hello").expect("file");
        std::fs::set_permissions(
            from.join("a/b/file"),
            std::fs::Permissions::from_mode(0o640),
        )
        .expect("chmod");
        symlink("b/file", from.join("a/link")).expect("symlink");
        std::fs::set_permissions(from.join("a"), std::fs::Permissions::from_mode(0o750))
            .expect("chmod");
        let old = Timestamps {
            last_access: Timespec {
                tv_sec: 1_000_000,
                tv_nsec: 5,
            },
            last_modification: Timespec {
                tv_sec: 1_000_000,
                tv_nsec: 5,
            },
        };
        utimensat(CWD, from.join("a/b/file"), &old, AtFlags::empty()).expect("utimes");
        let to = dir.path().join("to");
        assert_eq!(copy_tree(&from, &to).expect("copy"), 5);
        assert_eq!(std::fs::read(to.join("a/b/file")).expect("read"), b"hello");
        let meta = std::fs::metadata(to.join("a/b/file")).expect("meta");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
        assert_eq!((meta.mtime(), meta.mtime_nsec()), (1_000_000, 5));
        let dir_meta = std::fs::metadata(to.join("a")).expect("meta");
        assert_eq!(dir_meta.permissions().mode() & 0o7777, 0o750);
        assert_eq!(
            std::fs::read_link(to.join("a/link")).expect("link"),
            Path::new("b/file")
        );
        assert_eq!(tree_bytes(&to), 5);
        assert!(!dir.path().join(".to.partial").exists());
        // The target must not exist yet.
        assert!(copy_tree(&from, &to).is_err());
    }

    #[test]
    fn images_are_copied_sparse() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let (from, to) = (dir.path().join("from.img"), dir.path().join("to.img"));
        let file = std::fs::File::create(&from).expect("create");
        let len = 64 << 20;
        file.set_len(len).expect("set_len");
        for (at, byte) in [(0, 1u8), (5 << 20, 2), (len - 4096, 3)] {
            file.write_all_at(&vec![byte; 4096], at).expect("write");
        }
        drop(file);
        assert_eq!(copy_image(&from, &to).expect("copy"), len);
        assert_eq!(
            std::fs::read(&from).expect("read"),
            std::fs::read(&to).expect("read")
        );
        let allocated = std::fs::metadata(&to).expect("meta").blocks() * 512;
        assert!(allocated < 1 << 20, "{allocated} bytes allocated");
    }
}
