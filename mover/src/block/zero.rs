//! Zeros at the destination, as holes where it can: a thin destination
//! stays thin.
//!
//! In order of preference, remembered once one fails:
//! 1. `fallocate(PUNCH_HOLE | KEEP_SIZE)`: on a file the range is freed; on
//!    a device the kernel zeroes it and may unmap it, or says it cannot;
//! 2. `fallocate(ZERO_RANGE | KEEP_SIZE)`: reads back as zeros, may stay
//!    allocated (a device's write-zeroes without unmap);
//! 3. writes of zeros.
//!
//! Never a discard (`BLKDISCARD`): a discarded range need not read back as
//! zeros. Only the aligned middle of a range goes to `fallocate`; its
//! unaligned ends are written.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use rustix::fs::{fallocate, FallocateFlags};

use super::ZEROS;

/// Alignment of the ranges given to `fallocate`: a page, which covers 512
/// and 4096-byte sectors.
const ALIGN: u64 = 4096;
/// Most bytes one call zeroes, so that progress and liveness stay smooth.
const RUN: u64 = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    PunchHole,
    ZeroRange,
    Write,
}

/// Zeroes ranges of one destination, and counts how.
#[derive(Debug)]
pub struct Zeroer {
    method: Method,
    /// Bytes zeroed by punching holes.
    pub punched: u64,
    /// Bytes zeroed by `ZERO_RANGE`.
    pub zero_ranged: u64,
    /// Bytes of zeros written.
    pub written: u64,
}

impl Default for Zeroer {
    fn default() -> Self {
        Zeroer::new()
    }
}

impl Zeroer {
    pub fn new() -> Zeroer {
        Zeroer {
            method: Method::PunchHole,
            punched: 0,
            zero_ranged: 0,
            written: 0,
        }
    }

    /// The best method that worked, for the summary.
    pub fn method(&self) -> &'static str {
        if self.punched > 0 {
            "punch-hole"
        } else if self.zero_ranged > 0 {
            "zero-range"
        } else if self.written > 0 {
            "write"
        } else {
            "none"
        }
    }

    /// Makes `[offset, offset + len)` of `file` read as zeros.
    pub fn zero(&mut self, file: &File, offset: u64, len: u64) -> io::Result<()> {
        let end = offset + len;
        let mid_start = offset.next_multiple_of(ALIGN).min(end);
        let mid_end = (end / ALIGN * ALIGN).max(mid_start);
        write_zeros(file, offset, mid_start - offset)?;
        let mut at = mid_start;
        while at < mid_end {
            let n = (mid_end - at).min(RUN);
            self.zero_aligned(file, at, n)?;
            at += n;
        }
        write_zeros(file, mid_end, end - mid_end)?;
        self.written += (mid_start - offset) + (end - mid_end);
        Ok(())
    }

    fn zero_aligned(&mut self, file: &File, offset: u64, len: u64) -> io::Result<()> {
        let keep = FallocateFlags::KEEP_SIZE;
        if self.method == Method::PunchHole {
            match fallocate(file, FallocateFlags::PUNCH_HOLE | keep, offset, len) {
                Ok(()) => {
                    self.punched += len;
                    return Ok(());
                }
                Err(e) if unsupported(e) => self.method = Method::ZeroRange,
                Err(e) => return Err(e.into()),
            }
        }
        if self.method == Method::ZeroRange {
            match fallocate(file, FallocateFlags::ZERO_RANGE | keep, offset, len) {
                Ok(()) => {
                    self.zero_ranged += len;
                    return Ok(());
                }
                Err(e) if unsupported(e) => self.method = Method::Write,
                Err(e) => return Err(e.into()),
            }
        }
        write_zeros(file, offset, len)?;
        self.written += len;
        Ok(())
    }
}

fn unsupported(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    matches!(e, Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS)
}

fn write_zeros(file: &File, mut offset: u64, len: u64) -> io::Result<()> {
    let end = offset + len;
    while offset < end {
        let n = (end - offset).min(ZEROS.len() as u64) as usize;
        file.write_all_at(&ZEROS[..n], offset)?;
        offset += n as u64;
    }
    Ok(())
}

/// Bytes of `file` actually allocated (`st_blocks`, in 512-byte units).
pub fn allocated(file: &File) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(file.metadata()?.blocks() * 512)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn zeros_punch_holes_in_an_image_and_write_its_unaligned_ends() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![0xAB; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        let before = allocated(&f).unwrap();
        let mut z = Zeroer::new();
        z.zero(&f, 100, (512 << 10) - 200).unwrap();
        let mut back = vec![1u8; 1 << 20];
        f.read_exact_at(&mut back, 0).unwrap();
        assert!(back[..100].iter().all(|&b| b == 0xAB));
        assert!(back[100..(512 << 10) - 100].iter().all(|&b| b == 0));
        assert!(back[(512 << 10) - 100..].iter().all(|&b| b == 0xAB));
        // The middle went to fallocate (a file system here: holes), the
        // unaligned ends were written.
        assert_eq!(z.method(), "punch-hole");
        assert_eq!(z.written, 2 * (4096 - 100));
        assert_eq!(z.punched, (512 << 10) - 2 * 4096);
        assert!(allocated(&f).unwrap() < before, "no hole was punched");
    }
}
