//! An OCI image layout from an archive (image-spec `image-layout.md`):
//! `oci-layout`, `index.json` and `blobs/<alg>/<hex>`, unpacked into a
//! temporary directory, and the image it holds, verified.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use oci_spec::image::{
    Descriptor, DigestAlgorithm, ImageConfiguration, ImageIndex, ImageManifest, MediaType,
    OciLayout,
};
use sha2::{Digest as _, Sha256};

use super::{ImageConfig, ImageError, Wanted};

/// The annotation naming a manifest in an index (its tag, or a reference).
const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// An image layout unpacked from an archive; removed on drop.
pub(super) struct Layout {
    dir: tempfile::TempDir,
}

/// An image whose manifest, config and layer blobs match their descriptors.
pub(super) struct Verified {
    /// The manifest's digest, `sha256:<hex>`.
    pub digest: String,
    pub config: ImageConfig,
    pub layers: Vec<Descriptor>,
    /// One per layer: the digest of its uncompressed tar.
    pub diff_ids: Vec<String>,
}

fn invalid(message: impl Into<String>) -> ImageError {
    ImageError::Invalid(message.into())
}

impl Layout {
    /// Unpacks the archive at `archive` into a temporary directory in `dir`.
    pub(super) fn extract(archive: &Path, dir: &Path) -> Result<Layout, ImageError> {
        let file = File::open(archive)
            .map_err(ImageError::io(format!("opening image archive {archive:?}")))?;
        let temp = tempfile::Builder::new()
            .prefix("layout-")
            .tempdir_in(dir)
            .map_err(ImageError::io(format!("a temporary directory in {dir:?}")))?;
        let mut tar = tar::Archive::new(BufReader::new(file));
        tar.set_preserve_permissions(false);
        tar.unpack(temp.path()).map_err(|e| {
            invalid(format!(
                "image archive {archive:?} is not a readable tar: {e}"
            ))
        })?;
        let layout = Layout { dir: temp };
        let marker = layout.dir.path().join("oci-layout");
        let version = OciLayout::from_file(&marker).map_err(|e| {
            invalid(format!(
                "image archive {archive:?} is not an OCI image layout (oci-layout: {e})"
            ))
        })?;
        if !version.image_layout_version().starts_with("1.") {
            return Err(invalid(format!(
                "image archive {archive:?}: unsupported imageLayoutVersion {:?}",
                version.image_layout_version()
            )));
        }
        Ok(layout)
    }

    /// The image of the manifest `wanted` names, verified blob by blob.
    pub(super) fn verified_image(&self, wanted: Wanted<'_>) -> Result<Verified, ImageError> {
        let index = ImageIndex::from_file(self.dir.path().join("index.json"))
            .map_err(|e| invalid(format!("index.json: {e}")))?;
        let chosen = select(index.manifests(), &wanted)?;
        let manifest = ImageManifest::from_reader(&self.read(chosen)?[..])
            .map_err(|e| invalid(format!("manifest {}: {e}", chosen.digest())))?;
        let config_desc = manifest.config();
        if *config_desc.media_type() != MediaType::ImageConfig {
            return Err(invalid(format!(
                "manifest {}: config media type {} is not {}",
                chosen.digest(),
                config_desc.media_type(),
                MediaType::ImageConfig
            )));
        }
        let image = ImageConfiguration::from_reader(&self.read(config_desc)?[..])
            .map_err(|e| invalid(format!("image config {}: {e}", config_desc.digest())))?;
        let diff_ids = image.rootfs().diff_ids().clone();
        if diff_ids.len() != manifest.layers().len() {
            return Err(invalid(format!(
                "image config {} lists {} diff_ids for {} layers",
                config_desc.digest(),
                diff_ids.len(),
                manifest.layers().len()
            )));
        }
        for layer in manifest.layers() {
            super::layer::compression(layer)?;
            self.blob(layer)?;
        }
        Ok(Verified {
            digest: chosen.digest().to_string(),
            config: image_config(&image),
            layers: manifest.layers().clone(),
            diff_ids,
        })
    }

    /// The blob of `desc`, once its size and digest are checked.
    pub(super) fn blob(&self, desc: &Descriptor) -> Result<PathBuf, ImageError> {
        let path = self.path(desc)?;
        let corrupt = |why: String| ImageError::Corrupt {
            digest: desc.digest().to_string(),
            why,
        };
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(corrupt("missing from the archive".into()))
            }
            Err(e) => return Err(ImageError::io(format!("{path:?}"))(e)),
        };
        let mut hasher = Sha256::new();
        let size = io::copy(&mut BufReader::new(file), &mut hasher)
            .map_err(ImageError::io(format!("reading {path:?}")))?;
        if size != desc.size() {
            return Err(corrupt(format!(
                "{size} bytes, its descriptor says {}",
                desc.size()
            )));
        }
        let actual = hex(&hasher.finalize());
        if actual != desc.digest().digest() {
            return Err(corrupt(format!("its content hashes to sha256:{actual}")));
        }
        Ok(path)
    }

    /// The verified content of a small blob (a manifest, a config).
    fn read(&self, desc: &Descriptor) -> Result<Vec<u8>, ImageError> {
        let path = self.blob(desc)?;
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(ImageError::io(format!("reading {path:?}")))?;
        Ok(bytes)
    }

    fn path(&self, desc: &Descriptor) -> Result<PathBuf, ImageError> {
        let digest = desc.digest();
        if *digest.algorithm() != DigestAlgorithm::Sha256 {
            return Err(invalid(format!(
                "blob {digest}: only sha256 digests are supported"
            )));
        }
        let hex = digest.digest();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid(format!("blob {digest}: not a sha256 digest")));
        }
        Ok(self.dir.path().join("blobs").join("sha256").join(hex))
    }
}

/// The manifest of the index that `wanted` names.
fn select<'a>(
    manifests: &'a [Descriptor],
    wanted: &Wanted<'_>,
) -> Result<&'a Descriptor, ImageError> {
    let images: Vec<&Descriptor> = manifests
        .iter()
        .filter(|d| *d.media_type() == MediaType::ImageManifest)
        .collect();
    if images.is_empty() {
        let types: Vec<String> = manifests
            .iter()
            .map(|d| d.media_type().to_string())
            .collect();
        return Err(invalid(format!(
            "index.json lists no image manifest ({}) but {types:?}",
            MediaType::ImageManifest
        )));
    }
    let name = |d: &Descriptor| {
        d.annotations()
            .as_ref()
            .and_then(|a| a.get(REF_NAME))
            .cloned()
            .unwrap_or_default()
    };
    let matching: Vec<&Descriptor> = match wanted {
        Wanted::Digest(digest) => images
            .iter()
            .copied()
            .filter(|d| d.digest().to_string() == *digest)
            .collect(),
        Wanted::Tag(_) if images.len() == 1 => images.clone(),
        Wanted::Tag(tag) => images
            .iter()
            .copied()
            .filter(|d| {
                let n = name(d);
                n == *tag || n.ends_with(&format!(":{tag}"))
            })
            .collect(),
    };
    match matching[..] {
        [one] => Ok(one),
        _ => {
            let names: Vec<String> = images
                .iter()
                .map(|d| format!("{} ({REF_NAME}={:?})", d.digest(), name(d)))
                .collect();
            Err(invalid(format!(
                "index.json has {} image manifests and {} of them match {wanted:?}: {}",
                images.len(),
                matching.len(),
                names.join(", ")
            )))
        }
    }
}

fn image_config(image: &ImageConfiguration) -> ImageConfig {
    let Some(config) = image.config() else {
        return ImageConfig::default();
    };
    let env = config
        .env()
        .iter()
        .flatten()
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (pair.clone(), String::new()),
        })
        .collect();
    ImageConfig {
        entrypoint: config.entrypoint().clone(),
        cmd: config.cmd().clone(),
        env,
        working_dir: config.working_dir().clone().filter(|d| !d.is_empty()),
        user: config.user().clone().filter(|u| !u.is_empty()),
        labels: config.labels().clone().unwrap_or_default(),
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::str::FromStr;

    use oci_spec::image::Digest;

    use super::*;

    fn manifest(hex_digit: char, name: Option<&str>) -> Descriptor {
        let digest = Digest::from_str(&format!("sha256:{}", hex_digit.to_string().repeat(64)))
            .expect("digest");
        let mut desc = Descriptor::new(MediaType::ImageManifest, 1, digest);
        if let Some(name) = name {
            desc.set_annotations(Some(HashMap::from([(REF_NAME.into(), name.into())])));
        }
        desc
    }

    #[test]
    fn one_manifest_serves_every_tag_and_several_are_told_apart_by_ref_name() {
        let only = [manifest('a', Some("1.0"))];
        let chosen = select(&only, &Wanted::Tag("2.0")).expect("the only one");
        assert_eq!(chosen.digest().digest(), "a".repeat(64));
        let two = [
            manifest('a', Some("1.0")),
            manifest('b', Some("ghcr.io/volmig/mover:2.0")),
        ];
        let chosen = select(&two, &Wanted::Tag("2.0")).expect("by reference");
        assert_eq!(chosen.digest().digest(), "b".repeat(64));
        let by_digest = format!("sha256:{}", "a".repeat(64));
        let chosen = select(&two, &Wanted::Digest(&by_digest)).expect("by digest");
        assert_eq!(chosen.digest().digest(), "a".repeat(64));
        let refused = select(&two, &Wanted::Tag("latest")).expect_err("ambiguous");
        assert!(
            refused
                .to_string()
                .contains("2 image manifests and 0 of them match"),
            "{refused}"
        );
    }
}
