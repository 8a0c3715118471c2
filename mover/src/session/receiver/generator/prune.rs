//! What leaves the destination when a directory's listing is complete:
//! with `--delete`, whatever the source no longer has; in any case,
//! temporary files no process of this operation still uses.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::Generator;
use crate::beneath::open_subdir;
use crate::path::RelPath;
use crate::session::receiver::commit::is_own_temp;
use crate::session::receiver::remove::chmod;
use crate::session::{is_fatal, warn};
use crate::walk::{is_temp_name, STATE_DIR};

impl Generator {
    /// Removes what the source directory no longer has with `--delete`, and
    /// in any case the temporary files no process of this operation still
    /// uses (a killed receiver's, an abandoned operation's): volmig's own
    /// names never stay behind.
    pub(super) fn delete_extraneous(
        &mut self,
        dir: &RelPath,
        keep: &HashSet<Vec<u8>>,
    ) -> io::Result<()> {
        let rd = match self.placer.place(dir).and_then(|d| fs::read_dir(&*d)) {
            Ok(rd) => rd,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(())
            }
            Err(e) => return Err(e),
        };
        for de in rd {
            let de = de?;
            let name = de.file_name();
            let name = name.as_bytes();
            if keep.contains(name) || is_own_temp(name) || (dir.is_root() && name == STATE_DIR) {
                continue;
            }
            let temp = is_temp_name(name);
            if temp && self.journal.as_ref().is_some_and(|j| j.holds(dir, name)) {
                continue;
            }
            let Ok(path) = dir.join(name) else { continue };
            let is_dir = de.file_type()?.is_dir();
            if !self.opts.delete {
                // Without --delete only leftover temporary files go, and
                // quietly: they were never the user's.
                if temp && !is_dir {
                    let _ = self.placer.place(&path).and_then(|p| fs::remove_file(&*p));
                }
                continue;
            }
            if self.filter.excludes(&path, is_dir) {
                continue;
            }
            self.delete(&path, is_dir)?;
        }
        Ok(())
    }

    /// Deletes an extraneous entry; in a directory, excluded names are kept
    /// (and so is the directory holding them), as rsync does. Only fatal
    /// errors are returned; others are reported and counted.
    fn delete(&mut self, path: &RelPath, is_dir: bool) -> io::Result<()> {
        match self.placer.place(path) {
            Ok(placed) => {
                let (parent, name) = placed.at();
                self.delete_at(parent, name, path, is_dir)
            }
            Err(err) => self.count_delete(path, Err(err)),
        }
    }

    /// Deletes `name` in the directory `parent`; `path` names it. Works
    /// from handles, as the shared remover does (`session/receiver/remove.rs`): a
    /// symlink is unlinked, never followed, and a mount point is not
    /// entered.
    fn delete_at(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        path: &RelPath,
        is_dir: bool,
    ) -> io::Result<()> {
        let r = if is_dir {
            self.delete_dir(parent, name, path)
        } else {
            rustix::fs::unlinkat(parent, name, AtFlags::empty()).map_err(io::Error::from)
        };
        self.count_delete(path, r)
    }

    fn count_delete(&mut self, path: &RelPath, r: io::Result<()>) -> io::Result<()> {
        match r {
            Ok(()) => self.result.summary.deleted += 1,
            Err(err) if is_fatal(&err) => return Err(err),
            // Kept because it holds excluded names (or a mount point, which
            // is reported as itself).
            Err(err) if err.kind() == io::ErrorKind::DirectoryNotEmpty => {}
            Err(err) => {
                warn(format_args!("deleting {path}: {err}"));
                self.result.summary.files_failed += 1;
            }
        }
        Ok(())
    }

    /// Empties and removes the directory `name` in `parent`. It is opened
    /// from its parent's handle ([`open_subdir`]): never through a symlink,
    /// and never into another mount. A mount point below the destination (a
    /// bind mount, a tmpfs put there) is not entered: what is mounted there
    /// keeps its contents, and the mount point is a failed delete.
    fn delete_dir(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        path: &RelPath,
    ) -> io::Result<()> {
        let dir = match open_subdir(parent, name) {
            Ok(dir) => dir,
            Err(Errno::XDEV) => {
                return Err(io::Error::new(
                    io::ErrorKind::ResourceBusy,
                    "is a mount point: not entered, what is mounted there is kept",
                ))
            }
            Err(e) => return Err(e.into()),
        };
        // Without root, a read-only directory cannot be emptied: open it up
        // (and close it again if it has to stay).
        let mode = rustix::fs::fstat(&dir)?.st_mode;
        let opened = mode & 0o700 != 0o700;
        if opened {
            chmod(dir.as_fd(), mode | 0o700)?;
        }
        let removed = self.delete_children(dir.as_fd(), path).and_then(|()| {
            rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(io::Error::from)
        });
        if removed.is_err() && opened {
            let _ = chmod(dir.as_fd(), mode);
        }
        removed
    }

    /// Deletes what `dir` (which `path` names) holds, but excluded names.
    fn delete_children(&mut self, dir: BorrowedFd<'_>, path: &RelPath) -> io::Result<()> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let listing = rustix::fs::openat(dir, ".", flags, Mode::empty()).and_then(Dir::new)?;
        for entry in listing {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let Ok(child) = path.join(name) else {
                continue;
            };
            let name = OsStr::from_bytes(name);
            let kind = match entry.file_type() {
                // Not every file system says in the listing.
                FileType::Unknown => {
                    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
                    FileType::from_raw_mode(st.st_mode)
                }
                kind => kind,
            };
            let child_is_dir = kind == FileType::Directory;
            if !self.filter.excludes(&child, child_is_dir) {
                self.delete_at(dir, name, &child, child_is_dir)?;
            }
        }
        Ok(())
    }
}
