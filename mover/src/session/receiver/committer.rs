//! The commit of finished files on a thread of its own.
//!
//! Making a group durable waits on the disk (one `syncfs`, tens of
//! milliseconds), and renaming it into place costs a system call per file.
//! The applier used to do both itself, between two files; now it hands each
//! finished file to the committer and goes on writing the next ones while a
//! group is flushed. The committer settles what it commits (the journal's
//! slot, the progress counters) and tallies it for the summary.

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
    tx: Option<SyncSender<Finished>>,
    abandon: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Tally, SessionError>>>,
}

impl Committer {
    pub fn start(journal: Option<Arc<Journal>>, counters: Arc<Counters>) -> io::Result<Committer> {
        let group = CommitGroup::new(journal.is_some());
        // Finished files queued before the applier waits: one group's worth,
        // written while the group before it is flushed.
        let (tx, rx) = mpsc::sync_channel(group.limit());
        let abandon = Arc::new(AtomicBool::new(false));
        let stop = abandon.clone();
        let thread = std::thread::Builder::new()
            .name("committer".into())
            .spawn(move || run(rx, group, journal, counters, stop))?;
        Ok(Committer {
            tx: Some(tx),
            abandon,
            thread: Some(thread),
        })
    }

    /// Hands a finished file over; an error is why the committer stopped.
    pub fn push(&mut self, file: Finished) -> Result<(), SessionError> {
        let tx = self.tx.as_ref().ok_or_else(cancelled)?;
        if tx.send(file).is_err() {
            return Err(self.end().err().unwrap_or_else(cancelled));
        }
        Ok(())
    }

    /// Commits what is waiting and returns what was settled in all.
    pub fn finish(mut self) -> Result<Tally, SessionError> {
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
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.abandon.store(true, Ordering::SeqCst);
            let _ = self.end();
        }
    }
}

/// The committer thread: groups files as they come, commits a group when it
/// is full or due, and the rest when the applier is done.
fn run(
    rx: mpsc::Receiver<Finished>,
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
            Ok(file) => group.push(file).map_err(fail)?,
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
