//! The sending side of a block session: compares the source with the
//! receiver's sums block by block and sends what differs, zeros as holes.
//!
//! A comparer thread reads the source from the start the receiver agreed
//! to, hashes each block (its chaining value at its offset, which also
//! builds the whole source's BLAKE3), and emits positional ops: `Copy` runs
//! for blocks whose sum matches, `Zeros` for zero blocks (holes of an image
//! are not even read), `Literal`s for the rest. The async reader feeds it
//! the receiver's sums as they arrive, and answers `Verify`.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::SinkExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;

use super::super::flow::liveness::Idle;
use super::super::flow::outbox::Outbox;
use super::super::flow::peer::{next_frame, next_frames, Connection};
use super::super::flow::supervise::{drain, tell_peer, Supervisor};
use super::super::flow::writer;
use super::super::{cancelled, ProgressFn, SessionError};
use super::{handshake, SenderConfig};
use crate::block::{sum_of, BlockShape, Kind, Source, MAX_SIZE, ZEROS};
use crate::delta::{Op, LITERAL_CHUNK};
use crate::protocol::{
    violation, BlockSource, BlockSum, BlockTarget, FileOutcome, Frame, FrameCodec, ProtocolError,
    SessionOptions, WireOp,
};
use crate::stats::Summary;
use crate::treehash::{block_cv, BlockRoot, Head};

/// Ops per `Ops` frame, and literal bytes, before the frame is handed over.
const OPS_BATCH: usize = 1024;
const BYTES_BATCH: usize = 1 << 20;

/// Where the session is; decides which frames from the receiver are legal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Sums of blocks `next..` may arrive (none at all with `whole_file`).
    Comparing { next: u64 },
    /// The receiver asked to verify.
    Verifying,
}

/// What the reader does with a frame.
#[derive(Debug)]
pub enum Action {
    Sums(Vec<BlockSum>),
    Verify,
    Progress(crate::stats::Progress),
    Done(Box<Summary>),
    Nothing,
}

/// The rules the reader checks frames against.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Blocks of the source.
    pub count: u64,
    /// Sums are expected (not with `whole_file`).
    pub sums: bool,
}

impl State {
    /// Consumes a frame from the receiver; an illegal frame is a protocol violation.
    pub fn step(self, rules: Rules, frame: Frame) -> Result<(State, Action), ProtocolError> {
        crate::protocol::check_limits(&frame)?;
        match (self, frame) {
            (s, Frame::Progress(p)) => Ok((s, Action::Progress(p))),
            (State::Comparing { next }, Frame::BlockSums { first, sums }) => {
                let end = first.checked_add(sums.len() as u64);
                if !rules.sums || first != next || end.is_none_or(|e| e > rules.count) {
                    return Err(violation(format!(
                        "sums of blocks {first}.. ({} of them) where block {next} of {} was next",
                        sums.len(),
                        rules.count
                    )));
                }
                let next = next + sums.len() as u64;
                Ok((State::Comparing { next }, Action::Sums(sums)))
            }
            // Both end the comparer's supply of sums: every block's must be in.
            (State::Comparing { next }, f @ (Frame::Verify | Frame::Done(_)))
                if rules.sums && next < rules.count =>
            {
                Err(violation(format!(
                    "{} before the sums of every block ({next} of {})",
                    f.name(),
                    rules.count
                )))
            }
            (State::Comparing { .. }, Frame::Verify) => Ok((State::Verifying, Action::Verify)),
            (_, Frame::Done(s)) => Ok((self, Action::Done(Box::new(s)))),
            (state, frame) => Err(violation(format!(
                "unexpected {} frame in a block session while {state:?}",
                frame.name()
            ))),
        }
    }
}

/// Runs one sending block session over `stream`, reading `cfg.root`.
pub async fn send<S>(stream: S, cfg: SenderConfig) -> Result<Summary, SessionError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let start = Instant::now();
    let source = Source::open(&cfg.root)
        .map_err(|e| SessionError::local(format!("source {}", cfg.root.display()), e))?;
    let options = block_options(&cfg, &source)?;
    let shape = BlockShape::for_size(source.size);
    let Connection {
        mut frames,
        mut sink,
        idle,
        wire,
    } = Connection::greet(stream, cfg.timeout, options.clone()).await?;
    let target = tokio::select! {
        r = async {
            handshake(&mut frames, &idle).await?;
            match next_frame(&mut frames, &idle, "during the handshake").await? {
                Frame::BlockTarget(t) => Ok::<_, SessionError>(t),
                f => Err(violation(format!("expected BlockTarget, got {}", f.name())).into()),
            }
        } => r,
        () = cfg.cancel.cancelled() => return Err(SessionError::Interrupted),
    };
    let source = Arc::new(source);
    let read = Arc::new(AtomicU64::new(0));
    let start_at = match target {
        Ok(target) => {
            let (source, read) = (source.clone(), read.clone());
            tokio::task::spawn_blocking(move || start_from(&source, shape, &target, &read))
                .await
                .map_err(|e| SessionError::Internal(e.to_string()))
                .and_then(|r| r)
        }
        Err(e) => Err(e),
    };
    let start_at = match start_at {
        Ok(s) => s,
        Err(e) => {
            // The receiver is told why (its target or offer refused).
            let _ = sink.send(Frame::Abort(e.to_abort())).await;
            return Err(e);
        }
    };
    sink.send(Frame::BlockStart(start_at.0)).await?;

    let (out_tx, writer) = writer::start(sink, cfg.bwlimit, wire.tx.clone());
    let (sums_tx, sums_rx) = mpsc::unbounded_channel();
    let mut sup = Supervisor::new(cfg.cancel.clone());
    let comparer = {
        let (source, read) = (source.clone(), read.clone());
        let out = Outbox::new(out_tx.clone());
        let compare = Comparer::new(&options, shape, out)?;
        let (from, head) = start_at;
        sup.spawn(move || compare.run(&source, from, head, sums_rx, &read))
    };
    let rules = Rules {
        count: shape.count(),
        sums: !options.whole_file,
    };
    let mut state = State::Comparing {
        next: start_at.0 / shape.block_len(),
    };
    let mut sums_tx = Some(sums_tx);
    let mut verifier = None;
    let ended = loop {
        let reading = read_frames(
            &mut frames,
            &idle,
            &mut state,
            rules,
            &sums_tx,
            cfg.progress.as_ref(),
        );
        match sup.watch(reading).await {
            Ok(Ended::Done(summary)) => break Ok(*summary),
            Ok(Ended::Verify) => {
                sums_tx = None;
                let (source, read) = (source.clone(), read.clone());
                let mut out = Outbox::new(out_tx.clone());
                verifier = Some(sup.spawn(move || {
                    let hash = hash_all(&source.file, source.size, &read)?;
                    out.push(Frame::BlockVerify(*hash.as_bytes()))?;
                    out.flush()
                }));
            }
            Err(e) => break Err(e),
        }
    };
    // The comparer waits for no more sums.
    drop(sums_tx);
    let mut summary = match ended {
        Ok(s) => s,
        Err(e) => {
            let e = tell_peer(e, out_tx, writer).await;
            drain(comparer).await;
            if let Some(v) = verifier {
                drain(v).await;
            }
            return Err(e);
        }
    };
    sup.join(comparer).await?;
    if let Some(v) = verifier {
        sup.join(v).await?;
    }
    writer::finish(out_tx, writer).await?;
    summary.bytes_on_wire = wire.bytes();
    summary.source_bytes_read = read.load(Ordering::Relaxed);
    summary.elapsed_ms = start.elapsed().as_millis() as u64;
    Ok(summary)
}

/// Why reading stopped.
enum Ended {
    Done(Box<Summary>),
    /// The receiver asked for the source's hash, read again.
    Verify,
}

/// Reads the receiver's frames until it is done or asks to verify.
async fn read_frames<R: AsyncRead + Unpin>(
    frames: &mut FramedRead<R, FrameCodec>,
    idle: &Idle,
    state: &mut State,
    rules: Rules,
    sums: &Option<mpsc::UnboundedSender<Vec<BlockSum>>>,
    progress: Option<&ProgressFn>,
) -> Result<Ended, SessionError> {
    loop {
        let mut verify = false;
        for frame in next_frames(frames, idle).await? {
            let (next, action) = state.step(rules, frame)?;
            *state = next;
            match action {
                Action::Sums(more) => {
                    if let Some(tx) = sums {
                        tx.send(more).map_err(|_| cancelled())?;
                    }
                }
                Action::Verify => verify = true,
                Action::Progress(p) => {
                    if let Some(sink) = progress {
                        sink(&p);
                    }
                }
                Action::Done(summary) => return Ok(Ended::Done(summary)),
                Action::Nothing => {}
            }
        }
        // Nothing follows Verify until the source's hash is under way.
        if verify {
            return Ok(Ended::Verify);
        }
    }
}

/// The session's options: the tree-only ones refused, the source described.
fn block_options(cfg: &SenderConfig, source: &Source) -> Result<SessionOptions, SessionError> {
    let o = &cfg.options;
    let tree_only = [
        (o.delete, "--delete"),
        (!o.excludes.is_empty(), "--exclude"),
        (o.checksum, "--checksum"),
        (o.inplace, "--inplace"),
    ];
    if let Some((_, flag)) = tree_only.iter().find(|(on, _)| *on) {
        return Err(SessionError::Usage(format!(
            "{flag} applies to trees; the source {} is a {}",
            cfg.root.display(),
            match source.kind {
                Kind::Device => "block device",
                Kind::Image => "regular file (an image)",
            }
        )));
    }
    if source.size > MAX_SIZE {
        return Err(SessionError::Usage(format!(
            "the source holds {} bytes; block sessions copy at most {MAX_SIZE}",
            source.size
        )));
    }
    let mut options = o.clone();
    options.block = Some(BlockSource {
        size: source.size,
        block_len: BlockShape::for_size(source.size).block_len,
        image_mtime: source.mtime,
        zero_tail: cfg.zero_tail,
    });
    Ok(options)
}

/// Where to start, and the hash state of what comes before: a resume
/// offer is taken when the prefix is the source's own (an image unchanged
/// since, or a prefix hashed again and equal), else everything is compared.
fn start_from(
    source: &Source,
    shape: BlockShape,
    target: &BlockTarget,
    read: &AtomicU64,
) -> Result<(u64, Head), SessionError> {
    if target.size < source.size {
        return Err(SessionError::TooSmall {
            destination: target.size,
            wanted: source.size,
        });
    }
    let Some(offer) = &target.resume else {
        return Ok((0, Head::empty()));
    };
    let head = Head::from_pieces(&offer.head).map_err(|e| violation(format!("resume: {e}")))?;
    let whole_blocks = shape.count().saturating_sub(1) * shape.block_len();
    if head.len() != offer.offset
        || !offer.offset.is_multiple_of(shape.block_len())
        || offer.offset > whole_blocks
    {
        return Err(violation(format!(
            "a resume offer of {} bytes (hash state of {}) for a source of {}",
            offer.offset,
            head.len(),
            source.size
        ))
        .into());
    }
    if source.kind == Kind::Image && source.mtime.is_some() && offer.source_mtime == source.mtime {
        return Ok((offer.offset, head));
    }
    // A device, or an image changed since: its prefix is hashed again.
    let mut own = BlockRoot::new();
    let mut buf = vec![0u8; shape.block_len() as usize];
    for i in 0..offer.offset / shape.block_len() {
        let at = shape.offset(i);
        source
            .file
            .read_exact_at(&mut buf, at)
            .map_err(|e| SessionError::local("reading the source", e))?;
        read.fetch_add(buf.len() as u64, Ordering::Relaxed);
        own.push(shape.block_len(), block_cv(at, &buf));
    }
    match own.head().pieces() == offer.head {
        true => Ok((offer.offset, head)),
        false => Ok((0, Head::empty())),
    }
}

/// The comparer thread's work.
struct Comparer {
    shape: BlockShape,
    whole_file: bool,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    out: Outbox,
    ops: Vec<WireOp>,
    ops_bytes: usize,
    /// Sums received and not yet compared.
    sums: VecDeque<BlockSum>,
}

impl Comparer {
    fn new(
        options: &SessionOptions,
        shape: BlockShape,
        out: Outbox,
    ) -> Result<Comparer, SessionError> {
        let zstd = match options.compress {
            Some(level) => Some(
                zstd::bulk::Compressor::new(level)
                    .map_err(|e| SessionError::local("starting zstd", e))?,
            ),
            None => None,
        };
        Ok(Comparer {
            shape,
            whole_file: options.whole_file,
            zstd,
            out,
            ops: Vec::new(),
            ops_bytes: 0,
            sums: VecDeque::new(),
        })
    }

    fn run(
        mut self,
        source: &Source,
        from: u64,
        head: Head,
        mut sums_rx: mpsc::UnboundedReceiver<Vec<BlockSum>>,
        read: &AtomicU64,
    ) -> Result<(), SessionError> {
        let shape = self.shape;
        let count = shape.count();
        let mut root = BlockRoot::from_head(head);
        let mut holes = Holes::new(source);
        let mut buf = vec![0u8; shape.block_len() as usize];
        let mut last = None;
        let mut single = None;
        for i in from / shape.block_len()..count {
            let (at, len) = (shape.offset(i), shape.len_of(i));
            let block = match holes.zeros(&source.file, at, len) {
                Some(zeros) => zeros,
                None => {
                    let b = &mut buf[..len as usize];
                    source
                        .file
                        .read_exact_at(b, at)
                        .map_err(|e| SessionError::local("reading the source", e))?;
                    read.fetch_add(len, Ordering::Relaxed);
                    &*b
                }
            };
            let cv = block_cv(at, block);
            match i + 1 == count {
                false => root.push(shape.block_len(), cv),
                true => last = Some((len, cv)),
            }
            if count == 1 {
                single = Some(blake3::hash(block));
            }
            if !self.whole_file && self.next_sum(&mut sums_rx)? == sum_of(&cv) {
                self.copy(i)?;
            } else if crate::delta::is_zero(block) {
                self.push(Op::Zeros(len))?;
            } else {
                for chunk in block.chunks(LITERAL_CHUNK) {
                    self.push(Op::Literal(chunk.to_vec()))?;
                }
            }
        }
        let root = match (single, last) {
            (Some(hash), _) => hash,
            (None, Some((len, cv))) => root
                .finish(len, cv)
                .ok_or_else(|| SessionError::Internal("no root of the source's blocks".into()))?,
            (None, None) => blake3::hash(b""),
        };
        self.flush_ops()?;
        let now = source
            .now()
            .map_err(|e| SessionError::local("reading the source", e))?;
        let outcome = match now.0 == source.size {
            true => FileOutcome::Sent(*root.as_bytes()),
            false => FileOutcome::Changed,
        };
        self.out.push(Frame::FileEnd { id: 0, outcome })?;
        self.out.push(Frame::DataEnd)?;
        self.out.flush()
    }

    /// The receiver's sum of the next block, waiting for it if need be
    /// (what is ready to go leaves first).
    fn next_sum(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Vec<BlockSum>>,
    ) -> Result<BlockSum, SessionError> {
        while self.sums.is_empty() {
            let more = match rx.try_recv() {
                Ok(more) => more,
                Err(_) => {
                    self.flush_ops()?;
                    self.out.flush()?;
                    rx.blocking_recv().ok_or_else(cancelled)?
                }
            };
            self.sums.extend(more);
        }
        Ok(self.sums.pop_front().expect("not empty"))
    }

    /// Block `i` is already at the destination.
    fn copy(&mut self, i: u64) -> Result<(), SessionError> {
        if let Some(WireOp::Plain(Op::Copy { block, count })) = self.ops.last_mut() {
            if *block as u64 + *count as u64 == i && *count < u32::MAX {
                *count += 1;
                return Ok(());
            }
        }
        self.push(Op::Copy {
            block: i as u32,
            count: 1,
        })
    }

    fn push(&mut self, op: Op) -> Result<(), SessionError> {
        if let (Op::Zeros(more), Some(WireOp::Plain(Op::Zeros(len)))) = (&op, self.ops.last_mut()) {
            *len += more;
            return Ok(());
        }
        let op = match (op, self.zstd.as_mut()) {
            (Op::Literal(data), Some(z)) => {
                let packed = z
                    .compress(&data)
                    .map_err(|e| SessionError::local("compressing", e))?;
                match packed.len() < data.len() {
                    true => WireOp::Zstd {
                        raw_len: data.len() as u32,
                        data: packed,
                    },
                    false => WireOp::Plain(Op::Literal(data)),
                }
            }
            (op, _) => WireOp::Plain(op),
        };
        self.ops_bytes += match &op {
            WireOp::Plain(Op::Literal(d)) | WireOp::Zstd { data: d, .. } => d.len(),
            _ => 0,
        };
        self.ops.push(op);
        if self.ops.len() >= OPS_BATCH || self.ops_bytes >= BYTES_BATCH {
            self.flush_ops()?;
        }
        Ok(())
    }

    fn flush_ops(&mut self) -> Result<(), SessionError> {
        if self.ops.is_empty() {
            return Ok(());
        }
        self.ops_bytes = 0;
        let ops = std::mem::take(&mut self.ops);
        self.out.push(Frame::Ops { id: 0, ops })
    }
}

/// Where an image's holes are (`SEEK_DATA`), so that they are not read. A
/// device, or a file system that cannot tell, has none.
struct Holes {
    /// What is known of `[from, to)`: a hole (reads as zeros) or data.
    from: u64,
    to: u64,
    hole: bool,
    works: bool,
}

impl Holes {
    fn new(source: &Source) -> Holes {
        Holes {
            from: 0,
            to: 0,
            hole: false,
            works: source.kind == Kind::Image,
        }
    }

    /// Whether `[at, at + len)` lies in a hole. One `SEEK_DATA` and one
    /// `SEEK_HOLE` per extent, not per block.
    fn is_hole(&mut self, file: &File, at: u64, len: u64) -> bool {
        use rustix::fs::{seek, SeekFrom};
        if !self.works {
            return false;
        }
        if !(self.from..self.to).contains(&at) {
            let extent = match seek(file, SeekFrom::Data(at)) {
                Ok(data) if data > at => Ok((data, true)),
                Ok(_) => seek(file, SeekFrom::Hole(at)).map(|end| (end, false)),
                // No data at or after `at`: zeros to the end.
                Err(rustix::io::Errno::NXIO) => Ok((u64::MAX, true)),
                Err(e) => Err(e),
            };
            match extent {
                Ok((to, hole)) => (self.from, self.to, self.hole) = (at, to, hole),
                Err(_) => {
                    self.works = false;
                    return false;
                }
            }
        }
        self.hole && at + len <= self.to
    }

    /// The block `[at, at + len)` when it is known to be zeros without
    /// reading it (blocks longer than [`ZEROS`], of sources over 1 TiB, are
    /// read).
    fn zeros(&mut self, file: &File, at: u64, len: u64) -> Option<&'static [u8]> {
        let known = len <= ZEROS.len() as u64 && self.is_hole(file, at, len);
        known.then(|| &ZEROS[..len as usize])
    }
}

/// BLAKE3 of `[0, size)` of `file`, read again (`--verify`).
pub fn hash_all(file: &File, size: u64, read: &AtomicU64) -> Result<blake3::Hash, SessionError> {
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < size {
        let n = (size - at).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], at)
            .map_err(|e| SessionError::local("reading back for --verify", e))?;
        h.update(&buf[..n]);
        at += n as u64;
    }
    read.fetch_add(size, Ordering::Relaxed);
    Ok(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        Rules {
            count: 10,
            sums: true,
        }
    }

    #[test]
    fn sums_come_in_order_and_within_the_source() {
        let s = State::Comparing { next: 2 };
        let (s, a) = s
            .step(
                rules(),
                Frame::BlockSums {
                    first: 2,
                    sums: vec![[0; 16]; 3],
                },
            )
            .unwrap();
        assert_eq!(s, State::Comparing { next: 5 });
        assert!(matches!(a, Action::Sums(v) if v.len() == 3));
        for (first, n) in [(4, 1), (6, 1), (5, 6)] {
            let bad = Frame::BlockSums {
                first,
                sums: vec![[0; 16]; n],
            };
            assert!(s.step(rules(), bad).is_err(), "{first} +{n}");
        }
        let none = Rules {
            count: 10,
            sums: false,
        };
        assert!(s
            .step(
                none,
                Frame::BlockSums {
                    first: 5,
                    sums: vec![[0; 16]]
                }
            )
            .is_err());
        // Verify and Done end the sums: only once every block's is in
        // (with sums; without, the comparer waits for none).
        assert!(s.step(rules(), Frame::Verify).is_err());
        assert!(s.step(rules(), Frame::Done(Summary::default())).is_err());
        assert!(s.step(none, Frame::Verify).is_ok());
        let (all, _) = s
            .step(
                rules(),
                Frame::BlockSums {
                    first: 5,
                    sums: vec![[0; 16]; 5],
                },
            )
            .unwrap();
        assert!(all.step(rules(), Frame::Done(Summary::default())).is_ok());
        let (v, _) = all.step(rules(), Frame::Verify).unwrap();
        assert_eq!(v, State::Verifying);
        assert!(v.step(rules(), Frame::Verify).is_err());
        assert!(v.step(rules(), Frame::Request(dummy_request())).is_err());
    }

    fn dummy_request() -> crate::protocol::Request {
        crate::protocol::Request {
            id: 1,
            path: crate::path::RelPath::root(),
            basis: None,
            resume_from: 0,
            prefix: None,
        }
    }

    #[test]
    fn an_image_s_holes_are_known_without_reading() {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(1 << 20).unwrap();
        f.as_file().write_all_at(&[1; 4096], 512 << 10).unwrap();
        let source = Source::open(f.path()).unwrap();
        let mut holes = Holes::new(&source);
        assert!(holes.is_hole(&source.file, 0, 64 << 10));
        assert!(!holes.is_hole(&source.file, 512 << 10, 16 << 10));
        assert!(holes.is_hole(&source.file, (1 << 20) - (16 << 10), 16 << 10));
        // A hole longer than the zeros at hand is read instead.
        assert!(holes.zeros(&source.file, 0, 64 << 10).is_some());
        assert!(holes.zeros(&source.file, 0, 2 << 20).is_none());
    }
}
