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
//! and `/dev` are bound writable, `/tmp` is `<scratch_dir>/tmp`, emptied at
//! each spawn. Then each volume is bind-mounted at its `mountPath`, and the
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
mod rootfs;

pub use expand::expand_vars;

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
    /// Volume mounts, in order (later ones may be nested in earlier ones).
    pub mounts: Vec<Mount>,
    /// A directory owned by this container, created and removed by the
    /// caller. The runtime makes `root/` and `stage/` there (mount points,
    /// empty as the host sees them) and `tmp/`, the container's `/tmp`,
    /// emptied at each spawn.
    pub scratch_dir: PathBuf,
    /// Where stdout and stderr are appended, as the process writes them.
    pub log_path: PathBuf,
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
        let reaped = self.reaped.lock().unwrap_or_else(PoisonError::into_inner);
        if !*reaped {
            if let Err(e) = rustix::process::kill_process_group(self.pid, signal) {
                tracing::debug!(pid = %self.pid, ?signal, "signalling the group: {e}");
            }
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
mod tests {
    use super::rootfs::list_dir;
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;
    use std::time::Instant;

    const SUCCESS: Exit = Exit {
        code: 0,
        signal: None,
    };

    /// A temporary directory holding a container's scratch dir, its log and
    /// the host side of its volumes.
    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("temp dir");
            fs::create_dir(dir.path().join("scratch")).expect("scratch dir");
            Fixture { dir }
        }

        /// A host directory (a volume's source) with the given files.
        fn volume(&self, name: &str, files: &[(&str, &str)]) -> PathBuf {
            let path = self.dir.path().join(name);
            fs::create_dir(&path).expect("volume dir");
            for (file, contents) in files {
                fs::write(path.join(file), contents).expect("volume file");
            }
            path
        }

        fn launch(&self, argv: &[&str]) -> Launch {
            Launch {
                argv: argv.iter().map(|arg| arg.to_string()).collect(),
                env: vec![("PATH".to_owned(), DEFAULT_PATH.to_owned())],
                working_dir: None,
                mounts: Vec::new(),
                scratch_dir: self.dir.path().join("scratch"),
                log_path: self.dir.path().join("container.log"),
            }
        }

        /// `sh -c script`, with `data` mounted at `/data` when given.
        fn sh(&self, script: &str, data: Option<&Path>) -> Launch {
            let mut launch = self.launch(&["sh", "-c", script]);
            launch
                .mounts
                .extend(data.map(|host| mount(host, "/data", false)));
            launch
        }

        fn log(&self) -> String {
            fs::read_to_string(self.dir.path().join("container.log")).unwrap_or_default()
        }

        /// Runs the container to its end: its exit and its whole log.
        async fn run(&self, launch: &Launch) -> (Exit, String) {
            let _ = fs::remove_file(self.dir.path().join("container.log"));
            let mut process = Process::spawn(launch).expect("spawn");
            let exit = tokio::time::timeout(Duration::from_secs(20), process.wait()).await;
            (exit.expect("the process exits"), self.log())
        }
    }

    fn mount(host: &Path, container: &str, read_only: bool) -> Mount {
        let container_path = PathBuf::from(container);
        Mount {
            host_path: host.to_owned(),
            container_path,
            read_only,
        }
    }

    /// Waits until `check` holds, for at most 10 s.
    async fn until(mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(Instant::now() < deadline, "timed out");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether process `pid` exists and is not a zombie.
    fn alive(pid: &str) -> bool {
        let stat = fs::read_to_string(format!("/proc/{}/stat", pid.trim()));
        stat.is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
    }

    #[tokio::test]
    async fn a_volume_is_read_and_written_through() {
        let fixture = Fixture::new();
        let data = fixture.volume("data", &[("in", "from the host\n")]);
        let launch = fixture.sh("cat /data/in && echo hello > /data/out", Some(&data));
        assert_eq!(
            fixture.run(&launch).await,
            (SUCCESS, "from the host\n".to_owned())
        );
        assert_eq!(
            fs::read_to_string(data.join("out")).expect("written"),
            "hello\n"
        );
    }

    #[tokio::test]
    async fn read_only_volumes_and_the_image_refuse_writes() {
        let fixture = Fixture::new();
        let data = fixture.volume("data", &[]);
        // Writing the host name back unchanged is harmless if it succeeds.
        let script = "echo x > /data/f; echo y > /etc/ks-sandbox-test; mkdir /usr/ks-sandbox-test; \
                      read name < /proc/sys/kernel/hostname; echo $name > /proc/sys/kernel/hostname";
        let mut launch = fixture.sh(script, None);
        launch.mounts.push(mount(&data, "/data", true));
        let (exit, log) = fixture.run(&launch).await;
        assert_eq!(exit.code, 2, "{log}");
        assert_eq!(log.matches("Read-only file system").count(), 4, "{log}");
        assert_eq!(fs::read_dir(&data).expect("volume").count(), 0);
        assert!(!Path::new("/etc/ks-sandbox-test").exists());
    }

    #[tokio::test]
    async fn a_file_is_mapped_where_the_host_has_nothing() {
        let fixture = Fixture::new();
        let bin = fixture.volume("bin", &[("mover", "#!/bin/sh\necho mover ran \"$@\"\n")]);
        fs::set_permissions(bin.join("mover"), fs::Permissions::from_mode(0o755)).expect("chmod");
        let data = fixture.volume("data", &[("f", "seen\n")]);
        let listing =
            || ["/", "/usr", "/usr/local/bin", "/run"].map(|dir| list_dir(Path::new(dir)));
        let before = listing().map(|names| names.expect("listing"));

        let mut launch = fixture.launch(&["mover", "send"]);
        launch.mounts = vec![
            mount(&bin.join("mover"), "/usr/local/bin/mover", true),
            mount(&data, "/var/run/ks/data", false),
            mount(&data, "/new/data", false),
            // Shadows /usr, which holds the shadow of /usr/local/bin.
            mount(&data, "/usr/ks-new/data", false),
        ];
        assert_eq!(
            fixture.run(&launch).await,
            (SUCCESS, "mover ran send\n".to_owned())
        );

        // The shadowed /usr/local/bin shows the host's entries and the mover,
        // and /var/run -> /run led into the container's /run.
        let script = "ls -A /usr/local/bin; cat /run/ks/data/f /new/data/f /usr/ks-new/data/f";
        launch.argv = ["sh", "-c", script].map(String::from).to_vec();
        let mut expected: Vec<_> = before[2]
            .iter()
            .map(|name| name.to_string_lossy())
            .collect();
        expected.push("mover".into());
        expected.sort();
        let expected = format!("{}\nseen\nseen\nseen\n", expected.join("\n"));
        assert_eq!(fixture.run(&launch).await, (SUCCESS, expected));

        let after = listing().map(|names| names.expect("listing"));
        assert_eq!(before, after, "the host got no new entries");
    }

    #[tokio::test]
    async fn tmp_is_the_containers_own() {
        let fixture = Fixture::new();
        let marker = format!("ks-sandbox-marker-{}", std::process::id());
        let launch = fixture.sh(&format!("ls -A /tmp; echo secret > /tmp/{marker}"), None);
        assert_eq!(fixture.run(&launch).await, (SUCCESS, String::new()));
        assert!(!Path::new("/tmp").join(&marker).exists());
        assert!(fixture
            .dir
            .path()
            .join("scratch/tmp")
            .join(&marker)
            .exists());
    }

    #[tokio::test]
    async fn the_environment_is_only_what_was_given() {
        let fixture = Fixture::new();
        let mut launch = fixture.launch(&["/usr/bin/env"]);
        let pairs = [("A", "1"), ("B", "two words"), ("A", "3")];
        launch.env = pairs.map(|(k, v)| (k.to_owned(), v.to_owned())).to_vec();
        assert_eq!(
            fixture.run(&launch).await,
            (SUCCESS, "A=3\nB=two words\n".to_owned())
        );
    }

    #[tokio::test]
    async fn exit_codes_and_signals_pass_through() {
        let fixture = Fixture::new();
        let (exit, _) = fixture.run(&fixture.sh("exit 7", None)).await;
        assert_eq!(
            exit,
            Exit {
                code: 7,
                signal: None
            }
        );
        let (exit, _) = fixture.run(&fixture.sh("kill -USR1 $$", None)).await;
        assert_eq!(
            exit,
            Exit {
                code: 128 + libc::SIGUSR1,
                signal: Some(libc::SIGUSR1)
            }
        );
    }

    #[tokio::test]
    async fn working_dir_and_nested_volumes() {
        let fixture = Fixture::new();
        let outer = fixture.volume("outer", &[]);
        fs::create_dir(outer.join("sub")).expect("sub dir");
        let inner = fixture.volume("inner", &[("f", "nested\n")]);
        let mut launch = fixture.sh("pwd; cat f", Some(&outer));
        launch.mounts.push(mount(&inner, "/data/./sub/", false));
        launch.working_dir = Some(PathBuf::from("/data/sub"));
        assert_eq!(
            fixture.run(&launch).await,
            (SUCCESS, "/data/sub\nnested\n".to_owned())
        );
    }

    #[tokio::test]
    async fn stop_terminates_the_whole_group() {
        let fixture = Fixture::new();
        let data = fixture.volume("data", &[]);
        let launch = fixture.sh("sleep 1000 & echo $! > /data/pid; wait", Some(&data));
        let mut process = Process::spawn(&launch).expect("spawn");
        let pid_file = data.join("pid");
        until(|| fs::read_to_string(&pid_file).is_ok_and(|pid| pid.ends_with('\n'))).await;
        let sleep = fs::read_to_string(&pid_file).expect("pid");
        assert!(alive(&sleep));
        let started = Instant::now();
        assert_eq!(
            process.stop(Duration::from_secs(30)).await,
            Exit::killed(libc::SIGTERM)
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        until(|| !alive(&sleep)).await;
    }

    #[tokio::test]
    async fn the_rest_of_the_group_dies_with_the_main_process() {
        let fixture = Fixture::new();
        let data = fixture.volume("data", &[]);
        let launch = fixture.sh("sleep 1000 & echo $! > /data/pid", Some(&data));
        assert_eq!(fixture.run(&launch).await.0, SUCCESS);
        let sleep = fs::read_to_string(data.join("pid")).expect("pid");
        until(|| !alive(&sleep)).await;
    }

    #[tokio::test]
    async fn stop_kills_after_the_grace_period() {
        let fixture = Fixture::new();
        let script = "trap '' TERM; echo ready; while true; do sleep 0.1; done";
        let mut process = Process::spawn(&fixture.sh(script, None)).expect("spawn");
        until(|| fixture.log() == "ready\n").await;
        let started = Instant::now();
        let exit = process.stop(Duration::from_millis(300)).await;
        assert_eq!(
            exit,
            Exit {
                code: 137,
                signal: Some(libc::SIGKILL)
            }
        );
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(
            process.stop(Duration::ZERO).await,
            exit,
            "stopping again says how it ended"
        );
    }

    #[test]
    fn start_failures_say_what_failed() {
        let fixture = Fixture::new();
        let data = fixture.volume("data", &[("plain", "text"), ("garbage", "\x01\x02")]);
        let executable = fs::Permissions::from_mode(0o755);
        fs::set_permissions(data.join("garbage"), executable).expect("chmod");
        // The last one fails in the child, at `execve`.
        let cases = [
            (
                "no-such-command",
                r#"exec: "no-such-command": executable file not found in $PATH"#,
            ),
            (
                "/no/such/file",
                r#"exec: "/no/such/file": stat /no/such/file: no such file or directory"#,
            ),
            ("/data/plain", r#"exec: "/data/plain": permission denied"#),
            (
                "./garbage",
                r#"exec: "/data/garbage": Exec format error (os error 8)"#,
            ),
        ];
        for (command, message) in cases {
            let mut launch = fixture.launch(&[command]);
            launch.mounts.push(mount(&data, "/data", false));
            launch.working_dir = Some(PathBuf::from("/data"));
            let error = Process::spawn(&launch).expect_err(command);
            assert_eq!(
                (error.reason(), error.to_string().as_str()),
                ("RunContainerError", message)
            );
        }
    }

    #[test]
    fn mount_points_are_not_created_in_volumes() {
        let fixture = Fixture::new();
        let (outer, inner) = (fixture.volume("outer", &[]), fixture.volume("inner", &[]));
        let mut launch = fixture.launch(&["true"]);
        launch.mounts = vec![
            mount(&outer, "/data", false),
            mount(&inner, "/data/sub", false),
        ];
        let error = Process::spawn(&launch).expect_err("no mount point");
        assert_eq!(error.reason(), "CreateContainerError");
        assert!(
            error.to_string().contains("does not exist in the volume"),
            "{error}"
        );
        assert_eq!(fs::read_dir(&outer).expect("volume").count(), 0);
        launch.mounts = vec![mount(&fixture.dir.path().join("nope"), "/data", false)];
        let error = Process::spawn(&launch).expect_err("no source");
        assert_eq!(error.reason(), "CreateContainerError");
    }
}
