//! The receiver's applier: rebuilds requested files from the sender's data,
//! verifies each against the sender's BLAKE3, and commits it.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::commit::{create_temp, CommitGroup, Committed, Finished};
use super::flow::Inflight;
use super::generator::PendingFile;
use super::receiver::DataBatch;
use super::{cancelled, is_fatal, warn, SessionError};
use crate::delta::{Op, LITERAL_CHUNK};
use crate::meta::{apply_to_fd, Meta};
use crate::patch::{OutFile, PatchError, Patcher};
use crate::protocol::{violation, FileOutcome, Frame, WireOp};
use crate::stats::{Counters, Summary};

/// The file being rebuilt.
struct Current {
    id: u64,
    pending: PendingFile,
    meta: Meta,
    dest: PathBuf,
    temp: Option<PathBuf>,
    /// The rebuild, or why it failed locally (the rest of the file's data is then skipped).
    patcher: Result<Patcher, String>,
}

impl Drop for Current {
    fn drop(&mut self) {
        if let Some(temp) = self.temp.take() {
            let _ = fs::remove_file(temp);
        }
    }
}

pub struct Applier {
    root: PathBuf,
    inplace: bool,
    owner: bool,
    inflight: Arc<Inflight<PendingFile>>,
    counters: Arc<Counters>,
    current: Option<Current>,
    group: CommitGroup,
    zstd: zstd::bulk::Decompressor<'static>,
    summary: Summary,
}

impl Applier {
    pub fn new(
        root: PathBuf,
        inplace: bool,
        owner: bool,
        inflight: Arc<Inflight<PendingFile>>,
        counters: Arc<Counters>,
    ) -> io::Result<Applier> {
        Ok(Applier {
            root,
            inplace,
            owner,
            inflight,
            counters,
            current: None,
            group: CommitGroup::default(),
            zstd: zstd::bulk::Decompressor::new()?,
            summary: Summary::default(),
        })
    }

    /// Applies data frames until `DataEnd`, then commits what is left.
    pub fn run(mut self, mut rx: mpsc::Receiver<DataBatch>) -> Result<Summary, SessionError> {
        'data: loop {
            // The batch's share of the data budget is returned once it is applied.
            let batch = rx.blocking_recv().ok_or_else(cancelled)?;
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
        let committed = self
            .group
            .commit()
            .map_err(|e| SessionError::local("committing files", e))?;
        self.committed(committed);
        Ok(self.summary)
    }

    fn begin(&mut self, id: u64, meta: Meta) -> Result<(), SessionError> {
        // A second FileBegin for the same file restarts it (the source changed while read).
        if self.current.as_ref().is_some_and(|c| c.id != id) {
            return Err(violation("a file began before the previous one ended").into());
        }
        if !meta.mtime.is_valid() {
            return Err(violation(format!("file {id} has an invalid modification time")).into());
        }
        self.current = None;
        let pending = self
            .inflight
            .get(id)
            .ok_or_else(|| violation(format!("data for file {id}, which was not requested")))?;
        let dest = pending.path.under(&self.root);
        self.counters.set_current(Some(&pending.path));
        let (temp, patcher) = match self.open(&pending, &dest, meta) {
            Ok((temp, patcher)) => (temp, Ok(patcher)),
            Err(e) if is_fatal(&e) => {
                return Err(SessionError::local(format!("writing {}", pending.path), e))
            }
            Err(e) => (None, Err(e.to_string())),
        };
        self.current = Some(Current {
            id,
            pending,
            meta,
            dest,
            temp,
            patcher,
        });
        Ok(())
    }

    fn open(
        &self,
        pending: &PendingFile,
        dest: &std::path::Path,
        meta: Meta,
    ) -> io::Result<(Option<PathBuf>, Patcher)> {
        let basis = match pending.basis {
            Some(shape) if !pending.redo => Some((File::open(dest)?, shape)),
            _ => None,
        };
        // In place only into a file with one name: another hard link to it
        // must not change along.
        let single = || fs::symlink_metadata(dest).is_ok_and(|md| md.is_file() && md.nlink() == 1);
        let (temp, file) = if self.inplace && single() {
            (None, OpenOptions::new().write(true).open(dest)?)
        } else {
            let (t, f) = create_temp(dest)?;
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
            let Ok(patcher) = &mut cur.patcher else {
                continue;
            };
            let before = patcher.written();
            match patcher.apply(&op) {
                Ok(()) => {
                    let n = patcher.written() - before;
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
        match outcome {
            FileOutcome::Sent(hash) => {
                let cur = cur.ok_or_else(|| violation("a file ended that never began"))?;
                return self.finish(cur, hash);
            }
            FileOutcome::Changed => {
                warn(format_args!(
                    "{}: changed while it was read; {}",
                    pending.path,
                    if cur.as_ref().is_some_and(|c| c.temp.is_none()) {
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
            }
            FileOutcome::Unreadable => self.summary.files_failed += 1,
        }
        self.release(id, pending.meta.size);
        Ok(())
    }

    fn finish(&mut self, mut cur: Current, hash: [u8; 32]) -> Result<(), SessionError> {
        let (id, size, path) = (cur.id, cur.meta.size, cur.pending.path.clone());
        let patcher = match std::mem::replace(&mut cur.patcher, Err(String::new())) {
            Ok(p) => p,
            Err(msg) => return self.file_failed(id, &path, io::Error::other(msg)),
        };
        let written = patcher.written();
        let file = match patcher.finish() {
            Ok((file, got)) if got == hash && written == size => file,
            Ok(_) => {
                drop(cur);
                return self.redo(id);
            }
            Err(e) => return self.file_failed(id, &path, e),
        };
        if let Err(e) = apply_to_fd(&file, &cur.meta, self.owner) {
            return self.file_failed(id, &path, e);
        }
        let finished = Finished {
            path,
            temp: cur.temp.take(),
            dest: cur.dest.clone(),
            file,
            size,
        };
        self.inflight.remove(id);
        let committed = self
            .group
            .push(finished)
            .map_err(|e| SessionError::local("committing files", e))?;
        self.committed(committed);
        Ok(())
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
            self.release(id, pending.meta.size);
            return Ok(());
        }
        // The generator sends the request: the applier must never wait on the
        // connection, or a full pipe in both directions could deadlock.
        self.inflight.update(id, |p| p.redo = true);
        self.inflight.request_redo(id);
        Ok(())
    }

    fn committed(&mut self, c: Committed) {
        for (_, size) in c.done {
            self.summary.files_transferred += 1;
            self.counters.file_done(size);
        }
        for (path, err) in c.failed {
            warn(format_args!("{path}: {err}"));
            self.summary.files_failed += 1;
            self.counters.file_done(0);
        }
    }

    fn release(&mut self, id: u64, size: u64) {
        self.inflight.remove(id);
        self.counters.file_done(size);
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
        let size = self.inflight.remove(id).map_or(0, |p| p.meta.size);
        self.counters.file_done(size);
        Ok(())
    }
}
