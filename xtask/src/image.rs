//! The release's images: an OCI image layout (image-spec v1.1) in one tar
//! file, the form `skopeo copy oci-archive:FILE docker://...` pushes and
//! kube-sandbox runs. Each root holds one static binary and the LICENSE,
//! nothing else (`FROM scratch`): [`MOVER`], which the mover pods run on
//! every node that holds a volume, and [`DRIVER`], `kubectl-volmig` for
//! the driver pod of `migrate --detach`. Two images, so that the one every
//! node pulls stays small and carries no code that talks to the API
//! server. Written here from the OCI types of `oci-spec`, with no
//! container daemon and nothing pulled.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::str::FromStr;

use oci_spec::image::{
    Arch, ConfigBuilder, Descriptor, DescriptorBuilder, Digest, HistoryBuilder, ImageConfiguration,
    ImageConfigurationBuilder, ImageIndex, ImageIndexBuilder, ImageManifest, ImageManifestBuilder,
    MediaType, Os, RootFsBuilder, SCHEMA_VERSION,
};

use crate::archive::{self, ArchiveError, Entry};
use crate::project::Project;

/// One of the release's images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Image {
    /// Where it is published; `REPOSITORY:X.Y.Z` is the plugin's default.
    pub repository: &'static str,
    /// The archive's name starts with it: `NAME_vX.Y.Z_linux_ARCH.oci.tar`.
    pub name: &'static str,
    /// The binary at its root, and its entrypoint.
    pub binary: &'static str,
    pub description: &'static str,
}

/// The mover pods' image (`--mover-image`).
pub const MOVER: Image = Image {
    repository: "ghcr.io/volmig/mover",
    name: "mover",
    binary: "mover",
    description: "volmig's data mover: resumable rsync-style transfer of a volume's tree",
};

/// The in-cluster driver's image (`migrate --detach`).
pub const DRIVER: Image = Image {
    repository: "ghcr.io/volmig/driver",
    name: "driver",
    binary: "kubectl-volmig",
    description: "volmig's operation driver: kubectl volmig run in the cluster",
};

/// Every image of a Linux release, in the order they are built.
pub const IMAGES: [Image; 2] = [MOVER, DRIVER];

/// The annotation naming a manifest in `index.json` (the tag).
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("cannot build the image's {what}: {message}")]
    Spec { what: &'static str, message: String },
    #[error("not an OCI archive: {0}")]
    Invalid(String),
}

fn spec(what: &'static str) -> impl FnOnce(oci_spec::OciSpecError) -> ImageError {
    move |e| ImageError::Spec {
        what,
        message: e.to_string(),
    }
}

/// What was written.
#[derive(Debug, Clone)]
pub struct Built {
    /// `sha256:...` of the manifest: the image's digest once pushed.
    pub manifest_digest: String,
    /// The size of the compressed layer (what a node pulls).
    pub compressed_size: u64,
    /// The size of the archive file.
    pub archive_size: u64,
    pub sha256: String,
}

/// Writes `image` for `project` to `path` from its static `binary` and
/// the `license` text.
pub fn write(
    project: &Project,
    arch: Arch,
    image: &Image,
    binary: &Path,
    license: &[u8],
    path: &Path,
) -> Result<Built, ImageError> {
    let created = rfc3339(project.epoch);
    let layer_tar = archive::tar_bytes(
        &[
            Entry::executable(image.binary, binary)?,
            Entry::file("LICENSE", 0o644, license.to_vec()),
        ],
        project.epoch,
    )?;
    let diff_id = format!("sha256:{}", archive::sha256_hex(&layer_tar));
    let layer = archive::gzip(&layer_tar);

    let labels: HashMap<String, String> = [
        ("org.opencontainers.image.title", image.binary.to_string()),
        (
            "org.opencontainers.image.description",
            image.description.to_string(),
        ),
        ("org.opencontainers.image.version", project.version.clone()),
        (
            "org.opencontainers.image.revision",
            project.revision.clone(),
        ),
        (
            "org.opencontainers.image.source",
            "https://github.com/volmig/volmig".to_string(),
        ),
        (
            "org.opencontainers.image.licenses",
            "Apache-2.0".to_string(),
        ),
        ("org.opencontainers.image.created", created.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();

    let config = ImageConfigurationBuilder::default()
        .created(created.clone())
        .architecture(arch)
        .os(Os::Linux)
        .config(
            ConfigBuilder::default()
                .entrypoint(vec![format!("/{}", image.binary)])
                .labels(labels.clone())
                .build()
                .map_err(spec("config"))?,
        )
        .rootfs(
            RootFsBuilder::default()
                .typ("layers")
                .diff_ids(vec![diff_id])
                .build()
                .map_err(spec("rootfs"))?,
        )
        .history(vec![HistoryBuilder::default()
            .created(created)
            .created_by(format!(
                "cargo xtask dist: the static {} and its LICENSE",
                image.binary
            ))
            .build()
            .map_err(spec("history"))?])
        .build()
        .map_err(spec("configuration"))?;
    let config_json = canonical_json(&config)?;

    let manifest = ImageManifestBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageManifest)
        .config(descriptor(MediaType::ImageConfig, &config_json, None)?)
        .layers(vec![descriptor(MediaType::ImageLayerGzip, &layer, None)?])
        .annotations(labels)
        .build()
        .map_err(spec("manifest"))?;
    let manifest_json = canonical_json(&manifest)?;
    // The image's tag is the bare version, as in the plugin's defaults
    // (`ghcr.io/volmig/mover:0.1.0`).
    let tag = project.version.clone();
    let manifest_descriptor = descriptor(
        MediaType::ImageManifest,
        &manifest_json,
        Some(HashMap::from([(REF_NAME.to_string(), tag)])),
    )?;
    let manifest_digest = manifest_descriptor.digest().to_string();
    let index = ImageIndexBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![manifest_descriptor])
        .build()
        .map_err(spec("index"))?;

    let blob = |bytes: &[u8]| {
        Entry::file(
            &format!("blobs/sha256/{}", archive::sha256_hex(bytes)),
            0o644,
            bytes.to_vec(),
        )
    };
    let layout = archive::tar_bytes(
        &[
            Entry::file(
                "oci-layout",
                0o644,
                br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
            ),
            Entry::file("index.json", 0o644, canonical_json(&index)?),
            blob(&manifest_json),
            blob(&config_json),
            blob(&layer),
        ],
        project.epoch,
    )?;
    let sha256 = archive::write_with_checksum(path, &layout)?;
    Ok(Built {
        manifest_digest,
        compressed_size: layer.len() as u64,
        archive_size: layout.len() as u64,
        sha256,
    })
}

fn descriptor(
    media_type: MediaType,
    bytes: &[u8],
    annotations: Option<HashMap<String, String>>,
) -> Result<Descriptor, ImageError> {
    let digest = Digest::from_str(&format!("sha256:{}", archive::sha256_hex(bytes)))
        .map_err(spec("digest"))?;
    let mut builder = DescriptorBuilder::default()
        .media_type(media_type)
        .size(bytes.len() as u64)
        .digest(digest);
    if let Some(a) = annotations {
        builder = builder.annotations(a);
    }
    builder.build().map_err(spec("descriptor"))
}

/// JSON with object keys sorted: the OCI types keep maps in hash order,
/// and a digest must not change from one build to the next.
fn canonical_json(value: &impl serde::Serialize) -> Result<Vec<u8>, ImageError> {
    fn sort(value: serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => {
                let mut entries: Vec<_> = map.into_iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, sort(v))).collect())
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.into_iter().map(sort).collect())
            }
            other => other,
        }
    }
    let invalid = |e: serde_json::Error| ImageError::Spec {
        what: "JSON",
        message: e.to_string(),
    };
    let value = serde_json::to_value(value).map_err(invalid)?;
    serde_json::to_vec(&sort(value)).map_err(invalid)
}

/// `2026-11-26T00:29:20Z` for `epoch` seconds.
fn rfc3339(epoch: u64) -> String {
    i64::try_from(epoch)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

/// An OCI archive read back: what a registry or a runtime would see.
#[derive(Debug)]
pub struct Inspected {
    pub index: ImageIndex,
    pub manifest: ImageManifest,
    pub config: ImageConfiguration,
    /// Path and mode of every file in the (single) layer.
    pub root: Vec<(String, u32)>,
}

/// Reads the OCI archive at `path`, checking every blob against its digest.
pub fn inspect(path: &Path) -> Result<Inspected, ImageError> {
    let bytes = std::fs::read(path).map_err(|source| ArchiveError::Io {
        action: "cannot read",
        path: path.to_path_buf(),
        source,
    })?;
    let mut files = HashMap::new();
    let mut outer = tar::Archive::new(bytes.as_slice());
    let bad = |e: std::io::Error| ImageError::Invalid(e.to_string());
    for entry in outer.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let name = entry.path().map_err(bad)?.to_string_lossy().into_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).map_err(bad)?;
        files.insert(name, data);
    }
    let blob = |digest: &Digest| -> Result<&Vec<u8>, ImageError> {
        let hex = digest.digest();
        let data = files
            .get(&format!("blobs/sha256/{hex}"))
            .ok_or_else(|| ImageError::Invalid(format!("no blob {digest}")))?;
        if archive::sha256_hex(data) != hex {
            return Err(ImageError::Invalid(format!(
                "blob {digest} does not match its digest"
            )));
        }
        Ok(data)
    };
    let index_json = files
        .get("index.json")
        .ok_or_else(|| ImageError::Invalid("no index.json".into()))?;
    let index = ImageIndex::from_reader(index_json.as_slice()).map_err(spec("index"))?;
    let [manifest_descriptor] = index.manifests().as_slice() else {
        return Err(ImageError::Invalid(
            "index.json lists more or less than one manifest".into(),
        ));
    };
    let manifest = ImageManifest::from_reader(blob(manifest_descriptor.digest())?.as_slice())
        .map_err(spec("manifest"))?;
    let config = ImageConfiguration::from_reader(blob(manifest.config().digest())?.as_slice())
        .map_err(spec("configuration"))?;
    let [layer] = manifest.layers().as_slice() else {
        return Err(ImageError::Invalid("the mover image has one layer".into()));
    };
    let root = archive::list(blob(layer.digest())?, true)?;
    Ok(Inspected {
        index,
        manifest,
        config,
        root,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn an_image_is_the_same_bytes_every_time_and_reads_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bin = dir.path().join("mover");
        std::fs::write(&bin, b"\x7fELF not really").expect("write");
        let project = Project {
            root: dir.path().to_path_buf(),
            version: "1.2.3".into(),
            revision: "abc".into(),
            epoch: 1_700_000_000,
        };
        let one = dir.path().join("one.oci.tar");
        let two = dir.path().join("two.oci.tar");
        let a = write(&project, Arch::Amd64, &MOVER, &bin, b"license", &one).expect("image");
        let b = write(&project, Arch::Amd64, &MOVER, &bin, b"license", &two).expect("image");
        assert_eq!(a.sha256, b.sha256);
        assert_eq!(a.manifest_digest, b.manifest_digest);
        let seen = inspect(&one).expect("inspect");
        let cfg = seen.config.config().as_ref().expect("config");
        assert_eq!(
            cfg.entrypoint().as_deref(),
            Some(&["/mover".to_string()][..])
        );
        let labels = cfg.labels().as_ref().expect("labels");
        assert_eq!(labels["org.opencontainers.image.version"], "1.2.3");
        assert_eq!(labels["org.opencontainers.image.revision"], "abc");
        assert_eq!(
            seen.root,
            vec![("mover".to_string(), 0o755), ("LICENSE".to_string(), 0o644)]
        );
        let ref_name = seen.index.manifests()[0]
            .annotations()
            .as_ref()
            .and_then(|a| a.get(REF_NAME).cloned());
        assert_eq!(ref_name.as_deref(), Some("1.2.3"));
    }
}
