//! One upgraded port-forward connection: the channels of apimachinery's
//! `wsstream.Conn` over a WebSocket, and per port the copy containerd's
//! CRI plugin runs between the data channel and a connection to the pod.
//!
//! - For port `i` of the request, channel `2i` carries data both ways and
//!   `2i+1` errors, server to client; the first frame the server writes on
//!   each is the port as 2 bytes little-endian (kubelet's
//!   `handleWebSocketStreams`).
//! - Every WebSocket message starts with its channel byte (binary
//!   protocols) or the channel's digit followed by base64
//!   (`v4.base64.channel.k8s.io`). Frames on the error channels, or on
//!   channels the request has not, are dropped, as `wsstream` drops them.
//! - A port's connection is dialled when the WebSocket opens; a refused
//!   one is reported on its error channel (`error forwarding port P to pod
//!   ...`) and the port is done.
//! - When either direction of a port ends, the other gets one second to
//!   end too, then the pod connection closes (containerd's
//!   `portForward`); once every port is done, the server closes the
//!   WebSocket. The client closing the WebSocket ends every port's input
//!   (v4 has no half-close).
//!
//! Data moves in frames of up to [`FRAME`] bytes, read straight into the
//! buffer that is sent.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use base64::prelude::{Engine as _, BASE64_STANDARD};
use bytes::{BufMut, Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

/// The most data one message from the pod carries.
pub const FRAME: usize = 1 << 20;

/// How long one direction of a port waits for the other once it ended.
const GRACE: Duration = Duration::from_secs(1);

/// What a port-forward connection fails with; logged, since the client
/// has its answer (the 101) already.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("websocket: {0}")]
    WebSocket(#[from] tungstenite::Error),
    #[error("connection to the pod: {0}")]
    Pod(#[from] std::io::Error),
}

/// How channel frames are written, by subprotocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// `v4.channel.k8s.io` (and no subprotocol): a channel byte, then the
    /// data.
    Binary,
    /// `v4.base64.channel.k8s.io`: text, the channel's digit then base64.
    Base64,
}

/// Where the ports go.
#[derive(Debug, Clone)]
pub struct Target {
    /// The pod's IP: its containers listen there.
    pub ip: IpAddr,
    pub ports: Vec<u16>,
    /// How the error channel names the pod (its sandbox: the pod's uid).
    pub pod: String,
}

/// Runs the port forward over the upgraded connection `io` until every
/// port is done, the client goes, or `closed` turns true (the sandbox
/// stops).
pub async fn run<S>(io: S, codec: Codec, target: Target, closed: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let config = WebSocketConfig::default()
        .max_message_size(Some(16 * FRAME))
        .max_frame_size(Some(16 * FRAME));
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
    let (sink, stream) = ws.split();
    let (to_client, outgoing) = mpsc::channel::<Bytes>(4);
    let writer = tokio::spawn(write_frames(sink, outgoing, codec));
    let mut inputs = Vec::with_capacity(target.ports.len());
    let mut ports = JoinSet::new();
    let headers = target.ports.iter().enumerate().flat_map(|(i, port)| {
        let ch = (2 * i) as u8;
        [
            frame(ch, &port.to_le_bytes()),
            frame(ch + 1, &port.to_le_bytes()),
        ]
    });
    for header in headers {
        if to_client.send(header).await.is_err() {
            return;
        }
    }
    for (i, port) in target.ports.iter().copied().enumerate() {
        let ch = (2 * i) as u8;
        match TcpStream::connect(SocketAddr::new(target.ip, port)).await {
            Ok(conn) => {
                let (input, from_client) = mpsc::channel::<Bytes>(4);
                inputs.push(Some(input));
                ports.spawn(forward_port(ch, conn, from_client, to_client.clone()));
            }
            Err(e) => {
                inputs.push(None);
                let message = format!(
                    "error forwarding port {port} to pod {}, uid : failed to connect to {}:{port} in the pod's network: {e}",
                    target.pod, target.ip
                );
                let _ = to_client.send(frame(ch + 1, message.as_bytes())).await;
            }
        }
    }
    // The ports' tasks hold the only senders now: the writer closes the
    // WebSocket once they are all done.
    drop(to_client);
    let reading = read_frames(stream, inputs, codec);
    let all_done = async move { while ports.join_next().await.is_some() {} };
    tokio::pin!(reading, all_done);
    tokio::select! {
        () = &mut reading => {
            // The client is gone: each port ends within its grace.
            (&mut all_done).await;
        }
        () = &mut all_done => {}
        () = until_closed(closed) => {
            writer.abort();
            return;
        }
    }
    if let Ok(Err(e)) = writer.await {
        tracing::debug!("port forward to {}: {e}", target.pod);
    }
}

/// Resolves once the store closes (or is gone).
async fn until_closed(mut closed: watch::Receiver<bool>) {
    let _ = closed.wait_for(|c| *c).await;
}

/// A frame of channel `ch`: its byte, then `data`.
fn frame(ch: u8, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 1);
    out.put_u8(ch);
    out.put_slice(data);
    out.freeze()
}

/// Sends the frames the ports produce, then closes the WebSocket.
async fn write_frames<S>(
    mut sink: futures::stream::SplitSink<WebSocketStream<S>, Message>,
    mut outgoing: mpsc::Receiver<Bytes>,
    codec: Codec,
) -> Result<(), TunnelError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(frame) = outgoing.recv().await {
        let message = match codec {
            Codec::Binary => Message::Binary(frame),
            Codec::Base64 => {
                let digit = char::from(b'0' + frame[0]);
                Message::text(format!("{digit}{}", BASE64_STANDARD.encode(&frame[1..])))
            }
        };
        sink.send(message).await?;
    }
    sink.close().await?;
    Ok(())
}

/// Hands what the client sends on each data channel to its port, until
/// the client closes the WebSocket or it fails; dropping `inputs` then
/// ends every port's input.
async fn read_frames<S>(
    mut stream: futures::stream::SplitStream<WebSocketStream<S>>,
    mut inputs: Vec<Option<mpsc::Sender<Bytes>>>,
    codec: Codec,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(Ok(message)) = stream.next().await {
        let (ch, data) = match (codec, message) {
            (Codec::Binary, Message::Binary(mut data)) if !data.is_empty() => {
                let ch = data.split_to(1)[0];
                (ch, data)
            }
            (Codec::Base64, Message::Text(text)) if !text.is_empty() => {
                let text = text.as_str();
                let ch = text.as_bytes()[0].wrapping_sub(b'0');
                match BASE64_STANDARD.decode(&text[1..]) {
                    Ok(data) => (ch, Bytes::from(data)),
                    Err(e) => {
                        tracing::debug!("port forward: channel {ch}: {e}");
                        continue;
                    }
                }
            }
            (_, Message::Close(_)) => break,
            _ => continue,
        };
        let port = usize::from(ch / 2);
        if ch % 2 != 0 || data.is_empty() {
            continue;
        }
        let Some(slot) = inputs.get_mut(port) else {
            continue;
        };
        if let Some(input) = slot {
            if input.send(data).await.is_err() {
                // That port is done: later data for it is dropped.
                *slot = None;
            }
        }
    }
}

/// One port: the client's data to the pod, the pod's data to the client
/// on channel `ch`. When one direction ends the other has [`GRACE`] to
/// end, then the connection closes.
async fn forward_port(
    ch: u8,
    conn: TcpStream,
    mut from_client: mpsc::Receiver<Bytes>,
    to_client: mpsc::Sender<Bytes>,
) {
    let _ = conn.set_nodelay(true);
    let (mut reader, mut writer) = conn.into_split();
    let upstream = async move {
        while let Some(data) = from_client.recv().await {
            if writer.write_all(&data).await.is_err() {
                break;
            }
        }
        writer
    };
    let downstream = async move {
        let mut buf = BytesMut::with_capacity(FRAME + 1);
        loop {
            buf.reserve(FRAME + 1);
            buf.put_u8(ch);
            match (&mut reader).take(FRAME as u64).read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if to_client.send(buf.split().freeze()).await.is_err() {
                break;
            }
        }
        reader
    };
    tokio::pin!(upstream, downstream);
    // Both halves are dropped (the connection closed) when this returns.
    tokio::select! {
        _ = &mut upstream => { let _ = tokio::time::timeout(GRACE, &mut downstream).await; }
        _ = &mut downstream => { let _ = tokio::time::timeout(GRACE, &mut upstream).await; }
    }
}
