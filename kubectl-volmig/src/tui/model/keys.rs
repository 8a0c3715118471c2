//! Keys: what each one does on each screen.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::{Back, Command, Model, OpKey, Screen};
use crate::record::Phase;

/// Rows (or log lines) that PageUp and PageDown move by.
const PAGE: usize = 10;

impl Model {
    pub(super) fn key(&mut self, key: KeyEvent) -> Option<Command> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Some(Command::Quit);
        }
        match self.screen.clone() {
            Screen::ConfirmAbort { op, over } => {
                self.screen = *over;
                if matches!(key.code, KeyCode::Char('y' | 'Y')) {
                    self.notice = Some(format!("aborting {}...", op.name));
                    return Some(Command::Abort {
                        namespace: op.namespace,
                        op: op.name,
                    });
                }
                self.notice = Some(format!("{} not aborted", op.name));
                None
            }
            Screen::List => match key.code {
                KeyCode::Enter if self.selected.is_some() => {
                    self.screen = Screen::Detail;
                    None
                }
                _ => self.common(key.code, Back::List),
            },
            Screen::Detail => match key.code {
                KeyCode::Esc | KeyCode::Backspace => {
                    self.screen = Screen::List;
                    None
                }
                _ => self.common(key.code, Back::Detail),
            },
            Screen::Logs { from_end, back } => self.logs_key(key.code, from_end, back),
        }
    }

    /// Keys of the list and the detail: moving the selection and acting on
    /// the selected operation.
    fn common(&mut self, code: KeyCode, back: Back) -> Option<Command> {
        let last = self.ops.len().saturating_sub(1);
        let at = self.selected_index().unwrap_or(0);
        match code {
            KeyCode::Char('q') => return Some(Command::Quit),
            KeyCode::Up | KeyCode::Char('k') => self.select(at.saturating_sub(1)),
            KeyCode::Down | KeyCode::Char('j') => self.select((at + 1).min(last)),
            KeyCode::PageUp => self.select(at.saturating_sub(PAGE)),
            KeyCode::PageDown => self.select((at + PAGE).min(last)),
            KeyCode::Home | KeyCode::Char('g') => self.select(0),
            KeyCode::End | KeyCode::Char('G') => self.select(last),
            KeyCode::Char('l') => return self.open_logs(back),
            KeyCode::Char('a') => self.ask_abort(),
            KeyCode::Char('r') => return self.resume(),
            _ => {}
        }
        None
    }

    /// Keys of the logs screen: scrolling, and back.
    fn logs_key(&mut self, code: KeyCode, from_end: usize, back: Back) -> Option<Command> {
        let len = self
            .selected()
            .map_or(0, |vm| self.full_log_source(vm).lines().len());
        let top = len.saturating_sub(1);
        let from_end = match code {
            KeyCode::Esc | KeyCode::Backspace => {
                self.screen = match back {
                    Back::List => Screen::List,
                    Back::Detail => Screen::Detail,
                };
                return None;
            }
            KeyCode::Char('q') => return Some(Command::Quit),
            KeyCode::Char('a') => {
                self.ask_abort();
                return None;
            }
            KeyCode::Char('r') => return self.resume(),
            KeyCode::Up | KeyCode::Char('k') => (from_end + 1).min(top),
            KeyCode::Down | KeyCode::Char('j') => from_end.saturating_sub(1),
            KeyCode::PageUp => (from_end + PAGE).min(top),
            KeyCode::PageDown => from_end.saturating_sub(PAGE),
            KeyCode::Home | KeyCode::Char('g') => top,
            KeyCode::End | KeyCode::Char('G') => 0,
            _ => from_end,
        };
        self.screen = Screen::Logs { from_end, back };
        None
    }

    fn select(&mut self, index: usize) {
        if let Some(vm) = self.ops.get(index) {
            self.selected = Some(OpKey::of(vm));
        }
    }

    fn open_logs(&mut self, back: Back) -> Option<Command> {
        let key = self.selected.clone()?;
        self.screen = Screen::Logs { from_end: 0, back };
        Some(Command::ShowLogs {
            namespace: key.namespace,
            op: key.name,
        })
    }

    /// Asks "Abort OP?", unless the operation is over already.
    fn ask_abort(&mut self) {
        let Some(vm) = self.selected() else {
            return;
        };
        let name = &vm.metadata.name;
        let over = match vm.status.phase {
            Phase::Pending | Phase::Running => None,
            Phase::Succeeded => Some("already succeeded"),
            Phase::Failed => Some("already failed"),
            Phase::Aborted => Some("already aborted"),
            Phase::RolledBack => Some("already rolled back"),
        };
        if let Some(over) = over {
            self.notice = Some(format!("{name} {over}; nothing to abort"));
            return;
        }
        let op = OpKey::of(vm);
        let over = Box::new(self.screen.clone());
        self.screen = Screen::ConfirmAbort { op, over };
    }

    fn resume(&mut self) -> Option<Command> {
        let vm = self.selected()?;
        let name = vm.metadata.name.clone();
        if vm.status.phase == Phase::Succeeded {
            self.notice = Some(format!("{name} already succeeded; nothing to resume"));
            return None;
        }
        // A live driver sees it through; a second one would only follow it.
        if let Some(d) = vm.status.driver.as_ref().filter(|d| d.is_live(self.now)) {
            self.notice = Some(format!(
                "{name} is driven by {}; nothing to resume",
                d.holder
            ));
            return None;
        }
        let namespace = vm.metadata.namespace.clone();
        self.notice = Some(format!("resuming {name}..."));
        Some(Command::Resume {
            namespace,
            op: name,
        })
    }
}
