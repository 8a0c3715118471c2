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

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::commit::{remove_temps, CommitGroup, Committed, Finished};
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
/// group still waiting is dropped as `CommitGroup` drops it, the batches
/// not committed as [`Batch`] drops them.
pub struct Committer {
    tx: Option<SyncSender<Batch>>,
    /// Finished files not yet handed over.
    batch: Batch,
    abandon: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Tally, SessionError>>>,
}

/// Finished files handed over at once.
const BATCH_FILES: usize = 32;

/// Finished files on their way to a commit group. Dropped with files in it
/// (the session ended with the batch still at the applier or queued for the
/// committer, or the committer stopped on an error in the middle of it), it
/// leaves no temporary files behind, but those a checkpoint names (as
/// [`CommitGroup`] does): the next attempt goes on from them.
struct Batch {
    files: VecDeque<Finished>,
    /// A checkpoint journal names the files until they are committed.
    keep: bool,
}

impl Batch {
    fn new(keep: bool) -> Batch {
        Batch {
            files: VecDeque::with_capacity(BATCH_FILES),
            keep,
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        remove_temps(self.keep, self.files.iter().map(|f| f.temp.as_ref()));
    }
}

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
            batch: Batch::new(keep),
            abandon,
            thread: Some(thread),
        })
    }

    /// Adds a finished file to the batch, handed over once full; an error
    /// is why the committer stopped.
    pub fn push(&mut self, file: Finished) -> Result<(), SessionError> {
        self.batch.files.push_back(file);
        if self.batch.files.len() >= BATCH_FILES {
            self.hand_over()?;
        }
        Ok(())
    }

    /// Hands the batch to the committer thread. The applier calls it before
    /// anything that takes a while (waiting for data, writing a large file),
    /// so that files it has finished are committed meanwhile.
    pub fn hand_over(&mut self) -> Result<(), SessionError> {
        if self.batch.files.is_empty() {
            return Ok(());
        }
        let next = Batch::new(self.batch.keep);
        let batch = std::mem::replace(&mut self.batch, next);
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
    /// Waits for the committer thread to end before the batch goes (with
    /// the temporary files no checkpoint names).
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.abandon.store(true, Ordering::SeqCst);
            let _ = self.end();
        }
    }
}

/// The committer thread: groups files as they come, commits a group when it
/// is full or due, and the rest when the applier is done. When it stops (on
/// an error, or abandoned), the files of the batch in hand not yet grouped
/// and the batches queued go as [`Batch`] drops them.
fn run(
    rx: mpsc::Receiver<Batch>,
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
        if abandon.load(Ordering::SeqCst) {
            // Nothing more is committed: the group and the batches still
            // queued go as they drop.
            return Err(cancelled());
        }
        let committed = match next {
            Ok(mut batch) => {
                while let Some(file) = batch.files.pop_front() {
                    let committed = group.push(file).map_err(fail)?;
                    settle(committed, journal.as_deref(), &counters, &mut tally);
                }
                continue;
            }
            Err(RecvTimeoutError::Timeout) => group.commit().map_err(fail)?,
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

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::os::unix::ffi::OsStrExt;

    use super::super::commit::{create_temp, GROUP_BYTES};
    use super::*;
    use crate::beneath::Placer;
    use crate::path::RelPath;

    /// File `name` in the directory of `placer`, finished under a temporary name.
    fn finished(placer: &Placer, id: u64, name: &str) -> Finished {
        let path = RelPath::new(name.as_bytes().to_vec()).unwrap();
        let dest = placer.place(&path).unwrap();
        let (temp, file) = create_temp(&dest).unwrap();
        Finished {
            id,
            path,
            temp: Some(temp),
            dest,
            file,
            size: 1,
        }
    }

    fn temp_files(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| crate::walk::is_temp_name(n.as_bytes()))
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A finished file whose commit fails: a group's worth of bytes in one
    /// file is committed as soon as it arrives, alone, with `fdatasync`,
    /// which fails on /dev/null (EINVAL).
    fn unsyncable(placer: &Placer) -> Finished {
        let mut file = finished(placer, 0, "f0");
        file.file = File::open("/dev/null").unwrap();
        file.size = GROUP_BYTES;
        file
    }

    #[test]
    fn files_still_queued_when_a_commit_fails_leave_only_journaled_temporary_files() {
        for journaled in [false, true] {
            let d = tempfile::tempdir().unwrap();
            let placer = Placer::open(d.path()).unwrap();
            let (tx, rx) = mpsc::sync_channel(4);
            let batch = |ids: std::ops::Range<u64>| {
                let mut batch = Batch::new(journaled);
                let files = ids.map(|id| finished(&placer, id, &format!("f{id}")));
                batch.files.extend(files);
                batch
            };
            // The failing file first, then the rest of its batch; then a
            // batch still queued.
            let mut first = batch(1..4);
            first.files.push_front(unsyncable(&placer));
            tx.send(first).unwrap();
            tx.send(batch(4..8)).unwrap();
            drop(tx);
            let group = CommitGroup::new(journaled);
            let counters = Arc::new(Counters::default());
            let stop = Arc::new(AtomicBool::new(false));
            let e = run(rx, group, None, counters, stop).unwrap_err();
            assert!(e.to_string().contains("committing files"), "{e}");
            // A checkpoint names them all: the next attempt goes on from them.
            let left = if journaled { 8 } else { 0 };
            let temps = temp_files(d.path());
            assert_eq!(temps.len(), left, "journaled: {journaled}: {temps:?}");
        }
    }

    #[test]
    fn files_handed_over_after_a_failed_commit_leave_no_temporary_files() {
        let d = tempfile::tempdir().unwrap();
        let placer = Placer::open(d.path()).unwrap();
        let mut committer = Committer::start(None, Arc::new(Counters::default())).unwrap();
        let mut pushed = committer.push(unsyncable(&placer));
        // The rest of its batch, and batches queued or on their way.
        for id in 1..4 * BATCH_FILES as u64 {
            if pushed.is_err() {
                break;
            }
            pushed = committer.push(finished(&placer, id, &format!("f{id}")));
        }
        let e = pushed.and_then(|()| committer.finish()).unwrap_err();
        assert!(e.to_string().contains("committing files"), "{e}");
        assert_eq!(temp_files(d.path()), Vec::<String>::new());
    }
}
