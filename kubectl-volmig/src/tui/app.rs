//! The monitor's terminal and event loop: the UI task owns the [`Model`];
//! feeds, keys and command results reach it as messages; it draws after
//! each burst of them (ratatui diffs frames, so nothing flickers).

use std::time::Duration;

use ratatui::crossterm::event::{self, Event, KeyEventKind};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

use super::feed;
use super::model::{Command, Model, Msg, Scope};
use super::view;
use crate::cluster::Sides;
use crate::driver::abort::abort;
use crate::record::store::RecordStore;
use kube::Client;

/// Why the monitor stopped.
#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    #[error("the monitor needs a terminal: {0}")]
    Terminal(#[from] std::io::Error),
    #[error("the monitor's {0} stopped unexpectedly")]
    Feed(&'static str),
}

impl TuiError {
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// Runs the monitor until `q`, Ctrl-C or SIGTERM. The terminal is restored
/// however it ends, a panic included (ratatui's hook).
pub async fn run(client: Client, scope: Scope, only: Option<String>) -> Result<(), TuiError> {
    let mut terminal = ratatui::try_init()?;
    let result = event_loop(&mut terminal, client, scope, only).await;
    ratatui::restore();
    result
}

async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    client: Client,
    scope: Scope,
    only: Option<String>,
) -> Result<(), TuiError> {
    let (tx, mut rx) = unbounded_channel();
    let feeds = feed::start(client.clone(), &scope, tx.clone());
    read_keys(tx.clone());
    let interrupted = crate::signals::interrupted();
    tokio::pin!(interrupted);
    let mut model = Model::new(scope, only);
    // The model never reads the clock: ages count from this tick.
    model.update(Msg::Tick(jiff::Timestamp::now()));
    terminal.draw(|f| view::draw(f, &model))?;
    loop {
        // SIGTERM and SIGHUP (Ctrl-C is a key in raw mode) end it cleanly.
        let first = tokio::select! {
            msg = rx.recv() => msg,
            () = &mut interrupted => None,
        };
        let Some(first) = first else { return Ok(()) };
        // A feed that died (a panic) would leave a screen that never
        // changes again: stop, and say so.
        if let Some(what) = feeds.stopped() {
            return Err(TuiError::Feed(what));
        }
        // Everything already queued, then one frame.
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        for msg in batch {
            match model.update(msg) {
                Some(Command::Quit) => return Ok(()),
                Some(command) => run_command(&client, command, &tx),
                None => {}
            }
        }
        terminal.draw(|f| view::draw(f, &model))?;
    }
}

/// Keys (and resizes, which only need a redraw) from a thread of their
/// own: crossterm's reads block.
fn read_keys(tx: UnboundedSender<Msg>) {
    std::thread::spawn(move || loop {
        match event::poll(Duration::from_millis(250)) {
            Ok(true) => match event::read() {
                Ok(Event::Key(key)) if key.kind == KeyEventKind::Press => {
                    if tx.send(Msg::Key(key)).is_err() {
                        return;
                    }
                }
                Ok(Event::Resize(..)) => {
                    if tx.send(Msg::Tick(jiff::Timestamp::now())).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => return,
            },
            Ok(false) => {
                if tx.is_closed() {
                    return;
                }
            }
            Err(_) => return,
        }
    });
}

/// Runs `command` in the background; its result comes back as a notice.
fn run_command(client: &Client, command: Command, tx: &UnboundedSender<Msg>) {
    let (client, tx) = (client.clone(), tx.clone());
    match command {
        Command::Quit => {}
        Command::Abort { namespace, op } => {
            tokio::spawn(async move {
                let who = WHO.get().cloned().unwrap_or_else(crate::names::holder);
                let notice = match abort_both_sides(&client, &namespace, &op, &who).await {
                    Ok(vm) if vm.rolling_back() => {
                        format!("{op} rolls back (the app was stopped); r drives it if no one does")
                    }
                    Ok(_) => format!("{op} aborted; r resumes it"),
                    Err(e) => format!("abort {op}: {e}"),
                };
                let _ = tx.send(Msg::Notice(notice));
            });
        }
        Command::Resume { namespace, op } => {
            let notice = resume_in_background(&namespace, &op, tx.clone());
            let _ = tx.send(Msg::Notice(notice));
        }
        Command::ShowLogs { namespace, op } => {
            tokio::spawn(async move {
                let store = RecordStore::new(client.clone(), &namespace);
                let msg = match store.get(&op).await {
                    Ok(vm) => Msg::FullLogs {
                        lines: feed::full_logs(&client, &vm).await,
                        namespace,
                        op,
                    },
                    Err(e) => Msg::Notice(format!("logs of {op}: {e}")),
                };
                let _ = tx.send(msg);
            });
        }
    }
}

/// Starts `kubectl-volmig resume OP` as a process of its own (its own
/// process group, no terminal), so the driver outlives the monitor; its
/// stderr goes to a file, and how it ended comes back as a notice.
fn resume_in_background(namespace: &str, op: &str, tx: UnboundedSender<Msg>) -> String {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return format!("resume {op}: {e}"),
    };
    let log = std::env::temp_dir().join(format!("kubectl-volmig-resume-{op}.log"));
    let stderr = match std::fs::File::create(&log) {
        Ok(file) => std::process::Stdio::from(file),
        Err(e) => return format!("resume {op}: cannot create {}: {e}", log.display()),
    };
    let mut command = tokio::process::Command::new(exe);
    command
        .args(["resume", op, "-n", namespace])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .process_group(0);
    // The same cluster as the monitor's.
    if let Some(kubeconfig) = KUBECONFIG.get() {
        command.arg("--kubeconfig").arg(kubeconfig);
    }
    if let Some(context) = CONTEXT.get() {
        command.args(["--context", context]);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return format!("resume {op}: {e}"),
    };
    let started = format!(
        "resuming {op} in the background (pid {}, log {})",
        child.id().unwrap_or_default(),
        log.display()
    );
    let op = op.to_string();
    tokio::spawn(async move {
        let ended = match child.wait().await.map(|s| s.code()) {
            Ok(Some(0)) => format!("{op} succeeded"),
            Ok(Some(3)) => format!("{op} failed (see its details)"),
            Ok(Some(4)) => format!("{op} was aborted"),
            Ok(code) => format!("resume {op} stopped ({code:?}); see {}", log.display()),
            Err(e) => format!("resume {op}: {e}"),
        };
        let _ = tx.send(Msg::Notice(ended));
    });
    started
}

/// `abort` of `op` in both of its clusters, when it copies into another.
async fn abort_both_sides(
    client: &Client,
    namespace: &str,
    op: &str,
    who: &str,
) -> Result<crate::record::VolumeMigration, String> {
    let store = crate::record::store::RecordStore::new(client.clone(), namespace);
    let vm = store.get(op).await.map_err(|e| e.to_string())?;
    let kubeconfig = KUBECONFIG.get().map(std::path::PathBuf::as_path);
    let sides = Sides::of_record(client, kubeconfig, &vm.spec)
        .await
        .map_err(|e| format!("cannot reach the source's cluster: {e}"))?;
    abort(&sides, namespace, op, who)
        .await
        .map_err(|e| e.to_string())
}

/// The `--kubeconfig` and `--context` the monitor was started with, for the
/// processes it starts.
pub static KUBECONFIG: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
pub static CONTEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
/// Who the monitor's user is (`host/pid (user NAME)`), recorded by `a`.
pub static WHO: std::sync::OnceLock<String> = std::sync::OnceLock::new();
