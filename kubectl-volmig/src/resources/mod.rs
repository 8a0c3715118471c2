//! The Kubernetes objects a [`Plan`] needs, built from the plan alone (no
//! I/O), in the order they are created:
//!
//! - [`claim`]: the destination claim, when volmig creates it;
//! - [`keys`]: the Secret with the operation's TLS key material, in each
//!   namespace a mover pod runs in;
//! - [`service`]: the receiver's ClusterIP Service;
//! - [`source_copy`]: the snapshot of the source and the claim restored or
//!   cloned from it, when the sender reads a copy;
//! - [`pods`]: the receiver and sender pods of one attempt;
//! - `pointer`: where a cross-cluster operation's record is, in the
//!   source namespace;
//! - [`access`]: what the driver asks of the API server, as one list, and
//!   the in-cluster driver's Role and ClusterRole derived from it;
//! - [`driver`]: the in-cluster driver's Job, ServiceAccount and bindings.
//!
//! Every object carries [`names::labels`] for its component, so that the
//! operation's objects can be found (and cleaned up) by label from anywhere.

pub mod access;
mod claim;
pub mod driver;
mod keys;
mod pods;
mod pointer;
mod service;
mod source_copy;
#[cfg(test)]
mod tests;

pub use claim::{destination_claim, SOURCE_ANNOTATION};
pub use keys::{keys_secret, redacted_keys_secret, REDACTED};
pub use pods::{
    inspect_pod, listening_sender_pod, receiver_pod, seed_checkpoint, sender_pod, source_beside,
    wipe_first, CONTAINER, DEVICE_PATH, PLACEMENT_REASON_ANNOTATION,
};
pub use pointer::{read_pointer, record_pointer, RecordLocation};
pub use service::{exposed_service, service};
pub use source_copy::{read_claim, source_snapshot};

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::names;
use crate::plan::{ClaimAction, Method, Plan};

/// Why an object could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    /// A built object did not serialize (a bug, not a cluster condition).
    #[error("cannot serialize the {kind} {name}: {source}")]
    Serialize {
        kind: &'static str,
        name: String,
        source: serde_json::Error,
    },
}

impl ResourceError {
    /// Whether trying again could help: never, the same plan builds the same
    /// objects.
    pub fn is_retryable(&self) -> bool {
        match self {
            ResourceError::Serialize { .. } => false,
        }
    }
}

/// What `--dry-run` prints: every object the migration would create for its
/// first attempt, in creation order, each a complete object (`apiVersion`,
/// `kind`, `metadata`, `spec`):
///
/// 1. the destination claim, when the plan creates it;
/// 2. the key Secret in the destination namespace, and in the source
///    namespace when it differs, with placeholders instead of keys;
/// 3. the receiver's Service;
/// 4. when the sender reads a copy: the source's VolumeSnapshot (snapshot
///    only), then the claim restored or cloned from it;
/// 5. the receiver pod, then the sender pod, of attempt 1.
///
/// The sender is given `receiver_address_placeholder` as its `--to`: the
/// real address is known only once the Service exists.
pub fn dry_run_objects(
    plan: &Plan,
    receiver_address_placeholder: &str,
) -> Result<Vec<serde_json::Value>, ResourceError> {
    let mut objects = Vec::new();
    if plan.destination.action == ClaimAction::Create {
        objects.push(to_value(&destination_claim(plan))?);
    }
    let destination_ns = plan.destination.namespace.as_str();
    let source_ns = plan.spec.source.namespace.as_str();
    objects.push(to_value(&redacted_keys_secret(plan, destination_ns))?);
    if source_ns != destination_ns {
        objects.push(to_value(&redacted_keys_secret(plan, source_ns))?);
    }
    objects.push(to_value(&service(plan))?);
    match plan.source_method.method {
        Method::Snapshot => {
            let snapshot = source_snapshot(plan, 1);
            let name = snapshot.metadata.name.clone().unwrap_or_default();
            objects.push(serde_json::to_value(&snapshot).map_err(|source| {
                ResourceError::Serialize {
                    kind: "VolumeSnapshot",
                    name,
                    source,
                }
            })?);
            objects.push(to_value(&read_claim(plan, 1, None))?);
        }
        Method::Clone => objects.push(to_value(&read_claim(plan, 1, None))?),
        Method::Direct => {}
    }
    objects.push(to_value(&receiver_pod(plan, 1))?);
    objects.push(to_value(&sender_pod(
        plan,
        1,
        &plan.placement.sender,
        receiver_address_placeholder,
    ))?);
    Ok(objects)
}

/// What `--detach` adds, for `--dry-run`: the in-cluster driver's roles,
/// ServiceAccount, bindings and Job (owner uids are known only once the
/// roles exist: `<uid>`).
pub fn dry_run_driver(
    op: &str,
    home: &str,
    namespaces: &[String],
    image: &str,
    start_timeout: u64,
    copies: bool,
) -> Result<Vec<serde_json::Value>, ResourceError> {
    let owner = |kind| driver::Owner {
        kind,
        name: access::driver_rbac_name(op),
        uid: "<uid>".to_string(),
    };
    let mut objects = vec![to_value(&access::driver_cluster_role(op, copies))?];
    for ns in namespaces {
        objects.push(to_value(&access::driver_role(op, ns, copies))?);
        objects.push(to_value(&driver::role_binding(
            op,
            ns,
            home,
            &owner("Role"),
        ))?);
    }
    objects.push(to_value(&driver::service_account(
        op,
        home,
        &owner("Role"),
    ))?);
    objects.push(to_value(&driver::cluster_role_binding(
        op,
        home,
        &owner("ClusterRole"),
    ))?);
    objects.push(to_value(&driver::job(op, home, image, start_timeout))?);
    Ok(objects)
}

/// A top-level object as JSON. k8s-openapi writes `apiVersion` and `kind`
/// for every resource type, so the value is complete as it is.
fn to_value<K>(object: &K) -> Result<serde_json::Value, ResourceError>
where
    K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta> + Serialize,
{
    serde_json::to_value(object).map_err(|source| ResourceError::Serialize {
        kind: K::KIND,
        name: object.metadata().name.clone().unwrap_or_default(),
        source,
    })
}

/// Metadata of an object of `component` in operation `op`.
fn metadata(op: &str, component: names::Component, namespace: &str, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_string()),
        labels: Some(names::labels(op, component)),
        ..ObjectMeta::default()
    }
}

/// Whether `value` is a valid label value: at most 63 characters,
/// alphanumerics, `-`, `_` and `.`, beginning and ending with an
/// alphanumeric (or empty).
fn is_label_value(value: &str) -> bool {
    let alnum_ends = value
        .bytes()
        .next()
        .zip(value.bytes().next_back())
        .is_none_or(|(a, z)| a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric());
    value.len() <= 63
        && alnum_ends
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A string map from pairs.
fn string_map<const N: usize>(pairs: [(&str, &str); N]) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
