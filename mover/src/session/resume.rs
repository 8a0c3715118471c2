//! Continuing a partial file an earlier attempt of the operation left, and
//! the basis signatures sent with a request.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

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
}

/// A basis signature to send with a request.
pub type Signed = (SigShape, Vec<BlockSig>);

/// Checks partial file `p` for the listed file `e`: the source must be
/// unchanged and the recorded prefix must hash as recorded (read with
/// `threads` threads). Then the prefix is reused, and (with `delta`) the
/// unverified rest is signed as a basis. The error says why it cannot be
/// used.
pub fn check(
    placer: &Placer,
    e: &Entry,
    p: &Partial,
    delta: bool,
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
    let hasher =
        treehash::hash_file_prefix(&file, p.verified_len, threads).map_err(|e| e.to_string())?;
    if *hasher.finalize().as_bytes() != p.prefix_hash {
        return Err("modified since it was recorded".into());
    }
    let tail = md.len().min(p.size) - p.verified_len;
    let basis = (tail > 0 && delta)
        .then(|| sign_open(&file, p.verified_len, tail, threads))
        .flatten();
    let resume = Resume {
        temp,
        from: p.verified_len,
        hasher,
    };
    Ok((resume, basis))
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
