//! The sending side of a session: walks the source and answers requests with deltas.

use std::fs::File;
use std::io::{self, Read, Seek};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::codec::{FramedRead, FramedWrite};

use super::flow::Credits;
use super::generator::cancelled;
use super::outbox::{recv_or_flush, Outbox};
use super::supervise::{drain, Supervisor, CLEANUP};
use super::{warn, writer, ProgressFn, SessionError};
use crate::delta::{delta, DeltaOptions, Op, LITERAL_CHUNK};
use crate::filter::Filter;
use crate::meta::Meta;
use crate::path::RelPath;
use crate::protocol::{
    violation, FileOutcome, Frame, FrameCodec, Hello, ListStats, ProtocolError, Request,
    SessionOptions, WireCounter, WireOp, INITIAL_CREDIT, MAX_BLOCKS_PER_FILE, SIGS_PER_FRAME,
};
use crate::signature::{BlockSig, Index};
use crate::stats::Summary;
use crate::walk::{SourceRoot, WalkItem, Walker};

/// Reads of a file that keeps changing before it is reported as changed.
const MAX_TRIES: usize = 3;
/// Complete requests queued for the delta thread (so their files can be
/// prefetched while earlier ones are sent).
const REQUEST_QUEUE: usize = 1024;
/// Signature blocks queued for the delta thread at most (about 20 MiB).
const SIG_BUDGET: usize = 1 << 20;
/// Leading bytes of each queued file that are read ahead.
const PREFETCH_BYTES: u64 = 1 << 20;
/// Most frames handed on at once by the reader.
const READ_BATCH: usize = 256;
/// Ops per frame at most.
const OPS_PER_FRAME: usize = 4096;

/// How the sender runs.
#[derive(Clone)]
pub struct SenderConfig {
    pub root: PathBuf,
    pub options: SessionOptions,
    /// Outgoing bandwidth cap in bytes per second.
    pub bwlimit: Option<u64>,
    pub progress: Option<ProgressFn>,
}

/// Where the session is; decides which frames from the receiver are legal.
#[derive(Debug, Clone)]
pub enum State {
    /// Requests are arriving; `Some` while a request's signature blocks are still due.
    Serving(Option<(Request, Vec<BlockSig>)>),
    /// No more requests will come.
    RequestsDone,
}

/// What the reader does with a frame.
#[derive(Debug)]
pub enum Action {
    Credit(u32),
    /// A complete request (signature included).
    Serve(Request, Vec<BlockSig>),
    RequestsEnd,
    Progress(crate::stats::Progress),
    Done(Summary),
    Nothing,
}

impl State {
    /// Consumes a frame from the receiver; an illegal frame is a protocol violation.
    pub fn step(self, frame: Frame) -> Result<(State, Action), ProtocolError> {
        match (self, frame) {
            (s, Frame::Credit(n)) => Ok((s, Action::Credit(n))),
            (s, Frame::Progress(p)) => Ok((s, Action::Progress(p))),
            (State::Serving(None), Frame::Request(req)) => match req.basis {
                Some(shape) if shape.block_count() > MAX_BLOCKS_PER_FILE => Err(violation(
                    format!("request with {} signature blocks", shape.block_count()),
                )),
                Some(shape) if shape.block_count() > 0 => {
                    let cap = (shape.block_count() as usize).min(SIGS_PER_FRAME);
                    Ok((
                        State::Serving(Some((req, Vec::with_capacity(cap)))),
                        Action::Nothing,
                    ))
                }
                _ => Ok((State::Serving(None), Action::Serve(req, Vec::new()))),
            },
            (State::Serving(Some((req, mut sigs))), Frame::Sigs { id, sigs: more })
                if id == req.id =>
            {
                let want = req.basis.map_or(0, |s| s.block_count());
                if sigs.len() as u64 + more.len() as u64 > want {
                    return Err(violation(format!(
                        "more signature blocks than announced for {}",
                        req.path
                    )));
                }
                sigs.extend(more);
                if sigs.len() as u64 == want {
                    Ok((State::Serving(None), Action::Serve(req, sigs)))
                } else {
                    Ok((State::Serving(Some((req, sigs))), Action::Nothing))
                }
            }
            (State::Serving(None), Frame::RequestsEnd) => {
                Ok((State::RequestsDone, Action::RequestsEnd))
            }
            (State::RequestsDone, Frame::Done(s)) => Ok((State::RequestsDone, Action::Done(s))),
            (state, frame) => Err(violation(format!(
                "unexpected {} frame while {}",
                frame.name(),
                state.name()
            ))),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            State::Serving(None) => "serving requests",
            State::Serving(Some(_)) => "receiving a signature",
            State::RequestsDone => "finishing",
        }
    }
}

/// Runs one sending session over `stream`, reading from `cfg.root`.
pub async fn send<S>(stream: S, cfg: SenderConfig) -> Result<Summary, SessionError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let start = Instant::now();
    let filter =
        Filter::new(&cfg.options.excludes).map_err(|e| SessionError::Usage(e.to_string()))?;
    if !cfg.root.is_dir() {
        return Err(SessionError::local(
            format!("source {}", cfg.root.display()),
            io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
        ));
    }
    let (rd, wr) = tokio::io::split(stream);
    let (rx_count, tx_count) = (WireCounter::default(), WireCounter::default());
    let mut frames = FramedRead::new(rd, FrameCodec::new(rx_count.clone()));
    let mut sink = FramedWrite::new(wr, FrameCodec::new(tx_count.clone()));

    sink.send(Frame::Hello(Hello::new(cfg.options.clone())))
        .await?;
    let options = handshake(&mut frames).await?;

    let (out_tx, out_rx) = mpsc::channel(writer::QUEUE);
    let writer = tokio::spawn(writer::run(sink, out_rx, cfg.bwlimit, tx_count.clone()));
    let credits = Arc::new(Credits::new(INITIAL_CREDIT as u64));
    let mut sup = Supervisor::new();
    let walker = {
        let (root, out, credits, checksum) = (
            cfg.root.clone(),
            out_tx.clone(),
            credits.clone(),
            options.checksum,
        );
        let filter = filter.clone();
        sup.spawn(move || {
            walk(
                Walker::new(root, filter, checksum),
                Outbox::new(out),
                &credits,
            )
        })
    };
    let source = Arc::new(
        SourceRoot::open(&cfg.root)
            .map_err(|e| SessionError::local(format!("opening {}", cfg.root.display()), e))?,
    );
    let (req_tx, req_rx) = mpsc::channel(REQUEST_QUEUE);
    let (ahead_tx, ahead_rx) = std::sync::mpsc::sync_channel(REQUEST_QUEUE);
    {
        let source = source.clone();
        std::thread::spawn(move || prefetch(&source, ahead_rx));
    }
    let queue = Queue {
        tx: req_tx,
        ahead: ahead_tx,
        budget: Arc::new(Semaphore::new(SIG_BUDGET)),
    };
    let server = {
        let (out, opts) = (out_tx.clone(), options.clone());
        sup.spawn(move || serve(&source, filter, opts, req_rx, Outbox::new(out)))
    };

    let read = sup
        .watch(read_frames(
            &mut frames,
            &credits,
            queue,
            cfg.progress.as_ref(),
        ))
        .await;
    credits.close();
    let done = match read {
        Ok(summary) => {
            async {
                sup.join(walker).await?;
                sup.join(server).await?;
                Ok::<_, SessionError>(summary)
            }
            .await
        }
        Err(e) => {
            // Tell the receiver why, then let the workers clean up.
            let _ = out_tx.try_send(vec![Frame::Abort(e.to_abort())]);
            drop(out_tx);
            let _ = tokio::time::timeout(CLEANUP, writer).await;
            drain(walker).await;
            drain(server).await;
            return Err(e);
        }
    };
    drop(out_tx);
    let mut summary = done?;
    writer
        .await
        .map_err(|e| SessionError::Internal(e.to_string()))??;
    summary.bytes_on_wire = rx_count.get() + tx_count.get();
    summary.elapsed_ms = start.elapsed().as_millis() as u64;
    Ok(summary)
}

async fn handshake<R: AsyncRead + Unpin>(
    frames: &mut FramedRead<R, FrameCodec>,
) -> Result<SessionOptions, SessionError> {
    let next = |f: Option<Result<Frame, ProtocolError>>| match f {
        Some(Ok(Frame::Abort(reason))) => Err(SessionError::PeerAbort(reason)),
        Some(Ok(frame)) => Ok(frame),
        Some(Err(ProtocolError::Decode(_) | ProtocolError::Violation(_))) => {
            Err(ProtocolError::NotMover.into())
        }
        Some(Err(e)) => Err(e.into()),
        None => Err(ProtocolError::Closed("during the handshake").into()),
    };
    match next(frames.next().await)? {
        Frame::Hello(h) => h.check()?,
        f => return Err(violation(format!("expected Hello, got {}", f.name())).into()),
    }
    match next(frames.next().await)? {
        Frame::Accept(opts) => Ok(opts),
        f => Err(violation(format!("expected Accept, got {}", f.name())).into()),
    }
}

async fn read_frames<R: AsyncRead + Unpin>(
    frames: &mut FramedRead<R, FrameCodec>,
    credits: &Credits,
    queue: Queue,
    progress: Option<&ProgressFn>,
) -> Result<Summary, SessionError> {
    let mut state = State::Serving(None);
    let mut queue = Some(queue);
    let mut batches = frames.ready_chunks(READ_BATCH);
    loop {
        let Some(batch) = batches.next().await else {
            return Err(ProtocolError::Closed("before the transfer finished").into());
        };
        for frame in batch {
            let frame = frame?;
            if let Frame::Abort(reason) = frame {
                return Err(SessionError::PeerAbort(reason));
            }
            let (next, action) = state.step(frame)?;
            state = next;
            match action {
                Action::Credit(n) => credits.add(n as u64),
                Action::Serve(req, sigs) => {
                    queue
                        .as_ref()
                        .ok_or_else(cancelled)?
                        .push(req, sigs)
                        .await?
                }
                Action::RequestsEnd => queue = None,
                Action::Progress(p) => {
                    if let Some(sink) = progress {
                        sink(&p);
                    }
                }
                Action::Done(summary) => return Ok(summary),
                Action::Nothing => {}
            }
        }
    }
}

/// A request ready to serve, holding its share of the signature budget.
struct Queued {
    req: Request,
    sigs: Vec<BlockSig>,
    _budget: OwnedSemaphorePermit,
}

/// The way from the reader to the delta thread, and to the prefetcher.
struct Queue {
    tx: mpsc::Sender<Queued>,
    ahead: std::sync::mpsc::SyncSender<RelPath>,
    budget: Arc<Semaphore>,
}

impl Queue {
    async fn push(&self, req: Request, sigs: Vec<BlockSig>) -> Result<(), SessionError> {
        let blocks = sigs.len().clamp(1, SIG_BUDGET) as u32;
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(blocks)
            .await
            .map_err(|_| cancelled())?;
        // Best effort: a full prefetch queue only means no read-ahead.
        let _ = self.ahead.try_send(req.path.clone());
        let queued = Queued {
            req,
            sigs,
            _budget: permit,
        };
        self.tx.send(queued).await.map_err(|_| cancelled())
    }
}

/// The prefetch thread: starts reading queued files into the page cache so
/// the delta thread finds them there (many small files read one by one would
/// otherwise wait on the disk one at a time).
fn prefetch(root: &SourceRoot, rx: std::sync::mpsc::Receiver<RelPath>) {
    for path in rx {
        if let Ok(f) = root.open_file(&path) {
            let _ = rustix::fs::fadvise(
                &f,
                0,
                std::num::NonZeroU64::new(PREFETCH_BYTES),
                rustix::fs::Advice::WillNeed,
            );
        }
    }
}

/// The walker thread: lists the tree within the receiver's credit.
fn walk(walker: Walker, mut out: Outbox, credits: &Credits) -> Result<(), SessionError> {
    let mut stats = ListStats::default();
    for item in walker {
        let frame = match item {
            WalkItem::Entry(e) => Frame::Entry(e),
            WalkItem::DirDone(d) => Frame::DirDone(d),
            WalkItem::Failed(p, e) if p.is_root() => {
                return Err(SessionError::local("reading the source root", e));
            }
            WalkItem::Failed(p, e) => {
                warn(format_args!("{p}: {e}"));
                stats.failed += 1;
                continue;
            }
            WalkItem::Reserved(p) => {
                warn(format_args!(
                    "{p}: not transferred: the name is reserved for volmig's own state at the root"
                ));
                continue;
            }
            WalkItem::Vanished(p) => {
                warn(format_args!("{p}: vanished while the tree was walked"));
                stats.vanished += 1;
                continue;
            }
        };
        if !credits.try_take() {
            // Out of credit: what is listed must reach the receiver before waiting.
            out.flush()?;
            if !credits.take() {
                return Err(cancelled());
            }
        }
        out.push(frame)?;
    }
    out.push(Frame::ListEnd(stats))?;
    out.flush()
}

/// The delta thread: answers requests in order until the receiver has no more.
fn serve(
    root: &SourceRoot,
    filter: Filter,
    opts: SessionOptions,
    mut rx: mpsc::Receiver<Queued>,
    mut out: Outbox,
) -> Result<(), SessionError> {
    let mut zstd = match opts.compress {
        Some(level) => {
            Some(zstd::bulk::Compressor::new(level).map_err(|e| SessionError::local("zstd", e))?)
        }
        None => None,
    };
    while let Some(Queued { req, sigs, .. }) = recv_or_flush(&mut rx, &mut out)? {
        if filter.excludes(&req.path, false) {
            return Err(violation(format!("receiver asked for excluded {}", req.path)).into());
        }
        let outcome = send_file(root, &opts, &req, sigs, &mut out, zstd.as_mut())?;
        out.push(Frame::FileEnd {
            id: req.id,
            outcome,
        })?;
    }
    out.push(Frame::DataEnd)?;
    out.flush()
}

fn send_file(
    root: &SourceRoot,
    opts: &SessionOptions,
    req: &Request,
    sigs: Vec<BlockSig>,
    out: &mut Outbox,
    mut zstd: Option<&mut zstd::bulk::Compressor<'static>>,
) -> Result<FileOutcome, SessionError> {
    let mut file = match root.open_file(&req.path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(FileOutcome::Vanished),
        // Replaced by a symlink since it was listed.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Ok(FileOutcome::Changed)
        }
        Err(e) => {
            warn(format_args!("{}: {e}", req.path));
            return Ok(FileOutcome::Unreadable);
        }
    };
    let index = req.basis.map(|shape| Index::new(shape, sigs));
    let mut dopts = DeltaOptions {
        inplace: opts.inplace,
        len_hint: None,
    };
    for _ in 0..MAX_TRIES {
        let before = match stat_file(&file) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(FileOutcome::Changed),
            Err(e) => return Ok(unreadable(req, e)),
        };
        out.push(Frame::FileBegin {
            id: req.id,
            meta: before,
        })?;
        dopts.len_hint = Some(before.size);
        let mut batch = OpBatch {
            id: req.id,
            ops: Vec::new(),
            bytes: 0,
            out: &mut *out,
            zstd: zstd.as_deref_mut(),
        };
        let result = delta::<_, SendError>(
            Read::by_ref(&mut file).take(before.size),
            index.as_ref(),
            dopts,
            &mut |op| batch.push(op),
        );
        let sent = match result {
            Ok(s) => s,
            Err(SendError::Session(e)) => return Err(e),
            Err(SendError::Read(e)) => return Ok(unreadable(req, e)),
        };
        batch.flush().map_err(|e| match e {
            SendError::Session(e) => e,
            SendError::Read(e) => SessionError::local("compressing", e),
        })?;
        let after = stat_file(&file).ok().flatten();
        if sent.len == before.size && after == Some(before) {
            return Ok(FileOutcome::Sent(sent.hash));
        }
        if let Err(e) = file.rewind() {
            return Ok(unreadable(req, e));
        }
    }
    Ok(FileOutcome::Changed)
}

fn unreadable(req: &Request, e: io::Error) -> FileOutcome {
    warn(format_args!("{}: {e}", req.path));
    FileOutcome::Unreadable
}

/// Metadata of an open file, `None` if it is no longer a regular file.
fn stat_file(file: &File) -> io::Result<Option<Meta>> {
    let md = file.metadata()?;
    Ok(md.is_file().then(|| Meta::from_fs(&md)))
}

enum SendError {
    Read(io::Error),
    Session(SessionError),
}

impl From<io::Error> for SendError {
    fn from(e: io::Error) -> SendError {
        SendError::Read(e)
    }
}

/// Collects ops into frames of bounded size, compressing literals when asked.
struct OpBatch<'a> {
    id: u64,
    ops: Vec<WireOp>,
    bytes: usize,
    out: &'a mut Outbox,
    zstd: Option<&'a mut zstd::bulk::Compressor<'static>>,
}

impl OpBatch<'_> {
    fn push(&mut self, op: Op) -> Result<(), SendError> {
        let op = match (op, self.zstd.as_deref_mut()) {
            (Op::Literal(data), Some(z)) => {
                let packed = z.compress(&data).map_err(SendError::Read)?;
                if packed.len() < data.len() {
                    WireOp::Zstd {
                        raw_len: data.len() as u32,
                        data: packed,
                    }
                } else {
                    WireOp::Plain(Op::Literal(data))
                }
            }
            (op, _) => WireOp::Plain(op),
        };
        self.bytes += match &op {
            WireOp::Plain(Op::Literal(d)) | WireOp::Zstd { data: d, .. } => d.len(),
            _ => 8,
        };
        self.ops.push(op);
        if self.bytes >= LITERAL_CHUNK || self.ops.len() >= OPS_PER_FRAME {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SendError> {
        if self.ops.is_empty() {
            return Ok(());
        }
        let ops = std::mem::take(&mut self.ops);
        self.bytes = 0;
        self.out
            .push(Frame::Ops { id: self.id, ops })
            .map_err(SendError::Session)
    }
}
