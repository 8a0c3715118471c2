//! OCI image archives built in the test, as `skopeo copy ... oci-archive:`
//! and `cargo xtask dist` write them: a tar of `oci-layout`, `index.json`
//! and `blobs/sha256/<hex>`, one manifest, its config and its layers.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use oci_spec::image::{
    ConfigBuilder, Descriptor, Digest, ImageConfigurationBuilder, ImageIndexBuilder,
    ImageManifestBuilder, MediaType, RootFsBuilder,
};
use sha2::{Digest as _, Sha256};

/// One layer's changeset, as an uncompressed tar.
pub struct Layer {
    tar: tar::Builder<Vec<u8>>,
    pub compression: Compression,
}

#[derive(Debug, Clone, Copy)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Layer {
    pub fn new(compression: Compression) -> Layer {
        Layer {
            tar: tar::Builder::new(Vec::new()),
            compression,
        }
    }

    fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(size);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(1_700_000_000);
        header
    }

    pub fn dir(mut self, path: &str) -> Layer {
        let mut header = Self::header(tar::EntryType::Directory, 0o755, 0);
        self.tar
            .append_data(&mut header, path, std::io::empty())
            .expect("dir entry");
        self
    }

    pub fn file(mut self, path: &str, content: &[u8], mode: u32) -> Layer {
        let mut header = Self::header(tar::EntryType::Regular, mode, content.len() as u64);
        self.tar
            .append_data(&mut header, path, content)
            .expect("file entry");
        self
    }

    pub fn symlink(mut self, path: &str, target: &str) -> Layer {
        let mut header = Self::header(tar::EntryType::Symlink, 0o777, 0);
        self.tar
            .append_link(&mut header, path, target)
            .expect("symlink entry");
        self
    }

    /// `.wh.<name>` next to `path`: deletes `path` of a lower layer.
    pub fn whiteout(self, path: &str) -> Layer {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        let marker = if dir.is_empty() {
            format!(".wh.{name}")
        } else {
            format!("{dir}/.wh.{name}")
        };
        self.file(&marker, b"", 0o644)
    }

    /// `.wh..wh..opq` in `dir`: hides every child of it from lower layers.
    pub fn opaque(self, dir: &str) -> Layer {
        self.file(&format!("{dir}/.wh..wh..opq"), b"", 0o644)
    }

    /// The host's `/bin/sh` and the shared libraries `ldd` lists for it, at
    /// the same paths: a shell (with its builtins) in the image.
    pub fn shell(mut self) -> Layer {
        let sh = std::fs::canonicalize("/bin/sh").expect("/bin/sh");
        self = self.host_file("bin/sh", &sh);
        let ldd = Command::new("ldd").arg(&sh).output().expect("running ldd");
        let listing = String::from_utf8_lossy(&ldd.stdout).into_owned();
        for line in listing.lines() {
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next(),
                None => line.split_whitespace().next(),
            };
            if let Some(path) = path.filter(|p| p.starts_with('/')) {
                self = self.host_file(path.trim_start_matches('/'), Path::new(path));
            }
        }
        self
    }

    /// The content of host file `host` (symlinks followed) at `path`.
    pub fn host_file(self, path: &str, host: &Path) -> Layer {
        let content = std::fs::read(host).unwrap_or_else(|e| panic!("{host:?}: {e}"));
        self.file(path, &content, 0o755)
    }

    fn finish(self) -> (Vec<u8>, Compression) {
        (self.tar.into_inner().expect("layer tar"), self.compression)
    }
}

/// An image: layers bottom first, and its configuration.
#[derive(Default)]
pub struct Image {
    pub layers: Vec<Layer>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    /// `NAME=value`.
    pub env: Vec<String>,
    pub working_dir: Option<String>,
    /// `User`: `uid`, `name`, `uid:gid`, ...
    pub user: Option<String>,
    pub labels: HashMap<String, String>,
    /// The manifest's `org.opencontainers.image.ref.name` in the index.
    pub ref_name: Option<String>,
    /// Flip one byte of layer N's blob after its digest is taken.
    pub corrupt_layer: Option<usize>,
}

pub fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn digest_of(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn descriptor(media_type: MediaType, bytes: &[u8]) -> Descriptor {
    let digest = Digest::from_str(&digest_of(bytes)).expect("digest");
    Descriptor::new(media_type, bytes.len() as u64, digest)
}

impl Image {
    /// Writes the archive at `path`; returns the manifest's digest.
    pub fn write(self, path: &Path) -> String {
        // (digest, content): a corrupt blob keeps its descriptor's name.
        let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
        let (mut layers, mut diff_ids) = (Vec::new(), Vec::new());
        for (index, layer) in self.layers.into_iter().enumerate() {
            let (tar, compression) = layer.finish();
            diff_ids.push(digest_of(&tar));
            let (media_type, mut blob) = match compression {
                Compression::None => (MediaType::ImageLayer, tar),
                Compression::Gzip => {
                    let mut gz =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    gz.write_all(&tar).expect("gzip");
                    (MediaType::ImageLayerGzip, gz.finish().expect("gzip"))
                }
                Compression::Zstd => (
                    MediaType::ImageLayerZstd,
                    zstd::encode_all(&tar[..], 3).expect("zstd"),
                ),
            };
            let desc = descriptor(media_type, &blob);
            if self.corrupt_layer == Some(index) {
                let middle = blob.len() / 2;
                blob[middle] ^= 0xff;
            }
            blobs.push((desc.digest().to_string(), blob));
            layers.push(desc);
        }
        let mut config = ConfigBuilder::default().env(self.env).labels(self.labels);
        if let Some(entrypoint) = self.entrypoint {
            config = config.entrypoint(entrypoint);
        }
        if let Some(cmd) = self.cmd {
            config = config.cmd(cmd);
        }
        if let Some(dir) = self.working_dir {
            config = config.working_dir(dir);
        }
        if let Some(user) = self.user {
            config = config.user(user);
        }
        let configuration = ImageConfigurationBuilder::default()
            .architecture("amd64")
            .os("linux")
            .config(config.build().expect("config"))
            .rootfs(
                RootFsBuilder::default()
                    .typ("layers")
                    .diff_ids(diff_ids)
                    .build()
                    .expect("rootfs"),
            )
            .build()
            .expect("image configuration");
        let config_bytes = serde_json::to_vec(&configuration).expect("config json");
        let manifest = ImageManifestBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageManifest)
            .config(descriptor(MediaType::ImageConfig, &config_bytes))
            .layers(layers)
            .build()
            .expect("manifest");
        let manifest_bytes = serde_json::to_vec(&manifest).expect("manifest json");
        let mut manifest_desc = descriptor(MediaType::ImageManifest, &manifest_bytes);
        if let Some(name) = self.ref_name {
            let annotations =
                HashMap::from([("org.opencontainers.image.ref.name".to_string(), name)]);
            manifest_desc.set_annotations(Some(annotations));
        }
        let manifest_digest = manifest_desc.digest().to_string();
        let index = ImageIndexBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageIndex)
            .manifests(vec![manifest_desc])
            .build()
            .expect("index");
        blobs.push((digest_of(&config_bytes), config_bytes));
        blobs.push((manifest_digest.clone(), manifest_bytes));
        let mut out = tar::Builder::new(std::fs::File::create(path).expect("archive file"));
        let mut add = |name: &str, bytes: &[u8]| {
            let mut header = Layer::header(tar::EntryType::Regular, 0o644, bytes.len() as u64);
            out.append_data(&mut header, name, bytes)
                .expect("archive entry");
        };
        add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#);
        add(
            "index.json",
            &serde_json::to_vec(&index).expect("index json"),
        );
        let mut seen = Vec::new();
        for (digest, blob) in &blobs {
            if !seen.contains(digest) {
                seen.push(digest.clone());
                let hex = digest.trim_start_matches("sha256:");
                add(&format!("blobs/sha256/{hex}"), blob);
            }
        }
        out.into_inner().expect("archive written");
        manifest_digest
    }
}

/// A path for an archive in `dir`.
pub fn archive_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.oci.tar"))
}
