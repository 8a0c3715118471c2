//! The destination claim: one volmig creates, shaped by the spec and the
//! source, or an existing one, reused as it is.

use std::cmp::Reverse;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;

use super::{non_empty, storage};
use crate::names::SOURCE_KEY;
use crate::plan::{
    placement, ClaimAction, DestinationClaim, Inputs, Plan, Refusal, SourceVolume, VolumeMode,
};
use crate::spec::MigrationSpec;

/// The annotation that marks the cluster's default storage class, and its
/// beta spelling, which the API server still honours.
const DEFAULT_CLASS_ANNOTATIONS: [&str; 2] = [
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];

/// A claim for volmig to create: the spec's class, size and access modes,
/// the rest from the cluster's default class and the source.
pub(super) fn create(
    spec: &MigrationSpec,
    requested_size: Option<(String, u64)>,
    source_claim: &PersistentVolumeClaim,
    source: &SourceVolume,
    inputs: &Inputs,
) -> Result<DestinationClaim, Refusal> {
    let dst = &spec.destination;
    let storage_class = storage_class(spec, source, inputs.destination_classes())?;
    let (size, size_bytes) = match requested_size {
        Some((size, bytes)) if bytes < source.capacity_bytes && source.volume_mode.is_block() => {
            return Err(Refusal::BlockShrink {
                requested: size,
                source_capacity: source.capacity.clone(),
            })
        }
        Some((size, bytes)) if bytes < source.capacity_bytes && !dst.allow_shrink => {
            return Err(Refusal::ShrinkNotAllowed {
                requested: size,
                source_capacity: source.capacity.clone(),
            })
        }
        Some(requested) => requested,
        None => (source.capacity.clone(), source.capacity_bytes),
    };
    let access_modes = [
        dst.access_modes.clone(),
        placement::access_modes(source_claim, None),
        source.access_modes.clone(),
    ]
    .into_iter()
    .find(|m| !m.is_empty())
    .unwrap_or_else(|| vec!["ReadWriteOnce".to_string()]);
    Ok(DestinationClaim {
        namespace: dst.namespace.clone(),
        name: dst.name.clone(),
        storage_class,
        size,
        size_bytes,
        access_modes,
        volume_mode: source.volume_mode,
        action: ClaimAction::Create,
    })
}

/// An existing claim to copy into, if it may be: asked for with `--reuse`
/// or made by an earlier run from this source, usable, of the class and
/// access modes asked for, and big enough.
pub(super) fn reuse(
    spec: &MigrationSpec,
    existing: &PersistentVolumeClaim,
    source: &SourceVolume,
    inputs: &Inputs,
) -> Result<DestinationClaim, Refusal> {
    let (src, dst) = (&spec.source, &spec.destination);
    let namespace = dst.namespace.clone();
    let name = dst.name.clone();
    let phase = existing.status.as_ref().and_then(|s| s.phase.as_deref());
    let unusable = if existing.metadata.deletion_timestamp.is_some() {
        Some("being deleted")
    } else if phase == Some("Lost") {
        Some("Lost")
    } else {
        None
    };
    if let Some(state) = unusable {
        return Err(Refusal::DestinationUnusable {
            namespace,
            name,
            state: state.to_string(),
        });
    }
    let labels = existing.metadata.labels.as_ref();
    let made_by_us = labels.and_then(|l| l.get(SOURCE_KEY)).map(String::as_str)
        == Some(format!("{}.{}", src.namespace, src.name).as_str());
    if !dst.reuse && !made_by_us {
        return Err(Refusal::DestinationExists { namespace, name });
    }

    let claim_spec = existing.spec.as_ref();
    let volume_spec = inputs
        .destination_volume
        .as_ref()
        .and_then(|v| v.spec.as_ref());
    let storage_class = non_empty(claim_spec.and_then(|s| s.storage_class_name.as_deref()))
        .or_else(|| non_empty(volume_spec.and_then(|s| s.storage_class_name.as_deref())));
    if let Some(asked) = &dst.storage_class {
        if storage_class.as_ref() != Some(asked) {
            return Err(Refusal::DestinationDiffers {
                namespace,
                name,
                what: "storage class".to_string(),
                existing: storage_class.map_or_else(|| "none".to_string(), |c| format!("{c:?}")),
                requested: format!("{asked:?}"),
            });
        }
    }
    let access_modes = claim_spec
        .and_then(|s| s.access_modes.clone())
        .filter(|m| !m.is_empty())
        .or_else(|| existing.status.as_ref()?.access_modes.clone())
        .unwrap_or_default();
    if !dst.access_modes.is_empty() && !same_modes(&dst.access_modes, &access_modes) {
        return Err(Refusal::DestinationDiffers {
            namespace,
            name,
            what: "access modes".to_string(),
            existing: access_modes.join(","),
            requested: dst.access_modes.join(","),
        });
    }

    let volume_mode = VolumeMode::of(
        claim_spec
            .and_then(|s| s.volume_mode.as_deref())
            .or_else(|| volume_spec.and_then(|s| s.volume_mode.as_deref())),
    );
    if volume_mode != source.volume_mode {
        return Err(Refusal::VolumeModeConversion {
            claim: format!("{}/{}", src.namespace, src.name),
            destination: format!("persistentvolumeclaim {name:?} in namespace {namespace:?}"),
            source_mode: source.volume_mode,
        });
    }
    let requests = claim_spec.and_then(|s| s.resources.as_ref()?.requests.as_ref());
    let (size, size_bytes) = storage(existing.status.as_ref().and_then(|s| s.capacity.as_ref()))
        .or_else(|| storage(requests))
        .unwrap_or_else(|| ("0".to_string(), 0));
    if size_bytes < source.capacity_bytes && volume_mode.is_block() {
        return Err(Refusal::BlockShrink {
            requested: size,
            source_capacity: source.capacity.clone(),
        });
    }
    if size_bytes < source.capacity_bytes && !dst.allow_shrink {
        return Err(Refusal::DestinationTooSmall {
            namespace,
            name,
            capacity: size,
            needed: source.capacity.clone(),
        });
    }

    let pin = inputs
        .destination_volume
        .as_ref()
        .and_then(placement::required_affinity);
    if let (Some(node), Some(pin)) = (&dst.node, pin) {
        if !pin.admits(&placement::hostname(node, inputs.destination_nodes())) {
            return Err(Refusal::DestinationPinnedElsewhere {
                namespace,
                name,
                pinned_to: pin.nodes(inputs.destination_nodes()),
                node: node.clone(),
            });
        }
    }

    Ok(DestinationClaim {
        namespace,
        name,
        storage_class,
        size,
        size_bytes,
        access_modes,
        volume_mode,
        action: ClaimAction::Reuse,
    })
}

impl Plan {
    /// This plan with the destination at the size `claim` (the destination
    /// claim, as it is now) has, when it has grown since the plan: expanded
    /// after its data did not fit. The receiver's `--capacity` follows it.
    pub fn with_grown_destination(mut self, claim: &PersistentVolumeClaim) -> Plan {
        let capacity = claim.status.as_ref().and_then(|s| s.capacity.as_ref());
        if let Some((size, bytes)) = storage(capacity) {
            if bytes > self.destination.size_bytes {
                self.destination.size = size;
                self.destination.size_bytes = bytes;
            }
        }
        self
    }
}

/// `--to-storage-class` if it exists, else the cluster's default class,
/// else the source's class; `None` only when there is no class at all.
fn storage_class(
    spec: &MigrationSpec,
    source: &SourceVolume,
    classes: &[StorageClass],
) -> Result<Option<String>, Refusal> {
    let default = default_class(classes);
    let Some(asked) = &spec.destination.storage_class else {
        // A node move keeps the class: the node-local class is what pins
        // the new volume to `--to-node`.
        if spec.destination.node.is_some() && source.storage_class.is_some() {
            return Ok(source.storage_class.clone());
        }
        return Ok(default.or_else(|| source.storage_class.clone()));
    };
    let mut available: Vec<String> = classes
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    available.sort();
    if available.contains(asked) {
        return Ok(Some(asked.clone()));
    }
    Err(Refusal::StorageClassNotFound {
        name: asked.clone(),
        available,
        default,
    })
}

/// The class the API server gives a claim that names none: of the classes
/// marked default, the newest (as the API server picks since 1.26), then
/// the first by name.
fn default_class(classes: &[StorageClass]) -> Option<String> {
    classes
        .iter()
        .filter(|c| {
            let annotations = c.metadata.annotations.as_ref();
            DEFAULT_CLASS_ANNOTATIONS
                .iter()
                .any(|a| annotations.and_then(|m| m.get(*a)).map(String::as_str) == Some("true"))
        })
        .max_by_key(|c| {
            let created = c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (created, Reverse(c.metadata.name.clone()))
        })
        .and_then(|c| c.metadata.name.clone())
}

/// Whether two lists hold the same access modes, in any order.
fn same_modes(a: &[String], b: &[String]) -> bool {
    let sorted = |m: &[String]| {
        let mut m = m.to_vec();
        m.sort();
        m.dedup();
        m
    };
    sorted(a) == sorted(b)
}
