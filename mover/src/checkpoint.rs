//! The receiver's checkpoint: what an interrupted operation already did at the
//! destination, so that its next attempt resumes instead of starting over.
//!
//! It lives in `DST/.volmig/checkpoint`, next to a lock file that keeps two
//! receivers out of one destination. It is a hint, never trusted blindly:
//! every partial file it names is re-verified by BLAKE3 before it is reused,
//! so a stale or damaged checkpoint costs time, never correctness.
//!
//! Encoding (all integers little-endian):
//!
//! ```text
//! "VOLMIGCP" | format: u16 | body length: u32 | body (postcard) | BLAKE3(body): 32 bytes
//! ```
//!
//! Format 2 added, per partial file, the hash state of its verified prefix
//! ([`Partial::head`]) and what the temporary file was like when recorded;
//! format 1 is still read (its partial files are then checked in full).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::meta::Mtime;
use crate::path::RelPath;
use crate::treehash::{Head, HeadPiece};
use crate::walk::{is_temp_name, STATE_DIR};

/// The encoding this build writes (it reads this one and format 1).
pub const FORMAT: u16 = 2;
const MAGIC: [u8; 8] = *b"VOLMIGCP";
const HEADER_LEN: usize = MAGIC.len() + 2 + 4;
/// Largest checkpoint accepted (a real one is a few KiB to a few MiB).
pub const MAX_LEN: usize = 16 << 20;
/// Most partial files one checkpoint may name.
pub const MAX_PARTIALS: usize = 4096;
pub use crate::operation::{check_operation_id, MAX_OPERATION_ID};

const FILE: &str = "checkpoint";
const LOCK: &str = "lock";

/// What an operation has done at the destination, as of its last write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub operation_id: String,
    /// The attempt that wrote it.
    pub attempt: u32,
    /// The operation finished (kept only with `--keep-checkpoint`).
    pub complete: bool,
    /// Progress of the whole operation: files and bytes in their final form.
    pub files_done: u64,
    pub bytes_done: u64,
    /// Totals of the source, once an attempt has listed all of it.
    pub files_total: Option<u64>,
    pub bytes_total: Option<u64>,
    /// The source tree as last listed completely.
    pub source: Option<Fingerprint>,
    /// Files written to temporary names and not yet in place.
    pub partials: Vec<Partial>,
    /// Time spent by every attempt so far.
    pub elapsed_ms_total: u64,
    pub updated_unix_ms: u64,
}

/// A summary of a source listing: equal fingerprints mean an unchanged tree
/// (names, kinds, sizes, modification times and modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub entries: u64,
    pub files: u64,
    pub bytes: u64,
    pub digest: [u8; 32],
}

/// A file being rebuilt under a temporary name. Its first `verified_len`
/// bytes were written and hashed to `prefix_hash`; the rest of the temporary
/// file is unverified data that may still serve as a delta basis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partial {
    pub path: RelPath,
    /// The temporary file, in the same directory as `path`.
    pub temp: RelPath,
    /// Size and modification time of the source file the data came from.
    pub size: u64,
    pub mtime: Mtime,
    pub verified_len: u64,
    pub prefix_hash: [u8; 32],
    /// The hash state of the prefix's first bytes: complete BLAKE3 subtrees
    /// ([`Head`]), ending within a MiB of `verified_len` (empty: none; then
    /// the whole prefix is read to check it).
    pub head: Vec<HeadPiece>,
    /// The temporary file's inode when recorded (0: unknown).
    pub temp_ino: u64,
    /// When this record was taken (wall clock). The writer of the file may
    /// have written to it for a little while after (up to the next
    /// checkpoint), but not long after.
    pub recorded_at: Mtime,
}

impl Partial {
    /// The stored head, if it is one that fits this partial file.
    pub fn head(&self) -> Option<Head> {
        let head = Head::from_pieces(&self.head).ok()?;
        (!head.is_empty() && head.len() < self.verified_len).then_some(head)
    }
}

/// Why a checkpoint cannot be used. None of these is worth a retry: the
/// checkpoint is discarded and the transfer goes on without it.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("not a volmig checkpoint")]
    Garbage,
    #[error("truncated checkpoint ({len} bytes)")]
    Truncated { len: usize },
    #[error("checkpoint format {found} is newer than this mover's {FORMAT}")]
    Newer { found: u16 },
    #[error("corrupt checkpoint (checksum mismatch)")]
    Checksum,
    #[error("corrupt checkpoint: {0}")]
    Decode(#[from] postcard::Error),
    #[error("invalid checkpoint: {0}")]
    Invalid(String),
    #[error("checkpoint of operation {found:?}, not {want:?}")]
    Foreign { found: String, want: String },
    #[error("reading the checkpoint: {0}")]
    Io(#[from] io::Error),
}

impl CheckpointError {
    /// Only a failure to read may go away by itself.
    pub fn is_retryable(&self) -> bool {
        matches!(self, CheckpointError::Io(_))
    }
}

impl Checkpoint {
    pub fn new(operation_id: String, attempt: u32) -> Checkpoint {
        Checkpoint {
            operation_id,
            attempt,
            complete: false,
            files_done: 0,
            bytes_done: 0,
            files_total: None,
            bytes_total: None,
            source: None,
            partials: Vec::new(),
            elapsed_ms_total: 0,
            updated_unix_ms: 0,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        // Serializing plain data into a Vec cannot fail.
        let body = postcard::to_allocvec(self).unwrap_or_default();
        framed(MAGIC, FORMAT, &body)
    }

    /// Parses and validates untrusted bytes.
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
        if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
            return Err(if MAGIC.starts_with(bytes) {
                CheckpointError::Truncated { len: bytes.len() }
            } else {
                CheckpointError::Garbage
            });
        }
        if bytes.len() < HEADER_LEN {
            return Err(CheckpointError::Truncated { len: bytes.len() });
        }
        let format = u16::from_le_bytes([bytes[8], bytes[9]]);
        if format > FORMAT {
            return Err(CheckpointError::Newer { found: format });
        }
        if format == 0 {
            return Err(CheckpointError::Invalid("format 0".into()));
        }
        let len = u32::from_le_bytes([bytes[10], bytes[11], bytes[12], bytes[13]]) as usize;
        let rest = &bytes[HEADER_LEN..];
        if rest.len() < len.saturating_add(32) {
            return Err(CheckpointError::Truncated { len: bytes.len() });
        }
        if rest.len() > len + 32 {
            return Err(CheckpointError::Invalid("trailing bytes".into()));
        }
        let (body, sum) = rest.split_at(len);
        if blake3::hash(body).as_bytes() != sum {
            return Err(CheckpointError::Checksum);
        }
        let cp: Checkpoint = if format == 1 {
            postcard::from_bytes::<v1::Checkpoint>(body)?.into()
        } else {
            postcard::from_bytes(body)?
        };
        cp.validate()?;
        Ok(cp)
    }

    /// What a decoder must check beyond the encoding: nothing in a checkpoint
    /// may point outside the tree or at a file that is not a temporary one.
    fn validate(&self) -> Result<(), CheckpointError> {
        let invalid = |m: String| Err(CheckpointError::Invalid(m));
        check_operation_id(&self.operation_id).map_err(CheckpointError::Invalid)?;
        if self.attempt == 0 {
            return invalid("attempt 0".into());
        }
        if self.partials.len() > MAX_PARTIALS {
            return invalid(format!("{} partial files", self.partials.len()));
        }
        for p in &self.partials {
            let name = p.temp.file_name();
            let reserved = p.path.as_bytes().split(|&b| b == b'/').next() == Some(STATE_DIR);
            // The temp must be another name in the same directory (a source
            // file may itself look like a temp name).
            let beside = p.temp.parent() == p.path.parent() && p.temp != p.path;
            if p.path.is_root() || reserved || !beside {
                return invalid(format!("partial file {} at {}", p.path, p.temp));
            }
            if !is_temp_name(name) {
                return invalid(format!("{} is not a temporary name", p.temp));
            }
            if p.verified_len > p.size || !p.mtime.is_valid() || !p.recorded_at.is_valid() {
                return invalid(format!("partial file {} has bad bounds", p.path));
            }
            let head = Head::from_pieces(&p.head)
                .map_err(|e| CheckpointError::Invalid(format!("partial file {}: {e}", p.path)))?;
            if !head.is_empty() && head.len() >= p.verified_len {
                return invalid(format!(
                    "partial file {}: a hash state of {} bytes for a prefix of {}",
                    p.path,
                    head.len(),
                    p.verified_len
                ));
            }
        }
        Ok(())
    }

    /// The checkpoint for `mover inspect`: names as text, hashes in hex.
    pub fn describe(&self) -> Value {
        let partials: Vec<Value> = self
            .partials
            .iter()
            .map(|p| {
                json!({
                    "path": p.path.to_string(),
                    "temp": p.temp.to_string(),
                    "size": p.size,
                    "verified_len": p.verified_len,
                    "stored_hash_state": p.head().map_or(0, |h| h.len()),
                })
            })
            .collect();
        let source = self.source.map(|s| {
            json!({
                "entries": s.entries,
                "files": s.files,
                "bytes": s.bytes,
                "digest": blake3::Hash::from(s.digest).to_hex().to_string(),
            })
        });
        json!({
            "format": FORMAT,
            "operation_id": self.operation_id,
            "attempt": self.attempt,
            "complete": self.complete,
            "files_done": self.files_done,
            "bytes_done": self.bytes_done,
            "files_total": self.files_total,
            "bytes_total": self.bytes_total,
            "source": source,
            "partials": partials,
            "elapsed_ms_total": self.elapsed_ms_total,
            "updated_unix_ms": self.updated_unix_ms,
        })
    }
}

/// `magic | format | body length | body | BLAKE3(body)`, integers
/// little-endian: how checkpoints of every kind are stored.
pub(crate) fn framed(magic: [u8; 8], format: u16, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(magic.len() + 6 + body.len() + 32);
    out.extend_from_slice(&magic);
    out.extend_from_slice(&format.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(blake3::hash(body).as_bytes());
    out
}

/// Format 1, read and converted: no hash states, nothing known of the temporary files.
mod v1 {
    use serde::Deserialize;

    use crate::meta::Mtime;
    use crate::path::RelPath;

    #[derive(Deserialize)]
    pub struct Checkpoint {
        operation_id: String,
        attempt: u32,
        complete: bool,
        files_done: u64,
        bytes_done: u64,
        files_total: Option<u64>,
        bytes_total: Option<u64>,
        source: Option<super::Fingerprint>,
        partials: Vec<Partial>,
        elapsed_ms_total: u64,
        updated_unix_ms: u64,
    }

    #[derive(Deserialize)]
    struct Partial {
        path: RelPath,
        temp: RelPath,
        size: u64,
        mtime: Mtime,
        verified_len: u64,
        prefix_hash: [u8; 32],
    }

    impl From<Checkpoint> for super::Checkpoint {
        fn from(c: Checkpoint) -> super::Checkpoint {
            let partials = c
                .partials
                .into_iter()
                .map(|p| super::Partial {
                    path: p.path,
                    temp: p.temp,
                    size: p.size,
                    mtime: p.mtime,
                    verified_len: p.verified_len,
                    prefix_hash: p.prefix_hash,
                    head: Vec::new(),
                    temp_ino: 0,
                    recorded_at: Mtime::default(),
                })
                .collect();
            super::Checkpoint {
                operation_id: c.operation_id,
                attempt: c.attempt,
                complete: c.complete,
                files_done: c.files_done,
                bytes_done: c.bytes_done,
                files_total: c.files_total,
                bytes_total: c.bytes_total,
                source: c.source,
                partials,
                elapsed_ms_total: c.elapsed_ms_total,
                updated_unix_ms: c.updated_unix_ms,
            }
        }
    }
}

/// Reads the checkpoint under `root`, if there is one (no lock taken: for inspection).
pub fn read(root: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
    read_file(&state_dir(root).join(FILE))
}

fn read_file(path: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
    use std::io::Read;
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut bytes = Vec::new();
    file.take(MAX_LEN as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > MAX_LEN {
        return Err(CheckpointError::Invalid(format!(
            "larger than {MAX_LEN} bytes"
        )));
    }
    Checkpoint::decode(&bytes).map(Some)
}

fn state_dir(root: &Path) -> PathBuf {
    root.join(std::ffi::OsStr::new(
        std::str::from_utf8(STATE_DIR).unwrap_or(".volmig"),
    ))
}

/// The checkpoint of one destination, held under an exclusive lock.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    /// Held for the store's life; closing it releases the lock.
    _lock: File,
}

impl Store {
    /// Opens (making it if needed) the state directory under `root` and locks it.
    pub fn open(root: &Path) -> io::Result<Store> {
        let dir = state_dir(root);
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dir.join(LOCK))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
            |e| {
                if e == rustix::io::Errno::WOULDBLOCK {
                    io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!(
                            "another mover is receiving into {} (it holds {})",
                            root.display(),
                            dir.join(LOCK).display()
                        ),
                    )
                } else {
                    e.into()
                }
            },
        )?;
        Ok(Store { dir, _lock: lock })
    }

    pub fn load(&self) -> Result<Option<Checkpoint>, CheckpointError> {
        read_file(&self.dir.join(FILE))
    }

    /// Replaces the checkpoint atomically: a crash leaves the old one or the new one.
    pub fn save(&self, cp: &Checkpoint) -> io::Result<()> {
        let tmp = self.dir.join(format!("{FILE}.tmp"));
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(&cp.encode())?;
        f.sync_data()?;
        fs::rename(&tmp, self.dir.join(FILE))
    }

    /// Removes the checkpoint (the operation is complete).
    pub fn remove(&self) -> io::Result<()> {
        match fs::remove_file(self.dir.join(FILE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Removes the whole state directory (after a clean finish, when nothing
    /// is kept). The lock stays held until the store is dropped.
    pub fn remove_all(&self) -> io::Result<()> {
        fs::remove_dir_all(&self.dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        let p = |s: &str| RelPath::new(s.as_bytes().to_vec()).unwrap();
        let mut cp = Checkpoint::new("op-1".into(), 3);
        cp.files_done = 10;
        cp.bytes_done = 1 << 20;
        cp.partials.push(Partial {
            path: p("a/big"),
            temp: p("a/.volmig-big.1-0.tmp"),
            size: 1 << 30,
            mtime: Mtime { sec: 5, nsec: 7 },
            verified_len: 1 << 20,
            prefix_hash: [9; 32],
            head: vec![(512 << 10, [1; 32]), (256 << 10, [2; 32])],
            temp_ino: 77,
            recorded_at: Mtime { sec: 9, nsec: 1 },
        });
        cp
    }

    #[test]
    fn round_trips() {
        let cp = sample();
        assert_eq!(Checkpoint::decode(&cp.encode()).unwrap(), cp);
    }

    #[test]
    fn every_kind_of_damage_is_detected() {
        let good = sample().encode();
        let err = |b: &[u8]| Checkpoint::decode(b).unwrap_err();
        assert!(matches!(
            err(b"hello world, not ours"),
            CheckpointError::Garbage
        ));
        assert!(matches!(err(b""), CheckpointError::Truncated { .. }));
        for cut in [4, HEADER_LEN - 1, HEADER_LEN + 3, good.len() - 1] {
            assert!(
                matches!(err(&good[..cut]), CheckpointError::Truncated { .. }),
                "cut at {cut}"
            );
        }
        let mut flipped = good.clone();
        flipped[HEADER_LEN + 2] ^= 1;
        assert!(matches!(err(&flipped), CheckpointError::Checksum));
        let mut newer = good.clone();
        newer[8] = FORMAT as u8 + 1;
        assert!(matches!(err(&newer), CheckpointError::Newer { found } if found == FORMAT + 1));
        let mut longer = good;
        longer.push(0);
        assert!(matches!(err(&longer), CheckpointError::Invalid(_)));
    }

    #[test]
    fn partials_must_be_temporary_names_beside_their_file() {
        let p = |s: &str| RelPath::new(s.as_bytes().to_vec()).unwrap();
        for (path, temp) in [
            ("a/big", "a/big"),
            ("a/.volmig-x.1-0.tmp", "a/.volmig-x.1-0.tmp"),
            ("a/big", "b/.volmig-big.1-0.tmp"),
            (".volmig/x", ".volmig/.volmig-x.1-0.tmp"),
        ] {
            let mut cp = sample();
            cp.partials[0].path = p(path);
            cp.partials[0].temp = p(temp);
            assert!(
                matches!(
                    Checkpoint::decode(&cp.encode()),
                    Err(CheckpointError::Invalid(_))
                ),
                "{path} at {temp}"
            );
        }
        let mut cp = sample();
        cp.partials[0].verified_len = cp.partials[0].size + 1;
        assert!(Checkpoint::decode(&cp.encode()).is_err());
        let mut cp = sample();
        cp.operation_id = "../x".into();
        assert!(Checkpoint::decode(&cp.encode()).is_err());
    }

    #[test]
    fn a_hash_state_must_fit_its_prefix() {
        let cp = sample();
        assert_eq!(cp.partials[0].head().unwrap().len(), 768 << 10);
        for head in [
            // Not complete subtrees.
            vec![(1000, [0; 32])],
            vec![(1024, [0; 32]), (2048, [0; 32])],
            // As long as the prefix, or longer.
            vec![(1 << 20, [0; 32])],
            vec![(1 << 20, [0; 32]), (1 << 20, [0; 32])],
        ] {
            let mut bad = cp.clone();
            bad.partials[0].head = head.clone();
            assert!(
                matches!(
                    Checkpoint::decode(&bad.encode()),
                    Err(CheckpointError::Invalid(_))
                ),
                "{head:?}"
            );
        }
        let mut bad = cp.clone();
        bad.partials[0].recorded_at.nsec = 1_000_000_000;
        assert!(Checkpoint::decode(&bad.encode()).is_err());
    }

    #[test]
    fn format_1_is_still_read() {
        #[derive(Serialize)]
        struct V1Partial<'a> {
            path: &'a RelPath,
            temp: &'a RelPath,
            size: u64,
            mtime: Mtime,
            verified_len: u64,
            prefix_hash: [u8; 32],
        }
        let cp = sample();
        let p = &cp.partials[0];
        // The format 1 body: the same fields, partials without the new ones.
        let mut body = postcard::to_allocvec(&(
            &cp.operation_id,
            cp.attempt,
            cp.complete,
            cp.files_done,
            cp.bytes_done,
            cp.files_total,
            cp.bytes_total,
            cp.source,
        ))
        .unwrap();
        let partial = V1Partial {
            path: &p.path,
            temp: &p.temp,
            size: p.size,
            mtime: p.mtime,
            verified_len: p.verified_len,
            prefix_hash: p.prefix_hash,
        };
        body.extend(postcard::to_allocvec(&vec![partial]).unwrap());
        body.extend(postcard::to_allocvec(&(cp.elapsed_ms_total, cp.updated_unix_ms)).unwrap());
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&1u16.to_le_bytes());
        file.extend_from_slice(&(body.len() as u32).to_le_bytes());
        file.extend_from_slice(&body);
        file.extend_from_slice(blake3::hash(&body).as_bytes());
        let old = Checkpoint::decode(&file).unwrap();
        let mut want = cp.clone();
        want.partials[0].head.clear();
        want.partials[0].temp_ino = 0;
        want.partials[0].recorded_at = Mtime::default();
        assert_eq!(old, want);
        assert!(old.partials[0].head().is_none());
    }

    #[test]
    fn store_saves_atomically_and_locks() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        assert!(store.load().unwrap().is_none());
        store.save(&sample()).unwrap();
        assert_eq!(read(d.path()).unwrap(), Some(sample()));
        let second = Store::open(d.path()).unwrap_err();
        assert!(second.to_string().contains("another mover"), "{second}");
        store.remove().unwrap();
        assert!(store.load().unwrap().is_none());
        store.remove_all().unwrap();
        assert!(!d.path().join(".volmig").exists());
    }
}
