//! Telling a slow peer from a dead one: the idle timeout is judged on bytes
//! moving on the connection, not on whole frames. A 4 MiB frame over a link
//! at 8 KiB/s takes minutes to arrive, yet every byte of it shows the peer is
//! there; a black-holed connection moves nothing, and is cut after `limit`.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::protocol::ProtocolError;
use crate::session::SessionError;

/// When bytes last crossed a connection, each way.
#[derive(Debug, Clone)]
pub struct Activity {
    origin: Instant,
    /// Nanoseconds since `origin` of the last byte read, and written.
    read: Arc<AtomicU64>,
    written: Arc<AtomicU64>,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity {
            origin: Instant::now(),
            read: Arc::default(),
            written: Arc::default(),
        }
    }
}

impl Activity {
    fn mark(&self, at: &AtomicU64) {
        at.fetch_max(self.origin.elapsed().as_nanos() as u64, Relaxed);
    }

    fn at(&self, nanos: u64) -> Instant {
        self.origin + Duration::from_nanos(nanos)
    }

    /// When the last byte arrived (the start, if none has).
    pub fn read(&self) -> Instant {
        self.at(self.read.load(Relaxed))
    }

    /// When the last byte moved either way: when the connection last did anything.
    pub fn either(&self) -> Instant {
        self.at(self.read.load(Relaxed).max(self.written.load(Relaxed)))
    }
}

/// A stream that counts the bytes it moves into an [`Activity`].
pub struct Metered<S> {
    inner: Pin<Box<S>>,
    activity: Activity,
}

impl<S> Metered<S> {
    pub fn new(inner: S) -> (Metered<S>, Activity) {
        let activity = Activity::default();
        let stream = Metered {
            inner: Box::pin(inner),
            activity: activity.clone(),
        };
        (stream, activity)
    }
}

impl<S: AsyncRead> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.inner.as_mut().poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.mark(&self.activity.read);
        }
        polled
    }
}

impl<S: AsyncWrite> AsyncWrite for Metered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = self.inner.as_mut().poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                self.activity.mark(&self.activity.written);
            }
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = self.inner.as_mut().poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                self.activity.mark(&self.activity.written);
            }
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.as_mut().poll_shutdown(cx)
    }
}

/// The idle timeout of one connection.
#[derive(Debug, Clone, Default)]
pub struct Idle {
    limit: Option<Duration>,
    activity: Activity,
}

impl Idle {
    pub fn new(limit: Option<Duration>, activity: Activity) -> Idle {
        Idle { limit, activity }
    }

    /// Awaits `fut` (a read from the peer), failing once no byte has
    /// arrived for the limit.
    pub async fn reading<T>(&self, fut: impl Future<Output = T>) -> Result<T, SessionError> {
        self.until(fut, Activity::read).await
    }

    /// Awaits `fut` (room in a queue that only the connection drains),
    /// failing once no byte has moved either way for the limit.
    pub async fn moving<T>(&self, fut: impl Future<Output = T>) -> Result<T, SessionError> {
        self.until(fut, Activity::either).await
    }

    /// Awaits `fut` until `limit` has passed since `last` (and the wait
    /// began) with nothing new.
    async fn until<T>(
        &self,
        fut: impl Future<Output = T>,
        last: fn(&Activity) -> Instant,
    ) -> Result<T, SessionError> {
        let Some(limit) = self.limit else {
            return Ok(fut.await);
        };
        tokio::pin!(fut);
        let began = Instant::now();
        loop {
            let deadline = last(&self.activity).max(began) + limit;
            if deadline <= Instant::now() {
                let msg = format!("nothing from the peer for {}s", limit.as_secs());
                return Err(SessionError::Protocol(ProtocolError::Io(io::Error::new(
                    io::ErrorKind::TimedOut,
                    msg,
                ))));
            }
            if let Ok(v) = tokio::time::timeout_at(deadline, &mut fut).await {
                return Ok(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_trickle_keeps_a_read_alive_and_silence_ends_it() {
        let (a, b) = tokio::io::duplex(64);
        let (mut rd, activity) = Metered::new(b);
        let idle = Idle::new(Some(Duration::from_secs(10)), activity);
        // One byte every 6 s: no frame would complete within 10 s, but bytes move.
        let trickle = tokio::spawn(async move {
            let mut a = a;
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_secs(6)).await;
                a.write_all(b"x").await.unwrap();
            }
            a
        });
        let mut got = [0u8; 5];
        let read = idle.reading(rd.read_exact(&mut got)).await;
        assert!(read.is_ok(), "a peer trickling bytes is alive: {read:?}");
        let _a = trickle.await.unwrap();
        // Now silence: the next read times out after the limit.
        let start = tokio::time::Instant::now();
        let mut more = [0u8; 1];
        let read = idle.reading(rd.read_exact(&mut more)).await;
        assert!(
            matches!(read, Err(SessionError::Protocol(ProtocolError::Io(ref e))) if e.kind() == io::ErrorKind::TimedOut),
            "{read:?}"
        );
        // Counted from the last byte, not from the start of this wait.
        assert!(
            start.elapsed() <= Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        assert!(
            start.elapsed() >= Duration::from_secs(9),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_on_the_connection_counts_writes_too() {
        let (a, _b) = tokio::io::duplex(1 << 20);
        let (mut wr, activity) = Metered::new(a);
        let idle = Idle::new(Some(Duration::from_secs(10)), activity);
        let writing = tokio::spawn(async move {
            for _ in 0..4 {
                tokio::time::sleep(Duration::from_secs(7)).await;
                wr.write_all(b"data").await.unwrap();
            }
        });
        let room = tokio::time::sleep(Duration::from_secs(25));
        assert!(
            idle.moving(room).await.is_ok(),
            "writes show the link is alive"
        );
        writing.await.unwrap();
        let never = std::future::pending::<()>();
        assert!(
            idle.moving(never).await.is_err(),
            "nothing moves: timed out"
        );
    }
}
