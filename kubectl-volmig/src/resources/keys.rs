//! The Secret with the operation's TLS key material, and which of its files
//! each side mounts.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{KeyToPath, Secret};
use k8s_openapi::ByteString;
use mover::tls::{Role, CA_CERT, OPERATION_FILE};

use super::metadata;
use crate::names::{self, Component};
use crate::plan::Plan;

/// What `--dry-run` shows instead of each key-material file.
pub const REDACTED: &str = "<generated when the migration starts>";

/// The key Secret of `plan` in `namespace` (the Secret must exist in each
/// namespace a mover pod runs in), holding `files`: the operation's key
/// material as `mover::tls::KeyMaterial::files` gives it.
pub fn keys_secret(plan: &Plan, namespace: &str, files: &[(&str, &[u8])]) -> Secret {
    let data = files
        .iter()
        .map(|(name, contents)| (name.to_string(), ByteString(contents.to_vec())))
        .collect();
    secret(plan, namespace, data)
}

/// The key Secret as `--dry-run` prints it: every file is there, each
/// holding [`REDACTED`] instead of key material, as `stringData` so that
/// it reads as words rather than base64.
pub fn redacted_keys_secret(plan: &Plan, namespace: &str) -> Secret {
    let placeholders = every_file()
        .map(|name| (name.to_string(), REDACTED.to_string()))
        .collect();
    Secret {
        data: None,
        string_data: Some(placeholders),
        ..secret(plan, namespace, BTreeMap::new())
    }
}

/// The Secret's items a pod of `role` mounts: the CA certificate, the
/// operation id, and its own certificate and key (never the peer's key).
pub(super) fn items_for(role: Role) -> Vec<KeyToPath> {
    role_files(role)
        .into_iter()
        .map(|name| KeyToPath {
            key: name.to_string(),
            path: name.to_string(),
            mode: None,
        })
        .collect()
}

fn role_files(role: Role) -> [&'static str; 4] {
    [CA_CERT, OPERATION_FILE, role.cert_file(), role.key_file()]
}

/// Every file of the key material, each once.
fn every_file() -> impl Iterator<Item = &'static str> {
    let receiver = role_files(Role::Receiver);
    let sender = role_files(Role::Sender);
    receiver
        .into_iter()
        .chain(sender.into_iter().filter(move |f| !receiver.contains(f)))
}

fn secret(plan: &Plan, namespace: &str, data: BTreeMap<String, ByteString>) -> Secret {
    let op = plan.operation.as_str();
    Secret {
        metadata: metadata(op, Component::Keys, namespace, names::keys_name(op)),
        type_: Some("Opaque".to_string()),
        data: Some(data),
        ..Secret::default()
    }
}
