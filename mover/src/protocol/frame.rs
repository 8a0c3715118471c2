//! The messages of a session.

use serde::{Deserialize, Serialize};

use super::{MAGIC, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION};
use crate::delta::Op;
use crate::meta::{Kind, Meta, Mtime};
use crate::path::RelPath;
use crate::signature::SigShape;
use crate::stats::{Progress, Summary};
use crate::treehash::{Head, HeadPiece};

/// Everything that travels on a connection.
///
/// Variant order is part of the protocol: append, never reorder.
#[derive(Debug, Serialize, Deserialize)]
pub enum Frame {
    /// First frame each way.
    Hello(Hello),
    /// Receiver → sender: the session is on, with these options.
    Accept(SessionOptions),
    /// Either way: the session ends with an error the peer should show.
    Abort(AbortReason),
    /// Sender → receiver: one entry of the source tree.
    Entry(Entry),
    /// Sender → receiver: every child of this directory has been listed.
    DirDone(RelPath),
    /// Sender → receiver: the tree walk is complete.
    ListEnd(ListStats),
    /// Receiver → sender: permission to send this many more list frames.
    Credit(u32),
    /// Receiver → sender: send the contents of a file.
    Request(Request),
    /// Receiver → sender: the next signature blocks of a request's basis.
    Sigs {
        id: u64,
        sigs: super::pack::SigBatch,
    },
    /// Receiver → sender: no more requests will come.
    RequestsEnd,
    /// Sender → receiver: the data of a requested file follows.
    FileBegin { id: u64, meta: Meta },
    /// Sender → receiver: instructions for the file begun last.
    Ops { id: u64, ops: Vec<WireOp> },
    /// Sender → receiver: the file is complete, or could not be sent.
    FileEnd { id: u64, outcome: FileOutcome },
    /// Sender → receiver: every request has been answered.
    DataEnd,
    /// Receiver → sender: how far the transfer is.
    Progress(Progress),
    /// Receiver → sender: the session is complete.
    Done(Summary),
    /// Either way: nothing else to say for a while, but still here.
    Heartbeat,
    /// Receiver → sender: all data is in place; list the tree again, with
    /// content hashes, for end-to-end verification (`Entry`... `ListEnd`).
    Verify,
    /// Block session, receiver → sender, right after `Accept`: the
    /// destination's size, and what an earlier attempt left to resume from.
    BlockTarget(BlockTarget),
    /// Block session, sender → receiver: the offset it compares and sends
    /// from (0, or the resume offset it accepts).
    BlockStart(u64),
    /// Block session, receiver → sender: the sums of its blocks `first..`,
    /// in order (none with `whole_file`).
    BlockSums { first: u64, sums: Vec<BlockSum> },
    /// Block session, sender → receiver, after `Verify`: BLAKE3 of the
    /// source as read again.
    BlockVerify([u8; 32]),
    /// Sender → receiver (protocol 6): a run of list entries, packed. Only
    /// the connection's writer and codec see it: the writer packs runs of
    /// `Entry` frames into it and the codec unpacks it into them again.
    Entries(super::pack::EntryBatch),
}

impl Frame {
    /// The file a data frame belongs to.
    pub fn file_id(&self) -> Option<u64> {
        match self {
            Frame::FileBegin { id, .. } | Frame::Ops { id, .. } | Frame::FileEnd { id, .. } => {
                Some(*id)
            }
            _ => None,
        }
    }

    /// A short name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Frame::Hello(_) => "Hello",
            Frame::Accept(_) => "Accept",
            Frame::Abort(_) => "Abort",
            Frame::Entry(_) => "Entry",
            Frame::DirDone(_) => "DirDone",
            Frame::ListEnd(_) => "ListEnd",
            Frame::Credit(_) => "Credit",
            Frame::Request(_) => "Request",
            Frame::Sigs { .. } => "Sigs",
            Frame::RequestsEnd => "RequestsEnd",
            Frame::FileBegin { .. } => "FileBegin",
            Frame::Ops { .. } => "Ops",
            Frame::FileEnd { .. } => "FileEnd",
            Frame::DataEnd => "DataEnd",
            Frame::Progress(_) => "Progress",
            Frame::Done(_) => "Done",
            Frame::Heartbeat => "Heartbeat",
            Frame::Verify => "Verify",
            Frame::BlockTarget(_) => "BlockTarget",
            Frame::BlockStart(_) => "BlockStart",
            Frame::BlockSums { .. } => "BlockSums",
            Frame::BlockVerify(_) => "BlockVerify",
            Frame::Entries(_) => "Entries",
        }
    }
}

/// Why a peer ended the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortReason {
    pub message: String,
    /// Whether the peer thinks a new attempt may succeed.
    pub retryable: bool,
    /// The peer's exit code for this failure.
    pub exit_code: i32,
}

/// The first frame. `magic`, `version` and `min_version` come first and keep
/// their encoding forever, so any two versions can tell each other apart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub magic: [u8; 6],
    pub version: u16,
    pub min_version: u16,
    /// The mover build, for messages (`mover 0.1.0`).
    pub software: String,
    /// Sender: the options it proposes. Receiver: its defaults (unused).
    pub options: SessionOptions,
}

impl Hello {
    pub fn new(options: SessionOptions) -> Hello {
        Hello {
            magic: MAGIC,
            version: PROTOCOL_VERSION,
            min_version: MIN_PROTOCOL_VERSION,
            software: concat!("mover ", env!("CARGO_PKG_VERSION")).to_string(),
            options,
        }
    }
}

/// What the sender asks of the transfer; the receiver accepts or refuses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOptions {
    /// Delete destination entries that are not in the source.
    pub delete: bool,
    /// Compare file contents instead of size and mtime.
    pub checksum: bool,
    /// Exclude patterns (rsync-like).
    pub excludes: Vec<String>,
    /// zstd level for literal data, if compressed.
    pub compress: Option<i32>,
    /// Rewrite destination files in place.
    pub inplace: bool,
    /// Send whole files instead of deltas.
    pub whole_file: bool,
    /// The operation this session is an attempt of: the receiver keeps a
    /// checkpoint for it and resumes from the one an earlier attempt left.
    pub operation_id: Option<String>,
    /// The attempt number (from 1).
    pub attempt: u32,
    /// Compare both trees entry by entry once the data is in place.
    pub verify: bool,
    /// A block session: one device or image file onto another, instead of
    /// a tree (protocol 5).
    pub block: Option<BlockSource>,
}

/// A block session's source, as the sender proposes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSource {
    /// Bytes to copy: the device's or the image file's size.
    pub size: u64,
    /// The block length both sides hash at: `BlockShape::for_size(size)`'s.
    pub block_len: u32,
    /// An image file's modification time (a device has none): a resumed
    /// attempt trusts its prefix when it is unchanged.
    pub image_mtime: Option<Mtime>,
    /// Zero the destination past the source's size.
    pub zero_tail: bool,
}

/// A block's sum: the first bytes of its BLAKE3 chaining value at its offset.
pub type BlockSum = [u8; 16];

/// What the receiver of a block session holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockTarget {
    /// The destination's size in bytes.
    pub size: u64,
    /// A verified prefix an earlier attempt of the operation left.
    pub resume: Option<BlockResume>,
}

/// A verified prefix of the destination: `offset` bytes equal to the source
/// as an earlier attempt read it, and their hash state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockResume {
    pub offset: u64,
    /// The canonical BLAKE3 subtrees of `[0, offset)` (`treehash::Head`).
    pub head: Vec<HeadPiece>,
    /// The image's modification time when the prefix was sent.
    pub source_mtime: Option<Mtime>,
}

/// One entry of the source tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub path: RelPath,
    pub kind: Kind,
    pub meta: Meta,
    /// BLAKE3 of the contents, with `--checksum`, for regular files.
    pub checksum: Option<[u8; 32]>,
}

/// What the sender's walk could not list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListStats {
    /// Entries that could not be read (reported on the sender's stderr).
    pub failed: u64,
    /// Entries that disappeared while the tree was walked.
    pub vanished: u64,
}

/// A receiver's request for one file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// Receiver-chosen id, echoed in the data frames.
    pub id: u64,
    pub path: RelPath,
    /// The basis the receiver has, if any; its signature follows in `Sigs` frames.
    pub basis: Option<SigShape>,
    /// The receiver already holds the first `resume_from` bytes (a partial file
    /// of an earlier attempt): send only the rest, but hash the whole file.
    /// The basis is then the partial file's unverified tail, from this offset,
    /// rewritten in place.
    pub resume_from: u64,
    /// With `resume_from`: what the receiver knows of the prefix, so that the
    /// sender need not read it again.
    pub prefix: Option<PrefixState>,
}

impl Request {
    /// The hash state of the prefix, if the request carries one: checked to
    /// be complete BLAKE3 subtrees ending before `resume_from` (so that
    /// joining it to a hasher of the rest never fails), with a valid mtime.
    pub fn prefix_head(&self) -> Result<Option<Head>, super::ProtocolError> {
        let Some(p) = &self.prefix else {
            return Ok(None);
        };
        let head = Head::from_pieces(&p.head)
            .map_err(|e| super::violation(format!("request for {}: {e}", self.path)))?;
        if head.is_empty() || head.len() >= self.resume_from || !p.mtime.is_valid() {
            return Err(super::violation(format!(
                "request for {} with a prefix state of {} bytes for a prefix of {}",
                self.path,
                head.len(),
                self.resume_from
            )));
        }
        Ok(Some(head))
    }
}

/// A resumed file's prefix as the receiver holds it. When the source file
/// still has the size and modification time it had when the prefix was sent
/// (the quick check), the sender trusts its own prefix to be the same and
/// reads only from the end of `head` on; the whole-file hash it sends is
/// then `head` joined with the hash of the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixState {
    /// The source file's size and modification time as the prefix was sent.
    pub size: u64,
    pub mtime: Mtime,
    /// The hash state of the prefix's first bytes: complete BLAKE3 subtrees
    /// (`treehash::Head`), shorter than `resume_from`; at most
    /// `treehash::MAX_HEAD_PIECES` pieces.
    pub head: Vec<HeadPiece>,
}

/// An instruction as carried on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WireOp {
    Plain(Op),
    /// A literal compressed with zstd; `raw_len` bounds the decompressed size.
    Zstd {
        raw_len: u32,
        #[serde(with = "crate::delta::bytes_serde")]
        data: Vec<u8>,
    },
}

/// How a requested file ended on the sender's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileOutcome {
    /// All data sent; BLAKE3 of the contents.
    Sent([u8; 32]),
    /// The source file changed while it was read; the receiver discards what it got.
    Changed,
    /// The source file is gone.
    Vanished,
    /// The source file could not be read (permission, I/O error).
    Unreadable,
}

impl Hello {
    /// Checks magic and version overlap.
    pub fn check(&self) -> Result<(), super::ProtocolError> {
        super::check_peer(self.magic, self.version, self.min_version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_checks_magic_and_versions() {
        assert!(Hello::new(SessionOptions::default()).check().is_ok());
        let mut h = Hello::new(SessionOptions::default());
        h.magic = *b"RSYNCD";
        assert!(matches!(
            h.check(),
            Err(super::super::ProtocolError::NotMover)
        ));
        let mut h = Hello::new(SessionOptions::default());
        h.version = 9;
        h.min_version = 7;
        let msg = h.check().unwrap_err().to_string();
        assert!(
            msg.contains("incompatible peer") && msg.contains("7..=9"),
            "{msg}"
        );
    }

    #[test]
    fn hello_prefix_is_stable() {
        // Variant 0, then the magic bytes, then the two versions as varints.
        let bytes =
            postcard::to_allocvec(&Frame::Hello(Hello::new(SessionOptions::default()))).unwrap();
        assert_eq!(&bytes[..7], b"\0VOLMIG");
        assert_eq!(
            &bytes[7..9],
            &[PROTOCOL_VERSION as u8, MIN_PROTOCOL_VERSION as u8]
        );
    }
}
