//! The receiving side of a session: owns the destination tree.

mod applier;
mod block;
pub(super) mod commit;
mod committer;
mod generator;
mod journal;
mod options;
use options::prepare;
mod pending;
pub(super) mod remove;
mod resume;
mod verify;

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, SinkExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use super::flow::liveness::Idle;
use super::flow::outbox::Out;
use super::flow::peer::{first_frame, next_frames, Connection, Wire};
use super::flow::supervise::{drain, tell_peer, Supervisor};
use super::flow::writer;
use super::flow::{DataBatch, Inflight, ListWindow, DATA_BUDGET};
use super::{is_fatal, warn, ProgressFn, SessionError};
use crate::beneath::{Placer, TreeRoot};
use crate::meta::{apply_to_path, can_preserve_owner, Kind};
use crate::path::RelPath;
use crate::protocol::{
    violation, Frame, FrameCodec, ProtocolError, SessionOptions, INITIAL_CREDIT,
};
use crate::stats::{Counters, Prior, Summary, VerifyResult};
use applier::Applier;
use generator::{GenConfig, GenOutput, Generator};
use journal::Journal;
use pending::PendingFile;
use remove::remove_tree;
use verify::Verifier;

/// Batches queued for each applier.
const APPLIER_QUEUE: usize = 32;
/// Appliers rebuilding files in parallel: one per core, two to four.
fn applier_count() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 4)
}

/// Files requested and not yet finished, at most.
const MAX_INFLIGHT: usize = 1024;
/// How often progress is reported.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// How the receiver runs.
#[derive(Clone)]
pub struct ReceiverConfig {
    /// The destination root; created if missing.
    pub root: PathBuf,
    /// Preserve owner and group (default: when running as root).
    pub preserve_owner: bool,
    /// Outgoing bandwidth cap in bytes per second.
    pub bwlimit: Option<u64>,
    pub progress: Option<ProgressFn>,
    /// Give up when the sender says nothing (not even a heartbeat) for this long.
    pub timeout: Option<Duration>,
    /// Cancelled to stop the session cleanly (temporary files removed, the sender told).
    pub cancel: CancellationToken,
    /// Serve only this operation (the sender must name the same one).
    pub operation_id: Option<String>,
    /// Serve only this attempt of it.
    pub attempt: Option<u32>,
    /// Keep the checkpoint, marked complete, after a clean finish.
    pub keep_checkpoint: bool,
    /// What the destination can hold: the session fails (disk full) as soon
    /// as the files listed add up to more.
    pub capacity: Option<u64>,
    /// Serve block sessions only (`receive --block`).
    pub block_only: bool,
    /// Where a block session keeps its checkpoint (an image's default is
    /// beside it; a device has none).
    pub state_dir: Option<PathBuf>,
    /// A block checkpoint an earlier attempt's receiver recorded elsewhere
    /// (encoded): written into the state directory when it holds none as
    /// recent, then checked as any.
    pub checkpoint_seed: Option<Vec<u8>>,
    /// Told each block checkpoint recorded.
    pub on_checkpoint: Option<super::CheckpointFn>,
}

impl ReceiverConfig {
    pub fn new(root: PathBuf) -> ReceiverConfig {
        ReceiverConfig {
            root,
            preserve_owner: can_preserve_owner(),
            bwlimit: None,
            progress: None,
            timeout: None,
            cancel: CancellationToken::new(),
            operation_id: None,
            attempt: None,
            keep_checkpoint: false,
            capacity: None,
            block_only: false,
            state_dir: None,
            checkpoint_seed: None,
            on_checkpoint: None,
        }
    }
}

/// Where the session is; decides which frames from the sender are legal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// The file list is arriving (file data may interleave).
    Listing,
    /// The list is complete; file data continues.
    Listed,
    /// All data has arrived.
    DataDone,
    /// The sender lists its tree again for `--verify`.
    Verifying,
    /// The verification listing is complete.
    Verified,
}

/// Where a legal frame goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// To the generator, or while verifying to the verifier.
    List,
    Applier,
}

impl State {
    /// The next state after `frame`, and where the frame goes; an illegal frame is a protocol violation.
    pub fn step(self, frame: &Frame) -> Result<(State, Route), ProtocolError> {
        use Frame::*;
        crate::protocol::check_limits(frame)?;
        match (self, frame) {
            (State::Listing, Entry(_) | DirDone(_)) => Ok((self, Route::List)),
            (State::Listing, ListEnd(_)) => Ok((State::Listed, Route::List)),
            (State::Listing | State::Listed, FileBegin { .. } | Ops { .. } | FileEnd { .. }) => {
                Ok((self, Route::Applier))
            }
            (State::Listed, DataEnd) => Ok((State::DataDone, Route::Applier)),
            (State::Verifying, Entry(_) | DirDone(_)) => Ok((self, Route::List)),
            (State::Verifying, ListEnd(_)) => Ok((State::Verified, Route::List)),
            (state, frame) => Err(violation(format!(
                "unexpected {} frame while {state:?}",
                frame.name()
            ))),
        }
    }
}

/// Runs one receiving session over `stream`, writing into `cfg.root`.
pub async fn receive<S>(stream: S, cfg: ReceiverConfig) -> Result<Summary, SessionError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let start = Instant::now();
    let Connection {
        mut frames,
        mut sink,
        idle,
        wire,
    } = Connection::greet(stream, cfg.timeout, SessionOptions::default()).await?;
    let opts = tokio::select! {
        r = handshake(&mut frames, &idle) => r,
        () = cfg.cancel.cancelled() => Err(SessionError::Interrupted),
    };
    let opts = match opts {
        Ok(opts) => opts,
        Err(e) => {
            let _ = sink.send(Frame::Abort(e.to_abort())).await;
            return Err(e);
        }
    };
    if opts.block.is_some() {
        return block::receive(frames, sink, idle, cfg, opts, wire, start).await;
    }
    let accepted = async {
        let (filter, root) = prepare(&cfg, &opts)?;
        let journal = match &opts.operation_id {
            Some(id) => Some(Journal::open(&root, id, opts.attempt, cfg.keep_checkpoint)?),
            None => None,
        };
        Ok::<_, SessionError>((opts, filter, root, journal))
    };
    let accepted = tokio::select! {
        r = accepted => r,
        () = cfg.cancel.cancelled() => Err(SessionError::Interrupted),
    };
    let (opts, filter, root, opened) = match accepted {
        Ok(r) => r,
        Err(e) => {
            let _ = sink.send(Frame::Abort(e.to_abort())).await;
            return Err(e);
        }
    };
    sink.send(Frame::Accept(opts.clone())).await?;
    // Every path below is under the resolved root: a root that is a symlink
    // to a directory is followed once, here, as rsync's DST/ is.
    let cfg = ReceiverConfig { root, ..cfg };
    // Every write below goes through this handle (see `beneath`).
    let tree = TreeRoot::open(&cfg.root)
        .and_then(|tree| tree.check_proc().map(|()| Arc::new(tree)))
        .map_err(|e| SessionError::local("opening the destination", e))?;
    if !cfg.preserve_owner {
        // Said once per session, not per file (as rsync would without root).
        warn("no CAP_CHOWN (not root, or capabilities dropped): owner and group are not preserved");
    }

    let (out_tx, writer) = writer::start(sink, cfg.bwlimit, wire.tx.clone());
    let inflight = Arc::new(Inflight::<PendingFile>::new(MAX_INFLIGHT));
    let (journal, prior, problem) = match opened {
        Some(o) => (Some(o.journal), o.prior, o.problem),
        None => (None, Prior::default(), None),
    };
    let counters = Arc::new(Counters::new(
        opts.operation_id.clone(),
        opts.attempt,
        prior,
    ));
    let mut sup = Supervisor::new(cfg.cancel.clone());
    let checkpointer = journal.as_ref().map(|j| {
        let (j, c) = (j.clone(), counters.clone());
        sup.spawn(move || j.run_writer(c))
    });

    let (gen_tx, gen_rx) = mpsc::channel(INITIAL_CREDIT as usize + 1);
    let window = Arc::new(ListWindow::default());
    let gen_cfg = GenConfig {
        tree: tree.clone(),
        opts: opts.clone(),
        filter: filter.clone(),
        owner: cfg.preserve_owner,
        journal: journal.clone(),
        capacity: cfg.capacity,
    };
    let generator = Generator::new(
        gen_cfg,
        out_tx.clone(),
        inflight.clone(),
        counters.clone(),
        window.clone(),
    );
    let generator = sup.spawn(move || generator.run(gen_rx));
    // Files are rebuilt by several appliers at once (file creation is mostly
    // kernel work, and small files are many); each file goes to one of them.
    let (mut app_txs, mut appliers) = (Vec::new(), Vec::new());
    for _ in 0..applier_count() {
        let (tx, rx) = mpsc::channel(APPLIER_QUEUE);
        let applier = Applier::new(
            tree.clone(),
            opts.inplace,
            cfg.preserve_owner,
            inflight.clone(),
            counters.clone(),
            journal.clone(),
        );
        appliers.push(sup.spawn(move || {
            applier
                .map_err(|e| SessionError::local("starting zstd", e))?
                .run(rx)
        }));
        app_txs.push(tx);
    }
    let ticker = tokio::spawn(report_progress(
        counters.clone(),
        journal.clone(),
        start,
        out_tx.clone(),
        cfg.progress.clone(),
    ));

    // On a stop (SIGTERM), reading takes in what has already arrived (the
    // frames buffered here and in the socket, without waiting for more);
    // then, as on a failure, the appliers finish the data queued for them
    // (bounded by the data budget and `CLEANUP`) before the final
    // checkpoint below records it.
    let reading = read_frames(
        &mut frames,
        gen_tx,
        &window,
        &inflight,
        app_txs,
        &idle,
        &cfg.cancel,
    );
    let read = sup.watch_winding_down(reading, STOP_GRACE).await;
    // Gone for good before anything else is sent: a tick being polled on
    // another worker could otherwise queue a Progress after Done.
    ticker.abort();
    let _ = ticker.await;
    if let Err(e) = read {
        // Stop everything, tell the sender why, and let the workers clean up.
        inflight.close();
        let e = tell_peer(e, out_tx, writer).await;
        // Concurrently: the whole cleanup fits one CLEANUP, well inside a pod's grace period.
        tokio::join!(
            drain(generator),
            futures::future::join_all(appliers.into_iter().map(drain))
        );
        // What the workers left is recorded for the next attempt.
        if let Some(j) = &journal {
            j.stop();
            if let Some(w) = checkpointer {
                drain(w).await;
            }
            if let Err(ce) = j.save(&counters) {
                warn(format_args!(
                    "cannot record progress for the next attempt: {ce}"
                ));
            }
        }
        return Err(e);
    }
    let completed = async {
        let gen = sup.join(generator).await?;
        let mut applied = Summary::default();
        for applier in appliers {
            applied.add_applied(&sup.join(applier).await?);
        }
        if let (Some(j), Some(w)) = (&journal, checkpointer) {
            j.stop();
            sup.join(w).await?;
        }
        let (tree, owner) = (tree.clone(), cfg.preserve_owner);
        let done = journal.clone().map(|j| (j, counters.clone()));
        let finished =
            tokio::task::spawn_blocking(move || finish(tree, owner, gen, applied, done)).await;
        finished.map_err(|e| SessionError::Internal(e.to_string()))?
    };
    let mut summary = match completed.await {
        Ok(s) => s,
        Err(e) => {
            let e = tell_peer(e, out_tx, writer).await;
            if let Some(j) = &journal {
                j.stop();
                let _ = j.save(&counters);
            }
            return Err(e);
        }
    };
    if opts.verify {
        let (tree, delete, owner, out) = (tree.clone(), opts.delete, cfg.preserve_owner, &out_tx);
        let compare = |window| Verifier::new(tree, filter, delete, owner, out.clone(), window);
        let verified = verify(&mut frames, &idle, &out_tx, &mut sup, compare).await;
        match verified {
            Ok(v) => summary.verify = Some(v),
            Err(e) => return Err(tell_peer(e, out_tx, writer).await),
        }
    }
    summary.operation_id = opts.operation_id.clone();
    summary.attempt = opts.attempt;
    summary.checkpoint_problem = problem;
    end_session(
        summary,
        &counters,
        start,
        cfg.progress.as_ref(),
        out_tx,
        writer,
        &wire,
    )
    .await
}

/// A session's last words: the final progress event, here and at the
/// sender, says everything is done; then `Done` with the summary, once the
/// writer has sent them.
async fn end_session(
    mut summary: Summary,
    counters: &Counters,
    start: Instant,
    progress: Option<&ProgressFn>,
    out_tx: Out,
    writer: tokio::task::JoinHandle<Result<(), ProtocolError>>,
    wire: &Wire,
) -> Result<Summary, SessionError> {
    summary.elapsed_ms = start.elapsed().as_millis() as u64;
    let last = counters.snapshot(summary.elapsed_ms);
    if let Some(p) = progress {
        p(&last);
    }
    let _ = out_tx.send(vec![Frame::Progress(last)]).await;
    summary.bytes_on_wire = wire.bytes();
    out_tx
        .send(vec![Frame::Done(summary.clone())])
        .await
        .map_err(|_| SessionError::Cancelled)?;
    writer::finish(out_tx, writer).await?;
    summary.bytes_on_wire = wire.bytes();
    Ok(summary)
}

async fn handshake<R: AsyncRead + Unpin>(
    frames: &mut FramedRead<R, FrameCodec>,
    idle: &Idle,
) -> Result<SessionOptions, SessionError> {
    let hello = match first_frame(frames, idle, "before the handshake").await? {
        Frame::Hello(h) => h,
        f => return Err(violation(format!("expected Hello, got {}", f.name())).into()),
    };
    hello.check()?;
    Ok(hello.options)
}

/// How long a stopped receiver may take to apply what had already arrived.
const STOP_GRACE: Duration = Duration::from_secs(3);

async fn read_frames<R: AsyncRead + Unpin>(
    frames: &mut FramedRead<R, FrameCodec>,
    gen_tx: mpsc::Sender<Vec<Frame>>,
    window: &ListWindow,
    inflight: &Inflight<PendingFile>,
    app_txs: Vec<mpsc::Sender<DataBatch>>,
    idle: &Idle,
    stop: &CancellationToken,
) -> Result<(), SessionError> {
    let mut state = State::Listing;
    let budget = Arc::new(Semaphore::new(DATA_BUDGET));
    while state != State::DataDone {
        let batch = if stop.is_cancelled() {
            // Stopping: what has arrived, not a byte more.
            match next_frames(frames, idle).now_or_never() {
                Some(batch) => batch?,
                None => return Err(SessionError::Interrupted),
            }
        } else {
            // (Cancel-safe: a frame read in part stays in `frames`.)
            tokio::select! {
                batch = next_frames(frames, idle) => batch?,
                () = stop.cancelled() => continue,
            }
        };
        let mut to_gen = Vec::new();
        let mut to_app: Vec<Vec<Frame>> = app_txs.iter().map(|_| Vec::new()).collect();
        for frame in batch {
            let (next, route) = state.step(&frame)?;
            state = next;
            match route {
                Route::List => to_gen.push(frame),
                Route::Applier => match frame.file_id() {
                    Some(id) => to_app[(id % app_txs.len() as u64) as usize].push(frame),
                    None => {
                        // The sender answers every request before it ends its data.
                        if !inflight.requests_ended() {
                            return Err(
                                violation("data ended before every request was answered").into()
                            );
                        }
                        to_app.iter_mut().for_each(|q| q.push(Frame::DataEnd));
                    }
                },
            }
        }
        if !to_gen.is_empty() {
            window.hand_on(to_gen, &gen_tx)?;
        }
        for (tx, frames) in app_txs.iter().zip(to_app) {
            if !frames.is_empty() {
                let batch = DataBatch::new(frames, &budget).await?;
                tx.send(batch).await.map_err(|_| SessionError::Cancelled)?;
            }
        }
    }
    Ok(())
}

/// Asks the sender to list its tree again, with contents hashed, and compares.
async fn verify<R: AsyncRead + Unpin>(
    frames: &mut FramedRead<R, FrameCodec>,
    idle: &Idle,
    out: &Out,
    sup: &mut Supervisor,
    compare: impl FnOnce(Arc<ListWindow>) -> Result<Verifier, SessionError>,
) -> Result<VerifyResult, SessionError> {
    let window = Arc::new(ListWindow::default());
    let verifier = compare(window.clone())?;
    out.send(vec![Frame::Verify])
        .await
        .map_err(|_| SessionError::Cancelled)?;
    let (tx, rx) = mpsc::channel(INITIAL_CREDIT as usize + 1);
    let worker = sup.spawn(move || verifier.run(rx));
    let read = sup.watch(read_listing(frames, tx, &window, idle)).await;
    if let Err(e) = read {
        drain(worker).await;
        return Err(e);
    }
    sup.join(worker).await
}

/// Reads the verification listing and hands it to the verifier.
async fn read_listing<R: AsyncRead + Unpin>(
    frames: &mut FramedRead<R, FrameCodec>,
    tx: mpsc::Sender<Vec<Frame>>,
    window: &ListWindow,
    idle: &Idle,
) -> Result<(), SessionError> {
    let mut state = State::Verifying;
    while state != State::Verified {
        let batch = next_frames(frames, idle).await?;
        for frame in &batch {
            state = state.step(frame)?.0;
        }
        window.hand_on(batch, &tx)?;
    }
    Ok(())
}

async fn report_progress(
    counters: Arc<Counters>,
    journal: Option<Arc<Journal>>,
    start: Instant,
    out: Out,
    sink: Option<ProgressFn>,
) {
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    tick.tick().await;
    loop {
        tick.tick().await;
        let elapsed = start.elapsed().as_millis() as u64;
        // With a checkpoint, progress is read as the checkpoint would be:
        // never ahead of the partial files that back it.
        let p = match &journal {
            Some(j) => j.progress(&counters, elapsed),
            None => counters.snapshot(elapsed),
        };
        if let Some(sink) = &sink {
            sink(&p);
        }
        if out.send(vec![Frame::Progress(p)]).await.is_err() {
            return;
        }
    }
}

/// After all data: hard links, the checkpoint's end, then directory metadata
/// deepest first (the state directory's removal changes the root), then one
/// last sync.
fn finish(
    tree: Arc<TreeRoot>,
    owner: bool,
    gen: GenOutput,
    applied: Summary,
    journal: Option<(Arc<Journal>, Arc<Counters>)>,
) -> Result<Summary, SessionError> {
    let mut s = gen.summary;
    s.add_applied(&applied);
    let placer = Placer::new(tree);
    for (path, target) in &gen.links {
        if let Err(e) = hard_link(&placer, path, target) {
            if is_fatal(&e) {
                return Err(SessionError::local(format!("linking {path}"), e));
            }
            warn(format_args!("{path}: cannot link to {target}: {e}"));
            s.files_failed += 1;
        }
    }
    if let Some((j, counters)) = journal {
        j.complete(&counters)?;
    }
    let mut dirs = gen.dirs;
    dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.depth()));
    for (path, meta) in &dirs {
        let placed = placer.place(path);
        match placed.and_then(|dir| apply_to_path(&dir, &Kind::Dir, meta, owner)) {
            Ok(()) => {}
            // The volume's root belongs to whoever made it (the kubelet
            // gives it the pod's fsGroup): without root's capabilities it
            // keeps its own mode and times, and verification leaves it be.
            Err(e) if path.is_root() && !owner && e.kind() == io::ErrorKind::PermissionDenied => {
                warn(format_args!(
                    "the destination root is not this user's: it keeps its own mode and times ({e})"
                ));
            }
            Err(e) => {
                warn(format_args!("{path}: {e}"));
                s.files_failed += 1;
            }
        }
    }
    rustix::fs::syncfs(&**placer.tree()).map_err(|e| SessionError::local("syncing", e.into()))?;
    Ok(s)
}

fn hard_link(placer: &Placer, path: &RelPath, target: &RelPath) -> io::Result<()> {
    // Both names are placed in the tree; `src` must be a file there, not a symlink.
    let (dest, src) = (placer.place(path)?, placer.place(target)?);
    let want = fs::symlink_metadata(&src)?;
    if !want.is_file() {
        return Err(io::Error::other(format!("{target} is not a regular file")));
    }
    match fs::symlink_metadata(&dest) {
        Ok(md) if md.dev() == want.dev() && md.ino() == want.ino() => return Ok(()),
        Ok(md) if md.is_dir() => remove_tree(&dest)?,
        Ok(_) => {
            return commit::create_and_replace(&dest, |tmp| fs::hard_link(&src, tmp));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    fs::hard_link(&src, &dest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ListStats;

    #[test]
    fn state_machine_orders_frames() {
        let s = State::Listing;
        let (s, r) = s.step(&Frame::DirDone(RelPath::root())).unwrap();
        assert_eq!((s, r), (State::Listing, Route::List));
        assert!(
            s.step(&Frame::DataEnd).is_err(),
            "data cannot end before the list"
        );
        let (s, _) = s.step(&Frame::ListEnd(ListStats::default())).unwrap();
        assert!(
            s.step(&Frame::DirDone(RelPath::root())).is_err(),
            "no entries after the list ended"
        );
        let (s, r) = s.step(&Frame::DataEnd).unwrap();
        assert_eq!((s, r), (State::DataDone, Route::Applier));
        assert!(s.step(&Frame::DataEnd).is_err());
        assert!(
            State::Listing.step(&Frame::Credit(1)).is_err(),
            "credit only flows the other way"
        );
    }
}
