//! Printers for PersistentVolumeClaims, PersistentVolumes and StorageClasses.

use serde_json::Value;
use time::OffsetDateTime;

use super::{age, list, name, or, text};

pub(super) const PVC_COLUMNS: &str = "Name
    Status|string|phase represents the current phase of PersistentVolumeClaim.
    Volume|string|volumeName is the binding reference to the PersistentVolume backing this claim.
    Capacity|string|capacity represents the actual resources of the underlying volume.
    Access Modes|string|accessModes contains the actual access modes the volume backing the PVC has.
    StorageClass|string|StorageClass of the pvc
    VolumeAttributesClass|string|VolumeAttributesClass of the pvc
    Age
    +VolumeMode|string|volumeMode defines what type of volume is required by the claim.";
pub(super) const PV_COLUMNS: &str = "Name
    Capacity|string|capacity is the description of the persistent volume's resources and capacity.
    Access Modes|string|accessModes contains all ways the volume can be mounted.
    Reclaim Policy|string|persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.
    Status|string|phase indicates if a volume is available, bound to a claim, or released by a claim.
    Claim|string|claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim.
    StorageClass|string|StorageClass of the pv
    VolumeAttributesClass|string|VolumeAttributesClass of the pv
    Reason|string|reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.
    Age
    +VolumeMode|string|volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.";
pub(super) const STORAGE_CLASS_COLUMNS: &str = "Name
    Provisioner|string|provisioner indicates the type of the provisioner.
    ReclaimPolicy|string|reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class.
    VolumeBindingMode|string|volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.
    AllowVolumeExpansion|string|allowVolumeExpansion shows whether the storage class allow volume expand.
    Age";

pub(super) fn pvc_cells(pvc: &Value, now: OffsetDateTime) -> Vec<Value> {
    let volume = text(pvc, "spec.volumeName");
    let (capacity, modes) = match volume {
        "" => ("", String::new()),
        _ => (
            or(text(pvc, "status.capacity.storage"), "0"),
            access_modes(&pvc["status"]),
        ),
    };
    cells![
        name(pvc),
        volume_phase(pvc),
        volume,
        capacity,
        modes,
        storage_class_of(pvc),
        or(text(pvc, "spec.volumeAttributesClassName"), "<unset>"),
        age(pvc, now),
        or(text(pvc, "spec.volumeMode"), "Filesystem"),
    ]
}

pub(super) fn pv_cells(pv: &Value, now: OffsetDateTime) -> Vec<Value> {
    let claim = match &pv["spec"]["claimRef"] {
        claim @ Value::Object(_) => format!("{}/{}", text(claim, "namespace"), text(claim, "name")),
        _ => String::new(),
    };
    cells![
        name(pv),
        or(text(pv, "spec.capacity.storage"), "0"),
        access_modes(&pv["spec"]),
        or(text(pv, "spec.persistentVolumeReclaimPolicy"), "Retain"),
        volume_phase(pv),
        claim,
        storage_class_of(pv),
        or(text(pv, "spec.volumeAttributesClassName"), "<unset>"),
        text(pv, "status.reason"),
        age(pv, now),
        or(text(pv, "spec.volumeMode"), "Filesystem"),
    ]
}

/// A PV's or PVC's phase (`Pending` until set), or `Terminating` once deleted.
fn volume_phase(obj: &Value) -> &str {
    match text(obj, "metadata.deletionTimestamp") {
        "" => or(text(obj, "status.phase"), "Pending"),
        _ => "Terminating",
    }
}

/// A PV's or PVC's class: the beta annotation wins over `spec.storageClassName`.
fn storage_class_of(obj: &Value) -> &str {
    let annotations = &obj["metadata"]["annotations"];
    match annotations.get("volume.beta.kubernetes.io/storage-class") {
        Some(class) => class.as_str().unwrap_or_default(),
        None => text(obj, "spec.storageClassName"),
    }
}

/// `accessModes` abbreviated as `RWO,ROX,RWX,RWOP`, each once and in that order.
fn access_modes(section: &Value) -> String {
    let modes = list(section, "accessModes");
    let mut shown = Vec::new();
    for (mode, short) in [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ] {
        if modes.iter().any(|m| m == mode) {
            shown.push(short);
        }
    }
    shown.join(",")
}

pub(super) fn storage_class_cells(class: &Value, now: OffsetDateTime) -> Vec<Value> {
    let annotations = &class["metadata"]["annotations"];
    let default = annotations["storageclass.kubernetes.io/is-default-class"] == "true"
        || annotations["storageclass.beta.kubernetes.io/is-default-class"] == "true";
    cells![
        format!("{}{}", name(class), if default { " (default)" } else { "" }),
        text(class, "provisioner"),
        or(text(class, "reclaimPolicy"), "Delete"),
        or(text(class, "volumeBindingMode"), "Immediate"),
        class["allowVolumeExpansion"] == true,
        age(class, now),
    ]
}
