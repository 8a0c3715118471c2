//! The logs screen: one operation's log lines, full height, following the
//! newest unless scrolled up; and the log box helpers the detail shares.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

use crate::record::VolumeMigration;
use crate::tui::model::{LogSource, Model};

/// `vm`'s log lines in `area`, `from_end` lines up from the newest.
pub(super) fn draw(
    frame: &mut Frame,
    area: Rect,
    model: &Model,
    vm: &VolumeMigration,
    from_end: usize,
) {
    let source = model.full_log_source(vm);
    let lines = source.lines();
    let where_ = if from_end == 0 {
        " following ".to_string()
    } else {
        format!(" {from_end} lines up ")
    };
    let block = log_block(source)
        .title(Line::from(format!(
            " {} ({}) ",
            vm.metadata.name, vm.metadata.namespace
        )))
        .title_bottom(Line::from(where_).right_aligned());
    let inner = block.inner(area);
    let height = usize::from(inner.height);
    let end = lines
        .len()
        .saturating_sub(from_end)
        .max(height.min(lines.len()));
    let start = end.saturating_sub(height);
    let text: Vec<Line> = if lines.is_empty() {
        vec![Line::styled(
            "No log lines yet.",
            Style::new().add_modifier(Modifier::DIM),
        )]
    } else {
        lines[start..end].iter().map(|l| styled(l)).collect()
    };
    frame.render_widget(Paragraph::new(text).block(block), area);
}

/// A bordered box titled by where its lines come from.
pub(super) fn log_block(source: LogSource<'_>) -> Block<'static> {
    let title = match source {
        LogSource::Live(_) => " Log (live) ".to_string(),
        LogSource::Full(_) => " Log (latest attempt) ".to_string(),
        LogSource::Recorded(attempt) => format!(" Log tail (attempt {}) ", attempt.number),
        LogSource::None => " Log ".to_string(),
    };
    Block::bordered().title(title)
}

/// A log line with its `receiver: ` or `sender: ` prefix coloured.
pub(super) fn styled(line: &str) -> Line<'static> {
    for (prefix, color) in [("receiver: ", Color::Cyan), ("sender: ", Color::Magenta)] {
        if let Some(rest) = line.strip_prefix(prefix) {
            return Line::from(vec![
                Span::styled(prefix, Style::new().fg(color)),
                Span::raw(rest.to_string()),
            ]);
        }
    }
    Line::from(line.to_string())
}
