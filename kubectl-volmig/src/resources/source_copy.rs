//! What an attempt's sender reads when it does not read the source itself
//! (issue 24): a VolumeSnapshot of the source, and the claim restored from
//! it or cloned from the source.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, TypedLocalObjectReference,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::metadata;
use crate::names::{self, Component};
use crate::plan::{quantity, Method, Plan};
use crate::snapshots::{self, VolumeSnapshot, VolumeSnapshotSource, VolumeSnapshotSpec};

/// The snapshot of the source that attempt `attempt` reads, in the
/// source's namespace (a snapshot names a claim of its own namespace).
pub fn source_snapshot(plan: &Plan, attempt: u32) -> VolumeSnapshot {
    let source = &plan.spec.source;
    let name = names::snapshot_name(&plan.operation, attempt);
    VolumeSnapshot::new(
        labelled(plan, attempt, &source.namespace, name),
        VolumeSnapshotSpec {
            source: VolumeSnapshotSource {
                persistent_volume_claim_name: Some(source.name.clone()),
                volume_snapshot_content_name: None,
            },
            volume_snapshot_class_name: plan.source_method.snapshot_class.clone(),
        },
    )
}

/// The claim attempt `attempt`'s sender mounts: restored from its
/// snapshot, or cloned from the source. ReadWriteOnce (only the sender
/// mounts it), the plan's read class, and at least as big as the source
/// and the snapshot's `restore_size` (drivers may round a snapshot up).
pub fn read_claim(plan: &Plan, attempt: u32, restore_size: Option<&str>) -> PersistentVolumeClaim {
    let source = &plan.spec.source;
    let name = names::read_claim_name(&plan.operation, attempt);
    let data_source = match plan.source_method.method {
        Method::Clone => TypedLocalObjectReference {
            api_group: None,
            kind: "PersistentVolumeClaim".to_string(),
            name: source.name.clone(),
        },
        Method::Snapshot | Method::Direct => TypedLocalObjectReference {
            api_group: Some(snapshots::GROUP.to_string()),
            kind: "VolumeSnapshot".to_string(),
            name: names::snapshot_name(&plan.operation, attempt),
        },
    };
    let restore = restore_size.and_then(|q| Some((q, quantity::parse(q).ok()?)));
    let size = match restore {
        Some((q, bytes)) if bytes > plan.source.capacity_bytes => q.to_string(),
        _ => plan.source.capacity.clone(),
    };
    PersistentVolumeClaim {
        metadata: labelled(plan, attempt, &source.namespace, name),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_string()]),
            storage_class_name: plan.source_method.read_class.clone(),
            volume_mode: Some(plan.source.volume_mode.as_str().to_string()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_string(), Quantity(size))])),
                ..VolumeResourceRequirements::default()
            }),
            data_source: Some(data_source),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// The operation's labels, the source-copy component and the attempt.
fn labelled(
    plan: &Plan,
    attempt: u32,
    namespace: &str,
    name: String,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    let mut meta = metadata(&plan.operation, Component::SourceCopy, namespace, name);
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(names::ATTEMPT_KEY.to_string(), attempt.to_string());
    meta
}
