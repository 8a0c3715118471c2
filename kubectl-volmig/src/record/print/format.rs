//! Cells: durations, sizes, progress, and kubectl's column layout.

use jiff::Timestamp;
use mover::stats::human_bytes;

use crate::record::{Progress, VolumeMigration};

/// Spaces between columns, as `kubectl get`.
const GAP: usize = 3;

/// Rows as kubectl prints them: left-aligned columns three spaces apart,
/// no trailing spaces, a newline after each row.
pub(super) fn columns(rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(max) => *max = (*max).max(w),
                None => widths.push(w),
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i] - cell.chars().count() + GAP;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// How long ago `then` was, as kubectl's AGE column says it (Go's
/// `duration.HumanDuration`): `45s`, `5m12s`, `5h`, `3d4h`, `<unknown>`.
pub(crate) fn age(then: Option<Timestamp>, now: Timestamp) -> String {
    match then {
        Some(then) => human_duration(now.as_second() - then.as_second()),
        None => "<unknown>".to_string(),
    }
}

/// Go's `k8s.io/apimachinery/pkg/util/duration.HumanDuration`, in seconds.
fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return with_rest(minutes, "m", seconds % 60, "s");
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return with_rest(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return with_rest(hours / 24, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return with_rest(hours / 24 / 365, "y", (hours / 24) % 365, "d");
    }
    format!("{}y", hours / 24 / 365)
}

/// `5m` or `5m12s`.
fn with_rest(big: i64, big_unit: &str, rest: i64, rest_unit: &str) -> String {
    if rest == 0 {
        format!("{big}{big_unit}")
    } else {
        format!("{big}{big_unit}{rest}{rest_unit}")
    }
}

/// A span of work, exact to the second below an hour: `45s`, `5m12s`,
/// `2h5m`, `3d4h`.
pub(crate) fn elapsed(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
    }
}

/// `1.2 GiB`.
pub(crate) fn bytes(n: u64) -> String {
    human_bytes(n as f64)
}

/// `1.2GiB`, for table cells.
pub(crate) fn bytes_compact(n: u64) -> String {
    bytes(n).replace(' ', "")
}

/// `12.0 MiB/s`, or `-` for nothing measured.
pub(crate) fn rate(n: u64) -> String {
    if n == 0 {
        "-".to_string()
    } else {
        format!("{}/s", bytes(n))
    }
}

/// Whole percent of `done` in `total`, never 100 before it is all there.
pub(crate) fn percent(done: u64, total: u64) -> u64 {
    if total == 0 {
        return 100;
    }
    (u128::from(done.min(total)) * 100 / u128::from(total)) as u64
}

/// The PROGRESS cell: `41% 1.2GiB/2.9GiB`; `1.2GiB/2.9GiB+` while the
/// source is still being listed (the total is not final); `-` before any.
pub(super) fn progress_cell(progress: Option<&Progress>) -> String {
    match progress {
        None => "-".to_string(),
        Some(p) if !p.listing_done => format!(
            "{}/{}+",
            bytes_compact(p.bytes_done),
            bytes_compact(p.bytes_total)
        ),
        Some(p) => format!(
            "{}% {}/{}",
            percent(p.bytes_done, p.bytes_total),
            bytes_compact(p.bytes_done),
            bytes_compact(p.bytes_total)
        ),
    }
}

/// The ATTEMPTS cell: attempts counted against the budget (a `Replaced`
/// one is not; after `resume` granted a fresh budget, those since) of the
/// 1 + backoff limit allowed: `3/7`.
pub(super) fn attempts_cell(vm: &VolumeMigration) -> String {
    crate::record::figures::Budget::of(vm).cell()
}

/// A claim as seen from `here`: `name`, or `namespace/name` elsewhere.
pub(crate) fn claim(namespace: &str, name: &str, here: &str) -> String {
    if namespace == here {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (45, "45s"),
            (119, "119s"),
            (120, "2m"),
            (312, "5m12s"),
            (45 * 60, "45m"),
            (179 * 60, "179m"),
            (3 * 3600 + 59, "3h"),
            (7 * 3600 + 30 * 60, "7h30m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (40 * 86400, "40d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (10 * 365 * 86400, "10y"),
        ];
        for (seconds, want) in cases {
            assert_eq!(human_duration(seconds), want, "{seconds}s");
        }
    }

    #[test]
    fn elapsed_is_exact_below_an_hour() {
        assert_eq!(elapsed(0.4), "0s");
        assert_eq!(elapsed(59.6), "1m0s");
        assert_eq!(elapsed(557.0), "9m17s");
        assert_eq!(elapsed(7_530.0), "2h5m");
        assert_eq!(elapsed(100_000.0), "1d3h");
    }

    #[test]
    fn progress_never_claims_done_early() {
        assert_eq!(percent(999, 1000), 99);
        assert_eq!(percent(u64::MAX - 1, u64::MAX), 99);
        assert_eq!(percent(0, 0), 100);
        let p = Progress {
            bytes_done: 1288490189,
            bytes_total: 3113851290,
            listing_done: true,
            ..Progress::default()
        };
        assert_eq!(progress_cell(Some(&p)), "41% 1.2GiB/2.9GiB");
        let listing = Progress {
            listing_done: false,
            ..p
        };
        assert_eq!(progress_cell(Some(&listing)), "1.2GiB/2.9GiB+");
        assert_eq!(progress_cell(None), "-");
    }

    #[test]
    fn columns_are_three_spaces_apart() {
        let rows = vec![
            vec!["NAME".to_string(), "PHASE".to_string(), "AGE".to_string()],
            vec![
                "a-long-name".to_string(),
                "Running".to_string(),
                "5m".to_string(),
            ],
            vec!["b".to_string(), "-".to_string(), "".to_string()],
        ];
        assert_eq!(
            columns(&rows),
            "NAME          PHASE     AGE\n\
             a-long-name   Running   5m\n\
             b             -\n"
        );
    }
}
