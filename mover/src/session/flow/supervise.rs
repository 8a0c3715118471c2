//! Runs a session's worker threads and reports the failure that explains the most.
//!
//! When one part of a session fails, the others stop too: a worker whose
//! channel closed reports [`SessionError::Cancelled`], a reader sees the
//! connection drop. Only the first cause is worth showing, so every worker's
//! error goes to the supervisor, which weighs them.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::protocol::{Frame, ProtocolError};
use crate::session::{warn, SessionError};

/// How long a secondary error waits for the primary cause to be reported.
const GRACE: Duration = Duration::from_millis(200);
/// How long stopped workers get to clean up after a failure.
pub const CLEANUP: Duration = Duration::from_secs(5);

pub struct Supervisor {
    tx: mpsc::UnboundedSender<SessionError>,
    rx: mpsc::UnboundedReceiver<SessionError>,
    /// Set from outside (a signal) to stop the session cleanly.
    cancel: CancellationToken,
}

impl Supervisor {
    pub fn new(cancel: CancellationToken) -> Supervisor {
        let (tx, rx) = mpsc::unbounded_channel();
        Supervisor { tx, rx, cancel }
    }

    /// Runs `work` on a blocking thread; its error is also reported here.
    pub fn spawn<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, SessionError> + Send + 'static,
    ) -> JoinHandle<Option<T>> {
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || match work() {
            Ok(v) => Some(v),
            Err(e) => {
                let _ = tx.send(e);
                None
            }
        })
    }

    /// Awaits `fut`, ending early as soon as a worker fails.
    pub async fn watch<T>(
        &mut self,
        fut: impl Future<Output = Result<T, SessionError>>,
    ) -> Result<T, SessionError> {
        let first = tokio::select! {
            r = fut => match r {
                Ok(v) => return Ok(v),
                Err(e) => e,
            },
            Some(e) = self.rx.recv() => e,
            () = self.cancel.cancelled() => SessionError::Interrupted,
        };
        Err(self.explain(first).await)
    }

    /// Awaits `fut` as [`Supervisor::watch`] does, but on a stop `fut`, which
    /// watches the same token, gets up to `grace` to wind down on its own
    /// (the session ends [`SessionError::Interrupted`] all the same).
    pub async fn watch_winding_down<T>(
        &mut self,
        fut: impl Future<Output = Result<T, SessionError>>,
        grace: Duration,
    ) -> Result<T, SessionError> {
        tokio::pin!(fut);
        let first = tokio::select! {
            r = &mut fut => match r {
                Ok(v) => return Ok(v),
                Err(e) => e,
            },
            Some(e) = self.rx.recv() => e,
            () = self.cancel.cancelled() => {
                let _ = tokio::time::timeout(grace, &mut fut).await;
                SessionError::Interrupted
            }
        };
        Err(self.explain(first).await)
    }

    /// Awaits a worker that is expected to finish.
    pub async fn join<T>(&mut self, worker: JoinHandle<Option<T>>) -> Result<T, SessionError> {
        match worker.await {
            Ok(Some(v)) => Ok(v),
            Ok(None) => Err(self.explain(SessionError::Cancelled).await),
            Err(e) => Err(SessionError::Internal(format!("worker stopped: {e}"))),
        }
    }

    /// The most telling of `first` and the failures reported now or within a moment.
    pub async fn explain(&mut self, first: SessionError) -> SessionError {
        let mut best = first;
        let deadline = Instant::now()
            + if best.weight() < 3 {
                GRACE
            } else {
                Duration::ZERO
            };
        loop {
            let next = match self.rx.try_recv() {
                Ok(e) => Some(e),
                Err(_) if Instant::now() < deadline => {
                    tokio::time::timeout_at(deadline, self.rx.recv())
                        .await
                        .ok()
                        .flatten()
                }
                Err(_) => None,
            };
            match next {
                Some(e) if e.weight() > best.weight() => best = e,
                Some(_) => {}
                None => return best,
            }
        }
    }
}

/// Tells the peer why the session ends, then waits (bounded by [`CLEANUP`])
/// for the writer to deliver it; a writer stuck on a dead peer is stopped,
/// which also releases workers waiting to hand it frames. When the
/// connection itself failed (lost, timed out), nothing can reach the peer:
/// the writer gets a moment to finish what it has, not the full wait.
pub async fn tell_peer(
    e: SessionError,
    out: mpsc::Sender<Vec<Frame>>,
    mut writer: JoinHandle<Result<(), ProtocolError>>,
) -> SessionError {
    let _ = out.try_send(vec![Frame::Abort(e.to_abort())]);
    drop(out);
    let dead = matches!(
        e,
        SessionError::Protocol(ProtocolError::Io(_) | ProtocolError::Closed(_))
    );
    let wait = if dead { DEAD_PEER } else { CLEANUP };
    if tokio::time::timeout(wait, &mut writer).await.is_err() {
        writer.abort();
        if !dead {
            warn("could not deliver the error to the peer");
        }
    }
    e
}

/// How long a writer may go on after the connection failed.
const DEAD_PEER: Duration = Duration::from_millis(200);

/// Waits for stopped workers to finish cleaning up, bounded by [`CLEANUP`].
pub async fn drain<T>(worker: JoinHandle<T>) {
    let _ = tokio::time::timeout(CLEANUP, worker).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ProtocolError;

    #[tokio::test]
    async fn the_cause_wins_over_its_consequences() {
        let mut sup = Supervisor::new(CancellationToken::new());
        let w = sup.spawn(|| -> Result<(), _> { Err(SessionError::Usage("bad pattern".into())) });
        let closed = SessionError::Protocol(ProtocolError::Closed("early"));
        assert!(matches!(sup.explain(closed).await, SessionError::Usage(_)));
        assert!(sup.join(w).await.is_err());
    }

    #[tokio::test]
    async fn cancellation_interrupts_the_watch() {
        let token = CancellationToken::new();
        let mut sup = Supervisor::new(token.clone());
        token.cancel();
        let r = sup
            .watch(std::future::pending::<Result<(), SessionError>>())
            .await;
        assert!(matches!(r, Err(SessionError::Interrupted)));
    }

    #[tokio::test]
    async fn watch_stops_at_the_first_worker_failure() {
        let mut sup = Supervisor::new(CancellationToken::new());
        let _w = sup.spawn(|| -> Result<(), _> { Err(SessionError::Usage("x".into())) });
        let r = sup
            .watch(std::future::pending::<Result<(), SessionError>>())
            .await;
        assert!(matches!(r, Err(SessionError::Usage(_))));
    }
}
