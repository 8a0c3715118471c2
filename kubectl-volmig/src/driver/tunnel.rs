//! The tunnel network path (issue 23): the sender's bytes go to its API
//! server, through this process, to the receiver's API server and into the
//! receiver pod, for clusters with no route between their pods.
//!
//! A `pods/portforward` can only dial into a pod, so both movers listen
//! (`mover receive --listen`, `mover send --listen`) and [`relay`] opens a
//! port forward to each and copies between the two streams, both ways at
//! once, through large buffers. The movers still authenticate each other
//! end to end (TLS 1.3, the sender the client): the relay sees ciphertext
//! only, and one that reaches the wrong pod is refused at the handshake.
//!
//! Port forwarding (WebSocket `v4.channel.k8s.io`) has no half-close: a
//! stream ends when its pod closed the connection or the forward failed.
//! The mover protocol ends with its own frames, so when either stream ends
//! the relay ends the other one (what it had already read still reaches
//! it) and waits for both forwarders to stop.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Portforwarder};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio_util::sync::CancellationToken;

/// The buffer of each direction: what one read from a port forward may
/// hand over (its streams buffer 1 MiB) goes on in one write.
const BUFFER: usize = 1 << 20;

/// How long a forwarder may take to stop once its stream is closed
/// (the server then closes the port; containerd's grace is one second).
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// One end of the tunnel: a mover pod listening on `port`.
#[derive(Clone)]
pub struct Endpoint<'a> {
    pub pods: Api<Pod>,
    pub pod: &'a str,
    pub port: u16,
}

/// Which mover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Sender,
    Receiver,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Sender => "sender",
            Side::Receiver => "receiver",
        })
    }
}

/// Bytes relayed so far, each way; read it while the relay runs for a rate.
#[derive(Debug, Default)]
pub struct Moved {
    pub to_receiver: AtomicU64,
    pub to_sender: AtomicU64,
}

/// Why a relay ended without failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// That side's stream ended: its mover closed the connection (how a
    /// session ends, whatever its outcome; the movers' own results say
    /// which).
    Closed(Side),
    /// The caller cancelled.
    Cancelled,
}

/// How a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayEnd {
    pub ending: Ending,
    pub to_receiver: u64,
    pub to_sender: u64,
}

/// What failed, on which side, at which pod.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    /// The API server did not open the port forward (no such pod, no
    /// node yet, no permission, unreachable).
    #[error("cannot forward port {port} of the {side} pod {pod}: {message}")]
    Open {
        side: Side,
        pod: String,
        port: u16,
        message: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// The forward opened but the pod's port could not be reached (the
    /// mover not listening yet, or gone).
    #[error("the {side} pod {pod} cannot be reached on port {port}: {message}")]
    Unreachable {
        side: Side,
        pod: String,
        port: u16,
        message: String,
    },
    /// The forward broke while bytes were moving (the API server, the
    /// kubelet or the connection to either).
    #[error("the port forward to the {side} pod {pod} failed: {message}")]
    Broken {
        side: Side,
        pod: String,
        message: String,
    },
}

impl TunnelError {
    /// Whether a new relay may get through: a pod that does not exist or
    /// may not be forwarded to stays so; anything else may pass.
    pub fn is_retryable(&self) -> bool {
        match self {
            TunnelError::Open { source, .. } => match source.as_ref() {
                kube::Error::Api(status) => status.code >= 500 || status.code == 429,
                _ => true,
            },
            TunnelError::Unreachable { .. } | TunnelError::Broken { .. } => true,
        }
    }

    pub fn side(&self) -> Side {
        match self {
            TunnelError::Open { side, .. }
            | TunnelError::Unreachable { side, .. }
            | TunnelError::Broken { side, .. } => *side,
        }
    }
}

/// Relays the session of a listening sender and a listening receiver
/// until one of them closes its connection, or `cancel`. Opens the
/// receiver's port forward first (the receiver is the one that waits for
/// a peer); `moved` counts the bytes as they go.
pub async fn relay(
    sender: Endpoint<'_>,
    receiver: Endpoint<'_>,
    cancel: CancellationToken,
    moved: &Moved,
) -> Result<RelayEnd, TunnelError> {
    let end = |ending| RelayEnd {
        ending,
        to_receiver: moved.to_receiver.load(Ordering::Relaxed),
        to_sender: moved.to_sender.load(Ordering::Relaxed),
    };
    let Some(mut r) = Forward::open(Side::Receiver, receiver, &cancel).await? else {
        return Ok(end(Ending::Cancelled));
    };
    let mut s = match Forward::open(Side::Sender, sender, &cancel).await {
        Ok(Some(s)) => s,
        // The receiver's forward is only undone: how it closes is no news.
        Ok(None) => {
            let _ = r.close().await;
            return Ok(end(Ending::Cancelled));
        }
        Err(e) => {
            let _ = r.close().await;
            return Err(e);
        }
    };
    let (s_stream, r_stream) = (s.take_stream(), r.take_stream());
    let failed = async {
        tokio::select! {
            Word::Error(m) = s.listen() => (Side::Sender, m),
            Word::Error(m) = r.listen() => (Side::Receiver, m),
            else => std::future::pending().await,
        }
    };
    let first = shuttle(s_stream, r_stream, moved, failed, &cancel).await;
    tracing::debug!(?first, "tunnel: one side ended, closing both");
    let (s_closed, r_closed) = tokio::join!(s.close(), r.close());
    // Only the side that ended first has news: the other was closed here.
    let (side, message) = match first {
        First::Cancelled => return Ok(end(Ending::Cancelled)),
        First::Failed(side, message) => (side, message),
        First::Ended(side) => match (side, s_closed, r_closed) {
            (Side::Sender, Err(message), _) | (Side::Receiver, _, Err(message)) => (side, message),
            _ => return Ok(end(Ending::Closed(side))),
        },
    };
    // A side that failed before a byte came from it was never reached.
    let (endpoint, heard) = match side {
        Side::Sender => (&s, moved.to_receiver.load(Ordering::Relaxed)),
        Side::Receiver => (&r, moved.to_sender.load(Ordering::Relaxed)),
    };
    Err(match heard {
        0 => TunnelError::Unreachable {
            side,
            pod: endpoint.pod.clone(),
            port: endpoint.port,
            message,
        },
        _ => TunnelError::Broken {
            side,
            pod: endpoint.pod.clone(),
            message,
        },
    })
}

/// What ended the copying.
#[derive(Debug, PartialEq, Eq)]
enum First {
    /// This side's stream ended (its pod closed the connection, or its
    /// forwarder stopped).
    Ended(Side),
    /// The server reported an error on this side's port.
    Failed(Side, String),
    Cancelled,
}

/// Copies both ways between the two streams until one ends, `failed`
/// says a side failed, or `cancel`; then drops both streams, which closes
/// them once what was written to them has gone on.
async fn shuttle<S, R>(
    sender: S,
    receiver: R,
    moved: &Moved,
    failed: impl Future<Output = (Side, String)>,
    cancel: &CancellationToken,
) -> First
where
    S: AsyncRead + AsyncWrite,
    R: AsyncRead + AsyncWrite,
{
    let (mut from_sender, mut to_sender) = tokio::io::split(sender);
    let (mut from_receiver, mut to_receiver) = tokio::io::split(receiver);
    let up = pump(&mut from_sender, &mut to_receiver, &moved.to_receiver);
    let down = pump(&mut from_receiver, &mut to_sender, &moved.to_sender);
    tokio::select! {
        // A read that ends is the reading side's end; a write that fails
        // is the other side's (its forwarder stopped).
        e = up => First::Ended(if e.is_err() { Side::Receiver } else { Side::Sender }),
        e = down => First::Ended(if e.is_err() { Side::Sender } else { Side::Receiver }),
        (side, message) = failed => First::Failed(side, message),
        () = cancel.cancelled() => First::Cancelled,
    }
}

/// Copies `from` into `to` until `from` ends (`Ok`) or writing fails
/// (`Err`), counting what it wrote.
async fn pump<F, T>(from: &mut F, to: &mut T, moved: &AtomicU64) -> std::io::Result<()>
where
    F: AsyncRead + Unpin,
    T: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUFFER];
    loop {
        // A stream ending with an error ends like one that closed.
        let n = from.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buf[..n]).await?;
        moved.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// What the server said on a port's error channel so far.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Word {
    /// Nothing yet: the forward runs.
    Pending,
    /// An error: the port is done.
    Error(String),
    /// The forwarder stopped without one.
    Stopped,
}

type ErrorWord = Pin<Box<dyn Future<Output = Option<String>> + Send>>;

/// One side's port forward.
struct Forward {
    side: Side,
    pod: String,
    port: u16,
    /// Until it is joined.
    forwarder: Option<Portforwarder>,
    stream: Option<DuplexStream>,
    /// Resolves with the server's error for the port, or `None` once the
    /// forwarder has stopped; polled only until then (see `word`).
    error: ErrorWord,
    word: Word,
}

impl Forward {
    /// Opens the port forward; `None` when cancelled first.
    async fn open(
        side: Side,
        to: Endpoint<'_>,
        cancel: &CancellationToken,
    ) -> Result<Option<Forward>, TunnelError> {
        let ports = [to.port];
        let opened = tokio::select! {
            o = to.pods.portforward(to.pod, &ports) => o,
            () = cancel.cancelled() => return Ok(None),
        };
        let mut forwarder = opened.map_err(|e| TunnelError::Open {
            side,
            pod: to.pod.to_string(),
            port: to.port,
            message: crate::cluster::kube_message(&e),
            source: Box::new(e),
        })?;
        // One port asked, so both are there.
        let stream = forwarder.take_stream(to.port);
        let error: ErrorWord = match forwarder.take_error(to.port) {
            Some(error) => Box::pin(error),
            None => Box::pin(std::future::ready(None)),
        };
        Ok(Some(Forward {
            side,
            pod: to.pod.to_string(),
            port: to.port,
            forwarder: Some(forwarder),
            stream,
            error,
            word: Word::Pending,
        }))
    }

    /// The port's stream (an empty, closed one if kube-rs gave none).
    fn take_stream(&mut self) -> DuplexStream {
        self.stream.take().unwrap_or_else(|| tokio::io::duplex(1).0)
    }

    /// Waits for the server's word on the port (at once if it has
    /// spoken). Cancel-safe: dropped before the word, it waits again.
    async fn listen(&mut self) -> Word {
        if self.word == Word::Pending {
            self.word = match self.error.as_mut().await {
                Some(message) => Word::Error(message),
                None => Word::Stopped,
            };
        }
        self.word.clone()
    }

    /// Ends the forward (its stream is closed by now, or is here) and
    /// waits for its forwarder to stop: `Err` with what went wrong, if
    /// anything did that the end of a session does not explain.
    async fn close(&mut self) -> Result<(), String> {
        drop(self.stream.take());
        if self.word == Word::Pending {
            let _ = tokio::time::timeout(CLOSE_GRACE, self.listen()).await;
        }
        let Some(forwarder) = self.forwarder.take() else {
            return Ok(());
        };
        if self.word != Word::Stopped {
            // Silent past the grace, or already failed: nothing more can
            // come through it.
            forwarder.abort();
        }
        let joined = forwarder.join().await;
        tracing::debug!(side = %self.side, pod = %self.pod, ?joined, word = ?self.word, "tunnel: forwarder stopped");
        match (&self.word, joined) {
            (Word::Error(message), _) => Err(message.clone()),
            (Word::Pending, _) => Err(format!(
                "the port forward did not close within {}s",
                CLOSE_GRACE.as_secs()
            )),
            (Word::Stopped, Ok(())) => Ok(()),
            (Word::Stopped, Err(e)) if closed_first(&e) => Ok(()),
            (Word::Stopped, Err(e)) => Err(chain(&e)),
        }
    }
}

/// kube-rs answers the server's close and then, once its stream is
/// dropped, sends its own close, which tungstenite refuses: what `join`
/// reports when the pod's side ended the port first, as at every end of
/// a session the pod closed.
fn closed_first(e: &(dyn std::error::Error + 'static)) -> bool {
    chain(e).contains("Sending after closing is not allowed")
}

/// An error and its sources, in one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
    use tokio::io::duplex;

    const GOT_IT: &[u8] = b"got it";

    /// A relay between two in-memory "pods": the relay's ends and the
    /// pods' ends of a sender and a receiver stream.
    fn pods() -> ((DuplexStream, DuplexStream), (DuplexStream, DuplexStream)) {
        (duplex(64 << 10), duplex(64 << 10))
    }

    async fn read_to_end(mut pod: DuplexStream) -> Vec<u8> {
        let mut got = Vec::new();
        let read = pod.read_to_end(&mut got);
        tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .expect("the relay closed this side")
            .expect("read");
        got
    }

    #[tokio::test]
    async fn copies_both_ways_and_closes_the_sender_once_the_receiver_closed() {
        let ((s_relay, mut s_pod), (r_relay, mut r_pod)) = pods();
        let moved = Moved::default();
        let cancel = CancellationToken::new();
        let relay = shuttle(s_relay, r_relay, &moved, std::future::pending(), &cancel);
        let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
        let pods = async {
            let mut got = vec![0u8; data.len()];
            let (sent, received) = tokio::join!(s_pod.write_all(&data), r_pod.read_exact(&mut got));
            sent.expect("sent");
            received.expect("received");
            assert!(
                got == data,
                "what the receiver read is what the sender wrote"
            );
            // The receiver answers, then closes: the end of a session.
            r_pod.write_all(GOT_IT).await.expect("answer");
            drop(r_pod);
            read_to_end(s_pod).await
        };
        let (first, heard) = tokio::join!(relay, pods);
        assert_eq!(first, First::Ended(Side::Receiver));
        assert_eq!(heard, GOT_IT, "the answer arrives before the close");
        assert_eq!(moved.to_receiver.load(Ordering::Relaxed), 3 << 20);
        assert_eq!(moved.to_sender.load(Ordering::Relaxed), GOT_IT.len() as u64);
    }

    #[tokio::test]
    async fn a_failed_side_ends_the_relay_and_the_other_side_sees_it_close() {
        let ((s_relay, _s_pod), (r_relay, r_pod)) = pods();
        let moved = Moved::default();
        let cancel = CancellationToken::new();
        let failed = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            (Side::Sender, "connection refused".to_string())
        };
        let relay = shuttle(s_relay, r_relay, &moved, failed, &cancel);
        let (first, heard) = tokio::join!(relay, read_to_end(r_pod));
        assert_eq!(
            first,
            First::Failed(Side::Sender, "connection refused".into())
        );
        assert!(heard.is_empty());
    }

    #[tokio::test]
    async fn a_sender_that_closes_closes_the_receiver_and_cancel_closes_both() {
        let ((s_relay, s_pod), (r_relay, r_pod)) = pods();
        let (moved, cancel) = (Moved::default(), CancellationToken::new());
        let relay = shuttle(s_relay, r_relay, &moved, std::future::pending(), &cancel);
        drop(s_pod);
        let (first, heard) = tokio::join!(relay, read_to_end(r_pod));
        assert_eq!((first, heard), (First::Ended(Side::Sender), Vec::new()));

        let ((s_relay, s_pod), (r_relay, r_pod)) = pods();
        let relay = shuttle(s_relay, r_relay, &moved, std::future::pending(), &cancel);
        cancel.cancel();
        let (first, _, _) = tokio::join!(relay, read_to_end(s_pod), read_to_end(r_pod));
        assert_eq!(first, First::Cancelled);
    }

    #[test]
    fn errors_name_the_side_and_pod_and_say_whether_to_retry() {
        let open = |code: u16| TunnelError::Open {
            side: Side::Receiver,
            pod: "volmig-x-receiver-1".into(),
            port: 7000,
            message: "pods \"volmig-x-receiver-1\" not found".into(),
            source: Box::new(kube::Error::Api(
                Status::failure("nope", "NotFound").with_code(code).boxed(),
            )),
        };
        let missing = open(404);
        assert!(!missing.is_retryable());
        assert_eq!(missing.side(), Side::Receiver);
        assert_eq!(
            missing.to_string(),
            "cannot forward port 7000 of the receiver pod volmig-x-receiver-1: \
             pods \"volmig-x-receiver-1\" not found"
        );
        assert!(open(503).is_retryable());
        let unreachable = TunnelError::Unreachable {
            side: Side::Sender,
            pod: "volmig-x-sender-1".into(),
            port: 7001,
            message: "error forwarding port 7001 to pod 1234, uid : connection refused".into(),
        };
        assert!(unreachable.is_retryable());
        assert!(unreachable
            .to_string()
            .starts_with("the sender pod volmig-x-sender-1 cannot be reached on port 7001: "));
    }

    #[test]
    fn the_close_race_is_told_by_its_words() {
        let race = std::io::Error::other("failed to send a WebSocket message: WebSocket protocol error: Sending after closing is not allowed");
        assert!(closed_first(&race));
        let other = std::io::Error::other(
            "failed to receive a WebSocket message: Connection reset without closing handshake",
        );
        assert!(!closed_first(&other));
    }
}
