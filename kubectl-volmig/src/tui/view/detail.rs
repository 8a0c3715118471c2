//! The detail screen: one operation's progress, claims, placement, phase
//! timeline, message, attempt history and log tail, top to bottom; what
//! does not fit at the bottom is left out.

use std::fmt::Write as _;

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::symbols::line;
use ratatui::text::{Line, Span};
use ratatui::widgets::{LineGauge, Paragraph};
use ratatui::Frame;

use super::cells::{attempts, bytes, elapsed, eta, percent, phase_style, rate, ratio};
use super::history;
use super::logs::{log_block, styled};
use super::text::wrap;
use crate::plan::{ClaimAction, NodePlacement};
use crate::record::{Phase, Progress, VolumeMigration};
use crate::tui::model::{LogSource, Model, Side};

/// Where values start after their key.
const KEY: usize = 12;
/// The least room worth a log box: its borders and a line.
const MIN_LOG: u16 = 3;

/// `vm` in full, in `area`.
pub(super) fn draw(frame: &mut Frame, area: Rect, model: &Model, vm: &VolumeMigration) {
    let width = usize::from(area.width);
    let mut stack = Stack { area, used: 0 };
    stack.lines(frame, vec![title(vm)]);

    match model.progress(vm) {
        Some(p) => {
            let gauge = LineGauge::default()
                .ratio(ratio(p.bytes_done, p.bytes_total))
                .label(Line::from(vec![
                    key("Progress"),
                    Span::raw(format!("{:>3}%", percent(p.bytes_done, p.bytes_total))),
                ]))
                .filled_symbol(line::THICK_HORIZONTAL)
                .unfilled_symbol(line::HORIZONTAL)
                .filled_style(phase_style(vm.status.phase));
            frame.render_widget(gauge, stack.take(1));
            let running = vm.status.phase == Phase::Running;
            stack.lines(frame, field("", &amounts(p, running, model), width));
            if let Some(current) = p.current.as_deref().filter(|_| running) {
                stack.lines(frame, field("Current", current, width));
            }
        }
        None => stack.lines(frame, field("Progress", "none yet", width)),
    }

    stack.lines(frame, field("Claims", &claims(vm), width));
    if let Some(placement) = &vm.status.placement {
        let last = vm.status.attempts.last();
        let pod = |side| {
            let a = last?;
            let name = match side {
                Side::Receiver => &a.receiver.name,
                Side::Sender => &a.sender.name,
            };
            Some((name.as_str(), model.node(vm, a, side)))
        };
        let sender = placed(&placement.sender, pod(Side::Sender));
        stack.lines(frame, field("Sender", &sender, width));
        let receiver = placed(&placement.receiver, pod(Side::Receiver));
        stack.lines(frame, field("Receiver", &receiver, width));
    }
    match &vm.status.cutover {
        Some(c) => {
            let line = crate::record::print::cutover_line(c, model.now());
            stack.lines(frame, field("Phases", &line, width));
        }
        None => {
            let phases = Line::from(vec![key("Phases"), Span::raw("copy only (no --cutover)")])
                .style(Style::new().add_modifier(Modifier::DIM));
            stack.lines(frame, vec![phases]);
        }
    }
    if let Some(message) = &vm.status.message {
        stack.lines(frame, field("Message", message, width));
    }

    let budget = attempts(vm);
    let mut count = if vm.status.attempts.is_empty() {
        "none yet".to_string()
    } else {
        budget.count()
    };
    if budget.replaced > 0 {
        let _ = write!(
            count,
            " (and {} replaced to follow the app)",
            budget.replaced
        );
    }
    stack.lines(frame, field("Attempts", &count, width));
    if !vm.status.attempts.is_empty() {
        let rows = vm.status.attempts.len() + 1;
        let table = stack.take(rows);
        history::draw(frame, table, model, vm);
    }

    let rest = stack.rest();
    if rest.height >= MIN_LOG {
        let source = model.log_source(vm);
        let block = log_block(source);
        let inner = block.inner(rest);
        let lines = source.lines();
        let skip = lines.len().saturating_sub(usize::from(inner.height));
        let text: Vec<Line> = match source {
            LogSource::None => vec![Line::styled(
                "No log lines yet.",
                Style::new().add_modifier(Modifier::DIM),
            )],
            _ => lines[skip..].iter().map(|l| styled(l)).collect(),
        };
        frame.render_widget(Paragraph::new(text).block(block), rest);
    }
}

/// Rows handed out top to bottom; none once the area is full.
struct Stack {
    area: Rect,
    used: u16,
}

impl Stack {
    fn take(&mut self, rows: usize) -> Rect {
        let left = self.area.height - self.used;
        let height = u16::try_from(rows).unwrap_or(u16::MAX).min(left);
        let rect = Rect {
            y: self.area.y + self.used,
            height,
            ..self.area
        };
        self.used += height;
        rect
    }

    fn lines(&mut self, frame: &mut Frame, lines: Vec<Line<'static>>) {
        let rect = self.take(lines.len());
        frame.render_widget(Paragraph::new(lines), rect);
    }

    fn rest(&mut self) -> Rect {
        self.take(usize::from(self.area.height))
    }
}

/// `data-x7k2p (prod)  Succeeded`.
fn title(vm: &VolumeMigration) -> Line<'static> {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    Line::from(vec![
        Span::styled(vm.metadata.name.clone(), bold),
        Span::raw(format!(" ({})  ", vm.metadata.namespace)),
        Span::styled(
            vm.status.phase.as_str(),
            phase_style(vm.status.phase).add_modifier(Modifier::BOLD),
        ),
    ])
}

fn key(name: &str) -> Span<'static> {
    Span::styled(
        format!("{name:<KEY$}"),
        Style::new().add_modifier(Modifier::BOLD),
    )
}

/// `Key         value`, the value wrapped under itself.
fn field(name: &str, value: &str, width: usize) -> Vec<Line<'static>> {
    wrap(value, width.saturating_sub(KEY))
        .into_iter()
        .enumerate()
        .map(|(i, text)| {
            let head = if i == 0 { key(name) } else { key("") };
            Line::from(vec![head, Span::raw(text)])
        })
        .collect()
}

/// `21.0 GiB of 50.0 GiB, 812 of 2044 files, 74.2 MiB/s, ETA 6m38s`; the
/// rate and ETA only while it runs.
fn amounts(p: &Progress, running: bool, model: &Model) -> String {
    let mut out = if p.listing_done {
        format!(
            "{} of {}, {} of {} files",
            bytes(p.bytes_done),
            bytes(p.bytes_total),
            p.files_done,
            p.files_total
        )
    } else {
        format!(
            "{} of {} so far, {} of {} files so far (still listing)",
            bytes(p.bytes_done),
            bytes(p.bytes_total),
            p.files_done,
            p.files_total
        )
    };
    if running {
        if p.rate > 0 {
            let _ = write!(out, ", {}", rate(p.rate));
        }
        if let Some(left) = eta(p, model.now()) {
            let _ = write!(out, ", ETA {}", elapsed(left as f64));
        }
    }
    out
}

/// `prod/data (standard, 10Gi) → prod/data-fast (fast, 20Gi)`.
fn claims(vm: &VolumeMigration) -> String {
    let source = match &vm.status.source {
        Some(s) => format!(
            "{} ({}, {})",
            vm.spec.source,
            s.storage_class.as_deref().unwrap_or("no class"),
            s.capacity
        ),
        None => vm.spec.source.to_string(),
    };
    let destination = match &vm.status.destination {
        Some(d) => {
            let reused = match d.action {
                ClaimAction::Create => "",
                ClaimAction::Reuse => ", reused",
            };
            format!(
                "{}/{} ({}, {}{reused})",
                d.namespace,
                d.name,
                d.storage_class.as_deref().unwrap_or("default class"),
                d.size
            )
        }
        None => format!(
            "{}/{}",
            vm.spec.destination.namespace, vm.spec.destination.name
        ),
    };
    format!("{source} → {destination}")
}

/// `node-2: the app pod web-0 mounts ...`: the node it is placed on, else
/// the one the scheduler chose, else `any node`; then why.
/// `node (pod NAME): reason`, the pod (its name and node) being the latest
/// attempt's.
fn placed(p: &NodePlacement, pod: Option<(&str, Option<&str>)>) -> String {
    let scheduled = pod.and_then(|(_, node)| node);
    let node = p.node.as_deref().or(scheduled).unwrap_or("any node");
    match pod.filter(|(name, _)| !name.is_empty()) {
        Some((name, _)) => format!("{node} (pod {name}): {}", p.reason),
        None => format!("{node}: {}", p.reason),
    }
}
