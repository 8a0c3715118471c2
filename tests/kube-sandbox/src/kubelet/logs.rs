//! What `kubectl logs` reads: a container's log file, whole or its last lines,
//! and followed (`-f`) while the container runs.
//!
//! The runtime appends the container's stdout and stderr, as written, to one
//! plain file (no CRI timestamps or stream tags), so serving logs is reading
//! bytes: no parsing, and a last line without its newline is still a line.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use tokio::sync::watch;

/// How much is read at a time, both when looking for the tail and when
/// following.
const CHUNK: usize = 64 * 1024;

/// How often a followed log is checked for new bytes while the container is
/// quiet.
const POLL: Duration = Duration::from_millis(100);

/// The log's last `tail_lines` lines (all of it when `None`), cut after
/// `limit_bytes` bytes (when `Some`).
///
/// The two options combine as in the kubelet: the lines are chosen first, and
/// the limit then keeps the *first* `limit_bytes` bytes of them, so the
/// output may end in the middle of a line. (`limitBytes` is documented as "the
/// number of bytes to read from the server before terminating the log
/// output".)
pub fn read_log(
    path: &Path,
    tail_lines: Option<usize>,
    limit_bytes: Option<usize>,
) -> io::Result<Vec<u8>> {
    let mut file = File::open(path)?;
    let start = tail_start(&file, tail_lines)?;
    file.seek(SeekFrom::Start(start))?;
    let mut out = Vec::new();
    match limit_bytes {
        Some(limit) => file
            .take(u64::try_from(limit).unwrap_or(u64::MAX))
            .read_to_end(&mut out)?,
        None => file.read_to_end(&mut out)?,
    };
    Ok(out)
}

/// `kubectl logs -f`: the tail as [`read_log`] chooses it, then every byte
/// appended after, until `finished` holds `true` (the container exited) *and*
/// everything written before that has been sent.
///
/// Bytes are sent as soon as they are seen (the file is checked every 100 ms
/// while nothing new arrives), so a partial line is not held back. A dropped
/// `finished` sender counts as finished. A log file that cannot be opened
/// makes the stream's only item an error. The file is assumed to be only
/// appended to, never truncated or rotated.
pub fn follow(
    path: PathBuf,
    tail_lines: Option<usize>,
    finished: watch::Receiver<bool>,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let start = State::Start {
        path,
        tail_lines,
        finished,
    };
    futures::stream::unfold(start, |state| async move {
        let mut follower = match state {
            State::Start {
                path,
                tail_lines,
                finished,
            } => match Follower::open(path, tail_lines, finished).await {
                Ok(follower) => follower,
                Err(error) => return Some((Err(error), State::Done)),
            },
            State::Following(follower) => follower,
            State::Done => return None,
        };
        match follower.next().await {
            Ok(Some(bytes)) => Some((Ok(bytes), State::Following(follower))),
            Ok(None) => None,
            Err(error) => Some((Err(error), State::Done)),
        }
    })
}

/// Where [`follow`]'s stream is.
enum State {
    /// Nothing read yet: the file is opened on the first poll.
    Start {
        path: PathBuf,
        tail_lines: Option<usize>,
        finished: watch::Receiver<bool>,
    },
    Following(Follower),
    /// An error was sent: nothing more comes.
    Done,
}

/// An open log being followed from some offset.
struct Follower {
    file: Arc<File>,
    offset: u64,
    finished: watch::Receiver<bool>,
}

impl Follower {
    /// Opens the log at the start of its last `tail_lines` lines.
    async fn open(
        path: PathBuf,
        tail_lines: Option<usize>,
        finished: watch::Receiver<bool>,
    ) -> io::Result<Self> {
        let (file, offset) = blocking(move || {
            let file = File::open(&path)?;
            let offset = tail_start(&file, tail_lines)?;
            Ok((file, offset))
        })
        .await?;
        let file = Arc::new(file);
        Ok(Self {
            file,
            offset,
            finished,
        })
    }

    /// The next bytes of the log, waiting for some if there are none yet;
    /// `None` once the container has finished and all it wrote was returned.
    async fn next(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            // Looked at before reading: whatever the container wrote before
            // it was seen finished is then read below, before giving up.
            let finished = *self.finished.borrow() || self.finished.has_changed().is_err();
            let (file, offset) = (Arc::clone(&self.file), self.offset);
            let bytes = blocking(move || read_at_most(&file, offset, CHUNK)).await?;
            if !bytes.is_empty() {
                self.offset += bytes.len() as u64;
                return Ok(Some(Bytes::from(bytes)));
            }
            if finished {
                return Ok(None);
            }
            tokio::select! {
                _ = self.finished.changed() => {}
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }
}

/// Runs file work on tokio's blocking threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(io::Error::other)?
}

/// Up to `max` bytes of `file` from `offset`; none at its end.
fn read_at_most(file: &File, offset: u64, max: usize) -> io::Result<Vec<u8>> {
    let available = file.metadata()?.len().saturating_sub(offset);
    let mut buf = vec![0; usize::try_from(available).map_or(max, |n| n.min(max))];
    let read = file.read_at(&mut buf, offset)?;
    buf.truncate(read);
    Ok(buf)
}

/// The offset at which the file's last `lines` lines start (0 when it has
/// fewer, or for all of it when `None`). A last line without its newline
/// counts as a line, and the newline that ends the file does not start
/// another.
fn tail_start(file: &File, lines: Option<usize>) -> io::Result<u64> {
    let Some(lines) = lines else {
        return Ok(0);
    };
    let len = file.metadata()?.len();
    if lines == 0 {
        return Ok(len);
    }
    let mut buf = vec![0; CHUNK];
    let mut newlines = 0;
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(CHUNK as u64);
        // At most CHUNK bytes, so the length fits in usize.
        let chunk = &mut buf[..(end - start) as usize];
        file.read_exact_at(chunk, start)?;
        for (offset, _) in chunk.iter().enumerate().rev().filter(|(_, &b)| b == b'\n') {
            let after = start + offset as u64 + 1;
            if after == len {
                continue;
            }
            newlines += 1;
            if newlines == lines {
                return Ok(after);
            }
        }
        end = start;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::io::Write;

    fn log_with(contents: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("container.log");
        std::fs::write(&path, contents).expect("write log");
        (dir, path)
    }

    fn tail(contents: &[u8], lines: Option<usize>, limit: Option<usize>) -> String {
        let (_dir, path) = log_with(contents);
        let out = read_log(&path, lines, limit).expect("read log");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn tail_takes_the_last_lines() {
        assert_eq!(tail(b"a\nb\nc\n", None, None), "a\nb\nc\n");
        assert_eq!(tail(b"a\nb\nc\n", Some(2), None), "b\nc\n");
        assert_eq!(tail(b"a\nb\nc\n", Some(3), None), "a\nb\nc\n");
        assert_eq!(tail(b"a\nb\nc\n", Some(10), None), "a\nb\nc\n");
        assert_eq!(tail(b"a\nb\nc\n", Some(0), None), "");
        assert_eq!(tail(b"", Some(5), None), "");
    }

    #[test]
    fn a_last_line_without_newline_counts() {
        assert_eq!(tail(b"a\nb\nc", Some(1), None), "c");
        assert_eq!(tail(b"a\nb\nc", Some(2), None), "b\nc");
        assert_eq!(tail(b"one line", Some(1), None), "one line");
    }

    #[test]
    fn empty_lines_are_lines() {
        assert_eq!(tail(b"a\n\n\n", Some(2), None), "\n\n");
        assert_eq!(tail(b"\n", Some(1), None), "\n");
    }

    #[test]
    fn limit_bytes_keeps_the_start_of_the_chosen_lines() {
        assert_eq!(tail(b"a\nb\nc\n", None, Some(3)), "a\nb");
        assert_eq!(tail(b"a\nb\nc\n", Some(2), Some(3)), "b\nc");
        assert_eq!(tail(b"a\nb\nc\n", Some(2), Some(100)), "b\nc\n");
        assert_eq!(tail(b"a\nb\nc\n", None, Some(0)), "");
    }

    #[test]
    fn tail_spans_chunks() {
        let contents: String = (0..50_000).map(|i| format!("line {i}\n")).collect();
        assert!(contents.len() > 4 * CHUNK);
        let expected: String = (40_000..50_000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(tail(contents.as_bytes(), Some(10_000), None), expected);
    }

    #[test]
    fn a_missing_log_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let error = read_log(&dir.path().join("nope"), None, None).expect_err("no file");
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }

    /// Everything the stream sends until it ends, failing after `secs`.
    async fn collect(stream: impl Stream<Item = io::Result<Bytes>>, secs: u64) -> Vec<u8> {
        let all = tokio::time::timeout(Duration::from_secs(secs), stream.collect::<Vec<_>>())
            .await
            .expect("the stream ends");
        all.into_iter()
            .flat_map(|chunk| chunk.expect("chunk").to_vec())
            .collect()
    }

    #[tokio::test]
    async fn follow_sends_appended_bytes_and_ends_after_the_last() {
        let (_dir, path) = log_with(b"old 1\nold 2\n");
        let (done, finished) = watch::channel(false);
        let mut stream = Box::pin(follow(path.clone(), Some(1), finished));
        let first = stream.next().await.expect("an item").expect("bytes");
        assert_eq!(&first[..], b"old 2\n");

        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open log");
        log.write_all(b"new\n").expect("append");
        let next = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("appended bytes arrive while running")
            .expect("an item")
            .expect("bytes");
        assert_eq!(&next[..], b"new\n");

        log.write_all(b"last words").expect("append");
        done.send(true).expect("receiver alive");
        assert_eq!(collect(stream, 5).await, b"last words");
    }

    #[tokio::test]
    async fn follow_of_a_finished_container_sends_its_log_and_ends() {
        let (_dir, path) = log_with(b"a\nb\nc");
        let (_done, finished) = watch::channel(true);
        assert_eq!(
            collect(follow(path.clone(), None, finished.clone()), 5).await,
            b"a\nb\nc"
        );
        assert_eq!(collect(follow(path, Some(0), finished), 5).await, b"");
    }

    #[tokio::test]
    async fn follow_ends_when_the_sender_is_gone() {
        let (_dir, path) = log_with(b"x\n");
        let (done, finished) = watch::channel(false);
        drop(done);
        assert_eq!(collect(follow(path, None, finished), 5).await, b"x\n");
    }

    #[tokio::test]
    async fn follow_of_a_missing_log_is_one_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (_done, finished) = watch::channel(false);
        let items: Vec<_> = follow(dir.path().join("nope"), None, finished)
            .collect()
            .await;
        assert_eq!(items.len(), 1);
        let error = items
            .into_iter()
            .next()
            .and_then(Result::err)
            .expect("an error");
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }
}
