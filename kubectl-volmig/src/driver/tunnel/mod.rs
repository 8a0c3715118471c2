//! The tunnel network path (issue 23): the sender's bytes go to its API
//! server, through this process, to the receiver's API server and into the
//! receiver pod, for clusters with no route between their pods.
//!
//! A `pods/portforward` can only dial into a pod, so both movers listen
//! (`mover receive --listen`, `mover send --listen`) and [`relay`] opens a
//! port forward to each ([`forward`]: our own client of the WebSocket
//! protocol, which sends large messages) and passes what comes from one
//! pod to the other, both ways at once, in messages of up to 1 MiB. The
//! movers still authenticate each other end to end (TLS 1.3, the sender
//! the client): the relay sees ciphertext only, and one that reaches the
//! wrong pod is refused at the handshake.
//!
//! Port forwarding (WebSocket `v4.channel.k8s.io`) has no half-close: a
//! stream ends when its pod closed the connection or the forward failed.
//! The mover protocol ends with its own frames, so when either stream ends
//! the relay ends the other one (what it had already read still reaches
//! it) and waits, [`CLOSE_GRACE`] at most, for both servers to close.

mod forward;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use forward::{Forward, FromPod, Heard, ToPod};

/// How long a port forward may take to close once the relay closed it
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
    let open = |side, to: &Endpoint<'_>| {
        let (pods, pod, port) = (to.pods.clone(), to.pod.to_string(), to.port);
        let cancel = cancel.clone();
        async move {
            tokio::select! {
                opened = forward::open(side, &pods, &pod, port) => opened.map(Some),
                () = cancel.cancelled() => Ok(None),
            }
        }
    };
    let Some(mut r) = open(Side::Receiver, &receiver).await? else {
        return Ok(end(Ending::Cancelled));
    };
    let mut s = match open(Side::Sender, &sender).await {
        Ok(Some(s)) => s,
        // The receiver's forward is only undone: how it closes is no news.
        Ok(None) => {
            let _ = r.close(CLOSE_GRACE).await;
            return Ok(end(Ending::Cancelled));
        }
        Err(e) => {
            let _ = r.close(CLOSE_GRACE).await;
            return Err(e);
        }
    };
    run(&mut s, &mut r, moved, &cancel, CLOSE_GRACE)
        .await
        .map(end)
}

/// Relays between two open forwards until one side ends, fails, or
/// `cancel`; then closes both, `grace` at most each, and says how it
/// ended.
async fn run<S, R>(
    s: &mut Forward<S>,
    r: &mut Forward<R>,
    moved: &Moved,
    cancel: &CancellationToken,
    grace: Duration,
) -> Result<Ending, TunnelError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    R: AsyncRead + AsyncWrite + Unpin,
{
    let first = shuttle(s, r, moved, cancel).await;
    tracing::debug!(?first, "tunnel: one side ended, closing both");
    let (s_closed, r_closed) = tokio::join!(s.close(grace), r.close(grace));
    // Only the side that ended first has news: the other was closed here.
    let (side, message) = match first {
        First::Cancelled => return Ok(Ending::Cancelled),
        First::Failed(side, message) => (side, message),
        First::Ended(side) => match (side, s_closed, r_closed) {
            (Side::Sender, Err(message), _) | (Side::Receiver, _, Err(message)) => (side, message),
            _ => return Ok(Ending::Closed(side)),
        },
    };
    // A side that failed before a byte came from it was never reached.
    let (pod, port, heard) = match side {
        Side::Sender => (&s.pod, s.port, moved.to_receiver.load(Ordering::Relaxed)),
        Side::Receiver => (&r.pod, r.port, moved.to_sender.load(Ordering::Relaxed)),
    };
    let pod = pod.clone();
    Err(match heard {
        0 => TunnelError::Unreachable {
            side,
            pod,
            port,
            message,
        },
        _ => TunnelError::Broken { side, pod, message },
    })
}

/// What ended the relaying.
#[derive(Debug, PartialEq, Eq)]
enum First {
    /// This side's WebSocket ended (the server closed it once its pod
    /// closed the connection, or it broke), or sending to it failed.
    Ended(Side),
    /// The server reported an error on this side's port.
    Failed(Side, String),
    Cancelled,
}

/// Passes data both ways until one side ends or fails, or `cancel`. What
/// was read from a side that ended has been sent on by then; what was on
/// its way to it may be dropped (nobody takes it any more).
async fn shuttle<S, R>(
    s: &mut Forward<S>,
    r: &mut Forward<R>,
    moved: &Moved,
    cancel: &CancellationToken,
) -> First
where
    S: AsyncRead + AsyncWrite + Unpin,
    R: AsyncRead + AsyncWrite + Unpin,
{
    let up = pump(&mut s.from_pod, &mut r.to_pod, &moved.to_receiver);
    let down = pump(&mut r.from_pod, &mut s.to_pod, &moved.to_sender);
    // A read that ends is the reading side's end; a send that fails is
    // the other side's.
    let seen = |from, to, pumped| match pumped {
        Pumped::Ended => First::Ended(from),
        Pumped::Refused => First::Ended(to),
        Pumped::Failed(message) => First::Failed(from, message),
    };
    tokio::select! {
        p = up => seen(Side::Sender, Side::Receiver, p),
        p = down => seen(Side::Receiver, Side::Sender, p),
        () = cancel.cancelled() => First::Cancelled,
    }
}

/// How one direction ended.
#[derive(Debug)]
enum Pumped {
    /// The side read from ended.
    Ended,
    /// Its server reported an error for the port.
    Failed(String),
    /// The side written to took no more (its WebSocket closed or broke).
    Refused,
}

/// Sends what comes from one pod to the other, each read (all that had
/// come, up to 1 MiB) as one message, counting what it sent.
async fn pump<F, T>(from: &mut FromPod<F>, to: &mut ToPod<T>, moved: &AtomicU64) -> Pumped
where
    F: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        match from.next().await {
            Heard::Data(chunk) => {
                let n = chunk.len() as u64;
                if let Err(e) = to.send(chunk).await {
                    tracing::debug!("tunnel: sending failed: {e}");
                    return Pumped::Refused;
                }
                moved.fetch_add(n, Ordering::Relaxed);
            }
            Heard::Failed(message) => return Pumped::Failed(message),
            Heard::Ended => return Pumped::Ended,
        }
    }
}
