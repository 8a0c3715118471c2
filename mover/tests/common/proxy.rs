//! A small TCP proxy for fault injection: forwards 127.0.0.1 connections to a target address,
//! counts the bytes it forwarded in each direction, and can cut every connection at once, cap
//! its rate (a slow link) or stop forwarding without closing anything (a black hole).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::*;

/// Largest chunk forwarded at once; keeps what the proxy holds (and what its count may run
/// ahead of the peer) small.
const CHUNK: usize = 64 * KIB;

/// State shared by the accept thread, the pump threads and the [`Proxy`] handle.
#[derive(Default)]
struct Shared {
    /// Bytes written to the target (client -> server).
    up: Arc<AtomicU64>,
    /// Bytes written back to the client (server -> client).
    down: Arc<AtomicU64>,
    /// Connections accepted so far.
    accepted: AtomicU64,
    /// Set by [`Proxy::cut`] (and on drop): no more forwarding, new connections are dropped.
    cut: AtomicBool,
    /// Every socket of every connection, so that a cut can shut them all down.
    sockets: Mutex<Vec<TcpStream>>,
    /// Set by [`Proxy::freeze`]: nothing more is read or forwarded, nothing is closed.
    frozen: AtomicBool,
    /// Bytes per second each direction may carry (0: no cap).
    rate: AtomicU64,
}

impl Shared {
    fn shutdown_all(&self) {
        for s in self.sockets.lock().unwrap().iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// A running proxy on 127.0.0.1 (ephemeral port) in front of `target`. Stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts listening; every accepted connection is forwarded to a new connection to `target`.
    pub fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy: bind 127.0.0.1:0");
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let shared = Arc::new(Shared::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (sh, st) = (shared.clone(), stop.clone());
        let acceptor = std::thread::spawn(move || accept_loop(listener, target, sh, st));
        Proxy {
            addr,
            shared,
            stop,
            acceptor: Some(acceptor),
        }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Bytes forwarded client -> server so far.
    pub fn up(&self) -> u64 {
        self.shared.up.load(SeqCst)
    }

    /// Bytes forwarded server -> client so far.
    pub fn down(&self) -> u64 {
        self.shared.down.load(SeqCst)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(SeqCst)
    }

    /// The client -> server counter itself (to watch it from another thread).
    pub fn up_counter(&self) -> Arc<AtomicU64> {
        self.shared.up.clone()
    }

    /// Cuts every connection now (both sockets shut down in both directions, so both peers see
    /// the connection drop) and refuses any later one.
    pub fn cut(&self) {
        self.shared.cut.store(true, SeqCst);
        self.shared.shutdown_all();
    }

    /// Stops forwarding without closing any connection, as a route that black-holes packets:
    /// the peers' own kernels still accept what fits in their buffers, then writes block.
    pub fn freeze(&self) {
        self.shared.frozen.store(true, SeqCst);
    }

    /// Caps each direction at `bytes_per_sec`, forwarded in small pieces (a tenth of a
    /// second's worth at most), as a slow link trickles.
    pub fn set_rate(&self, bytes_per_sec: u64) {
        self.shared.rate.store(bytes_per_sec, SeqCst);
    }

    /// Whether [`Proxy::cut`] was called.
    pub fn is_cut(&self) -> bool {
        self.shared.cut.load(SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        self.shared.cut.store(true, SeqCst);
        self.shared.shutdown_all();
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, SeqCst);
                if shared.cut.load(SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(target) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut socks = shared.sockets.lock().unwrap();
                    socks.push(client.try_clone().unwrap());
                    socks.push(server.try_clone().unwrap());
                }
                // A cut that raced with the registration above must still take effect.
                if shared.cut.load(SeqCst) {
                    shared.shutdown_all();
                }
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let sh = shared.clone();
                std::thread::spawn(move || pump(client, server, &sh, true));
                let sh = shared.clone();
                std::thread::spawn(move || pump(s2, c2, &sh, false));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Copies `from` to `to` in chunks of at most [`CHUNK`] bytes, counting what was written.
/// EOF is passed on as a half-close; an error (or a cut) shuts both sockets down completely.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, upstream: bool) {
    let counter = if upstream { &shared.up } else { &shared.down };
    let mut buf = vec![0u8; CHUNK];
    let start = Instant::now();
    let mut paced = 0u64;
    loop {
        if shared.cut.load(SeqCst) {
            break;
        }
        if shared.frozen.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let rate = shared.rate.load(SeqCst);
        let piece = match rate {
            0 => CHUNK,
            r => (r as usize / 10).clamp(1, CHUNK),
        };
        if rate > 0 {
            // Hold the pace over the whole connection: the next piece leaves when the
            // bytes so far have had their time.
            let due = Duration::from_secs_f64(paced as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        match from.read(&mut buf[..piece]) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                if shared.cut.load(SeqCst) || to.write_all(&buf[..n]).is_err() {
                    break;
                }
                counter.fetch_add(n as u64, SeqCst);
                paced += n as u64;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
