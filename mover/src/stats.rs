//! Counters, progress events and the final summary.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::path::RelPath;

/// The result of a session, printed as the final JSON line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Regular files in the source (hard links to an earlier name excluded).
    pub files_total: u64,
    /// Entries of every kind in the source, the root excluded.
    pub entries_total: u64,
    /// Regular files whose data was sent.
    pub files_transferred: u64,
    /// Regular files already identical at the destination.
    pub files_up_to_date: u64,
    /// Total size of the regular files in the source.
    pub bytes_total: u64,
    /// New data sent (literal bytes before compression).
    pub bytes_literal: u64,
    /// Data reused from the destination's basis files.
    pub bytes_matched: u64,
    /// Bytes that crossed the connection, both directions.
    pub bytes_on_wire: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub hard_links: u64,
    pub specials: u64,
    /// Destination entries removed by `--delete`.
    pub deleted: u64,
    /// Source files that disappeared before they could be read.
    pub files_vanished: u64,
    /// Source files that kept changing while read; the destination keeps its old copy.
    pub files_changed: u64,
    /// Entries that could not be created or updated (see the error messages).
    pub files_failed: u64,
    pub elapsed_ms: u64,
}

impl Summary {
    /// rsync-compatible exit code: 0, 23 (errors) or 24 (vanished/changed only).
    pub fn exit_code(&self) -> i32 {
        if self.files_failed > 0 {
            23
        } else if self.files_vanished > 0 || self.files_changed > 0 {
            24
        } else {
            0
        }
    }

    /// Adds what an applier counted (files rebuilt and their data).
    pub fn add_applied(&mut self, a: &Summary) {
        self.files_transferred += a.files_transferred;
        self.bytes_literal += a.bytes_literal;
        self.bytes_matched += a.bytes_matched;
        self.files_vanished += a.files_vanished;
        self.files_changed += a.files_changed;
        self.files_failed += a.files_failed;
    }

    /// One line for people, on stderr.
    pub fn human(&self) -> String {
        let secs = self.elapsed_ms as f64 / 1000.0;
        let rate = if secs > 0.0 {
            self.bytes_total as f64 / secs
        } else {
            0.0
        };
        let mut s = format!(
            "{}, {}, {} sent ({} up to date), {} total, {} literal, {} matched, {} on the wire, {:.2}s ({}/s)",
            count(self.entries_total, "entry", "entries"),
            count(self.files_total, "file", "files"),
            self.files_transferred,
            self.files_up_to_date,
            human_bytes(self.bytes_total as f64),
            human_bytes(self.bytes_literal as f64),
            human_bytes(self.bytes_matched as f64),
            human_bytes(self.bytes_on_wire as f64),
            secs,
            human_bytes(rate)
        );
        for (n, what) in [
            (self.deleted, "deleted"),
            (self.files_vanished, "vanished"),
            (self.files_changed, "changed while read"),
            (self.files_failed, "failed"),
        ] {
            if n > 0 {
                s.push_str(&format!(", {n} {what}"));
            }
        }
        s
    }
}

/// `1 file`, `2 files`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `1.5 MiB`-style sizes.
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", UNITS[0])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A progress event, as the receiver sees it (it knows what is committed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub files_done: u64,
    /// Files listed so far; final once `listing_done`.
    pub files_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub listing_done: bool,
    /// The file being written, if any.
    pub current: Option<String>,
    pub elapsed_ms: u64,
    /// Bytes per second since the start.
    pub rate: u64,
    /// Seconds left at the current rate, once the listing is complete.
    pub eta_s: Option<u64>,
}

/// Live counters shared by a session's workers.
#[derive(Debug, Default)]
pub struct Counters {
    pub files_listed: AtomicU64,
    pub bytes_listed: AtomicU64,
    pub files_done: AtomicU64,
    pub bytes_done: AtomicU64,
    pub listing_done: AtomicBool,
    pub current: Mutex<Option<RelPath>>,
}

impl Counters {
    pub fn snapshot(&self, elapsed_ms: u64) -> Progress {
        let bytes_done = self.bytes_done.load(Relaxed);
        let bytes_total = self.bytes_listed.load(Relaxed);
        let listing_done = self.listing_done.load(Relaxed);
        let rate = (bytes_done * 1000).checked_div(elapsed_ms).unwrap_or(0);
        let eta_s =
            (listing_done && rate > 0).then(|| bytes_total.saturating_sub(bytes_done) / rate);
        Progress {
            files_done: self.files_done.load(Relaxed),
            files_total: self.files_listed.load(Relaxed),
            bytes_done,
            bytes_total,
            listing_done,
            current: self
                .current
                .lock()
                .ok()
                .and_then(|c| c.as_ref().map(|p| p.to_string())),
            elapsed_ms,
            rate,
            eta_s,
        }
    }

    pub fn file_listed(&self, bytes: u64) {
        self.files_listed.fetch_add(1, Relaxed);
        self.bytes_listed.fetch_add(bytes, Relaxed);
    }

    pub fn file_done(&self, bytes: u64) {
        self.files_done.fetch_add(1, Relaxed);
        self.bytes_done.fetch_add(bytes, Relaxed);
    }

    pub fn set_current(&self, path: Option<&RelPath>) {
        if let Ok(mut c) = self.current.lock() {
            *c = path.cloned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_rsync() {
        let mut s = Summary::default();
        assert_eq!(s.exit_code(), 0);
        s.files_vanished = 1;
        assert_eq!(s.exit_code(), 24);
        s.files_failed = 1;
        assert_eq!(s.exit_code(), 23);
    }

    #[test]
    fn progress_eta_needs_complete_listing() {
        let c = Counters::default();
        c.bytes_listed.store(1000, Relaxed);
        c.file_done(500);
        assert_eq!(c.snapshot(1000).eta_s, None);
        c.listing_done.store(true, Relaxed);
        let p = c.snapshot(1000);
        assert_eq!((p.rate, p.eta_s), (500, Some(1)));
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(512.0), "512 B");
        assert_eq!(human_bytes(1536.0), "1.5 KiB");
    }
}
