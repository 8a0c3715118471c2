//! Reproducible release archives: `.tar.gz` files whose bytes depend only
//! on their contents and the commit time, with a `sha256sum`-style
//! `.sha256` file beside each.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use flate2::{read::GzDecoder, Compression, GzBuilder};
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid .sha256 file (`HEX  NAME`)")]
    BadChecksumFile { path: PathBuf },
}

impl ArchiveError {
    fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ArchiveError {
        let path = path.to_path_buf();
        move |source| ArchiveError::Io {
            action,
            path,
            source,
        }
    }
}

/// One file in an archive.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its path in the archive (no leading `/`).
    pub name: String,
    pub mode: u32,
    pub data: Vec<u8>,
}

impl Entry {
    /// An executable read from `path`.
    pub fn executable(name: &str, path: &Path) -> Result<Entry, ArchiveError> {
        Ok(Entry {
            name: name.to_string(),
            mode: 0o755,
            data: std::fs::read(path).map_err(ArchiveError::io("cannot read", path))?,
        })
    }

    /// A plain file of `data`.
    pub fn file(name: &str, mode: u32, data: impl Into<Vec<u8>>) -> Entry {
        Entry {
            name: name.to_string(),
            mode,
            data: data.into(),
        }
    }
}

/// The bytes of an uncompressed tar of `entries`, in the order given,
/// owned by root, every time stamp `mtime`.
pub fn tar_bytes(entries: &[Entry], mtime: u64) -> Result<Vec<u8>, ArchiveError> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.mode(tar::HeaderMode::Deterministic);
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(entry.data.len() as u64);
        header.set_mode(entry.mode);
        header.set_mtime(mtime);
        header.set_uid(0);
        header.set_gid(0);
        builder
            .append_data(&mut header, &entry.name, entry.data.as_slice())
            .map_err(ArchiveError::io(
                "cannot add to the tar",
                Path::new(&entry.name),
            ))?;
    }
    builder
        .into_inner()
        .map_err(ArchiveError::io("cannot finish the tar", Path::new("-")))
}

/// gzip of `data` with a fixed header (no name, time stamp 0).
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut out = GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), Compression::best());
    // Writing to a Vec cannot fail.
    let _ = out.write_all(data);
    out.finish().unwrap_or_default()
}

/// Writes `path` (a `.tar.gz` of `entries`) and `path.sha256`; returns the
/// archive's SHA-256 in hex.
pub fn write_tar_gz(path: &Path, entries: &[Entry], mtime: u64) -> Result<String, ArchiveError> {
    let bytes = gzip(&tar_bytes(entries, mtime)?);
    write_with_checksum(path, &bytes)
}

/// Writes `bytes` to `path` and its checksum to `path.sha256`; returns the
/// checksum.
pub fn write_with_checksum(path: &Path, bytes: &[u8]) -> Result<String, ArchiveError> {
    let mut file =
        BufWriter::new(File::create(path).map_err(ArchiveError::io("cannot create", path))?);
    file.write_all(bytes)
        .and_then(|()| file.flush())
        .map_err(ArchiveError::io("cannot write", path))?;
    let hex = sha256_hex(bytes);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sidecar = checksum_path(path);
    std::fs::write(&sidecar, format!("{hex}  {name}\n"))
        .map_err(ArchiveError::io("cannot write", &sidecar))?;
    Ok(hex)
}

/// `archive.tar.gz` → `archive.tar.gz.sha256`.
pub fn checksum_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sha256");
    PathBuf::from(name)
}

/// The checksum recorded in `path.sha256`.
pub fn read_checksum(path: &Path) -> Result<String, ArchiveError> {
    let sidecar = checksum_path(path);
    let text =
        std::fs::read_to_string(&sidecar).map_err(ArchiveError::io("cannot read", &sidecar))?;
    let hex = text.split_whitespace().next().unwrap_or_default();
    if hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        Ok(hex.to_string())
    } else {
        Err(ArchiveError::BadChecksumFile { path: sidecar })
    }
}

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// SHA-256 of the file at `path`, lower-case hex.
pub fn sha256_file(path: &Path) -> Result<String, ArchiveError> {
    let mut file = File::open(path).map_err(ArchiveError::io("cannot open", path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(ArchiveError::io("cannot read", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The entries of a `.tar.gz` (tar without gzip when `gzipped` is false):
/// path and mode of each, in order.
pub fn list(bytes: &[u8], gzipped: bool) -> Result<Vec<(String, u32)>, ArchiveError> {
    let reader: Box<dyn Read + '_> = if gzipped {
        Box::new(GzDecoder::new(bytes))
    } else {
        Box::new(bytes)
    };
    let mut archive = tar::Archive::new(reader);
    let err = ArchiveError::io;
    let mut out = Vec::new();
    for entry in archive
        .entries()
        .map_err(err("cannot read", Path::new("tar")))?
    {
        let entry = entry.map_err(err("cannot read", Path::new("tar entry")))?;
        let path = entry
            .path()
            .map_err(err("bad path in", Path::new("tar entry")))?;
        let mode = entry
            .header()
            .mode()
            .map_err(err("bad mode in", Path::new("tar entry")))?;
        out.push((path.to_string_lossy().into_owned(), mode));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_is_the_same_bytes_every_time() {
        let entries = [
            Entry::file("a", 0o755, b"binary".to_vec()),
            Entry::file("LICENSE", 0o644, b"text".to_vec()),
        ];
        let one = gzip(&tar_bytes(&entries, 1_700_000_000).expect("tar"));
        let two = gzip(&tar_bytes(&entries, 1_700_000_000).expect("tar"));
        assert_eq!(one, two);
        let listed = list(&one, true).expect("list");
        assert_eq!(
            listed,
            vec![("a".to_string(), 0o755), ("LICENSE".to_string(), 0o644)]
        );
    }

    #[test]
    fn the_checksum_file_names_the_archive() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("x_v1_linux_amd64.tar.gz");
        let hex = write_tar_gz(&path, &[Entry::file("x", 0o755, b"x".to_vec())], 0).expect("write");
        assert_eq!(hex, sha256_file(&path).expect("hash"));
        assert_eq!(read_checksum(&path).expect("sidecar"), hex);
        let sidecar = std::fs::read_to_string(checksum_path(&path)).expect("read");
        assert_eq!(sidecar, format!("{hex}  x_v1_linux_amd64.tar.gz\n"));
    }
}
