//! The file list as it travels (protocol 6): runs of list entries go in one
//! [`Frame::Entries`], each entry written as what differs from the one before
//! it, as rsync's file list is. A tree's neighbours share most of their path,
//! their owner, their mode and usually their second of modification, so an
//! entry costs its new name, its size and its nanoseconds: about a third of
//! an `Entry` frame of its own, with the frame's length prefix paid once per
//! run instead of once per entry.
//!
//! Sessions never see the packed form: the writer task packs
//! ([`coalesce`]) and the codec unpacks into single `Entry` frames, so credit,
//! limits and the receivers' state machines count and check entries as
//! before.
//!
//! One entry, every integer a postcard varint (`i64` zig-zag):
//!
//! ```text
//! flags: u8        bits 0-2 the kind, then one bit each for: perm, uid, gid,
//!                  mtime seconds differ from the previous entry; checksum follows
//! shared: u32      bytes of the previous entry's path this one starts with
//! suffix: bytes    the rest of the path
//! kind data        symlink target (bytes), device number (u64), hard-link path (bytes)
//! perm, uid, gid: u32 and seconds: i64 (as a difference)   each only if its bit is set
//! nsec: u32, size: u64
//! checksum: [u8; 32]   only with its bit
//! ```
//!
//! The first entry of a frame is compared with an empty path and zeros, so
//! each frame decodes alone.
//!
//! Signature blocks travel packed too ([`SigBatch`]): a weak sum in 4 bytes
//! (a varint takes 5 for most), and the strong sum cut to the length the
//! file's shape calls for.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Entry, Frame, SIGS_PER_FRAME};
use crate::meta::{Kind, Meta, Mtime};
use crate::path::RelPath;
use crate::signature::{BlockSig, MIN_STRONG_LEN, STRONG_LEN};

/// Most entries in one `Entries` frame. Bounds what a frame decodes to: a
/// path may repeat most of the previous one for a few bytes of wire, so 256
/// entries are at most 256 paths of `MAX_PATH_LEN`, 1 MiB, beside the
/// symlink targets and hard-link paths, which cost their length on the wire.
pub const ENTRIES_PER_FRAME: usize = 256;

const PERM: u8 = 1 << 3;
const UID: u8 = 1 << 4;
const GID: u8 = 1 << 5;
const SECONDS: u8 = 1 << 6;
const CHECKSUM: u8 = 1 << 7;

/// Entries packed together; (de)serialized as one byte string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryBatch(pub Vec<Entry>);

/// Replaces each run of `Entry` frames in `frames` with `Entries` frames of
/// at most [`ENTRIES_PER_FRAME`]; a run of one stays as it is.
pub fn coalesce(frames: Vec<Frame>) -> Vec<Frame> {
    if frames
        .iter()
        .filter(|f| matches!(f, Frame::Entry(_)))
        .count()
        < 2
    {
        return frames;
    }
    let mut out = Vec::with_capacity(frames.len());
    let mut run: Vec<Entry> = Vec::new();
    for frame in frames {
        match frame {
            Frame::Entry(e) => {
                run.push(e);
                if run.len() == ENTRIES_PER_FRAME {
                    out.push(batch(std::mem::take(&mut run)));
                }
            }
            other => {
                if !run.is_empty() {
                    out.push(batch(std::mem::take(&mut run)));
                }
                out.push(other);
            }
        }
    }
    if !run.is_empty() {
        out.push(batch(run));
    }
    out
}

fn batch(mut run: Vec<Entry>) -> Frame {
    match run.len() {
        1 => Frame::Entry(run.remove(0)),
        _ => Frame::Entries(EntryBatch(run)),
    }
}

/// Why packed entries could not be read.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("an Entries frame with {0} entries (1 to {ENTRIES_PER_FRAME})")]
    Count(usize),
    #[error("entry {0} of an Entries frame is cut short or malformed")]
    Malformed(usize),
    #[error("entry {index} of an Entries frame shares {shared} bytes of a {len}-byte path")]
    Shared {
        index: usize,
        shared: usize,
        len: usize,
    },
    #[error("entry {0} of an Entries frame: {1}")]
    Path(usize, crate::path::PathError),
}

impl UnpackError {
    /// A peer that sends these is broken or hostile: never worth a retry.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// The packed form of `entries`.
pub fn pack(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 24);
    let mut prev = Previous::default();
    for e in entries {
        let path = e.path.as_bytes();
        let shared = path
            .iter()
            .zip(&prev.path)
            .take_while(|(a, b)| a == b)
            .count();
        let m = &e.meta;
        let mut flags = kind_tag(&e.kind);
        flags |= bit(m.perm != prev.meta.perm, PERM)
            | bit(m.uid != prev.meta.uid, UID)
            | bit(m.gid != prev.meta.gid, GID)
            | bit(m.mtime.sec != prev.meta.mtime.sec, SECONDS)
            | bit(e.checksum.is_some(), CHECKSUM);
        out.push(flags);
        put(&mut out, &(shared as u32));
        put(&mut out, &Bytes(&path[shared..]));
        match &e.kind {
            Kind::Symlink(target) => put(&mut out, &Bytes(target)),
            Kind::CharDev(dev) | Kind::BlockDev(dev) => put(&mut out, dev),
            Kind::HardLink(first) => put(&mut out, &Bytes(first.as_bytes())),
            Kind::File | Kind::Dir | Kind::Fifo | Kind::Socket => {}
        }
        if flags & PERM != 0 {
            put(&mut out, &m.perm);
        }
        if flags & UID != 0 {
            put(&mut out, &m.uid);
        }
        if flags & GID != 0 {
            put(&mut out, &m.gid);
        }
        if flags & SECONDS != 0 {
            put(&mut out, &m.mtime.sec.wrapping_sub(prev.meta.mtime.sec));
        }
        put(&mut out, &m.mtime.nsec);
        put(&mut out, &m.size);
        if let Some(sum) = &e.checksum {
            out.extend_from_slice(sum);
        }
        prev = Previous {
            path: path.to_vec(),
            meta: *m,
        };
    }
    out
}

/// The entries packed in `bytes`: at least one, at most [`ENTRIES_PER_FRAME`].
pub fn unpack(mut bytes: &[u8]) -> Result<Vec<Entry>, UnpackError> {
    let mut entries = Vec::new();
    let mut prev = Previous::default();
    while !bytes.is_empty() {
        let index = entries.len();
        if index == ENTRIES_PER_FRAME {
            return Err(UnpackError::Count(index + 1));
        }
        let bad = |_| UnpackError::Malformed(index);
        let (&flags, rest) = bytes.split_first().ok_or(UnpackError::Malformed(index))?;
        bytes = rest;
        let shared = take::<u32>(&mut bytes).map_err(bad)? as usize;
        let suffix = take::<&[u8]>(&mut bytes).map_err(bad)?;
        if shared > prev.path.len() {
            return Err(UnpackError::Shared {
                index,
                shared,
                len: prev.path.len(),
            });
        }
        let mut path = Vec::with_capacity(shared + suffix.len());
        path.extend_from_slice(&prev.path[..shared]);
        path.extend_from_slice(suffix);
        let rel = RelPath::try_from(path.clone()).map_err(|e| UnpackError::Path(index, e))?;
        let kind = match flags & 7 {
            0 => Kind::File,
            1 => Kind::Dir,
            2 => Kind::Symlink(take::<&[u8]>(&mut bytes).map_err(bad)?.to_vec()),
            3 => Kind::Fifo,
            4 => Kind::Socket,
            5 => Kind::CharDev(take(&mut bytes).map_err(bad)?),
            6 => Kind::BlockDev(take(&mut bytes).map_err(bad)?),
            _ => {
                let first = take::<&[u8]>(&mut bytes).map_err(bad)?.to_vec();
                Kind::HardLink(RelPath::try_from(first).map_err(|e| UnpackError::Path(index, e))?)
            }
        };
        let p = &prev.meta;
        let perm = if flags & PERM != 0 {
            take(&mut bytes).map_err(bad)?
        } else {
            p.perm
        };
        let uid = if flags & UID != 0 {
            take(&mut bytes).map_err(bad)?
        } else {
            p.uid
        };
        let gid = if flags & GID != 0 {
            take(&mut bytes).map_err(bad)?
        } else {
            p.gid
        };
        let sec = if flags & SECONDS != 0 {
            p.mtime
                .sec
                .wrapping_add(take::<i64>(&mut bytes).map_err(bad)?)
        } else {
            p.mtime.sec
        };
        let nsec = take(&mut bytes).map_err(bad)?;
        let size = take(&mut bytes).map_err(bad)?;
        let checksum = if flags & CHECKSUM != 0 {
            let (sum, rest) = bytes
                .split_first_chunk::<32>()
                .ok_or(UnpackError::Malformed(index))?;
            bytes = rest;
            Some(*sum)
        } else {
            None
        };
        let meta = Meta {
            perm,
            uid,
            gid,
            mtime: Mtime { sec, nsec },
            size,
        };
        prev = Previous { path, meta };
        entries.push(Entry {
            path: rel,
            kind,
            meta,
            checksum,
        });
    }
    if entries.is_empty() {
        return Err(UnpackError::Count(0));
    }
    Ok(entries)
}

#[derive(Default)]
struct Previous {
    path: Vec<u8>,
    meta: Meta,
}

fn kind_tag(kind: &Kind) -> u8 {
    match kind {
        Kind::File => 0,
        Kind::Dir => 1,
        Kind::Symlink(_) => 2,
        Kind::Fifo => 3,
        Kind::Socket => 4,
        Kind::CharDev(_) => 5,
        Kind::BlockDev(_) => 6,
        Kind::HardLink(_) => 7,
    }
}

fn bit(set: bool, flag: u8) -> u8 {
    if set {
        flag
    } else {
        0
    }
}

/// A byte string as postcard writes one (length, then bytes).
struct Bytes<'a>(&'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

fn put<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing into a Vec cannot fail, and every value here has a postcard encoding.
    let _ = postcard::to_io(value, &mut *out);
}

fn take<'a, T: Deserialize<'a>>(bytes: &mut &'a [u8]) -> Result<T, postcard::Error> {
    let (value, rest) = postcard::take_from_bytes(bytes)?;
    *bytes = rest;
    Ok(value)
}

impl Serialize for EntryBatch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&pack(&self.0))
    }
}

impl<'de> Deserialize<'de> for EntryBatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<EntryBatch, D::Error> {
        let bytes = crate::delta::bytes_serde::deserialize(d)?;
        unpack(&bytes).map(EntryBatch).map_err(|e| {
            UNPACK_REFUSED.with(|r| *r.borrow_mut() = Some(e.to_string()));
            serde::de::Error::custom(e)
        })
    }
}

/// Signature blocks with strong sums of `strong_len` bytes (the rest of
/// each `BlockSig::strong` is zero); (de)serialized as one byte string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigBatch {
    pub strong_len: u8,
    pub sigs: Vec<BlockSig>,
}

impl SigBatch {
    /// `sigs` with their strong sums cut to `strong_len` bytes.
    pub fn new(strong_len: usize, sigs: &[BlockSig]) -> SigBatch {
        let strong_len = strong_len.clamp(MIN_STRONG_LEN, STRONG_LEN);
        SigBatch {
            strong_len: strong_len as u8,
            sigs: sigs.iter().map(|s| s.truncated(strong_len)).collect(),
        }
    }
}

impl Serialize for SigBatch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let len = self.strong_len as usize;
        let mut out = Vec::with_capacity(1 + self.sigs.len() * (4 + len));
        out.push(self.strong_len);
        for sig in &self.sigs {
            out.extend_from_slice(&sig.weak.to_le_bytes());
            out.extend_from_slice(&sig.strong[..len]);
        }
        s.serialize_bytes(&out)
    }
}

impl<'de> Deserialize<'de> for SigBatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SigBatch, D::Error> {
        let bytes = crate::delta::bytes_serde::deserialize(d)?;
        unpack_sigs(&bytes).map_err(|why| {
            UNPACK_REFUSED.with(|r| *r.borrow_mut() = Some(why.clone()));
            serde::de::Error::custom(why)
        })
    }
}

fn unpack_sigs(bytes: &[u8]) -> Result<SigBatch, String> {
    let Some((&strong_len, rest)) = bytes.split_first() else {
        return Err("an empty Sigs frame".to_string());
    };
    let len = strong_len as usize;
    if !(MIN_STRONG_LEN..=STRONG_LEN).contains(&len) {
        return Err(format!(
            "strong sums of {len} bytes ({MIN_STRONG_LEN} to {STRONG_LEN})"
        ));
    }
    let count = rest.len() / (4 + len);
    if rest.len() % (4 + len) != 0 || count > SIGS_PER_FRAME {
        return Err(format!(
            "{} bytes of signature blocks of {} (at most {SIGS_PER_FRAME})",
            rest.len(),
            4 + len
        ));
    }
    let sigs = rest
        .chunks_exact(4 + len)
        .map(|b| {
            let (weak, sum) = b.split_at(4);
            let mut strong = [0; STRONG_LEN];
            strong[..len].copy_from_slice(sum);
            BlockSig {
                weak: u32::from_le_bytes([weak[0], weak[1], weak[2], weak[3]]),
                strong,
            }
        })
        .collect();
    Ok(SigBatch { strong_len, sigs })
}

thread_local! {
    static UNPACK_REFUSED: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Why the last `Entries` or `Sigs` frame decoded on this thread was
/// refused, if one was (taken): postcard keeps no message of a custom error.
pub fn take_refused() -> Option<String> {
    UNPACK_REFUSED.with(|r| r.borrow_mut().take())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, kind: Kind, perm: u32, sec: i64, nsec: u32, size: u64) -> Entry {
        Entry {
            path: RelPath::new(path.as_bytes().to_vec()).unwrap(),
            kind,
            meta: Meta {
                perm,
                uid: 1000,
                gid: 1000,
                mtime: Mtime { sec, nsec },
                size,
            },
            checksum: None,
        }
    }

    fn sample() -> Vec<Entry> {
        let mut with_sum = entry("d/f2", Kind::File, 0o644, 1_700_000_001, 5, 9);
        with_sum.checksum = Some([7; 32]);
        vec![
            entry("", Kind::Dir, 0o755, 1_700_000_000, 0, 0),
            entry("d", Kind::Dir, 0o700, 1_700_000_000, 1, 0),
            entry("d/f1", Kind::File, 0o644, 1_700_000_000, 999_999_999, 4096),
            with_sum,
            entry("d/l", Kind::Symlink(b"../x".to_vec()), 0o777, -5, 0, 0),
            entry("d/n", Kind::CharDev(0x0103), 0o666, i64::MAX, 0, 0),
            entry("d/b", Kind::BlockDev(u64::MAX), 0o660, i64::MIN, 0, 0),
            entry("e", Kind::Fifo, 0o600, 0, 0, 0),
            entry("e/s", Kind::Socket, 0o755, 0, 0, 0),
            entry(
                "h",
                Kind::HardLink(RelPath::new(b"d/f1".to_vec()).unwrap()),
                0o644,
                0,
                0,
                0,
            ),
        ]
    }

    #[test]
    fn entries_come_back_as_they_went() {
        let entries = sample();
        assert_eq!(unpack(&pack(&entries)).unwrap(), entries);
        let frame = Frame::Entries(EntryBatch(entries.clone()));
        let bytes = postcard::to_allocvec(&frame).unwrap();
        match postcard::from_bytes::<Frame>(&bytes).unwrap() {
            Frame::Entries(EntryBatch(back)) => assert_eq!(back, entries),
            other => panic!("{}", other.name()),
        }
    }

    #[test]
    fn neighbours_cost_their_difference() {
        let entries: Vec<Entry> = (0..200)
            .map(|i| {
                let path = format!("dir-{:03}/sub-{:02}/file-{i:05}.bin", i / 50, i / 10);
                entry(
                    &path,
                    Kind::File,
                    0o644,
                    1_700_000_000,
                    123_456_789 + i,
                    4000 + i as u64,
                )
            })
            .collect();
        let packed = pack(&entries).len();
        let single: usize = entries
            .iter()
            .map(|e| {
                postcard::to_allocvec(&Frame::Entry(e.clone()))
                    .unwrap()
                    .len()
                    + 4
            })
            .sum();
        assert!(
            packed * 3 < single,
            "{packed} packed against {single} unpacked"
        );
        assert!(packed < 200 * 16, "{packed} bytes for 200 neighbours");
    }

    #[test]
    fn coalesce_groups_runs_and_keeps_order() {
        let e = sample();
        let frames = vec![
            Frame::Entry(e[0].clone()),
            Frame::Entry(e[1].clone()),
            Frame::DirDone(RelPath::root()),
            Frame::Entry(e[2].clone()),
            Frame::Credit(1),
        ];
        let out = coalesce(frames);
        let names: Vec<_> = out.iter().map(Frame::name).collect();
        assert_eq!(names, ["Entries", "DirDone", "Entry", "Credit"]);
        let many: Vec<Frame> = (0..ENTRIES_PER_FRAME + 3)
            .map(|i| Frame::Entry(entry(&format!("f{i}"), Kind::File, 0o644, 0, 0, 0)))
            .collect();
        let out = coalesce(many);
        assert!(matches!(&out[0], Frame::Entries(b) if b.0.len() == ENTRIES_PER_FRAME));
        assert!(matches!(&out[1], Frame::Entries(b) if b.0.len() == 3));
    }

    #[test]
    fn signatures_travel_cut_to_their_length() {
        let sigs: Vec<BlockSig> = (0..100u8).map(|i| BlockSig::of(&[i; 700])).collect();
        for len in [MIN_STRONG_LEN, 5, STRONG_LEN] {
            let batch = SigBatch::new(len, &sigs);
            let bytes = postcard::to_allocvec(&Frame::Sigs {
                id: 3,
                sigs: batch.clone(),
            })
            .unwrap();
            assert!(bytes.len() < 100 * (4 + len) + 8, "{} bytes", bytes.len());
            match postcard::from_bytes::<Frame>(&bytes).unwrap() {
                Frame::Sigs { id: 3, sigs: back } => {
                    assert_eq!(back, batch);
                    for (a, b) in back.sigs.iter().zip(&sigs) {
                        assert_eq!((a.weak, &a.strong[..len]), (b.weak, &b.strong[..len]));
                        assert!(a.strong[len..].iter().all(|&b| b == 0));
                    }
                }
                other => panic!("{}", other.name()),
            }
        }
        assert!(unpack_sigs(&[]).is_err());
        assert!(unpack_sigs(&[1, 0, 0, 0, 0, 0]).is_err());
        assert!(unpack_sigs(&[17]).is_err());
        assert!(unpack_sigs(&[2, 0, 0, 0, 0, 0, 0]).is_ok());
        assert!(unpack_sigs(&[2, 0, 0, 0, 0, 0, 0, 0]).is_err());
        let too_many = vec![0u8; 1 + (SIGS_PER_FRAME + 1) * 6];
        assert!(unpack_sigs(&[&[2u8][..], &too_many[1..]].concat()).is_err());
    }

    #[test]
    fn hostile_batches_are_refused() {
        // Sharing more than the previous path has.
        let mut bytes = vec![0u8];
        put(&mut bytes, &5u32);
        put(&mut bytes, &Bytes(b"x"));
        put(&mut bytes, &0u32);
        put(&mut bytes, &0u64);
        assert!(matches!(unpack(&bytes), Err(UnpackError::Shared { .. })));
        // A path with "..".
        let mut bytes = vec![0u8];
        put(&mut bytes, &0u32);
        put(&mut bytes, &Bytes(b"a/../b"));
        put(&mut bytes, &0u32);
        put(&mut bytes, &0u64);
        assert!(matches!(unpack(&bytes), Err(UnpackError::Path(0, _))));
        // Empty, cut short, or too many.
        assert!(matches!(unpack(&[]), Err(UnpackError::Count(0))));
        let entries = sample();
        let good = pack(&entries);
        for cut in 1..good.len() {
            // Cut at an entry's end, the entries before it; elsewhere, refused.
            if let Ok(some) = unpack(&good[..cut]) {
                assert!(some.len() < entries.len() && some[..] == entries[..some.len()]);
            }
        }
        let many: Vec<Entry> = (0..ENTRIES_PER_FRAME + 1)
            .map(|i| entry(&format!("f{i}"), Kind::File, 0o644, 0, 0, 0))
            .collect();
        assert!(matches!(unpack(&pack(&many)), Err(UnpackError::Count(_))));
    }
}
