//! Applying a layer (image-spec `layer.md`): a tar changeset, its entries
//! added in order, its whiteouts deleting what lower layers had.
//!
//! - `.wh.<name>` removes `<name>` of a lower layer;
//! - `.wh..wh..opq` in a directory removes every child of it from lower
//!   layers.
//!
//! Whiteouts only apply to lower layers: what this layer itself adds stays,
//! whatever the order of the entries. An entry replaces what was at its path
//! unless both are directories. No entry may lead out of the root: `..`
//! components are refused, and the tar crate refuses to write through a
//! symlink leaving it.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, BufReader, Read};
use std::path::{Component, Path, PathBuf};

use oci_spec::image::{Descriptor, MediaType};
use sha2::{Digest as _, Sha256};

use super::layout::hex;
use super::ImageError;

const WHITEOUT: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// How a layer blob is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Compression {
    None,
    Gzip,
    Zstd,
}

/// The compression of a layer, from its media type; an error for what is
/// not a layer the sandbox can apply.
pub(super) fn compression(desc: &Descriptor) -> Result<Compression, ImageError> {
    match desc.media_type() {
        MediaType::ImageLayer => Ok(Compression::None),
        MediaType::ImageLayerGzip => Ok(Compression::Gzip),
        MediaType::ImageLayerZstd => Ok(Compression::Zstd),
        MediaType::Other(t) if t == "application/vnd.docker.image.rootfs.diff.tar.gzip" => {
            Ok(Compression::Gzip)
        }
        other => Err(ImageError::Invalid(format!(
            "layer {}: unsupported media type {other} (tar, tar+gzip and tar+zstd are supported)",
            desc.digest()
        ))),
    }
}

/// A reader that hashes what passes through it.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Applies the layer `desc` (its verified blob at `blob`) onto `root`, and
/// checks that its uncompressed content hashes to `diff_id`.
pub(super) fn apply(
    blob: &Path,
    desc: &Descriptor,
    diff_id: &str,
    root: &Path,
) -> Result<(), ImageError> {
    let digest = desc.digest().to_string();
    let io_error = |what: &str| ImageError::io(format!("layer {digest}: {what}"));
    let file = File::open(blob).map_err(io_error("opening"))?;
    let file = BufReader::new(file);
    let decoded: Box<dyn Read> = match compression(desc)? {
        Compression::None => Box::new(file),
        Compression::Gzip => Box::new(flate2::read::GzDecoder::new(file)),
        Compression::Zstd => {
            Box::new(zstd::stream::read::Decoder::with_buffer(file).map_err(io_error("zstd"))?)
        }
    };
    let mut tar = tar::Archive::new(Hashing {
        inner: decoded,
        hasher: Sha256::new(),
    });
    tar.set_preserve_permissions(true);
    tar.set_preserve_ownerships(true);
    tar.set_preserve_mtime(true);
    tar.set_overwrite(true);
    let bad = |why: String| ImageError::Invalid(format!("layer {digest}: {why}"));
    let mut added: HashSet<PathBuf> = HashSet::new();
    let entries = tar.entries().map_err(|e| bad(format!("not a tar: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(format!("reading the tar: {e}")))?;
        let raw = entry
            .path()
            .map_err(|e| bad(format!("entry path: {e}")))?
            .into_owned();
        let path = relative(&raw).ok_or_else(|| bad(format!("entry {raw:?} leaves the root")))?;
        let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        let parent = path.parent().unwrap_or(Path::new("")).to_path_buf();
        if name == OPAQUE {
            opaque(root, &parent, &added).map_err(|e| bad(format!("{raw:?}: {e}")))?;
        } else if let Some(hidden) = name.strip_prefix(WHITEOUT) {
            let target = parent.join(hidden);
            if !added.contains(&target) {
                remove(root, &target).map_err(|e| bad(format!("{raw:?}: {e}")))?;
            }
        } else {
            let dir = entry.header().entry_type().is_dir();
            make_room(root, &path, dir).map_err(|e| bad(format!("{raw:?}: {e}")))?;
            let unpacked = entry
                .unpack_in(root)
                .map_err(|e| bad(format!("unpacking {raw:?}: {e}")))?;
            if !unpacked {
                return Err(bad(format!("entry {raw:?} leaves the root")));
            }
            added.insert(path);
        }
    }
    let mut rest = tar.into_inner();
    io::copy(&mut rest, &mut io::sink()).map_err(io_error("reading to the end"))?;
    let actual = format!("sha256:{}", hex(&rest.hasher.finalize()));
    if actual != diff_id {
        return Err(ImageError::Corrupt {
            digest,
            why: format!("uncompressed it hashes to {actual}, the config's diff_id is {diff_id}"),
        });
    }
    Ok(())
}

/// The entry's path relative to the root, None when it has `..`.
fn relative(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => return None,
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

/// `root/path` when no directory on the way is a symlink (which could lead
/// out of the root); None when one is, or when a parent is missing.
fn inside(root: &Path, path: &Path) -> io::Result<Option<PathBuf>> {
    let mut at = root.to_path_buf();
    for component in path.parent().into_iter().flat_map(Path::components) {
        at.push(component);
        match fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(Some(root.join(path)))
}

/// Removes `root/path` (a directory with its content), if there.
fn remove(root: &Path, path: &Path) -> io::Result<()> {
    let Some(at) = inside(root, path)? else {
        return Ok(());
    };
    match fs::symlink_metadata(&at) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(&at),
        Ok(_) => fs::remove_file(&at),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes the children of directory `root/dir` that this layer did not add.
fn opaque(root: &Path, dir: &Path, added: &HashSet<PathBuf>) -> io::Result<()> {
    let Some(at) = inside(root, &dir.join("x"))?.and_then(|p| p.parent().map(Path::to_path_buf))
    else {
        return Ok(());
    };
    let children = match fs::read_dir(&at) {
        Ok(children) => children,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for child in children {
        let name = child?.file_name();
        let path = dir.join(&name);
        if !added.contains(&path) {
            remove(root, &path)?;
        }
    }
    Ok(())
}

/// Removes what is at `root/path` unless the entry and it are directories.
fn make_room(root: &Path, path: &Path, dir: bool) -> io::Result<()> {
    let Some(at) = inside(root, path)? else {
        return Ok(());
    };
    match fs::symlink_metadata(&at) {
        Ok(meta) if meta.is_dir() && dir => Ok(()),
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(&at),
        Ok(_) => fs::remove_file(&at),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
