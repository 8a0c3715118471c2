//! Rendering: a pure function of the [`Model`]. Every screen fits any
//! terminal size, clipping or leaving parts out rather than overflowing;
//! time comes from [`Model::now`], never the clock.
//!
//! - [`list`]: every operation, one row each;
//! - [`detail`]: one operation in full ([`history`]: its attempts);
//! - [`logs`]: one operation's log lines, scrollable;
//! - here: the notice and help lines, and the abort confirmation.

mod cells;
mod columns;
mod detail;
mod history;
mod list;
mod logs;
mod text;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Padding, Paragraph};
use ratatui::Frame;

use super::model::{Model, OpKey, Screen};

/// Draws the model's current screen over the whole frame.
pub fn draw(frame: &mut Frame, model: &Model) {
    let [body, notice, help] = Layout::vertical([
        Constraint::Fill(1),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let screen = model.screen();
    let base = match screen {
        Screen::ConfirmAbort { over, .. } => over.as_ref(),
        other => other,
    };
    let shown = match (base, model.selected()) {
        (Screen::Detail, Some(vm)) => {
            detail::draw(frame, body, model, vm);
            Help::Detail
        }
        (Screen::Logs { from_end, .. }, Some(vm)) => {
            logs::draw(frame, body, model, vm, *from_end);
            Help::Logs
        }
        _ => {
            list::draw(frame, body, model);
            Help::List
        }
    };
    if let Some(text) = model.notice() {
        let line = Line::from(text::truncate(text, usize::from(notice.width)));
        frame.render_widget(
            Paragraph::new(line.style(Style::new().fg(Color::Yellow))),
            notice,
        );
    }
    frame.render_widget(Paragraph::new(shown.line()), help);
    if let Screen::ConfirmAbort { op, .. } = screen {
        confirm_abort(frame, frame.area(), op);
    }
}

/// The keys each screen takes.
#[derive(Debug, Clone, Copy)]
enum Help {
    List,
    Detail,
    Logs,
}

impl Help {
    fn line(self) -> Line<'static> {
        let keys: &[(&str, &str)] = match self {
            Help::List => &[
                ("↑↓/jk", "move"),
                ("Enter", "details"),
                ("l", "logs"),
                ("a", "abort"),
                ("r", "resume"),
                ("q", "quit"),
            ],
            Help::Detail => &[
                ("Esc", "back"),
                ("↑↓/jk", "next op"),
                ("l", "logs"),
                ("a", "abort"),
                ("r", "resume"),
                ("q", "quit"),
            ],
            Help::Logs => &[
                ("Esc", "back"),
                ("↑↓/jk", "scroll"),
                ("PgUp/PgDn", "page"),
                ("Home/End", "top/follow"),
                ("q", "quit"),
            ],
        };
        let mut spans = Vec::new();
        for (i, (key, what)) in keys.iter().enumerate() {
            if i > 0 {
                spans.push(Span::raw("  "));
            }
            spans.push(Span::styled(
                *key,
                Style::new().add_modifier(Modifier::BOLD),
            ));
            spans.push(Span::raw(format!(" {what}")));
        }
        Line::from(spans)
    }
}

/// "Abort OP? The destination keeps its data. y/n", centred over `area`.
fn confirm_abort(frame: &mut Frame, area: Rect, op: &OpKey) {
    let question = format!("Abort {}? The destination keeps its data. y/n", op.name);
    let inner_width = usize::from(area.width.saturating_sub(4)).min(46);
    let lines: Vec<Line> = text::wrap(&question, inner_width)
        .into_iter()
        .map(Line::from)
        .collect();
    let width = u16::try_from(inner_width + 4).unwrap_or(u16::MAX);
    let height = u16::try_from(lines.len() + 2).unwrap_or(u16::MAX);
    let popup = centered(area, width, height);
    let block = Block::bordered()
        .title(" Abort ")
        .border_style(Style::new().fg(Color::Yellow));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(block.padding(Padding::horizontal(1))),
        popup,
    );
}

/// A `width` by `height` rectangle in the middle of `area`, within it.
fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}
