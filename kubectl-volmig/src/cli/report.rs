//! Showing a running operation: indicatif bars on a terminal, a plain line
//! every few seconds otherwise, nothing at all for `-o json|yaml`.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use mover::stats::human_bytes;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::driver::group::GroupUpdate;
use crate::driver::Update;
use crate::record::figures::Budget;
use crate::record::Progress;

/// How often a plain line is printed while bytes move.
const LINE_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Bars,
    Lines,
    Quiet,
}

impl Mode {
    /// Bars when stderr is a terminal, lines when not, nothing when stdout
    /// carries a machine-readable object.
    pub fn choose(machine_output: bool) -> Mode {
        if machine_output {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Bars
        } else {
            Mode::Lines
        }
    }
}

/// Shows `updates` until the driver drops its sender; attempts are
/// counted against `budget` (the fresh one `resume` may have granted).
pub async fn show(mode: Mode, budget: Budget, mut updates: UnboundedReceiver<Update>) {
    let bar = (mode == Mode::Bars).then(|| {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        bar.set_style(bar_style());
        bar
    });
    let mut last_line: Option<Instant> = None;
    while let Some(update) = updates.recv().await {
        let text = match &update {
            Update::AttemptStarted { number, sender } => Some(format!(
                "{}: sender {}",
                budget.label(*number),
                match &sender.node {
                    Some(node) => format!("on {node} ({})", sender.reason),
                    None => format!("placed by the scheduler ({})", sender.reason),
                }
            )),
            Update::AttemptEnded(a) => Some(ended(a)),
            Update::Cutover(text) | Update::Destination(text) => Some(text.clone()),
            Update::Backoff { next, delay } => Some(backoff(*next, *delay)),
            Update::Progress { attempt, progress } => {
                match &bar {
                    Some(bar) => {
                        bar.set_prefix(budget.label(*attempt));
                        bar.set_length(progress.bytes_total);
                        bar.set_position(progress.bytes_done);
                        bar.set_message(rate_and_eta(progress));
                    }
                    None if mode == Mode::Lines
                        && last_line.is_none_or(|t| t.elapsed() >= LINE_EVERY) =>
                    {
                        last_line = Some(Instant::now());
                        say!("{}", line(*attempt, progress));
                    }
                    None => {}
                }
                None
            }
        };
        if let Some(text) = text {
            match (&bar, mode) {
                (Some(bar), _) => bar.println(text),
                (None, Mode::Lines) => say!("{text}"),
                _ => {}
            }
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

/// Shows a set's updates: a bar per claim that runs on a terminal (its
/// name as the prefix), plain lines prefixed with the claim otherwise.
pub async fn show_set(mode: Mode, mut updates: UnboundedReceiver<GroupUpdate>) {
    let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    let mut shown: BTreeMap<u32, ProgressBar> = BTreeMap::new();
    let mut last_line: BTreeMap<u32, Instant> = BTreeMap::new();
    let print = |text: String| match mode {
        Mode::Bars => {
            let _ = bars.println(text);
        }
        Mode::Lines => say!("{text}"),
        Mode::Quiet => {}
    };
    while let Some(update) = updates.recv().await {
        match update {
            GroupUpdate::Started { key, claim } => {
                if mode == Mode::Bars {
                    let bar = bars.add(ProgressBar::new(0));
                    bar.set_style(bar_style());
                    bar.set_prefix(claim.clone());
                    shown.insert(key, bar);
                }
                print(format!("{claim}: started"));
            }
            GroupUpdate::Ended {
                key,
                claim,
                phase,
                message,
            } => {
                if let Some(bar) = shown.remove(&key) {
                    bar.finish_and_clear();
                    bars.remove(&bar);
                }
                let why = message.map(|m| format!(": {m}")).unwrap_or_default();
                print(format!("{claim}: {}{why}", phase.as_str().to_lowercase()));
            }
            GroupUpdate::Claim { key, claim, update } => match update {
                Update::Progress { attempt, progress } => match shown.get(&key) {
                    Some(bar) => {
                        bar.set_length(progress.bytes_total);
                        bar.set_position(progress.bytes_done);
                        bar.set_message(format!("attempt {attempt}, {}", rate_and_eta(&progress)));
                    }
                    None if mode == Mode::Lines
                        && last_line
                            .get(&key)
                            .is_none_or(|t| t.elapsed() >= LINE_EVERY) =>
                    {
                        last_line.insert(key, Instant::now());
                        say!("{claim}: {}", line(attempt, &progress));
                    }
                    None => {}
                },
                Update::AttemptEnded(a) => print(format!("{claim}: {}", ended(&a))),
                Update::Backoff { next, delay } => {
                    print(format!("{claim}: {}", backoff(next, delay)))
                }
                Update::AttemptStarted { .. } | Update::Cutover(_) | Update::Destination(_) => {}
            },
        }
    }
    for bar in shown.values() {
        bar.finish_and_clear();
    }
}

/// `attempt 2 failed: sender exited 137 ...`
fn ended(a: &crate::record::Attempt) -> String {
    let why = a
        .reason
        .as_ref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    format!(
        "attempt {} {}{why}",
        a.number,
        a.phase.as_str().to_lowercase()
    )
}

/// `attempt 3 starts in 20s (...)`
fn backoff(next: u32, delay: Duration) -> String {
    format!(
        "attempt {next} starts in {}s (the checkpoint keeps what was copied)",
        delay.as_secs()
    )
}

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{prefix:.bold} [{bar:32.cyan/blue}] {binary_bytes}/{binary_total_bytes} {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

fn rate_and_eta(p: &Progress) -> String {
    let mut s = format!("{}/s", human_bytes(p.rate as f64));
    if let Some(eta) = p.eta_seconds {
        s.push_str(&format!(", ETA {}", duration(eta)));
    }
    if let Some(current) = &p.current {
        s.push_str(&format!("  {current}"));
    }
    s
}

/// One plain progress line.
pub fn line(attempt: u32, p: &Progress) -> String {
    let percent = if p.bytes_total == 0 {
        0.0
    } else {
        p.bytes_done as f64 * 100.0 / p.bytes_total as f64
    };
    format!(
        "attempt {attempt}: {} / {}{} ({percent:.0}%), {} files of {}, {}",
        human_bytes(p.bytes_done as f64),
        human_bytes(p.bytes_total as f64),
        if p.listing_done { "" } else { "+" },
        p.files_done,
        p.files_total,
        rate_and_eta(p)
    )
}

/// `45s`, `12m05s`, `3h02m`.
pub fn duration(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_say_how_far_how_fast_and_how_long() {
        assert_eq!(duration(45), "45s");
        assert_eq!(duration(725), "12m05s");
        assert_eq!(duration(10_920), "3h02m");
        let p = Progress {
            bytes_done: 512 * 1024 * 1024,
            bytes_total: 2048 * 1024 * 1024,
            files_done: 10,
            files_total: 40,
            listing_done: true,
            rate: 50 * 1024 * 1024,
            eta_seconds: Some(31),
            current: Some("db/base/1.dat".into()),
            updated: None,
        };
        assert_eq!(
            line(2, &p),
            "attempt 2: 512.0 MiB / 2.0 GiB (25%), 10 files of 40, 50.0 MiB/s, ETA 31s  db/base/1.dat"
        );
    }
}
