//! The cluster CA and the API server's serving certificate, made at start
//! as kubeadm's `certs` phase makes `ca.crt` and `apiserver.crt`
//! (cmd/kubeadm/app/phases/certs): the certificate names every way a
//! client reaches the server — `localhost`, `127.0.0.1`, the `kubernetes`
//! Service's DNS names and its ClusterIP — so kubectl, kube-rs and
//! in-cluster clients all verify it against the one CA.

use std::net::IpAddr;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::ServerConfig;

/// Why the certificates or the TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("cannot make the cluster certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("cannot configure TLS: {0}")]
    Tls(#[from] rustls::Error),
}

/// The DNS names of the API server's certificate, as kubeadm's
/// `GetAPIServerAltNames` lists them (with the default cluster domain).
pub const SERVER_NAMES: &[&str] = &[
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// The CA and the serving certificate it signed.
pub struct ClusterCa {
    ca_pem: String,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: Vec<u8>,
}

impl ClusterCa {
    /// A new CA and a serving certificate for `127.0.0.1`, the names of
    /// [`SERVER_NAMES`] and `service_ip` (the `kubernetes` Service's
    /// ClusterIP).
    pub fn generate(service_ip: IpAddr) -> Result<ClusterCa, PkiError> {
        let mut ca = CertificateParams::default();
        ca.distinguished_name = name("kubernetes");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::CrlSign,
        ];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);

        let mut server = CertificateParams::new(
            SERVER_NAMES
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>(),
        )?;
        for ip in [IpAddr::from([127, 0, 0, 1]), service_ip] {
            server.subject_alt_names.push(SanType::IpAddress(ip));
        }
        server.distinguished_name = name("kube-apiserver");
        server.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate()?;
        let server_cert = server.signed_by(&server_key, &issuer)?;
        Ok(ClusterCa {
            ca_pem: ca_cert.pem(),
            server_chain: vec![server_cert.der().clone(), ca_cert.der().clone()],
            server_key: server_key.serialize_der(),
        })
    }

    /// The CA certificate in PEM: the kubeconfig's
    /// `certificate-authority-data` and every pod's `ca.crt`.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The API server's TLS configuration: TLS 1.2 and 1.3 as
    /// kube-apiserver's defaults allow, HTTP/1.1 only (the sandbox serves
    /// no HTTP/2), no client certificates.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, PkiError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.clone()));
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(self.server_chain.clone(), key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}
