//! The receiver's applier: rebuilds requested files from the sender's data,
//! verifies each against the sender's BLAKE3, and commits it.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::commit::{create_at, create_temp, keyed_temp_name, Finished};
use super::committer::Committer;
use super::journal::{Journal, Slot};
use super::pending::PendingFile;
use crate::beneath::{Placed, Placer, TreeRoot};
use crate::delta::{Op, LITERAL_CHUNK};
use crate::meta::{apply_to_fd, Meta};
use crate::patch::{OutFile, PatchError, Patcher};
use crate::protocol::{violation, FileOutcome, Frame, WireOp};
use crate::session::flow::outbox::recv_or;
use crate::session::flow::DataBatch;
use crate::session::flow::Inflight;
use crate::session::{cancelled, is_fatal, warn, SessionError};
use crate::stats::{Counters, Summary};
use crate::treehash::TreeHasher;

/// A written length and the hash of those bytes.
type Prefix = (u64, TreeHasher);

/// Prefixes from this long on are recorded before they are written again
/// (one checkpoint write each): reading one again in full would cost more.
const RECORD_BEFORE_WRITING: u64 = 16 << 20;

/// The file being rebuilt.
struct Current {
    id: u64,
    pending: PendingFile,
    meta: Meta,
    temp: Option<Placed>,
    /// The rebuild and where it goes, or why it failed locally (the rest of
    /// the file's data is then skipped).
    patcher: Result<(Patcher, Placed), String>,
    /// Bytes of this file counted as settled so far.
    counted: u64,
    /// The temporary file is in the checkpoint.
    journaled: bool,
}

impl Drop for Current {
    /// A session that stops early keeps the partial files its checkpoint
    /// names; without a checkpoint, it leaves nothing behind.
    fn drop(&mut self) {
        if let Some(temp) = self.temp.take() {
            if !self.journaled {
                let _ = fs::remove_file(&*temp);
            }
        }
    }
}

/// Opens an existing destination file without following a symlink in its
/// place (a basis to read, or a file to update in place).
fn open_nofollow(dest: &Path, write: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dest)
}

/// Files at least this large are written long enough for the committer to
/// get the applier's batch first.
const LARGE_FILE: u64 = 1 << 20;

pub struct Applier {
    placer: Placer,
    inplace: bool,
    owner: bool,
    inflight: Arc<Inflight<PendingFile>>,
    counters: Arc<Counters>,
    journal: Option<Arc<Journal>>,
    current: Option<Current>,
    committer: Committer,
    zstd: zstd::bulk::Decompressor<'static>,
    summary: Summary,
}

impl Applier {
    pub fn new(
        tree: Arc<TreeRoot>,
        inplace: bool,
        owner: bool,
        inflight: Arc<Inflight<PendingFile>>,
        counters: Arc<Counters>,
        journal: Option<Arc<Journal>>,
    ) -> io::Result<Applier> {
        Ok(Applier {
            placer: Placer::new(tree),
            inplace,
            owner,
            inflight,
            committer: Committer::start(journal.clone(), counters.clone())?,
            counters,
            journal,
            current: None,
            zstd: zstd::bulk::Decompressor::new()?,
            summary: Summary::default(),
        })
    }

    /// Applies data frames until `DataEnd`, then commits what is left.
    pub fn run(mut self, mut rx: mpsc::Receiver<DataBatch>) -> Result<Summary, SessionError> {
        'data: loop {
            // The batch's share of the data budget is returned once it is
            // applied.
            // Files finished so far are committed while this waits.
            let batch = recv_or(&mut rx, || self.committer.hand_over())?;
            let batch = batch.ok_or_else(cancelled)?;
            for frame in batch.frames {
                match frame {
                    Frame::FileBegin { id, meta } => self.begin(id, meta)?,
                    Frame::Ops { id, ops } => self.ops(id, ops)?,
                    Frame::FileEnd { id, outcome } => self.end(id, outcome)?,
                    Frame::DataEnd => break 'data,
                    other => {
                        return Err(SessionError::Internal(format!(
                            "applier got {}",
                            other.name()
                        )))
                    }
                }
            }
        }
        if self.current.is_some() {
            return Err(violation("data ended in the middle of a file").into());
        }
        let Applier {
            committer,
            mut summary,
            ..
        } = self;
        let tally = committer.finish()?;
        summary.files_transferred += tally.transferred;
        summary.files_failed += tally.failed;
        Ok(summary)
    }

    fn begin(&mut self, id: u64, meta: Meta) -> Result<(), SessionError> {
        // A second FileBegin for the same file restarts it (the source changed while read).
        if self.current.as_ref().is_some_and(|c| c.id != id) {
            return Err(violation("a file began before the previous one ended").into());
        }
        if !meta.mtime.is_valid() {
            return Err(violation(format!("file {id} has an invalid modification time")).into());
        }
        if let Some(old) = self.current.take() {
            self.restart(old);
        }
        if meta.size >= LARGE_FILE {
            // Writing it takes a while: files finished before it go first.
            self.committer.hand_over()?;
        }
        let pending = self
            .inflight
            .get(id)
            .ok_or_else(|| violation(format!("data for file {id}, which was not requested")))?;
        self.counters.set_current(Some(&pending.path));
        let placed = self.placer.place(&pending.path);
        let opened = placed.and_then(|dest| Ok((self.open(id, &pending, &dest, meta)?, dest)));
        let (temp, patcher) = match opened {
            Ok(((temp, patcher), dest)) => (temp, Ok((patcher, dest))),
            Err(e) => {
                if let Some(journal) = &self.journal {
                    // Reserved, maybe, but nothing was written.
                    journal.abandon(id, 0, 0, &self.counters);
                }
                if is_fatal(&e) {
                    return Err(SessionError::local(format!("writing {}", pending.path), e));
                }
                (None, Err(e.to_string()))
            }
        };
        let journaled = self.journal.is_some() && temp.is_some();
        self.current = Some(Current {
            id,
            pending,
            meta,
            temp,
            patcher,
            counted: 0,
            journaled,
        });
        Ok(())
    }

    /// Drops a file's rebuild: its checkpoint entry goes and the bytes it
    /// counted are taken back, with those of the prefix it continued, if
    /// any; then, once no checkpoint counts it, its temporary file.
    fn discard(&mut self, mut cur: Current) {
        let unfound = match (&cur.pending.resume, cur.pending.redo) {
            (Some(r), false) => r.from,
            _ => 0,
        };
        let recorded = match &self.journal {
            Some(j) => j.abandon(cur.id, cur.counted, unfound, &self.counters),
            None => {
                self.counters.settled_bytes(-(cur.counted as i64));
                self.counters.found_bytes(-(unfound as i64));
                false
            }
        };
        cur.counted = 0;
        let kept = match &self.journal {
            Some(j) if cur.journaled => j.forget(recorded, &self.counters).is_err(),
            _ => false,
        };
        // Dropped below: the temporary file goes unless it must stay recorded.
        cur.journaled = kept;
    }

    /// The source changed while read and its data starts again: a file
    /// continued from a verified prefix starts over from that prefix (same
    /// temporary file, reopened by `begin`), any other is dropped.
    fn restart(&mut self, mut cur: Current) {
        match (&cur.pending.resume, cur.pending.redo, &self.journal) {
            (Some(r), false, Some(j)) => {
                j.advance(
                    cur.id,
                    -(cur.counted as i64),
                    r.from,
                    &r.hasher,
                    &self.counters,
                );
                cur.counted = 0;
                // Reopened by `begin`: its verified prefix stays.
                cur.temp = None;
            }
            _ => self.discard(cur),
        }
    }

    /// Records the temporary file `temp` for the checkpoint *before* it is
    /// created, so that `--delete` in its directory (on the generator's
    /// thread) never sees it unaccounted for.
    fn reserve(&self, id: u64, pending: &PendingFile, meta: Meta, temp: &Path, prefix: Prefix) {
        let Some(journal) = &self.journal else { return };
        let name = temp.file_name().map(std::os::unix::ffi::OsStrExt::as_bytes);
        let Some(temp) = name.and_then(|n| pending.path.parent().join(n).ok()) else {
            return;
        };
        let (len, hasher) = prefix;
        let slot = Slot {
            path: pending.path.clone(),
            temp,
            size: meta.size,
            mtime: meta.mtime,
            len,
            hasher,
            ino: 0,
        };
        journal.begin(id, slot);
    }

    /// Writes a checkpoint now, so that the partial file about to be written
    /// again is recorded by this attempt before its first write: the next
    /// attempt then finds it changed within `resume::WRITE_GRACE` of a record
    /// and goes on from the stored hash state, even if this one dies before
    /// its writer's next checkpoint. Otherwise only a full read of the
    /// prefix, so a failure to write it is only warned about.
    fn record_now(&self, temp: &Placed) {
        if let Some(journal) = &self.journal {
            if let Err(e) = journal.save(&self.counters) {
                warn(format_args!("{}: {e}", temp.display()));
            }
        }
    }

    /// Records the inode of the temporary file just opened for `id`.
    fn opened(&self, id: u64, file: &File) {
        if let (Some(journal), Ok(md)) = (&self.journal, file.metadata()) {
            journal.opened(id, md.ino());
        }
    }

    fn open(
        &self,
        id: u64,
        pending: &PendingFile,
        dest: &Placed,
        meta: Meta,
    ) -> io::Result<(Option<Placed>, Patcher)> {
        if let (Some(r), false) = (&pending.resume, pending.redo) {
            // Continue the partial file after its verified prefix; the rest of
            // it, unverified, is the basis.
            self.reserve(id, pending, meta, &r.temp, (r.from, r.hasher.clone()));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&*r.temp)?;
            self.opened(id, &file);
            if r.from >= RECORD_BEFORE_WRITING {
                self.record_now(&r.temp);
            }
            let basis = match pending.basis {
                Some(shape) => Some((file.try_clone()?, shape)),
                None => None,
            };
            let out = OutFile::resume(file, r.from);
            let patcher = Patcher::resume(basis, r.from, out, meta.size, r.hasher.clone());
            return Ok((Some(r.temp.clone()), patcher));
        }
        let basis = match pending.basis {
            Some(shape) if !pending.redo => Some((open_nofollow(dest, false)?, shape)),
            _ => None,
        };
        // In place only into a file with one name: another hard link to it
        // must not change along.
        let single = || fs::symlink_metadata(dest).is_ok_and(|md| md.is_file() && md.nlink() == 1);
        let (temp, file) = if self.inplace && single() {
            (None, open_nofollow(dest, true)?)
        } else {
            let (t, f) = match &self.journal {
                Some(j) => {
                    let t = dest.sibling(&keyed_temp_name(dest, j.operation_id()));
                    self.reserve(id, pending, meta, &t, (0, TreeHasher::new()));
                    let f = create_at(&t)?;
                    self.opened(id, &f);
                    (t, f)
                }
                None => create_temp(dest)?,
            };
            (Some(t), f)
        };
        // Zero runs become holes (rsync -S); OutFile turns that off in place.
        let out = OutFile::new(file, true, temp.is_none());
        Ok((temp, Patcher::new(basis, out, meta.size)))
    }

    fn ops(&mut self, id: u64, ops: Vec<WireOp>) -> Result<(), SessionError> {
        let cur = match &mut self.current {
            Some(c) if c.id == id => c,
            _ => {
                return Err(
                    violation(format!("data for file {id}, which is not the current file")).into(),
                )
            }
        };
        let mut written = 0;
        for op in ops {
            let op = match op {
                WireOp::Plain(op) => op,
                WireOp::Zstd { raw_len, data } => {
                    if raw_len as usize > LITERAL_CHUNK {
                        return Err(
                            violation(format!("compressed literal of {raw_len} bytes")).into()
                        );
                    }
                    let raw = self
                        .zstd
                        .decompress(&data, raw_len as usize)
                        .map_err(|e| violation(format!("bad compressed literal: {e}")))?;
                    if raw.len() != raw_len as usize {
                        return Err(violation("compressed literal has the wrong length").into());
                    }
                    Op::Literal(raw)
                }
            };
            let Ok((patcher, _)) = &mut cur.patcher else {
                continue;
            };
            let before = patcher.written();
            match patcher.apply(&op) {
                Ok(()) => {
                    let n = patcher.written() - before;
                    written += n;
                    match op {
                        Op::Copy { .. } => self.summary.bytes_matched += n,
                        Op::Literal(_) => self.summary.bytes_literal += n,
                        Op::Zeros(_) => {}
                    }
                }
                Err(PatchError::Io(e)) if is_fatal(&e) => {
                    return Err(SessionError::local(
                        format!("writing {}", cur.pending.path),
                        e,
                    ))
                }
                Err(
                    e @ (PatchError::BlockOutOfRange { .. }
                    | PatchError::NoBasis
                    | PatchError::TooLong { .. }),
                ) => return Err(violation(format!("{}: {e}", cur.pending.path)).into()),
                Err(e) => cur.patcher = Err(e.to_string()),
            }
        }
        // What this frame wrote counts once the checkpoint can back it: the
        // slot and the counters move together.
        cur.counted += written;
        let prefix = match (&self.journal, cur.journaled, &mut cur.patcher) {
            (Some(j), true, Ok((p, _))) => p.prefix().ok().map(|(len, h)| (j, len, h)),
            _ => None,
        };
        match prefix {
            Some((j, len, hasher)) => j.advance(id, written as i64, len, hasher, &self.counters),
            // Not journaled (or its prefix cannot be settled): progress only.
            None => self.counters.settled_bytes(written as i64),
        }
        Ok(())
    }

    fn end(&mut self, id: u64, outcome: FileOutcome) -> Result<(), SessionError> {
        let cur = match self.current.take() {
            Some(c) if c.id == id => Some(c),
            None => None,
            Some(_) => return Err(violation("a file ended that was not the current one").into()),
        };
        let pending = match &cur {
            Some(c) => c.pending.clone(),
            None => self
                .inflight
                .get(id)
                .ok_or_else(|| violation(format!("end of file {id}, which was not requested")))?,
        };
        self.counters.set_current(None);
        let in_place = cur.as_ref().is_some_and(|c| c.temp.is_none());
        match (outcome, cur) {
            (FileOutcome::Sent(hash), Some(cur)) => return self.finish(cur, hash),
            (FileOutcome::Sent(_), None) => {
                return Err(violation("a file ended that never began").into())
            }
            (_, Some(cur)) => self.discard(cur),
            (_, None) => {}
        }
        match outcome {
            FileOutcome::Sent(_) => {}
            FileOutcome::Changed => {
                warn(format_args!(
                    "{}: changed while it was read; {}",
                    pending.path,
                    if in_place {
                        "updated in place, so the destination may hold part of the new version"
                    } else {
                        "the destination keeps its previous version"
                    }
                ));
                self.summary.files_changed += 1;
            }
            FileOutcome::Vanished => {
                warn(format_args!("{}: vanished from the source", pending.path));
                self.summary.files_vanished += 1;
                // No longer part of the source: not part of the work either.
                self.counters.file_gone(pending.meta.size);
            }
            FileOutcome::Unreadable => self.summary.files_failed += 1,
        }
        self.release(id);
        Ok(())
    }

    fn finish(&mut self, mut cur: Current, hash: [u8; 32]) -> Result<(), SessionError> {
        let (id, size, path) = (cur.id, cur.meta.size, cur.pending.path.clone());
        let (patcher, dest) = match std::mem::replace(&mut cur.patcher, Err(String::new())) {
            Ok(rebuild) => rebuild,
            Err(msg) => {
                self.discard(cur);
                return self.file_failed(id, &path, io::Error::other(msg));
            }
        };
        let written = patcher.written();
        let file = match patcher.finish() {
            Ok((file, got)) if got == hash && written == size => file,
            Ok(_) => {
                self.discard(cur);
                return self.redo(id);
            }
            Err(e) => {
                self.discard(cur);
                return self.file_failed(id, &path, e);
            }
        };
        if let Err(e) = apply_to_fd(&file, &cur.meta, self.owner) {
            drop(file);
            self.discard(cur);
            return self.file_failed(id, &path, e);
        }
        let finished = Finished {
            id,
            path,
            temp: cur.temp.take(),
            dest,
            file,
            size,
        };
        self.inflight.remove(id);
        self.committer.push(finished)
    }

    /// The rebuilt file did not match: ask once more for the whole file, then give up.
    fn redo(&mut self, id: u64) -> Result<(), SessionError> {
        let pending = self.inflight.get(id).ok_or_else(cancelled)?;
        if pending.redo {
            warn(format_args!(
                "{}: failed verification twice; not updated",
                pending.path
            ));
            self.summary.files_failed += 1;
            self.release(id);
            return Ok(());
        }
        // The generator sends the request: the applier must never wait on the
        // connection, or a full pipe in both directions could deadlock.
        self.inflight.update(id, |p| p.redo = true);
        self.inflight.request_redo(id);
        Ok(())
    }

    /// A file given up on: it leaves the queue, and progress does not count
    /// it as done (the destination does not hold it).
    fn release(&mut self, id: u64) {
        self.inflight.remove(id);
    }

    /// Counts and reports a file that could not be written; fatal errors end the session.
    fn file_failed(
        &mut self,
        id: u64,
        path: &crate::path::RelPath,
        e: io::Error,
    ) -> Result<(), SessionError> {
        if is_fatal(&e) {
            return Err(SessionError::local(format!("writing {path}"), e));
        }
        warn(format_args!("{path}: {e}"));
        self.summary.files_failed += 1;
        self.release(id);
        Ok(())
    }
}
