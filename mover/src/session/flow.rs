//! Blocking flow-control primitives shared by the worker threads.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};

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

/// Files requested but not yet finished, bounded in number.
#[derive(Debug)]
pub struct Inflight<T> {
    state: Mutex<(HashMap<u64, T>, bool)>,
    cv: Condvar,
    limit: usize,
}

impl<T: Clone> Inflight<T> {
    pub fn new(limit: usize) -> Inflight<T> {
        Inflight {
            state: Mutex::new((HashMap::new(), false)),
            cv: Condvar::new(),
            limit,
        }
    }

    /// Adds a file once there is room; false once the session is over.
    pub fn insert(&self, id: u64, item: T) -> bool {
        let mut s = lock(&self.state);
        while s.0.len() >= self.limit && !s.1 {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if s.1 {
            return false;
        }
        s.0.insert(id, item);
        true
    }

    pub fn get(&self, id: u64) -> Option<T> {
        lock(&self.state).0.get(&id).cloned()
    }

    pub fn update(&self, id: u64, f: impl FnOnce(&mut T)) {
        if let Some(item) = lock(&self.state).0.get_mut(&id) {
            f(item);
        }
    }

    pub fn remove(&self, id: u64) -> Option<T> {
        let item = lock(&self.state).0.remove(&id);
        self.cv.notify_all();
        item
    }

    /// Waits until every file is finished; false if the session ended first.
    pub fn wait_empty(&self) -> bool {
        let mut s = lock(&self.state);
        while !s.0.is_empty() && !s.1 {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        !s.1
    }

    pub fn close(&self) {
        lock(&self.state).1 = true;
        self.cv.notify_all();
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
    fn inflight_bounds_and_drains() {
        let f = Arc::new(Inflight::new(1));
        assert!(f.insert(1, "a"));
        let f2 = f.clone();
        let t = std::thread::spawn(move || f2.insert(2, "b"));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!t.is_finished());
        assert_eq!(f.remove(1), Some("a"));
        assert!(t.join().unwrap());
        assert_eq!(f.get(2), Some("b"));
        f.remove(2);
        assert!(f.wait_empty());
    }
}
