//! Continuing a partial file an earlier attempt of the operation left, and
//! the basis signatures sent with a request.

use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use crate::beneath::{Placed, Placer};
use crate::checkpoint::Partial;
use crate::protocol::{Entry, MAX_BLOCKS_PER_FILE};
use crate::signature::{self, BlockSig, SigShape};
use crate::treehash::{self, TreeHasher};

/// A partial file whose prefix was verified and is reused.
#[derive(Debug, Clone)]
pub struct Resume {
    pub temp: Placed,
    /// Bytes reused.
    pub from: u64,
    /// The hash of those bytes, to go on from.
    pub hasher: TreeHasher,
    /// Bytes of the prefix read back to check it (all of it, unless the
    /// checkpoint's stored hash state was trusted).
    pub read_back: u64,
}

/// How long after a checkpoint recorded a partial file its writer may still
/// have written to it: a killed receiver writes on until its next checkpoint
/// (written after every MiB, or every second, plus an `fdatasync`). A change
/// later than this is someone else's, and the prefix is read again in full.
pub const WRITE_GRACE: Duration = Duration::from_secs(3);

/// A basis signature to send with a request.
pub type Signed = (SigShape, Vec<BlockSig>);

/// Checks partial file `p` for the listed file `e`: the source must be
/// unchanged and the recorded prefix must hash as recorded. With `trust`
/// (no `--checksum`), a prefix whose hash state the checkpoint stored and
/// whose temporary file is the one recorded and unchanged since (see
/// [`untouched`]) is read only from the end of that state on; otherwise all
/// of it is read (with `threads` threads). Then the prefix is reused, and
/// (with `delta`) the unverified rest is signed as a basis. The error says
/// why it cannot be used.
pub fn check(
    placer: &Placer,
    e: &Entry,
    p: &Partial,
    delta: bool,
    trust: bool,
    threads: usize,
) -> Result<(Resume, Option<Signed>), String> {
    if p.size != e.meta.size || p.mtime != e.meta.mtime {
        return Err("the source file changed since".to_string());
    }
    let temp = placer.place(&p.temp).map_err(|e| e.to_string())?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&*temp)
        .map_err(|e| e.to_string())?;
    let md = file.metadata().map_err(|e| e.to_string())?;
    if !md.is_file() {
        return Err("not a regular file".into());
    }
    if md.len() < p.verified_len {
        return Err(format!(
            "shorter ({} bytes) than recorded ({})",
            md.len(),
            p.verified_len
        ));
    }
    let stored = p.head().filter(|_| trust && untouched(p, &md));
    let from_state = stored.and_then(|head| {
        let from = head.len();
        let h = TreeHasher::continued(&file, head, p.verified_len).ok()?;
        // A state that does not lead to the recorded hash is not used.
        (*h.finalize().as_bytes() == p.prefix_hash).then_some((h, p.verified_len - from))
    });
    let (hasher, read_back) = match from_state {
        Some(checked) => checked,
        None => {
            let h = treehash::hash_file_prefix(&file, p.verified_len, threads)
                .map_err(|e| e.to_string())?;
            if *h.finalize().as_bytes() != p.prefix_hash {
                return Err("modified since it was recorded".into());
            }
            (h, p.verified_len)
        }
    };
    let tail = md.len().min(p.size) - p.verified_len;
    let basis = (tail > 0 && delta)
        .then(|| sign_open(&file, p.verified_len, tail, threads))
        .flatten();
    let resume = Resume {
        temp,
        from: p.verified_len,
        hasher,
        read_back,
    };
    Ok((resume, basis))
}

/// Whether the temporary file `md` describes is the one `p` recorded, not
/// changed since but by its own writer: the same inode, and no change (data
/// or metadata: its ctime) later than [`WRITE_GRACE`] after the record. A
/// change within that grace is taken for the writer's (a receiver killed
/// before its next checkpoint); only a full read would tell it from an
/// edit, and `--verify` does one.
fn untouched(p: &Partial, md: &Metadata) -> bool {
    let grace = WRITE_GRACE.as_nanos() as i128;
    let ns = |sec: i64, nsec: i64| sec as i128 * 1_000_000_000 + nsec as i128;
    let recorded = ns(p.recorded_at.sec, p.recorded_at.nsec as i64);
    p.temp_ino != 0
        && md.ino() == p.temp_ino
        && recorded > 0
        && ns(md.ctime(), md.ctime_nsec()) <= recorded + grace
}

/// The signature of the destination file as it is now, if it can be read.
pub fn sign_basis(dest: &Path, threads: usize) -> Option<Signed> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dest)
        .ok()?;
    let len = f.metadata().ok()?.len();
    sign_open(&f, 0, len, threads)
}

/// The signature of `len` bytes of `f` from `offset`, if they can be read.
fn sign_open(f: &File, offset: u64, len: u64, threads: usize) -> Option<Signed> {
    let shape = SigShape::for_len(len);
    if len == 0 || shape.block_count() > MAX_BLOCKS_PER_FILE {
        return None;
    }
    Some((
        shape,
        signature::sign_file_from(f, offset, shape, threads).ok()?,
    ))
}
