//! The relay between two in-memory port forwards, each with a fake
//! server (the API server and kubelet, as the sandbox emulates them) on
//! the other end of its WebSocket.

use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use kube::core::Status;
use tokio::io::{duplex, DuplexStream};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::forward::MESSAGE;
use super::*;

const GOT_IT: &[u8] = b"got it";
const S_PORT: u16 = 7001;
const R_PORT: u16 = 7000;
/// Short, for the tests that wait it out.
const GRACE: Duration = Duration::from_millis(300);

/// The server's end of a port forward.
struct Server(WebSocketStream<DuplexStream>);

/// What a server got from the relay before the WebSocket ended.
#[derive(Debug, Default)]
struct Got {
    data: Vec<u8>,
    /// The size of each data message.
    messages: Vec<usize>,
    pongs: usize,
    /// Whether the relay closed the WebSocket (rather than dropping it).
    closed: bool,
}

impl Server {
    async fn send(&mut self, channel: u8, data: &[u8]) {
        let mut message = BytesMut::with_capacity(data.len() + 1);
        message.put_u8(channel);
        message.put_slice(data);
        self.0
            .send(Message::Binary(message.freeze()))
            .await
            .expect("server send");
    }

    /// Sends `data` in messages of `size`.
    async fn data(&mut self, data: &[u8], size: usize) {
        for piece in data.chunks(size) {
            self.send(0, piece).await;
        }
    }

    /// Reads until the WebSocket ends, answering a close.
    async fn read(&mut self) -> Got {
        let mut got = Got::default();
        while let Some(Ok(message)) = self.0.next().await {
            match message {
                Message::Binary(data) => {
                    assert_eq!(data[0], 0, "data goes on channel 0");
                    got.data.extend_from_slice(&data[1..]);
                    got.messages.push(data.len() - 1);
                }
                Message::Pong(_) => got.pongs += 1,
                Message::Close(_) => got.closed = true,
                _ => {}
            }
        }
        got
    }

    /// Reads `len` bytes of data.
    async fn read_exact(&mut self, len: usize) -> Got {
        let mut got = Got::default();
        while got.data.len() < len {
            match self.0.next().await {
                Some(Ok(Message::Binary(data))) => {
                    got.data.extend_from_slice(&data[1..]);
                    got.messages.push(data.len() - 1);
                }
                Some(Ok(Message::Pong(_))) => got.pongs += 1,
                Some(Ok(_)) => {}
                other => panic!("the WebSocket ended early: {other:?}"),
            }
        }
        got
    }

    /// Closes the WebSocket, as the server does once the pod's
    /// connection closed, and waits for the relay's answer.
    async fn close(mut self) -> Got {
        self.0.close(None).await.expect("server close");
        self.read().await
    }
}

/// A forward to `port` of a pod of `side`, and its server, which has
/// opened both channels.
async fn forward(side: Side, port: u16) -> (Forward<DuplexStream>, Server) {
    forward_opened_as(side, port, port).await
}

/// As [`forward`], the server naming `announced` as the port.
async fn forward_opened_as(
    side: Side,
    port: u16,
    announced: u16,
) -> (Forward<DuplexStream>, Server) {
    let (client, server) = duplex(8 << 20);
    let client = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
    let mut server = Server(WebSocketStream::from_raw_socket(server, Role::Server, None).await);
    server.send(0, &announced.to_le_bytes()).await;
    server.send(1, &announced.to_le_bytes()).await;
    let pod = format!("volmig-x-{side}-1");
    (Forward::new(side, &pod, port, client), server)
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[tokio::test]
async fn copies_both_ways_in_large_messages_and_closes_the_sender_once_the_receiver_closed() {
    let (mut s, mut s_pod) = forward(Side::Sender, S_PORT).await;
    let (mut r, mut r_pod) = forward(Side::Receiver, R_PORT).await;
    let (moved, cancel) = (Moved::default(), CancellationToken::new());
    let data = pattern(3 << 20);
    // The sender's stream as kube-rs would have sent it on: 4 KiB
    // messages, all there before the relay reads.
    s_pod.data(&data, 4 << 10).await;
    // Their own task: the relay's reads are then its own to budget.
    let pods = tokio::spawn(async move {
        let got = r_pod.read_exact(data.len()).await;
        assert!(got.data == data, "the receiver got what the sender sent");
        assert_eq!(
            got.messages, [MESSAGE; 3],
            "what had come went on in messages of 1 MiB"
        );
        // A ping on the way is answered, not relayed; then the receiver
        // answers and closes: the end of a session.
        r_pod
            .0
            .send(Message::Ping(Bytes::new()))
            .await
            .expect("ping");
        r_pod.send(0, GOT_IT).await;
        let r_got = r_pod.close().await;
        (s_pod.read().await, r_got)
    });
    let ending = run(&mut s, &mut r, &moved, &cancel, GRACE).await;
    let (s_got, r_got) = pods.await.expect("the pods");
    assert_eq!(ending.expect("the relay"), Ending::Closed(Side::Receiver));
    assert_eq!(s_got.data, GOT_IT, "the answer arrives before the close");
    assert!(s_got.closed, "the sender's forward was closed");
    assert_eq!(r_got.pongs, 1);
    assert_eq!(moved.to_receiver.load(Ordering::Relaxed), 3 << 20);
    assert_eq!(moved.to_sender.load(Ordering::Relaxed), GOT_IT.len() as u64);
}

#[tokio::test]
async fn a_large_message_goes_on_as_it_came_and_data_as_it_comes() {
    let (mut s, mut s_pod) = forward(Side::Sender, S_PORT).await;
    let (mut r, mut r_pod) = forward(Side::Receiver, R_PORT).await;
    let (moved, cancel) = (Moved::default(), CancellationToken::new());
    let relay = run(&mut s, &mut r, &moved, &cancel, GRACE);
    let pods = async {
        let big = pattern(600 << 10);
        s_pod.data(&big, big.len()).await;
        s_pod.data(&big[..10], 10).await;
        let got = r_pod.read_exact(big.len()).await;
        assert_eq!(got.messages, [big.len()]);
        // A small message on its own is not held back for more.
        let got = r_pod.read_exact(10).await;
        assert_eq!(got.messages, [10]);
        s_pod.close().await;
        r_pod.read().await
    };
    let (ending, r_got) = tokio::join!(relay, pods);
    assert_eq!(ending.expect("the relay"), Ending::Closed(Side::Sender));
    assert!(r_got.closed && r_got.data.is_empty());
}

#[tokio::test]
async fn a_port_the_server_could_not_reach_fails_that_side_and_closes_the_other() {
    let (mut s, mut s_pod) = forward(Side::Sender, S_PORT).await;
    let (mut r, mut r_pod) = forward(Side::Receiver, R_PORT).await;
    let (moved, cancel) = (Moved::default(), CancellationToken::new());
    let refused = "error forwarding port 7001 to pod 1234, uid : connection refused";
    s_pod.send(1, refused.as_bytes()).await;
    let relay = run(&mut s, &mut r, &moved, &cancel, GRACE);
    let (failed, _, r_got) = tokio::join!(relay, s_pod.close(), r_pod.read());
    match failed {
        Err(
            e @ TunnelError::Unreachable {
                side: Side::Sender,
                port: S_PORT,
                ..
            },
        ) => {
            assert!(e.is_retryable());
            assert_eq!(
                e.to_string(),
                format!(
                    "the sender pod volmig-x-sender-1 cannot be reached on port 7001: {refused}"
                )
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(r_got.closed && r_got.data.is_empty());
}

#[tokio::test]
async fn a_forward_that_breaks_after_data_is_broken_and_one_that_never_opened_unreachable() {
    let (mut s, mut s_pod) = forward(Side::Sender, S_PORT).await;
    let (mut r, mut r_pod) = forward(Side::Receiver, R_PORT).await;
    let (moved, cancel) = (Moved::default(), CancellationToken::new());
    s_pod.send(0, b"hello").await;
    let relay = run(&mut s, &mut r, &moved, &cancel, GRACE);
    let pods = async {
        r_pod.read_exact(5).await;
        // The connection to the sender's API server drops.
        drop(s_pod);
        r_pod.read().await
    };
    let (broken, r_got) = tokio::join!(relay, pods);
    match broken {
        Err(TunnelError::Broken {
            side: Side::Sender,
            message,
            ..
        }) => assert!(message.contains("closing handshake"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert!(r_got.closed);

    // A server that names another port: not the forward asked for.
    let (mut s, _s_pod) = forward(Side::Sender, S_PORT).await;
    let (mut r, _r_pod) = forward_opened_as(Side::Receiver, R_PORT, 7002).await;
    let moved = Moved::default();
    match run(&mut s, &mut r, &moved, &cancel, GRACE).await {
        Err(TunnelError::Unreachable {
            side: Side::Receiver,
            message,
            ..
        }) => assert!(message.contains("not port 7000"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_sender_that_closes_closes_the_receiver_and_cancel_closes_both() {
    let (mut s, s_pod) = forward(Side::Sender, S_PORT).await;
    let (mut r, mut r_pod) = forward(Side::Receiver, R_PORT).await;
    let (moved, cancel) = (Moved::default(), CancellationToken::new());
    let relay = run(&mut s, &mut r, &moved, &cancel, GRACE);
    let (ending, _, r_got) = tokio::join!(relay, s_pod.close(), r_pod.read());
    assert_eq!(ending.expect("the relay"), Ending::Closed(Side::Sender));
    assert!(r_got.closed && r_got.data.is_empty());

    let (mut s, mut s_pod) = forward(Side::Sender, S_PORT).await;
    let (mut r, mut r_pod) = forward(Side::Receiver, R_PORT).await;
    let relay = run(&mut s, &mut r, &moved, &cancel, GRACE);
    cancel.cancel();
    let (ending, s_got, r_got) = tokio::join!(relay, s_pod.read(), r_pod.read());
    assert_eq!(ending.expect("the relay"), Ending::Cancelled);
    assert!(s_got.closed && r_got.closed);
}

#[tokio::test]
async fn a_server_that_never_closes_is_given_up_on_after_the_grace() {
    let (mut s, s_pod) = forward(Side::Sender, S_PORT).await;
    // Never read: the relay's close is never answered.
    let (mut r, _r_pod) = forward(Side::Receiver, R_PORT).await;
    let (moved, cancel) = (Moved::default(), CancellationToken::new());
    let started = Instant::now();
    let relay = run(&mut s, &mut r, &moved, &cancel, GRACE);
    let (ending, _) = tokio::join!(relay, s_pod.close());
    // The receiver was only closed: how it went is no news.
    assert_eq!(ending.expect("the relay"), Ending::Closed(Side::Sender));
    assert!(started.elapsed() < GRACE * 5, "{:?}", started.elapsed());
    assert_eq!(
        r.close(GRACE).await,
        Err("the port forward did not close within 0.3s".into())
    );
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
