//! Blocking flow-control primitives shared by the worker threads, and the
//! plumbing both sides run on: the outbox, the connection's writer, reading
//! the peer, liveness and the supervisor of worker threads.
//!
//! Everything here serves both sides and imports nothing from
//! [`super::sender`] or [`super::receiver`].

pub mod liveness;
pub mod outbox;
pub mod peer;
pub mod supervise;
pub mod writer;

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::SessionError;
use crate::protocol::{violation, Frame};
use outbox::weight;

/// Credit granted by the receiver for list frames.
#[derive(Debug, Default)]
pub struct Credits {
    state: Mutex<(u64, bool)>,
    cv: Condvar,
}

impl Credits {
    pub fn new(initial: u64) -> Credits {
        Credits {
            state: Mutex::new((initial, false)),
            cv: Condvar::new(),
        }
    }

    /// Takes one credit if one is available without waiting.
    pub fn try_take(&self) -> bool {
        let mut s = lock(&self.state);
        if s.0 > 0 && !s.1 {
            s.0 -= 1;
            return true;
        }
        false
    }

    /// Waits for one credit; false once the session is over.
    pub fn take(&self) -> bool {
        let mut s = lock(&self.state);
        while s.0 == 0 && !s.1 {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if s.1 {
            return false;
        }
        s.0 -= 1;
        true
    }

    pub fn add(&self, n: u64) {
        lock(&self.state).0 += n;
        self.cv.notify_all();
    }

    pub fn close(&self) {
        lock(&self.state).1 = true;
        self.cv.notify_all();
    }
}

/// List frames consumed before credit is returned to the sender.
const CREDIT_BATCH: u32 = 1024;

/// List frames received but not yet consumed (by the generator, or the
/// verifier): the receiver's check that the sender keeps within its credit,
/// and the consumer's count of credit not yet returned.
#[derive(Debug, Default)]
pub struct ListWindow {
    inflight: std::sync::atomic::AtomicU64,
    unreturned: std::sync::atomic::AtomicU32,
}

impl ListWindow {
    /// Counts `n` frames in; false if that exceeds what was credited.
    pub fn admit(&self, n: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        // ListEnd is sent without credit.
        self.inflight.fetch_add(n, Relaxed) + n <= crate::protocol::INITIAL_CREDIT as u64 + 1
    }

    /// Admits a batch of list frames and hands it to the consumer. The sender
    /// may not exceed its credit, so the consumer's queue never blocks.
    pub fn hand_on(
        &self,
        batch: Vec<Frame>,
        tx: &mpsc::Sender<Vec<Frame>>,
    ) -> Result<(), SessionError> {
        let exceeded = || violation("sender exceeded its list credit").into();
        if !self.admit(batch.len() as u64) {
            return Err(exceeded());
        }
        tx.try_send(batch).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => exceeded(),
            mpsc::error::TrySendError::Closed(_) => SessionError::Cancelled,
        })
    }

    /// One frame consumed; returns the credit to grant the sender, once a
    /// batch's worth has been consumed.
    pub fn consumed(&self) -> Option<u32> {
        use std::sync::atomic::Ordering::Relaxed;
        self.inflight.fetch_sub(1, Relaxed);
        let n = self.unreturned.fetch_add(1, Relaxed) + 1;
        (n >= CREDIT_BATCH).then(|| {
            self.unreturned.store(0, Relaxed);
            n
        })
    }
}

/// Files requested but not yet finished, bounded in number, plus the files
/// that must be requested again (their rebuild failed verification).
#[derive(Debug)]
pub struct Inflight<T> {
    state: Mutex<InflightState<T>>,
    cv: Condvar,
    limit: usize,
}

#[derive(Debug)]
struct InflightState<T> {
    items: HashMap<u64, T>,
    redo: Vec<u64>,
    /// No request will follow (RequestsEnd is on its way).
    requests_ended: bool,
    closed: bool,
    /// Threads waiting for the set to drain, and the largest size at which
    /// one of them is ready: a file finished above it wakes no one. (A
    /// condition variable's notify is a system call even with no waiter, and
    /// waking the generator for each of a thousand small files only to have
    /// it wait again cost a context switch per file.)
    waiters: usize,
    wake_at: usize,
}

/// Why a wait on [`Inflight`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Wake {
    /// The condition waited for holds.
    Ready,
    /// Files are waiting to be requested again.
    Redo,
    /// The session is over.
    Closed,
}

impl<T: Clone> Inflight<T> {
    pub fn new(limit: usize) -> Inflight<T> {
        Inflight {
            state: Mutex::new(InflightState {
                items: HashMap::new(),
                redo: Vec::new(),
                requests_ended: false,
                closed: false,
                waiters: 0,
                wake_at: 0,
            }),
            cv: Condvar::new(),
            limit,
        }
    }

    /// Adds a file if there is room; gives it back otherwise.
    pub fn try_insert(&self, id: u64, item: T) -> Result<(), T> {
        let mut s = lock(&self.state);
        if s.closed || s.items.len() >= self.limit {
            return Err(item);
        }
        s.items.insert(id, item);
        Ok(())
    }

    /// Waits until the set has drained to half its limit (so a full set
    /// resumes in a burst rather than one file at a time).
    pub fn wait_room(&self) -> Wake {
        self.wait_for(self.limit / 2)
    }

    /// Waits until every file is finished.
    pub fn wait_empty(&self) -> Wake {
        self.wait_for(0)
    }

    /// Waits until at most `at_most` files are in the set.
    fn wait_for(&self, at_most: usize) -> Wake {
        let mut s = lock(&self.state);
        loop {
            if s.closed {
                return Wake::Closed;
            }
            if !s.redo.is_empty() {
                return Wake::Redo;
            }
            if s.items.len() <= at_most {
                return Wake::Ready;
            }
            s.wake_at = if s.waiters == 0 {
                at_most
            } else {
                s.wake_at.max(at_most)
            };
            s.waiters += 1;
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
            s.waiters -= 1;
        }
    }

    pub fn get(&self, id: u64) -> Option<T> {
        lock(&self.state).items.get(&id).cloned()
    }

    pub fn update(&self, id: u64, f: impl FnOnce(&mut T)) {
        if let Some(item) = lock(&self.state).items.get_mut(&id) {
            f(item);
        }
    }

    pub fn remove(&self, id: u64) -> Option<T> {
        let mut s = lock(&self.state);
        let item = s.items.remove(&id);
        let wake = s.waiters > 0 && s.items.len() <= s.wake_at;
        drop(s);
        if wake {
            self.cv.notify_all();
        }
        item
    }

    /// Marks a file for another request; never blocks.
    pub fn request_redo(&self, id: u64) {
        lock(&self.state).redo.push(id);
        self.cv.notify_all();
    }

    /// Files marked for another request, with their current state.
    pub fn take_redo(&self) -> Vec<(u64, T)> {
        let mut s = lock(&self.state);
        let ids = std::mem::take(&mut s.redo);
        ids.into_iter()
            .filter_map(|id| s.items.get(&id).map(|t| (id, t.clone())))
            .collect()
    }

    /// Records that every request has been made and answered.
    pub fn end_requests(&self) {
        lock(&self.state).requests_ended = true;
    }

    pub fn requests_ended(&self) -> bool {
        lock(&self.state).requests_ended
    }

    pub fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    pub fn close(&self) {
        lock(&self.state).closed = true;
        self.cv.notify_all();
    }
}

/// Bytes of file data read from the connection but not yet applied, at most:
/// a slow disk holds the reader back instead of filling memory.
pub const DATA_BUDGET: usize = 8 << 20;

/// File data on its way to an applier, holding its share of [`DATA_BUDGET`]
/// until the applier is done with it.
pub struct DataBatch {
    pub frames: Vec<Frame>,
    _budget: OwnedSemaphorePermit,
}

impl DataBatch {
    pub async fn new(
        frames: Vec<Frame>,
        budget: &Arc<Semaphore>,
    ) -> Result<DataBatch, SessionError> {
        let bytes: usize = frames.iter().map(weight).sum();
        let permits = bytes.clamp(1, DATA_BUDGET) as u32;
        let permit = budget
            .clone()
            .acquire_many_owned(permits)
            .await
            .map_err(|_| SessionError::Cancelled)?;
        Ok(DataBatch {
            frames,
            _budget: permit,
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn credits_block_until_granted_or_closed() {
        let c = Arc::new(Credits::new(1));
        assert!(c.take());
        let c2 = c.clone();
        let t = std::thread::spawn(move || c2.take());
        c.add(1);
        assert!(t.join().unwrap());
        let c2 = c.clone();
        let t = std::thread::spawn(move || c2.take());
        c.close();
        assert!(!t.join().unwrap());
    }

    #[test]
    fn inflight_bounds_drains_and_wakes_for_redo() {
        let f = Arc::new(Inflight::new(2));
        assert!(f.try_insert(1, "a").is_ok());
        assert!(f.try_insert(2, "b").is_ok());
        assert_eq!(f.try_insert(3, "c"), Err("c"));
        let f2 = f.clone();
        let t = std::thread::spawn(move || f2.wait_room());
        f.remove(1);
        assert_eq!(t.join().unwrap(), Wake::Ready);
        f.request_redo(2);
        assert_eq!(f.wait_empty(), Wake::Redo);
        assert_eq!(f.take_redo(), vec![(2, "b")]);
        f.remove(2);
        assert_eq!(f.wait_empty(), Wake::Ready);
        f.close();
        assert_eq!(f.wait_room(), Wake::Closed);
    }
}
