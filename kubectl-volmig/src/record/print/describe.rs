//! `kubectl volmig status NAME`: one operation, `kubectl describe`-style.

use std::fmt::Write as _;

use jiff::Timestamp;

use super::format::{age, bytes, bytes_compact, columns, elapsed, percent, rate};
use crate::plan::{ClaimAction, NodePlacement};
use crate::record::cutover::CutoverStatus;
use crate::record::figures::{self, attempt_elapsed, Budget};
use crate::record::{Attempt, Phase, Progress, SourceCopy, Summary, VolumeMigration};

/// Where values start, as kubectl's describe aligns them.
const KEY_WIDTH: usize = 15;

/// Lines of `Key:   value`, nested by two spaces.
struct Out(String);

impl Out {
    fn field(&mut self, level: usize, key: &str, value: impl std::fmt::Display) {
        let key = format!("{:indent$}{key}:", "", indent = 2 * level);
        let _ = writeln!(self.0, "{key:<KEY_WIDTH$}{value}");
    }

    fn heading(&mut self, level: usize, key: &str) {
        let _ = writeln!(self.0, "{:indent$}{key}:", "", indent = 2 * level);
    }

    /// `text`'s lines, each indented by `indent` spaces.
    fn block(&mut self, indent: usize, text: &str) {
        for line in text.lines() {
            let _ = writeln!(self.0, "{:indent$}{line}", "");
        }
    }
}

/// One operation in full: what moves where, its phase and why, progress,
/// placement, every attempt, the result, who drives it, and the last
/// attempt's log tail. Ages are relative to `now`.
pub fn describe(vm: &VolumeMigration, now: Timestamp) -> String {
    let mut out = Out(String::new());
    let status = &vm.status;
    out.field(0, "Name", &vm.metadata.name);
    out.field(0, "Namespace", &vm.metadata.namespace);
    if let Some(created) = vm.metadata.creation_timestamp {
        out.field(
            0,
            "Created",
            format!("{created} ({} ago)", age(Some(created), now)),
        );
    }
    out.field(0, "Phase", status.phase.as_str());
    if let Some(message) = &status.message {
        out.field(0, "Message", message);
    }
    if let Some(c) = &status.cutover {
        cutover(&mut out, c, now);
    }
    out.field(0, "Source", source(vm));
    out.field(0, "Destination", destination(vm));
    if let Some(held) = &status.reusable {
        out.field(1, "Held before", held);
    }
    for a in &status.abandoned_destinations {
        let text = format!(
            "{} (before attempt {}: {}); removed by kubectl volmig cleanup",
            a.name, a.replaced_before_attempt, a.reason
        );
        out.field(1, "Given up", text);
    }
    if let Some(m) = status
        .source_method
        .as_ref()
        .filter(|m| m.method.reads_copy())
    {
        out.field(0, "Reads", format!("{} ({})", m.method.as_str(), m.reason));
    }
    if let Some(p) = &status.progress {
        out.field(0, "Progress", progress(p));
        if let Some(current) = &p.current {
            out.field(1, "Current", current);
        }
    }
    if let Some(clusters) = &vm.spec.clusters {
        out.heading(0, "Clusters");
        out.field(1, "Source", clusters.source.to_string());
        out.field(1, "Destination", clusters.destination.to_string());
        let network = match &status.network {
            Some(net) => net.summary(),
            None => format!("{} (not chosen yet)", clusters.network.as_str()),
        };
        out.field(1, "Network", network);
    }
    if let Some(placement) = &status.placement {
        out.heading(0, "Placement");
        out.field(1, "Sender", node_placement(&placement.sender));
        out.field(1, "Receiver", node_placement(&placement.receiver));
    }
    // Baseline is what every record of an older version had: said only
    // when restricted.
    if let Some(s) = status.security.as_ref().filter(|s| s.identity.is_some()) {
        let id = s
            .identity
            .as_ref()
            .map(|i| i.describe())
            .unwrap_or_default();
        out.field(
            0,
            "Security",
            format!("{} ({}), as {id}", s.profile.as_str(), s.reason),
        );
    }
    let budget = Budget::of(vm);
    let mut count = budget.count();
    if budget.replaced > 0 {
        let _ = write!(
            count,
            " (and {} replaced to follow the app)",
            budget.replaced
        );
    }
    out.field(0, "Attempts", count);
    if !status.attempts.is_empty() {
        out.block(2, &attempts(vm, now));
    }
    out.field(0, "Elapsed", total_elapsed(vm, now));
    if let Some(summary) = &status.summary {
        summarize(&mut out, summary, vm.spec.transfer.verify);
    }
    match &status.driver {
        Some(d) if d.is_live(now) => out.field(
            0,
            "Driver",
            format!(
                "{} (heartbeat {} ago)",
                d.holder,
                age(Some(d.heartbeat), now)
            ),
        ),
        Some(d) => out.field(
            0,
            "Driver",
            format!(
                "{} (gone: last heartbeat {} ago)",
                d.holder,
                age(Some(d.heartbeat), now)
            ),
        ),
        // Nobody finishes a running operation without a driver.
        None if matches!(status.phase, Phase::Running | Phase::Pending) => out.field(
            0,
            "Driver",
            format!(
                "none: finish it with kubectl volmig resume {} -n {}",
                vm.metadata.name, vm.metadata.namespace
            ),
        ),
        None => out.field(0, "Driver", "none"),
    }
    if let Some(ic) = &status.in_cluster {
        out.field(
            0,
            "In cluster",
            format!(
                "Job {} ({}), detached by {} {} ago; its log: kubectl volmig logs {} --driver",
                ic.job,
                ic.image,
                ic.started_by,
                age(Some(ic.started_at), now),
                vm.metadata.name
            ),
        );
    }
    if let Some(last) = status.attempts.last() {
        if !last.log_tail.is_empty() {
            out.heading(0, &format!("Log tail (attempt {})", last.number));
            out.block(4, &last.log_tail.join("\n"));
        }
    }
    out.0
}

/// `prod/data (volume pvc-1, class standard, 10Gi)`.
fn cutover(out: &mut Out, c: &CutoverStatus, now: Timestamp) {
    out.heading(0, "Cutover");
    out.field(1, "Step", super::cutover_line(c, now));
    for t in &c.quiesce {
        out.field(
            1,
            "Stopped",
            format!("{:?} {} (back to {} replicas)", t.kind, t.name, t.replicas),
        );
    }
    for claim in &c.claims {
        out.field(
            1,
            "Old volume",
            format!(
                "{} (reclaim policy was {})",
                claim.source_volume, claim.source_policy
            ),
        );
        if let Some(v) = &claim.new_volume {
            out.field(1, "New volume", v);
        }
        if let Some(s) = &claim.swap {
            out.field(1, "Last change", s);
        }
    }
    if let Some(r) = &c.rollback {
        out.field(1, "Rollback", &r.reason);
    }
}

fn source(vm: &VolumeMigration) -> String {
    let claim = &vm.spec.source;
    match &vm.status.source {
        Some(s) => {
            let class = s
                .storage_class
                .as_deref()
                .map_or("no class".to_string(), |c| format!("class {c}"));
            let mut out = format!("{claim} (volume {}, {class}, {}", s.volume, s.capacity);
            if !s.used_by.is_empty() {
                let _ = write!(out, ", used by {}", s.used_by.join(", "));
            }
            out.push(')');
            out
        }
        None => claim.to_string(),
    }
}

/// `prod/data-new (class fast, 20Gi, created by volmig)`.
fn destination(vm: &VolumeMigration) -> String {
    match &vm.status.destination {
        Some(d) => {
            let class = d
                .storage_class
                .as_deref()
                .map_or("the default class".to_string(), |c| format!("class {c}"));
            let action = match d.action {
                ClaimAction::Create => "created by volmig",
                ClaimAction::Reuse => "existing claim, reused",
            };
            format!("{}/{} ({class}, {}, {action})", d.namespace, d.name, d.size)
        }
        None => format!(
            "{}/{}",
            vm.spec.destination.namespace, vm.spec.destination.name
        ),
    }
}

/// `41% (1.2 GiB of 2.9 GiB), 812 of 2044 files, 74.2 MiB/s, ETA 6m40s`.
fn progress(p: &Progress) -> String {
    let mut out = if p.listing_done {
        format!(
            "{}% ({} of {}), {} of {} files",
            percent(p.bytes_done, p.bytes_total),
            bytes(p.bytes_done),
            bytes(p.bytes_total),
            p.files_done,
            p.files_total
        )
    } else {
        format!(
            "{} of {} so far, {} of {} files so far (still listing the source)",
            bytes(p.bytes_done),
            bytes(p.bytes_total),
            p.files_done,
            p.files_total
        )
    };
    if p.rate > 0 {
        let _ = write!(out, ", {}", rate(p.rate));
    }
    if let Some(eta) = p.eta_seconds {
        let _ = write!(out, ", ETA {}", elapsed(eta as f64));
    }
    out
}

/// `node-2 (the app pod web-0 runs there)`, `any node (...)`.
fn node_placement(p: &NodePlacement) -> String {
    format!("{} ({})", p.node.as_deref().unwrap_or("any node"), p.reason)
}

/// The attempts table: one row per attempt, the reason last. FROM EARLIER
/// is what earlier attempts had done when it started, BYTES what was done
/// when it ended (or now). The running attempt's BYTES and RATE are the
/// Progress line's: its own copy is not written until the driver has heard
/// from the new receiver, and never without a driver.
fn attempts(vm: &VolumeMigration, now: Timestamp) -> String {
    let running = vm.running_attempt().map(|a| a.number);
    let figures = |a: &Attempt| match vm.status.progress.as_ref() {
        Some(p) if running == Some(a.number) => (p.bytes_done, p.rate),
        _ => (a.bytes_done, a.rate),
    };
    let dash = || "-".to_string();
    let code = |c: Option<i32>| c.map_or(dash(), |c| c.to_string());
    let mut rows = vec![[
        "#",
        "PHASE",
        "SENDER NODE",
        "EXIT S/R",
        "STARTED",
        "ELAPSED",
        "FROM EARLIER",
        "BYTES",
        "RATE",
        "REASON",
    ]
    .map(String::from)
    .to_vec()];
    // Only an operation that read copies has the column.
    let copies = vm.status.attempts.iter().any(|a| a.source.is_some());
    if copies {
        rows[0].insert(2, "READ".to_string());
    }
    for a in &vm.status.attempts {
        let (done, rate_now) = figures(a);
        let mut row = vec![
            a.number.to_string(),
            a.phase.as_str().to_string(),
            a.sender.node.clone().unwrap_or_else(dash),
            format!(
                "{}/{}",
                code(a.sender.exit_code),
                code(a.receiver.exit_code)
            ),
            a.start_time
                .map_or_else(dash, |t| format!("{} ago", age(Some(t), now))),
            elapsed(attempt_elapsed(a, now)),
            bytes_compact(a.bytes_prior),
            bytes_compact(done),
            rate(rate_now).replace(' ', ""),
            reason_cell(a),
        ];
        if copies {
            row.insert(2, a.source.as_ref().map_or_else(dash, read_cell));
        }
        rows.push(row);
    }
    columns(&rows)
}

/// Why an attempt ended, after what it did with the destination when it
/// did not just reuse it (`wiped: ...; receiver exited 23 ...`).
fn reason_cell(a: &Attempt) -> String {
    let parts: Vec<&str> = [a.destination_note.as_deref(), a.reason.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    match parts.is_empty() {
        true => "-".to_string(),
        false => parts.join("; "),
    }
}

/// `snapshot, ready in 1.2s`, `clone, not ready`: what an attempt's
/// sender read, and how long the copy took.
fn read_cell(copy: &SourceCopy) -> String {
    let method = copy.method.as_str();
    match (copy.requested_at, copy.ready_at) {
        (Some(asked), Some(ready)) => {
            let took = ready.duration_since(asked).as_secs_f64().max(0.0);
            format!("{method}, ready in {took:.1}s")
        }
        _ => format!("{method}, not ready"),
    }
}

/// `9m17s (started ..., completed ...)`: the attempts' time, the running
/// one's so far included.
fn total_elapsed(vm: &VolumeMigration, now: Timestamp) -> String {
    let mut out = elapsed(figures::total_elapsed(&vm.status.attempts, now));
    match (vm.status.start_time, vm.status.completion_time) {
        (Some(start), Some(end)) => {
            let _ = write!(out, " (started {start}, completed {end})");
        }
        (Some(start), None) => {
            let _ = write!(out, " (started {start})");
        }
        _ => {}
    }
    out
}

/// The mover's result, verification and manifest.
fn summarize(out: &mut Out, s: &Summary, verify: bool) {
    out.field(
        0,
        "Summary",
        format!(
            "{} entries, {} files, {}",
            s.entries,
            s.files,
            bytes(s.bytes)
        ),
    );
    out.field(
        1,
        "Transferred",
        format!(
            "{} files ({} literal, {} matched, {} on the wire)",
            s.files_transferred,
            bytes(s.bytes_literal),
            bytes(s.bytes_matched),
            bytes(s.bytes_on_wire)
        ),
    );
    out.field(1, "Up to date", format!("{} files", s.files_up_to_date));
    out.field(1, "Deleted", s.deleted);
    let verified = match s.verified_entries {
        Some(n) => format!("{n} entries (BLAKE3)"),
        None if verify => "not run".to_string(),
        None => "skipped (--no-verify)".to_string(),
    };
    out.field(1, "Verified", verified);
    if let Some(manifest) = &s.manifest {
        out.field(1, "Manifest", manifest);
    }
    if s.changed > 0 {
        out.field(1, "Changed", changed_text(s));
    }
}

/// What a live source changed during a copy, and what to do about it.
pub(super) fn changed_text(s: &Summary) -> String {
    let named = s.changed_paths.len() as u64;
    let more = s.changed.saturating_sub(named);
    let mut list = s.changed_paths.join(", ");
    if more > 0 {
        list.push_str(&format!(" and {more} more"));
    }
    format!(
        "{} {} changed during the copy{}: the destination holds the version sent; stop the \
         application and run migrate again with --reuse (only the differences move)",
        s.changed,
        if s.changed == 1 { "entry" } else { "entries" },
        if list.is_empty() {
            String::new()
        } else {
            format!(" ({list})")
        }
    )
}
