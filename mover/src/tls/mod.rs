//! The authenticated, encrypted channel between sender and receiver: TLS 1.3
//! (rustls) with both sides proving who they are with certificates from the
//! operation's own key material (see [`keys`]).
//!
//! Authentication finishes before either side reads or writes a byte of the
//! tree: the session proper only ever sees a stream whose peer holds the other
//! half of the same operation's material.

mod handshake;
mod identity;
pub mod keys;

use std::io;
use std::path::{Path, PathBuf};

pub use handshake::{accept, connect, refusal, Buffered};
pub use identity::Identity;
pub use keys::KeyMaterial;

/// The CA certificate both sides trust (its key was never kept).
pub const CA_CERT: &str = "ca.crt";
/// The operation the material belongs to, one line of text.
pub const OPERATION_FILE: &str = "operation-id";
/// The name in the receiver's certificate that the sender checks. It is not
/// looked up anywhere: the receiver is reached by whatever address it has,
/// and proves itself by holding this operation's receiver key.
pub const RECEIVER_NAME: &str = "receiver.volmig.invalid";

/// Which end of a transfer a process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Sender,
    Receiver,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Sender => "sender",
            Role::Receiver => "receiver",
        }
    }

    pub fn cert_file(self) -> &'static str {
        match self {
            Role::Sender => "sender.crt",
            Role::Receiver => "receiver.crt",
        }
    }

    pub fn key_file(self) -> &'static str {
        match self {
            Role::Sender => "sender.key",
            Role::Receiver => "receiver.key",
        }
    }

    fn peer(self) -> Role {
        match self {
            Role::Sender => Role::Receiver,
            Role::Receiver => Role::Sender,
        }
    }

    /// Whether this side needs the file `name` of the key material.
    fn needs(self, name: &str) -> bool {
        name == CA_CERT
            || name == OPERATION_FILE
            || name == self.cert_file()
            || name == self.key_file()
    }
}

/// Why no authenticated channel came about.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A key-material file cannot be read or written.
    #[error("{}: {source}", .path.display())]
    Material { path: PathBuf, source: io::Error },
    /// A key-material file is there but unusable.
    #[error("{}: {reason}", .path.display())]
    BadMaterial { path: PathBuf, reason: String },
    #[error("generating key material: {0}")]
    Generate(String),
    /// The peer was refused, or refused us, during the handshake.
    #[error("TLS handshake with {peer} failed: {reason}")]
    Refused { peer: String, reason: String },
    /// The connection failed or went quiet before the handshake finished.
    #[error("TLS handshake with {peer}: {source}")]
    Handshake { peer: String, source: io::Error },
}

impl TlsError {
    fn material(path: &Path, source: io::Error) -> TlsError {
        TlsError::Material {
            path: path.to_path_buf(),
            source,
        }
    }

    fn bad(path: &Path, reason: impl Into<String>) -> TlsError {
        TlsError::BadMaterial {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// Whether a new attempt may succeed: a dropped connection may; wrong,
    /// missing or expired material will not until someone changes it.
    pub fn is_retryable(&self) -> bool {
        matches!(self, TlsError::Handshake { .. })
    }

    /// The documented process exit code: 3 for an authentication failure,
    /// 1 for unusable local material, 10 for a connection problem.
    pub fn exit_code(&self) -> i32 {
        match self {
            TlsError::Material { .. } | TlsError::BadMaterial { .. } | TlsError::Generate(_) => 1,
            TlsError::Refused { .. } => 3,
            TlsError::Handshake { .. } => 10,
        }
    }
}
