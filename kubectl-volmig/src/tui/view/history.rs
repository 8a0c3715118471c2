//! The attempt history table of the detail screen.

use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Span;
use ratatui::widgets::{Cell, Row, Table};
use ratatui::Frame;

use super::cells::{age, attempt_style, bytes_compact, elapsed, rate_compact};
use super::columns::{fit, widest, Need};
use super::text::truncate;
use crate::record::{Attempt, VolumeMigration};
use crate::tui::model::{Model, Side};

/// Reasons get at least this much room, or other columns go.
const MIN_REASON: usize = 20;

/// `vm`'s attempts as a table in `area`, the newest kept when not all fit.
/// The running attempt's row has the live figures the header above it
/// shows, and its sender's node as soon as it is known.
pub(super) fn draw(frame: &mut Frame, area: Rect, model: &Model, vm: &VolumeMigration) {
    if area.height == 0 {
        return;
    }
    let now = model.now();
    let room = usize::from(area.height - 1);
    let attempts = &vm.status.attempts;
    let attempts = &attempts[attempts.len().saturating_sub(room)..];
    let dash = || "-".to_string();
    let code = |c: Option<i32>| c.map_or_else(dash, |c| c.to_string());
    let each = |f: &dyn Fn(&Attempt) -> String| -> Vec<String> { attempts.iter().map(f).collect() };

    // Header, cells, width cap, drop order (0: never; highest first).
    let columns: [(&str, Vec<String>, usize, u8); 8] = [
        ("#", each(&|a| a.number.to_string()), 4, 0),
        ("PHASE", each(&|a| a.phase.as_str().to_string()), 9, 0),
        (
            "SENDER NODE",
            each(&|a| {
                model
                    .node(vm, a, Side::Sender)
                    .map_or_else(dash, String::from)
            }),
            20,
            1,
        ),
        (
            "EXIT S/R",
            each(&|a| {
                format!(
                    "{}/{}",
                    code(a.sender.exit_code),
                    code(a.receiver.exit_code)
                )
            }),
            9,
            3,
        ),
        (
            "STARTED",
            each(&|a| {
                a.start_time
                    .map_or_else(dash, |t| format!("{} ago", age(Some(t), now)))
            }),
            14,
            6,
        ),
        (
            "ELAPSED",
            // A running attempt's time is only recorded when it ends.
            each(&|a| elapsed(crate::record::figures::attempt_elapsed(a, now))),
            8,
            2,
        ),
        (
            "BYTES",
            each(&|a| bytes_compact(model.attempt_figures(vm, a).0)),
            10,
            4,
        ),
        (
            "RATE",
            each(&|a| rate_compact(model.attempt_figures(vm, a).1)),
            12,
            5,
        ),
    ];
    let reasons = each(&|a| a.reason.clone().unwrap_or_else(dash));
    // REASON goes fifth and takes the room left.
    let mut needs: Vec<Need> = columns
        .iter()
        .map(|(header, cells, cap, drop)| {
            Need::fixed(
                widest(header, cells.iter().map(String::as_str), *cap),
                *drop,
            )
        })
        .collect();
    needs.insert(4, Need::flex(MIN_REASON));
    let widths = fit(&needs, usize::from(area.width), 1);

    let mut headers: Vec<&str> = columns.iter().map(|c| c.0).collect();
    headers.insert(4, "REASON");
    let mut cells: Vec<&Vec<String>> = columns.iter().map(|c| &c.1).collect();
    cells.insert(4, &reasons);
    let shown: Vec<(usize, usize)> = widths
        .iter()
        .enumerate()
        .filter_map(|(i, w)| w.map(|w| (i, w)))
        .collect();

    let header = Row::new(
        shown
            .iter()
            .map(|&(i, w)| Cell::from(truncate(headers[i], w))),
    )
    .style(Style::new().add_modifier(Modifier::BOLD));
    let rows = attempts.iter().enumerate().map(|(row, attempt)| {
        Row::new(shown.iter().map(|&(i, w)| {
            let text = truncate(cells[i].get(row).map_or("", String::as_str), w);
            if headers[i] == "PHASE" {
                Cell::from(Span::styled(text, attempt_style(attempt.phase)))
            } else {
                Cell::from(text)
            }
        }))
    });
    let constraints = shown
        .iter()
        .map(|&(_, w)| Constraint::Length(u16::try_from(w).unwrap_or(u16::MAX)));
    let table = Table::new(rows, constraints)
        .header(header)
        .column_spacing(1);
    frame.render_widget(table, area);
}
