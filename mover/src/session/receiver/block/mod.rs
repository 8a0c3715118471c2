//! The receiving side of a block session: one device or image written at
//! fixed offsets, only where it differs from the source.
//!
//! Before it accepts, the receiver opens the destination (a device
//! exclusively, an image locked; a missing path becomes a sparse image of
//! the source's size), refuses one smaller than the source, and offers the
//! verified prefix an earlier attempt left. Then a signer thread hashes its
//! own blocks from where the sender starts and streams their sums, and a
//! writer thread applies the sender's ops ([`crate::block::writer`]),
//! recording a checkpoint as the blocks become durable.

use std::path::PathBuf;
use std::sync::mpsc as sync_mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::SinkExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};

mod sign;
mod write;

use super::super::flow::liveness::Idle;
use super::super::flow::outbox::Out;
use super::super::flow::peer::{next_frame, next_frames, Wire};
use super::super::flow::supervise::{drain, tell_peer, Supervisor};
use super::super::flow::writer;
use super::super::{warn, SessionError};
use super::options::check_operation;
use super::ReceiverConfig;
use crate::block::checkpoint::{BlockCheckpoint, StateDir};
use crate::block::{BlockShape, Destination, DestinationError, Kind, MAX_SIZE};
use crate::protocol::{
    violation, BlockResume, BlockSource, BlockTarget, Frame, FrameCodec, ProtocolError,
    SessionOptions,
};
use crate::stats::{BlockSummary, Counters, Prior, Summary, VerifyResult};
use crate::treehash::Head;
use sign::sign;
use write::{WriteJob, Written};

/// Blocks the signer may hash ahead of the writer.
const SIGN_AHEAD: usize = 16 * 1024;
/// Batches of frames queued for the writer.
const WRITER_QUEUE: usize = 16;
/// How often progress is reported.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// Where the session is; decides which frames from the sender are legal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Data (`Ops`, then `FileEnd`) is arriving.
    Receiving,
    /// `FileEnd` came; only `DataEnd` may follow.
    Ended,
    /// All data has arrived.
    DataDone,
}

impl State {
    /// The next state after `frame`; an illegal frame is a protocol violation.
    pub fn step(self, frame: &Frame) -> Result<State, ProtocolError> {
        crate::protocol::check_limits(frame)?;
        match (self, frame) {
            (State::Receiving, Frame::Ops { id: 0, .. }) => Ok(self),
            (State::Receiving, Frame::FileEnd { id: 0, .. }) => Ok(State::Ended),
            (State::Ended, Frame::DataEnd) => Ok(State::DataDone),
            (state, frame) => Err(violation(format!(
                "unexpected {} frame in a block session while {state:?}",
                frame.name()
            ))),
        }
    }
}

/// What was settled before the data: the destination, where it starts.
struct Opened {
    dest: Arc<Destination>,
    shape: BlockShape,
    source: BlockSource,
    state: Option<StateDir>,
    offer: Option<BlockCheckpoint>,
    problem: Option<String>,
}

/// Runs the rest of a block session, after the sender's `Hello`.
pub async fn receive<R, W>(
    mut frames: FramedRead<R, FrameCodec>,
    mut sink: FramedWrite<W, FrameCodec>,
    idle: Idle,
    cfg: ReceiverConfig,
    opts: SessionOptions,
    wire: Wire,
    start: Instant,
) -> Result<Summary, SessionError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let opened = match open(&cfg, &opts) {
        Ok(o) => o,
        Err(e) => {
            let _ = sink.send(Frame::Abort(e.to_abort())).await;
            return Err(e);
        }
    };
    let resume = opened.offer.as_ref().map(|cp| BlockResume {
        offset: cp.verified,
        head: cp.head.clone(),
        source_mtime: cp.source_mtime,
    });
    let target = BlockTarget {
        size: opened.dest.size,
        resume: resume.clone(),
    };
    sink.send(Frame::Accept(opts.clone())).await?;
    sink.send(Frame::BlockTarget(target)).await?;
    let offered = resume.as_ref().map_or(0, |r| r.offset);
    let from = match start_of(&mut frames, &idle, offered).await {
        Ok(from) => from,
        Err(e) => {
            // The sender is told why, as at `Hello`.
            let _ = sink.send(Frame::Abort(e.to_abort())).await;
            return Err(e);
        }
    };
    let head = match (&opened.offer, from) {
        (Some(cp), f) if f > 0 => cp.head(),
        _ => Head::empty(),
    };
    if from < offered {
        // Written ahead: no checkpoint claims bytes about to be overwritten.
        if let Some(state) = &opened.state {
            state
                .remove()
                .map_err(|e| SessionError::local("cutting the checkpoint back", e))?;
        }
    }

    let (out_tx, writer_task) = writer::start(sink, cfg.bwlimit, wire.tx.clone());
    // The resumed prefix is what earlier attempts did (`bytes_prior`).
    let prior = Prior {
        files_done: 0,
        bytes_done: from,
        files_total: Some(1),
        bytes_total: Some(opened.shape.size),
    };
    let counters = Arc::new(Counters::new(
        opts.operation_id.clone(),
        opts.attempt,
        prior,
    ));
    counters.file_listed(opened.shape.size);
    counters.set_listing_done();
    counters.found_bytes(from as i64);
    let mut sup = Supervisor::new(cfg.cancel.clone());
    let (cv_tx, cv_rx) = sync_mpsc::sync_channel(SIGN_AHEAD);
    let signer = (!opts.whole_file).then(|| {
        let (dest, shape, out) = (opened.dest.clone(), opened.shape, out_tx.clone());
        sup.spawn(move || sign(&dest, shape, from, out, cv_tx))
    });
    let (data_tx, data_rx) = mpsc::channel(WRITER_QUEUE);
    let job = WriteJob {
        dest: opened.dest.clone(),
        shape: opened.shape,
        source: opened.source,
        from,
        head,
        state: opened.state,
        operation: opts.operation_id.clone().map(|id| (id, opts.attempt)),
        on_checkpoint: cfg.on_checkpoint.clone(),
        counters: counters.clone(),
        cvs: signer.is_some().then_some(cv_rx),
    };
    let writing = sup.spawn(move || job.run(data_rx));
    let ticker = tokio::spawn(report_progress(
        counters.clone(),
        start,
        out_tx.clone(),
        cfg.progress.clone(),
    ));
    let reading = read_data(&mut frames, &idle, data_tx);
    let read = sup.watch(reading).await;
    let written = match read {
        Ok(()) => sup.join(writing).await,
        Err(e) => Err(e),
    };
    // Gone for good before anything else is sent: a tick being polled on
    // another worker could otherwise queue a Progress after Done.
    ticker.abort();
    let _ = ticker.await;
    let written = match written {
        Ok(w) => w,
        Err(e) => {
            let e = tell_peer(e, out_tx, writer_task).await;
            if let Some(s) = signer {
                drain(s).await;
            }
            return Err(e);
        }
    };
    if let Some(s) = signer {
        sup.join(s).await?;
    }
    let mut summary = summary_of(&written, &opened.dest, from, &opts);
    summary.checkpoint_problem = opened.problem;
    if opts.verify {
        let verified = verify(
            &mut frames,
            &idle,
            &out_tx,
            &opened.dest,
            &written,
            &mut sup,
        )
        .await;
        match verified {
            Ok(v) => summary.verify = Some(v),
            Err(e) => return Err(tell_peer(e, out_tx, writer_task).await),
        }
    }
    let progress = cfg.progress.as_ref();
    super::end_session(
        summary,
        &counters,
        start,
        progress,
        out_tx,
        writer_task,
        &wire,
    )
    .await
}

/// Where the sender starts: 0, or the offset offered to it.
async fn start_of<R: AsyncRead + Unpin>(
    frames: &mut FramedRead<R, FrameCodec>,
    idle: &Idle,
    offered: u64,
) -> Result<u64, SessionError> {
    let from = match next_frame(frames, idle, "before the data").await? {
        Frame::BlockStart(from) => from,
        f => return Err(violation(format!("expected BlockStart, got {}", f.name())).into()),
    };
    if from != 0 && from != offered {
        return Err(violation(format!("a start at {from} where {offered} was offered")).into());
    }
    Ok(from)
}

/// Checks the sender's options, opens the destination, and finds what an
/// earlier attempt left.
fn open(cfg: &ReceiverConfig, opts: &SessionOptions) -> Result<Opened, SessionError> {
    check_operation(cfg, opts)?;
    let source = opts.block.expect("a block session");
    let tree_only = opts.delete || opts.checksum || opts.inplace || !opts.excludes.is_empty();
    let shape = BlockShape::for_size(source.size);
    if tree_only || source.size > MAX_SIZE || source.block_len != shape.block_len {
        return Err(violation(format!(
            "a block session of {} bytes in blocks of {} (tree options: {tree_only})",
            source.size, source.block_len
        ))
        .into());
    }
    if cfg.root.is_dir() {
        return Err(SessionError::Usage(format!(
            "the destination {} is a directory; the source is a block device or image file",
            cfg.root.display()
        )));
    }
    let dest = Destination::open(&cfg.root, source.size).map_err(|e| {
        let what = format!("the destination {}", cfg.root.display());
        match e {
            DestinationError::Io(io) => SessionError::local(what, io),
            DestinationError::Locked => SessionError::local(
                what,
                std::io::Error::new(std::io::ErrorKind::WouldBlock, e.to_string()),
            ),
            DestinationError::Busy => SessionError::Unusable(format!("{what}: {e}")),
        }
    })?;
    if dest.size < source.size {
        return Err(SessionError::TooSmall {
            destination: dest.size,
            wanted: source.size,
        });
    }
    let state_path: Option<PathBuf> = match (&opts.operation_id, &cfg.state_dir, dest.kind) {
        (None, _, _) => None,
        (Some(_), Some(dir), _) => Some(dir.clone()),
        (Some(_), None, Kind::Image) => StateDir::beside(&cfg.root),
        (Some(_), None, Kind::Device) => {
            warn("no --state-dir: this attempt keeps no checkpoint (the next one compares every block again)");
            None
        }
    };
    let state = state_path
        .map(|p| {
            StateDir::open(&p)
                .map_err(|e| SessionError::local(format!("state directory {}", p.display()), e))
        })
        .transpose()?;
    if let (Some(state), Some(id), Some(seed)) = (&state, &opts.operation_id, &cfg.checkpoint_seed)
    {
        plant(state, id, seed)?;
    }
    let (offer, problem) = match (&state, &opts.operation_id) {
        (Some(state), Some(id)) => offer(state, id, opts.attempt, &source, &dest)?,
        _ => (None, None),
    };
    Ok(Opened {
        dest: Arc::new(dest),
        shape,
        source,
        state,
        offer,
        problem,
    })
}

/// Writes a seed into the state directory unless it already holds this
/// operation's checkpoint of the same or a later attempt. A seed that does
/// not decode is said and ignored: it costs a full compare, never data.
fn plant(state: &StateDir, operation: &str, seed: &[u8]) -> Result<(), SessionError> {
    let cp = match BlockCheckpoint::decode(seed) {
        Ok(cp) if cp.operation_id == operation => cp,
        Ok(cp) => {
            warn(format_args!(
                "--checkpoint-seed is of operation {}, not {operation}: ignored",
                cp.operation_id
            ));
            return Ok(());
        }
        Err(e) => {
            warn(format_args!("--checkpoint-seed: {e}: ignored"));
            return Ok(());
        }
    };
    let held = state.load().ok().flatten();
    let newer = held.is_some_and(|h| h.operation_id == operation && h.attempt >= cp.attempt);
    if !newer {
        state
            .save(&cp)
            .map_err(|e| SessionError::local("recording the checkpoint seed", e))?;
    }
    Ok(())
}

/// The checkpoint an earlier attempt of this operation left, if it still
/// holds: same operation, sizes and blocks, and its last verified block
/// read back unchanged. Anything else is dropped, and said why.
fn offer(
    state: &StateDir,
    operation: &str,
    attempt: u32,
    source: &BlockSource,
    dest: &Destination,
) -> Result<(Option<BlockCheckpoint>, Option<String>), SessionError> {
    let cp = match state.load() {
        Ok(Some(cp)) => cp,
        Ok(None) => return Ok((None, None)),
        Err(e) => return Ok((None, Some(e.to_string()))),
    };
    if cp.operation_id == operation && cp.attempt > attempt {
        return Err(SessionError::Usage(format!(
            "attempt {attempt} is older than the checkpoint's attempt {}",
            cp.attempt
        )));
    }
    let problem = if cp.operation_id != operation {
        Some(format!(
            "the checkpoint is of operation {}",
            cp.operation_id
        ))
    } else if (cp.source_size, cp.block_len) != (source.size, source.block_len) {
        Some("the source's size changed since the checkpoint".to_string())
    } else if cp.destination_size != dest.size {
        Some("the destination's size changed since the checkpoint".to_string())
    } else if cp.verified == 0 {
        None
    } else {
        let now = BlockCheckpoint::probe_of(&dest.file, cp.verified, cp.block_len as u64)
            .map_err(|e| SessionError::local("reading the destination", e))?;
        (now != cp.probe).then(|| "the destination changed since the checkpoint".to_string())
    };
    match problem {
        None if cp.verified > 0 => Ok((Some(cp), None)),
        None => Ok((None, None)),
        Some(why) => {
            state
                .remove()
                .map_err(|e| SessionError::local("dropping the checkpoint", e))?;
            Ok((None, Some(why)))
        }
    }
}

/// Routes the sender's data frames to the writer, in order, until `DataEnd`.
async fn read_data<R: AsyncRead + Unpin>(
    frames: &mut FramedRead<R, FrameCodec>,
    idle: &Idle,
    to_writer: mpsc::Sender<Vec<Frame>>,
) -> Result<(), SessionError> {
    let mut state = State::Receiving;
    loop {
        let batch = next_frames(frames, idle).await?;
        for frame in &batch {
            state = state.step(frame)?;
        }
        // Room comes as the writer works: a stuck writer ends the session
        // through the supervisor, not here.
        to_writer
            .send(batch)
            .await
            .map_err(|_| SessionError::Cancelled)?;
        if state == State::DataDone {
            return Ok(());
        }
    }
}

async fn report_progress(
    counters: Arc<Counters>,
    start: Instant,
    out: Out,
    sink: Option<super::super::ProgressFn>,
) {
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    loop {
        tick.tick().await;
        let p = counters.snapshot(start.elapsed().as_millis() as u64);
        if let Some(sink) = &sink {
            sink(&p);
        }
        if out.send(vec![Frame::Progress(p)]).await.is_err() {
            return;
        }
    }
}

/// `--verify`: the destination read back and hashed, against the source
/// read back by the sender.
async fn verify<R: AsyncRead + Unpin>(
    frames: &mut FramedRead<R, FrameCodec>,
    idle: &Idle,
    out: &Out,
    dest: &Arc<Destination>,
    written: &Written,
    sup: &mut Supervisor,
) -> Result<VerifyResult, SessionError> {
    out.send(vec![Frame::Verify])
        .await
        .map_err(|_| SessionError::Cancelled)?;
    let (d, size) = (dest.clone(), written.source.size);
    let ours = sup.spawn(move || {
        let read = std::sync::atomic::AtomicU64::new(0);
        crate::session::sender::block::hash_all(&d.file, size, &read)
    });
    let theirs = loop {
        match sup
            .watch(next_frame(frames, idle, "during verification"))
            .await?
        {
            Frame::BlockVerify(h) => break h,
            Frame::Heartbeat => continue,
            f => return Err(violation(format!("expected BlockVerify, got {}", f.name())).into()),
        }
    };
    let ours = sup.join(ours).await?;
    let root = written.root;
    let dest_ok = ours == root;
    let source_same = theirs == *root.as_bytes();
    if !dest_ok {
        warn(format_args!(
            "the destination reads back as {}, not {} as written",
            ours.to_hex(),
            root.to_hex()
        ));
    } else if !source_same {
        warn("the source changed after it was sent: the destination holds the version sent");
    }
    Ok(VerifyResult {
        passed: dest_ok,
        entries: 1,
        differences: u64::from(!dest_ok),
        changed: u64::from(dest_ok && !source_same),
        changed_paths: Vec::new(),
        manifest: root.to_hex().to_string(),
    })
}

fn summary_of(w: &Written, dest: &Destination, from: u64, opts: &SessionOptions) -> Summary {
    let changed = w.counts.literal + w.counts.zeroed > 0;
    Summary {
        files_total: 1,
        entries_total: 1,
        files_transferred: u64::from(changed),
        files_up_to_date: u64::from(!changed),
        bytes_total: w.source.size,
        bytes_literal: w.counts.literal,
        bytes_matched: w.counts.matched,
        bytes_resumed: from,
        files_resumed: u64::from(from > 0),
        operation_id: opts.operation_id.clone(),
        attempt: opts.attempt,
        block: Some(Box::new(BlockSummary {
            block_len: w.source.block_len,
            source_size: w.source.size,
            destination_size: dest.size,
            resumed_from: from,
            bytes_zeroed: w.counts.zeroed + w.tail_zeroed,
            bytes_punched: w.zeroer.punched,
            zero_method: w.zeroer.method().to_string(),
            tail_zeroed: w.tail_zeroed,
            root: w.root.to_hex().to_string(),
        })),
        ..Summary::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::Op;
    use crate::protocol::{FileOutcome, WireOp};

    #[test]
    fn data_comes_in_order_and_ends_once() {
        let ops = Frame::Ops {
            id: 0,
            ops: vec![WireOp::Plain(Op::Zeros(1))],
        };
        let end = Frame::FileEnd {
            id: 0,
            outcome: FileOutcome::Changed,
        };
        let s = State::Receiving.step(&ops).unwrap();
        let s = s.step(&end).unwrap();
        assert_eq!(s, State::Ended);
        assert!(s.step(&ops).is_err());
        assert_eq!(s.step(&Frame::DataEnd).unwrap(), State::DataDone);
        assert!(State::Receiving.step(&Frame::DataEnd).is_err());
        let other = Frame::Ops {
            id: 1,
            ops: Vec::new(),
        };
        assert!(State::Receiving.step(&other).is_err());
        assert!(State::Receiving
            .step(&Frame::ListEnd(Default::default()))
            .is_err());
    }
}
