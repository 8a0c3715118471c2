//! Values as the monitor shows them: sizes, rates, ages, ETAs, progress
//! bars, phases in colour. Sizes and ages read as
//! `kubectl volmig status` prints them (binary units; kubectl's AGE).

use jiff::Timestamp;
use ratatui::style::{Color, Style};

/// The record printer's formats, so the TUI and `status` agree.
pub(super) use crate::record::print::format::{
    age, bytes, bytes_compact, claim, elapsed, percent, rate,
};

use crate::record::figures::Budget;
use crate::record::{AttemptPhase, Phase, Progress, VolumeMigration};

/// `12.0MiB/s`, for table cells.
pub(super) fn rate_compact(n: u64) -> String {
    rate(n).replace(' ', "")
}

/// `done` in `total` as a ratio for a gauge: within 0..=1 whatever the
/// numbers say.
pub(super) fn ratio(done: u64, total: u64) -> f64 {
    if total == 0 {
        return 1.0;
    }
    (done.min(total) as f64 / total as f64).clamp(0.0, 1.0)
}

/// A text progress bar exactly `width` columns wide: `[#####-----]  42%`,
/// `+` after the percent while the source is still being listed (the total
/// is not final), only the percent when there is no room for a bar.
pub(super) fn bar(p: &Progress, width: usize) -> String {
    let pct = percent(p.bytes_done, p.bytes_total);
    let more = if p.listing_done { "" } else { "+" };
    let label = format!("{pct:>3}%{more}");
    let cells = width.saturating_sub(label.len() + 3);
    if cells == 0 {
        return format!("{label:>width$}");
    }
    let filled = if p.bytes_total == 0 || p.bytes_done >= p.bytes_total {
        cells
    } else {
        (u128::from(p.bytes_done) * cells as u128 / u128::from(p.bytes_total)) as usize
    };
    format!(
        "[{}{}] {label}",
        "#".repeat(filled),
        "-".repeat(cells - filled)
    )
}

/// Seconds left, counted down from the report's time to `now`: the
/// mover's estimate, or the rest at the current rate once the total is
/// final.
pub(super) fn eta(p: &Progress, now: Timestamp) -> Option<u64> {
    let estimate = match p.eta_seconds {
        Some(eta) => eta,
        None if p.listing_done && p.rate > 0 => p.bytes_total.saturating_sub(p.bytes_done) / p.rate,
        None => return None,
    };
    let since = p
        .updated
        .map_or(0, |at| now.as_second().saturating_sub(at.as_second()));
    Some(estimate.saturating_sub(u64::try_from(since).unwrap_or(0)))
}

/// Attempts counted against the budget (a `Replaced` one is not; after
/// `resume` granted a fresh budget, those since), the budget (1 + the
/// backoff limit), and the replaced ones.
pub(super) fn attempts(vm: &VolumeMigration) -> Budget {
    Budget::of(vm)
}

/// A phase's colour: running blue, done green, failed red, aborted
/// yellow, waiting grey.
pub(super) fn phase_style(phase: Phase) -> Style {
    Style::new().fg(match phase {
        Phase::Pending => Color::Gray,
        Phase::Running => Color::Cyan,
        Phase::Succeeded => Color::Green,
        Phase::Failed => Color::Red,
        Phase::Aborted | Phase::RolledBack => Color::Yellow,
    })
}

/// An attempt's phase in the same colours.
pub(super) fn attempt_style(phase: AttemptPhase) -> Style {
    phase_style(match phase {
        AttemptPhase::Starting => Phase::Pending,
        AttemptPhase::Running => Phase::Running,
        AttemptPhase::Succeeded => Phase::Succeeded,
        AttemptPhase::Failed => Phase::Failed,
        AttemptPhase::Replaced | AttemptPhase::Aborted => Phase::Aborted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(done: u64, total: u64, listing_done: bool) -> Progress {
        Progress {
            bytes_done: done,
            bytes_total: total,
            listing_done,
            ..Progress::default()
        }
    }

    #[test]
    fn bars_fill_the_width_and_never_show_done_early() {
        assert_eq!(bar(&progress(42, 100, true), 17), "[####------]  42%");
        assert_eq!(bar(&progress(999, 1000, true), 12), "[####-]  99%");
        assert_eq!(bar(&progress(1000, 1000, true), 12), "[#####] 100%");
        assert_eq!(bar(&progress(5, 10, false), 13), "[##---]  50%+");
        assert_eq!(bar(&progress(5, 10, true), 5), "  50%");
        assert_eq!(bar(&progress(0, 0, true), 9), "[##] 100%");
    }

    #[test]
    fn eta_counts_down_from_the_report() {
        let at: Timestamp = "2025-03-01T11:59:58Z".parse().expect("timestamp");
        let now: Timestamp = "2025-03-01T12:00:00Z".parse().expect("timestamp");
        let p = Progress {
            eta_seconds: Some(400),
            updated: Some(at),
            ..progress(1, 2, true)
        };
        assert_eq!(eta(&p, now), Some(398));
        let computed = Progress {
            rate: 10,
            ..progress(100, 1100, true)
        };
        assert_eq!(eta(&computed, now), Some(100));
        assert_eq!(eta(&progress(1, 2, false), now), None);
    }

    #[test]
    fn ages_read_like_kubectl() {
        let now: Timestamp = "2025-03-01T12:00:00Z".parse().expect("timestamp");
        let ago = |s: i64| {
            let then = Timestamp::from_second(now.as_second() - s).expect("in range");
            age(Some(then), now)
        };
        let cases: [(i64, &str); 10] = [
            (-5, "<invalid>"),
            (45, "45s"),
            (119, "119s"),
            (312, "5m12s"),
            (179 * 60, "179m"),
            (7 * 3600 + 30 * 60, "7h30m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (40 * 86400, "40d"),
            (10 * 365 * 86400, "10y"),
        ];
        for (seconds, want) in cases {
            assert_eq!(ago(seconds), want, "{seconds}s");
        }
        assert_eq!(age(None, now), "<unknown>");
    }
}
