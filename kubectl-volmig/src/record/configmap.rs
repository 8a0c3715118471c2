//! A record to and from its ConfigMap. Pure: no I/O.
//!
//! The ConfigMap `volmig-<op>` lives in the destination namespace, labelled
//! as volmig's record of operation `<op>` (plus its phase, for
//! `kubectl get cm -l volmig.io/phase=Failed`), with three keys:
//!
//! - `format`: `"1"`, the layout of the other two;
//! - `spec`: the [`MigrationSpec`], pretty JSON;
//! - `status`: the [`MigrationStatus`], pretty JSON.
//!
//! The ConfigMap's `resourceVersion` travels in the record's metadata, so a
//! write of a record that was read is a compare-and-swap.
//!
//! # Size
//!
//! A ConfigMap holds at most 1 MiB. Attempts are small except for their log
//! tails, so when the encoded record would exceed [`MAX_DATA_BYTES`], the
//! log tails of the oldest attempts are replaced by [`TRIMMED_LOG`], oldest
//! first, then the newest attempt's oldest lines are dropped, until it fits.
//! Only the stored copy is trimmed; the record passed in is not changed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::{MigrationStatus, Phase, VolumeMigration, API_VERSION, KIND};
use crate::names::{self, Component};
use crate::plan::Plan;
use crate::spec::MigrationSpec;

/// The data key with the record's layout version.
pub const FORMAT_KEY: &str = "format";
/// The data key with the spec.
pub const SPEC_KEY: &str = "spec";
/// The data key with the status.
pub const STATUS_KEY: &str = "status";
/// The layout this version writes and reads.
pub const FORMAT: &str = "1";
/// The most data a stored record may hold: Kubernetes refuses ConfigMaps over
/// 1 MiB, and metadata needs some room too.
pub const MAX_DATA_BYTES: usize = 900 * 1024;
/// What a log tail trimmed for size is replaced by.
pub const TRIMMED_LOG: &str =
    "(log tail dropped: the operation record is near the 1 MiB ConfigMap limit)";

/// A record that cannot be encoded, or a ConfigMap that is not a record.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The ConfigMap lacks a record's labels or keys.
    #[error("ConfigMap {namespace}/{name} is not a volmig operation record: {why}")]
    NotARecord {
        namespace: String,
        name: String,
        why: String,
    },
    /// The record was written by a version of volmig that lays it out
    /// differently.
    #[error(
        "ConfigMap {namespace}/{name} holds a volmig record in format {found:?}; \
         this kubectl-volmig reads format {FORMAT:?}: use the version that wrote it"
    )]
    UnknownFormat {
        namespace: String,
        name: String,
        found: String,
    },
    /// A key holds JSON that is not what it should be.
    #[error("ConfigMap {namespace}/{name}: its {key:?} is not a valid record {key}: {source}")]
    Decode {
        namespace: String,
        name: String,
        key: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The record could not be turned into JSON (not expected to happen).
    #[error("cannot encode the record of operation {op:?}: {source}")]
    Encode {
        op: String,
        #[source]
        source: serde_json::Error,
    },
    /// Even without log tails, the record exceeds what a ConfigMap holds.
    #[error(
        "the record of operation {op:?} would be {size} bytes without its log tails, \
         over the {MAX_DATA_BYTES}-byte limit of a ConfigMap"
    )]
    TooLarge { op: String, size: usize },
}

impl RecordError {
    /// None of these go away by trying again: the data is what it is.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// A fresh record for `plan`: phase `Pending`, in the destination namespace,
/// with the plan's source, destination and placement.
pub fn new_record(plan: &Plan) -> VolumeMigration {
    VolumeMigration {
        api_version: API_VERSION.to_string(),
        kind: KIND.to_string(),
        metadata: super::Metadata {
            name: plan.operation.clone(),
            namespace: plan.destination.namespace.clone(),
            creation_timestamp: None,
            resource_version: None,
            group: None,
        },
        spec: plan.spec.clone(),
        status: MigrationStatus {
            phase: Phase::Pending,
            source: Some(plan.source.clone()),
            destination: Some(plan.destination.clone()),
            placement: Some(plan.placement.clone()),
            security: Some(plan.security.clone()),
            source_method: plan
                .source_method
                .method
                .reads_copy()
                .then(|| plan.source_method.clone()),
            ..MigrationStatus::default()
        },
    }
}

/// The ConfigMap that stores `vm`, carrying its `resourceVersion` (if any)
/// so that replacing it fails when someone else wrote in between.
pub fn to_config_map(vm: &VolumeMigration) -> Result<ConfigMap, RecordError> {
    let op = &vm.metadata.name;
    let spec = encode(op, &vm.spec)?;
    let status = encode_status(op, &vm.status, MAX_DATA_BYTES.saturating_sub(spec.len()))?;
    let mut labels = names::labels(op, Component::Record);
    labels.insert(
        names::PHASE_KEY.to_string(),
        vm.status.phase.as_str().to_string(),
    );
    if let Some(g) = &vm.metadata.group {
        labels.insert(names::GROUP_KEY.to_string(), g.name.clone());
        labels.insert(names::GROUP_NAMESPACE_KEY.to_string(), g.namespace.clone());
        labels.insert(names::CLAIM_KEY.to_string(), g.key.to_string());
    }
    Ok(stored(&vm.metadata, labels, FORMAT, spec, status))
}

/// `value` as pretty JSON.
pub(super) fn encode<T: serde::Serialize>(op: &str, value: &T) -> Result<String, RecordError> {
    serde_json::to_string_pretty(value).map_err(|source| RecordError::Encode {
        op: op.to_string(),
        source,
    })
}

/// The ConfigMap of a record with `metadata` and `labels`, in `format`.
pub(super) fn stored(
    metadata: &super::Metadata,
    labels: BTreeMap<String, String>,
    format: &str,
    spec: String,
    status: String,
) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(names::record_name(&metadata.name)),
            namespace: Some(metadata.namespace.clone()),
            labels: Some(labels),
            resource_version: metadata.resource_version.clone(),
            creation_timestamp: metadata.creation_timestamp.map(Time),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            (FORMAT_KEY.to_string(), format.to_string()),
            (SPEC_KEY.to_string(), spec),
            (STATUS_KEY.to_string(), status),
        ])),
        ..ConfigMap::default()
    }
}

/// What a record's ConfigMap holds, checked: its labels say `component`,
/// its format is `format`.
pub(super) struct Parts<'a> {
    pub labels: Option<&'a BTreeMap<String, String>>,
    pub spec: &'a str,
    pub status: &'a str,
    pub metadata: super::Metadata,
}

/// The parts of `cm`, a record of `component` in `format`.
pub(super) fn parts<'a>(
    cm: &'a ConfigMap,
    component: Component,
    format: &str,
) -> Result<Parts<'a>, RecordError> {
    let name = cm.metadata.name.clone().unwrap_or_default();
    let namespace = cm.metadata.namespace.clone().unwrap_or_default();
    let not_a_record = |why: String| RecordError::NotARecord {
        namespace: namespace.clone(),
        name: name.clone(),
        why,
    };
    let labels = cm.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    if label(names::MANAGED_BY_KEY) != Some(names::MANAGED_BY)
        || label(names::COMPONENT_KEY) != Some(component.as_str())
    {
        return Err(not_a_record(format!(
            "it lacks the labels {}",
            names::component_selector(component)
        )));
    }
    let op = label(names::OPERATION_KEY)
        .ok_or_else(|| not_a_record(format!("it has no {} label", names::OPERATION_KEY)))?;
    let data = cm.data.as_ref();
    let key = |key: &'static str| {
        data.and_then(|d| d.get(key))
            .ok_or_else(|| not_a_record(format!("it has no {key:?} key")))
    };
    let found = key(FORMAT_KEY)?;
    if found.trim() != format {
        return Err(RecordError::UnknownFormat {
            namespace: namespace.clone(),
            name: name.clone(),
            found: found.clone(),
        });
    }
    Ok(Parts {
        labels,
        spec: key(SPEC_KEY)?,
        status: key(STATUS_KEY)?,
        metadata: super::Metadata {
            name: op.to_string(),
            namespace,
            creation_timestamp: cm.metadata.creation_timestamp.as_ref().map(|t| t.0),
            resource_version: cm.metadata.resource_version.clone(),
            group: None,
        },
    })
}

/// The ConfigMap of a whole-record kind (a set's head, a rehome): `spec`
/// and `status` as JSON within [`MAX_DATA_BYTES`], labelled as
/// `component` with its `phase` and `extra` labels.
pub(super) fn whole<S: serde::Serialize, T: serde::Serialize>(
    metadata: &super::Metadata,
    component: Component,
    format: &str,
    (spec, status): (&S, &T),
    phase: super::Phase,
    extra: impl IntoIterator<Item = (String, String)>,
) -> Result<ConfigMap, RecordError> {
    let op = &metadata.name;
    let spec = encode(op, spec)?;
    let status = encode(op, status)?;
    let size = spec.len() + status.len();
    if size > MAX_DATA_BYTES {
        return Err(RecordError::TooLarge {
            op: op.clone(),
            size,
        });
    }
    let mut labels = names::labels(op, component);
    labels.insert(names::PHASE_KEY.to_string(), phase.as_str().to_string());
    labels.extend(extra);
    Ok(stored(metadata, labels, format, spec, status))
}

/// The metadata, spec and status of a whole-record kind's ConfigMap.
pub(super) fn whole_from<S: serde::de::DeserializeOwned, T: serde::de::DeserializeOwned>(
    cm: &ConfigMap,
    component: Component,
    format: &str,
) -> Result<(super::Metadata, S, T), RecordError> {
    let parts = parts(cm, component, format)?;
    let spec = decode(&parts.metadata, SPEC_KEY, parts.spec)?;
    let status = decode(&parts.metadata, STATUS_KEY, parts.status)?;
    Ok((parts.metadata, spec, status))
}

/// `text`, the `key` of ConfigMap `metadata`, decoded.
pub(super) fn decode<T: serde::de::DeserializeOwned>(
    metadata: &super::Metadata,
    key: &'static str,
    text: &str,
) -> Result<T, RecordError> {
    serde_json::from_str(text).map_err(|source| RecordError::Decode {
        namespace: metadata.namespace.clone(),
        name: names::record_name(&metadata.name),
        key,
        source,
    })
}

/// The record a ConfigMap stores. Fields of the status this version does
/// not know are ignored, so newer writers do not lock older readers out.
pub fn from_config_map(cm: &ConfigMap) -> Result<VolumeMigration, RecordError> {
    let parts = parts(cm, Component::Record, FORMAT)?;
    let label = |key: &str| parts.labels.and_then(|l| l.get(key)).map(String::as_str);
    let group = match (
        label(names::GROUP_KEY),
        label(names::GROUP_NAMESPACE_KEY),
        label(names::CLAIM_KEY).and_then(|k| k.parse().ok()),
    ) {
        (Some(name), Some(ns), Some(key)) => Some(super::group::GroupRef {
            name: name.to_string(),
            namespace: ns.to_string(),
            key,
        }),
        _ => None,
    };
    let spec: MigrationSpec = decode(&parts.metadata, SPEC_KEY, parts.spec)?;
    let status: MigrationStatus = decode(&parts.metadata, STATUS_KEY, parts.status)?;
    Ok(VolumeMigration {
        api_version: API_VERSION.to_string(),
        kind: KIND.to_string(),
        metadata: super::Metadata {
            group,
            ..parts.metadata
        },
        spec,
        status,
    })
}

/// `status` as pretty JSON of at most `limit` bytes, trimming log tails
/// (oldest attempts first) if it has to.
fn encode_status(op: &str, status: &MigrationStatus, limit: usize) -> Result<String, RecordError> {
    let encode = |s: &MigrationStatus| {
        serde_json::to_string_pretty(s).map_err(|source| RecordError::Encode {
            op: op.to_string(),
            source,
        })
    };
    let json = encode(status)?;
    if json.len() <= limit {
        return Ok(json);
    }
    let mut trimmed = status.clone();
    let last = trimmed.attempts.len().saturating_sub(1);
    // Older attempts lose their whole tail, one at a time.
    for i in 0..last {
        let tail = &mut trimmed.attempts[i].log_tail;
        if tail.is_empty() || tail[..] == [TRIMMED_LOG] {
            continue;
        }
        *tail = vec![TRIMMED_LOG.to_string()];
        let json = encode(&trimmed)?;
        if json.len() <= limit {
            return Ok(json);
        }
    }
    // The newest attempt keeps as many of its newest lines as fit.
    if let Some(full) = trimmed
        .attempts
        .last_mut()
        .map(|a| std::mem::take(&mut a.log_tail))
    {
        let base = encode(&trimmed)?.len();
        let mut budget = limit.saturating_sub(base + TRIMMED_LOG.len() + 16);
        let mut keep = full.len();
        for line in full.iter().rev() {
            // A line's JSON takes at least its bytes plus indentation and quotes.
            let cost = serde_json::to_string(line).map_or(line.len(), |s| s.len()) + 16;
            if cost > budget {
                break;
            }
            budget -= cost;
            keep -= 1;
        }
        if let Some(attempt) = trimmed.attempts.last_mut() {
            if keep > 0 {
                attempt.log_tail.push(TRIMMED_LOG.to_string());
            }
            attempt.log_tail.extend(full.into_iter().skip(keep));
        }
    }
    let json = encode(&trimmed)?;
    if json.len() <= limit {
        return Ok(json);
    }
    Err(RecordError::TooLarge {
        op: op.to_string(),
        size: json.len(),
    })
}

#[cfg(test)]
mod tests;
