//! Warming the caches ahead of a walk or of the files a sender will read.
//!
//! Both sides look at every entry of a tree one at a time: the sender's
//! walker stats each source entry, the receiver's generator each listed
//! name at the destination. On a cold cache every one of those waits on the
//! disk for its inode, one read after the other: most of a no-op re-sync of
//! 20,000 files went so. A [`Warmer`] stats whole directories on a few
//! threads ahead of the walk, so that the walk finds the inodes in memory and
//! the disk has several reads to serve at once.
//!
//! The sender's delta thread likewise reads the files it is asked for one
//! after another, and opening a file waits on the disk for its inode: the
//! same threads, given files, start reading their first MiB into the page
//! cache ([`Warm::Data`]).
//!
//! It is best effort and changes nothing: a path it cannot open, a name it
//! cannot stat, or a path offered while its queue is full is simply left to
//! the walk. Paths are opened beneath the tree's root without following
//! symlinks, like every other path a peer names.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;

use rustix::fs::{AtFlags, Dir};

use crate::beneath::TreeRoot;
use crate::path::RelPath;

/// Threads, each with its own queue: the work is waiting on the disk, not
/// the CPU, so more threads than cores pay.
const THREADS: usize = 4;
/// Paths queued per thread before more are left to the walk.
const QUEUE: usize = 256;
/// Leading bytes of each file offered for [`Warm::Data`] that are read ahead.
const DATA_BYTES: u64 = 1 << 20;

/// What a [`Warmer`] does with the paths it is offered.
#[derive(Debug, Clone, Copy)]
pub enum Warm {
    /// Directories: stat each of their entries.
    Entries,
    /// Files: read their first [`DATA_BYTES`] into the page cache.
    Data,
}

/// Threads that warm the caches for the paths they are given.
pub struct Warmer {
    lanes: Vec<SyncSender<RelPath>>,
    next: AtomicUsize,
    stop: Arc<AtomicBool>,
}

impl Warmer {
    /// Starts the threads; `None` if none could be started (nothing is warmed).
    pub fn start(root: &Arc<TreeRoot>, what: Warm) -> Option<Warmer> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut lanes = Vec::with_capacity(THREADS);
        for _ in 0..THREADS {
            let (tx, rx) = sync_channel::<RelPath>(QUEUE);
            let (root, stop) = (root.clone(), stop.clone());
            let started = std::thread::Builder::new()
                .name("warm".into())
                .spawn(move || {
                    for path in rx {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        match what {
                            Warm::Entries => entries(&root, &path, &stop),
                            Warm::Data => data(&root, &path),
                        }
                    }
                });
            if started.is_ok() {
                lanes.push(tx);
            }
        }
        (!lanes.is_empty()).then(|| Warmer {
            lanes,
            next: AtomicUsize::new(0),
            stop,
        })
    }

    /// Queues `path` (relative to the root) to be warmed, if there is room.
    pub fn offer(&self, path: &RelPath) {
        let lane = self.next.fetch_add(1, Ordering::Relaxed) % self.lanes.len();
        let _ = self.lanes[lane].try_send(path.clone());
    }
}

impl Drop for Warmer {
    /// The threads end at their next path or entry: what is still queued is
    /// left, whichever kind of warming it was for.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts reading the first [`DATA_BYTES`] of `file`.
fn data(root: &TreeRoot, file: &RelPath) {
    if let Ok(f) = root.open_file(file) {
        let len = std::num::NonZeroU64::new(DATA_BYTES);
        let _ = rustix::fs::fadvise(&f, 0, len, rustix::fs::Advice::WillNeed);
    }
}

/// Stats every entry of `dir`, without following symlinks.
fn entries(root: &TreeRoot, dir: &RelPath, stop: &AtomicBool) {
    let Ok(fd) = root.list_dir(dir) else { return };
    let Ok(entries) = Dir::read_from(&fd) else {
        return;
    };
    for entry in entries {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(entry) = entry else { return };
        let name = entry.file_name();
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            let _ = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(s: &str) -> RelPath {
        RelPath::new(s.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn offering_directories_never_blocks_the_walk() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::fs::write(t.path().join("a/f"), b"x").unwrap();
        std::os::unix::fs::symlink("/", t.path().join("up")).unwrap();
        let root = Arc::new(TreeRoot::open(t.path()).unwrap());
        let warmer = Warmer::start(&root, Warm::Entries).expect("threads");
        // Far more than the queues hold, missing and symlinked ones among
        // them: each offer returns at once (a full queue drops it).
        for i in 0..THREADS * QUEUE * 4 {
            let dir = ["a", "a/b", "up", "missing"][i % 4];
            warmer.offer(&rel(dir));
        }
        warmer.offer(&RelPath::root());
    }
}
