//! The receiver's generator: compares each listed entry with the destination,
//! creates what needs no data (directories, symlinks, special files), fixes
//! metadata of what is already up to date, and requests the rest from the
//! sender with block signatures of the existing file.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use rustix::fs::{FileType, Mode, CWD};
use tokio::sync::mpsc;

use super::commit::create_and_replace;
use super::journal::Journal;
use super::remove::remove_tree;
use super::resume::{self, sign_basis, Resume, Signed};
use crate::beneath::{Placer, TreeRoot};
use crate::checkpoint::{Fingerprint, Partial};
use crate::filter::Filter;
use crate::meta::{apply_to_path, meta_matches, Kind, Lstat, Meta};
use crate::path::RelPath;
use crate::protocol::{
    pack::SigBatch, violation, Entry, Frame, ListStats, PrefixState, Request, SessionOptions,
    SIGS_PER_FRAME,
};
use crate::session::flow::outbox::{recv_or_flush, Out, Outbox};
use crate::session::flow::{Inflight, ListWindow, Wake};
use crate::session::{cancelled, is_fatal, warn, SessionError};
use crate::stats::{human_bytes, Counters, Summary};
use crate::walk::{file_hash, STATE_DIR};
use crate::warm::{Warm, Warmer};

mod prune;

use super::pending::PendingFile;

/// What the generator leaves for the final pass.
#[derive(Debug, Default)]
pub struct GenOutput {
    pub summary: Summary,
    /// Every directory with its wanted metadata, applied after its contents.
    pub dirs: Vec<(RelPath, Meta)>,
    /// Hard links `(path, existing name)`, made once all files are in place.
    pub links: Vec<(RelPath, RelPath)>,
}

/// What the generator works on.
pub struct GenConfig {
    pub tree: Arc<TreeRoot>,
    pub opts: SessionOptions,
    pub filter: Filter,
    /// Preserve owner and group.
    pub owner: bool,
    /// The operation's checkpoint, if it has one.
    pub journal: Option<Arc<Journal>>,
    /// What the destination can hold, in bytes (`receive --capacity`).
    pub capacity: Option<u64>,
}

pub struct Generator {
    /// Where listed entries go: every path through a parent resolved beneath the root.
    placer: Placer,
    /// Stats the entries of destination directories the listing names
    /// before their own entries come.
    warmer: Option<Warmer>,
    opts: SessionOptions,
    filter: Filter,
    owner: bool,
    journal: Option<Arc<Journal>>,
    capacity: Option<u64>,
    /// The listing so far, for the checkpoint's fingerprint of the source.
    fingerprint: blake3::Hasher,
    out: Outbox,
    inflight: Arc<Inflight<PendingFile>>,
    counters: Arc<Counters>,
    window: Arc<ListWindow>,
    /// Threads used to sign large basis files.
    threads: usize,
    next_id: u64,
    /// Names listed so far in the directory being listed.
    children: Option<(RelPath, HashSet<Vec<u8>>)>,
    /// Directories listed whose children may still come.
    open_dirs: HashSet<RelPath>,
    /// Listed directories that could not be made at the destination.
    broken_dirs: HashSet<RelPath>,
    root_seen: bool,
    result: GenOutput,
}

impl Generator {
    pub fn new(
        cfg: GenConfig,
        out: Out,
        inflight: Arc<Inflight<PendingFile>>,
        counters: Arc<Counters>,
        window: Arc<ListWindow>,
    ) -> Generator {
        let GenConfig {
            tree,
            opts,
            filter,
            owner,
            journal,
            capacity,
        } = cfg;
        let warmer = Warmer::start(&tree, Warm::Entries);
        Generator {
            placer: Placer::new(tree),
            warmer,
            opts,
            filter,
            owner,
            journal,
            capacity,
            fingerprint: blake3::Hasher::new(),
            out: Outbox::new(out),
            inflight,
            counters,
            window,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            next_id: 0,
            children: None,
            open_dirs: HashSet::new(),
            broken_dirs: HashSet::new(),
            root_seen: false,
            result: GenOutput::default(),
        }
    }

    /// Consumes list frames until `ListEnd`, then waits for every request to finish.
    pub fn run(mut self, mut rx: mpsc::Receiver<Vec<Frame>>) -> Result<GenOutput, SessionError> {
        'list: loop {
            let batch = recv_or_flush(&mut rx, &mut self.out)?.ok_or_else(cancelled)?;
            // After a failure elsewhere, frames already queued are not acted on.
            if self.inflight.is_closed() {
                return Err(cancelled());
            }
            for frame in batch {
                match frame {
                    Frame::Entry(e) => self.entry(e)?,
                    Frame::DirDone(d) => self.dir_done(d)?,
                    Frame::ListEnd(stats) => {
                        self.list_end(stats);
                        break 'list;
                    }
                    other => {
                        return Err(SessionError::Internal(format!(
                            "generator got {}",
                            other.name()
                        )))
                    }
                }
                if let Some(n) = self.window.consumed() {
                    self.send(Frame::Credit(n))?;
                }
            }
            self.send_redo()?;
        }
        loop {
            self.out.flush()?;
            match self.inflight.wait_empty() {
                Wake::Ready => break,
                Wake::Redo => self.send_redo()?,
                Wake::Closed => return Err(cancelled()),
            }
        }
        self.inflight.end_requests();
        self.send(Frame::RequestsEnd)?;
        self.out.flush()?;
        Ok(self.result)
    }

    fn send(&mut self, frame: Frame) -> Result<(), SessionError> {
        self.out.push(frame)
    }

    /// Requests again, whole, the files whose rebuild failed verification.
    fn send_redo(&mut self) -> Result<(), SessionError> {
        for (id, p) in self.inflight.take_redo() {
            self.send(Frame::Request(Request {
                id,
                path: p.path,
                basis: None,
                resume_from: 0,
                prefix: None,
            }))?;
        }
        Ok(())
    }

    fn list_end(&mut self, stats: ListStats) {
        let s = &mut self.result.summary;
        s.files_failed += stats.failed;
        s.files_vanished += stats.vanished;
        self.counters.set_listing_done();
        if let Some(j) = &self.journal {
            let s = &self.result.summary;
            let source = Fingerprint {
                entries: s.entries_total,
                files: s.files_total,
                bytes: s.bytes_total,
                digest: *self.fingerprint.finalize().as_bytes(),
            };
            j.listed(s.files_total, s.bytes_total, source);
            j.discard_unclaimed(&self.placer, &self.counters);
        }
    }

    fn entry(&mut self, e: Entry) -> Result<(), SessionError> {
        self.check_place(&e)?;
        if !e.path.is_root() {
            self.result.summary.entries_total += 1;
        }
        let m = &e.meta;
        for part in [
            e.path.as_bytes(),
            e.kind.name().as_bytes(),
            &m.size.to_le_bytes(),
            &m.mtime.sec.to_le_bytes(),
            &m.mtime.nsec.to_le_bytes(),
            &m.perm.to_le_bytes(),
        ] {
            self.fingerprint.update(&(part.len() as u32).to_le_bytes());
            self.fingerprint.update(part);
        }
        // Nothing goes into a directory that could not be made (its failure was
        // reported): what stands there instead must not be written through.
        if !e.path.is_root() && self.broken_dirs.contains(&e.path.parent()) {
            if e.kind == Kind::Dir {
                self.broken_dirs.insert(e.path.clone());
            }
            self.result.summary.files_failed += 1;
            return Ok(());
        }
        let dest = match self.placer.place(&e.path) {
            Ok(dest) => dest,
            Err(err) => return self.entry_failed(&e, err),
        };
        let (dir, name) = dest.at();
        let have = match Lstat::at(dir, name) {
            Ok(have) => have,
            Err(err) => return self.entry_failed(&e, err),
        };
        let r = match &e.kind {
            Kind::Dir => self.dir(&e, &dest, have),
            // Regular files report their own failures (they also count in progress).
            Kind::File => return self.file(e, &dest, have),
            Kind::Symlink(target) => self.symlink(&e, target, &dest, have),
            Kind::HardLink(target) => {
                self.result.summary.hard_links += 1;
                self.result.links.push((e.path.clone(), target.clone()));
                Ok(())
            }
            Kind::Fifo | Kind::Socket | Kind::CharDev(_) | Kind::BlockDev(_) => {
                self.special(&e, &dest, have)
            }
        };
        match r {
            Ok(()) => Ok(()),
            Err(err) => self.entry_failed(&e, err),
        }
    }

    /// An entry could not be put in place: a directory that failed takes no
    /// entries (whatever stands there must not be written through).
    fn entry_failed(&mut self, e: &Entry, err: io::Error) -> Result<(), SessionError> {
        if e.kind == Kind::Dir {
            self.broken_dirs.insert(e.path.clone());
        }
        self.failed(&e.path, err)
    }

    /// An entry may only go into a directory this session listed and has not
    /// closed: a sender cannot reach through a symlink it listed (or one that
    /// was at the destination, since listed directories replace those) to
    /// write or delete outside the root. The walk lists every directory before
    /// its children, so the open set stays as small as the walk's own stack.
    fn check_place(&mut self, e: &Entry) -> Result<(), SessionError> {
        if !e.meta.mtime.is_valid() {
            return Err(violation(format!("{} has an invalid modification time", e.path)).into());
        }
        if e.path.is_root() {
            if e.kind != Kind::Dir || self.root_seen {
                return Err(violation("the root must be listed once, as a directory").into());
            }
            self.root_seen = true;
        } else {
            let (parent, name) = (e.path.parent(), e.path.file_name().to_vec());
            if parent.is_root() && name == STATE_DIR {
                return Err(violation("the sender listed the receiver's reserved .volmig").into());
            }
            match &mut self.children {
                Some((dir, names)) if *dir == parent => {
                    if !names.insert(name) {
                        return Err(violation(format!("{} was listed twice", e.path)).into());
                    }
                }
                slot => {
                    // A directory's children come in one run: once the run
                    // moves on, that directory takes no more entries.
                    if let Some((previous, _)) = slot.take() {
                        self.open_dirs.remove(&previous);
                    }
                    if !self.open_dirs.contains(&parent) {
                        return Err(violation(format!(
                            "{} is not inside a directory listed before it",
                            e.path
                        ))
                        .into());
                    }
                    *slot = Some((parent, HashSet::from([name])));
                }
            }
        }
        if e.kind == Kind::Dir {
            self.open_dirs.insert(e.path.clone());
        }
        Ok(())
    }

    /// Counts and reports a per-entry failure; fatal ones end the session.
    fn failed(&mut self, path: &RelPath, err: io::Error) -> Result<(), SessionError> {
        if is_fatal(&err) {
            return Err(SessionError::local(format!("writing {path}"), err));
        }
        warn(format_args!("{path}: {err}"));
        self.result.summary.files_failed += 1;
        Ok(())
    }

    fn dir(&mut self, e: &Entry, dest: &Path, have: Option<Lstat>) -> io::Result<()> {
        if !e.path.is_root() {
            self.result.summary.dirs += 1;
        }
        match have {
            Some(md) if md.is_dir() => {
                if let Some(warmer) = &self.warmer {
                    warmer.offer(&e.path);
                }
                // Without root, a read-only directory must be opened up while it is filled.
                if !self.owner && md.mode() & 0o300 != 0o300 {
                    fs::set_permissions(dest, fs::Permissions::from_mode(md.mode() | 0o700))?;
                }
            }
            Some(_) => {
                fs::remove_file(dest)?;
                fs::DirBuilder::new().mode(0o700).create(dest)?;
            }
            None => fs::DirBuilder::new().mode(0o700).create(dest)?,
        }
        self.result.dirs.push((e.path.clone(), e.meta));
        Ok(())
    }

    fn symlink(
        &mut self,
        e: &Entry,
        target: &[u8],
        dest: &Path,
        have: Option<Lstat>,
    ) -> io::Result<()> {
        self.result.summary.symlinks += 1;
        if let Some(md) = &have {
            if md.is_symlink() && fs::read_link(dest)?.as_os_str().as_bytes() == target {
                return self.fix_meta(e, dest, md);
            }
        }
        clear_dir(dest, have.as_ref())?;
        let target = std::ffi::OsStr::from_bytes(target);
        create_and_replace(dest, |tmp| {
            std::os::unix::fs::symlink(target, tmp)?;
            apply_to_path(tmp, &e.kind, &e.meta, self.owner)
        })
    }

    fn special(&mut self, e: &Entry, dest: &Path, have: Option<Lstat>) -> io::Result<()> {
        self.result.summary.specials += 1;
        let (ftype, rdev) = match e.kind {
            Kind::Fifo => (FileType::Fifo, 0),
            Kind::Socket => (FileType::Socket, 0),
            Kind::CharDev(d) => (FileType::CharacterDevice, d),
            Kind::BlockDev(d) => (FileType::BlockDevice, d),
            _ => return Err(io::Error::other("not a special file")),
        };
        if let Some(md) = &have {
            if md.file_type() == ftype && md.rdev() == rdev {
                return self.fix_meta(e, dest, md);
            }
        }
        clear_dir(dest, have.as_ref())?;
        create_and_replace(dest, |tmp| {
            rustix::fs::mknodat(CWD, tmp, ftype, Mode::from_raw_mode(0o600), rdev)?;
            apply_to_path(tmp, &e.kind, &e.meta, self.owner)
        })
    }

    fn file(&mut self, e: Entry, dest: &Path, have: Option<Lstat>) -> Result<(), SessionError> {
        let s = &mut self.result.summary;
        s.files_total += 1;
        s.bytes_total += e.meta.size;
        self.counters.file_listed(e.meta.size);
        self.check_capacity()?;
        let mut with_basis = false;
        match &have {
            Some(md) if md.is_file() => {
                match self.up_to_date(&e, dest, md) {
                    Ok(true) => {
                        self.result.summary.files_up_to_date += 1;
                        self.counters.file_found(e.meta.size);
                        return match self.fix_meta(&e, dest, md) {
                            Ok(()) => Ok(()),
                            Err(err) => self.failed(&e.path, err),
                        };
                    }
                    Ok(false) => {}
                    Err(err) => return self.file_failed(&e, err),
                }
                with_basis = !self.opts.whole_file && md.size() > 0;
            }
            Some(md) => {
                let cleared = if md.is_dir() {
                    clear_dir(dest, have.as_ref())
                } else if self.opts.inplace {
                    fs::remove_file(dest)
                } else {
                    Ok(())
                };
                if let Err(err) = cleared {
                    return self.file_failed(&e, err);
                }
            }
            None => {}
        }
        let partial = self.journal.as_ref().and_then(|j| j.claim(&e.path));
        // Reading a large basis or partial file is a wait like any other:
        // what is queued (the previous file's signatures) goes out first, so
        // the sender matches that file meanwhile instead of waiting for a
        // full batch.
        let basis_len = have
            .as_ref()
            .filter(|_| with_basis)
            .map_or(0, |md| md.size());
        let partial_len = partial.as_ref().map_or(0, |_| e.meta.size);
        if basis_len.max(partial_len) >= SLOW_READ {
            self.out.flush()?;
        }
        if let Some(resumed) = partial.and_then(|p| self.reuse_partial(&e, p)) {
            let (resume, tail) = resumed;
            let s = &mut self.result.summary;
            s.files_resumed += 1;
            s.bytes_resumed += resume.from;
            s.prefix_bytes_read += resume.read_back;
            self.counters.found_bytes(resume.from as i64);
            return self.request(e.path, e.meta, tail, Some(resume));
        }
        // Sign the basis first: if it cannot be read, the whole file is sent instead.
        let signed = if with_basis {
            sign_basis(dest, self.threads)
        } else {
            None
        };
        self.request(e.path, e.meta, signed, None)
    }

    /// Fails the session, as a full disk would but before the destination
    /// fills up, once the files listed add up to more than `--capacity`.
    fn check_capacity(&self) -> Result<(), SessionError> {
        let listed = self.result.summary.bytes_total;
        match self.capacity {
            Some(capacity) if listed > capacity => Err(SessionError::local(
                format!(
                    "the source's files do not fit in the destination: those listed so far \
                     add up to {listed} bytes, more than its {capacity} (--capacity, {})",
                    human_bytes(capacity as f64)
                ),
                rustix::io::Errno::NOSPC.into(),
            )),
            _ => Ok(()),
        }
    }

    /// A regular file that failed before its request (progress does not
    /// count it: the destination does not hold it).
    fn file_failed(&mut self, e: &Entry, err: io::Error) -> Result<(), SessionError> {
        self.failed(&e.path, err)
    }

    /// Continues the partial file an earlier attempt left for `e`, if it
    /// checks out; otherwise it is reported and removed, and `e` is sent as usual.
    fn reuse_partial(&self, e: &Entry, p: Partial) -> Option<(Resume, Option<Signed>)> {
        // --checksum: every byte is read and compared, the prefix too.
        let trust = !self.opts.checksum;
        let checked = resume::check(
            &self.placer,
            e,
            &p,
            !self.opts.whole_file,
            trust,
            self.threads,
        );
        checked
            .inspect_err(|why| {
                warn(format_args!(
                    "{}: partial file of an earlier attempt not reused: {why}",
                    e.path
                ));
                // The earlier attempt counted it as done: it is not. That is
                // recorded before the file goes.
                let recorded = match &self.journal {
                    Some(j) => j.drop_claim(&e.path, &self.counters),
                    None => Ok(()),
                };
                if let (Ok(()), Ok(temp)) = (recorded, self.placer.place(&p.temp)) {
                    let _ = fs::remove_file(&*temp);
                }
            })
            .ok()
    }

    /// Fixes what differs in the metadata of an entry that is otherwise in place.
    fn fix_meta(&self, e: &Entry, dest: &Path, have: &Lstat) -> io::Result<()> {
        if meta_matches(have.meta(), &e.meta, &e.kind, self.owner) {
            return Ok(());
        }
        apply_to_path(dest, &e.kind, &e.meta, self.owner)
    }

    fn up_to_date(&self, e: &Entry, dest: &Path, md: &Lstat) -> io::Result<bool> {
        if md.size() != e.meta.size {
            return Ok(false);
        }
        match e.checksum {
            Some(want) => Ok(file_hash(dest)? == want),
            None => Ok(md.meta().mtime == e.meta.mtime),
        }
    }

    fn request(
        &mut self,
        path: RelPath,
        meta: Meta,
        signed: Option<Signed>,
        resume: Option<Resume>,
    ) -> Result<(), SessionError> {
        let id = self.next_id;
        self.next_id += 1;
        let shape = signed.as_ref().map(|(s, _)| *s);
        let resume_from = resume.as_ref().map_or(0, |r| r.from);
        // The prefix's hash state, for the sender to go on from (not with
        // --checksum, which has it read in full).
        let head = resume
            .as_ref()
            .filter(|_| !self.opts.checksum)
            .map(|r| r.hasher.head())
            .filter(|h| !h.is_empty());
        let prefix = head.map(|h| PrefixState {
            size: meta.size,
            mtime: meta.mtime,
            head: h.pieces(),
        });
        let mut pending = PendingFile {
            path: path.clone(),
            meta,
            basis: shape,
            redo: false,
            resume,
        };
        while let Err(p) = self.inflight.try_insert(id, pending) {
            pending = p;
            // Full: what is queued must reach the sender before waiting for room.
            self.out.flush()?;
            match self.inflight.wait_room() {
                Wake::Ready => {}
                Wake::Redo => self.send_redo()?,
                Wake::Closed => return Err(cancelled()),
            }
        }
        self.send(Frame::Request(Request {
            id,
            path,
            basis: shape,
            resume_from,
            prefix,
        }))?;
        if let Some((shape, sigs)) = signed {
            for chunk in sigs.chunks(SIGS_PER_FRAME) {
                self.send(Frame::Sigs {
                    id,
                    sigs: SigBatch::new(shape.strong_len(), chunk),
                })?;
            }
        }
        Ok(())
    }

    fn dir_done(&mut self, dir: RelPath) -> Result<(), SessionError> {
        if !self.open_dirs.remove(&dir) {
            return Err(violation(format!("{dir} was not listed as a directory")).into());
        }
        let names = match self.children.take() {
            Some((d, names)) if d == dir => names,
            other => {
                self.children = other;
                HashSet::new()
            }
        };
        if self.broken_dirs.contains(&dir) {
            return Ok(());
        }
        if let Err(err) = self.delete_extraneous(&dir, &names) {
            return self.failed(&dir, err);
        }
        Ok(())
    }
}

/// Basis (or partial) files at least this large take long enough to read
/// that the generator hands over its queued frames first.
const SLOW_READ: u64 = 1 << 20;

/// A directory where a non-directory must go is removed with its contents.
fn clear_dir(dest: &Path, have: Option<&Lstat>) -> io::Result<()> {
    match have {
        Some(md) if md.is_dir() => remove_tree(dest),
        _ => Ok(()),
    }
}
