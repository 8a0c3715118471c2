//! Running the mover binary and reading what it printed.

use super::*;

pub const MOVER: &str = env!("CARGO_BIN_EXE_mover");
pub const RUN_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Debug)]
pub struct Output {
    pub what: String,
    /// None if killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The process did not exit in time and was killed.
    pub timed_out: bool,
}

impl Output {
    pub fn describe(&self) -> String {
        let killed = if self.timed_out {
            " (TIMED OUT, killed)"
        } else {
            ""
        };
        let (what, code, out, err) = (&self.what, self.code, &self.stdout, &self.stderr);
        let head = format!("{what}\n  exit code: {code:?}{killed}");
        format!("{head}\n  --- stdout ---\n{out}\n  --- stderr ---\n{err}")
    }

    /// Asserts the process failed with one of `codes` and said why on stderr.
    pub fn assert_failed(&self, codes: &[i32], what: &str) {
        assert!(
            self.code.is_some_and(|c| codes.contains(&c)),
            "{what}: expected exit code {codes:?}: {}",
            self.describe()
        );
        assert!(
            !self.stderr.trim().is_empty(),
            "{what}: no error message on stderr: {}",
            self.describe()
        );
    }

    pub fn assert_ok(&self) -> &Self {
        assert_eq!(self.code, Some(0), "command failed: {}", self.describe());
        self
    }

    /// Every non-empty stdout line parsed as JSON (panics on an invalid line).
    pub fn json_lines(&self) -> Vec<Value> {
        let parse = |l: &str| {
            let r = serde_json::from_str(l);
            r.unwrap_or_else(|e| {
                panic!("stdout line is not JSON ({e}): {l:?}\n{}", self.describe())
            })
        };
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(parse)
            .collect()
    }

    /// The last `{"event":"summary",...}` line of stdout.
    pub fn summary(&self) -> Value {
        let found = self.stdout.lines().rev().find_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v.get("event")? == "summary").then_some(v)
        });
        found.unwrap_or_else(|| panic!("no summary line on stdout: {}", self.describe()))
    }

    /// A numeric field of the summary.
    pub fn stat(&self, field: &str) -> u64 {
        let s = self.summary();
        let v = s.get(field).and_then(Value::as_u64);
        v.unwrap_or_else(|| panic!("summary has no numeric {field:?}: {s}"))
    }
}

/// A running mover process; stdout/stderr go to files (no pipe can fill up). Killed on drop.
pub struct Proc {
    what: String,
    child: Child,
    logs: TempDir,
}

impl Proc {
    pub fn spawn<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Proc {
        Proc::spawn_program(MOVER, args)
    }

    /// Runs `program ARGS...` (a wrapper such as `setpriv` that runs the mover).
    pub fn spawn_program<S: AsRef<OsStr>>(
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = S>,
    ) -> Proc {
        let logs = TempDir::new().unwrap();
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null());
        cmd.stdout(fs::File::create(logs.path().join("out")).unwrap());
        cmd.stderr(fs::File::create(logs.path().join("err")).unwrap());
        let what = format!("{cmd:?}");
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        Proc { what, child, logs }
    }

    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// SIGKILLs the process (if still running).
    /// Sends SIGTERM, as Kubernetes does when it deletes a pod.
    pub fn terminate(&self) {
        let pid =
            rustix::process::Pid::from_raw(self.child.id() as i32).expect("a child has a pid");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }

    pub fn kill(&mut self) {
        if !self.exited() {
            let _ = self.child.kill();
        }
    }

    /// Waits for exit; on timeout kills the process and reports `timed_out`.
    pub fn wait(&mut self, timeout: Duration) -> Output {
        let deadline = Instant::now() + timeout;
        let status = loop {
            match self.child.try_wait().unwrap() {
                Some(st) => break Some(st),
                None if Instant::now() > deadline => break None,
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let read = |f: &str| {
            String::from_utf8_lossy(&fs::read(self.logs.path().join(f)).unwrap()).into_owned()
        };
        let (stdout, stderr) = (read("out"), read("err"));
        let (what, code, timed_out) = (
            self.what.clone(),
            status.and_then(|s| s.code()),
            status.is_none(),
        );
        Output {
            what,
            code,
            stdout,
            stderr,
            timed_out,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `mover ARGS...` (bounded by [`RUN_TIMEOUT`]) and captures its output.
pub fn run_mover<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Output {
    Proc::spawn(args).wait(RUN_TIMEOUT)
}

/// Plain TCP (`--insecure`) unless the test brings key material (`--tls-dir`).
pub fn security(extra: &[&str]) -> Option<OsString> {
    (!extra.contains(&"--tls-dir")).then(|| "--insecure".into())
}

/// A `mover receive` process listening on an ephemeral port of 127.0.0.1.
pub struct Receiver {
    pub addr: SocketAddr,
    pub proc: Proc,
    _dir: TempDir,
}

/// Spawns `mover receive --listen 127.0.0.1:0 --addr-file F --root ROOT EXTRA...` and waits
/// (at most 10 s) for the address file.
pub fn spawn_receiver(root: &Path, extra: &[&str]) -> Receiver {
    let mut args: Vec<OsString> = ["receive", "--listen", "127.0.0.1:0", "--root"]
        .map(OsString::from)
        .into();
    args.push(root.into());
    args.extend(extra.iter().map(OsString::from));
    args.extend(security(extra));
    let (addr, proc, dir) = spawn_listening(args, "receiver");
    Receiver {
        addr,
        proc,
        _dir: dir,
    }
}

/// A `mover send --listen` process: it waits for its receiver's side to connect.
pub struct ListeningSender {
    pub addr: SocketAddr,
    pub proc: Proc,
    _dir: TempDir,
}

/// Spawns `mover send --listen 127.0.0.1:0 --addr-file F --root SRC EXTRA...` and waits (at
/// most 10 s) for the address file.
pub fn spawn_listening_sender(src: &Path, extra: &[&str]) -> ListeningSender {
    let mut args: Vec<OsString> = ["send", "--listen", "127.0.0.1:0", "--root"]
        .map(OsString::from)
        .into();
    args.push(src.into());
    args.extend(extra.iter().map(OsString::from));
    args.extend(security(extra));
    let (addr, proc, dir) = spawn_listening(args, "sender");
    ListeningSender {
        addr,
        proc,
        _dir: dir,
    }
}

/// Runs `mover ARGS --addr-file F` and waits (at most 10 s) for F: the address it listens on.
fn spawn_listening(mut args: Vec<OsString>, what: &str) -> (SocketAddr, Proc, TempDir) {
    let dir = TempDir::new().unwrap();
    let addr_file = dir.path().join("addr");
    args.extend([OsString::from("--addr-file"), addr_file.clone().into()]);
    let mut proc = Proc::spawn(&args);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = fs::read_to_string(&addr_file) {
            if !text.trim().is_empty() {
                let parsed = text.trim().parse();
                let addr =
                    parsed.unwrap_or_else(|e| panic!("bad address {text:?} in addr file: {e}"));
                return (addr, proc, dir);
            }
        }
        if proc.exited() || Instant::now() > deadline {
            let out = proc.wait(Duration::ZERO);
            panic!(
                "{what} wrote no address file (within 10 s): {}",
                out.describe()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Receiver {
    /// Waits (bounded) for the receiver to exit; kills it on timeout (`timed_out` is then set).
    pub fn wait(mut self, timeout: Duration) -> Output {
        self.proc.wait(timeout)
    }
}

/// Starts `mover send --to ADDR --root SRC EXTRA...`.
pub fn spawn_sender(addr: SocketAddr, src: &Path, extra: &[&str]) -> Proc {
    let mut args: Vec<OsString> = vec!["send".into(), "--to".into(), addr.to_string().into()];
    args.extend([OsString::from("--root"), src.into()]);
    args.extend(extra.iter().map(OsString::from));
    args.extend(security(extra));
    Proc::spawn(&args)
}

/// Runs `mover send --to ADDR --root SRC EXTRA...` (bounded by [`RUN_TIMEOUT`]).
pub fn run_sender(addr: SocketAddr, src: &Path, extra: &[&str]) -> Output {
    spawn_sender(addr, src, extra).wait(RUN_TIMEOUT)
}

/// One TCP session: a fresh receiver into `dst`, a sender from `src`; returns (sender, receiver).
/// Does not check exit codes.
pub fn tcp_transfer(
    src: &Path,
    dst: &Path,
    send_args: &[&str],
    recv_args: &[&str],
) -> (Output, Output) {
    let receiver = spawn_receiver(dst, recv_args);
    let sender = run_sender(receiver.addr, src, send_args);
    let secs = if sender.code == Some(0) { 30 } else { 10 };
    (sender, receiver.wait(Duration::from_secs(secs)))
}

/// Like [`tcp_transfer`] but asserts both sides exit 0.
pub fn tcp_transfer_ok(src: &Path, dst: &Path, send_args: &[&str]) -> (Output, Output) {
    let (s, r) = tcp_transfer(src, dst, send_args, &[]);
    let ok = s.code == Some(0) && r.code == Some(0);
    assert!(
        ok,
        "TCP transfer failed\n=== sender: {}\n=== receiver: {}",
        s.describe(),
        r.describe()
    );
    (s, r)
}

/// `path` as an OsString with a trailing slash (rsync "contents of" semantics).
pub fn slash(path: &Path) -> OsString {
    let mut s = path.as_os_str().to_owned();
    s.push("/");
    s
}

/// `mover keygen --out DIR --operation-id OP`; DIR, for `--tls-dir`.
pub fn keygen(dir: &Path, op: &str) -> String {
    run_mover([
        "keygen".as_ref(),
        "--out".as_ref(),
        dir.as_os_str(),
        "--operation-id".as_ref(),
        op.as_ref(),
    ])
    .assert_ok();
    dir.to_str().unwrap().to_string()
}
