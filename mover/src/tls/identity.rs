//! Loading one side's key material from `--tls-dir` into rustls configs.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::{Role, TlsError, CA_CERT, OPERATION_FILE};

/// One side's credentials: whom it trusts (the operation's CA) and what it
/// shows (its own certificate and key).
#[derive(Debug)]
pub struct Identity {
    pub role: Role,
    pub operation_id: String,
    ca: CertificateDer<'static>,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl Identity {
    /// Reads `dir` as written by `mover keygen` (or mounted from the Secret).
    pub fn load(dir: &Path, role: Role) -> Result<Identity, TlsError> {
        let read = |name: &str| {
            let path = dir.join(name);
            fs::read(&path).map_err(|e| TlsError::material(&path, e))
        };
        let one_cert = |name: &str| -> Result<CertificateDer<'static>, TlsError> {
            let bytes = read(name)?;
            let mut certs = CertificateDer::pem_slice_iter(&bytes);
            match (certs.next(), certs.next()) {
                (Some(Ok(cert)), None) => Ok(cert),
                (Some(Err(e)), _) => Err(TlsError::bad(&dir.join(name), e.to_string())),
                (None, _) => Err(TlsError::bad(&dir.join(name), "no certificate in it")),
                (Some(Ok(_)), Some(_)) => {
                    Err(TlsError::bad(&dir.join(name), "more than one certificate"))
                }
            }
        };
        let id_path = dir.join(OPERATION_FILE);
        let operation_id = String::from_utf8(read(OPERATION_FILE)?)
            .map_err(|_| TlsError::bad(&id_path, "not text"))?
            .trim()
            .to_string();
        crate::operation::check_operation_id(&operation_id)
            .map_err(|e| TlsError::bad(&id_path, e))?;
        let key_path = dir.join(role.key_file());
        let key = PrivateKeyDer::from_pem_slice(&read(role.key_file())?)
            .map_err(|e| TlsError::bad(&key_path, e.to_string()))?;
        let identity = Identity {
            role,
            operation_id,
            ca: one_cert(CA_CERT)?,
            cert: one_cert(role.cert_file())?,
            key,
        };
        // A key that does not match its certificate shows up here, not as a
        // puzzling handshake failure on the other side.
        match role {
            Role::Sender => identity.client_config().map(drop)?,
            Role::Receiver => identity.server_config().map(drop)?,
        }
        Ok(identity)
    }

    fn roots(&self) -> Result<Arc<RootCertStore>, TlsError> {
        let mut roots = RootCertStore::empty();
        roots
            .add(self.ca.clone())
            .map_err(|e| TlsError::bad(Path::new(CA_CERT), e.to_string()))?;
        Ok(Arc::new(roots))
    }

    fn bad_pair(&self, e: rustls::Error) -> TlsError {
        TlsError::bad(
            Path::new(self.role.cert_file()),
            format!("does not go with {}: {e}", self.role.key_file()),
        )
    }

    /// The receiver's config: TLS 1.3 only, a client certificate from this
    /// operation's CA required.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = provider();
        let verifier = WebPkiClientVerifier::builder_with_provider(self.roots()?, provider.clone())
            .build()
            .map_err(|e| TlsError::bad(Path::new(CA_CERT), e.to_string()))?;
        let config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Generate(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.cert.clone()], self.key.clone_key())
            .map_err(|e| self.bad_pair(e))?;
        Ok(Arc::new(config))
    }

    /// The sender's config: TLS 1.3 only, the receiver's certificate checked
    /// against this operation's CA, its own certificate shown.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, TlsError> {
        let config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Generate(e.to_string()))?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(vec![self.cert.clone()], self.key.clone_key())
            .map_err(|e| self.bad_pair(e))?;
        Ok(Arc::new(config))
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
