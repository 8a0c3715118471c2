//! A BLAKE3 manifest of a tree: one line per entry with everything the
//! transfer preserves, and a digest over all lines. Two trees with equal
//! manifests are identical for every purpose of a migration.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use crate::filter::Filter;
use crate::meta::{Kind, Meta};
use crate::path::RelPath;
use crate::walk::{file_hash, WalkItem, Walker};

/// What the manifest compares.
#[derive(Debug, Clone, Copy)]
pub struct ManifestOptions {
    /// Include numeric owner and group.
    pub owner: bool,
    /// Include the root directory's own metadata.
    pub root_meta: bool,
}

impl Default for ManifestOptions {
    fn default() -> Self {
        ManifestOptions {
            owner: true,
            root_meta: true,
        }
    }
}

/// The manifest of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub lines: Vec<String>,
    pub digest: [u8; 32],
}

impl Manifest {
    /// Walks `root` (nothing excluded) and describes every entry.
    pub fn of(root: &Path, opts: ManifestOptions) -> io::Result<Manifest> {
        let mut lines = Vec::new();
        for item in Walker::new(root.to_path_buf(), Filter::default(), false) {
            let e = match item {
                WalkItem::Entry(e) => e,
                WalkItem::DirDone(_) | WalkItem::Reserved(_) => continue,
                WalkItem::Failed(p, err) => {
                    return Err(io::Error::new(err.kind(), format!("{p}: {err}")))
                }
                WalkItem::Vanished(p) => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{p} vanished"),
                    ))
                }
            };
            let hash = match e.kind {
                Kind::File => Some(file_hash(&e.path.under(root))?),
                _ => None,
            };
            let line = describe(&e.path, &e.kind, &e.meta, hash.as_ref(), opts);
            lines.push(line);
        }
        let mut h = blake3::Hasher::new();
        for l in &lines {
            h.update(l.as_bytes());
            h.update(b"\n");
        }
        Ok(Manifest {
            lines,
            digest: *h.finalize().as_bytes(),
        })
    }

    /// Lines present in one manifest and not the other (`-` self, `+` other).
    pub fn diff(&self, other: &Manifest) -> Vec<String> {
        let a: std::collections::BTreeSet<_> = self.lines.iter().collect();
        let b: std::collections::BTreeSet<_> = other.lines.iter().collect();
        let mut out: Vec<String> = a.difference(&b).map(|l| format!("- {l}")).collect();
        out.extend(b.difference(&a).map(|l| format!("+ {l}")));
        out
    }
}

/// One manifest line: everything the transfer preserves of an entry
/// (`content` is the BLAKE3 of a regular file's data).
pub fn describe(
    path: &RelPath,
    kind: &Kind,
    meta: &Meta,
    content: Option<&[u8; 32]>,
    opts: ManifestOptions,
) -> String {
    let mut line = format!("{path:?} {}", kind.name());
    if !path.is_root() || opts.root_meta {
        let _ = write!(
            line,
            " perm={:o} mtime={}.{:09}",
            meta.perm, meta.mtime.sec, meta.mtime.nsec
        );
        if opts.owner {
            let _ = write!(line, " owner={}:{}", meta.uid, meta.gid);
        }
    }
    match kind {
        Kind::File => {
            let _ = write!(line, " size={}", meta.size);
            if let Some(hash) = content {
                let _ = write!(line, " blake3={}", blake3::Hash::from(*hash).to_hex());
            }
        }
        Kind::Symlink(t) => {
            let _ = write!(line, " target={:?}", crate::path::lossy(t));
        }
        Kind::HardLink(t) => {
            let _ = write!(line, " to={t:?}");
        }
        Kind::CharDev(d) | Kind::BlockDev(d) => {
            let _ = write!(line, " rdev={d}");
        }
        Kind::Dir | Kind::Fifo | Kind::Socket => {}
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn detects_content_mode_and_link_differences() {
        let a = tempfile::tempdir().unwrap();
        fs::write(a.path().join("f"), b"one").unwrap();
        std::os::unix::fs::symlink("f", a.path().join("l")).unwrap();
        let m1 = Manifest::of(a.path(), ManifestOptions::default()).unwrap();
        assert_eq!(
            m1,
            Manifest::of(a.path(), ManifestOptions::default()).unwrap()
        );
        assert!(m1.diff(&m1).is_empty());

        fs::write(a.path().join("f"), b"two").unwrap();
        let m2 = Manifest::of(a.path(), ManifestOptions::default()).unwrap();
        assert_ne!(m1.digest, m2.digest);
        let d = m1.diff(&m2);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].starts_with("- \"f\" file"));
    }
}
