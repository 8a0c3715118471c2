//! Protobuf request bodies, as kubectl's generators send them
//! (`kubectl create namespace|secret|configmap|deployment|service ...`):
//! `Content-Type: application/vnd.kubernetes.protobuf`, the 4-byte magic
//! `k8s\0`, then a `runtime.Unknown` whose `typeMeta` names the kind and
//! whose `raw` is the object's own message (apimachinery's
//! `runtime/serializer/protobuf`).
//!
//! The messages are decoded with prost-reflect against Kubernetes' schemas
//! (`proto/`, compiled by `build.rs`), then turned into the JSON the store
//! keeps ([`json`]), so that they take the same validation path as JSON
//! bodies. Kinds of the groups compiled in (core/v1, apps/v1, and
//! authentication.k8s.io/v1's TokenRequest) are taken; others are refused
//! with 415, as before.

mod json;
mod omitempty;

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, Value as Field};
use serde_json::Value;

use crate::registry::RESOURCES;

/// The media type of protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// What every Kubernetes protobuf body starts with.
const MAGIC: &[u8] = b"k8s\0";
const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";

/// Why a protobuf body could not be taken. None is retryable: the same
/// body fails the same way.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    /// The body is not a Kubernetes protobuf envelope, or its object does
    /// not decode as its kind (the API server's 400).
    #[error("{0}")]
    Malformed(String),
    /// The kind is not one the sandbox has the schema of (415).
    #[error("{kind} in {api_version}")]
    UnsupportedKind { api_version: String, kind: String },
}

/// The descriptors of the compiled schemas.
fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let bytes: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.fds"));
        // The set is built from the vendored schemas by build.rs: it always
        // decodes, and a failure here is a build defect.
        DescriptorPool::decode(bytes).expect("the descriptor set built by build.rs decodes")
    })
}

/// The message of `kind` in `api_version` (`v1`, `apps/v1`), if compiled in.
/// `DeleteOptions`, which client-go sends in any group's version, is
/// apimachinery's.
fn message_of(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    if kind == "DeleteOptions" {
        return pool().get_message_by_name("k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions");
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("core", api_version));
    let package = group.split('.').next().unwrap_or(group);
    pool().get_message_by_name(&format!("k8s.io.api.{package}.{version}.{kind}"))
}

/// Whether Go's JSON leaves `field` of the Go struct `message` (such as
/// `DeploymentStatus`) out when it is 0 or false: `omitempty` on a
/// non-pointer field.
pub fn omits_zero(message: &str, field: &str) -> bool {
    omitempty::ZERO_IS_UNSET.contains(&format!("{message}.{field}").as_str())
}

/// The kinds the sandbox serves that it takes in protobuf, as `Kind` (or
/// `group/Kind` outside the core group), sorted.
pub fn supported_kinds() -> Vec<String> {
    let mut kinds: Vec<String> = RESOURCES
        .iter()
        .filter(|r| message_of(&r.api_version(), &r.kind).is_some())
        .map(|r| match &*r.group {
            "" => r.kind.to_string(),
            group => format!("{group}/{}", r.kind),
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// The `apiVersion` and `kind` a protobuf body's envelope names (empty
/// when it names none), without decoding the object.
pub fn type_meta(body: &[u8]) -> Result<(String, String), ProtobufError> {
    envelope(body).map(|(_, api_version, kind)| (api_version, kind))
}

/// The `runtime.Unknown` of a protobuf body, with its typeMeta's
/// apiVersion and kind.
fn envelope(body: &[u8]) -> Result<(DynamicMessage, String, String), ProtobufError> {
    let malformed = |why: String| ProtobufError::Malformed(why);
    let rest = body.strip_prefix(MAGIC).ok_or_else(|| {
        malformed("the protobuf body does not start with the magic \"k8s\\x00\"".into())
    })?;
    let unknown_desc = pool()
        .get_message_by_name(UNKNOWN)
        .ok_or_else(|| malformed(format!("no descriptor for {UNKNOWN}")))?;
    let unknown = DynamicMessage::decode(unknown_desc, rest)
        .map_err(|e| malformed(format!("the protobuf envelope does not decode: {e}")))?;
    let type_meta = match unknown.get_field_by_name("typeMeta").as_deref() {
        Some(Field::Message(meta)) => meta.clone(),
        _ => return Err(malformed("the protobuf envelope has no typeMeta".into())),
    };
    let text = |name: &str| match type_meta.get_field_by_name(name).as_deref() {
        Some(Field::String(s)) => s.clone(),
        _ => String::new(),
    };
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    Ok((unknown, api_version, kind))
}

/// Decodes a protobuf body into the object's JSON, `apiVersion` and `kind`
/// included.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let malformed = |why: String| ProtobufError::Malformed(why);
    let (unknown, api_version, kind) = envelope(body)?;
    if let Some(Field::String(encoding)) = unknown.get_field_by_name("contentEncoding").as_deref() {
        if !encoding.is_empty() {
            return Err(malformed(format!(
                "content encoding {encoding:?} is not supported"
            )));
        }
    }
    let desc = message_of(&api_version, &kind).ok_or_else(|| ProtobufError::UnsupportedKind {
        api_version: api_version.clone(),
        kind: kind.clone(),
    })?;
    let raw = match unknown.get_field_by_name("raw").as_deref() {
        Some(Field::Bytes(raw)) => raw.clone(),
        _ => Default::default(),
    };
    let object = DynamicMessage::decode(desc, raw)
        .map_err(|e| malformed(format!("{kind} in {api_version} does not decode: {e}")))?;
    let mut value = json::object(&object);
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), Value::String(api_version));
        map.insert("kind".into(), Value::String(kind));
    }
    Ok(value)
}

#[cfg(test)]
mod tests;
