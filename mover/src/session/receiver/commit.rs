//! Temporary files and durable, atomic commits of finished files.
//!
//! A finished file is written to a temporary name in its own directory, gets
//! its metadata, is made durable, and only then renamed over the destination,
//! so a crash never leaves a half-written file under a real name. Files are
//! committed in groups: one `syncfs` makes a whole group of small files durable
//! at the cost of one journal flush, instead of one `fsync` each.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::beneath::Placed;
use crate::path::RelPath;

use crate::walk::{is_temp_name, TEMP_PREFIX, TEMP_SUFFIX};

/// Files per group before it is committed: one `syncfs` per 2048 small
/// files. With a checkpoint journal, 256: until its group is committed, each
/// file keeps its journal slot (a hash state of a few KiB) and is named in
/// every checkpoint, which must stay small.
const GROUP_FILES: usize = 2048;
const JOURNALED_GROUP_FILES: usize = 256;
/// Bytes per group before it is committed.
pub const GROUP_BYTES: u64 = 256 * 1024 * 1024;
/// How long a finished file waits for its group at most: files done show as
/// done while a few large files take minutes.
pub const GROUP_AGE: Duration = Duration::from_secs(2);

/// Whether a temporary file belongs to this process (and may be in flight).
pub fn is_own_temp(name: &[u8]) -> bool {
    let mark = format!(".{}-", token());
    is_temp_name(name) && name.windows(mark.len()).any(|w| w == mark.as_bytes())
}

/// This process's mark in temporary names.
fn token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        format!("{:x}{:06x}", std::process::id(), nanos & 0xff_ffff)
    })
}

/// A fresh temporary name for a file next to `dest`.
pub fn temp_name(dest: &Path) -> OsString {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = dest.file_name().map(|n| n.as_bytes()).unwrap_or(b"root");
    let mut t = TEMP_PREFIX.to_vec();
    t.extend_from_slice(&name[..name.len().min(200)]);
    t.extend_from_slice(
        format!(".{}-{:x}", token(), SEQ.fetch_add(1, Ordering::Relaxed)).as_bytes(),
    );
    t.extend_from_slice(TEMP_SUFFIX);
    OsString::from_vec(t)
}

/// Creates a new temporary file next to `dest`, readable and writable only by us.
pub fn create_temp(dest: &Placed) -> io::Result<(Placed, File)> {
    loop {
        let temp = dest.sibling(&temp_name(dest));
        match create_beneath(&temp) {
            Ok(f) => return Ok((temp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Creates `temp` in the directory its placement holds open: no path is
/// walked again (through `/proc/self/fd`, a tenth of a small file's cost),
/// and the name is one component, never followed.
fn create_beneath(temp: &Placed) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let (dir, name) = temp.at();
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o600))?;
    Ok(File::from(fd))
}

/// The name of the temporary file an operation uses for `dest`. It depends only on
/// the operation and the file, so one left behind by a killed attempt
/// (written after its last checkpoint) is replaced by the next attempt
/// instead of piling up.
pub fn keyed_temp_name(dest: &Path, key: &str) -> OsString {
    let name = dest.file_name().map(|n| n.as_bytes()).unwrap_or(b"root");
    let mut h = blake3::Hasher::new();
    h.update(key.as_bytes());
    h.update(b"\0");
    h.update(name);
    let tag = h.finalize().to_hex();
    let mut t = TEMP_PREFIX.to_vec();
    t.extend_from_slice(&name[..name.len().min(180)]);
    t.push(b'.');
    t.extend_from_slice(&tag.as_bytes()[..16]);
    t.extend_from_slice(TEMP_SUFFIX);
    OsString::from_vec(t)
}

/// Creates the temporary file `temp`, readable and writable only by us. A
/// leftover of that name is unlinked rather than truncated, in case it has
/// other names.
pub fn create_at(temp: &Placed) -> io::Result<File> {
    match create_beneath(temp) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let (dir, name) = temp.at();
            rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty())?;
            create_beneath(temp)
        }
        r => r,
    }
}

/// Runs `make` on fresh temporary names next to `dest` until one is free,
/// then renames the result over `dest` (symlinks and special files).
pub fn create_and_replace(dest: &Path, make: impl Fn(&Path) -> io::Result<()>) -> io::Result<()> {
    let temp = loop {
        let temp = dest.with_file_name(temp_name(dest));
        match make(&temp) {
            Ok(()) => break temp,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                // Created but not finished (its metadata failed): not left behind.
                let _ = fs::remove_file(&temp);
                return Err(e);
            }
        }
    };
    fs::rename(&temp, dest).inspect_err(|_| {
        let _ = fs::remove_file(&temp);
    })
}

/// A finished file waiting to be made durable and put in place.
#[derive(Debug)]
pub struct Finished {
    /// The session's id for the file.
    pub id: u64,
    pub path: RelPath,
    /// The temporary file, or `None` when the destination was written in place.
    pub temp: Option<Placed>,
    pub dest: Placed,
    pub file: File,
    pub size: u64,
}

/// What a commit did.
#[derive(Debug, Default)]
pub struct Committed {
    /// `(id, path)` of each file now in place.
    pub done: Vec<(u64, RelPath)>,
    pub failed: Vec<(u64, RelPath, io::Error)>,
}

/// Finished files not yet committed.
///
/// Only the group's first file stays open (the handle `syncfs` or
/// `fdatasync` needs); the others are closed as they arrive, so a group costs
/// one descriptor however many files it holds.
#[derive(Debug, Default)]
pub struct CommitGroup {
    items: Vec<Waiting>,
    anchor: Option<File>,
    bytes: u64,
    /// When the group's first file arrived.
    since: Option<Instant>,
    /// Temporary files stay when the group is dropped uncommitted (a
    /// checkpoint names them, so the next attempt can use them).
    keep: bool,
}

#[derive(Debug)]
struct Waiting {
    id: u64,
    path: RelPath,
    temp: Option<Placed>,
    dest: Placed,
}

impl CommitGroup {
    /// Files a group gathers before it is committed.
    pub fn limit(&self) -> usize {
        if self.keep {
            JOURNALED_GROUP_FILES
        } else {
            GROUP_FILES
        }
    }

    pub fn new(keep: bool) -> CommitGroup {
        CommitGroup {
            items: Vec::new(),
            anchor: None,
            bytes: 0,
            since: None,
            keep,
        }
    }

    /// Adds a file; commits the group when it is full.
    pub fn push(&mut self, item: Finished) -> io::Result<Committed> {
        self.bytes += item.size;
        if self.anchor.is_none() {
            self.anchor = Some(item.file);
            self.since = Some(Instant::now());
        }
        self.items.push(Waiting {
            id: item.id,
            path: item.path,
            temp: item.temp,
            dest: item.dest,
        });
        if self.items.len() >= self.limit()
            || self.bytes >= GROUP_BYTES
            || self.due_in() == Some(Duration::ZERO)
        {
            self.commit()
        } else {
            Ok(Committed::default())
        }
    }

    /// How long until the group is due for commit by age; `None` while empty.
    pub fn due_in(&self) -> Option<Duration> {
        self.since
            .map(|since| GROUP_AGE.saturating_sub(since.elapsed()))
    }

    /// Makes every file durable, then renames each into place. (The renames
    /// themselves become durable with the next group's sync, or the final one
    /// at the end of the session.)
    ///
    /// An error here means the data may not be on disk: it is fatal for the session.
    pub fn commit(&mut self) -> io::Result<Committed> {
        let mut out = Committed::default();
        let Some(anchor) = self.anchor.take() else {
            return Ok(out);
        };
        self.since = None;
        if self.items.len() == 1 {
            anchor.sync_data()?;
        } else {
            // One journal flush for the whole group (the destination is one file system).
            rustix::fs::syncfs(&anchor)?;
        }
        self.bytes = 0;
        for item in self.items.drain(..) {
            let Some(temp) = &item.temp else {
                out.done.push((item.id, item.path));
                continue;
            };
            let ((from_dir, from), (to_dir, to)) = (temp.at(), item.dest.at());
            match rustix::fs::renameat(from_dir, from, to_dir, to) {
                Ok(()) => out.done.push((item.id, item.path)),
                Err(e) => {
                    let _ = fs::remove_file(&**temp);
                    out.failed.push((item.id, item.path, e.into()));
                }
            }
        }
        Ok(out)
    }
}

impl Drop for CommitGroup {
    /// A session that ends early leaves no temporary files behind, but those
    /// a checkpoint names.
    fn drop(&mut self) {
        remove_temps(self.keep, self.items.iter().map(|i| i.temp.as_ref()));
    }
}

/// Removes the temporary files of files dropped uncommitted, unless a
/// checkpoint journal names them (`journaled`): the next attempt goes on
/// from those.
pub fn remove_temps<'a>(journaled: bool, temps: impl Iterator<Item = Option<&'a Placed>>) {
    if journaled {
        return;
    }
    for temp in temps.flatten() {
        let _ = fs::remove_file(&**temp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_recognised_and_bounded() {
        let long = "x".repeat(250);
        let t = temp_name(&Path::new("/d").join(&long));
        let name = t.as_bytes();
        assert!(is_temp_name(name));
        assert!(is_own_temp(name));
        assert!(
            !is_own_temp(b".volmig-x.1234abcdef-0.tmp"),
            "another process's leftover"
        );
        assert!(name.len() <= 255);
        assert!(!is_temp_name(b".volmig"));
        let d = tempfile::tempdir().unwrap();
        let placer = crate::beneath::Placer::open(d.path()).unwrap();
        let dest = placer
            .place(&RelPath::new(long.clone().into_bytes()).unwrap())
            .unwrap();
        let t1 = keyed_temp_name(&d.path().join(&long), "op");
        create_at(&dest.sibling(&t1)).unwrap();
        let t2 = keyed_temp_name(&d.path().join(&long), "op");
        create_at(&dest.sibling(&t2)).unwrap();
        assert!(d.path().join(&t2).is_file());
        let t3 = keyed_temp_name(&d.path().join(format!("{long}y")), "op");
        assert_eq!(t1, t2, "the same operation and file reuse one name");
        assert_ne!(t1, t3, "long names that share a prefix do not collide");
        assert!(is_temp_name(t1.as_bytes()));
        assert!(t1.len() <= 255);
    }

    #[test]
    fn group_commits_atomically_and_cleans_up() {
        let d = tempfile::tempdir().unwrap();
        let placer = crate::beneath::Placer::open(d.path()).unwrap();
        let dest = placer.place(&RelPath::new(b"f".to_vec()).unwrap()).unwrap();
        let (temp, mut file) = create_temp(&dest).unwrap();
        io::Write::write_all(&mut file, b"data").unwrap();
        let mut g = CommitGroup::default();
        let r = g
            .push(Finished {
                id: 0,
                path: RelPath::new(b"f".to_vec()).unwrap(),
                temp: Some(temp.clone()),
                dest: dest.clone(),
                file,
                size: 4,
            })
            .unwrap();
        assert!(r.done.is_empty());
        assert!(!dest.exists());
        let r = g.commit().unwrap();
        assert_eq!(r.done.len(), 1);
        assert_eq!(fs::read(&*dest).unwrap(), b"data");
        assert!(!temp.exists());

        let (temp, file) = create_temp(&dest).unwrap();
        let mut g = CommitGroup::default();
        g.push(Finished {
            id: 1,
            path: RelPath::root(),
            temp: Some(temp.clone()),
            dest,
            file,
            size: 0,
        })
        .unwrap();
        drop(g);
        assert!(!temp.exists());
    }
}
