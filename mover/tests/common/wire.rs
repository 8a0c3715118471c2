//! Playing a hostile sender below the frame API, for the `hostile_*` tests:
//! frames honest and raw (paths as plain bytes, so that they can hold what a
//! `RelPath` refuses), the sender's end of a connection, a receiver in this
//! process or as the real `mover receive` binary (whose peak RSS is read from
//! `/proc`), and what the receiver left on disk.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures::StreamExt;
use mover::delta::{Op, LITERAL_CHUNK};
use mover::meta::{Kind, Meta, Mtime};
use mover::path::RelPath;
use mover::protocol::{
    AbortReason, Entry, FileOutcome, Frame, FrameCodec, Hello, ListStats, ProtocolError,
    SessionOptions, WireCounter, WireOp,
};
use mover::session::receiver::{receive, ReceiverConfig};
use mover::session::SessionError;
use mover::stats::Summary;
use serde::Serialize;
use tempfile::TempDir;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, DuplexStream, WriteHalf};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::codec::{Encoder, FramedRead};

use super::{KIB, MIB, MOVER};

/// Longest wait for any one step: a receiver that takes longer is hung.
pub const STEP: Duration = Duration::from_secs(60);
/// Peak resident memory allowed to a receiver under attack.
pub const RSS_LIMIT: u64 = 256 * MIB as u64;

// ---------------------------------------------------------------------------
// Frames, honest and raw.

pub fn p(s: impl AsRef<[u8]>) -> RelPath {
    RelPath::new(s.as_ref().to_vec()).unwrap()
}

pub fn meta(perm: u32, size: u64) -> Meta {
    Meta {
        perm,
        size,
        mtime: Mtime {
            sec: 1_600_000_000,
            nsec: 0,
        },
        ..Meta::default()
    }
}

pub fn entry(path: impl AsRef<[u8]>, kind: Kind, size: u64) -> Frame {
    let perm = if kind == Kind::Dir { 0o755 } else { 0o644 };
    Frame::Entry(Entry {
        path: p(path),
        kind,
        meta: meta(perm, size),
        checksum: None,
    })
}

pub fn dir(path: impl AsRef<[u8]>) -> Frame {
    entry(path, Kind::Dir, 0)
}

pub fn done(path: impl AsRef<[u8]>) -> Frame {
    Frame::DirDone(p(path))
}

pub fn list_end() -> Frame {
    Frame::ListEnd(ListStats::default())
}

pub fn symlink_kind(target: impl AsRef<[u8]>) -> Kind {
    Kind::Symlink(target.as_ref().to_vec())
}

pub fn bytes_of(path: &Path) -> Vec<u8> {
    path.as_os_str().as_bytes().to_vec()
}

/// A frame as the library's codec puts it on the wire.
pub fn encode(frame: Frame) -> Vec<u8> {
    let mut buf = BytesMut::new();
    FrameCodec::new(WireCounter::default())
        .encode(frame, &mut buf)
        .expect("an encodable frame");
    buf.to_vec()
}

/// The wire layout of the frames that carry paths, with the paths as plain
/// bytes so that they can hold what a `RelPath` refuses. The codec writes a
/// big-endian `u32` length, then the postcard payload: an enum is its variant
/// index (a varint) then its fields in order, and a `RelPath` is a `Vec<u8>`
/// (a varint length, then the bytes). The unit stand-ins keep the variant
/// indices of `Frame` and `Kind`; `the_raw_layout_is_the_codecs` (in
/// `hostile_paths.rs`) checks that this layout is the codec's.
#[derive(Serialize)]
pub enum RawFrame {
    Hello(()),
    Accept(()),
    Abort(()),
    Entry(RawEntry),
    DirDone(Vec<u8>),
}

#[derive(Serialize)]
pub struct RawEntry {
    path: Vec<u8>,
    kind: RawKind,
    meta: Meta,
    checksum: Option<[u8; 32]>,
}

/// `Kind`, with a hard link's target as plain bytes.
#[derive(Serialize)]
pub enum RawKind {
    File,
    Dir,
    Symlink(Vec<u8>),
    Fifo,
    Socket,
    CharDev(u64),
    BlockDev(u64),
    HardLink(Vec<u8>),
}

pub fn raw_frame(frame: &RawFrame) -> Vec<u8> {
    let payload = postcard::to_allocvec(frame).unwrap();
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&payload);
    out
}

pub fn raw_entry(path: &[u8], kind: RawKind, size: u64) -> Vec<u8> {
    let perm = if matches!(kind, RawKind::Dir) {
        0o755
    } else {
        0o644
    };
    raw_frame(&RawFrame::Entry(RawEntry {
        path: path.to_vec(),
        kind,
        meta: meta(perm, size),
        checksum: None,
    }))
}

// ---------------------------------------------------------------------------
// Playing the sender.

/// The sender's end of a connection: frames (or raw bytes) go out as the
/// script says; whatever the receiver sends is read at once (so it never
/// blocks on us) and kept for the script to look at.
pub struct Wire<W> {
    pub wr: W,
    pub from_receiver: mpsc::UnboundedReceiver<Frame>,
}

impl<W: AsyncWrite + Unpin> Wire<W> {
    pub fn new<R: AsyncRead + Send + Unpin + 'static>(rd: R, wr: W) -> Wire<W> {
        let (tx, from_receiver) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut frames = FramedRead::new(rd, FrameCodec::new(WireCounter::default()));
            while let Some(Ok(frame)) = frames.next().await {
                if tx.send(frame).is_err() {
                    break;
                }
            }
        });
        Wire { wr, from_receiver }
    }

    /// Writes `bytes`; false once the receiver has hung up.
    pub async fn raw(&mut self, bytes: &[u8]) -> bool {
        let written = async {
            self.wr.write_all(bytes).await?;
            self.wr.flush().await
        };
        match tokio::time::timeout(STEP, written).await {
            Ok(r) => r.is_ok(),
            Err(_) => panic!("the receiver neither reads nor hangs up"),
        }
    }

    pub async fn send(&mut self, frame: Frame) -> bool {
        self.raw(&encode(frame)).await
    }

    /// Sends frames until the receiver hangs up; returns how many went out.
    pub async fn send_all(&mut self, frames: Vec<Frame>) -> usize {
        let mut sent = 0;
        for frame in frames {
            if !self.send(frame).await {
                break;
            }
            sent += 1;
        }
        sent
    }

    /// The receiver's next frame that `pick` takes (others are skipped);
    /// `None` once it has hung up.
    pub async fn expect<T>(
        &mut self,
        what: &str,
        mut pick: impl FnMut(&Frame) -> Option<T>,
    ) -> Option<T> {
        let found = tokio::time::timeout(STEP, async {
            while let Some(frame) = self.from_receiver.recv().await {
                if let Some(t) = pick(&frame) {
                    return Some(t);
                }
            }
            None
        })
        .await;
        found.unwrap_or_else(|_| panic!("no {what} from the receiver within {STEP:?}"))
    }

    pub async fn handshake(&mut self, opts: SessionOptions) {
        assert!(self.send(Frame::Hello(Hello::new(opts))).await);
        let accepted = self
            .expect("Accept", |f| match f {
                Frame::Accept(_) => Some(()),
                Frame::Abort(a) => panic!("the receiver refused the session: {}", a.message),
                _ => None,
            })
            .await;
        assert!(accepted.is_some(), "the receiver hung up in the handshake");
    }

    /// Sends a `Hello` with `opts` as is; the receiver's answer: `Ok` if it
    /// accepted the session, else the message of its `Abort`.
    pub async fn hello(&mut self, opts: SessionOptions) -> Result<(), String> {
        assert!(self.send(Frame::Hello(Hello::new(opts))).await);
        let answer = self
            .expect("Accept or Abort", |f| match f {
                Frame::Accept(_) => Some(Ok(())),
                Frame::Abort(a) => Some(Err(a.message.clone())),
                _ => None,
            })
            .await;
        answer.expect("the receiver hung up without an answer")
    }

    /// Lists a tree of one file `f` of `size` bytes and returns the id of
    /// the receiver's request for it.
    pub async fn list_one_file(&mut self, size: u64) -> u64 {
        self.send_all(vec![
            dir(""),
            entry("f", Kind::File, size),
            done(""),
            list_end(),
        ])
        .await;
        self.request_for("f").await
    }

    /// The id of the receiver's request for `path`.
    pub async fn request_for(&mut self, path: &str) -> u64 {
        let id = self
            .expect(&format!("request for {path}"), |f| match f {
                Frame::Request(r) if r.path.as_bytes() == path.as_bytes() => Some(r.id),
                Frame::Abort(a) => panic!("the receiver aborted: {}", a.message),
                _ => None,
            })
            .await;
        id.unwrap_or_else(|| panic!("the receiver hung up before requesting {path}"))
    }

    /// The next credit the receiver grants; `None` once it has hung up.
    pub async fn credit(&mut self) -> Option<u64> {
        self.expect("credit", |f| match f {
            Frame::Credit(n) => Some(u64::from(*n)),
            _ => None,
        })
        .await
    }

    /// The `Abort` the receiver sent, if any.
    pub async fn abort(&mut self) -> Option<AbortReason> {
        self.expect("Abort", |f| match f {
            Frame::Abort(a) => Some(a.clone()),
            _ => None,
        })
        .await
    }

    /// Answers the receiver's requests with whole files from `files`, then
    /// ends the data once it says no more requests will come. False if it
    /// hung up first.
    pub async fn serve(&mut self, files: &HashMap<Vec<u8>, Vec<u8>>) -> bool {
        loop {
            let next = self
                .expect("a request or the end of requests", |f| match f {
                    Frame::Request(r) => Some(Some((r.id, r.path.clone()))),
                    Frame::RequestsEnd => Some(None),
                    _ => None,
                })
                .await;
            match next {
                None => return false,
                Some(None) => return self.send(Frame::DataEnd).await,
                Some(Some((id, path))) => {
                    let data = files
                        .get(path.as_bytes())
                        .unwrap_or_else(|| panic!("unexpected request for {path}"));
                    if self.send_all(file_frames(id, data)).await == 0 {
                        return false;
                    }
                }
            }
        }
    }
}

/// An honest answer to request `id`: the whole of `data`, and its hash.
pub fn file_frames(id: u64, data: &[u8]) -> Vec<Frame> {
    let mut frames = vec![Frame::FileBegin {
        id,
        meta: meta(0o644, data.len() as u64),
    }];
    for chunk in data.chunks(LITERAL_CHUNK) {
        frames.push(Frame::Ops {
            id,
            ops: vec![WireOp::Plain(Op::Literal(chunk.to_vec()))],
        });
    }
    frames.push(Frame::FileEnd {
        id,
        outcome: FileOutcome::Sent(*blake3::hash(data).as_bytes()),
    });
    frames
}

pub type Outcome = Result<Summary, SessionError>;
pub type InProcess = (Wire<WriteHalf<DuplexStream>>, JoinHandle<Outcome>);

/// A receiver into `root` in this process, and the sender's end of its connection.
pub fn in_process(root: &Path) -> InProcess {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let receiver = tokio::spawn(receive(theirs, ReceiverConfig::new(root.to_path_buf())));
    let (rd, wr) = tokio::io::split(ours);
    (Wire::new(rd, wr), receiver)
}

/// How the in-process receiver ended (bounded: a receiver that does not end is hung).
pub async fn outcome(receiver: JoinHandle<Outcome>) -> Outcome {
    tokio::time::timeout(STEP, receiver)
        .await
        .expect("the receiver hung")
        .expect("the receiver panicked")
}

/// A whole session: handshake, `list`, then `files` served on request.
pub async fn transfer(
    root: &Path,
    opts: SessionOptions,
    list: Vec<Frame>,
    files: &[(&str, &[u8])],
) -> Outcome {
    let (mut w, receiver) = in_process(root);
    w.handshake(opts).await;
    w.send_all(list).await;
    let files: HashMap<Vec<u8>, Vec<u8>> = files
        .iter()
        .map(|(path, data)| (path.as_bytes().to_vec(), data.to_vec()))
        .collect();
    w.serve(&files).await;
    outcome(receiver).await
}

pub fn delete() -> SessionOptions {
    SessionOptions {
        delete: true,
        ..SessionOptions::default()
    }
}

/// Asserts that the receiver refused with a protocol error (exit code 12, not
/// retryable) whose message contains each of `words`; returns the message.
pub fn assert_protocol_error(r: &Outcome, what: &str, words: &[&str]) -> String {
    let e = match r {
        Ok(s) => panic!("{what}: the session succeeded: {s:?}"),
        Err(e) => e,
    };
    assert!(
        matches!(
            e,
            SessionError::Protocol(ProtocolError::Violation(_) | ProtocolError::Decode(_))
        ),
        "{what}: expected a protocol error, got {e:?}"
    );
    assert_eq!(e.exit_code(), 12, "{what}: {e}");
    assert!(!e.is_retryable(), "{what}: {e} is called retryable");
    let msg = e.to_string();
    for word in words {
        assert!(msg.contains(word), "{what}: {msg:?} does not say {word:?}");
    }
    msg
}

// ---------------------------------------------------------------------------
// What is on disk.

/// Every name under `dir`, at any depth and without following symlinks, with
/// what it is: a file's size and hash, a symlink's target, or a directory.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for de in rd {
            let path = de.unwrap().path();
            let md = fs::symlink_metadata(&path).unwrap();
            let what = if md.is_symlink() {
                format!("symlink to {:?}", fs::read_link(&path).unwrap())
            } else if md.is_dir() {
                "directory".to_string()
            } else if md.is_file() {
                let data = fs::read(&path).unwrap();
                format!("file of {} bytes, {}", data.len(), blake3::hash(&data))
            } else {
                format!("special, mode {:o}", md.mode())
            };
            out.insert(path.strip_prefix(base).unwrap().to_path_buf(), what);
            if md.is_dir() {
                walk(base, &path, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// What `snapshot(top)` holds outside `root` (a directory under `top`, left out too).
pub fn outside(top: &Path, root: &Path) -> BTreeMap<PathBuf, String> {
    let inner = root.strip_prefix(top).unwrap();
    let mut all = snapshot(top);
    all.retain(|path, _| !path.starts_with(inner));
    all
}

pub fn is_temp(path: &Path) -> bool {
    let name = path.file_name().map_or(&[][..], |n| n.as_bytes());
    name.starts_with(b".volmig-") && name.ends_with(b".tmp")
}

/// The receiver's temporary files under `dir`, at any depth.
pub fn temp_files(dir: &Path) -> Vec<PathBuf> {
    snapshot(dir)
        .into_keys()
        .filter(|path| is_temp(path))
        .collect()
}

pub fn names(dir: &Path) -> BTreeSet<String> {
    match fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|de| de.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

// ---------------------------------------------------------------------------
// The real binary, its peak RSS read from /proc.

/// A `mover receive --keep-serving` process: it outlives the session, so
/// its `VmHWM` after the session is the session's true peak.
pub struct MoverReceiver {
    child: Child,
    addr: SocketAddr,
    stdout: PathBuf,
    stderr: PathBuf,
    _dir: TempDir,
}

impl MoverReceiver {
    pub fn spawn(root: &Path) -> MoverReceiver {
        let dir = tempfile::tempdir().unwrap();
        let (stdout, stderr) = (dir.path().join("stdout"), dir.path().join("stderr"));
        let addr_file = dir.path().join("addr");
        let child = Command::new(MOVER)
            .args(["receive", "--listen", "127.0.0.1:0", "--keep-serving"])
            .arg("--insecure")
            .arg("--root")
            .arg(root)
            .arg("--addr-file")
            .arg(&addr_file)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&stdout).unwrap())
            .stderr(fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("starting mover receive");
        let mut rcv = MoverReceiver {
            child,
            addr: "127.0.0.1:0".parse().unwrap(),
            stdout,
            stderr,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(text) = fs::read_to_string(&addr_file) {
                if let Ok(addr) = text.trim().parse() {
                    rcv.addr = addr;
                    return rcv;
                }
            }
            assert!(
                Instant::now() < deadline && rcv.status("VmHWM").is_some(),
                "mover receive did not start: {}",
                rcv.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A `/proc/PID/status` field in KiB (none once the process has exited).
    pub fn status(&self, field: &str) -> Option<u64> {
        let text = fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = text.lines().find(|l| l.starts_with(&format!("{field}:")))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// Peak resident memory so far, in bytes.
    pub fn peak(&self) -> u64 {
        self.status("VmHWM").expect("the receiver is gone") * KIB as u64
    }

    /// The session's summary line, once the receiver has written it.
    pub async fn session_summary(&self) -> serde_json::Value {
        let deadline = Instant::now() + STEP;
        loop {
            let out = fs::read_to_string(&self.stdout).unwrap_or_default();
            let found = out.lines().find_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                (v.get("event")? == "summary").then_some(v)
            });
            if let Some(v) = found {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "no summary from the receiver within {STEP:?}; stderr: {}",
                self.stderr_text()
            );
            assert!(
                self.status("VmHWM").is_some(),
                "the receiver exited (crashed?): {}",
                self.stderr_text()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn stderr_text(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub async fn connect(&self) -> Wire<tokio::net::tcp::OwnedWriteHalf> {
        let stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let (rd, wr) = stream.into_split();
        Wire::new(rd, wr)
    }

    /// A receiver into `root`, its idle peak RSS, and a session with it
    /// past the handshake: where every memory test starts.
    pub async fn with_session(
        root: &Path,
        opts: SessionOptions,
    ) -> (MoverReceiver, u64, Wire<tokio::net::tcp::OwnedWriteHalf>) {
        let rcv = MoverReceiver::spawn(root);
        let idle = rcv.peak();
        let mut w = rcv.connect().await;
        w.handshake(opts).await;
        (rcv, idle, w)
    }
}

impl Drop for MoverReceiver {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("mover receive said:\n{}", self.stderr_text());
        }
        // It serves on (--keep-serving) until killed.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts that the summary line reports exit code `code` and an error
/// that contains each of `words`.
pub fn assert_summary_error(summary: &serde_json::Value, code: i64, words: &[&str]) {
    assert_eq!(summary["exit_code"].as_i64(), Some(code), "{summary}");
    let error = summary["error"].as_str().unwrap_or_default();
    for word in words {
        assert!(error.contains(word), "{error:?} does not say {word:?}");
    }
}

/// `n` bytes, in MiB.
pub fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / MIB as f64)
}
