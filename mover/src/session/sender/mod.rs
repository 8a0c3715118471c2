//! The sending side of a session: walks the source and answers requests with deltas.

pub mod block;
mod denied;
mod packer;
mod serve;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use super::flow::Credits;
use denied::Denied;

use super::flow::liveness::Idle;
use super::flow::outbox::Outbox;
use super::flow::peer::{first_frame, next_frame, next_frames, Connection};
use super::flow::supervise::{drain, tell_peer, Supervisor};
use super::flow::writer;
use super::{cancelled, warn, ProgressFn, SessionError};
use crate::beneath::TreeRoot;
use crate::filter::Filter;
use crate::protocol::{
    violation, Frame, FrameCodec, ListStats, ProtocolError, Request, SessionOptions,
    INITIAL_CREDIT, MAX_BLOCKS_PER_FILE, SIGS_PER_FRAME,
};
use crate::signature::{BlockSig, SigShape};
use crate::stats::Summary;
use crate::walk::{WalkItem, Walker};
use crate::warm::{Warm, Warmer};
use serve::{serve, Queue, REQUEST_QUEUE};

/// How the sender runs.
#[derive(Clone)]
pub struct SenderConfig {
    pub root: PathBuf,
    pub options: SessionOptions,
    /// Outgoing bandwidth cap in bytes per second.
    pub bwlimit: Option<u64>,
    pub progress: Option<ProgressFn>,
    /// Give up when the receiver says nothing (not even a heartbeat) for this long.
    pub timeout: Option<Duration>,
    /// Cancelled to stop the session cleanly (the receiver is told).
    pub cancel: CancellationToken,
    /// A block session zeroes the destination past the source's size.
    pub zero_tail: bool,
}

/// Where the session is; decides which frames from the receiver are legal.
#[derive(Debug, Clone)]
pub enum State {
    /// Requests are arriving; `Some` while a request's signature blocks are still due.
    Serving(Option<(Request, Vec<BlockSig>)>),
    /// No more requests will come.
    RequestsDone,
    /// The receiver asked to verify: the tree is listed again.
    Verifying,
}

/// What the reader does with a frame.
#[derive(Debug)]
pub enum Action {
    Credit(u32),
    /// A complete request (signature included).
    Serve(Request, Vec<BlockSig>),
    RequestsEnd,
    /// List the tree again, with content hashes.
    Verify,
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
            (State::Serving(None), Frame::Request(req)) => {
                // A prefix state that is not one, or does not fit the prefix.
                req.prefix_head()?;
                match req.basis {
                    // Only the shape this build would choose: no zero or outsized blocks.
                    Some(shape) if shape != SigShape::for_len(shape.file_len) => {
                        Err(violation(format!(
                            "request with a basis cut in blocks of {} bytes",
                            shape.block_len
                        )))
                    }
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
                }
            }
            (State::Serving(Some((req, mut sigs))), Frame::Sigs { id, sigs: more })
                if id == req.id =>
            {
                let want = req.basis.map_or(0, |s| s.block_count());
                let strong_len = req.basis.map_or(0, |s| s.strong_len());
                if more.strong_len as usize != strong_len {
                    return Err(violation(format!(
                        "signature of {} with strong sums of {} bytes instead of {strong_len}",
                        req.path, more.strong_len
                    )));
                }
                let more = more.sigs;
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
            (State::RequestsDone, Frame::Verify) => Ok((State::Verifying, Action::Verify)),
            (State::RequestsDone | State::Verifying, Frame::Done(s)) => {
                Ok((State::RequestsDone, Action::Done(s)))
            }
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
            State::Verifying => "verifying",
        }
    }
}

/// Runs one sending session over `stream`, reading from `cfg.root`.
pub async fn send<S>(stream: S, cfg: SenderConfig) -> Result<Summary, SessionError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    // A device or a regular file is copied as one block session.
    if crate::block::kind_of(&cfg.root).is_some() {
        return block::send(stream, cfg).await;
    }
    let start = Instant::now();
    let filter =
        Filter::new(&cfg.options.excludes).map_err(|e| SessionError::Usage(e.to_string()))?;
    // The source is checked (and held open) before anything else starts.
    let source = Arc::new(
        TreeRoot::open(&cfg.root)
            .map_err(|e| SessionError::local(format!("source {}", cfg.root.display()), e))?,
    );
    let Connection {
        mut frames,
        sink,
        idle,
        wire,
    } = Connection::greet(stream, cfg.timeout, cfg.options.clone()).await?;
    let options = tokio::select! {
        r = handshake(&mut frames, &idle) => r?,
        () = cfg.cancel.cancelled() => return Err(SessionError::Interrupted),
    };

    let (out_tx, writer) = writer::start(sink, cfg.bwlimit, wire.tx.clone());
    let credits = Arc::new(Credits::new(INITIAL_CREDIT as u64));
    let denied = Arc::new(Denied::default());
    let mut sup = Supervisor::new(cfg.cancel.clone());
    let walker = {
        let walker = Walker::new(cfg.root.clone(), filter.clone(), options.checksum)
            .with_warmer(Warmer::start(&source, Warm::Entries));
        let (out, credits) = (Outbox::new(out_tx.clone()), credits.clone());
        let denied = denied.clone();
        sup.spawn(move || walk(walker, out, &credits, &denied))
    };
    let (req_tx, req_rx) = mpsc::channel(REQUEST_QUEUE);
    let queue = Queue::new(req_tx, Warmer::start(&source, Warm::Data));
    let source_read = Arc::new(AtomicU64::new(0));
    let walked_root = source.clone();
    let server = {
        let (out, opts, filter) = (out_tx.clone(), options.clone(), filter.clone());
        let (read, denied) = (source_read.clone(), denied.clone());
        sup.spawn(move || {
            let out = Outbox::new(out);
            serve(&source, filter, opts, req_rx, out, &read, &denied)
        })
    };

    let mut reader = Reader {
        state: State::Serving(None),
        credits: credits.clone(),
        queue: Some(queue),
    };
    let mut verifier = None;
    let read = loop {
        let read = sup
            .watch(reader.read(&mut frames, cfg.progress.as_ref(), &idle))
            .await;
        reader.credits.close();
        match read {
            Ok(Ended::Done(summary)) => break Ok(*summary),
            Ok(Ended::Verify) => {
                // The same walk as the listing, with every file's contents hashed.
                reader.credits = Arc::new(Credits::new(INITIAL_CREDIT as u64));
                let walker = Walker::new(cfg.root.clone(), filter.clone(), true)
                    .with_warmer(Warmer::start(&walked_root, Warm::Entries));
                let (out, credits) = (Outbox::new(out_tx.clone()), reader.credits.clone());
                // What it cannot read was noted by the listing already.
                let again = Denied::default();
                verifier = Some(sup.spawn(move || walk(walker, out, &credits, &again)));
            }
            Err(e) => break Err(e),
        }
    };
    let mut summary = match read {
        Ok(summary) => summary,
        Err(e) => {
            // No more requests: the delta thread stops waiting for them.
            drop(reader);
            // Tell the receiver why, then let the workers clean up.
            let e = tell_peer(e, out_tx, writer).await;
            tokio::join!(drain(walker), drain(server));
            if let Some(v) = verifier {
                drain(v).await;
            }
            return Err(e);
        }
    };
    sup.join(walker).await?;
    sup.join(server).await?;
    if let Some(v) = verifier {
        sup.join(v).await?;
    }
    writer::finish(out_tx, writer).await?;
    summary.bytes_on_wire = wire.bytes();
    summary.source_bytes_read = source_read.load(Ordering::Relaxed);
    summary.elapsed_ms = start.elapsed().as_millis() as u64;
    match denied.error() {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

async fn handshake<R: AsyncRead + Unpin>(
    frames: &mut FramedRead<R, FrameCodec>,
    idle: &Idle,
) -> Result<SessionOptions, SessionError> {
    match first_frame(frames, idle, "during the handshake").await? {
        Frame::Hello(h) => h.check()?,
        f => return Err(violation(format!("expected Hello, got {}", f.name())).into()),
    }
    match next_frame(frames, idle, "during the handshake").await? {
        Frame::Accept(opts) => Ok(opts),
        f => Err(violation(format!("expected Accept, got {}", f.name())).into()),
    }
}

/// Why reading stopped.
enum Ended {
    Done(Box<Summary>),
    /// The receiver asked for the verification listing.
    Verify,
}

/// The reader's state across calls.
struct Reader {
    state: State,
    /// Where credit from the receiver goes: the listing's, then the verification's.
    credits: Arc<Credits>,
    queue: Option<Queue>,
}

impl Reader {
    async fn read<R: AsyncRead + Unpin>(
        &mut self,
        frames: &mut FramedRead<R, FrameCodec>,
        progress: Option<&ProgressFn>,
        idle: &Idle,
    ) -> Result<Ended, SessionError> {
        let mut verify = false;
        loop {
            let batch = next_frames(frames, idle).await?;
            for frame in batch {
                let state = std::mem::replace(&mut self.state, State::RequestsDone);
                let (next, action) = state.step(frame)?;
                self.state = next;
                match action {
                    Action::Credit(n) => self.credits.add(n as u64),
                    Action::Serve(req, sigs) => {
                        let queue = self.queue.as_ref().ok_or_else(cancelled)?;
                        // Room comes as the delta thread's data leaves: a
                        // connection that moves nothing ends the wait.
                        idle.moving(queue.push(req, sigs)).await??
                    }
                    Action::RequestsEnd => self.queue = None,
                    Action::Verify => verify = true,
                    Action::Progress(p) => {
                        if let Some(sink) = progress {
                            sink(&p);
                        }
                    }
                    Action::Done(summary) => return Ok(Ended::Done(Box::new(summary))),
                    Action::Nothing => {}
                }
            }
            // Nothing follows Verify until the verification listing is under way.
            if verify {
                return Ok(Ended::Verify);
            }
        }
    }
}

/// The walker thread: lists the tree within the receiver's credit.
fn walk(
    walker: Walker,
    mut out: Outbox,
    credits: &Credits,
    denied: &Denied,
) -> Result<(), SessionError> {
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
                denied.note(&p, &e);
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
