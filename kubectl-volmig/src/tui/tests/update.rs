//! Transitions: keys, selection, commands, live progress.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::*;
use crate::record::{Phase, Progress};
use crate::tui::model::{Command, Screen, Side};

fn selected(model: &Model) -> Option<String> {
    model.selected().map(|vm| vm.metadata.name.clone())
}

#[test]
fn rows_are_sorted_and_the_first_is_selected() {
    let model = model(Scope::All, None);
    let names: Vec<&str> = model
        .operations()
        .iter()
        .map(|vm| vm.metadata.name.as_str())
        .collect();
    assert_eq!(names, ["data-x7k2p", "logs-q9z2c", "pg-0-b4n7q"]);
    assert_eq!(selected(&model).as_deref(), Some("data-x7k2p"));
}

#[test]
fn moving_is_clamped_at_both_ends() {
    let mut model = model(Scope::All, None);
    assert_eq!(model.update(char('k')), None);
    assert_eq!(selected(&model).as_deref(), Some("data-x7k2p"));
    model.update(char('j'));
    assert_eq!(selected(&model).as_deref(), Some("logs-q9z2c"));
    model.update(key(KeyCode::Down));
    model.update(char('j'));
    model.update(key(KeyCode::PageDown));
    assert_eq!(selected(&model).as_deref(), Some("pg-0-b4n7q"));
    model.update(key(KeyCode::Up));
    assert_eq!(selected(&model).as_deref(), Some("logs-q9z2c"));
    model.update(key(KeyCode::Home));
    assert_eq!(selected(&model).as_deref(), Some("data-x7k2p"));
    model.update(key(KeyCode::End));
    assert_eq!(selected(&model).as_deref(), Some("pg-0-b4n7q"));
}

#[test]
fn the_selection_follows_its_operation_across_updates() {
    let mut model = model(Scope::All, None);
    model.update(char('j'));
    assert_eq!(selected(&model).as_deref(), Some("logs-q9z2c"));

    // Others come before it and the order changes: still the same one.
    let mut early = running();
    early.metadata.name = "aaa-first".to_string();
    early.metadata.namespace = "prod".to_string();
    model.update(Msg::Records(vec![failed(), early, running(), succeeded()]));
    assert_eq!(model.selected_index(), Some(2));
    assert_eq!(selected(&model).as_deref(), Some("logs-q9z2c"));

    // It goes away: the row where it was is selected.
    model.update(Msg::Records(vec![running(), succeeded()]));
    assert_eq!(selected(&model).as_deref(), Some("pg-0-b4n7q"));

    // Nothing left, then something again.
    model.update(Msg::Records(Vec::new()));
    assert_eq!(model.selected_index(), None);
    assert_eq!(model.update(char('j')), None);
    model.update(Msg::Records(vec![failed()]));
    assert_eq!(selected(&model).as_deref(), Some("logs-q9z2c"));
}

#[test]
fn enter_opens_the_detail_and_esc_or_backspace_closes_it() {
    let mut model = model(Scope::All, None);
    model.update(key(KeyCode::Enter));
    assert_eq!(model.screen(), &Screen::Detail);
    model.update(key(KeyCode::Esc));
    assert_eq!(model.screen(), &Screen::List);
    model.update(key(KeyCode::Enter));
    model.update(key(KeyCode::Backspace));
    assert_eq!(model.screen(), &Screen::List);
}

#[test]
fn an_operation_gone_from_under_its_detail_leaves_for_the_list() {
    let mut model = model(Scope::All, None);
    model.update(key(KeyCode::Enter));
    model.update(Msg::Records(vec![running(), failed()]));
    assert_eq!(model.screen(), &Screen::List);
    assert_eq!(model.notice(), Some("data-x7k2p is gone"));
}

#[test]
fn monitor_op_opens_its_detail_once_it_appears() {
    let mut model = Model::new(Scope::All, Some("pg-0-b4n7q".to_string()));
    model.update(Msg::Records(vec![succeeded()]));
    assert_eq!(model.screen(), &Screen::List);
    model.update(Msg::Records(vec![succeeded(), running()]));
    assert_eq!(model.screen(), &Screen::Detail);
    assert_eq!(selected(&model).as_deref(), Some("pg-0-b4n7q"));
    // Once: back on the list, a new update does not pull the user back.
    model.update(key(KeyCode::Esc));
    model.update(Msg::Records(vec![succeeded(), running()]));
    assert_eq!(model.screen(), &Screen::List);
}

#[test]
fn abort_asks_first_and_y_confirms_it_for_the_right_operation() {
    let mut model = model(Scope::All, None);
    model.update(key(KeyCode::End));
    assert_eq!(model.update(char('a')), None);
    assert!(matches!(model.screen(), Screen::ConfirmAbort { .. }));
    assert_eq!(
        model.update(char('y')),
        Some(Command::Abort {
            namespace: "staging".to_string(),
            op: "pg-0-b4n7q".to_string()
        })
    );
    assert_eq!(model.screen(), &Screen::List);
}

#[test]
fn abort_is_cancelled_by_any_other_key() {
    let mut model = model(Scope::All, None);
    model.update(key(KeyCode::End));
    model.update(key(KeyCode::Enter));
    model.update(char('a'));
    assert_eq!(model.update(char('n')), None);
    assert_eq!(model.screen(), &Screen::Detail);
    model.update(char('a'));
    assert_eq!(model.update(char('q')), None, "q cancels, not quits");
    assert_eq!(model.update(key(KeyCode::Esc)), None);
    assert_eq!(model.screen(), &Screen::List);
}

#[test]
fn a_finished_operation_is_not_offered_for_abort() {
    let mut model = model(Scope::All, None);
    model.update(char('a'));
    assert_eq!(model.screen(), &Screen::List);
    assert_eq!(
        model.notice(),
        Some("data-x7k2p already succeeded; nothing to abort")
    );
}

#[test]
fn resume_runs_unless_the_operation_succeeded() {
    let mut model = model(Scope::All, None);
    assert_eq!(model.update(char('r')), None);
    assert_eq!(
        model.notice(),
        Some("data-x7k2p already succeeded; nothing to resume")
    );
    model.update(char('j'));
    assert_eq!(
        model.update(char('r')),
        Some(Command::Resume {
            namespace: "prod".to_string(),
            op: "logs-q9z2c".to_string()
        })
    );
}

#[test]
fn q_and_ctrl_c_quit_from_any_screen() {
    let mut model = model(Scope::All, None);
    assert_eq!(model.update(char('q')), Some(Command::Quit));
    model.update(key(KeyCode::Enter));
    assert_eq!(model.update(char('q')), Some(Command::Quit));
    let ctrl_c = Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    model.update(key(KeyCode::End));
    model.update(char('a'));
    assert!(matches!(model.screen(), Screen::ConfirmAbort { .. }));
    assert_eq!(model.update(ctrl_c), Some(Command::Quit));
    assert_eq!(model.update(char('c')), None);
}

#[test]
fn l_opens_the_logs_and_asks_the_loop_for_them() {
    let mut model = model(Scope::All, None);
    model.update(key(KeyCode::Enter));
    assert_eq!(
        model.update(char('l')),
        Some(Command::ShowLogs {
            namespace: "prod".to_string(),
            op: "data-x7k2p".to_string()
        })
    );
    // Scrolling stops at the oldest line (the record holds two).
    model.update(key(KeyCode::PageUp));
    assert!(matches!(model.screen(), Screen::Logs { from_end: 1, .. }));
    model.update(key(KeyCode::End));
    assert!(matches!(model.screen(), Screen::Logs { from_end: 0, .. }));
    model.update(key(KeyCode::Esc));
    assert_eq!(model.screen(), &Screen::Detail);
}

fn live(done: u64, updated: &str) -> Msg {
    Msg::Progress {
        namespace: "staging".to_string(),
        op: "pg-0-b4n7q".to_string(),
        attempt: 1,
        progress: Progress {
            bytes_done: done,
            bytes_total: 53687091200,
            listing_done: true,
            rate: 80_000_000,
            updated: Some(updated.parse().expect("timestamp")),
            ..Progress::default()
        },
    }
}

#[test]
fn live_progress_wins_while_it_is_the_freshest() {
    let mut model = model(Scope::All, None);
    let pg = |model: &Model| {
        let vm = model.operations()[2].clone();
        model.progress(&vm).map(|p| p.bytes_done)
    };
    assert_eq!(pg(&model), Some(22548578304));
    model.update(live(32212254720, "2025-03-01T12:00:01Z"));
    assert_eq!(pg(&model), Some(32212254720));
    // Older than the record: the record's.
    model.update(live(1, "2025-03-01T11:00:00Z"));
    assert_eq!(pg(&model), Some(22548578304));
    // The operation ended: the record's, whatever the receiver said last.
    model.update(live(32212254720, "2025-03-01T12:00:01Z"));
    let mut done = running();
    done.status.phase = Phase::Failed;
    model.update(Msg::Records(vec![succeeded(), failed(), done]));
    assert_eq!(pg(&model), Some(22548578304));
}

#[test]
fn the_running_attempt_has_the_header_s_bytes_and_its_sender_s_node_early() {
    let mut model = Model::new(Scope::Namespace("prod".to_string()), None);
    model.update(Msg::Records(vec![retrying()]));
    let vm = model.operations()[0].clone();
    let (first, second) = (&vm.status.attempts[0], &vm.status.attempts[1]);
    // Nothing live yet: attempt 2 reads the overall progress the header
    // shows, not the 0 bytes its record has.
    assert_eq!(second.bytes_done, 0);
    assert_eq!(
        model.progress(&vm).map(|p| p.bytes_done),
        Some(6_442_450_944)
    );
    assert_eq!(model.attempt_figures(&vm, second).0, 6_442_450_944);
    assert_eq!(model.node(&vm, second, Side::Sender), None);

    // The sender's placement pins it: that node, before the pod exists.
    let mut pinned = retrying();
    if let Some(placement) = pinned.status.placement.as_mut() {
        placement.sender.node = Some("node-1".to_string());
    }
    model.update(Msg::Records(vec![pinned]));
    let vm = model.operations()[0].clone();
    let second = &vm.status.attempts[1];
    assert_eq!(model.node(&vm, second, Side::Sender), Some("node-1"));

    // Scheduled: where the pod watch saw it; the list says so too.
    model.update(retrying_scheduled());
    assert_eq!(model.node(&vm, second, Side::Sender), Some("node-2"));
    assert_eq!(model.node(&vm, second, Side::Receiver), Some("node-3"));
    assert_eq!(model.sender_node(&vm), Some("node-2"));
    // The ended attempt keeps its own figures and node.
    assert_eq!(
        model.attempt_figures(&vm, first),
        (6_442_450_944, 31_457_280)
    );
    assert_eq!(model.node(&vm, first, Side::Sender), Some("node-1"));

    // Once the attempt is over, only the record speaks for it.
    let mut ended = retrying();
    ended.status.phase = Phase::Failed;
    ended.status.attempts[1].phase = crate::record::AttemptPhase::Failed;
    model.update(Msg::Records(vec![ended]));
    let vm = model.operations()[0].clone();
    let second = &vm.status.attempts[1];
    assert_eq!(model.node(&vm, second, Side::Sender), None);
    assert_eq!(model.attempt_figures(&vm, second), (0, 0));
}
