//! The sender's file service: requests queued from the reader, read ahead by
//! a [`Warmer`] (`Warm::Data`), answered in order by the delta thread, and (with
//! compression) packed by threads of their own (`packer`) so reading and
//! compressing overlap.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::denied::Denied;
use crate::beneath::TreeRoot;
use crate::delta::{delta_hashing, DeltaOptions, Op, LITERAL_CHUNK};
use crate::filter::Filter;
use crate::meta::Meta;
use crate::path::RelPath;
use crate::protocol::{
    violation, FileOutcome, Frame, Request, SessionOptions, WireOp, OPS_PER_FRAME,
};
use crate::session::flow::outbox::{recv_or_flush, FrameOut, Outbox};
use crate::session::{cancelled, warn, SessionError};
use crate::signature::{BlockSig, Index};
use crate::treehash::{self, Head, TreeHasher};
use crate::walk::STATE_DIR;
use crate::warm::Warmer;

/// Complete requests queued for the delta thread (so their files can be
/// prefetched while earlier ones are sent).
pub const REQUEST_QUEUE: usize = 1024;
/// Signature blocks queued for the delta thread at most (about 20 MiB).
const SIG_BUDGET: usize = 1 << 20;
/// Reads of a file that keeps changing before it is reported as changed.
const MAX_TRIES: usize = 3;
/// Most threads hashing the prefix of a resumed file.
const HASH_THREADS: usize = 8;

/// A request ready to serve, holding its share of the signature budget.
pub struct Queued {
    req: Request,
    sigs: Vec<BlockSig>,
    _budget: OwnedSemaphorePermit,
}

/// The way from the reader to the delta thread, and to the prefetcher.
pub struct Queue {
    tx: mpsc::Sender<Queued>,
    prefetch: Option<Warmer>,
    budget: Arc<Semaphore>,
}

impl Queue {
    pub fn new(tx: mpsc::Sender<Queued>, prefetch: Option<Warmer>) -> Queue {
        Queue {
            tx,
            prefetch,
            budget: Arc::new(Semaphore::new(SIG_BUDGET)),
        }
    }

    pub async fn push(&self, req: Request, sigs: Vec<BlockSig>) -> Result<(), SessionError> {
        let blocks = sigs.len().clamp(1, SIG_BUDGET) as u32;
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(blocks)
            .await
            .map_err(|_| cancelled())?;
        if let Some(prefetch) = &self.prefetch {
            prefetch.offer(&req.path);
        }
        let queued = Queued {
            req,
            sigs,
            _budget: permit,
        };
        self.tx.send(queued).await.map_err(|_| cancelled())
    }
}

/// The delta thread: answers requests in order until the receiver has no
/// more, counting in `read` the bytes of source files it reads.
pub fn serve(
    root: &TreeRoot,
    filter: Filter,
    opts: SessionOptions,
    rx: mpsc::Receiver<Queued>,
    out: Outbox,
    read: &AtomicU64,
    denied: &Denied,
) -> Result<(), SessionError> {
    let Some(level) = opts.compress else {
        return answer(root, &filter, &opts, rx, out, read, denied);
    };
    super::packer::packed(level, out, |packers| {
        answer(root, &filter, &opts, rx, packers, read, denied)
    })
}

/// Answers each request with the file's data, in order.
fn answer(
    root: &TreeRoot,
    filter: &Filter,
    opts: &SessionOptions,
    mut rx: mpsc::Receiver<Queued>,
    mut out: impl FrameOut,
    read: &AtomicU64,
    denied: &Denied,
) -> Result<(), SessionError> {
    while let Some(Queued { req, sigs, .. }) = recv_or_flush(&mut rx, &mut out)? {
        if !listable(filter, &req.path) {
            return Err(violation(format!(
                "receiver asked for {}, which is not in the transfer",
                req.path
            ))
            .into());
        }
        let outcome = send_file(root, opts, &req, sigs, &mut out, read, denied)?;
        out.push(Frame::FileEnd {
            id: req.id,
            outcome,
        })?;
    }
    out.push(Frame::DataEnd)?;
    out.flush()
}

/// Whether the walk could have listed `path` as a file: not excluded, not
/// under an excluded directory, not under the reserved state directory.
fn listable(filter: &Filter, path: &RelPath) -> bool {
    let bytes = path.as_bytes();
    if bytes.starts_with(STATE_DIR) && bytes.get(STATE_DIR.len()).is_none_or(|&b| b == b'/') {
        return false;
    }
    let mut ancestor = path.parent();
    while !ancestor.is_root() {
        if filter.excludes(&ancestor, true) {
            return false;
        }
        ancestor = ancestor.parent();
    }
    !path.is_root() && !filter.excludes(path, false)
}

fn send_file(
    root: &TreeRoot,
    opts: &SessionOptions,
    req: &Request,
    sigs: Vec<BlockSig>,
    out: &mut dyn FrameOut,
    read: &AtomicU64,
    denied: &Denied,
) -> Result<FileOutcome, SessionError> {
    let file = match root.open_file(&req.path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(FileOutcome::Vanished),
        // Replaced by a symlink since it was listed.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Ok(FileOutcome::Changed)
        }
        Err(e) => return Ok(unreadable(req, e, denied)),
    };
    let index = req.basis.map(|shape| Index::new(shape, sigs));
    let resume = req.resume_from;
    // A resumed file is rebuilt in place over its partial copy, and its
    // basis is that copy's unverified rest at the same offsets.
    let mut dopts = DeltaOptions {
        inplace: opts.inplace || resume > 0,
        len_hint: None,
        positional: resume > 0,
    };
    for _ in 0..MAX_TRIES {
        let before = match stat_file(&file) {
            Ok(Some(m)) if m.size >= resume => m,
            // Shorter than what the receiver holds: it has changed since it was listed.
            Ok(_) => return Ok(FileOutcome::Changed),
            Err(e) => return Ok(unreadable(req, e, denied)),
        };
        out.push(Frame::FileBegin {
            id: req.id,
            meta: before,
        })?;
        dopts.len_hint = Some(before.size - resume);
        let trusted = trusted_head(opts, req, &before);
        let mut batch = OpBatch {
            id: req.id,
            ops: Vec::new(),
            bytes: 0,
            out: &mut *out,
        };
        let sent = match send_rest(
            &file,
            (resume, trusted),
            before.size,
            index.as_ref(),
            dopts,
            &mut batch,
            read,
        ) {
            Ok(s) => s,
            Err(SendError::Session(e)) => return Err(e),
            // The prefix the receiver holds is no longer there.
            Err(SendError::Read(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Ok(FileOutcome::Changed)
            }
            Err(SendError::Read(e)) => return Ok(unreadable(req, e, denied)),
        };
        batch.flush()?;
        let after = stat_file(&file).ok().flatten();
        if resume + sent.0 == before.size && after == Some(before) {
            return Ok(FileOutcome::Sent(sent.1));
        }
    }
    Ok(FileOutcome::Changed)
}

/// The receiver's hash state of the prefix it holds, when this sender may
/// take it for its own file's: not with `--checksum`, and only while the
/// file has the size and modification time it had when that prefix was sent
/// (rsync's quick check, applied to the part the receiver already has).
fn trusted_head(opts: &SessionOptions, req: &Request, now: &Meta) -> Option<Head> {
    let p = req.prefix.as_ref().filter(|_| !opts.checksum)?;
    if p.size != now.size || p.mtime != now.mtime {
        return None;
    }
    // The reader refused a state that does not fit (`sender::State::step`).
    req.prefix_head().ok().flatten()
}

/// Sends the file from `resume` on and hashes all of it: the first
/// `resume` bytes (which the receiver has) are only hashed — from the end of
/// `trusted`, the receiver's hash state of them, if given; otherwise all of
/// them, by other threads while the rest is read and sent. Returns the bytes
/// read after `resume` and the whole file's hash; counts in `read` every
/// byte read.
fn send_rest(
    file: &File,
    (resume, trusted): (u64, Option<Head>),
    size: u64,
    index: Option<&Index>,
    dopts: DeltaOptions,
    batch: &mut OpBatch,
    read: &AtomicU64,
) -> Result<(u64, [u8; 32]), SendError> {
    // The hasher of the rest starts where the head ends: the end of the
    // trusted state, or the last chunk boundary before `resume`.
    let head_len = trusted
        .as_ref()
        .map_or_else(|| treehash::head_len(resume), Head::len);
    let mut hasher = TreeHasher::starting_at(head_len);
    treehash::hash_range(file, head_len, resume, &mut hasher)?;
    read.fetch_add(resume - head_len, Ordering::Relaxed);
    let mut src = file;
    src.seek(SeekFrom::Start(resume))?;
    let stop = AtomicBool::new(false);
    let (head, sent) = std::thread::scope(|scope| {
        let head = (head_len > 0 && trusted.is_none()).then(|| {
            scope.spawn(|| {
                let threads =
                    std::thread::available_parallelism().map_or(1, |n| n.get().min(HASH_THREADS));
                treehash::hash_head(file, head_len, threads, &|| stop.load(Ordering::Relaxed))
            })
        });
        let sent = delta_hashing::<_, SendError>(
            src.take(size - resume),
            index,
            dopts,
            &mut hasher,
            &mut |op| batch.push(op),
        );
        if sent.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        (head.map(|h| h.join()), sent)
    });
    let sent = sent?;
    read.fetch_add(sent.len, Ordering::Relaxed);
    let head = match head {
        Some(hashed) => {
            let head: Head = hashed.map_err(|_| io::Error::other("hashing thread panicked"))??;
            read.fetch_add(head.len(), Ordering::Relaxed);
            Some(head)
        }
        None => trusted,
    };
    if let Some(head) = head {
        hasher.join(head).map_err(io::Error::other)?;
    }
    Ok((sent.len, *hasher.finalize().as_bytes()))
}

fn unreadable(req: &Request, e: io::Error, denied: &Denied) -> FileOutcome {
    warn(format_args!("{}: {e}", req.path));
    denied.note(&req.path, &e);
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

/// Collects ops into frames of bounded size.
struct OpBatch<'a> {
    id: u64,
    ops: Vec<WireOp>,
    bytes: usize,
    out: &'a mut dyn FrameOut,
}

impl OpBatch<'_> {
    fn push(&mut self, op: Op) -> Result<(), SendError> {
        self.bytes += match &op {
            Op::Literal(d) => d.len(),
            _ => 8,
        };
        let op = WireOp::Plain(op);
        self.ops.push(op);
        if self.bytes >= LITERAL_CHUNK || self.ops.len() >= OPS_PER_FRAME {
            self.flush().map_err(SendError::Session)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SessionError> {
        if self.ops.is_empty() {
            return Ok(());
        }
        let ops = std::mem::take(&mut self.ops);
        self.bytes = 0;
        self.out.push(Frame::Ops { id: self.id, ops })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_the_walk_could_list_are_served() {
        let filter = Filter::new(&["cache/".into(), "*.log".into()]).unwrap();
        let p = |s: &str| RelPath::new(s.as_bytes().to_vec()).unwrap();
        assert!(listable(&filter, &p("a/b")));
        assert!(listable(&filter, &p(".volmig-x")));
        assert!(!listable(&filter, &p("a/x.log")));
        assert!(!listable(&filter, &p("a/cache/b")));
        assert!(!listable(&filter, &p(".volmig/state")));
        assert!(!listable(&filter, &p(".volmig")));
        assert!(!listable(&filter, &RelPath::root()));
    }
}
