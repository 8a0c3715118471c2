//! Per-operation key material: a throwaway CA that signs one certificate for
//! the sender and one for the receiver, and is then forgotten.
//!
//! The CA's private key is never written anywhere, so nobody can mint another
//! certificate for the operation: only the two holders of the files made by
//! one `generate` can talk to each other. A second operation has its own CA,
//! so its certificates are refused by this one's peers.

use std::fs;
use std::io::{self, Write};
#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::{Role, TlsError, CA_CERT, OPERATION_FILE, RECEIVER_NAME};

/// How far back a certificate's validity starts, for clocks a little behind.
const CLOCK_SKEW: Duration = Duration::from_secs(300);

/// The files of one operation's key material, PEM-encoded, by file name.
///
/// The same names serve as the keys of the Kubernetes Secret the plugin
/// builds, so a pod that mounts it finds exactly what `--tls-dir` reads.
#[derive(Clone)]
pub struct KeyMaterial {
    pub operation_id: String,
    files: Vec<(&'static str, String)>,
}

impl std::fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Private keys stay out of logs.
        f.debug_struct("KeyMaterial")
            .field("operation_id", &self.operation_id)
            .field(
                "files",
                &self.files.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl KeyMaterial {
    /// New material for `operation_id`, valid from now for `valid_for`.
    pub fn generate(operation_id: &str, valid_for: Duration) -> Result<KeyMaterial, TlsError> {
        let now = SystemTime::now();
        KeyMaterial::generate_valid(operation_id, now - CLOCK_SKEW, now + valid_for)
    }

    /// New material valid between `not_before` and `not_after` (tests use
    /// this to make material that has already expired).
    pub fn generate_valid(
        operation_id: &str,
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Result<KeyMaterial, TlsError> {
        crate::operation::check_operation_id(operation_id).map_err(TlsError::Generate)?;
        let fail = |e: rcgen::Error| TlsError::Generate(e.to_string());
        let validity = |mut p: CertificateParams, cn: String| {
            p.not_before = not_before.into();
            p.not_after = not_after.into();
            let mut dn = DistinguishedName::new();
            dn.push(DnType::OrganizationName, "volmig");
            dn.push(DnType::CommonName, cn);
            p.distinguished_name = dn;
            p
        };

        let mut ca = validity(
            CertificateParams::default(),
            format!("volmig operation {operation_id} CA"),
        );
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca_key = KeyPair::generate().map_err(fail)?;
        let ca_cert = ca.self_signed(&ca_key).map_err(fail)?;
        let issuer = Issuer::new(ca, ca_key);

        let mut files = vec![
            (OPERATION_FILE, format!("{operation_id}\n")),
            (CA_CERT, ca_cert.pem()),
        ];
        for role in [Role::Sender, Role::Receiver] {
            let names = match role {
                Role::Receiver => vec![RECEIVER_NAME.to_string()],
                Role::Sender => vec![],
            };
            let mut p = validity(
                CertificateParams::new(names).map_err(fail)?,
                format!("volmig operation {operation_id} {}", role.name()),
            );
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            // A certificate serves one side only: a receiver's cannot be
            // used to connect, nor a sender's to accept.
            p.extended_key_usages = vec![match role {
                Role::Sender => ExtendedKeyUsagePurpose::ClientAuth,
                Role::Receiver => ExtendedKeyUsagePurpose::ServerAuth,
            }];
            let key = KeyPair::generate().map_err(fail)?;
            let cert = p.signed_by(&key, &issuer).map_err(fail)?;
            files.push((role.cert_file(), cert.pem()));
            files.push((role.key_file(), key.serialize_pem()));
        }
        Ok(KeyMaterial {
            operation_id: operation_id.to_string(),
            files,
        })
    }

    /// Every file as (name, contents).
    pub fn files(&self) -> impl Iterator<Item = (&'static str, &[u8])> {
        self.files.iter().map(|(n, c)| (*n, c.as_bytes()))
    }

    /// The files one side needs (the CA certificate, its own certificate and
    /// key, the operation id): what a pod of that side should mount.
    pub fn files_for(&self, role: Role) -> impl Iterator<Item = (&'static str, &[u8])> {
        self.files().filter(move |(n, _)| role.needs(n))
    }

    /// Writes the files into `dir` (created, mode 0700), readable by the
    /// owner only; existing files are never overwritten.
    pub fn write(&self, dir: &Path) -> Result<(), TlsError> {
        let at = |e: io::Error| TlsError::material(dir, e);
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        builder.mode(0o700);
        match builder.create(dir) {
            Ok(()) => {}
            Err(e) => return Err(at(e)),
        }
        if let Some((name, _)) = self.files.iter().find(|(n, _)| dir.join(n).exists()) {
            return Err(TlsError::material(
                &dir.join(name),
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "already exists: key material is never overwritten; use a new directory",
                ),
            ));
        }
        for (name, contents) in &self.files {
            let path = dir.join(name);
            let mut options = fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            options.mode(0o600);
            let mut f = options
                .open(&path)
                .map_err(|e| TlsError::material(&path, e))?;
            f.write_all(contents.as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| TlsError::material(&path, e))?;
        }
        Ok(())
    }
}
