//! `--verify`: once all data is in place, the sender lists its tree again
//! with a BLAKE3 of every file's contents, and the receiver describes each
//! listed entry from its own disk the same way (contents and metadata, as in
//! a [`crate::manifest`]) and compares. A file whose contents differ is
//! removed from the destination, so the next attempt sends it again.
//!
//! Two kinds of difference are told apart. The destination holds each entry
//! with the kind, size and modification time it was sent with; where the
//! source's differ now, or the entry is on one side only, the source changed
//! after it was sent (a live source: `changed`, exit 24). Where they agree
//! and contents, permissions, owner or target still differ, the destination
//! does not hold what was sent (`differences`, exit 23). Leftover temporary
//! names at the destination are differences too, `--delete` or not.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::beneath::{Placer, TreeRoot};
use crate::filter::Filter;
use crate::manifest::{describe, ManifestOptions};
use crate::meta::{kind_of, Kind, Meta};
use crate::path::RelPath;
use crate::protocol::{Entry, Frame};
use crate::session::flow::outbox::{recv_or_flush, Out, Outbox};
use crate::session::flow::ListWindow;
use crate::session::{cancelled, warn, SessionError};
use crate::stats::VerifyResult;
use crate::walk::{is_temp_name, STATE_DIR};

/// Differences described one by one on stderr; the rest are only counted.
const REPORT_AT_MOST: u64 = 50;
/// Paths changed during the copy named in the summary; the rest are counted.
const NAME_AT_MOST: usize = 20;

pub struct Verifier {
    placer: Placer,
    filter: Filter,
    /// Extra entries at the destination are differences (`--delete` was asked for).
    delete: bool,
    opts: ManifestOptions,
    out: Outbox,
    window: Arc<ListWindow>,
    /// Names listed so far in the directory being listed.
    children: Option<(RelPath, HashSet<Vec<u8>>)>,
    manifest: blake3::Hasher,
    result: VerifyResult,
}

/// Whether this process owns the destination root (and so could give it
/// the source root's mode and times without root's capabilities).
fn owns_root(tree: &TreeRoot) -> bool {
    rustix::fs::fstat(tree).is_ok_and(|st| st.st_uid == rustix::process::geteuid().as_raw())
}

impl Verifier {
    pub fn new(
        tree: Arc<TreeRoot>,
        filter: Filter,
        delete: bool,
        owner: bool,
        out: Out,
        window: Arc<ListWindow>,
    ) -> Result<Verifier, SessionError> {
        Ok(Verifier {
            opts: ManifestOptions {
                owner,
                // A root this receiver could not set is not its to compare.
                root_meta: owner || owns_root(&tree),
            },
            placer: Placer::new(tree),
            filter,
            delete,
            out: Outbox::new(out),
            window,
            children: None,
            manifest: blake3::Hasher::new(),
            result: VerifyResult::default(),
        })
    }

    /// Compares listed entries until `ListEnd`.
    pub fn run(mut self, mut rx: mpsc::Receiver<Vec<Frame>>) -> Result<VerifyResult, SessionError> {
        loop {
            let batch = recv_or_flush(&mut rx, &mut self.out)?.ok_or_else(cancelled)?;
            for frame in batch {
                match frame {
                    Frame::Entry(e) => self.entry(e)?,
                    Frame::DirDone(d) => self.dir_done(d),
                    Frame::ListEnd(stats) => {
                        // What the sender could not list again cannot be
                        // verified; what vanished since is a live source.
                        self.result.differences += stats.failed;
                        self.result.changed += stats.vanished;
                        let r = &mut self.result;
                        r.passed = r.differences == 0;
                        r.manifest = self.manifest.finalize().to_hex().to_string();
                        self.out.flush()?;
                        return Ok(self.result);
                    }
                    other => {
                        return Err(SessionError::Internal(format!(
                            "verifier got {}",
                            other.name()
                        )))
                    }
                }
                if let Some(n) = self.window.consumed() {
                    self.out.push(Frame::Credit(n))?;
                }
            }
        }
    }

    fn entry(&mut self, e: Entry) -> Result<(), SessionError> {
        if !e.path.is_root() {
            let (parent, name) = (e.path.parent(), e.path.file_name().to_vec());
            match &mut self.children {
                Some((dir, names)) if *dir == parent => {
                    names.insert(name);
                }
                slot => *slot = Some((parent, HashSet::from([name]))),
            }
        }
        // Counted as the transfer's summary counts entries: the root is not one.
        if !e.path.is_root() {
            self.result.entries += 1;
        }
        let want = describe(&e.path, &e.kind, &e.meta, e.checksum.as_ref(), self.opts);
        let have = match self.observe(&e) {
            Ok(line) => line,
            Err(err) if err.kind() == io::ErrorKind::NotFound => "missing".to_string(),
            Err(err) => format!("unreadable: {err}"),
        };
        self.manifest.update(have.as_bytes());
        self.manifest.update(b"\n");
        if have != want && self.sent_otherwise(&e) {
            self.changed(&e.path, &want, &have);
        } else if have != want {
            self.differ(&e.path, &want, &have);
            let same_meta = want
                .find(" blake3=")
                .is_some_and(|at| have.starts_with(&want[..at]));
            if e.kind == Kind::File && same_meta {
                // Same metadata, other contents: only removal makes the next
                // attempt's quick check send it again.
                if let Ok(dest) = self.placer.place(&e.path) {
                    let _ = fs::remove_file(&*dest);
                }
            }
        }
        Ok(())
    }

    /// Whether the destination holds `e` as sent in another form than the
    /// source has now (or not at all): kind, size or modification time,
    /// which the transfer set from what it sent, differ.
    fn sent_otherwise(&self, e: &Entry) -> bool {
        let Ok(md) = self
            .placer
            .place(&e.path)
            .and_then(|p| fs::symlink_metadata(&*p))
        else {
            return true;
        };
        let have = Meta::from_fs(&md);
        let (file, link) = (md.is_file(), md.file_type().is_symlink());
        match &e.kind {
            // A link's own metadata is its first name's: only its presence counts.
            Kind::HardLink(_) => !file,
            Kind::File => !file || have.size != e.meta.size || have.mtime != e.meta.mtime,
            Kind::Dir => !md.is_dir() || have.mtime != e.meta.mtime,
            Kind::Symlink(_) => !link,
            _ => file || md.is_dir() || link,
        }
    }

    /// The source changed after this entry was sent: reported and named, not a failure.
    fn changed(&mut self, path: &RelPath, want: &str, have: &str) {
        let r = &mut self.result;
        r.changed += 1;
        if r.changed_paths.len() < NAME_AT_MOST {
            r.changed_paths.push(path.to_string());
        }
        if r.changed <= REPORT_AT_MOST {
            warn(format_args!(
                "verify: {path} changed during the copy:\n  source now:  {want}\n  as sent:     {have}"
            ));
        }
    }

    /// The destination's line for a listed entry, described like the source's.
    fn observe(&self, e: &Entry) -> io::Result<String> {
        let path = self.placer.place(&e.path)?;
        let md = fs::symlink_metadata(&path)?;
        let meta = Meta::from_fs(&md);
        let kind = match &e.kind {
            Kind::HardLink(target) => {
                let t = fs::symlink_metadata(&*self.placer.place(target)?)?;
                if md.is_file() && (t.dev(), t.ino()) == (md.dev(), md.ino()) {
                    Kind::HardLink(target.clone())
                } else {
                    Kind::File
                }
            }
            _ => kind_of(&path, &md)?,
        };
        let content = match kind {
            Kind::File => {
                let mut hasher = blake3::Hasher::new();
                hasher.update_reader(self.placer.tree().open_file(&e.path)?)?;
                Some(*hasher.finalize().as_bytes())
            }
            _ => None,
        };
        // The sender's meta of a hard link is its first name's.
        let meta = if matches!(kind, Kind::HardLink(_)) {
            e.meta
        } else {
            meta
        };
        Ok(describe(&e.path, &kind, &meta, content.as_ref(), self.opts))
    }

    fn differ(&mut self, path: &RelPath, want: &str, have: &str) {
        self.result.differences += 1;
        if self.result.differences <= REPORT_AT_MOST {
            warn(format_args!(
                "verify: {path} differs:\n  source:      {want}\n  destination: {have}"
            ));
        } else if self.result.differences == REPORT_AT_MOST + 1 {
            warn("verify: more differences; only counted from here on");
        }
    }

    /// Leftover temporary names at the destination are differences; with
    /// `--delete`, so is anything else the source does not have (and is not
    /// excluded): it went from the source during the copy.
    fn dir_done(&mut self, dir: RelPath) {
        let names = match self.children.take() {
            Some((d, names)) if d == dir => names,
            other => {
                self.children = other;
                HashSet::new()
            }
        };
        let Ok(rd) = self.placer.place(&dir).and_then(|d| fs::read_dir(&*d)) else {
            return;
        };
        for de in rd.flatten() {
            let name = de.file_name();
            let name = name.as_bytes();
            if names.contains(name) || (dir.is_root() && name == STATE_DIR) {
                continue;
            }
            let Ok(path) = dir.join(name) else { continue };
            let is_dir = de.file_type().is_ok_and(|t| t.is_dir());
            if is_temp_name(name) && !is_dir {
                self.differ(&path, "(absent)", "a leftover temporary file");
            } else if self.delete && !self.filter.excludes(&path, is_dir) {
                self.changed(&path, "(absent)", "only at the destination");
            }
        }
    }
}
