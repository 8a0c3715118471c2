//! The monitor's state and its transitions, Elm style: a [`Msg`] in, a new
//! state and maybe a [`Command`] for the event loop out. No I/O, no
//! terminal, no clock: time arrives as [`Msg::Tick`], so every transition
//! (and every render of the state) is reproducible in tests.

mod keys;

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;
use ratatui::crossterm::event::KeyEvent;

use crate::record::{Attempt, Phase, Progress, VolumeMigration};

/// Which operations the monitor watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The records in one namespace (`-n`, or the context's).
    Namespace(String),
    /// The records in every namespace (`-A`).
    All,
}

/// What happened: the feeds' news, the user's keys, and time.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    /// The full current set of records in scope (sent after any record
    /// change).
    Records(Vec<VolumeMigration>),
    /// Live progress of an operation's running attempt, from the receiver's
    /// log (fresher than the record's, which is written every 5 s).
    Progress {
        namespace: String,
        op: String,
        attempt: u32,
        progress: Progress,
    },
    /// Where attempt `attempt`'s pods run, from the pod watch (their
    /// `spec.nodeName`), as soon as the scheduler has placed them: the
    /// record may say so seconds later, or (no driver) only when the
    /// attempt ends. `None`: not scheduled yet, or no pod yet.
    Scheduled {
        namespace: String,
        op: String,
        attempt: u32,
        receiver: Option<String>,
        sender: Option<String>,
    },
    /// The last lines of attempt `attempt`'s pods' logs (receiver and
    /// sender, prefixed `receiver: ` / `sender: `), while it runs.
    LogTail {
        namespace: String,
        op: String,
        attempt: u32,
        lines: Vec<String>,
    },
    /// The whole logs of an operation's latest attempt, for the logs screen
    /// (asked for by [`Command::ShowLogs`]).
    FullLogs {
        namespace: String,
        op: String,
        lines: Vec<String>,
    },
    /// A key press (only press kinds are sent).
    Key(KeyEvent),
    /// Time passed (ages, ETAs): sent once a second.
    Tick(Timestamp),
    /// The result of a command the loop ran (`resume started for X`,
    /// `abort failed: ...`).
    Notice(String),
}

/// What the event loop must do after an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Leave the monitor.
    Quit,
    /// Abort the operation (the user confirmed).
    Abort { namespace: String, op: String },
    /// Resume the operation.
    Resume { namespace: String, op: String },
    /// The user wants the full logs of this operation (the logs screen is
    /// open and shows what [`Msg::FullLogs`] brings, the live tail until
    /// then).
    ShowLogs { namespace: String, op: String },
}

/// An operation's identity: its record's namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct OpKey {
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl OpKey {
    pub(crate) fn of(vm: &VolumeMigration) -> OpKey {
        OpKey {
            namespace: vm.metadata.namespace.clone(),
            name: vm.metadata.name.clone(),
        }
    }

    fn is(&self, vm: &VolumeMigration) -> bool {
        self.namespace == vm.metadata.namespace && self.name == vm.metadata.name
    }
}

/// What fills the terminal. [`Screen::Detail`] and [`Screen::Logs`] show
/// the selected operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Screen {
    /// Every operation in scope, one row each.
    List,
    /// One operation in full.
    Detail,
    /// The selected operation's log lines, scrolled `from_end` lines up from
    /// the newest (0: following the tail).
    Logs { from_end: usize, back: Back },
    /// "Abort OP?" over the screen it was asked from.
    ConfirmAbort { op: OpKey, over: Box<Screen> },
}

/// Where Esc leaves the logs screen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Back {
    List,
    Detail,
}

/// Where a log box's lines come from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum LogSource<'a> {
    /// [`Msg::LogTail`]'s lines, from the running pods.
    Live(&'a [String]),
    /// [`Msg::FullLogs`]' lines.
    Full(&'a [String]),
    /// The record's copy of this attempt's last lines.
    Recorded(&'a Attempt),
    /// Nothing yet.
    None,
}

impl<'a> LogSource<'a> {
    pub(crate) fn lines(self) -> &'a [String] {
        match self {
            LogSource::Live(lines) | LogSource::Full(lines) => lines,
            LogSource::Recorded(attempt) => &attempt.log_tail,
            LogSource::None => &[],
        }
    }
}

/// Live progress as the receiver last reported it.
#[derive(Debug, Clone)]
struct Live {
    attempt: u32,
    progress: Progress,
}

/// Where an attempt's pods run, as the pod watch last saw them.
#[derive(Debug, Clone)]
struct Nodes {
    attempt: u32,
    receiver: Option<String>,
    sender: Option<String>,
}

/// One of an attempt's two mover pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Receiver,
    Sender,
}

/// The monitor's whole state. [`crate::tui::view::draw`] renders it;
/// [`Model::update`] is the only way it changes.
#[derive(Debug, Clone)]
pub struct Model {
    scope: Scope,
    /// `monitor OP`: the operation to open once it appears.
    only: Option<String>,
    /// `only` has been opened (once: the user may leave it).
    focused: bool,
    /// A [`Msg::Records`] has arrived.
    loaded: bool,
    /// Sorted by namespace, then name, as `kubectl get`.
    ops: Vec<VolumeMigration>,
    selected: Option<OpKey>,
    screen: Screen,
    live: HashMap<OpKey, Live>,
    nodes: HashMap<OpKey, Nodes>,
    /// The running attempt's tail, by attempt.
    logs: HashMap<OpKey, (u32, Vec<String>)>,
    full_logs: HashMap<OpKey, Vec<String>>,
    notice: Option<String>,
    now: Timestamp,
}

impl Model {
    /// A monitor of `scope`, waiting for its first records. With `only`
    /// (`monitor OP`), that operation's detail opens once it appears.
    /// Until the first [`Msg::Tick`], [`Model::now`] is the Unix epoch: the
    /// loop sends one before drawing.
    pub fn new(scope: Scope, only: Option<String>) -> Model {
        Model {
            scope,
            only,
            focused: false,
            loaded: false,
            ops: Vec::new(),
            selected: None,
            screen: Screen::List,
            live: HashMap::new(),
            nodes: HashMap::new(),
            logs: HashMap::new(),
            full_logs: HashMap::new(),
            notice: None,
            now: Timestamp::UNIX_EPOCH,
        }
    }

    /// Applies `msg`; returns what the loop must do, if anything.
    pub fn update(&mut self, msg: Msg) -> Option<Command> {
        match msg {
            Msg::Records(ops) => self.records(ops),
            Msg::Progress {
                namespace,
                op,
                attempt,
                progress,
            } => {
                let key = OpKey {
                    namespace,
                    name: op,
                };
                self.live.insert(key, Live { attempt, progress });
            }
            Msg::Scheduled {
                namespace,
                op,
                attempt,
                receiver,
                sender,
            } => {
                let key = OpKey {
                    namespace,
                    name: op,
                };
                let nodes = Nodes {
                    attempt,
                    receiver,
                    sender,
                };
                self.nodes.insert(key, nodes);
            }
            Msg::LogTail {
                namespace,
                op,
                attempt,
                lines,
            } => {
                let key = OpKey {
                    namespace,
                    name: op,
                };
                self.logs.insert(key, (attempt, lines));
            }
            Msg::FullLogs {
                namespace,
                op,
                lines,
            } => {
                let key = OpKey {
                    namespace,
                    name: op,
                };
                self.full_logs.insert(key, lines);
            }
            Msg::Key(key) => return self.key(key),
            Msg::Tick(now) => self.now = now,
            Msg::Notice(text) => self.notice = Some(text),
        }
        None
    }

    /// The time of the latest [`Msg::Tick`]: what ages and ETAs count from.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    pub(crate) fn scope(&self) -> &Scope {
        &self.scope
    }

    /// `monitor OP`'s operation, still waiting to appear.
    pub(crate) fn awaited(&self) -> Option<&str> {
        self.only.as_deref().filter(|_| !self.focused)
    }

    /// Whether any records have arrived yet.
    pub(crate) fn loaded(&self) -> bool {
        self.loaded
    }

    /// The operations in scope, sorted by namespace, then name.
    pub(crate) fn operations(&self) -> &[VolumeMigration] {
        &self.ops
    }

    pub(crate) fn screen(&self) -> &Screen {
        &self.screen
    }

    pub(crate) fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    /// The selected row, if there are any.
    pub(crate) fn selected_index(&self) -> Option<usize> {
        let key = self.selected.as_ref()?;
        self.ops.iter().position(|vm| key.is(vm))
    }

    pub(crate) fn selected(&self) -> Option<&VolumeMigration> {
        self.selected_index().and_then(|i| self.ops.get(i))
    }

    /// The freshest progress of `vm`: the receiver's live report while it is
    /// about the current attempt and newer than the record's, else the
    /// record's.
    pub(crate) fn progress<'a>(&'a self, vm: &'a VolumeMigration) -> Option<&'a Progress> {
        let recorded = vm.status.progress.as_ref();
        let live = self
            .live
            .get(&OpKey::of(vm))
            .filter(|live| is_current(vm, live.attempt))
            .map(|live| &live.progress);
        match (live, recorded) {
            (Some(live), Some(recorded)) if !fresher(live, recorded) => Some(recorded),
            (Some(live), _) => Some(live),
            (None, recorded) => recorded,
        }
    }

    /// The bytes done and the rate to show for attempt `a` of `vm`: for the
    /// running attempt, those of [`Model::progress`], which the detail's
    /// header shows (the record's copy in the attempt is up to 5 s older,
    /// and with no driver, or before the new attempt's first write, it is
    /// 0); for the others, the record's.
    pub(crate) fn attempt_figures(&self, vm: &VolumeMigration, a: &Attempt) -> (u64, u64) {
        match self.progress(vm).filter(|_| runs(vm, a)) {
            Some(p) => (p.bytes_done, p.rate),
            None => (a.bytes_done, a.rate),
        }
    }

    /// The node of attempt `a`'s `side` pod: the record's; for the running
    /// attempt, before the record has it, the one the pod watch saw, else
    /// the one its placement pins it to.
    pub(crate) fn node<'a>(
        &'a self,
        vm: &'a VolumeMigration,
        a: &'a Attempt,
        side: Side,
    ) -> Option<&'a str> {
        let recorded = match side {
            Side::Receiver => &a.receiver,
            Side::Sender => &a.sender,
        };
        if let Some(node) = recorded.node.as_deref() {
            return Some(node);
        }
        if !runs(vm, a) {
            return None;
        }
        let seen = self
            .nodes
            .get(&OpKey::of(vm))
            .filter(|n| n.attempt == a.number)
            .and_then(|n| match side {
                Side::Receiver => n.receiver.as_deref(),
                Side::Sender => n.sender.as_deref(),
            });
        // The record's placement is the current attempt's.
        let placed = vm.status.placement.as_ref().and_then(|p| match side {
            Side::Receiver => p.receiver.node.as_deref(),
            Side::Sender => p.sender.node.as_deref(),
        });
        seen.or(placed)
    }

    /// The node the latest sender runs (or ran) on, else the one the
    /// placement pins it to.
    pub(crate) fn sender_node<'a>(&'a self, vm: &'a VolumeMigration) -> Option<&'a str> {
        let last = vm.status.attempts.last();
        last.and_then(|a| self.node(vm, a, Side::Sender))
            .or_else(|| vm.status.placement.as_ref()?.sender.node.as_deref())
    }

    /// The log lines to show for `vm`: the live tail while it is about the
    /// running attempt, else the last attempt's recorded tail (which has the
    /// failure, once an attempt has ended).
    pub(crate) fn log_source<'a>(&'a self, vm: &'a VolumeMigration) -> LogSource<'a> {
        let live = self.logs.get(&OpKey::of(vm));
        if let Some((_, lines)) = live.filter(|(attempt, _)| is_current(vm, *attempt)) {
            return LogSource::Live(lines);
        }
        match vm.status.attempts.last() {
            Some(last) if !last.log_tail.is_empty() => LogSource::Recorded(last),
            _ => LogSource::None,
        }
    }

    /// The logs screen's lines: the full logs once they came, else the box's.
    pub(crate) fn full_log_source<'a>(&'a self, vm: &'a VolumeMigration) -> LogSource<'a> {
        match self.full_logs.get(&OpKey::of(vm)) {
            Some(lines) => LogSource::Full(lines),
            None => self.log_source(vm),
        }
    }

    /// A new set of records: keeps the selection on the same operation, or
    /// near where it was if that one is gone; opens `monitor OP`'s detail
    /// when it first appears.
    fn records(&mut self, mut ops: Vec<VolumeMigration>) {
        if let Scope::Namespace(ns) = &self.scope {
            ops.retain(|vm| &vm.metadata.namespace == ns);
        }
        ops.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        let was_at = self.selected_index();
        self.ops = ops;
        self.loaded = true;

        let present: HashSet<OpKey> = self.ops.iter().map(OpKey::of).collect();
        self.live.retain(|key, _| present.contains(key));
        self.nodes.retain(|key, _| present.contains(key));
        self.logs.retain(|key, _| present.contains(key));
        self.full_logs.retain(|key, _| present.contains(key));

        let gone = self.selected.take_if(|key| !present.contains(key));
        if self.selected.is_none() {
            let at = was_at.unwrap_or(0).min(self.ops.len().saturating_sub(1));
            self.selected = self.ops.get(at).map(OpKey::of);
        }
        if let Screen::ConfirmAbort { op, .. } = &self.screen {
            if !present.contains(op) {
                self.notice = Some(format!("{} is gone; nothing to abort", op.name));
                self.screen = Screen::List;
            }
        }
        if let Some(gone) = gone {
            if self.screen != Screen::List {
                self.notice = Some(format!("{} is gone", gone.name));
                self.screen = Screen::List;
            }
        }
        self.focus();
    }

    /// Opens `monitor OP`'s detail, once, when it is there.
    fn focus(&mut self) {
        let Some(only) = self.only.as_deref().filter(|_| !self.focused) else {
            return;
        };
        if let Some(vm) = self.ops.iter().find(|vm| vm.metadata.name == only) {
            self.selected = Some(OpKey::of(vm));
            self.screen = Screen::Detail;
            self.focused = true;
        }
    }
}

/// Whether live progress of `attempt` is about `vm`'s current work: the
/// operation goes on, and the attempt is the running one (or a newer one
/// the record does not show yet).
fn is_current(vm: &VolumeMigration, attempt: u32) -> bool {
    if !matches!(vm.status.phase, Phase::Pending | Phase::Running) {
        return false;
    }
    match vm.status.attempts.last() {
        Some(last) => attempt > last.number || (attempt == last.number && !last.phase.is_over()),
        None => true,
    }
}

/// Whether `a` is `vm`'s running attempt: the latest, not over, of an
/// operation that goes on.
fn runs(vm: &VolumeMigration, a: &Attempt) -> bool {
    vm.running_attempt().is_some_and(|r| r.number == a.number)
}

/// Whether `live` is at least as recent as `recorded` (without times to
/// compare, the live report is taken as the fresher).
fn fresher(live: &Progress, recorded: &Progress) -> bool {
    match (live.updated, recorded.updated) {
        (Some(live), Some(recorded)) => live >= recorded,
        _ => true,
    }
}
