//! Paths a peer names, resolved strictly inside a tree's root.
//!
//! A peer's path is checked for shape when it is decoded ([`RelPath`]: no
//! `..`, no absolute path, no NUL), but shape is not enough: a symlink that
//! already stands at the destination, or that a local process swaps in during
//! the transfer, would turn `a/b` into a place outside the root. So nothing
//! here resolves a peer's path from a string. The parent directory is opened
//! from the root's handle with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! (component by component with `O_NOFOLLOW` on kernels before 5.6), and the
//! entry is then reached as `/proc/self/fd/PARENT/NAME`: the kernel goes
//! straight to the directory that handle holds, whatever has been renamed or
//! swapped since, and the final name is one component that the callers treat
//! without following (`symlink_metadata`, `O_NOFOLLOW`, `rename`, `unlink`).

use std::cell::RefCell;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::ops::Deref;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

use crate::path::RelPath;

/// The root of a tree, held open so that paths a peer names are resolved
/// strictly inside it: never above the root, never through a symlink.
#[derive(Debug)]
pub struct TreeRoot {
    dir: OwnedFd,
}

impl AsFd for TreeRoot {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }
}

impl TreeRoot {
    pub fn open(root: &Path) -> io::Result<TreeRoot> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = rustix::fs::open(root, flags, Mode::empty())?;
        Ok(TreeRoot { dir })
    }

    /// Opens `path` beneath the root without following any symlink on the
    /// way (the last component is followed only without `O_NOFOLLOW`).
    fn resolve(&self, path: &RelPath, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        let name = OsStr::from_bytes(if path.is_root() {
            b"."
        } else {
            path.as_bytes()
        });
        let resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(&self.dir, name, flags, Mode::empty(), resolve) {
            Err(rustix::io::Errno::NOSYS) => self.resolve_stepwise(path, flags),
            other => other,
        }
    }

    /// Kernels before 5.6 have no `openat2`: one component at a time, each
    /// directory opened with `O_NOFOLLOW`, to the same effect.
    fn resolve_stepwise(&self, path: &RelPath, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut names = path
            .as_bytes()
            .split(|&b| b == b'/')
            .filter(|n| !n.is_empty());
        let Some(mut name) = names.next() else {
            return rustix::fs::openat(&self.dir, ".", flags, Mode::empty());
        };
        let mut dir: Option<OwnedFd> = None;
        for next in names {
            let at = dir.as_ref().map_or(self.dir.as_fd(), |d| d.as_fd());
            dir = Some(rustix::fs::openat(
                at,
                OsStr::from_bytes(name),
                dir_flags,
                Mode::empty(),
            )?);
            name = next;
        }
        let at = dir.as_ref().map_or(self.dir.as_fd(), |d| d.as_fd());
        rustix::fs::openat(at, OsStr::from_bytes(name), flags, Mode::empty())
    }

    /// Opens `path` read-only (a source file a receiver asked for). Access
    /// times are left alone where the kernel allows.
    pub fn open_file(&self, path: &RelPath) -> io::Result<File> {
        // NONBLOCK: a file swapped for a FIFO since the listing must not hang the open.
        let base =
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::NONBLOCK;
        let fd = match self.resolve(path, base | OFlags::NOATIME) {
            Err(rustix::io::Errno::PERM) => self.resolve(path, base),
            other => other,
        };
        Ok(File::from(fd?))
    }

    /// Opens the directory `path` beneath the root for listing, following
    /// no symlink (its own name included). Its access time is left alone
    /// where the kernel allows, as [`TreeRoot::open_file`] does.
    pub fn list_dir(&self, path: &RelPath) -> io::Result<OwnedFd> {
        let base = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match self.resolve(path, base | OFlags::NOATIME) {
            Err(rustix::io::Errno::PERM) => Ok(self.resolve(path, base)?),
            other => Ok(other?),
        }
    }

    /// Checks that `/proc/self/fd` leads to this process's open directories,
    /// as [`Placed`] paths need (a container always mounts `/proc`; a chroot
    /// may not).
    pub fn check_proc(&self) -> io::Result<()> {
        let via = format!("/proc/self/fd/{}/.", self.dir.as_raw_fd());
        let held = rustix::fs::fstat(&self.dir)?;
        match std::fs::metadata(&via) {
            Ok(md) if (md.dev(), md.ino()) == (held.st_dev, held.st_ino) => Ok(()),
            _ => Err(io::Error::other(
                "/proc/self/fd does not lead to open directories (is /proc mounted?): \
                 the receiver reaches every destination path through it",
            )),
        }
    }

    /// Opens the directory `dir` beneath the root for [`Placed`] paths.
    fn open_dir(&self, dir: &RelPath) -> io::Result<OwnedFd> {
        use rustix::io::Errno;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let symlink = || {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{dir} is, or passes through, a symlink: not followed"),
            )
        };
        self.resolve(dir, flags).map_err(|e| match e {
            Errno::LOOP | Errno::XDEV => symlink(),
            Errno::NOTDIR => {
                // O_DIRECTORY says "not a directory" of a symlink, too.
                let last = self.resolve(dir, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC);
                match last.and_then(rustix::fs::fstat) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => symlink(),
                    _ => io::Error::new(
                        io::ErrorKind::NotADirectory,
                        format!("{dir} is not a directory"),
                    ),
                }
            }
            e => e.into(),
        })
    }
}

/// Opens the directory `name` in `parent` as an `O_PATH` handle, without
/// following a symlink and without crossing into another mount: a mount
/// point (a bind mount of the same file system included) is `EXDEV`, so a
/// caller that walks a tree down stops at it instead of reaching into the
/// mounted file system. Kernels before 5.6 (no `openat2`) compare the
/// device and, where `/proc` says it, the mount id instead.
pub fn open_subdir(parent: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV;
    match rustix::fs::openat2(parent, name, flags, Mode::empty(), resolve) {
        Err(rustix::io::Errno::NOSYS) => open_subdir_compared(parent, name),
        other => other,
    }
}

/// [`open_subdir`] without `openat2`: `O_NOFOLLOW`, then the device and
/// the mount id compared with the parent's.
fn open_subdir_compared(parent: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = rustix::fs::openat(parent, name, flags, Mode::empty())?;
    let (above, below) = (rustix::fs::fstat(parent)?, rustix::fs::fstat(&dir)?);
    let same_mount = match (mount_id(parent), mount_id(dir.as_fd())) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    if above.st_dev != below.st_dev || !same_mount {
        return Err(rustix::io::Errno::XDEV);
    }
    Ok(dir)
}

/// The mount an open file is on, per `/proc/self/fdinfo` (Linux 3.15+).
fn mount_id(fd: BorrowedFd<'_>) -> Option<u64> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// An entry's place in the destination: its parent directory held open
/// (reached from the root without any symlink) and a path to the entry
/// through that handle. Use it as a `&Path` while it lives.
#[derive(Clone, Debug)]
pub struct Placed {
    parent: Arc<OwnedFd>,
    path: PathBuf,
}

impl Deref for Placed {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Placed {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Placed {
    /// The directory the entry is in, held open, and the entry's name in
    /// it: for calls relative to that handle (`unlinkat`, [`open_subdir`]),
    /// which take the name as one component, never following it.
    pub fn at(&self) -> (BorrowedFd<'_>, &OsStr) {
        let path = self.path.as_os_str().as_bytes();
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(b".");
        (self.parent.as_fd(), OsStr::from_bytes(name))
    }

    /// Another entry in the same directory (a temporary file's name).
    pub fn sibling(&self, name: &OsStr) -> Placed {
        Placed {
            parent: self.parent.clone(),
            path: self.path.with_file_name(name),
        }
    }
}

/// Places peer paths under a root, keeping the last parent open: a tree's
/// entries come directory by directory, so most lookups reuse it. One per
/// thread.
#[derive(Debug)]
pub struct Placer {
    tree: Arc<TreeRoot>,
    last: RefCell<Option<(RelPath, Arc<OwnedFd>)>>,
}

impl Placer {
    pub fn new(tree: Arc<TreeRoot>) -> Placer {
        Placer {
            tree,
            last: RefCell::new(None),
        }
    }

    pub fn open(root: &Path) -> io::Result<Placer> {
        Ok(Placer::new(Arc::new(TreeRoot::open(root)?)))
    }

    pub fn tree(&self) -> &Arc<TreeRoot> {
        &self.tree
    }

    /// Where `path` is: for the root itself, the root directory.
    pub fn place(&self, path: &RelPath) -> io::Result<Placed> {
        let (dir, name) = if path.is_root() {
            (path.clone(), None)
        } else {
            (path.parent(), Some(path.file_name()))
        };
        let mut last = self.last.borrow_mut();
        let parent = match &*last {
            Some((kept, fd)) if *kept == dir => fd.clone(),
            _ => {
                let fd = Arc::new(self.tree.open_dir(&dir)?);
                *last = Some((dir, fd.clone()));
                fd
            }
        };
        let mut full = PathBuf::from(format!("/proc/self/fd/{}", parent.as_raw_fd()));
        // The handle's own path is a link in /proc: "." makes the root itself
        // the entry, so that `symlink_metadata` sees the directory.
        full.push(OsStr::from_bytes(name.unwrap_or(b".")));
        Ok(Placed { parent, path: full })
    }

    /// Forgets the kept directory (after removing or replacing directories).
    pub fn forget(&self) {
        self.last.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn rel(s: &str) -> RelPath {
        RelPath::new(s.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn source_root_refuses_links_and_escapes() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path().join("src");
        fs::create_dir(&r).unwrap();
        fs::write(t.path().join("secret"), b"s").unwrap();
        fs::write(r.join("f"), b"f").unwrap();
        std::os::unix::fs::symlink("../secret", r.join("link")).unwrap();
        std::os::unix::fs::symlink("..", r.join("up")).unwrap();
        let root = TreeRoot::open(&r).unwrap();
        let p = |s: &str| RelPath::new(s.as_bytes().to_vec()).unwrap();
        assert!(root.open_file(&p("f")).is_ok());
        assert!(root.open_file(&p("link")).is_err());
        assert!(root.open_file(&p("up/secret")).is_err());
    }

    #[test]
    fn places_resolve_inside_and_refuse_symlinks_on_the_way() {
        let t = tempfile::tempdir().unwrap();
        let (root, outside) = (t.path().join("root"), t.path().join("outside"));
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::os::unix::fs::symlink("../..", root.join("a/up")).unwrap();
        let placer = Placer::open(&root).unwrap();
        placer.tree().check_proc().unwrap();

        fs::write(&*placer.place(&rel("a/b/f")).unwrap(), b"x").unwrap();
        assert_eq!(fs::read(root.join("a/b/f")).unwrap(), b"x");
        // Through a symlink, absolute or relative: refused, nothing written.
        for path in ["link/f", "a/up/f", "a/up/outside/f"] {
            let err = placer.place(&rel(path)).unwrap_err();
            assert!(err.to_string().contains("symlink"), "{path}: {err}");
        }
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
        // The symlink itself is an entry like any other: placed, not followed.
        let link = placer.place(&rel("link")).unwrap();
        assert!(fs::symlink_metadata(&*link)
            .unwrap()
            .file_type()
            .is_symlink());
        // The root places as the root directory.
        let top = placer.place(&RelPath::root()).unwrap();
        assert!(fs::symlink_metadata(&*top).unwrap().is_dir());
    }

    #[test]
    fn a_kept_parent_is_the_directory_that_was_resolved() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        fs::create_dir_all(root.join("d")).unwrap();
        let outside = t.path().join("outside");
        fs::create_dir(&outside).unwrap();
        let placer = Placer::open(&root).unwrap();
        let first = placer.place(&rel("d/one")).unwrap();
        // A local process swaps the directory for a symlink to the outside.
        fs::rename(root.join("d"), root.join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
        fs::write(&*first, b"1").unwrap();
        assert_eq!(fs::read(root.join("moved/one")).unwrap(), b"1");
        // A fresh lookup refuses the swapped-in symlink.
        placer.forget();
        assert!(placer.place(&rel("d/two")).is_err());
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[test]
    fn list_dir_follows_no_symlink() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::os::unix::fs::symlink("/", t.path().join("up")).unwrap();
        std::os::unix::fs::symlink("a", t.path().join("alias")).unwrap();
        let root = TreeRoot::open(t.path()).unwrap();
        assert!(root.list_dir(&rel("a/b")).is_ok());
        assert!(root.list_dir(&RelPath::root()).is_ok());
        assert!(root.list_dir(&rel("up")).is_err());
        assert!(root.list_dir(&rel("alias/b")).is_err());
    }

    #[test]
    fn subdirs_open_without_symlinks_or_mounts_with_and_without_openat2() {
        /// Unmounts (lazily) when dropped, before the temporary directory goes.
        struct Unmount(PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(&self.0)
                    .status();
            }
        }
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("d")).unwrap();
        fs::create_dir(t.path().join("m")).unwrap();
        std::os::unix::fs::symlink("d", t.path().join("link")).unwrap();
        let at =
            rustix::fs::open(t.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let name = OsStr::new;
        // A bind mount of the same file system (same device): root only.
        let mounted = rustix::process::geteuid().is_root()
            && std::process::Command::new("mount")
                .arg("--bind")
                .arg(t.path().join("d"))
                .arg(t.path().join("m"))
                .status()
                .is_ok_and(|s| s.success());
        let _unmount = mounted.then(|| Unmount(t.path().join("m")));
        if !mounted {
            crate::stdio::err("mount points not tried: mounting needs root\n");
        }
        for open in [open_subdir, open_subdir_compared] {
            assert!(open(at.as_fd(), name("d")).is_ok());
            assert!(open(at.as_fd(), name("link")).is_err());
            if mounted {
                assert_eq!(
                    open(at.as_fd(), name("m")).err(),
                    Some(rustix::io::Errno::XDEV)
                );
            }
        }
    }

    #[test]
    fn stepwise_resolution_refuses_symlinks_too() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        fs::create_dir_all(root.join("a/b")).unwrap();
        std::os::unix::fs::symlink("/", root.join("a/abs")).unwrap();
        let tree = TreeRoot::open(&root).unwrap();
        let dir = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        assert!(tree.resolve_stepwise(&rel("a/b"), dir).is_ok());
        assert!(tree.resolve_stepwise(&rel("a/abs/etc"), dir).is_err());
        assert!(tree.resolve_stepwise(&rel("a/abs"), dir).is_err());
        assert!(tree.resolve_stepwise(&RelPath::root(), dir).is_ok());
    }
}
