//! What leaves the destination when a directory's listing is complete:
//! with `--delete`, whatever the source no longer has; in any case,
//! temporary files no process of this operation still uses.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::Generator;
use crate::path::RelPath;
use crate::session::commit::is_own_temp;
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
        let r = self.placer.place(path).and_then(|full| {
            if is_dir {
                self.delete_dir(path, &full)
            } else {
                fs::remove_file(&*full)
            }
        });
        match r {
            Ok(()) => self.result.summary.deleted += 1,
            Err(err) if is_fatal(&err) => return Err(err),
            // Kept because it holds excluded names.
            Err(err) if err.kind() == io::ErrorKind::DirectoryNotEmpty => {}
            Err(err) => {
                warn(format_args!("deleting {path}: {err}"));
                self.result.summary.files_failed += 1;
            }
        }
        Ok(())
    }

    fn delete_dir(&mut self, path: &RelPath, full: &Path) -> io::Result<()> {
        // Without root, a read-only directory cannot be emptied: open it up
        // (and close it again if it has to stay).
        let mode = fs::symlink_metadata(full)?.mode();
        if mode & 0o700 != 0o700 {
            fs::set_permissions(full, fs::Permissions::from_mode(mode | 0o700))?;
        }
        let emptied = self.delete_children(path, full);
        emptied
            .and_then(|()| fs::remove_dir(full))
            .inspect_err(|_| {
                let _ = fs::set_permissions(full, fs::Permissions::from_mode(mode));
            })
    }

    fn delete_children(&mut self, path: &RelPath, full: &Path) -> io::Result<()> {
        for de in fs::read_dir(full)? {
            let de = de?;
            let Ok(child) = path.join(de.file_name().as_bytes()) else {
                continue;
            };
            let child_is_dir = de.file_type()?.is_dir();
            if !self.filter.excludes(&child, child_is_dir) {
                self.delete(&child, child_is_dir)?;
            }
        }
        Ok(())
    }
}
