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
    pub operation_id: Option<String>,
    pub attempt: u32,
    /// Partial files continued from the verified prefix an earlier attempt left.
    pub files_resumed: u64,
    /// Bytes of those prefixes, not sent again.
    pub bytes_resumed: u64,
    /// Why a checkpoint found at the destination was discarded.
    pub checkpoint_problem: Option<String>,
    /// Receiver: bytes of those prefixes read back to check them (less than
    /// `bytes_resumed` where the checkpoint's stored hash state was used).
    /// (Defaults keep summaries of older movers readable as JSON.)
    #[serde(default)]
    pub prefix_bytes_read: u64,
    /// Sender: bytes of source files read to answer requests (data sent or
    /// matched, and prefixes of resumed files hashed); 0 on the receiver.
    #[serde(default)]
    pub source_bytes_read: u64,
    /// The end-to-end verification, if it was asked for.
    pub verify: Option<VerifyResult>,
    /// A block session's own figures.
    #[serde(default)]
    pub block: Option<Box<BlockSummary>>,
}

/// What a block session did beyond the common counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSummary {
    pub block_len: u32,
    pub source_size: u64,
    pub destination_size: u64,
    /// The verified prefix an earlier attempt left, not compared or sent again.
    pub resumed_from: u64,
    /// Zeros the destination got, and of them the bytes made holes.
    pub bytes_zeroed: u64,
    pub bytes_punched: u64,
    /// How zeros were made: punch-hole, zero-range, write, or none.
    pub zero_method: String,
    /// Bytes past the source's size zeroed (`--zero-tail`).
    pub tail_zeroed: u64,
    /// BLAKE3 of the source's bytes as sent (hex).
    pub root: String,
}

/// What `--verify` found: both trees described entry by entry (content and
/// metadata) and compared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyResult {
    pub passed: bool,
    /// Source entries compared.
    pub entries: u64,
    /// Entries the destination does not hold as they were sent (each
    /// reported on stderr): corruption, a failed write, a leftover temporary file.
    pub differences: u64,
    /// Entries the source changed after they were sent (a live source; each
    /// reported on stderr): the destination holds the version sent.
    #[serde(default)]
    pub changed: u64,
    /// The first of those, by path.
    #[serde(default)]
    pub changed_paths: Vec<String>,
    /// BLAKE3 manifest of the destination as verified (hex).
    pub manifest: String,
}

impl Summary {
    /// rsync-compatible exit code: 0, 23 (errors) or 24 (vanished/changed only).
    pub fn exit_code(&self) -> i32 {
        let unverified = self.verify.as_ref().is_some_and(|v| !v.passed);
        if self.files_failed > 0 || unverified {
            23
        } else if self.files_vanished > 0
            || self.files_changed > 0
            || self.verify.as_ref().is_some_and(|v| v.changed > 0)
        {
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
        self.files_resumed += a.files_resumed;
        self.bytes_resumed += a.bytes_resumed;
        self.prefix_bytes_read += a.prefix_bytes_read;
    }

    /// One line for people, on stderr.
    pub fn human(&self) -> String {
        let secs = self.elapsed_ms as f64 / 1000.0;
        // This attempt's own work: what it wrote, not what it found done.
        let rate = if secs > 0.0 {
            (self.bytes_literal + self.bytes_matched) as f64 / secs
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
        if self.files_resumed > 0 {
            s.push_str(&format!(
                ", {} resumed ({} reused)",
                self.files_resumed,
                human_bytes(self.bytes_resumed as f64)
            ));
        }
        match &self.verify {
            Some(v) if v.passed && v.changed > 0 => {
                let more = v.changed.saturating_sub(v.changed_paths.len() as u64);
                s.push_str(&format!(
                    ", verified {} entries, {} changed during the copy ({}{})",
                    v.entries,
                    v.changed,
                    v.changed_paths.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                ));
            }
            Some(v) if v.passed => s.push_str(&format!(", verified {} entries", v.entries)),
            Some(v) => s.push_str(&format!(
                ", VERIFICATION FAILED: {} of {} entries differ",
                v.differences, v.entries
            )),
            None => {}
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
///
/// Files and bytes count the whole operation, earlier attempts included (taken
/// from the checkpoint), so the latest event alone tells the true overall progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub operation_id: Option<String>,
    pub attempt: u32,
    pub files_done: u64,
    /// Files listed so far (or the total an earlier attempt listed, if larger); final once `listing_done`.
    pub files_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// This attempt has listed the whole source.
    pub listing_done: bool,
    /// The file being written, if any.
    pub current: Option<String>,
    /// Time spent by this attempt.
    pub elapsed_ms: u64,
    /// Bytes per second settled by this attempt (work found done is not counted).
    pub rate: u64,
    /// Seconds left at the current rate, once the total is known.
    pub eta_s: Option<u64>,
    /// Bytes earlier attempts had done, per the checkpoint this attempt
    /// started from (committed files and verified prefixes): the floor this
    /// attempt's progress starts at. Not to be confused with the summary's
    /// `bytes_resumed`, the prefixes of partial files this attempt continued.
    #[serde(alias = "bytes_resumed")]
    pub bytes_prior: u64,
}

/// What earlier attempts of the operation did, from the checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prior {
    pub files_done: u64,
    pub bytes_done: u64,
    /// Totals of a complete listing by an earlier attempt.
    pub files_total: Option<u64>,
    pub bytes_total: Option<u64>,
}

/// Live counters shared by a session's workers.
///
/// Work is counted in two parts: what this attempt *found* done (files up to
/// date, prefixes of partial files verified) and what it *settled* itself
/// (bytes written, files finished or given up). Earlier attempts' progress is
/// a floor for the first part: `done = max(prior, found) + settled`. When the
/// source is unchanged, everything an earlier attempt did is found again, so
/// the count neither jumps back at the start of an attempt nor counts twice.
#[derive(Debug, Default)]
pub struct Counters {
    pub operation_id: Option<String>,
    pub attempt: u32,
    prior: Prior,
    /// The prior's bytes, less what turned out not to be there after all.
    prior_bytes: AtomicU64,
    files_listed: AtomicU64,
    bytes_listed: AtomicU64,
    files_found: AtomicU64,
    bytes_found: AtomicU64,
    files_settled: AtomicU64,
    bytes_settled: AtomicU64,
    listing_done: AtomicBool,
    current: Mutex<Option<RelPath>>,
}

impl Counters {
    pub fn new(operation_id: Option<String>, attempt: u32, prior: Prior) -> Counters {
        Counters {
            operation_id,
            attempt,
            prior,
            prior_bytes: AtomicU64::new(prior.bytes_done),
            ..Counters::default()
        }
    }

    pub fn snapshot(&self, elapsed_ms: u64) -> Progress {
        let listing_done = self.listing_done.load(Relaxed);
        let total = |listed: &AtomicU64, prior: Option<u64>| {
            let listed = listed.load(Relaxed);
            if listing_done {
                listed
            } else {
                listed.max(prior.unwrap_or(0))
            }
        };
        let bytes_total = total(&self.bytes_listed, self.prior.bytes_total);
        let files_total = total(&self.files_listed, self.prior.files_total);
        let settled = self.bytes_settled.load(Relaxed);
        let done = |prior: u64, found: &AtomicU64, settled: u64, total: u64| {
            let d = prior.max(found.load(Relaxed)) + settled;
            // Only a source that changed between attempts makes the sum overshoot.
            if listing_done {
                d.min(total)
            } else {
                d
            }
        };
        let bytes_done = done(
            self.prior_bytes.load(Relaxed),
            &self.bytes_found,
            settled,
            bytes_total,
        );
        let files_done = done(
            self.prior.files_done,
            &self.files_found,
            self.files_settled.load(Relaxed),
            files_total,
        );
        let rate = (settled * 1000).checked_div(elapsed_ms).unwrap_or(0);
        let known = listing_done || self.prior.bytes_total.is_some();
        let eta_s = (known && rate > 0).then(|| bytes_total.saturating_sub(bytes_done) / rate);
        Progress {
            operation_id: self.operation_id.clone(),
            attempt: self.attempt,
            files_done,
            files_total: files_total.max(files_done),
            bytes_done,
            bytes_total: bytes_total.max(bytes_done),
            listing_done,
            current: self
                .current
                .lock()
                .ok()
                .and_then(|c| c.as_ref().map(|p| p.to_string())),
            elapsed_ms,
            rate,
            eta_s,
            bytes_prior: self.prior.bytes_done,
        }
    }

    pub fn file_listed(&self, bytes: u64) {
        self.files_listed.fetch_add(1, Relaxed);
        self.bytes_listed.fetch_add(bytes, Relaxed);
    }

    /// A listed file vanished before it could be read: it leaves the totals.
    pub fn file_gone(&self, bytes: u64) {
        add_signed(&self.files_listed, -1);
        add_signed(&self.bytes_listed, -(bytes as i64));
    }

    pub fn set_listing_done(&self) {
        self.listing_done.store(true, Relaxed);
    }

    /// A file found already in its final form.
    pub fn file_found(&self, bytes: u64) {
        self.files_found.fetch_add(1, Relaxed);
        self.bytes_found.fetch_add(bytes, Relaxed);
    }

    /// Work an earlier attempt counted that is not at the destination after
    /// all (a partial file that could not be reused).
    pub fn lost_prior(&self, bytes: u64) {
        add_signed(&self.prior_bytes, -(bytes as i64));
    }

    /// Bytes found done: the verified prefix of a partial file (or, negative, taken back).
    pub fn found_bytes(&self, bytes: i64) {
        add_signed(&self.bytes_found, bytes);
    }

    /// Bytes written by this attempt (or, negative, discarded).
    pub fn settled_bytes(&self, bytes: i64) {
        add_signed(&self.bytes_settled, bytes);
    }

    /// A file this attempt finished or gave up on.
    pub fn file_settled(&self) {
        self.files_settled.fetch_add(1, Relaxed);
    }

    /// A measure of work done, for deciding when to checkpoint: bytes, with
    /// each file counted as a 4 KiB block at least.
    pub fn activity(&self) -> u64 {
        let files = self.files_found.load(Relaxed) + self.files_settled.load(Relaxed);
        self.bytes_found.load(Relaxed) + self.bytes_settled.load(Relaxed) + files * 4096
    }

    pub fn set_current(&self, path: Option<&RelPath>) {
        if let Ok(mut c) = self.current.lock() {
            *c = path.cloned();
        }
    }
}

fn add_signed(counter: &AtomicU64, n: i64) {
    if n >= 0 {
        counter.fetch_add(n as u64, Relaxed);
    } else {
        // Never below zero, even if callers disagree.
        let _ = counter.fetch_update(Relaxed, Relaxed, |v| {
            Some(v.saturating_sub(n.unsigned_abs()))
        });
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
        c.file_listed(1000);
        c.settled_bytes(500);
        c.file_settled();
        assert_eq!(c.snapshot(1000).eta_s, None);
        c.set_listing_done();
        let p = c.snapshot(1000);
        assert_eq!((p.rate, p.eta_s), (500, Some(1)));
    }

    #[test]
    fn progress_continues_from_earlier_attempts() {
        let prior = Prior {
            files_done: 2,
            bytes_done: 600,
            files_total: Some(4),
            bytes_total: Some(1000),
        };
        let c = Counters::new(Some("op".into()), 2, prior);
        // Before anything is listed, the checkpoint's progress and totals stand.
        let p = c.snapshot(10);
        assert_eq!((p.bytes_done, p.bytes_total, p.files_done), (600, 1000, 2));
        assert_eq!((p.bytes_prior, p.attempt), (600, 2));
        // Found again: no double count; new work adds on top.
        c.file_listed(500);
        c.file_found(500);
        c.found_bytes(100);
        c.settled_bytes(50);
        assert_eq!(c.snapshot(10).bytes_done, 650);
        c.file_listed(500);
        c.settled_bytes(350);
        c.file_settled();
        c.set_listing_done();
        let p = c.snapshot(10);
        assert_eq!((p.bytes_done, p.bytes_total), (1000, 1000));
        assert_eq!(p.rate, 40_000, "only this attempt's own work is the rate");
        c.settled_bytes(-2000);
        assert_eq!(c.snapshot(10).bytes_done, 600, "never below zero");
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(512.0), "512 B");
        assert_eq!(human_bytes(1536.0), "1.5 KiB");
    }
}
