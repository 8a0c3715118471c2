//! The destination claim, as volmig creates it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{is_label_value, metadata, string_map};
use crate::names::{self, Component};
use crate::plan::Plan;

/// On a destination claim volmig created: the source claim (`ns.name`).
/// Always set; the [`names::SOURCE_KEY`] label carries the same value only
/// when it is a valid label value (63 characters at most).
pub const SOURCE_ANNOTATION: &str = names::SOURCE_KEY;

/// The destination claim of `plan`: its namespace, name, class, size and
/// access modes, a filesystem volume, labelled as the operation's
/// destination and with the source claim it is a copy of.
///
/// Only for a plan that creates the claim: a reused claim is left as it is.
pub fn destination_claim(plan: &Plan) -> PersistentVolumeClaim {
    let op = plan.operation.as_str();
    let dest = &plan.destination;
    let source = format!("{}.{}", plan.spec.source.namespace, plan.spec.source.name);

    let mut meta = metadata(
        op,
        Component::Destination,
        &dest.namespace,
        dest.name.clone(),
    );
    if is_label_value(&source) {
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(names::SOURCE_KEY.to_string(), source.clone());
    }
    meta.annotations = Some(string_map([
        (names::OPERATION_KEY, op),
        (SOURCE_ANNOTATION, &source),
    ]));

    PersistentVolumeClaim {
        metadata: meta,
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(dest.access_modes.clone()),
            storage_class_name: dest.storage_class.clone(),
            volume_mode: Some(dest.volume_mode.as_str().to_string()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(dest.size.clone()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}
