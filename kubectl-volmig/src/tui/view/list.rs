//! The list screen: a summary line, then one row per operation.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, HighlightSpacing, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use super::cells::{attempts, bar, claim, elapsed, eta, phase_style, rate_compact};
use super::columns::{fit, widest, Need};
use super::text::{truncate, wrap};
use crate::record::print::group::sum_progress;
use crate::record::{Phase, Progress, VolumeMigration};
use crate::tui::model::{Model, Scope};

/// Marks the selected row.
const SELECTED: &str = "> ";
/// A progress bar needs at least `[##]  42%`.
const MIN_BAR: usize = 12;

/// The list in `area`.
pub(super) fn draw(frame: &mut Frame, area: Rect, model: &Model) {
    let [summary, body] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    frame.render_widget(
        Paragraph::new(summary_line(model)).style(Style::new().add_modifier(Modifier::BOLD)),
        summary,
    );
    if model.operations().is_empty() {
        let lines: Vec<Line> = wrap(&empty_message(model), usize::from(body.width))
            .into_iter()
            .map(Line::from)
            .collect();
        frame.render_widget(Paragraph::new(lines), body);
        return;
    }
    table(frame, body, model);
}

/// `3 operations in prod: 1 running, 1 succeeded, 1 failed`.
fn summary_line(model: &Model) -> String {
    let place = match model.scope() {
        Scope::Namespace(ns) => ns.as_str(),
        Scope::All => "all namespaces",
    };
    if !model.loaded() {
        return format!("Loading operations in {place}...");
    }
    let ops = model.operations();
    let noun = if ops.len() == 1 {
        "operation"
    } else {
        "operations"
    };
    let mut out = format!("{} {noun} in {place}", ops.len());
    let phases = [
        Phase::Pending,
        Phase::Running,
        Phase::Succeeded,
        Phase::Failed,
        Phase::Aborted,
    ];
    let counts: Vec<String> = phases
        .iter()
        .filter_map(|phase| {
            let n = ops.iter().filter(|vm| vm.status.phase == *phase).count();
            (n > 0).then(|| format!("{n} {}", phase.as_str().to_lowercase()))
        })
        .collect();
    if !counts.is_empty() {
        out.push_str(": ");
        out.push_str(&counts.join(", "));
    }
    if let Some(op) = model.awaited() {
        out.push_str(&format!("; waiting for {op}"));
    }
    out
}

/// What to say when there is nothing to list.
fn empty_message(model: &Model) -> String {
    if !model.loaded() {
        return String::new();
    }
    let place = match model.scope() {
        Scope::Namespace(ns) => format!("namespace {ns}"),
        Scope::All => "any namespace".to_string(),
    };
    match model.awaited() {
        Some(op) => format!("No operation {op} in {place} yet: waiting for it to appear."),
        None => {
            format!("No operations in {place}. Start one with kubectl volmig migrate SOURCE_PVC")
        }
    }
}

/// A column: its header and text cells, or the progress bars (drawn once
/// the column's width is known).
struct Column {
    header: &'static str,
    cells: Option<Vec<String>>,
    need: Need,
}

impl Column {
    /// At least `width` wide, so that the columns right of it stay put
    /// while its values change length.
    fn at_least(mut self, width: usize) -> Column {
        self.need.width = self.need.width.max(width);
        self
    }

    fn text(header: &'static str, cells: Vec<String>, cap: usize, drop: u8) -> Column {
        let width = widest(header, cells.iter().map(String::as_str), cap);
        Column {
            header,
            cells: Some(cells),
            need: Need::fixed(width, drop),
        }
    }
}

fn table(frame: &mut Frame, area: Rect, model: &Model) {
    let ops = model.operations();
    let now = model.now();
    let progress: Vec<Option<&Progress>> = ops.iter().map(|vm| model.progress(vm)).collect();
    let running = |vm: &VolumeMigration| vm.status.phase == Phase::Running;
    let any_running = ops.iter().any(&running);
    let each = |f: &dyn Fn(usize, &VolumeMigration) -> String| -> Vec<String> {
        ops.iter().enumerate().map(|(i, vm)| f(i, vm)).collect()
    };

    let mut columns = Vec::new();
    if *model.scope() == Scope::All {
        columns.push(Column::text(
            "NAMESPACE",
            each(&|_, vm| vm.metadata.namespace.clone()),
            20,
            1,
        ));
    }
    columns.push(Column::text(
        "NAME",
        each(&|_, vm| vm.metadata.name.clone()),
        30,
        0,
    ));
    columns.push(Column::text(
        "PHASE",
        each(&|_, vm| vm.status.phase.as_str().to_string()),
        9,
        0,
    ));
    columns.push(Column {
        header: "PROGRESS",
        cells: None,
        need: Need::flex(MIN_BAR),
    });
    columns.push(
        Column::text(
            "RATE",
            each(&|i, vm| match progress[i] {
                Some(p) if running(vm) => rate_compact(p.rate),
                _ => "-".to_string(),
            }),
            12,
            3,
        )
        .at_least(if any_running { "1023.9KiB/s".len() } else { 0 }),
    );
    columns.push(
        Column::text(
            "ETA",
            each(&|i, vm| {
                let left = progress[i]
                    .filter(|_| running(vm))
                    .and_then(|p| eta(p, now));
                left.map_or("-".to_string(), |s| elapsed(s as f64))
            }),
            8,
            4,
        )
        .at_least(if any_running { "59m59s".len() } else { 0 }),
    );
    columns.push(Column::text(
        "ATTEMPT",
        each(&|_, vm| attempts(vm).cell()),
        8,
        2,
    ));
    columns.push(Column::text(
        "SOURCE → DESTINATION",
        each(&|_, vm| {
            let (spec, here) = (&vm.spec, &vm.metadata.namespace);
            let source = claim(&spec.source.namespace, &spec.source.name, here);
            let destination = claim(&spec.destination.namespace, &spec.destination.name, here);
            format!("{source} → {destination}")
        }),
        40,
        5,
    ));
    columns.push(Column::text(
        "NODE",
        each(&|_, vm| model.sender_node(vm).unwrap_or("-").to_string()),
        20,
        6,
    ));

    let room = usize::from(area.width).saturating_sub(SELECTED.len());
    let needs: Vec<Need> = columns.iter().map(|c| c.need).collect();
    let widths = fit(&needs, room, 1);
    let shown: Vec<(&Column, usize)> = columns
        .iter()
        .zip(&widths)
        .filter_map(|(c, w)| w.map(|w| (c, w)))
        .collect();

    let header = Row::new(
        shown
            .iter()
            .map(|(c, w)| Cell::from(truncate(c.header, *w))),
    )
    .style(Style::new().add_modifier(Modifier::BOLD));
    let lines = lines(ops, &progress);
    let rows = lines.iter().map(|line| match line {
        ListRow::Set(set) => Row::new(shown.iter().map(|(column, w)| {
            let text = truncate(&set.cell(column.header), *w);
            match column.header {
                "PHASE" => Cell::from(Span::styled(text, phase_style(set.phase))),
                "PROGRESS" => Cell::from(
                    set.progress
                        .as_ref()
                        .map_or("-".to_string(), |p| bar(p, *w)),
                ),
                _ => Cell::from(text),
            }
        }))
        .style(Style::new().add_modifier(Modifier::BOLD)),
        ListRow::Op(i) => {
            let (i, vm) = (*i, &ops[*i]);
            Row::new(shown.iter().map(|(column, w)| match &column.cells {
                Some(cells) => {
                    let cell = cells.get(i).map_or("", String::as_str);
                    // A set's claims stand under its row.
                    let cell = match (column.header, &vm.metadata.group) {
                        ("NAME", Some(_)) => format!("  {cell}"),
                        _ => cell.to_string(),
                    };
                    let text = truncate(&cell, *w);
                    if column.header == "PHASE" {
                        Cell::from(Span::styled(text, phase_style(vm.status.phase)))
                    } else {
                        Cell::from(text)
                    }
                }
                None => Cell::from(progress[i].map_or("-".to_string(), |p| bar(p, *w))),
            }))
        }
    });
    let constraints = shown
        .iter()
        .map(|(_, w)| Constraint::Length(u16::try_from(*w).unwrap_or(u16::MAX)));
    let table = Table::new(rows, constraints)
        .header(header)
        .column_spacing(1)
        .highlight_symbol(SELECTED)
        .highlight_spacing(HighlightSpacing::Always)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let selected = model.selected_index().and_then(|s| {
        lines
            .iter()
            .position(|l| matches!(l, ListRow::Op(i) if *i == s))
    });
    let mut state = TableState::default().with_selected(selected);
    frame.render_stateful_widget(table, area, &mut state);
}

/// A row of the list: a set of claims (before its first claim), or an
/// operation (by index).
enum ListRow {
    Set(SetRow),
    Op(usize),
}

/// A set's row, worked out from its claims' records.
struct SetRow {
    namespace: String,
    name: String,
    phase: Phase,
    progress: Option<Progress>,
    claims: usize,
}

impl SetRow {
    fn cell(&self, header: &str) -> String {
        match header {
            "NAMESPACE" => self.namespace.clone(),
            "NAME" => self.name.clone(),
            "PHASE" => self.phase.as_str().to_string(),
            "RATE" if self.phase == Phase::Running => self
                .progress
                .as_ref()
                .map_or("-".to_string(), |p| rate_compact(p.rate)),
            "SOURCE → DESTINATION" => format!("{} claims", self.claims),
            _ => "-".to_string(),
        }
    }
}

/// The rows: each operation in order, a set's row before its first claim.
fn lines(ops: &[VolumeMigration], progress: &[Option<&Progress>]) -> Vec<ListRow> {
    let mut out = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (i, vm) in ops.iter().enumerate() {
        if let Some(g) = &vm.metadata.group {
            let key = (g.namespace.as_str(), g.name.as_str());
            if !seen.contains(&key) {
                seen.push(key);
                let of_set = |o: &&VolumeMigration| {
                    o.metadata
                        .group
                        .as_ref()
                        .is_some_and(|h| h.name == g.name && h.namespace == g.namespace)
                };
                let members: Vec<usize> = (0..ops.len()).filter(|j| of_set(&&ops[*j])).collect();
                let phases: Vec<Phase> = members.iter().map(|j| ops[*j].status.phase).collect();
                let total = sum_progress(
                    members
                        .iter()
                        .map(|j| (progress[*j], ops[*j].status.phase == Phase::Running)),
                );
                out.push(ListRow::Set(SetRow {
                    namespace: g.namespace.clone(),
                    name: g.name.clone(),
                    phase: crate::record::group::phase_of(&phases),
                    progress: total,
                    claims: members.len(),
                }));
            }
        }
        out.push(ListRow::Op(i));
    }
    out
}
