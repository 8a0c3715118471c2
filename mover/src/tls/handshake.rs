//! The handshake itself, bounded in time, and what its failures mean in the
//! words of someone running a migration.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{AlertDescription, CertificateError, ClientConfig, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio_rustls::{client, server, TlsAcceptor, TlsConnector};

use super::{Role, TlsError, RECEIVER_NAME};

/// A connection as TLS reads it: rustls reads at most one record (16 KiB)
/// per call, a system call each on a bare socket. Through this buffer the
/// receiver of 1 GiB makes 4,000 reads instead of 66,000, which on a VM
/// cost more than copying the bytes once more.
pub type Buffered<S> = BufReader<S>;

/// Bytes read from the connection at once.
const READ_BUFFER: usize = 256 * 1024;
/// Encrypted bytes queued before a write: rustls's default, 64 KiB, made a
/// `writev` per four records.
const SEND_BUFFER: usize = 1024 * 1024;

/// The receiver's side: authenticates the sender on `stream`.
pub async fn accept<S>(
    config: Arc<ServerConfig>,
    stream: S,
    peer: &str,
    timeout: Duration,
) -> Result<server::TlsStream<Buffered<S>>, TlsError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let stream = BufReader::with_capacity(READ_BUFFER, stream);
    let handshake = TlsAcceptor::from(config).accept(stream);
    let mut tls = bounded(handshake, peer, timeout, Role::Receiver).await?;
    tls.get_mut().1.set_buffer_limit(Some(SEND_BUFFER));
    Ok(tls)
}

/// The sender's side: authenticates the receiver on `stream`.
pub async fn connect<S>(
    config: Arc<ClientConfig>,
    stream: S,
    peer: &str,
    timeout: Duration,
) -> Result<client::TlsStream<Buffered<S>>, TlsError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let name = ServerName::try_from(RECEIVER_NAME).expect("a valid DNS name");
    let stream = BufReader::with_capacity(READ_BUFFER, stream);
    let handshake = TlsConnector::from(config).connect(name, stream);
    let mut tls = bounded(handshake, peer, timeout, Role::Sender).await?;
    tls.get_mut().1.set_buffer_limit(Some(SEND_BUFFER));
    Ok(tls)
}

async fn bounded<T>(
    handshake: impl std::future::Future<Output = io::Result<T>>,
    peer: &str,
    timeout: Duration,
    me: Role,
) -> Result<T, TlsError> {
    match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(classify(e, peer, me)),
        Err(_) => Err(TlsError::Handshake {
            peer: peer.to_string(),
            source: io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no handshake within {}s", timeout.as_secs()),
            ),
        }),
    }
}

/// A rustls error is a refusal (one side does not accept the other); any
/// other error is the connection's.
fn classify(e: io::Error, peer: &str, me: Role) -> TlsError {
    let peer = peer.to_string();
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => TlsError::Refused {
            peer,
            reason: explain(tls, me),
        },
        None if e.kind() == io::ErrorKind::UnexpectedEof => TlsError::Refused {
            peer,
            reason: format!(
                "the {} hung up during the handshake (it may have refused this side's \
                 certificate, or not speak TLS: see its log)",
                me.peer().name()
            ),
        },
        None => TlsError::Handshake { peer, source: e },
    }
}

/// A refusal that surfaced after the handshake: in TLS 1.3 the client has
/// finished before the server has checked the client's certificate, so a
/// sender learns it was refused from an alert on its first read. `None` when
/// `e` is not a TLS error.
pub fn refusal(e: &io::Error, peer: &str, me: Role) -> Option<TlsError> {
    let tls = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(TlsError::Refused {
        peer: peer.to_string(),
        reason: explain(tls, me),
    })
}

/// What a handshake failure means, seen from `me`.
fn explain(e: &rustls::Error, me: Role) -> String {
    use rustls::Error as E;
    let them = me.peer().name();
    let fix = "both sides need --tls-dir with the files `mover keygen` made for this operation";
    match e {
        E::NoCertificatesPresented => {
            format!("the {them} presented no certificate (started without --tls-dir?); {fix}")
        }
        E::InvalidCertificate(c) => match c {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => format!(
                "the {them}'s certificate has expired; generate new key material with `mover keygen`"
            ),
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("the {them}'s certificate is not valid yet (are the clocks apart?)")
            }
            CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                "the {them}'s certificate is not from this operation's key material \
                 (another operation's, or forged); {fix}"
            ),
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                format!("the {them} presented a certificate that is not a {them}'s")
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!("the {them} presented a certificate that is not a receiver's")
            }
            other => format!("the {them}'s certificate is not acceptable: {other:?}"),
        },
        E::AlertReceived(alert) => {
            let why = match alert {
                AlertDescription::CertificateExpired => "this side's certificate has expired",
                AlertDescription::CertificateRequired => {
                    "it requires a certificate and this side has none"
                }
                AlertDescription::UnknownCA | AlertDescription::BadCertificate => {
                    "this side's certificate is not from its operation's key material"
                }
                AlertDescription::ProtocolVersion | AlertDescription::HandshakeFailure => {
                    "no common TLS 1.3 parameters"
                }
                AlertDescription::UnsupportedCertificate => {
                    "this side's certificate is made for the other role"
                }
                AlertDescription::DecodeError => "it could not read what this side sent",
                _ => "see its log",
            };
            format!("the {them} refused the connection ({alert:?}): {why}; {fix}")
        }
        E::InvalidMessage(_) => format!(
            "the {them} does not speak TLS (started with --insecure?); {fix}, and neither --insecure"
        ),
        E::PeerIncompatible(p) => format!("the {them}'s TLS is incompatible: {p:?}"),
        other => other.to_string(),
    }
}
