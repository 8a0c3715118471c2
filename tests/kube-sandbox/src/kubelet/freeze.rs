//! Crash-consistent snapshots: the sandbox's `fsfreeze`.
//!
//! A real CSI snapshot (LVM, ZFS, Ceph RBD, a cloud disk) is one point in
//! time across every file of the volume. The sandbox's driver copies the
//! volume's directory file by file, so while it copies, every process that
//! could write to the volume is stopped, as the block layer holds writers
//! during a device snapshot.
//!
//! Every container process (and exec probe) of every node starts through
//! [`Freezer::spawn`], which records its process group with the host paths
//! it mounts (and the images behind the loop devices it maps) until the returned [`Registration`] is dropped (when the
//! kubelet has seen the process end). [`Freezer::freeze`] of a directory
//! sends `SIGSTOP` to each group mounting it (or a path inside it, or a
//! directory containing it), waits until every thread of those groups is
//! actually stopped (read from `/proc`: a signal is only queued when
//! `kill` returns, and a write in progress completes first; a shell's
//! `vfork` parent, waiting uninterruptibly for its stopped child, counts
//! as stopped), and returns a
//! [`Frozen`] guard whose drop sends `SIGCONT`: after the copy, whether it
//! succeeded or not.
//!
//! A process that would start on a frozen directory waits (asynchronously)
//! until it is thawed, before it is spawned: it cannot have run a single
//! instruction in the frozen volume. A start already in flight when the
//! freeze begins (between its admission and its registration, which is
//! synchronous: a fork and an exec) is waited for, then stopped with the
//! others.
//!
//! Signals go through the runtime's [`Killer`], which never signals a group
//! whose leader was collected: a registration outliving its process is
//! harmless, its pid is never taken for another process's.
//!
//! Not faithful: a process that left its group (its own `setsid`) is not
//! stopped, and a group some test stopped itself is continued at thaw.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use tokio::sync::Notify;

use super::runtime::{Killer, Launch, Process, RuntimeError};

/// How long a freeze waits for starts in flight, then for the groups to
/// stop, before it copies anyway (with a warning).
const SETTLE: Duration = Duration::from_secs(10);
/// How often a freeze looks whether the groups have stopped: first, and
/// at most.
const POLL: Duration = Duration::from_millis(1);
const POLL_CAP: Duration = Duration::from_millis(50);

/// The container process groups of the sandbox and the paths they mount.
#[derive(Default)]
pub struct Freezer {
    state: Mutex<State>,
    /// A start in flight registered or gave up.
    settled: Condvar,
    /// A freeze ended.
    thawed: Notify,
}

#[derive(Default)]
struct State {
    next: u64,
    groups: HashMap<u64, Group>,
    /// Starts admitted but not registered yet, with their paths.
    starting: HashMap<u64, Vec<PathBuf>>,
    /// The directories frozen now, by freeze.
    frozen: HashMap<u64, PathBuf>,
}

struct Group {
    killer: Killer,
    paths: Vec<PathBuf>,
    /// How many freezes hold the group stopped.
    stops: usize,
}

impl Freezer {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the container described by `launch` (see
    /// [`Process::spawn`]) once none of its mounts is frozen, and records
    /// its group until the registration is dropped, which must not happen
    /// before the process has ended (or is being killed).
    pub async fn spawn(
        &self,
        launch: &Launch,
    ) -> Result<(Process, Registration<'_>), RuntimeError> {
        let paths = launch
            .mounts
            .iter()
            .map(|m| m.host_path.as_path())
            .chain(launch.watched.iter().map(PathBuf::as_path))
            .map(canonical)
            .collect();
        let ticket = self.admit(paths).await;
        let process = Process::spawn(launch)?;
        let registration = ticket.register(process.killer());
        Ok((process, registration))
    }

    /// Waits until none of `paths` is frozen, then records a start in
    /// flight on them. Cancel-safe: the ticket is made in the same poll.
    async fn admit(&self, paths: Vec<PathBuf>) -> Ticket<'_> {
        loop {
            let thawed = self.thawed.notified();
            tokio::pin!(thawed);
            thawed.as_mut().enable();
            {
                let mut state = self.lock();
                let frozen = state.frozen.values().any(|dir| touches(&paths, dir));
                if !frozen {
                    state.next += 1;
                    let id = state.next;
                    state.starting.insert(id, paths);
                    return Ticket { freezer: self, id };
                }
            }
            thawed.await;
        }
    }

    /// Stops every container process group that mounts `dir` (or a path
    /// in it) and returns once they are all stopped; they continue when
    /// the guard is dropped. Blocking: for a controller's thread.
    pub fn freeze(&self, dir: &Path) -> Frozen<'_> {
        let dir = canonical(dir);
        let mut state = self.lock();
        state.next += 1;
        let id = state.next;
        state.frozen.insert(id, dir.clone());
        let (mut state, timeout) = self
            .settled
            .wait_timeout_while(state, SETTLE, |s| {
                s.starting.values().any(|paths| touches(paths, &dir))
            })
            .unwrap_or_else(|e| e.into_inner());
        if timeout.timed_out() {
            tracing::warn!(
                ?dir,
                "freezing: a container start did not finish in {SETTLE:?}"
            );
        }
        let mut stopped = Vec::new();
        for (group_id, group) in &mut state.groups {
            if touches(&group.paths, &dir) {
                group.stops += 1;
                if group.stops == 1 {
                    group.killer.with_group(|pgid| signal(pgid, Signal::STOP));
                }
                stopped.push((*group_id, group.killer.clone()));
            }
        }
        drop(state);
        let frozen = Frozen {
            freezer: self,
            id,
            groups: stopped.iter().map(|(id, _)| *id).collect(),
        };
        let deadline = Instant::now() + SETTLE;
        let mut pending: Vec<Killer> = stopped.into_iter().map(|(_, k)| k).collect();
        let mut poll = POLL;
        loop {
            pending.retain(|k| k.with_group(|pgid| !group_stopped(pgid)) == Some(true));
            if pending.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                tracing::warn!(?dir, "freezing: processes still running after {SETTLE:?}");
                break;
            }
            std::thread::sleep(poll);
            poll = (poll * 2).min(POLL_CAP);
        }
        frozen
    }
}

/// A start admitted on paths that are not frozen; dropping it without
/// registering (the spawn failed) lets a waiting freeze go on.
struct Ticket<'a> {
    freezer: &'a Freezer,
    id: u64,
}

impl<'a> Ticket<'a> {
    fn register(self, killer: Killer) -> Registration<'a> {
        let (freezer, id) = (self.freezer, self.id);
        {
            let mut state = freezer.lock();
            if let Some(paths) = state.starting.remove(&id) {
                let group = Group {
                    killer,
                    paths,
                    stops: 0,
                };
                state.groups.insert(id, group);
            }
        }
        freezer.settled.notify_all();
        std::mem::forget(self);
        Registration { freezer, id }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.freezer.lock().starting.remove(&self.id);
        self.freezer.settled.notify_all();
    }
}

/// A container process group in the [`Freezer`]; dropping it forgets it.
pub struct Registration<'a> {
    freezer: &'a Freezer,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.freezer.lock().groups.remove(&self.id);
    }
}

/// A frozen directory: its writers continue when this is dropped.
pub struct Frozen<'a> {
    freezer: &'a Freezer,
    id: u64,
    groups: Vec<u64>,
}

impl Frozen<'_> {
    /// How many process groups this freeze stopped.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        {
            let mut state = self.freezer.lock();
            state.frozen.remove(&self.id);
            for id in &self.groups {
                if let Some(group) = state.groups.get_mut(id) {
                    group.stops = group.stops.saturating_sub(1);
                    if group.stops == 0 {
                        group.killer.with_group(|pgid| signal(pgid, Signal::CONT));
                    }
                }
            }
        }
        self.freezer.thawed.notify_waiters();
    }
}

/// Whether a process mounting `paths` could write in `dir`: one is in
/// the other.
fn touches(paths: &[PathBuf], dir: &Path) -> bool {
    paths
        .iter()
        .any(|p| p.starts_with(dir) || dir.starts_with(p))
}

/// The path without symbolic links when it can be resolved, so that the
/// kubelet's and the driver's names of a volume compare equal.
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

fn signal(pgid: Pid, signal: Signal) {
    if let Err(e) = rustix::process::kill_process_group(pgid, signal) {
        tracing::debug!(%pgid, ?signal, "freezer: signalling the group: {e}");
    }
}

/// Whether every thread of every process in group `pgid` is stopped (or
/// dead), as `/proc/<pid>/task/<tid>/stat` says.
fn group_stopped(pgid: Pid) -> bool {
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return true;
    };
    let pgid = pgid.as_raw_nonzero().get();
    for process in processes.flatten() {
        let is_pid = process
            .file_name()
            .to_str()
            .map(|n| n.parse::<u32>().is_ok());
        if is_pid != Some(true) {
            continue;
        }
        match stat(&process.path().join("stat")) {
            Some((_, group)) if group == pgid => {}
            _ => continue,
        }
        let Ok(threads) = std::fs::read_dir(process.path().join("task")) else {
            continue;
        };
        for thread in threads.flatten() {
            if let Some((state, _)) = stat(&thread.path().join("stat")) {
                if !halted(state, &thread.path()) {
                    return false;
                }
            }
        }
    }
    true
}

/// Whether the thread at `/proc/<pid>/task/<tid>` runs no more of its own
/// code: stopped, dead, or a `vfork` parent (`D` in `kernel_clone`, as
/// `sh` waits for each command it starts) whose child is stopped or will
/// stop before it returns.
fn halted(state: char, thread: &Path) -> bool {
    match state {
        'T' | 't' | 'Z' | 'X' | 'x' => true,
        'D' => std::fs::read_to_string(thread.join("wchan"))
            .is_ok_and(|at| at.contains("clone") || at.contains("fork")),
        _ => false,
    }
}

/// The state and the process group of a `stat` file.
fn stat(path: &Path) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(path).ok()?;
    let after_name = &text[text.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _parent = fields.next()?;
    let group = fields.next()?.parse().ok()?;
    Some((state, group))
}

#[cfg(test)]
mod tests;
