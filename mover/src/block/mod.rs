//! Block sessions' ground: one block device or regular image file copied
//! onto another at fixed offsets, with no rolling search (offsets never
//! shift on a device).
//!
//! - [`BlockShape`]: the block length for a size, the same on both sides;
//! - [`Source`] and [`Destination`]: what is copied from and into, opened
//!   as each must be (a destination device exclusively, an image locked);
//! - [`writer::Writer`]: the sender's ops applied at the destination;
//! - [`zero::Zeroer`]: zeros written as holes where the destination can;
//! - [`checkpoint`]: the verified prefix an interrupted attempt leaves.
//!
//! A block's hash is its BLAKE3 chaining value at its offset
//! ([`crate::treehash::block_cv`]), of which the receiver sends the first
//! 16 bytes as its sum; the whole content's BLAKE3 follows from the same
//! values ([`crate::treehash::BlockRoot`]).

pub mod checkpoint;
pub mod writer;
pub mod zero;

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use blake3::hazmat::ChainingValue;

use crate::meta::{Meta, Mtime};
use crate::protocol::BlockSum;

/// Smallest block: 16 BLAKE3 chunks, SIMD's full width.
pub const MIN_BLOCK: u32 = 16 << 10;
/// Largest block below 1 TiB; larger sources keep about 2^20 blocks.
pub const MAX_BLOCK: u32 = 1 << 20;
/// Blocks wanted per source (until the blocks reach [`MAX_BLOCK`]).
const TARGET_BLOCKS: u64 = 1 << 16;
/// Most blocks of any source.
pub const MAX_BLOCKS: u64 = 1 << 20;
/// Zeros to hash or write from, as long as a block of up to 1 TiB sources.
pub static ZEROS: [u8; MAX_BLOCK as usize] = [0; MAX_BLOCK as usize];
/// Largest source: 1 PiB, in 2^20 blocks of 1 GiB.
pub const MAX_SIZE: u64 = 1 << 50;

/// How a source of `size` bytes is cut: the same on both sides, checked by
/// the receiver so that a peer cannot choose tiny blocks (many sums).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockShape {
    pub size: u64,
    pub block_len: u32,
}

impl BlockShape {
    /// About 64 Ki blocks of 16 KiB to 1 MiB, then at most 1 Mi blocks
    /// (sizes up to [`MAX_SIZE`]; larger ones are refused before this).
    pub fn for_size(size: u64) -> BlockShape {
        let size_capped = size.min(MAX_SIZE);
        let wanted = size_capped.div_ceil(TARGET_BLOCKS).next_power_of_two();
        let clamped = wanted.clamp(MIN_BLOCK as u64, MAX_BLOCK as u64);
        let at_most = size_capped.div_ceil(MAX_BLOCKS).next_power_of_two();
        BlockShape {
            size,
            block_len: clamped.max(at_most) as u32,
        }
    }

    pub fn block_len(&self) -> u64 {
        self.block_len as u64
    }

    pub fn count(&self) -> u64 {
        self.size.div_ceil(self.block_len())
    }

    /// Where block `i` starts.
    pub fn offset(&self, i: u64) -> u64 {
        i * self.block_len()
    }

    /// The length of block `i` (the last may be short).
    pub fn len_of(&self, i: u64) -> u64 {
        self.block_len()
            .min(self.size.saturating_sub(self.offset(i)))
    }
}

/// A block's sum as sent: the first bytes of its chaining value.
pub fn sum_of(cv: &ChainingValue) -> BlockSum {
    let mut sum = [0u8; 16];
    sum.copy_from_slice(&cv[..16]);
    sum
}

/// What a block session reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Device,
    Image,
}

/// Whether `path` (one symlink followed) is something a block session
/// copies: a block device or a regular file. `None` for anything else,
/// or when it does not exist.
pub fn kind_of(path: &Path) -> Option<Kind> {
    let md = std::fs::metadata(path).ok()?;
    let t = md.file_type();
    if t.is_block_device() {
        Some(Kind::Device)
    } else if t.is_file() {
        Some(Kind::Image)
    } else {
        None
    }
}

/// The source, opened read-only and never exclusively (the app may hold it).
#[derive(Debug)]
pub struct Source {
    pub file: File,
    pub kind: Kind,
    pub size: u64,
    /// An image's modification time; `None` for a device.
    pub mtime: Option<Mtime>,
}

impl Source {
    pub fn open(path: &Path) -> io::Result<Source> {
        let mut file = File::open(path)?;
        let md = file.metadata()?;
        let kind = match md.file_type() {
            t if t.is_block_device() => Kind::Device,
            t if t.is_file() => Kind::Image,
            _ => return Err(not_block(path)),
        };
        let size = file.seek(SeekFrom::End(0))?;
        let mtime = (kind == Kind::Image).then(|| Meta::from_fs(&md).mtime);
        Ok(Source {
            file,
            kind,
            size,
            mtime,
        })
    }

    /// The size and mtime now, to tell a source that changed while read.
    pub fn now(&self) -> io::Result<(u64, Option<Mtime>)> {
        let md = self.file.metadata()?;
        let size = match self.kind {
            Kind::Image => md.len(),
            Kind::Device => (&self.file).seek(SeekFrom::End(0))?,
        };
        Ok((size, self.mtime.map(|_| Meta::from_fs(&md).mtime)))
    }
}

/// The destination, opened read-write: a device exclusively (a mounted
/// device, or one another mover writes, is refused), an image locked.
#[derive(Debug)]
pub struct Destination {
    pub file: File,
    pub kind: Kind,
    pub size: u64,
    /// It did not exist: made here, sparse, of the source's size.
    pub created: bool,
}

impl Destination {
    /// Opens `path`, or makes it an image of `size` bytes (mode 0600) when
    /// it does not exist.
    pub fn open(path: &Path, size: u64) -> Result<Destination, DestinationError> {
        let opened = OpenOptions::new().read(true).write(true).open(path);
        let (file, created) = match opened {
            Ok(file) => (file, false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(DestinationError::Io)?;
                file.set_len(size).map_err(DestinationError::Io)?;
                (file, true)
            }
            Err(e) => return Err(DestinationError::Io(e)),
        };
        let md = file.metadata().map_err(DestinationError::Io)?;
        let kind = match md.file_type() {
            t if t.is_block_device() => Kind::Device,
            t if t.is_file() => Kind::Image,
            _ => return Err(DestinationError::Io(not_block(path))),
        };
        let file = match kind {
            // O_EXCL on a block device: no mount, no other exclusive opener.
            Kind::Device => {
                drop(file);
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(rustix::fs::OFlags::EXCL.bits() as i32)
                    .open(path)
                    .map_err(|e| match e.raw_os_error() {
                        Some(code) if code == rustix::io::Errno::BUSY.raw_os_error() => {
                            DestinationError::Busy
                        }
                        _ => DestinationError::Io(e),
                    })?
            }
            Kind::Image => {
                use rustix::fs::{flock, FlockOperation};
                flock(&file, FlockOperation::NonBlockingLockExclusive)
                    .map_err(|_| DestinationError::Locked)?;
                file
            }
        };
        let size = (&file)
            .seek(SeekFrom::End(0))
            .map_err(DestinationError::Io)?;
        Ok(Destination {
            file,
            kind,
            size,
            created,
        })
    }
}

/// Why a destination cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum DestinationError {
    #[error("the destination device is in use (mounted, or opened by another mover)")]
    Busy,
    #[error("another mover is receiving into this image")]
    Locked,
    #[error("{0}")]
    Io(io::Error),
}

impl DestinationError {
    /// A lock held by another receiver goes away with it; a mounted device,
    /// or a path that is no device, does not.
    pub fn is_retryable(&self) -> bool {
        matches!(self, DestinationError::Locked)
    }
}

fn not_block(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is neither a block device nor a regular file",
            path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_scale_with_the_size() {
        let shape = |size: u64| BlockShape::for_size(size).block_len;
        assert_eq!(shape(0), MIN_BLOCK);
        assert_eq!(shape(100), MIN_BLOCK);
        assert_eq!(shape(256 << 20), 16 << 10);
        assert_eq!(shape(1 << 30), 16 << 10);
        assert_eq!(shape(10 << 30), 256 << 10);
        assert_eq!(shape(64 << 30), 1 << 20);
        assert_eq!(shape(1 << 40), 1 << 20);
        assert_eq!(shape(4 << 40), 4 << 20);
        for size in [1, 1 << 20, (1 << 30) + 1, 3 << 40, MAX_SIZE] {
            let s = BlockShape::for_size(size);
            assert!(s.count() <= MAX_BLOCKS, "{size}: {} blocks", s.count());
            assert!(s.block_len.is_power_of_two());
        }
        let s = BlockShape::for_size((16 << 10) * 3 + 5);
        assert_eq!((s.count(), s.len_of(2), s.len_of(3)), (4, 16 << 10, 5));
    }

    #[test]
    fn a_missing_destination_is_made_sparse_and_a_second_receiver_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.img");
        let first = Destination::open(&path, 1 << 20).unwrap();
        assert!(first.created);
        assert_eq!((first.kind, first.size), (Kind::Image, 1 << 20));
        assert!(matches!(
            Destination::open(&path, 1 << 20),
            Err(DestinationError::Locked)
        ));
        drop(first);
        let again = Destination::open(&path, 1 << 20).unwrap();
        assert!(!again.created);
        assert_eq!(kind_of(&path), Some(Kind::Image));
        assert_eq!(kind_of(dir.path()), None);
    }
}
