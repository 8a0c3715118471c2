//! One port forward, spoken here rather than through kube-rs's
//! `Portforwarder`, which cuts what goes into the pod into 4 KiB messages:
//! a `GET .../pods/NAME/portforward?ports=P` upgraded to a WebSocket
//! (`kube::Client::connect`), subprotocol `v4.channel.k8s.io`.
//!
//! - Every binary message starts with its channel: 0 carries the port's
//!   data both ways, 1 the server's error for the port.
//! - The first message the server sends on each channel is the port, 2
//!   bytes little-endian.
//! - No half-close: a client that closes the WebSocket ends the port, and
//!   the server closes it once the port is done.
//!
//! What comes from the pod is read a message at a time, and the messages
//! already there are gathered into one of up to [`MESSAGE`] bytes, which
//! goes on to the other pod as one message (as it came, without a copy,
//! when it is large already). Pings are answered by tungstenite as the
//! WebSocket is read.

use std::future::poll_fn;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::{self, Either};
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use super::{Side, TunnelError};

/// The most data one message toward a pod carries.
pub(super) const MESSAGE: usize = 1 << 20;

/// A message from a pod at least this large goes on as it came: gathering
/// more would only copy it.
const LARGE: usize = 256 << 10;

/// How long the answer to a server's close may take to go out.
const ANSWER: Duration = Duration::from_secs(1);

const DATA: u8 = 0;
const ERROR: u8 = 1;

/// Opens the port forward to `port` of `pod`.
pub(super) async fn open(
    side: Side,
    pods: &Api<Pod>,
    pod: &str,
    port: u16,
) -> Result<Forward<impl AsyncRead + AsyncWrite + Unpin + Send + use<>>, TunnelError> {
    let failed = |e: kube::Error| TunnelError::Open {
        side,
        pod: pod.to_string(),
        port,
        message: crate::cluster::kube_message(&e),
        source: Box::new(e),
    };
    let request = kube::core::Request::new(pods.resource_url())
        .portforward(pod, &[port])
        .map_err(|e| failed(kube::Error::BuildRequest(e)))?;
    let client = pods.clone().into_client();
    let connection = client.connect(request).await.map_err(failed)?;
    Ok(Forward::new(side, pod, port, connection.into_stream()))
}

/// Data from a pod: one or more of its messages on channel 0, as one
/// message to send on (the channel byte, then the data).
#[derive(Debug)]
pub(super) struct Chunk(Bytes);

impl Chunk {
    /// The bytes of data.
    pub(super) fn len(&self) -> usize {
        self.0.len() - 1
    }
}

/// What came from a pod's side of the forward.
#[derive(Debug)]
pub(super) enum Heard {
    Data(Chunk),
    /// The server's error for the port: the port is done.
    Failed(String),
    /// The WebSocket ended: the server closed it, or it broke (see
    /// [`FromPod::fault`]).
    Ended,
}

/// One side's port forward: its WebSocket, split so that both
/// directions move at once.
pub(super) struct Forward<S> {
    pub(super) side: Side,
    pub(super) pod: String,
    pub(super) port: u16,
    pub(super) from_pod: FromPod<S>,
    pub(super) to_pod: ToPod<S>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Forward<S> {
    /// The forward over an open WebSocket.
    pub(super) fn new(side: Side, pod: &str, port: u16, ws: WebSocketStream<S>) -> Self {
        let (sink, stream) = ws.split();
        Forward {
            side,
            pod: pod.to_string(),
            port,
            from_pod: FromPod {
                stream,
                port,
                opened: [false; 2],
                held: None,
                ended: false,
                word: None,
                fault: None,
            },
            to_pod: ToPod { sink },
        }
    }

    /// Closes the WebSocket once what was sent on it has gone, and waits,
    /// `grace` at most, for the server to close it too (what the pod
    /// still sends is dropped: nobody is left to take it). `Err` with
    /// what went wrong, if anything did that the end of a session does
    /// not explain: the server's error for the port, a broken WebSocket,
    /// or no close within `grace`.
    pub(super) async fn close(&mut self, grace: Duration) -> Result<(), String> {
        let Forward {
            from_pod, to_pod, ..
        } = self;
        let mut in_time = false;
        let closing = async {
            let drained = pin!(from_pod.drain());
            // Sent while the server's side is read. A close that fails
            // tells nothing the reading does not.
            let sent = pin!(to_pod.sink.close());
            match future::select(drained, sent).await {
                Either::Left(((), sent)) => {
                    in_time = true;
                    // The server closed first: it gets the answer to its
                    // close if it still reads.
                    let _ = tokio::time::timeout(ANSWER, sent).await;
                }
                Either::Right((_, drained)) => {
                    drained.await;
                    in_time = true;
                }
            }
        };
        let _ = tokio::time::timeout(grace, closing).await;
        tracing::debug!(side = %self.side, pod = %self.pod, in_time, word = ?self.from_pod.word,
            fault = ?self.from_pod.fault, "tunnel: port forward closed");
        if let Some(word) = &self.from_pod.word {
            return Err(word.clone());
        }
        if let Some(fault) = &self.from_pod.fault {
            return Err(fault.clone());
        }
        match in_time {
            true => Ok(()),
            false => Err(format!(
                "the port forward did not close within {}s",
                grace.as_secs_f64()
            )),
        }
    }
}

/// The pod's side of a forward: what the server sends.
pub(super) struct FromPod<S> {
    stream: SplitStream<WebSocketStream<S>>,
    port: u16,
    /// Whether the server opened channel 0 and 1 (sent the port on it).
    opened: [bool; 2],
    /// What gathering read past the data, to hand over next.
    held: Option<Heard>,
    ended: bool,
    /// The server's error for the port, once it came.
    pub(super) word: Option<String>,
    /// Why the WebSocket broke, if it did.
    pub(super) fault: Option<String>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> FromPod<S> {
    /// The next data (all that is there, up to [`MESSAGE`] bytes), the
    /// server's error, or the end. Once ended, ended for good.
    pub(super) async fn next(&mut self) -> Heard {
        if let Some(held) = self.held.take() {
            return held;
        }
        let first = match poll_fn(|cx| self.poll_heard(cx)).await {
            Heard::Data(first) if first.len() < LARGE => first,
            other => return other,
        };
        let mut gathered: Option<BytesMut> = None;
        let mut len = first.len();
        // Only what has come already: waiting for more would hold back
        // what is here.
        while len < MESSAGE {
            let more = poll_fn(|cx| Poll::Ready(self.poll_heard(cx))).await;
            match more {
                Poll::Pending => break,
                Poll::Ready(Heard::Data(more)) if len + more.len() <= MESSAGE => {
                    let buf = gathered.get_or_insert_with(|| {
                        let mut buf = BytesMut::with_capacity(MESSAGE + 1);
                        buf.extend_from_slice(&first.0);
                        buf
                    });
                    buf.extend_from_slice(&more.0[1..]);
                    len += more.len();
                }
                Poll::Ready(other) => {
                    self.held = Some(other);
                    break;
                }
            }
        }
        Heard::Data(match gathered {
            Some(buf) => Chunk(buf.freeze()),
            None => first,
        })
    }

    /// Reads until the WebSocket ends, dropping the data.
    async fn drain(&mut self) {
        self.held = None;
        while !matches!(poll_fn(|cx| self.poll_heard(cx)).await, Heard::Ended) {}
    }

    /// The next message that means something: data, the server's error,
    /// or the end.
    fn poll_heard(&mut self, cx: &mut Context<'_>) -> Poll<Heard> {
        loop {
            if self.ended {
                return Poll::Ready(Heard::Ended);
            }
            let message = match self.stream.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(message) => message,
            };
            let data = match message {
                Some(Ok(Message::Binary(data))) => data,
                // Pings are answered by tungstenite; text is not v4's.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Text(_))) => continue,
                Some(Ok(Message::Frame(_))) => continue,
                Some(Ok(Message::Close(_)))
                | None
                | Some(Err(WsError::ConnectionClosed | WsError::AlreadyClosed)) => {
                    self.ended = true;
                    continue;
                }
                Some(Err(e)) => {
                    self.broke(e.to_string());
                    continue;
                }
            };
            if let Some(heard) = self.channel(data) {
                return Poll::Ready(heard);
            }
        }
    }

    /// What one binary message says, if anything.
    fn channel(&mut self, data: Bytes) -> Option<Heard> {
        let (&channel, body) = data.split_first()?;
        let opened = self.opened.get_mut(usize::from(channel))?;
        if !*opened {
            if body != self.port.to_le_bytes() {
                self.broke(format!(
                    "the server opened channel {channel} with {body:?}, not port {}",
                    self.port
                ));
                return None;
            }
            *opened = true;
            return None;
        }
        match channel {
            DATA if !body.is_empty() => Some(Heard::Data(Chunk(data))),
            // One error per port, as kubelet sends it.
            ERROR if self.word.is_none() => {
                let word = String::from_utf8_lossy(body).trim().to_string();
                self.word = Some(word.clone());
                Some(Heard::Failed(word))
            }
            _ => None,
        }
    }

    fn broke(&mut self, fault: String) {
        self.fault.get_or_insert(fault);
        self.ended = true;
    }
}

/// The client's side of a forward: what goes to the pod.
pub(super) struct ToPod<S> {
    sink: SplitSink<WebSocketStream<S>, Message>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> ToPod<S> {
    /// Sends `chunk` to the pod as one message.
    pub(super) async fn send(&mut self, chunk: Chunk) -> Result<(), WsError> {
        self.sink.send(Message::Binary(chunk.0)).await
    }
}
