//! The wire protocol between a sender and a receiver.
//!
//! A session is a stream of length-prefixed frames (tokio-util's
//! `LengthDelimitedCodec`) whose payloads are `postcard`-encoded [`Frame`]s.
//! The first frame each way is a [`Hello`] whose leading fields (magic and
//! version) keep their encoding in every protocol version, so a peer of any
//! version can tell what it is talking to and refuse it clearly.
//!
//! Flow of a session (all of it pipelined; nothing waits for a reply per file):
//!
//! ```text
//! sender                                  receiver
//!   Hello(options)                 ──▶
//!                                  ◀──    Hello, then Accept | Abort
//!   Entry, DirDone ... ListEnd     ──▶    (credit-limited)
//!                                  ◀──    Credit, Request + Sigs ... RequestsEnd, Progress
//!   FileBegin, Ops..., FileEnd ... DataEnd ──▶
//!                                  ◀──    Progress, [Verify
//!   Entry, DirDone ... ListEnd     ──▶    (with content hashes)]
//!                                  ◀──    Done(summary)
//! ```
//!
//! A block session (`SessionOptions::block`) copies one device or image:
//!
//! ```text
//! sender                                  receiver
//!   Hello(options.block)           ──▶
//!                                  ◀──    Hello, Accept, BlockTarget{size, resume}
//!   BlockStart(from)               ──▶
//!                                  ◀──    BlockSums... (streamed ahead of the data)
//!   Ops{0}... FileEnd{0} DataEnd   ──▶
//!                                  ◀──    Progress, [Verify
//!   BlockVerify(hash)              ──▶]
//!                                  ◀──    Done(summary)
//! ```

mod codec;
mod frame;
pub mod pack;

pub use codec::{FrameCodec, WireCounter};
pub use frame::*;

use crate::delta::LITERAL_CHUNK;

/// Protocol version spoken by this build.
pub const PROTOCOL_VERSION: u16 = 6;
/// Oldest peer version this build can talk to (2 added operations,
/// resumable requests and verification; 3, verification that tells a
/// source changed during the copy from a destination that differs; 4, the
/// hash state of a resumed prefix in its request, so the sender reads only
/// the rest, and the bytes each side read for it in the summary; 5, block
/// sessions, whose options every `Hello` carries; 6, the file list packed
/// in `Entries` frames and signatures with strong sums as long as each file
/// needs).
pub const MIN_PROTOCOL_VERSION: u16 = 6;
/// First bytes of every session's first frame.
pub const MAGIC: [u8; 6] = *b"VOLMIG";

/// Largest frame accepted (after the length prefix).
pub const MAX_FRAME_LEN: usize = 4 * 1024 * 1024;
/// Most block sums carried by one [`Frame::BlockSums`].
pub const SUMS_PER_FRAME: usize = 16 * 1024;
/// Most signature blocks carried by one [`Frame::Sigs`].
pub const SIGS_PER_FRAME: usize = 32 * 1024;
/// Most signature blocks for one file.
pub const MAX_BLOCKS_PER_FILE: u64 = crate::signature::MAX_BLOCKS;
/// Entries the sender may send before the receiver grants more credit.
pub const INITIAL_CREDIT: u32 = 8192;
/// Most exclude patterns a sender may propose.
pub const MAX_EXCLUDES: usize = 4096;
/// Most bytes of one exclude pattern, and of all of them together: each is
/// compiled to a regex, whose size a peer must not choose freely.
pub const MAX_EXCLUDE_LEN: usize = 4096;
pub const MAX_EXCLUDE_BYTES: usize = 64 * 1024;
/// Most ops in one `Ops` frame: a 3-byte op decodes to tens of bytes, so the
/// frame size alone would let a few MiB on the wire become a lot of memory.
pub const OPS_PER_FRAME: usize = 4096;
/// Longest symlink target (Linux: PATH_MAX including the terminating NUL).
pub const MAX_SYMLINK_TARGET: usize = 4095;

/// Errors of the wire layer.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("connection: {}", plain(.0))]
    Io(#[from] std::io::Error),
    #[error("malformed frame: {0}")]
    Decode(#[from] postcard::Error),
    #[error("peer is not a volmig mover (bad magic in its first frame)")]
    NotMover,
    /// The peer opened with a TLS record: it runs with `--tls-dir`, this side with `--insecure`.
    #[error("the peer speaks TLS but this side runs with --insecure: give both sides --tls-dir (the same operation's key material)")]
    PeerSpeaksTls,
    #[error("incompatible peer: it speaks protocol {peer_min}..={peer}, this mover speaks {MIN_PROTOCOL_VERSION}..={PROTOCOL_VERSION}; run the same mover version on both sides")]
    Incompatible { peer: u16, peer_min: u16 },
    #[error("protocol violation: {0}")]
    Violation(String),
    #[error("connection closed by peer {0}")]
    Closed(&'static str),
}

/// An I/O error of the connection in words for people: a peer that hung up
/// is said to have closed the connection (TLS's "peer closed connection
/// without sending TLS close_notify" means just that), and no library's
/// documentation link is passed on.
pub fn plain(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::UnexpectedEof | ErrorKind::BrokenPipe => {
            "the peer closed the connection".to_string()
        }
        ErrorKind::ConnectionReset => "the peer reset the connection".to_string(),
        _ => {
            let text = e.to_string();
            match text.find(": http") {
                Some(at) => text[..at].to_string(),
                None => text,
            }
        }
    }
}

impl ProtocolError {
    /// Dropped connections are worth retrying; a peer that breaks the protocol is not.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ProtocolError::Io(_) | ProtocolError::Closed(_))
    }
}

/// What one frame may hold beyond its size; far above what an honest peer
/// sends, so that a hostile one cannot turn a little wire into much memory.
pub fn check_limits(frame: &Frame) -> Result<(), ProtocolError> {
    match frame {
        Frame::Ops { ops, .. } if ops.len() > OPS_PER_FRAME => Err(violation(format!(
            "{} ops in one frame (at most {OPS_PER_FRAME})",
            ops.len()
        ))),
        Frame::Ops { ops, .. } => match ops.iter().find_map(|op| match op {
            WireOp::Plain(crate::delta::Op::Literal(d)) if d.len() > LITERAL_CHUNK => Some(d.len()),
            _ => None,
        }) {
            // The same bound as a compressed literal's decompressed size.
            Some(len) => Err(violation(format!(
                "literal of {len} bytes (at most {LITERAL_CHUNK})"
            ))),
            None => Ok(()),
        },
        Frame::BlockSums { sums, .. } if sums.len() > SUMS_PER_FRAME => Err(violation(format!(
            "{} block sums in one frame (at most {SUMS_PER_FRAME})",
            sums.len()
        ))),
        Frame::Entry(e) => match &e.kind {
            crate::meta::Kind::Symlink(target)
                if target.is_empty()
                    || target.len() > MAX_SYMLINK_TARGET
                    || target.contains(&0) =>
            {
                Err(violation(format!(
                    "{}: a symlink target must be 1 to {MAX_SYMLINK_TARGET} bytes without NUL",
                    e.path
                )))
            }
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

/// Whether a peer announcing this magic and protocol range can be talked to.
pub fn check_peer(magic: [u8; 6], version: u16, min_version: u16) -> Result<(), ProtocolError> {
    if magic != MAGIC {
        return Err(ProtocolError::NotMover);
    }
    if version < MIN_PROTOCOL_VERSION || min_version > PROTOCOL_VERSION {
        return Err(ProtocolError::Incompatible {
            peer: version,
            peer_min: min_version,
        });
    }
    Ok(())
}

/// Shorthand for a protocol violation.
pub fn violation(msg: impl Into<String>) -> ProtocolError {
    ProtocolError::Violation(msg.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn connection_errors_read_plainly() {
        let tls = io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "peer closed connection without sending TLS close_notify: \
             https://docs.rs/rustls/latest/rustls/manual/_03_howto/index.html#unexpected-eof",
        );
        assert_eq!(
            ProtocolError::Io(tls).to_string(),
            "connection: the peer closed the connection"
        );
        let other = io::Error::other("something odd: https://example.invalid/why");
        assert_eq!(
            ProtocolError::Io(other).to_string(),
            "connection: something odd"
        );
        let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "cannot connect to a:1");
        assert_eq!(
            ProtocolError::Io(refused).to_string(),
            "connection: cannot connect to a:1"
        );
    }
}
