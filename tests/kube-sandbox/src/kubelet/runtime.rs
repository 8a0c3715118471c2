//! One container as a real process: the runtime half of the sandbox's kubelet.
//!
//! [`Process::spawn`] starts a container's command the way a node's runtime
//! would, without images or cgroups. The process gets its own session and
//! process group, its own mount namespace, exactly the environment it was
//! given, stdin from `/dev/null`, and stdout and stderr appended to its log.
//!
//! # The container's root
//!
//! The "image" is the host's `/`, read-only. The root is a tmpfs at
//! `<scratch_dir>/root` holding one mount point per entry of the host's `/`:
//! directories and files are bind-mounted (recursively, then made read-only
//! recursively), symlinks such as `/bin -> usr/bin` are recreated. `/proc`
//! is bound writable; `/dev` is a tmpfs of the container's own with runc's
//! default devices bound from the host (no disks, no loop devices: a
//! `volumeDevices` entry binds its device there or anywhere else); `/tmp`
//! is `<scratch_dir>/tmp`, emptied at each spawn. Then each volume is bind-mounted at its `mountPath`, and the
//! process `chroot`s into the root. New entries land in tmpfs, as writes to
//! a container's writable layer would; the host is never written.
//!
//! # Mount points that do not exist on the host
//!
//! Mount points are created inside the root only, and paths are resolved as
//! the container sees them (an absolute symlink like `/var/run -> /run`
//! points into the container). A missing mount point whose parent is in our
//! tmpfs is simply created. When the parent is an image directory (a host
//! bind), such as `/usr/local/bin` for the mover mapped at
//! `/usr/local/bin/mover`, that directory is *shadowed*: a fresh tmpfs gets a
//! bind of each of its current entries (and copies of its symlinks), is
//! moved over it, and the mount point is created in it. The container sees
//! the host's entries plus the new one, the host directory is untouched, and
//! callers can map a file anywhere, as with a real runtime, with no
//! PATH conventions to follow. It is the technique that builds the root
//! itself, so it needs no overlayfs and keeps submounts. A mount point
//! missing inside a *volume* is refused (`CreateContainerError`): creating
//! it would write into the volume's host directory. See `rootfs.rs`.
//!
//! # Identity
//!
//! The process runs as its [`Identity`]: after `chroot`, the child drops
//! the bounding set to the container's capabilities, sets the groups, the
//! gid and the uid, then the effective and permitted sets, and
//! `no_new_privs` when asked, as runc does (see `identity.rs` for what a
//! non-root process is left with after `execve`).
//!
//! # Setting up in the child
//!
//! The namespace and mount work runs in a `pre_exec` hook, on data prepared
//! before the fork, which is what keeps it sound in a multi-threaded
//! process: see `child.rs`.
//!
//! # Ending
//!
//! When the main process exits, the rest of its process group is killed, as
//! a node's pid namespace would be; [`Process::stop`] is the kubelet's
//! `SIGTERM`, grace period, `SIGKILL`. A process that leaves the group (its
//! own `setsid`) escapes both: there are no cgroups here.

mod child;
mod expand;
pub mod identity;
mod rootfs;

pub use expand::expand_vars;
pub use identity::Identity;

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, WaitIdStatus};
use tokio::sync::watch;

use child::Container;

/// The `PATH` a command is looked up in when `env` has none (containerd's).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A volume mount: `host_path` (a directory or a file) seen at
/// `container_path` inside the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub host_path: PathBuf,
    pub container_path: PathBuf,
    pub read_only: bool,
}

/// Everything needed to start one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// Command and arguments, already expanded (see [`expand_vars`]).
    /// `argv[0]` is a path inside the container, or a bare name looked up in
    /// the `PATH` of `env` ([`DEFAULT_PATH`] when unset).
    pub argv: Vec<String>,
    /// The whole environment; nothing is inherited. A later duplicate wins.
    pub env: Vec<(String, String)>,
    /// The working directory, created in the container if missing; `/` when
    /// `None`.
    pub working_dir: Option<PathBuf>,
    /// Volume mounts, in order (later ones may be nested in earlier ones);
    /// then the devices of `volumeDevices`, bound as files.
    pub mounts: Vec<Mount>,
    /// Host files the container reaches through a device rather than a
    /// mount (the image behind a loop device): the freezer stops the
    /// container while they are snapshotted, as it does for mounts.
    pub watched: Vec<PathBuf>,
    /// The image's unpacked root file system, shown read-only as the
    /// container's `/` (with the host's `/proc` and `/sys`, a `/dev` of its
    /// own and the container's `/tmp`); `None` shows the host's `/`.
    pub image_root: Option<PathBuf>,
    /// A directory owned by this container, created and removed by the
    /// caller. The runtime makes `root/` and `stage/` there (mount points,
    /// empty as the host sees them) and `tmp/`, the container's `/tmp`,
    /// emptied at each spawn.
    pub scratch_dir: PathBuf,
    /// Where stdout and stderr are appended, as the process writes them.
    pub log_path: PathBuf,
    /// Who the process runs as and what it may do (see [`identity`]).
    pub identity: Identity,
}

/// How a container's process ended, as the kubelet reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// The exit status, or 128 + the signal when killed by one.
    pub code: i32,
    /// The signal that killed the process, if one did.
    pub signal: Option<i32>,
}

impl Exit {
    /// What is reported when the status could not be collected: the group
    /// was killed, and the kubelet's code for an unknown status is 137.
    const LOST: Exit = Exit::killed(libc::SIGKILL);

    const fn killed(signal: i32) -> Self {
        Exit {
            code: 128 + signal,
            signal: Some(signal),
        }
    }

    fn from_status(status: &WaitIdStatus) -> Self {
        match (status.exit_status(), status.terminating_signal()) {
            (Some(code), _) => Exit { code, signal: None },
            (None, Some(signal)) => Exit::killed(signal),
            (None, None) => Exit::LOST,
        }
    }
}

/// Why a container could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The container could not be prepared (a volume source is missing, a
    /// mount point cannot be made, the log cannot be opened...). Nothing ran.
    #[error("{0}")]
    Create(String),
    /// The process could not be started in the container (executable not
    /// found, a mount or `exec` failed in the child...).
    #[error("{0}")]
    Start(String),
}

impl RuntimeError {
    /// The reason the kubelet shows in the container's `waiting` state.
    ///
    /// For a `RunContainerError`, the kubelet also records a `terminated`
    /// last state with reason `StartError` and exit code 128.
    pub fn reason(&self) -> &'static str {
        match self {
            RuntimeError::Create(_) => "CreateContainerError",
            RuntimeError::Start(_) => "RunContainerError",
        }
    }
}

fn create(message: impl Into<String>) -> RuntimeError {
    RuntimeError::Create(message.into())
}

/// A running (or exited) container process.
///
/// Dropping it kills what is left of its process group.
#[derive(Debug)]
pub struct Process {
    pid: Pid,
    exit: watch::Receiver<Option<Exit>>,
    /// Whether the process was collected: once it is, its pid may name
    /// another process, so no signal is sent. Held while signalling.
    reaped: Arc<Mutex<bool>>,
}

impl Process {
    /// Prepares the container described by `launch` and starts its process.
    ///
    /// This blocks for a few milliseconds (listing host directories, `fork`
    /// and the child's mounts up to `execve`). A thread per process waits
    /// for its exit.
    pub fn spawn(launch: &Launch) -> Result<Process, RuntimeError> {
        let container = Arc::new(Container::prepare(launch)?);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&launch.log_path)
            .and_then(|log| Ok((log.try_clone()?, log)))
            .map_err(|e| create(format!("opening log {:?}: {e}", launch.log_path)))?;
        let mut command = Command::new(OsStr::from_bytes(container.program.as_bytes()));
        command
            .env_clear()
            .stdin(Stdio::null())
            .stdout(log.0)
            .stderr(log.1);
        let in_child = Arc::clone(&container);
        // SAFETY: `enter` only makes system calls on data prepared before the
        // fork (see the module documentation and `Container::enter`).
        unsafe { command.pre_exec(move || in_child.enter()) };
        let child = command.spawn().map_err(|e| container.start_error(&e))?;
        Process::watch(Pid::from_child(&child))
    }

    /// Starts the thread that collects the process when it exits.
    fn watch(pid: Pid) -> Result<Process, RuntimeError> {
        let (sender, exit) = watch::channel(None);
        let reaped = Arc::new(Mutex::new(false));
        let in_thread = Arc::clone(&reaped);
        let started = std::thread::Builder::new()
            .name(format!("reap-{pid}"))
            .stack_size(128 * 1024)
            .spawn(move || sender.send_replace(Some(reap(pid, &in_thread))));
        if let Err(e) = started {
            let _ = rustix::process::kill_process_group(pid, Signal::KILL);
            let _ = rustix::process::waitid(WaitId::Pid(pid), WaitIdOptions::EXITED);
            return Err(RuntimeError::Start(format!("watching process {pid}: {e}")));
        }
        Ok(Process { pid, exit, reaped })
    }

    /// The process id, which is also its process group and session id.
    pub fn pid(&self) -> u32 {
        self.pid.as_raw_nonzero().get().unsigned_abs()
    }

    /// Waits for the process to exit. Cancel-safe.
    pub async fn wait(&mut self) -> Exit {
        match self.exit.wait_for(Option::is_some).await {
            Ok(exit) => exit.unwrap_or(Exit::LOST),
            Err(_) => Exit::LOST,
        }
    }

    /// The kubelet's termination: `SIGTERM` to the whole process group, then
    /// `SIGKILL` once `grace` has passed. Returns how the process exited.
    pub async fn stop(&mut self, grace: Duration) -> Exit {
        if let Some(exit) = *self.exit.borrow() {
            return exit;
        }
        self.signal_group(Signal::TERM);
        if let Ok(exit) = tokio::time::timeout(grace, self.wait()).await {
            return exit;
        }
        self.signal_group(Signal::KILL);
        self.wait().await
    }

    /// `SIGKILL` to the whole group at once, as when a node dies.
    pub async fn kill(&mut self) -> Exit {
        self.signal_group(Signal::KILL);
        self.wait().await
    }

    fn signal_group(&self, signal: Signal) {
        signal_group(self.pid, &self.reaped, signal);
    }

    /// A handle that kills this process from elsewhere.
    pub fn killer(&self) -> Killer {
        Killer {
            pid: self.pid,
            reaped: Arc::clone(&self.reaped),
            exit: self.exit.clone(),
        }
    }
}

/// Kills a container's process group from outside its kubelet (a fault
/// injected by a test), or stops and continues it (the freezer), as safely
/// as [`Process`] signals it: never once the process has been collected.
#[derive(Debug, Clone)]
pub struct Killer {
    pid: Pid,
    reaped: Arc<Mutex<bool>>,
    exit: watch::Receiver<Option<Exit>>,
}

impl Killer {
    /// `SIGKILL` to the whole group, as the OOM killer's kill of the
    /// container's init ends it all; the kubelet sees it exit with 137.
    pub fn kill(&self) {
        signal_group(self.pid, &self.reaped, Signal::KILL);
    }

    /// Runs `f` with the group's id unless the process was collected,
    /// holding off its collection meanwhile, so that the id names this
    /// container's group for as long as `f` runs (the freezer's `SIGSTOP`,
    /// `SIGCONT` and its look at `/proc`).
    pub(crate) fn with_group<T>(&self, f: impl FnOnce(Pid) -> T) -> Option<T> {
        let reaped = self.reaped.lock().unwrap_or_else(PoisonError::into_inner);
        (!*reaped).then(|| f(self.pid))
    }

    /// Waits until the process has been collected.
    pub async fn wait(&mut self) -> Exit {
        match self.exit.wait_for(Option::is_some).await {
            Ok(exit) => exit.unwrap_or(Exit::LOST),
            Err(_) => Exit::LOST,
        }
    }
}

/// Sends `signal` to the group `pid` leads, unless it was collected.
fn signal_group(pid: Pid, reaped: &Mutex<bool>, signal: Signal) {
    let reaped = reaped.lock().unwrap_or_else(PoisonError::into_inner);
    if !*reaped {
        if let Err(e) = rustix::process::kill_process_group(pid, signal) {
            tracing::debug!(%pid, ?signal, "signalling the group: {e}");
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.signal_group(Signal::KILL);
    }
}

/// Waits for `pid` to exit, kills the rest of its group, then collects it.
///
/// Killing the group is what a node does when a container's main process
/// ends (its pid namespace dies with it). It happens before the process is
/// collected so that its pid, the group's id, cannot be reused meanwhile.
fn reap(pid: Pid, reaped: &Mutex<bool>) -> Exit {
    let exited = retry(|| {
        rustix::process::waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        )
    });
    let mut reaped = reaped.lock().unwrap_or_else(PoisonError::into_inner);
    if exited.is_ok() {
        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    }
    let status = retry(|| rustix::process::waitid(WaitId::Pid(pid), WaitIdOptions::EXITED));
    *reaped = true;
    match status {
        Ok(Some(status)) => Exit::from_status(&status),
        other => {
            tracing::error!(%pid, "collecting the container process: {other:?}");
            Exit::LOST
        }
    }
}

fn retry<T>(mut call: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    loop {
        match call() {
            Err(rustix::io::Errno::INTR) => continue,
            result => return result,
        }
    }
}

#[cfg(test)]
mod tests;
