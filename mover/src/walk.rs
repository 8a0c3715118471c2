//! The sender's walk of the source tree.
//!
//! Directory by directory, children in byte order: all children of a
//! directory are listed, then a `DirDone` marker, then its subdirectories in
//! order. The receiver can therefore apply `--delete` one directory at a time
//! without holding the whole tree, and memory stays bounded by the largest
//! directory plus the pending subdirectories.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use crate::filter::Filter;
use crate::meta::{kind_of, Kind, Meta};
use crate::path::RelPath;
use crate::protocol::Entry;
use crate::warm::Warmer;

/// Name of the receiver's private directory at the destination root; never transferred.
pub const STATE_DIR: &[u8] = b".volmig";

/// Temporary files are named `.volmig-NAME.TOKEN-SEQ.tmp`, where TOKEN is
/// unique to the receiving process: one of ours is in flight, any other is a
/// leftover or a partial file a checkpoint may resume.
pub const TEMP_PREFIX: &[u8] = b".volmig-";
pub const TEMP_SUFFIX: &[u8] = b".tmp";

/// Whether a directory entry is a temporary file of some mover.
pub fn is_temp_name(name: &[u8]) -> bool {
    name.len() > TEMP_PREFIX.len() + TEMP_SUFFIX.len()
        && name.starts_with(TEMP_PREFIX)
        && name.ends_with(TEMP_SUFFIX)
}

/// Something the walk produced.
#[derive(Debug)]
pub enum WalkItem {
    Entry(Entry),
    /// Every child of this directory has been listed.
    DirDone(RelPath),
    /// An entry could not be read; the walk goes on. Its directory gets no
    /// `DirDone`, so nothing is deleted on the strength of an incomplete listing.
    Failed(RelPath, io::Error),
    /// An entry disappeared between listing its directory and reading it.
    Vanished(RelPath),
    /// An entry with a name volmig reserves (`.volmig` at the root), not transferred.
    Reserved(RelPath),
}

/// Walks a tree, yielding [`WalkItem`]s.
pub struct Walker {
    root: PathBuf,
    filter: Filter,
    checksum: bool,
    /// Directories whose children are still to be listed, last = next.
    stack: Vec<RelPath>,
    /// Items ready to be handed out, in reverse order.
    ready: Vec<WalkItem>,
    /// First path seen for each multiply-linked inode.
    links: HashMap<(u64, u64), RelPath>,
    started: bool,
    /// Stats the directories still to be listed ahead of the walk.
    warmer: Option<Warmer>,
}

impl Walker {
    pub fn new(root: PathBuf, filter: Filter, checksum: bool) -> Walker {
        Walker {
            root,
            filter,
            checksum,
            stack: Vec::new(),
            ready: Vec::new(),
            links: HashMap::new(),
            started: false,
            warmer: None,
        }
    }

    /// Has `warmer`, whose root must be this walk's, stat each directory's
    /// entries before the walk lists it.
    pub fn with_warmer(mut self, warmer: Option<Warmer>) -> Walker {
        self.warmer = warmer;
        self
    }

    fn entry(&mut self, path: RelPath) -> Option<WalkItem> {
        let full = path.under(&self.root);
        let md = match fs::symlink_metadata(&full) {
            Ok(md) => md,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(WalkItem::Vanished(path)),
            Err(e) => return Some(WalkItem::Failed(path, e)),
        };
        if self.filter.excludes(&path, md.is_dir()) {
            return None;
        }
        let mut kind = match kind_of(&full, &md) {
            Ok(k) => k,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(WalkItem::Vanished(path)),
            Err(e) => return Some(WalkItem::Failed(path, e)),
        };
        let inode = (md.dev(), md.ino());
        let mut first_name = false;
        if kind == Kind::File && md.nlink() > 1 {
            match self.links.get(&inode) {
                Some(first) => kind = Kind::HardLink(first.clone()),
                None => first_name = true,
            }
        }
        let checksum = if self.checksum && kind == Kind::File {
            match file_hash(&full) {
                Ok(h) => Some(h),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Some(WalkItem::Vanished(path))
                }
                Err(e) => return Some(WalkItem::Failed(path, e)),
            }
        } else {
            None
        };
        if kind == Kind::Dir {
            self.stack.push(path.clone());
        }
        // Only a name that is actually listed may stand for the inode's later names.
        if first_name {
            self.links.insert(inode, path.clone());
        }
        Some(WalkItem::Entry(Entry {
            path,
            kind,
            meta: Meta::from_fs(&md),
            checksum,
        }))
    }

    /// The root itself: a symlink to a directory is followed, as `rsync SRC/` does.
    fn root_entry(&mut self) -> Option<WalkItem> {
        let root = RelPath::root();
        match fs::metadata(&self.root) {
            Ok(md) if md.is_dir() => {
                self.stack.push(root.clone());
                Some(WalkItem::Entry(Entry {
                    path: root,
                    kind: Kind::Dir,
                    meta: Meta::from_fs(&md),
                    checksum: None,
                }))
            }
            Ok(_) => Some(WalkItem::Failed(
                root,
                io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "source root is not a directory",
                ),
            )),
            Err(e) => Some(WalkItem::Failed(root, e)),
        }
    }

    /// Lists one directory into `ready`.
    fn list(&mut self, dir: RelPath) {
        let mut names: Vec<Vec<u8>> = match list_names(&dir.under(&self.root)) {
            Ok(names) => names,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.ready.push(WalkItem::Vanished(dir));
                return;
            }
            Err(e) => {
                self.ready.push(WalkItem::Failed(dir, e));
                return;
            }
        };
        names.sort_unstable();
        let stack_base = self.stack.len();
        let mut items = Vec::with_capacity(names.len() + 1);
        for name in names {
            if dir.is_root() && name == STATE_DIR {
                // Reserved for the receiver's state at the destination.
                items.push(WalkItem::Reserved(
                    RelPath::root().join(STATE_DIR).expect("valid name"),
                ));
                continue;
            }
            let item = match dir.join(&name) {
                Ok(path) => self.entry(path),
                Err(e) => Some(WalkItem::Failed(
                    dir.clone(),
                    io::Error::new(io::ErrorKind::InvalidData, e),
                )),
            };
            items.extend(item);
        }
        close_listing(&mut items, dir);
        // Subdirectories are visited in byte order: reverse the ones just pushed.
        self.stack[stack_base..].reverse();
        if let Some(warmer) = &self.warmer {
            for dir in self.stack[stack_base..].iter().rev() {
                warmer.offer(dir);
            }
        }
        items.reverse();
        self.ready = items;
    }
}

impl Iterator for Walker {
    type Item = WalkItem;

    fn next(&mut self) -> Option<WalkItem> {
        if !self.started {
            self.started = true;
            return self.root_entry();
        }
        loop {
            if let Some(item) = self.ready.pop() {
                return Some(item);
            }
            let dir = self.stack.pop()?;
            self.list(dir);
        }
    }
}

/// Ends a directory's listing with `DirDone`, unless a child could not be
/// read: that child is missing from the listing, and without `DirDone` the
/// receiver deletes nothing in this directory on the strength of it.
fn close_listing(items: &mut Vec<WalkItem>, dir: RelPath) {
    if !items.iter().any(|i| matches!(i, WalkItem::Failed(..))) {
        items.push(WalkItem::DirDone(dir));
    }
}

/// The names in a directory, read without updating its access time where
/// the kernel allows (as [`open_source`] does for files).
fn list_names(path: &std::path::Path) -> io::Result<Vec<Vec<u8>>> {
    use rustix::fs::{Dir, Mode, OFlags, CWD};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(CWD, path, flags | OFlags::NOATIME, Mode::empty()) {
        Err(rustix::io::Errno::PERM) => rustix::fs::openat(CWD, path, flags, Mode::empty())?,
        other => other?,
    };
    let mut names = Vec::new();
    for entry in Dir::read_from(&fd)? {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    Ok(names)
}

/// Opens a source file read-only without updating its access time where the
/// kernel allows it (O_NOATIME needs ownership or CAP_FOWNER).
pub fn open_source(path: &std::path::Path) -> io::Result<File> {
    let noatime = fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOATIME.bits() as i32)
        .open(path);
    match noatime {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()) => {
            File::open(path)
        }
        other => other,
    }
}

/// BLAKE3 of a file's contents.
pub fn file_hash(path: &std::path::Path) -> io::Result<[u8; 32]> {
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(open_source(path)?)?;
    Ok(*hasher.finalize().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(items: &[WalkItem]) -> Vec<String> {
        items
            .iter()
            .map(|i| match i {
                WalkItem::Entry(e) => format!("{}:{}", e.kind.name(), e.path),
                WalkItem::DirDone(p) => format!("done:{p}"),
                WalkItem::Failed(p, e) => format!("failed:{p}:{e}"),
                WalkItem::Vanished(p) => format!("vanished:{p}"),
                WalkItem::Reserved(p) => format!("reserved:{p}"),
            })
            .collect()
    }

    #[test]
    fn lists_directory_by_directory_in_order() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("b/x")).unwrap();
        fs::create_dir(r.join("a")).unwrap();
        fs::write(r.join("b/f"), b"1").unwrap();
        fs::hard_link(r.join("b/f"), r.join("c")).unwrap();
        fs::write(r.join("skip.log"), b"").unwrap();
        let filter = Filter::new(&["*.log".into()]).unwrap();
        let items: Vec<_> = Walker::new(r.to_path_buf(), filter, false).collect();
        assert_eq!(
            names(&items),
            [
                "directory:.",
                "directory:a",
                "directory:b",
                "file:c",
                "done:.",
                "done:a",
                "hard link:b/f",
                "directory:b/x",
                "done:b",
                "done:b/x"
            ]
        );
        let WalkItem::Entry(e) = &items[6] else {
            panic!()
        };
        assert_eq!(e.kind, Kind::HardLink(RelPath::new(b"c".to_vec()).unwrap()));
    }

    #[test]
    fn unreadable_child_withholds_dir_done_and_state_dir_is_reserved() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir(r.join(".volmig")).unwrap();
        fs::create_dir(r.join("d")).unwrap();
        let items: Vec<_> = Walker::new(r.to_path_buf(), Filter::default(), false).collect();
        assert_eq!(
            names(&items),
            [
                "directory:.",
                "reserved:.volmig",
                "directory:d",
                "done:.",
                "done:d"
            ]
        );

        let d = RelPath::new(b"d".to_vec()).unwrap();
        let mut listing = vec![WalkItem::Vanished(d.join(b"gone").unwrap())];
        close_listing(&mut listing, d.clone());
        assert!(
            matches!(listing.last(), Some(WalkItem::DirDone(_))),
            "vanished children are fine"
        );
        let mut listing = vec![WalkItem::Failed(
            d.join(b"x").unwrap(),
            io::Error::other("EIO"),
        )];
        close_listing(&mut listing, d);
        assert!(!matches!(listing.last(), Some(WalkItem::DirDone(_))));
    }

    #[test]
    fn checksum_mode_hashes_files() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("f"), b"abc").unwrap();
        let items: Vec<_> = Walker::new(t.path().to_path_buf(), Filter::default(), true).collect();
        let WalkItem::Entry(e) = &items[1] else {
            panic!()
        };
        assert_eq!(e.checksum, Some(*blake3::hash(b"abc").as_bytes()));
    }

    #[test]
    fn a_file_root_is_refused() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("f"), b"x").unwrap();
        let items: Vec<_> = Walker::new(t.path().join("f"), Filter::default(), false).collect();
        assert!(matches!(items[0], WalkItem::Failed(..)));
    }
}
