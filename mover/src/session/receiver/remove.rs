//! Removing whole trees at the destination: a directory that must give way
//! to a file or a link ([`remove_tree`]), and `receive --wipe`, which
//! empties the destination before the first session ([`wipe`]).
//!
//! One remover does both. Every directory is reached from its parent's
//! handle ([`open_subdir`]), never by a path string: a symlink is removed,
//! never followed, and a mount point below is not entered. Removing a mount
//! point fails (EBUSY) and the mounted file system keeps its contents, where
//! `rm -r` would have emptied it first. A directory without owner access (a
//! read-only 0555) is opened up to be emptied, as `--delete` does, and gets
//! its mode back if it has to stay.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::{File, FileTimes};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::beneath::{open_subdir, TreeRoot};
use crate::path::lossy;
use crate::session::{warn, SessionError};

/// What a removal took away.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removed {
    /// Entries of every kind: a directory, and each entry in it.
    pub entries: u64,
    /// The sizes of the regular files removed, each file once however many
    /// names it had.
    pub bytes: u64,
}

/// The first entry that could not be removed, and why.
#[derive(Debug)]
struct Failed {
    /// Relative to the directory being emptied; empty for that directory.
    path: Vec<u8>,
    source: io::Error,
}

struct Remover<'a> {
    removed: Removed,
    /// Files with more names than the ones removed so far, whose size was
    /// counted at their first name.
    counted: HashSet<(u64, u64)>,
    /// The entry at hand, relative to where the removal started.
    path: Vec<u8>,
    stop: Option<&'a CancellationToken>,
}

impl<'a> Remover<'a> {
    fn new(stop: Option<&'a CancellationToken>) -> Remover<'a> {
        Remover {
            removed: Removed::default(),
            counted: HashSet::new(),
            path: Vec::new(),
            stop,
        }
    }

    fn fail(&self, e: impl Into<io::Error>) -> Failed {
        Failed {
            path: self.path.clone(),
            source: e.into(),
        }
    }

    /// Removes `name` in `parent` (`self.path` names it), whatever it is.
    fn remove(&mut self, parent: BorrowedFd<'_>, name: &OsStr) -> Result<(), Failed> {
        let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.fail(e))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => self.remove_dir(parent, name, st.st_mode)?,
            kind => {
                // A symlink is one entry like a file: unlinked, not followed.
                rustix::fs::unlinkat(parent, name, AtFlags::empty()).map_err(|e| self.fail(e))?;
                if kind == FileType::RegularFile && self.first_name(&st) {
                    self.removed.bytes += st.st_size.max(0) as u64;
                }
            }
        }
        self.removed.entries += 1;
        Ok(())
    }

    /// Whether a file's size is still to be counted: a file with several
    /// names counts at the first one removed.
    fn first_name(&mut self, st: &Stat) -> bool {
        let key = file_key(st);
        if st.st_nlink > 1 {
            self.counted.insert(key)
        } else {
            // Its last name: counted already if an earlier one was seen.
            !self.counted.remove(&key)
        }
    }

    fn remove_dir(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        mode: u32,
    ) -> Result<(), Failed> {
        let rmdir = |r: &Self| {
            rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(|e| r.fail(e))
        };
        let dir = match open_subdir(parent, name) {
            Ok(dir) => dir,
            // A mount point: what is mounted there is not this tree's to
            // empty. Removing the directory says EBUSY, as it should.
            Err(rustix::io::Errno::XDEV) => return rmdir(self),
            Err(e) => return Err(self.fail(e)),
        };
        let opened = open_up(dir.as_fd(), mode);
        let removed = self.empty(dir.as_fd()).and_then(|()| rmdir(self));
        if let (Err(_), Some(mode)) = (&removed, opened) {
            let _ = chmod(dir.as_fd(), mode);
        }
        removed
    }

    /// Removes everything in `dir`, which `self.path` names.
    fn empty(&mut self, dir: BorrowedFd<'_>) -> Result<(), Failed> {
        // Some file systems skip entries when others are removed during a
        // read: read again until a pass finds nothing.
        loop {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let listing = rustix::fs::openat(dir, ".", flags, Mode::empty())
                .and_then(Dir::new)
                .map_err(|e| self.fail(e))?;
            let mut found = false;
            for entry in listing {
                let entry = entry.map_err(|e| self.fail(e))?;
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                if self.stop.is_some_and(|s| s.is_cancelled()) {
                    return Err(self.fail(io::ErrorKind::Interrupted));
                }
                found = true;
                let len = self.path.len();
                if len > 0 {
                    self.path.push(b'/');
                }
                self.path.extend_from_slice(name);
                self.remove(dir, OsStr::from_bytes(name))?;
                self.path.truncate(len);
            }
            if !found {
                return Ok(());
            }
        }
    }
}

/// A file's identity, for counting a file with several names once.
#[allow(clippy::unnecessary_cast)] // The types differ between targets.
fn file_key(st: &Stat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

/// Gives the owner full access to a directory that lacks it, so that it can
/// be emptied, and returns the mode to put back if it has to stay. Without
/// the right to (another user's, immutable), it is left as it is: removing
/// its entries then says why.
fn open_up(dir: BorrowedFd<'_>, mode: u32) -> Option<u32> {
    if mode & 0o700 == 0o700 {
        return None;
    }
    chmod(dir, mode | 0o700).ok().map(|()| mode)
}

/// `chmod` of a held directory, which may be an `O_PATH` handle (one that
/// `fchmod` refuses): its `/proc` link leads to the very inode.
pub(in crate::session) fn chmod(dir: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    let via = format!("/proc/self/fd/{}", dir.as_raw_fd());
    rustix::fs::chmod(via.as_str(), Mode::from_raw_mode(mode)).map_err(Into::into)
}

/// Removes the directory at `path` and everything in it. `path` is a
/// placed path (see `beneath`): its parent was reached beneath the root.
pub(in crate::session) fn remove_tree(path: impl AsRef<Path>) -> io::Result<()> {
    let path = path.as_ref();
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::other(format!(
            "{}: not an entry to remove",
            path.display()
        )));
    };
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let parent = rustix::fs::open(parent, flags, Mode::empty())?;
    let mut remover = Remover::new(None);
    remover.path = name.as_bytes().to_vec();
    remover
        .remove(parent.as_fd(), name)
        .map_err(|failed| failed.source)
}

/// Empties the destination for `receive --wipe`: every entry below `root`
/// is removed, volmig's own (the checkpoint directory `.volmig`, temporary
/// files) included; the root itself keeps its mode, owner and times. A
/// missing root has nothing to wipe. The first entry that cannot be removed
/// stops the wipe: [`SessionError::Wipe`], which names it.
pub fn wipe(root: &Path, stop: &CancellationToken) -> Result<Removed, SessionError> {
    let cannot = |what: String, source: io::Error| SessionError::Wipe { what, source };
    let tree = match TreeRoot::open(root) {
        Ok(tree) => tree,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Removed::default()),
        Err(e) => return Err(cannot(format!("cannot open {}", root.display()), e)),
    };
    let held = tree
        .as_fd()
        .try_clone_to_owned()
        .map(File::from)
        .and_then(|f| f.metadata().map(|md| (f, md)));
    let (file, md) = held.map_err(|e| cannot(format!("cannot open {}", root.display()), e))?;
    let mode = std::os::unix::fs::PermissionsExt::mode(&md.permissions());
    let opened = open_up(tree.as_fd(), mode);
    let mut remover = Remover::new(Some(stop));
    let emptied = remover.empty(tree.as_fd());
    // The root is the volume's: its mode and times are put back.
    if let Some(mode) = opened {
        if let Err(e) = chmod(tree.as_fd(), mode) {
            warn(format_args!(
                "wipe: cannot restore the mode of {}: {e}",
                root.display()
            ));
        }
    }
    let times = (md.accessed(), md.modified());
    if let (Ok(atime), Ok(mtime)) = times {
        let put_back = file.set_times(FileTimes::new().set_accessed(atime).set_modified(mtime));
        if let Err(e) = put_back {
            warn(format_args!(
                "wipe: cannot restore the times of {}: {e}",
                root.display()
            ));
        }
    }
    match emptied {
        Ok(()) => Ok(remover.removed),
        Err(_) if stop.is_cancelled() => Err(SessionError::Interrupted),
        Err(Failed { path, source }) if path.is_empty() => {
            Err(cannot(format!("cannot empty {}", root.display()), source))
        }
        Err(Failed { path, source }) => {
            Err(cannot(format!("cannot remove {}", lossy(&path)), source))
        }
    }
}

#[cfg(test)]
mod tests;
