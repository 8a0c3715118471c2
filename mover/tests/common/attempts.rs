//! The attempt machinery of the resume tests: deterministic source trees, running one attempt
//! (receiver, fault-injecting [`Proxy`](super::proxy::Proxy), sender) with an optional fault,
//! and reading what it left behind (progress events, the checkpoint per `mover inspect`, what
//! the destination holds of it).

use super::proxy::Proxy;
use super::*;

/// SplitMix64: a tiny deterministic generator for delays, sizes and fault choices.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

pub const MIB64: u64 = MIB as u64;

pub fn ms(d: Option<Duration>) -> String {
    d.map_or("never".to_string(), |d| format!("{}ms", d.as_millis()))
}

pub fn mib(n: u64) -> String {
    format!("{:.2} MiB", n as f64 / MIB as f64)
}

/// Regular files of a source tree.
#[derive(Debug, Default, Clone, Copy)]
pub struct TreeSize {
    pub files: u64,
    pub bytes: u64,
}

/// Builds `root`: one file of random (incompressible) data per entry of `large_mib` under
/// `big/`, and `small` files of 1-16 KiB spread over two levels of directories. Deterministic
/// for a given `seed` (contents, sizes and mtimes).
pub fn build_tree(root: &Path, seed: u64, large_mib: &[usize], small: usize) -> TreeSize {
    let mut rng = Rng(seed);
    let mut size = TreeSize::default();
    mkdirs(&root.join("big"));
    for (i, &len) in large_mib.iter().enumerate() {
        let data = random_bytes(&format!("{seed}-large-{i}"), len * MIB);
        write_file(&root.join(format!("big/large-{i}.bin")), &data, 0o644);
        size.files += 1;
        size.bytes += data.len() as u64;
    }
    for i in 0..small {
        let dir = root.join(format!("d{:02}/e{:02}", i % 13, (i / 13) % 11));
        mkdirs(&dir);
        let len = rng.range(KIB as u64, 16 * KIB as u64) as usize;
        let data = random_bytes(&format!("{seed}-small-{i}"), len);
        write_file(&dir.join(format!("f{i:05}.dat")), &data, 0o644);
        size.files += 1;
        size.bytes += len as u64;
    }
    set_tree_mtimes(root);
    size
}

/// (scratch, src, dst) with `dst` created empty.
pub fn setup(
    seed: u64,
    large_mib: &[usize],
    small: usize,
) -> (Scratch, PathBuf, PathBuf, TreeSize) {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    mkdirs(&dst);
    let size = build_tree(&src, seed, large_mib, small);
    (tmp, src, dst, size)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    KillSender,
    KillReceiver,
    TermReceiver,
    CutConnection,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillSender => "SIGKILL sender",
            Fault::KillReceiver => "SIGKILL receiver",
            Fault::TermReceiver => "SIGTERM receiver",
            Fault::CutConnection => "cut connection",
        }
    }
}

/// What to do during an attempt: inject `fault` once the proxy forwarded `after` bytes
/// sender -> receiver in this attempt.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub fault: Fault,
    pub after: u64,
}

/// One attempt: a fresh receiver, a fresh proxy and a fresh sender.
pub struct Attempt {
    pub n: u32,
    pub plan: Option<Plan>,
    /// The fault actually injected (None if both processes had already exited).
    pub injected: Option<Fault>,
    /// Bytes the proxy forwarded sender -> receiver / receiver -> sender.
    pub up: u64,
    pub down: u64,
    pub sender: Output,
    pub receiver: Output,
    pub secs: f64,
    /// How long each side took to exit after the fault (or after the sender started).
    pub exit_after: (Option<Duration>, Option<Duration>),
    /// The checkpoint left behind (per `mover inspect`): null if none.
    pub checkpoint: Value,
    /// What the destination holds of that progress: see [`backed_bytes`].
    pub backed: u64,
}

impl Attempt {
    pub fn ok(&self) -> bool {
        self.sender.code == Some(0) && self.receiver.code == Some(0)
    }

    /// A fault was injected and the attempt did not complete.
    pub fn interrupted(&self) -> bool {
        self.injected.is_some() && !self.ok()
    }

    pub fn hung(&self) -> bool {
        self.sender.timed_out || self.receiver.timed_out
    }

    /// The progress events one side printed, in order.
    pub fn progress(&self, side: Side) -> Vec<Value> {
        let out = match side {
            Side::Sender => &self.sender,
            Side::Receiver => &self.receiver,
        };
        events(out)
            .into_iter()
            .filter(|v| v["event"] == "progress")
            .collect()
    }

    /// The last bytes_done one side reported, if it reported any.
    pub fn last_done(&self, side: Side) -> Option<u64> {
        self.progress(side).last().map(|v| field(v, "bytes_done"))
    }

    pub fn line(&self) -> String {
        let fault = match (self.plan, self.injected) {
            (None, _) => "no fault".to_string(),
            (Some(p), Some(_)) => format!("{} after {}", p.fault.name(), mib(p.after)),
            (Some(p), None) => format!("{} planned, not injected", p.fault.name()),
        };
        let last = |s| self.last_done(s).map_or("-".to_string(), mib);
        format!(
            "attempt {:2}: {fault:<38} exit s={:?} r={:?}{} forwarded {} (back {}), \
             last bytes_done s={} r={}, checkpoint {}, exited after s={} r={}, {:.2}s",
            self.n,
            self.sender.code,
            self.receiver.code,
            if self.hung() { " HUNG" } else { "" },
            mib(self.up),
            mib(self.down),
            last(Side::Sender),
            last(Side::Receiver),
            checkpoint_line(&self.checkpoint, self.backed),
            ms(self.exit_after.0),
            ms(self.exit_after.1),
            self.secs
        )
    }
}

/// Bytes of progress the destination can back: regular files of `src` present at `dst` with
/// the same size and mtime (what the quick check skips), plus the verified prefixes of the
/// partial files `cp` names whose temporary file exists.
pub fn backed_bytes(src: &Path, dst: &Path, cp: &Value) -> u64 {
    let mut backed = 0;
    for (_, abs, md) in walk(src) {
        if !md.is_file() {
            continue;
        }
        let there = fs::symlink_metadata(dst.join(abs.strip_prefix(src).unwrap()));
        let same = there.is_ok_and(|d| {
            d.is_file()
                && d.size() == md.size()
                && (d.mtime(), d.mtime_nsec()) == (md.mtime(), md.mtime_nsec())
        });
        if same {
            backed += md.size();
        }
    }
    for p in cp["partials"].as_array().into_iter().flatten() {
        let temp = p["temp"].as_str().map(|t| dst.join(t));
        if temp.is_some_and(|t| fs::symlink_metadata(t).is_ok()) {
            backed += p["verified_len"].as_u64().unwrap_or(0);
        }
    }
    backed
}

/// Every checkpoint left between attempts claims no more progress than the destination holds.
pub fn assert_checkpoints_backed(attempts: &[Attempt], log: &str) {
    let bad: Vec<String> = attempts
        .iter()
        .filter(|a| a.checkpoint["bytes_done"].as_u64().unwrap_or(0) > a.backed)
        .map(|a| format!("attempt {}: {}", a.n, a.checkpoint))
        .collect();
    assert!(
        bad.is_empty(),
        "checkpoints claiming more bytes_done than the destination holds (files in place + \
         verified prefixes of the partials they name):\n{}\n\nall attempts:\n{log}",
        bad.join("\n")
    );
}

/// `12.00 MiB (backed 12.00 MiB) [big/large-0.bin 3.00/40.00]`: a checkpoint's bytes_done,
/// what the destination holds of it, and its partials.
pub fn checkpoint_line(cp: &Value, backed: u64) -> String {
    if cp.is_null() {
        return "none".to_string();
    }
    let done = cp["bytes_done"].as_u64().map_or("?".to_string(), mib);
    let partials: Vec<String> = cp["partials"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let n = |f: &str| p[f].as_u64().unwrap_or(0) as f64 / MIB as f64;
            let path = p["path"].as_str().unwrap_or("?");
            format!("{path} {:.2}/{:.2}", n("verified_len"), n("size"))
        })
        .collect();
    format!("{done} (backed {}) [{}]", mib(backed), partials.join(", "))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Sender,
    Receiver,
}

/// Every JSON line of stdout; a process killed mid-line may leave a torn last line, which is
/// ignored (any other bad line fails the test).
pub fn events(out: &Output) -> Vec<Value> {
    let lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    let mut vals = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        match serde_json::from_str::<Value>(l) {
            Ok(v) => vals.push(v),
            Err(_) if i + 1 == lines.len() && out.code.is_none() => {}
            Err(e) => panic!("stdout line is not JSON ({e}): {l:?}\n{}", out.describe()),
        }
    }
    vals
}

/// A required unsigned field of a JSON event.
pub fn field(v: &Value, name: &str) -> u64 {
    v.get(name)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("event has no unsigned {name:?}: {v}"))
}

pub fn op_args(op: &str, n: u32) -> Vec<String> {
    ["--operation-id", op, "--attempt", &n.to_string()]
        .map(String::from)
        .into()
}

/// Runs attempt `n` of operation `op` from `src` into `dst` through a fresh proxy, both sides
/// with `--progress json`, the sender with `--bwlimit bwlimit`; injects `plan`'s fault once
/// the proxy forwarded enough. Waits (bounded) for both processes; leftovers are killed.
pub fn run_attempt(
    src: &Path,
    dst: &Path,
    op: &str,
    n: u32,
    bwlimit: &str,
    plan: Option<Plan>,
    extra_recv: &[&str],
) -> Attempt {
    let start = Instant::now();
    let mut recv_args = op_args(op, n);
    recv_args.extend(["--progress", "json"].map(String::from));
    recv_args.extend(extra_recv.iter().map(|s| s.to_string()));
    let recv_refs: Vec<&str> = recv_args.iter().map(String::as_str).collect();
    let mut receiver = spawn_receiver(dst, &recv_refs);
    let proxy = Proxy::start(receiver.addr);
    let mut send_args = op_args(op, n);
    send_args.extend(["--progress", "json", "--bwlimit", bwlimit].map(String::from));
    let send_refs: Vec<&str> = send_args.iter().map(String::as_str).collect();
    let mut sender = spawn_sender(proxy.addr(), src, &send_refs);

    let mut injected = None;
    if let Some(plan) = plan {
        // Stalled transfers get the fault anyway after a while.
        let deadline = Instant::now() + Duration::from_secs(30);
        while proxy.up() < plan.after
            && !sender.exited()
            && !receiver.proc.exited()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        if !sender.exited() && !receiver.proc.exited() {
            match plan.fault {
                Fault::KillSender => sender.kill(),
                Fault::KillReceiver => receiver.proc.kill(),
                Fault::TermReceiver => receiver.proc.terminate(),
                Fault::CutConnection => proxy.cut(),
            }
            injected = Some(plan.fault);
        }
    }
    // Both sides must notice a fault quickly; a clean attempt gets the usual bound.
    let limit = if injected.is_some() {
        Duration::from_secs(30)
    } else {
        RUN_TIMEOUT
    };
    let waiting = Instant::now();
    let (mut s_exit, mut r_exit) = (None, None);
    while (s_exit.is_none() || r_exit.is_none()) && waiting.elapsed() < limit {
        if s_exit.is_none() && sender.exited() {
            s_exit = Some(waiting.elapsed());
        }
        if r_exit.is_none() && receiver.proc.exited() {
            r_exit = Some(waiting.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let sender = sender.wait(Duration::ZERO);
    let receiver = receiver.wait(Duration::ZERO);
    let (up, down) = (proxy.up(), proxy.down());
    drop(proxy);
    let secs = start.elapsed().as_secs_f64();
    let checkpoint = inspect(dst)["checkpoint"].clone();
    let backed = backed_bytes(src, dst, &checkpoint);
    Attempt {
        n,
        plan,
        injected,
        up,
        down,
        sender,
        receiver,
        secs,
        exit_after: (s_exit, r_exit),
        checkpoint,
        backed,
    }
}

/// `mover inspect --root DST`, parsed.
pub fn inspect(dst: &Path) -> Value {
    let out = run_mover([OsStr::new("inspect"), OsStr::new("--root"), dst.as_os_str()]);
    out.assert_ok();
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "mover inspect did not print one JSON object ({e}): {}",
            out.describe()
        )
    })
}

pub fn describe_attempts(attempts: &[Attempt]) -> String {
    attempts
        .iter()
        .map(Attempt::line)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The stderr of both sides of an attempt, for failure messages.
pub fn dump(a: &Attempt) -> String {
    format!(
        "=== sender: {}\n=== receiver: {}",
        a.sender.describe(),
        a.receiver.describe()
    )
}

/// Files, symlinks and directories under `root` with what identifies their contents (size,
/// mtime and BLAKE3 of files, symlink targets); directory mtimes are left out.
pub fn fingerprint(root: &Path) -> BTreeMap<Vec<u8>, String> {
    walk(root)
        .into_iter()
        .map(|(rel, abs, md)| {
            let what = if md.is_file() {
                let data = fs::read(&abs).unwrap();
                let (size, mtime) = (md.size(), (md.mtime(), md.mtime_nsec()));
                format!("file {size} {mtime:?} {}", blake3::hash(&data))
            } else if md.is_symlink() {
                format!("symlink {:?}", fs::read_link(&abs).unwrap())
            } else {
                format!("{:?}", md.file_type())
            };
            (rel, what)
        })
        .collect()
}

/// `mover receive` that may refuse to start: returns the process and its address, or its
/// output if it exited before listening.
pub fn try_spawn_receiver(
    dst: &Path,
    extra: &[&str],
) -> Result<(Proc, SocketAddr, Scratch), Output> {
    let dir = scratch();
    let addr_file = dir.path().join("addr");
    let mut args: Vec<OsString> = vec!["receive".into(), "--listen".into(), "127.0.0.1:0".into()];
    args.extend([OsString::from("--root"), dst.into()]);
    args.extend(extra.iter().map(OsString::from));
    args.extend(security(extra));
    args.extend([OsString::from("--addr-file"), addr_file.clone().into()]);
    let mut proc = Proc::spawn(&args);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(addr) = fs::read_to_string(&addr_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return Ok((proc, addr, dir));
        }
        if proc.exited() {
            return Err(proc.wait(Duration::ZERO));
        }
        assert!(
            Instant::now() < deadline,
            "receiver neither listened nor exited within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
