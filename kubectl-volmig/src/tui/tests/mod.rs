//! The monitor's model and views, on the record fixtures, at a fixed
//! time.

mod render;
mod update;

use jiff::Timestamp;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;

use super::model::{Model, Msg, Scope};
use super::view::draw;
use crate::record::VolumeMigration;

fn fixture(yaml: &str) -> VolumeMigration {
    serde_saphyr::from_str(yaml).expect("fixture parses")
}

/// 3 attempts, the third succeeded; in `prod`.
fn succeeded() -> VolumeMigration {
    fixture(include_str!(
        "../../../tests/fixtures/record/succeeded.yaml"
    ))
}

/// Attempt 1 running; in `staging`, from `db`.
fn running() -> VolumeMigration {
    fixture(include_str!("../../../tests/fixtures/record/running.yaml"))
}

/// Failed for good on attempt 1; in `prod`.
fn failed() -> VolumeMigration {
    fixture(include_str!("../../../tests/fixtures/record/failed.yaml"))
}

/// Attempt 1 failed, attempt 2 running without a driver (no nodes, no
/// bytes recorded for it); in `prod`.
fn retrying() -> VolumeMigration {
    fixture(include_str!("../../../tests/fixtures/record/retrying.yaml"))
}

/// The pod watch's word that `retrying`'s attempt 2 has its pods on nodes:
/// the receiver on node-3, the sender on node-2.
fn retrying_scheduled() -> Msg {
    Msg::Scheduled {
        namespace: "prod".to_string(),
        op: "cache-r2d4t".to_string(),
        attempt: 2,
        receiver: Some("node-3".to_string()),
        sender: Some("node-2".to_string()),
    }
}

fn now() -> Timestamp {
    "2025-03-01T12:00:00Z".parse().expect("timestamp")
}

/// A model of `scope` (focused on `only`) that has the three fixtures and
/// the fixed time.
fn model(scope: Scope, only: Option<&str>) -> Model {
    let mut model = Model::new(scope, only.map(String::from));
    model.update(Msg::Tick(now()));
    model.update(Msg::Records(vec![succeeded(), running(), failed()]));
    model
}

fn key(code: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(code, KeyModifiers::NONE))
}

fn char(c: char) -> Msg {
    key(KeyCode::Char(c))
}

/// The model drawn on a `width` by `height` terminal, as text: one line a
/// row, trailing spaces trimmed.
fn render(model: &Model, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    terminal
        .draw(|frame| draw(frame, model))
        .expect("test terminal draws");
    let buffer = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..buffer.area.height {
        let mut line = String::new();
        let mut hidden = 0;
        for x in 0..buffer.area.width {
            // A wide character hides the cells it covers.
            if hidden > 0 {
                hidden -= 1;
                continue;
            }
            let symbol = buffer[(x, y)].symbol();
            hidden = ratatui::text::Span::raw(symbol).width().saturating_sub(1);
            line.push_str(symbol);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
