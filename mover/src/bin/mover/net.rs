//! The networked subcommands: `send`, `receive`, and `keygen` for the key
//! material that authenticates them.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mover::protocol::{ProtocolError, SessionOptions};
use mover::session::receiver::{receive, ReceiverConfig};
use mover::session::sender::{send, SenderConfig};
use mover::session::{wipe, Removed, SessionError};
use mover::stats::Summary;
use mover::tls::{self, Identity, KeyMaterial, Role, TlsError};
use rustls::ClientConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::client;
use tokio_util::sync::CancellationToken;

use crate::args::{check_attempt, ConnectionArgs, OutputArgs};
use crate::output::{finish, finish_wiped, progress_sink};

/// How `send` reaches its receiver.
pub enum Link {
    /// Connect to the receiver at `to`, trying again for `retry` while it
    /// is not reachable.
    Dial { to: String, retry: Duration },
    /// Listen on `addr` and take the first connection that authenticates as
    /// the receiver (the tunnel: a port forward can only dial into a pod).
    /// Only the TCP direction flips: the sender stays the TLS client.
    Listen {
        addr: SocketAddr,
        /// How long to wait for that connection; `None` waits until a signal.
        accept_timeout: Option<Duration>,
        addr_file: Option<PathBuf>,
    },
}

/// What `send` needs besides the connection.
pub struct SendJob {
    pub link: Link,
    pub root: PathBuf,
    pub options: SessionOptions,
    pub bwlimit: Option<u64>,
    pub zero_tail: bool,
}

/// `mover keygen`: per-operation key material into `out`.
pub fn keygen(out: &Path, operation_id: &str, valid_for: Duration) -> u8 {
    let written = KeyMaterial::generate(operation_id, valid_for).and_then(|m| m.write(out));
    match written {
        Ok(()) => {
            let secs = valid_for.as_secs();
            let valid = match secs {
                s if s % 86400 == 0 => format!("{}d", s / 86400),
                s if s % 3600 == 0 => format!("{}h", s / 3600),
                s if s % 60 == 0 => format!("{}m", s / 60),
                s => format!("{s}s"),
            };
            say!(
                "mover: key material for operation {operation_id} in {} (valid for {valid}); \
                 give the sender and the receiver --tls-dir with it",
                out.display(),
            );
            0
        }
        Err(e) => {
            say!("mover: error: {e}");
            e.exit_code() as u8
        }
    }
}

/// Loads this side's identity when TLS is on, and settles the operation id:
/// the material's, which an explicit `--operation-id` must agree with.
fn identity(
    conn: &ConnectionArgs,
    role: Role,
    operation_id: &mut Option<String>,
) -> Result<Option<Identity>, SessionError> {
    let Some(dir) = &conn.tls_dir else {
        return Ok(None);
    };
    let id = Identity::load(dir, role)?;
    match operation_id {
        Some(given) if *given != id.operation_id => {
            return Err(SessionError::Usage(format!(
                "--operation-id {given} but the key material in {} is for operation {}",
                dir.display(),
                id.operation_id
            )));
        }
        _ => *operation_id = Some(id.operation_id.clone()),
    }
    Ok(Some(id))
}

pub async fn run_send(
    mut job: SendJob,
    conn: ConnectionArgs,
    output: OutputArgs,
    cancel: CancellationToken,
) -> u8 {
    let identity = identity(&conn, Role::Sender, &mut job.options.operation_id)
        .and_then(|id| check_attempt(&job.options).map(|()| id));
    let identity = match identity {
        Ok(id) => id,
        Err(e) => return finish(Err(e), &output),
    };
    // A missing source is the user's to fix: say so before touching the network.
    let block = mover::block::kind_of(&job.root).is_some();
    if let Err(e) = std::fs::read_dir(&job.root)
        .map(|_| ())
        .or_else(|e| match block {
            true => Ok(()),
            false => Err(e),
        })
    {
        let err = SessionError::local(format!("source {}", job.root.display()), e);
        return finish(Err(err), &output);
    }
    let client = match identity.map(|id| id.client_config()).transpose() {
        Ok(c) => c,
        Err(e) => return finish(Err(e.into()), &output),
    };
    let cfg = SenderConfig {
        root: job.root,
        options: job.options,
        bwlimit: job.bwlimit,
        progress: progress_sink(output.progress),
        timeout: conn.timeout(),
        cancel: cancel.clone(),
        zero_tail: job.zero_tail,
    };
    let connected = tokio::select! {
        c = establish(job.link, client, &conn, output.quiet) => c,
        () = cancel.cancelled() => return finish(Err(SessionError::Interrupted), &output),
    };
    match connected {
        Err(e) => finish(Err(e), &output),
        Ok((Incoming::Plain(stream), _)) => finish(send(stream, cfg).await, &output),
        Ok((Incoming::Tls(stream), peer)) => {
            let result = send(*stream, cfg).await;
            finish(late_refusal(result, &peer, Role::Sender), &output)
        }
    }
}

/// The sender's connection to its receiver, and the receiver's address:
/// dialled or accepted as `link` says, then authenticated with `tls` (the
/// sender is the TLS client either way).
async fn establish(
    link: Link,
    tls: Option<Arc<ClientConfig>>,
    conn: &ConnectionArgs,
    quiet: bool,
) -> Result<(Incoming<SenderTls>, String), SessionError> {
    let timeout = conn.handshake_timeout();
    match link {
        Link::Dial { to, retry } => {
            let stream = connect(&to, retry)
                .await
                .map_err(|e| connection_error(format!("cannot connect to {to}"), e))?;
            tune(&stream, conn.timeout());
            let Some(config) = tls else {
                return Ok((Incoming::Plain(stream), to));
            };
            let stream = tls::connect(config, stream, &to, timeout).await?;
            Ok((Incoming::Tls(Box::new(stream)), to))
        }
        Link::Listen {
            addr,
            accept_timeout,
            addr_file,
        } => {
            let listener = bind(addr).await?;
            announce(&listener, addr, tls.is_some(), addr_file.as_deref())?;
            let handshake = tls.map(|config| {
                move |stream: TcpStream, peer: String| {
                    let config = config.clone();
                    async move { tls::connect(config, stream, &peer, timeout).await }
                }
            });
            let mut handshakes = JoinSet::new();
            let next = next_incoming(
                &listener,
                handshake.as_ref(),
                &mut handshakes,
                conn.timeout(),
            );
            let next = match accept_timeout {
                None => next.await,
                Some(limit) => tokio::time::timeout(limit, next).await.unwrap_or_else(|_| {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "no receiver connected within {}s (--accept-timeout)",
                            limit.as_secs()
                        ),
                    ))
                }),
            };
            // Dropping the listener and the handshakes still running closes
            // the port: one session per sender.
            let (incoming, peer) =
                next.map_err(|e| connection_error(format!("listening on {addr}"), e))?;
            if !quiet {
                let how = match incoming {
                    Incoming::Plain(_) => "session",
                    Incoming::Tls(_) => "authenticated session",
                };
                say!("mover: {how} from {peer}");
            }
            Ok((incoming, peer))
        }
    }
}

/// A connection that could not be made (or kept), as the session's error:
/// exit 10, retryable.
fn connection_error(what: String, e: std::io::Error) -> SessionError {
    SessionError::Protocol(std::io::Error::new(e.kind(), format!("{what}: {e}")).into())
}

/// Binds the port a side listens on.
async fn bind(listen: SocketAddr) -> Result<TcpListener, SessionError> {
    TcpListener::bind(listen)
        .await
        .map_err(|e| connection_error(format!("cannot listen on {listen}"), e))
}

/// Says that this side listens, in the line `kubectl volmig` waits for
/// (`mover: listening on ADDR (...)`, even with `-q`), and writes the
/// address to `addr_file`.
fn announce(
    listener: &TcpListener,
    asked: SocketAddr,
    tls: bool,
    addr_file: Option<&Path>,
) -> Result<(), SessionError> {
    let addr = listener.local_addr().unwrap_or(asked);
    say!(
        "mover: listening on {addr} ({})",
        if tls {
            "TLS 1.3, peer certificate required"
        } else {
            "plain TCP, --insecure"
        }
    );
    match addr_file {
        Some(path) => write_addr_file(path, addr)
            .map_err(|e| SessionError::local(format!("writing {}", path.display()), e)),
        None => Ok(()),
    }
}

/// Socket options for a session's connection: no Nagle delay, and, with an
/// idle timeout, keepalive probes while the link is quiet, so a peer that
/// vanished without a word (a node lost, a black-holed route) is found by
/// the kernel too. `TCP_USER_TIMEOUT` is not set: Linux applies it to
/// zero-window probes, so it would cut a live peer whose disk is slower than
/// the link. A connection that stops moving bytes (a dead peer with data in
/// flight, or a proxy that stops forwarding but still acknowledges) is the
/// session's own idle timeout, judged on bytes.
fn tune(stream: &TcpStream, timeout: Option<Duration>) {
    use rustix::net::sockopt;
    let _ = stream.set_nodelay(true);
    let Some(limit) = timeout else { return };
    let secs = |d: Duration| Duration::from_secs(d.as_secs().max(1));
    // Idle a quarter of the limit, then four probes an eighth apart: a dead
    // peer is declared after three quarters of it.
    let _ = sockopt::set_socket_keepalive(stream, true);
    let _ = sockopt::set_tcp_keepidle(stream, secs(limit / 4));
    let _ = sockopt::set_tcp_keepintvl(stream, secs(limit / 8));
    let _ = sockopt::set_tcp_keepcnt(stream, 4);
}

/// Connects to `to`, trying again every half second for `retry` while it
/// fails (refused, unreachable): the receiver may not be reachable yet.
async fn connect(to: &str, retry: Duration) -> std::io::Result<TcpStream> {
    // The release binary links glibc statically and runs in an image of
    // nothing else: no NSS, so no name lookup. kubectl volmig passes the
    // receiver's Service IP.
    if cfg!(target_feature = "crt-static") && to.parse::<std::net::SocketAddr>().is_err() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "this static mover does not resolve host names: give the receiver as IP:PORT",
        ));
    }
    let deadline = tokio::time::Instant::now() + retry;
    loop {
        match TcpStream::connect(to).await {
            Ok(stream) => return Ok(stream),
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// What `receive` needs besides the connection.
pub struct ReceiveJob {
    pub listen: SocketAddr,
    pub keep_serving: bool,
    pub addr_file: Option<PathBuf>,
    /// Empty the destination before listening (`--wipe`).
    pub wipe: bool,
    pub cfg: ReceiverConfig,
}

pub async fn run_receive(
    mut job: ReceiveJob,
    conn: ConnectionArgs,
    output: OutputArgs,
    cancel: CancellationToken,
) -> u8 {
    let tls = match identity(&conn, Role::Receiver, &mut job.cfg.operation_id).and_then(|id| {
        id.map(|id| id.server_config())
            .transpose()
            .map_err(Into::into)
    }) {
        Ok(tls) => tls,
        Err(e) => return finish(Err(e), &output),
    };
    let listen = job.listen;
    let listener = match bind(listen).await {
        Ok(l) => l,
        Err(e) => return finish(Err(e), &output),
    };
    // Before the receiver says it listens (what the plugin waits for to
    // start the sender), so no session can begin before the wipe ends, and
    // only once: a later session of --keep-serving finds what the ones
    // before it wrote.
    let mut wiped = None;
    if job.wipe {
        match wipe_destination(&job.cfg.root, &cancel).await {
            Ok(removed) => wiped = Some(removed),
            Err(e) => return finish(Err(e), &output),
        }
    }
    if let Err(e) = announce(&listener, listen, tls.is_some(), job.addr_file.as_deref()) {
        return finish(Err(e), &output);
    }
    let mut cfg = job.cfg;
    cfg.progress = progress_sink(output.progress);
    cfg.timeout = conn.timeout();
    cfg.cancel = cancel.clone();
    let timeout = conn.handshake_timeout();
    let handshake = tls.map(|config| {
        move |stream: TcpStream, peer: String| {
            let config = config.clone();
            async move { tls::accept(config, stream, &peer, timeout).await }
        }
    });
    let mut handshakes = JoinSet::new();
    loop {
        let next = tokio::select! {
            n = next_incoming(&listener, handshake.as_ref(), &mut handshakes, conn.timeout()) => n,
            () = cancel.cancelled() => {
                return finish_wiped(Err(SessionError::Interrupted), &output, wiped.take());
            }
        };
        let result = match next {
            Err(e) => {
                let err = SessionError::Protocol(e.into());
                let code = finish_wiped(Err(err), &output, wiped.take());
                if job.keep_serving {
                    continue;
                }
                return code;
            }
            Ok((Incoming::Plain(stream), peer)) => {
                if !output.quiet {
                    say!("mover: session from {peer}");
                }
                receive(stream, cfg.clone()).await
            }
            Ok((Incoming::Tls(stream), peer)) => {
                if !output.quiet {
                    say!("mover: authenticated session from {peer}");
                }
                late_refusal(receive(*stream, cfg.clone()).await, &peer, Role::Receiver)
            }
        };
        let code = finish_wiped(result, &output, wiped.take());
        if !job.keep_serving {
            return code;
        }
        // Serving stops on a signal even when the last session completed.
        if cancel.is_cancelled() {
            return 20;
        }
    }
}

/// `receive --wipe`: empties the destination (on a blocking thread; a
/// signal stops it between two entries) and says what it removed.
async fn wipe_destination(
    root: &Path,
    cancel: &CancellationToken,
) -> Result<Removed, SessionError> {
    let (root, stop) = (root.to_path_buf(), cancel.clone());
    let wiped = tokio::task::spawn_blocking(move || wipe(&root, &stop))
        .await
        .map_err(|e| SessionError::Internal(format!("the wipe stopped: {e}")))??;
    say!(
        "mover: wiped the destination: {} entries, {} bytes",
        wiped.entries,
        wiped.bytes
    );
    Ok(wiped)
}

/// TLS handshakes in progress at most; a connection beyond them is closed.
const MAX_HANDSHAKES: usize = 16;

/// The sender's side of a TLS connection.
type SenderTls = client::TlsStream<tls::Buffered<TcpStream>>;

/// A connection ready for a session: plain (`--insecure`), or `T`, the
/// stream of a TLS handshake that succeeded.
enum Incoming<T> {
    Plain(TcpStream),
    Tls(Box<T>),
}

type Handshakes<T> = JoinSet<(String, Result<T, TlsError>)>;

/// The next connection that may have a session, on either side's listener:
/// each accepted connection goes through `handshake` (the receiver's TLS
/// accept, or a listening sender's TLS connect), or none with `--insecure`.
/// Handshakes run side by side, so a client that connects and says nothing
/// cannot hold a listener while its real peer waits behind it. Whoever
/// cannot prove to be this operation's peer never reaches a session: the
/// refusal is logged and the wait goes on.
async fn next_incoming<T, H, F>(
    listener: &TcpListener,
    handshake: Option<&H>,
    handshakes: &mut Handshakes<T>,
    idle: Option<Duration>,
) -> std::io::Result<(Incoming<T>, String)>
where
    T: Send + 'static,
    H: Fn(TcpStream, String) -> F,
    F: Future<Output = Result<T, TlsError>> + Send + 'static,
{
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = accepted?;
                tune(&stream, idle);
                let peer = peer.to_string();
                let Some(handshake) = handshake else {
                    return Ok((Incoming::Plain(stream), peer));
                };
                if handshakes.len() >= MAX_HANDSHAKES {
                    say!(
                        "mover: refused a connection from {peer}: \
                         {MAX_HANDSHAKES} handshakes already in progress"
                    );
                    continue;
                }
                let pending = handshake(stream, peer.clone());
                handshakes.spawn(async move { (peer, pending.await) });
            }
            Some(done) = handshakes.join_next() => match done {
                Ok((peer, Ok(stream))) => return Ok((Incoming::Tls(Box::new(stream)), peer)),
                Ok((_, Err(e))) => say!("mover: refused a connection: {e}"),
                Err(e) => say!("mover: a handshake stopped: {e}"),
            },
        }
    }
}

/// A session that failed on a TLS alert was refused by its peer: say so in
/// those words rather than as a connection error.
fn late_refusal(
    result: Result<Summary, SessionError>,
    peer: &str,
    me: Role,
) -> Result<Summary, SessionError> {
    match result {
        Err(SessionError::Protocol(ProtocolError::Io(e))) => match tls::refusal(&e, peer, me) {
            Some(refused) => Err(refused.into()),
            None => Err(SessionError::Protocol(ProtocolError::Io(e))),
        },
        other => other,
    }
}

/// Writes `addr` to `path` atomically.
fn write_addr_file(path: &Path, addr: SocketAddr) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    std::fs::write(&tmp, addr.to_string())?;
    std::fs::rename(&tmp, path)
}
