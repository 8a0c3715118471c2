//! The commit of finished files on a thread of its own.
//!
//! Making a group durable waits on the disk (one `syncfs`, tens of
//! milliseconds), and renaming it into place costs a system call per file.
//! The applier used to do both itself, between two files; now it hands each
//! finished file to the committer and goes on writing the next ones while a
//! group is flushed. The committer settles what it commits (the journal's
//! slot, the progress counters) and tallies it for the summary.
//!
//! Finished files go over in batches: waking the committer thread for each
//! of 20,000 small files, only for it to add the file to its group and sleep
//! again, cost two context switches per file. The applier hands a batch over
//! when it is full, before it begins a large file and before it waits for
//! data, so no finished file waits on the applier for long.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::commit::{CommitGroup, Committed, Finished};
use super::journal::Journal;
use crate::session::{cancelled, warn, SessionError};
use crate::stats::Counters;

/// What the committer settled.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub transferred: u64,
    pub failed: u64,
}

/// The applier's handle on the committer thread. Dropped without
/// [`Committer::finish`] (the session failed), it commits nothing more: the
/// group still waiting is dropped as `CommitGroup` drops it.
pub struct Committer {
    tx: Option<SyncSender<Vec<Finished>>>,
    /// Finished files not yet handed over.
    batch: Vec<Finished>,
    /// Temporary files stay when the session ends early (a checkpoint names them).
    keep: bool,
    abandon: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Tally, SessionError>>>,
}

/// Finished files handed over at once.
const BATCH_FILES: usize = 32;

impl Committer {
    pub fn start(journal: Option<Arc<Journal>>, counters: Arc<Counters>) -> io::Result<Committer> {
        let keep = journal.is_some();
        let group = CommitGroup::new(keep);
        // Finished files queued before the applier waits: about one group's
        // worth, written while the group before it is flushed.
        let (tx, rx) = mpsc::sync_channel(group.limit().div_ceil(BATCH_FILES));
        let abandon = Arc::new(AtomicBool::new(false));
        let stop = abandon.clone();
        let thread = std::thread::Builder::new()
            .name("committer".into())
            .spawn(move || run(rx, group, journal, counters, stop))?;
        Ok(Committer {
            tx: Some(tx),
            batch: Vec::with_capacity(BATCH_FILES),
            keep,
            abandon,
            thread: Some(thread),
        })
    }

    /// Adds a finished file to the batch, handed over once full; an error
    /// is why the committer stopped.
    pub fn push(&mut self, file: Finished) -> Result<(), SessionError> {
        self.batch.push(file);
        if self.batch.len() >= BATCH_FILES {
            self.hand_over()?;
        }
        Ok(())
    }

    /// Hands the batch to the committer thread. The applier calls it before
    /// anything that takes a while (waiting for data, writing a large file),
    /// so that files it has finished are committed meanwhile.
    pub fn hand_over(&mut self) -> Result<(), SessionError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH_FILES));
        let tx = self.tx.as_ref().ok_or_else(cancelled)?;
        if let Err(mpsc::SendError(batch)) = tx.send(batch) {
            self.batch = batch;
            return Err(self.end().err().unwrap_or_else(cancelled));
        }
        Ok(())
    }

    /// Commits what is waiting and returns what was settled in all.
    pub fn finish(mut self) -> Result<Tally, SessionError> {
        self.hand_over()?;
        self.end()
    }

    /// Closes the queue and waits for the thread (once; later calls find
    /// no thread and are cancelled).
    fn end(&mut self) -> Result<Tally, SessionError> {
        self.tx = None;
        let thread = self.thread.take().ok_or_else(cancelled)?;
        thread
            .join()
            .map_err(|_| SessionError::Internal("committer panicked".into()))?
    }
}

impl Drop for Committer {
    /// A session that ends early leaves no temporary files of its batch
    /// behind, but those a checkpoint names (as [`CommitGroup`] does).
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.abandon.store(true, Ordering::SeqCst);
            let _ = self.end();
        }
        if !self.keep {
            for file in self.batch.drain(..) {
                if let Some(temp) = &file.temp {
                    let _ = std::fs::remove_file(&**temp);
                }
            }
        }
    }
}

/// The committer thread: groups files as they come, commits a group when it
/// is full or due, and the rest when the applier is done.
fn run(
    rx: mpsc::Receiver<Vec<Finished>>,
    mut group: CommitGroup,
    journal: Option<Arc<Journal>>,
    counters: Arc<Counters>,
    abandon: Arc<AtomicBool>,
) -> Result<Tally, SessionError> {
    let mut tally = Tally::default();
    let fail = |e| SessionError::local("committing files", e);
    loop {
        let next = match group.due_in() {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(wait) => rx.recv_timeout(wait),
        };
        let committed = match next {
            Ok(files) => {
                for file in files {
                    let committed = group.push(file).map_err(fail)?;
                    settle(committed, journal.as_deref(), &counters, &mut tally);
                }
                continue;
            }
            Err(RecvTimeoutError::Timeout) => group.commit().map_err(fail)?,
            Err(RecvTimeoutError::Disconnected) if abandon.load(Ordering::SeqCst) => {
                return Err(cancelled());
            }
            Err(RecvTimeoutError::Disconnected) => {
                let last = group.commit().map_err(fail)?;
                settle(last, journal.as_deref(), &counters, &mut tally);
                return Ok(tally);
            }
        };
        settle(committed, journal.as_deref(), &counters, &mut tally);
    }
}

fn settle(c: Committed, journal: Option<&Journal>, counters: &Counters, tally: &mut Tally) {
    let ended = c.done.iter().map(|(id, _)| *id);
    for id in ended.chain(c.failed.iter().map(|(id, ..)| *id)) {
        if let Some(journal) = journal {
            journal.end(id);
        }
        counters.file_settled();
    }
    tally.transferred += c.done.len() as u64;
    for (_, path, err) in c.failed {
        warn(format_args!("{path}: {err}"));
        tally.failed += 1;
    }
}
