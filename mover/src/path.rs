//! Relative paths as they travel on the wire.
//!
//! Every path inside a transfer is relative to the tree root and carried as raw
//! bytes, so names that are not UTF-8 survive unchanged. A [`RelPath`] can only
//! be built through validation: no absolute paths, no `..`, no `.`, no empty
//! components, no NUL, bounded length. A peer can therefore never name
//! anything outside the root by path alone.

#[cfg(unix)]
use std::ffi::OsStr;
use std::fmt;
#[cfg(unix)]
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Longest relative path accepted, in bytes (Linux PATH_MAX).
pub const MAX_PATH_LEN: usize = 4096;
/// Longest name of one component, in bytes (Linux NAME_MAX): no file system
/// can hold a longer one, so a peer that sends one is only spending memory.
pub const MAX_NAME_LEN: usize = 255;

/// Why a path was refused.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum PathError {
    #[error("path is absolute: {0}")]
    Absolute(String),
    #[error("path has a '..', '.' or empty component: {0}")]
    BadComponent(String),
    #[error("path contains a NUL byte")]
    Nul,
    #[error("path is {0} bytes long, longer than {MAX_PATH_LEN}")]
    TooLong(usize),
    #[error("path has a name of {0} bytes, longer than {MAX_NAME_LEN}")]
    NameTooLong(usize),
}

impl PathError {
    /// A bad path is a protocol violation; retrying sends the same path again.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// A validated path relative to the transfer root; empty means the root itself.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "Vec<u8>", into = "Vec<u8>")]
pub struct RelPath(Vec<u8>);

impl RelPath {
    /// The root of the tree.
    pub fn root() -> Self {
        RelPath(Vec::new())
    }

    /// Validates raw bytes from a peer or from the file system.
    pub fn new(bytes: Vec<u8>) -> Result<Self, PathError> {
        if bytes.len() > MAX_PATH_LEN {
            return Err(PathError::TooLong(bytes.len()));
        }
        if bytes.contains(&0) {
            return Err(PathError::Nul);
        }
        if bytes.is_empty() {
            return Ok(RelPath(bytes));
        }
        if bytes[0] == b'/' {
            return Err(PathError::Absolute(lossy(&bytes)));
        }
        if bytes
            .split(|&b| b == b'/')
            .any(|c| c.is_empty() || c == b"." || c == b"..")
        {
            return Err(PathError::BadComponent(lossy(&bytes)));
        }
        if let Some(long) = bytes.split(|&b| b == b'/').find(|c| c.len() > MAX_NAME_LEN) {
            return Err(PathError::NameTooLong(long.len()));
        }
        Ok(RelPath(bytes))
    }

    /// This path with one more component; `name` must be a single valid component.
    pub fn join(&self, name: &[u8]) -> Result<Self, PathError> {
        if name.contains(&b'/') || name.is_empty() || name == b"." || name == b".." {
            return Err(PathError::BadComponent(lossy(name)));
        }
        let mut bytes = Vec::with_capacity(self.0.len() + 1 + name.len());
        bytes.extend_from_slice(&self.0);
        if !bytes.is_empty() {
            bytes.push(b'/');
        }
        bytes.extend_from_slice(name);
        RelPath::new(bytes)
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The last component (empty for the root).
    pub fn file_name(&self) -> &[u8] {
        match self.0.iter().rposition(|&b| b == b'/') {
            Some(i) => &self.0[i + 1..],
            None => &self.0,
        }
    }

    /// The parent path (the root is its own parent).
    pub fn parent(&self) -> RelPath {
        match self.0.iter().rposition(|&b| b == b'/') {
            Some(i) => RelPath(self.0[..i].to_vec()),
            None => RelPath::root(),
        }
    }

    /// Number of components (0 for the root).
    pub fn depth(&self) -> usize {
        if self.0.is_empty() {
            0
        } else {
            1 + self.0.iter().filter(|&&b| b == b'/').count()
        }
    }

    /// The path under `root` on the local file system.
    #[cfg(unix)]
    pub fn under(&self, root: &Path) -> PathBuf {
        if self.0.is_empty() {
            root.to_path_buf()
        } else {
            root.join(OsStr::from_bytes(&self.0))
        }
    }
}

impl TryFrom<Vec<u8>> for RelPath {
    type Error = PathError;
    /// Decoding from the wire comes through here. The decoder (postcard)
    /// keeps no message of a custom error, so the refusal is also kept for
    /// [`take_refused`], to name the path in the protocol error.
    fn try_from(bytes: Vec<u8>) -> Result<Self, PathError> {
        RelPath::new(bytes).inspect_err(|e| REFUSED.with(|r| *r.borrow_mut() = Some(e.clone())))
    }
}

thread_local! {
    static REFUSED: std::cell::RefCell<Option<PathError>> = const { std::cell::RefCell::new(None) };
}

/// The last path refused while decoding on this thread, if any (taken).
pub fn take_refused() -> Option<PathError> {
    REFUSED.with(|r| r.borrow_mut().take())
}

impl From<RelPath> for Vec<u8> {
    fn from(p: RelPath) -> Vec<u8> {
        p.0
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str(".")
        } else {
            f.write_str(&lossy(&self.0))
        }
    }
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", lossy(&self.0))
    }
}

/// Shows bytes as text, escaping what is not UTF-8 (`\xNN`) so messages stay readable.
pub fn lossy(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_and_non_utf8_paths() {
        assert!(RelPath::new(b"a/b/c".to_vec()).is_ok());
        assert!(RelPath::new(b"caf\xe9/x".to_vec()).is_ok());
        assert!(RelPath::new(Vec::new()).unwrap().is_root());
    }

    #[test]
    fn refuses_escapes() {
        assert!(matches!(
            RelPath::new(b"/etc/passwd".to_vec()),
            Err(PathError::Absolute(_))
        ));
        for bad in [&b"../x"[..], b"a/../../x", b"a//b", b"a/", b"./a", b"a/."] {
            assert!(
                matches!(RelPath::new(bad.to_vec()), Err(PathError::BadComponent(_))),
                "{bad:?}"
            );
        }
        assert_eq!(RelPath::new(b"a\0b".to_vec()), Err(PathError::Nul));
        assert!(matches!(
            RelPath::new(vec![b'a'; MAX_PATH_LEN + 1]),
            Err(PathError::TooLong(_))
        ));
        let mut long_name = b"d/".to_vec();
        long_name.extend([b'n'; MAX_NAME_LEN + 1]);
        assert_eq!(
            RelPath::new(long_name),
            Err(PathError::NameTooLong(MAX_NAME_LEN + 1))
        );
        assert!(RelPath::new(vec![b'n'; MAX_NAME_LEN]).is_ok());
    }

    #[test]
    fn join_parent_and_name() {
        let p = RelPath::root().join(b"a").unwrap().join(b"b").unwrap();
        assert_eq!(p.as_bytes(), b"a/b");
        assert_eq!(p.file_name(), b"b");
        assert_eq!(p.parent().as_bytes(), b"a");
        assert_eq!(p.depth(), 2);
        assert!(RelPath::root().join(b"..").is_err());
        assert!(RelPath::root().join(b"x/y").is_err());
    }

    #[test]
    fn serde_validates() {
        let bytes = postcard::to_allocvec(&b"../evil".to_vec()).unwrap();
        assert!(postcard::from_bytes::<RelPath>(&bytes).is_err());
        let ok = postcard::to_allocvec(&RelPath::new(b"fine".to_vec()).unwrap()).unwrap();
        assert_eq!(
            postcard::from_bytes::<RelPath>(&ok).unwrap().as_bytes(),
            b"fine"
        );
    }

    #[test]
    fn lossy_escapes_invalid_bytes() {
        assert_eq!(lossy(b"caf\xe9"), "caf\\xe9");
    }
}
