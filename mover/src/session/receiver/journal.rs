//! The receiver's live record of an operation: which files are being written
//! under temporary names and how far, kept in memory by the appliers and
//! written to the checkpoint by a thread of its own, so the transfer never
//! waits for it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::beneath::Placer;
use crate::checkpoint::{Checkpoint, CheckpointError, Fingerprint, Partial, Store};
use crate::meta::Mtime;
use crate::path::RelPath;
use crate::session::{warn, SessionError};
use crate::stats::{Counters, Prior};
use crate::treehash::TreeHasher;

/// Progress (bytes written or found) after which the checkpoint is rewritten.
const WRITE_EVERY_BYTES: u64 = 1 << 20;
/// The checkpoint is rewritten at least this often while anything changes.
const WRITE_EVERY: Duration = Duration::from_secs(1);
/// ...and at most this often: a checkpoint full of small files in commit
/// groups can reach a few hundred KiB, which must not add up to a second
/// stream of writes.
const MIN_GAP: Duration = Duration::from_millis(50);
/// How often the writer looks at the counters.
const POLL: Duration = Duration::from_millis(5);

/// A file being rebuilt under a temporary name.
#[derive(Debug, Clone)]
pub struct Slot {
    pub path: RelPath,
    pub temp: RelPath,
    /// Size and modification time of the source the data comes from.
    pub size: u64,
    pub mtime: Mtime,
    /// Bytes written, and the hash of them.
    pub len: u64,
    pub hasher: TreeHasher,
    /// The temporary file's inode, once it is open (0 before).
    pub ino: u64,
}

/// The partial files, under one lock with the byte counters they back.
///
/// Every change that adds or removes backing for progress happens under this
/// lock together with the counter change it explains, and a checkpoint is
/// taken under it too: a checkpoint's `bytes_done` is backed by what that
/// checkpoint names, never by what a worker was about to record.
#[derive(Debug, Default)]
struct Ledger {
    slots: HashMap<u64, Slot>,
    /// Partial files the last checkpoint named, by path: not yet claimed by a
    /// listed file (`false`), or claimed and not yet begun again (`true`).
    /// Both stay in every checkpoint until their file's data begins, so a
    /// kill in between loses nothing.
    loaded: HashMap<RelPath, (Partial, bool)>,
}

/// What the receiver knows about the operation it serves.
#[derive(Debug)]
pub struct Journal {
    store: Store,
    operation_id: String,
    attempt: u32,
    keep: bool,
    /// Elapsed time of earlier attempts.
    elapsed_before: u64,
    start: Instant,
    /// Totals of the last complete listing, earlier or now.
    totals: Mutex<(Option<u64>, Option<u64>, Option<Fingerprint>)>,
    ledger: Mutex<Ledger>,
    stopped: AtomicBool,
    /// One write at a time (the writer thread and the final write share a temporary name).
    saving: Mutex<()>,
}

/// What opening the journal found.
pub struct Opened {
    pub journal: Arc<Journal>,
    pub prior: Prior,
    /// Why an existing checkpoint was discarded.
    pub problem: Option<String>,
}

impl Journal {
    /// Locks the destination's state and reads the checkpoint an earlier attempt left.
    pub fn open(
        root: &Path,
        operation_id: &str,
        attempt: u32,
        keep: bool,
    ) -> Result<Opened, SessionError> {
        let store =
            Store::open(root).map_err(|e| SessionError::local("opening the checkpoint", e))?;
        let mut problem = None;
        let found = match store.load() {
            Ok(Some(cp)) if cp.operation_id != operation_id => {
                // Another operation's partial files are of no use to this
                // one: they go with its checkpoint.
                if let Ok(placer) = Placer::open(root) {
                    remove_partials(&placer, &cp.partials);
                }
                Err(CheckpointError::Foreign {
                    found: cp.operation_id,
                    want: operation_id.to_string(),
                })
            }
            Ok(found) => Ok(found),
            Err(e) => Err(e),
        };
        let cp = match found {
            Ok(cp) => cp,
            Err(CheckpointError::Io(e)) => {
                return Err(SessionError::local("reading the checkpoint", e));
            }
            Err(e) => {
                warn(format_args!(
                    "discarding the checkpoint at the destination: {e}"
                ));
                problem = Some(e.to_string());
                store
                    .remove()
                    .map_err(|e| SessionError::local("removing a bad checkpoint", e))?;
                None
            }
        };
        if let Some(cp) = &cp {
            if cp.attempt > attempt {
                return Err(SessionError::Usage(format!(
                    "attempt {attempt} of operation {operation_id} is stale: attempt {} already wrote to this destination",
                    cp.attempt
                )));
            }
        }
        // A completed operation run again starts a fresh round.
        let cp = cp.filter(|cp| !cp.complete);
        let prior = cp.as_ref().map_or(Prior::default(), |cp| Prior {
            files_done: cp.files_done,
            bytes_done: cp.bytes_done,
            files_total: cp.files_total,
            bytes_total: cp.bytes_total,
        });
        let (elapsed_before, totals, loaded) = match cp {
            Some(cp) => (
                cp.elapsed_ms_total,
                (cp.files_total, cp.bytes_total, cp.source),
                cp.partials
                    .into_iter()
                    .map(|p| (p.path.clone(), (p, false)))
                    .collect(),
            ),
            None => (0, (None, None, None), HashMap::new()),
        };
        let journal = Journal {
            store,
            operation_id: operation_id.to_string(),
            attempt,
            keep,
            elapsed_before,
            start: Instant::now(),
            totals: Mutex::new(totals),
            ledger: Mutex::new(Ledger {
                slots: HashMap::new(),
                loaded,
            }),
            stopped: AtomicBool::new(false),
            saving: Mutex::new(()),
        };
        Ok(Opened {
            journal: Arc::new(journal),
            prior,
            problem,
        })
    }

    pub fn operation_id(&self) -> &str {
        &self.operation_id
    }

    /// The partial file the checkpoint names for `path`, if any, for a listed
    /// file to continue. It stays recorded until [`Journal::begin`] or [`Journal::drop_claim`].
    pub fn claim(&self, path: &RelPath) -> Option<Partial> {
        let mut ledger = lock(&self.ledger);
        let (partial, claimed) = ledger.loaded.get_mut(path).filter(|(_, c)| !*c)?;
        *claimed = true;
        Some(partial.clone())
    }

    /// A claimed partial file turned out unusable: it leaves the record, and
    /// the progress an earlier attempt counted for it goes with it, before
    /// the caller removes the file (see [`Journal::forget`]).
    pub fn drop_claim(&self, path: &RelPath, counters: &Counters) -> Result<(), SessionError> {
        let recorded = {
            let mut ledger = lock(&self.ledger);
            let gone = ledger.loaded.remove(path);
            if let Some((p, _)) = &gone {
                counters.lost_prior(p.verified_len);
            }
            gone.is_some_and(|(p, _)| p.verified_len > 0)
        };
        self.forget(recorded, counters)
    }

    /// Removes the partial files no listed file claimed (their source is gone
    /// or excluded), after a checkpoint that no longer counts them.
    pub fn discard_unclaimed(&self, placer: &Placer, counters: &Counters) {
        let unclaimed: Vec<Partial> = {
            let mut ledger = lock(&self.ledger);
            let mut unclaimed = Vec::new();
            ledger.loaded.retain(|_, (p, claimed)| {
                if !*claimed {
                    unclaimed.push(p.clone());
                }
                *claimed
            });
            counters.lost_prior(unclaimed.iter().map(|p| p.verified_len).sum());
            unclaimed
        };
        if !unclaimed.is_empty() && self.forget(true, counters).is_ok() {
            remove_partials(placer, &unclaimed);
        }
    }

    /// Write-ahead for removing data the last checkpoint may count: when
    /// `recorded`, a checkpoint without it is written first. On `Err` the
    /// caller keeps the file (a later attempt finds and checks it again).
    pub fn forget(&self, recorded: bool, counters: &Counters) -> Result<(), SessionError> {
        if !recorded {
            return Ok(());
        }
        self.save(counters).inspect_err(|e| {
            warn(format_args!(
                "cannot record progress before removing a partial file, so it stays: {e}"
            ))
        })
    }

    /// Whether the temporary file `name` in `dir` holds data this operation may still use.
    pub fn holds(&self, dir: &RelPath, name: &[u8]) -> bool {
        let is = |temp: &RelPath| temp.parent() == *dir && temp.file_name() == name;
        // Both at once: a partial moving from one to the other is never missed.
        let ledger = lock(&self.ledger);
        ledger.slots.values().any(|s| is(&s.temp))
            || ledger.loaded.values().any(|(p, _)| is(&p.temp))
    }

    /// A file's data begins: from now on its slot describes it.
    pub fn begin(&self, id: u64, slot: Slot) {
        let mut ledger = lock(&self.ledger);
        ledger.loaded.remove(&slot.path);
        ledger.slots.insert(id, slot);
    }

    /// File `id`'s temporary file is open: its inode goes into the record.
    pub fn opened(&self, id: u64, ino: u64) {
        if let Some(s) = lock(&self.ledger).slots.get_mut(&id) {
            s.ino = ino;
        }
    }

    /// File `id` now holds `len` bytes, hashed by `hasher`, and `settled`
    /// more (or, negative, fewer) bytes count as done: slot and counters
    /// move together. A file that starts over from its verified prefix
    /// passes that prefix and takes back what was written after it.
    pub fn advance(
        &self,
        id: u64,
        settled: i64,
        len: u64,
        hasher: &TreeHasher,
        counters: &Counters,
    ) {
        let mut ledger = lock(&self.ledger);
        if let Some(s) = ledger.slots.get_mut(&id) {
            s.len = len;
            s.hasher = hasher.clone();
        }
        counters.settled_bytes(settled);
    }

    /// The file is in place (committed): its slot goes.
    pub fn end(&self, id: u64) {
        lock(&self.ledger).slots.remove(&id);
    }

    /// The file's rebuild is dropped: its slot goes with the `unsettled`
    /// bytes written and the `unfound` bytes of a reused prefix. Returns
    /// whether a checkpoint may have counted it (see [`Journal::forget`]).
    pub fn abandon(&self, id: u64, unsettled: u64, unfound: u64, counters: &Counters) -> bool {
        let mut ledger = lock(&self.ledger);
        let slot = ledger.slots.remove(&id);
        counters.settled_bytes(-(unsettled as i64));
        counters.found_bytes(-(unfound as i64));
        slot.is_some_and(|s| s.len > 0)
    }

    /// Live progress, consistent with the partial files as recorded.
    pub fn progress(&self, counters: &Counters, elapsed_ms: u64) -> crate::stats::Progress {
        let _ledger = lock(&self.ledger);
        counters.snapshot(elapsed_ms)
    }

    /// The source as listed completely by this attempt.
    pub fn listed(&self, files: u64, bytes: u64, source: Fingerprint) {
        *lock(&self.totals) = (Some(files), Some(bytes), Some(source));
    }

    fn snapshot(&self, counters: &Counters, complete: bool) -> Checkpoint {
        let elapsed = self.start.elapsed().as_millis() as u64;
        let (files_total, bytes_total, source) = *lock(&self.totals);
        // Progress and the partials that back it, from one moment.
        let ledger = lock(&self.ledger);
        let p = counters.snapshot(elapsed);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let recorded_at = Mtime {
            sec: now.as_secs() as i64,
            nsec: now.subsec_nanos(),
        };
        let mut partials: Vec<Partial> = ledger
            .slots
            .values()
            .map(|s| Partial {
                path: s.path.clone(),
                temp: s.temp.clone(),
                size: s.size,
                mtime: s.mtime,
                verified_len: s.len,
                prefix_hash: *s.hasher.finalize().as_bytes(),
                head: s.hasher.head().pieces(),
                temp_ino: s.ino,
                recorded_at,
            })
            .collect();
        partials.extend(ledger.loaded.values().map(|(p, _)| p.clone()));
        drop(ledger);
        partials.sort_by(|a, b| a.path.cmp(&b.path));
        Checkpoint {
            operation_id: self.operation_id.clone(),
            attempt: self.attempt,
            complete,
            files_done: p.files_done,
            bytes_done: p.bytes_done,
            files_total,
            bytes_total,
            source,
            partials,
            elapsed_ms_total: self.elapsed_before + elapsed,
            updated_unix_ms: now.as_millis() as u64,
        }
    }

    /// Writes the checkpoint now.
    pub fn save(&self, counters: &Counters) -> Result<(), SessionError> {
        let _one = lock(&self.saving);
        self.store
            .save(&self.snapshot(counters, false))
            .map_err(|e| SessionError::local("writing the checkpoint", e))
    }

    /// The writer thread: rewrites the checkpoint as work gets done, until [`Journal::stop`].
    pub fn run_writer(self: Arc<Self>, counters: Arc<Counters>) -> Result<(), SessionError> {
        let mut written = counters.activity();
        let mut at = Instant::now();
        while !self.stopped.load(Ordering::Relaxed) {
            std::thread::sleep(POLL);
            let now = counters.activity();
            let since = at.elapsed();
            let due = (now.abs_diff(written) >= WRITE_EVERY_BYTES && since >= MIN_GAP)
                || (now != written && since >= WRITE_EVERY);
            if due {
                self.save(&counters)?;
                written = now;
                at = Instant::now();
            }
        }
        Ok(())
    }

    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// The operation is complete: the state directory goes, or the checkpoint
    /// stays marked complete with `--keep-checkpoint`.
    pub fn complete(&self, counters: &Counters) -> Result<(), SessionError> {
        self.stop();
        let _one = lock(&self.saving);
        let r = if self.keep {
            self.store.save(&self.snapshot(counters, true))
        } else {
            self.store.remove_all()
        };
        r.map_err(|e| SessionError::local("removing the checkpoint", e))
    }
}

/// Removes partial files a checkpoint names (beneath the root, temporary names
/// only: decoding checked both).
fn remove_partials(placer: &Placer, partials: &[Partial]) {
    for p in partials {
        if let Ok(temp) = placer.place(&p.temp) {
            let _ = std::fs::remove_file(&*temp);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A worker that panicked holding the lock cannot leave it inconsistent:
    // every critical section is a single insert, remove or copy.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(s: &str) -> RelPath {
        RelPath::new(s.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn a_partial_is_recorded_exactly_once_from_checkpoint_to_slot() {
        let d = tempfile::tempdir().unwrap();
        let mut cp = Checkpoint::new("op".into(), 1);
        cp.partials.push(Partial {
            path: rel("a/f"),
            temp: rel("a/.volmig-f.x.tmp"),
            size: 10,
            mtime: Mtime::default(),
            verified_len: 4,
            prefix_hash: [0; 32],
            head: Vec::new(),
            temp_ino: 0,
            recorded_at: Mtime::default(),
        });
        Store::open(d.path()).unwrap().save(&cp).unwrap();
        let opened = Journal::open(d.path(), "op", 2, false).unwrap();
        let (j, counters) = (opened.journal, Counters::default());
        assert_eq!(opened.prior.bytes_done, 0);
        let recorded = |j: &Journal| j.snapshot(&counters, false).partials.len();
        let held = |j: &Journal| j.holds(&rel("a"), b".volmig-f.x.tmp");

        // Claimed: still recorded and held until its data begins.
        let p = j.claim(&rel("a/f")).unwrap();
        assert!(j.claim(&rel("a/f")).is_none(), "claimed once");
        assert_eq!((recorded(&j), held(&j)), (1, true));
        let placer = Placer::open(d.path()).unwrap();
        j.discard_unclaimed(&placer, &counters);
        assert_eq!(
            (recorded(&j), held(&j)),
            (1, true),
            "a claimed partial stays"
        );
        j.begin(
            7,
            Slot {
                path: p.path,
                temp: p.temp,
                size: p.size,
                mtime: p.mtime,
                len: 6,
                hasher: TreeHasher::new(),
                ino: 0,
            },
        );
        let snap = j.snapshot(&counters, false);
        assert_eq!(snap.partials.len(), 1, "from the slot only: {snap:?}");
        assert_eq!(snap.partials[0].verified_len, 6);
        assert!(held(&j));
        j.end(7);
        assert_eq!((recorded(&j), held(&j)), (0, false));
    }
}
