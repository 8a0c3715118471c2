//! What an interrupted block session leaves for the next attempt: the
//! verified prefix of the destination, in a state directory of its own
//! (a device has no directory to keep it in).
//!
//! Encoding, as the tree checkpoint's but with its own magic:
//!
//! ```text
//! "VOLMIGBK" | format: u16 | body length: u32 | body (postcard) | BLAKE3(body): 32 bytes
//! ```
//!
//! It is a hint: the prefix's last block is read back and compared (the
//! probe) before it is offered, so a replaced or rewritten destination is
//! caught; the sender checks the prefix against its own before it is used.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::BlockShape;
use crate::meta::Mtime;
use crate::operation::check_operation_id;
use crate::treehash::{block_cv, Head, HeadPiece};

const MAGIC: [u8; 8] = *b"VOLMIGBK";
const FORMAT: u16 = 1;
const HEADER_LEN: usize = MAGIC.len() + 2 + 4;
/// Far above a real one (a few KiB).
const MAX_LEN: usize = 64 << 10;
const FILE: &str = "checkpoint";

/// The verified prefix of a block destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockCheckpoint {
    pub operation_id: String,
    pub attempt: u32,
    pub source_size: u64,
    pub block_len: u32,
    /// The source image's modification time when the prefix was sent.
    pub source_mtime: Option<Mtime>,
    pub destination_size: u64,
    /// Bytes from 0 written and made durable: whole blocks.
    pub verified: u64,
    /// The canonical BLAKE3 subtrees of `[0, verified)`.
    pub head: Vec<HeadPiece>,
    /// The chaining value of the last verified block.
    pub probe: [u8; 32],
}

/// Why a checkpoint was not used.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("reading the block checkpoint: {0}")]
    Io(#[from] io::Error),
    #[error("corrupt block checkpoint ({0})")]
    Invalid(String),
}

impl CheckpointError {
    /// An unreadable state directory may be a passing fault; a corrupt
    /// checkpoint stays corrupt (it is then ignored and replaced).
    pub fn is_retryable(&self) -> bool {
        matches!(self, CheckpointError::Io(_))
    }
}

impl BlockCheckpoint {
    pub fn encode(&self) -> Vec<u8> {
        // Serializing plain data into a Vec cannot fail.
        let body = postcard::to_allocvec(self).unwrap_or_default();
        crate::checkpoint::framed(MAGIC, FORMAT, &body)
    }

    pub fn decode(bytes: &[u8]) -> Result<BlockCheckpoint, CheckpointError> {
        let invalid = |m: &str| CheckpointError::Invalid(m.to_string());
        if bytes.len() < HEADER_LEN + 32 || bytes.len() > MAX_LEN || bytes[..8] != MAGIC {
            return Err(invalid("not a block checkpoint"));
        }
        if u16::from_le_bytes([bytes[8], bytes[9]]) != FORMAT {
            return Err(invalid("unknown format"));
        }
        let len = u32::from_le_bytes([bytes[10], bytes[11], bytes[12], bytes[13]]) as usize;
        if bytes.len() != HEADER_LEN + len + 32 {
            return Err(invalid("wrong length"));
        }
        let (body, sum) = bytes[HEADER_LEN..].split_at(len);
        if blake3::hash(body).as_bytes() != sum {
            return Err(invalid("checksum mismatch"));
        }
        let cp: BlockCheckpoint =
            postcard::from_bytes(body).map_err(|e| CheckpointError::Invalid(e.to_string()))?;
        cp.validate()?;
        Ok(cp)
    }

    fn validate(&self) -> Result<(), CheckpointError> {
        let invalid = |m: String| Err(CheckpointError::Invalid(m));
        check_operation_id(&self.operation_id).map_err(CheckpointError::Invalid)?;
        let shape = BlockShape::for_size(self.source_size);
        if self.attempt == 0 || self.block_len != shape.block_len {
            return invalid(format!(
                "attempt {}, blocks of {}",
                self.attempt, self.block_len
            ));
        }
        let aligned = self.verified.is_multiple_of(shape.block_len());
        if !aligned || self.verified > self.source_size || self.source_size > self.destination_size
        {
            return invalid(format!("a prefix of {} bytes", self.verified));
        }
        let head =
            Head::from_pieces(&self.head).map_err(|e| CheckpointError::Invalid(e.to_string()))?;
        if head.len() != self.verified {
            return invalid(format!(
                "a hash state of {} bytes for a prefix of {}",
                head.len(),
                self.verified
            ));
        }
        Ok(())
    }

    /// The checkpoint for `mover inspect`.
    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "block",
            "operation_id": self.operation_id,
            "attempt": self.attempt,
            "complete": false,
            "bytes_done": self.verified,
            "bytes_total": self.source_size,
            "block_len": self.block_len,
            "destination_size": self.destination_size,
        })
    }

    pub fn head(&self) -> Head {
        Head::from_pieces(&self.head).expect("validated when decoded or made")
    }

    /// The chaining value of the last verified block as `file` holds it now.
    pub fn probe_of(file: &File, verified: u64, block_len: u64) -> io::Result<[u8; 32]> {
        let at = verified - block_len;
        let mut block = vec![0u8; block_len as usize];
        file.read_exact_at(&mut block, at)?;
        Ok(block_cv(at, &block))
    }
}

/// The directory a block receiver keeps its checkpoint in.
#[derive(Debug)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// `dir`, made (0700) if missing.
    pub fn open(dir: &Path) -> io::Result<StateDir> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
        })
    }

    /// `dir` as it is, made or not: to read what it holds.
    pub fn at(dir: &Path) -> StateDir {
        StateDir {
            dir: dir.to_path_buf(),
        }
    }

    /// The default for an image `D/NAME`: `D/.NAME.volmig`.
    pub fn beside(image: &Path) -> Option<PathBuf> {
        let name = image.file_name()?.to_string_lossy();
        Some(image.with_file_name(format!(".{name}.volmig")))
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn load(&self) -> Result<Option<BlockCheckpoint>, CheckpointError> {
        match fs::read(self.dir.join(FILE)) {
            Ok(bytes) => BlockCheckpoint::decode(&bytes).map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the checkpoint durably: a temporary file, synced, renamed,
    /// and the directory synced.
    pub fn save(&self, cp: &BlockCheckpoint) -> io::Result<()> {
        self.save_encoded(&cp.encode())
    }

    /// [`StateDir::save`] of a checkpoint already encoded.
    pub fn save_encoded(&self, bytes: &[u8]) -> io::Result<()> {
        let tmp = self.dir.join(format!("{FILE}.tmp"));
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, self.dir.join(FILE))?;
        File::open(&self.dir)?.sync_all()
    }

    pub fn remove(&self) -> io::Result<()> {
        match fs::remove_file(self.dir.join(FILE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Removes the directory too, when nothing else is in it.
    pub fn remove_all(&self) -> io::Result<()> {
        self.remove()?;
        let _ = fs::remove_file(self.dir.join(format!("{FILE}.tmp")));
        match fs::remove_dir(&self.dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::treehash::BlockRoot;

    fn checkpoint() -> BlockCheckpoint {
        let block = 16 << 10;
        let data = vec![5u8; 2 * block];
        let mut root = BlockRoot::new();
        root.push(block as u64, block_cv(0, &data[..block]));
        let probe = block_cv(block as u64, &data[block..]);
        root.push(block as u64, probe);
        BlockCheckpoint {
            operation_id: "op-1".into(),
            attempt: 2,
            source_size: 1 << 20,
            block_len: block as u32,
            source_mtime: None,
            destination_size: 1 << 20,
            verified: 2 * block as u64,
            head: root.head().pieces(),
            probe,
        }
    }

    #[test]
    fn a_checkpoint_round_trips_and_damage_is_caught() {
        let cp = checkpoint();
        let bytes = cp.encode();
        assert_eq!(BlockCheckpoint::decode(&bytes).unwrap(), cp);
        for at in [0, 9, HEADER_LEN + 3, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            assert!(BlockCheckpoint::decode(&bad).is_err(), "byte {at}");
        }
        let mut odd = cp.clone();
        odd.verified += 1;
        assert!(BlockCheckpoint::decode(&odd.encode()).is_err());
        let mut small = cp.clone();
        small.destination_size = 1000;
        assert!(BlockCheckpoint::decode(&small.encode()).is_err());
        let mut tiny = cp;
        tiny.block_len = 4096;
        assert!(BlockCheckpoint::decode(&tiny.encode()).is_err());
    }

    #[test]
    fn a_state_dir_saves_loads_and_goes() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(&dir.path().join("s")).unwrap();
        assert_eq!(state.load().unwrap(), None);
        state.save(&checkpoint()).unwrap();
        assert_eq!(state.load().unwrap(), Some(checkpoint()));
        state.remove_all().unwrap();
        assert!(!dir.path().join("s").exists());
        assert_eq!(
            StateDir::beside(Path::new("/x/disk.img")),
            Some(PathBuf::from("/x/.disk.img.volmig"))
        );
    }
}
