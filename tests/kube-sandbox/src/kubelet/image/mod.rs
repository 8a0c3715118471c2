//! Images: what a container's files come from.
//!
//! The sandbox pulls from no registry. An image reference (any tag or digest
//! of a repository) is *mapped* to one of:
//!
//! - nothing: the container runs a host command on a read-only view of the
//!   host's `/` (it needs a `command`);
//! - a host binary ([`ImageMapping`]), seen at `/volmig/bin/<name>` on that
//!   same view of the host and run when the container has no `command`;
//! - an OCI image archive ([`OciArchive`]), the file `skopeo copy ...
//!   oci-archive:PATH` and `cargo xtask dist` write: its layers are unpacked
//!   into a root file system, once per manifest digest, shared read-only by
//!   every container of that image, and the container runs in that root with
//!   the image's entrypoint, command, environment and working directory.
//!
//! Pulling an archive ([`Images::pull`]) checks every blob against the
//! digest and size of its descriptor and every layer against its `diff_id`
//! before anything runs, as containerd does; a failed pull is the kubelet's
//! `ErrImagePull`.

mod layer;
mod layout;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// An image the kubelet "runs" with a locally built binary: containers of
/// `image` (any tag) get `binary` at `/volmig/bin/<file name>`, first in
/// PATH, and it is the entrypoint when the container has no `command`.
#[derive(Debug, Clone)]
pub struct ImageMapping {
    pub image: String,
    pub binary: PathBuf,
}

impl ImageMapping {
    /// Whether `image` (`repo/name:tag` or `@sha256:...`) is this mapping's.
    pub fn matches(&self, image: &str) -> bool {
        repository(image) == self.image
    }
}

/// An image the kubelet runs from an OCI image archive: containers of
/// `image` (any tag or digest of that repository) run in the root file
/// system of the archive's image, e.g.
/// `OciArchive::new("ghcr.io/volmig/mover", "dist/mover-image.tar")`.
///
/// The archive is a tar of an OCI image layout (image-spec
/// `image-layout.md`). When its `index.json` lists several manifests, the
/// one whose `org.opencontainers.image.ref.name` annotation is the
/// reference's tag (or the whole reference) is run, and a digest reference
/// picks the manifest of that digest.
#[derive(Debug, Clone)]
pub struct OciArchive {
    pub image: String,
    pub path: PathBuf,
}

impl OciArchive {
    pub fn new(image: impl Into<String>, path: impl Into<PathBuf>) -> OciArchive {
        OciArchive {
            image: image.into(),
            path: path.into(),
        }
    }

    /// Whether `image` (`repo/name:tag` or `@sha256:...`) is this archive's.
    pub fn matches(&self, image: &str) -> bool {
        repository(image) == self.image
    }
}

/// The repository of an image reference: without `:tag` or `@digest`.
pub fn repository(image: &str) -> &str {
    let repo = image.split('@').next().unwrap_or(image);
    match repo.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => repo,
    }
}

/// What a reference asks for: a manifest digest, or a tag (`latest` when it
/// names neither).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wanted<'a> {
    Digest(&'a str),
    Tag(&'a str),
}

impl Wanted<'_> {
    pub(crate) fn of(image: &str) -> Wanted<'_> {
        if let Some((_, digest)) = image.split_once('@') {
            return Wanted::Digest(digest);
        }
        match image.rsplit_once(':') {
            Some((_, tag)) if !tag.contains('/') => Wanted::Tag(tag),
            _ => Wanted::Tag("latest"),
        }
    }
}

/// Why an image could not be pulled (the kubelet's `ErrImagePull`).
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// Reading the archive or writing the root file system failed.
    /// Retryable: the kubelet pulls again after its back-off.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// The archive is not an OCI image layout the sandbox can run (no
    /// manifest for the reference, an unsupported media type, a path
    /// escaping the root...). Not retryable: the archive must be rebuilt.
    #[error("{0}")]
    Invalid(String),
    /// A blob does not match its descriptor (digest or size), or a layer
    /// its `diff_id`: a corrupt archive. Not retryable.
    #[error("corrupt image archive: blob {digest}: {why}")]
    Corrupt { digest: String, why: String },
}

impl ImageError {
    /// Whether pulling again may succeed without changing the archive.
    pub fn retryable(&self) -> bool {
        matches!(self, ImageError::Io { .. })
    }

    fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> ImageError {
        let what = what.into();
        move |source| ImageError::Io { what, source }
    }
}

/// The parts of an image's configuration that decide how it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    /// `NAME=value` pairs, in order.
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    /// `User`: `uid`, `name`, `uid:gid` or `name:group`; None when empty.
    pub user: Option<String>,
    pub labels: HashMap<String, String>,
}

/// An image unpacked on the node.
#[derive(Debug)]
pub struct Image {
    /// The manifest's digest, `sha256:<hex>`.
    pub digest: String,
    /// The unpacked root file system, shared by the image's containers.
    pub root: PathBuf,
    pub config: ImageConfig,
    /// The compressed size of the layers, as kubelet's "Image size".
    pub size: u64,
}

/// How the kubelet gets a container's files, by image reference.
pub enum Source<'a> {
    /// No mapping: host commands on a view of the host's `/`.
    Host,
    Binary(&'a ImageMapping),
    Archive(&'a OciArchive),
}

/// The node's image store: the mappings and the images pulled so far.
pub struct Images {
    binaries: Vec<ImageMapping>,
    archives: Vec<OciArchive>,
    /// `<data_dir>/images`: unpacked roots by manifest digest.
    dir: PathBuf,
    /// Pulled images by (archive, reference).
    pulled: Mutex<HashMap<(PathBuf, String), Arc<Image>>>,
    /// One pull at a time (they share unpacked roots).
    pulling: Mutex<()>,
}

impl Images {
    pub fn new(binaries: Vec<ImageMapping>, archives: Vec<OciArchive>, dir: PathBuf) -> Images {
        Images {
            binaries,
            archives,
            dir,
            pulled: Mutex::new(HashMap::new()),
            pulling: Mutex::new(()),
        }
    }

    /// The repositories mapped more than once (a configuration error).
    pub fn duplicates(&self) -> Vec<&str> {
        let mut seen: Vec<&str> = Vec::new();
        let mut twice = Vec::new();
        let names = self.binaries.iter().map(|m| m.image.as_str());
        for name in names.chain(self.archives.iter().map(|a| a.image.as_str())) {
            if seen.contains(&name) {
                twice.push(name);
            }
            seen.push(name);
        }
        twice
    }

    /// Where containers of `image` get their files.
    pub fn source(&self, image: &str) -> Source<'_> {
        if let Some(archive) = self.archives.iter().find(|a| a.matches(image)) {
            return Source::Archive(archive);
        }
        match self.binaries.iter().find(|m| m.matches(image)) {
            Some(mapping) => Source::Binary(mapping),
            None => Source::Host,
        }
    }

    /// The image already pulled for `image` from `archive`, if any.
    pub fn present(&self, archive: &OciArchive, image: &str) -> Option<Arc<Image>> {
        let pulled = self.pulled.lock().unwrap_or_else(PoisonError::into_inner);
        pulled
            .get(&(archive.path.clone(), image.to_string()))
            .cloned()
    }

    /// Pulls `image` from `archive`: verifies the archive's blobs and
    /// unpacks its layers (once per manifest digest). Blocking.
    pub fn pull(&self, archive: &OciArchive, image: &str) -> Result<Arc<Image>, ImageError> {
        let _one = self.pulling.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = self.present(archive, image) {
            return Ok(found);
        }
        std::fs::create_dir_all(&self.dir).map_err(ImageError::io(format!("{:?}", self.dir)))?;
        let layout = layout::Layout::extract(&archive.path, &self.dir)?;
        let verified = layout.verified_image(Wanted::of(image))?;
        let hex = verified.digest.trim_start_matches("sha256:");
        let root = self.dir.join(format!("sha256-{hex}"));
        if !root.is_dir() {
            let partial = self.dir.join(format!("sha256-{hex}.partial"));
            unpack(&layout, &verified, &partial)?;
            std::fs::rename(&partial, &root)
                .map_err(ImageError::io(format!("renaming {partial:?} to {root:?}")))?;
        }
        let image_ref = image.to_string();
        let pulled = Arc::new(Image {
            digest: verified.digest,
            root,
            config: verified.config,
            size: verified.layers.iter().map(|l| l.size()).sum(),
        });
        self.pulled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((archive.path.clone(), image_ref), Arc::clone(&pulled));
        Ok(pulled)
    }
}

/// Applies the verified image's layers in order into a fresh `into`.
fn unpack(
    layout: &layout::Layout,
    image: &layout::Verified,
    into: &Path,
) -> Result<(), ImageError> {
    match std::fs::remove_dir_all(into) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(ImageError::io(format!("removing {into:?}"))(e));
        }
        _ => {}
    }
    std::fs::create_dir(into).map_err(ImageError::io(format!("creating {into:?}")))?;
    for (layer, diff_id) in image.layers.iter().zip(&image.diff_ids) {
        layer::apply(&layout.blob(layer)?, layer, diff_id, into)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_a_repository_and_a_tag_or_digest() {
        assert_eq!(
            repository("ghcr.io/volmig/mover:0.1.0"),
            "ghcr.io/volmig/mover"
        );
        assert_eq!(repository("localhost:5000/mover"), "localhost:5000/mover");
        assert_eq!(repository("mover@sha256:ab"), "mover");
        assert_eq!(Wanted::of("mover"), Wanted::Tag("latest"));
        assert_eq!(Wanted::of("localhost:5000/mover"), Wanted::Tag("latest"));
        assert_eq!(Wanted::of("mover:v1"), Wanted::Tag("v1"));
        assert_eq!(
            Wanted::of("mover:v1@sha256:ab"),
            Wanted::Digest("sha256:ab")
        );
    }
}
