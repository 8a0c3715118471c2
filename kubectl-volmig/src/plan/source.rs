//! Where the sender reads (`--copy-method`, issue 24): the source claim
//! itself, a claim restored from a VolumeSnapshot of it, or a CSI clone of
//! it. Pure: the choice and its refusals are tested on fixtures.
//!
//! `auto` reads the source directly unless no other pod may mount it (a
//! ReadWriteOncePod claim in use); then a snapshot when the cluster can
//! take one of the source's CSI driver, else a clone. The plan says which
//! and why, and the record keeps what `auto` resolved to, so a resumed
//! operation never changes method under a running attempt.
//!
//! What can be known before anything is created is checked here: the
//! snapshot API, the class (asked for, or the driver's one default), a CSI
//! source, a class for the temporary claim. Whether a driver clones cannot
//! be asked of any API object (a `CSIDriver` does not say): a clone the
//! driver refuses fails the first attempt with the provisioner's words,
//! for good.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use serde::{Deserialize, Serialize};

use super::{placement, Refusal};
use crate::snapshots::VolumeSnapshotClass;
use crate::spec::{CopyMethod, MigrationSpec};

/// The VolumeSnapshot API as the cluster serves it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SnapshotSupport {
    /// Discovery lists `snapshot.storage.k8s.io/v1`.
    pub api: bool,
    /// Every VolumeSnapshotClass (read only when `api`).
    pub classes: Vec<VolumeSnapshotClass>,
    /// Why the classes could not be listed (forbidden, say), if so.
    pub classes_error: Option<String>,
}

/// What the sender mounts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Method {
    /// The source claim.
    #[default]
    Direct,
    /// A claim restored from a fresh VolumeSnapshot of the source.
    Snapshot,
    /// A fresh CSI clone of the source.
    Clone,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Direct => "direct",
            Method::Snapshot => "snapshot",
            Method::Clone => "clone",
        }
    }

    /// Whether the sender reads a copy made for its attempt.
    pub fn reads_copy(self) -> bool {
        self != Method::Direct
    }
}

/// Where the sender reads, as planned, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceMethod {
    pub method: Method,
    /// The VolumeSnapshotClass (snapshot only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_class: Option<String>,
    /// The storage class of the temporary claim the sender mounts
    /// (snapshot and clone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_class: Option<String>,
    /// Why, in words.
    #[serde(default)]
    pub reason: String,
}

impl SourceMethod {
    fn direct(reason: &str) -> SourceMethod {
        SourceMethod {
            reason: reason.to_string(),
            ..SourceMethod::default()
        }
    }
}

/// The source, as the choice needs it.
pub struct Source<'a> {
    pub claim: &'a PersistentVolumeClaim,
    pub volume: &'a PersistentVolume,
    /// The source's storage class, if it has one.
    pub storage_class: Option<&'a str>,
    pub pods: &'a [Pod],
}

/// Where the sender reads for `spec`, or why it cannot read at all.
pub fn source_method(
    spec: &MigrationSpec,
    source: &Source<'_>,
    snapshots: &SnapshotSupport,
    storage_classes: &[StorageClass],
) -> Result<SourceMethod, Refusal> {
    let holder = rwop_holder(spec, source);
    match spec.transfer.copy_method {
        CopyMethod::Direct => match holder {
            Some(pod) => Err(in_use(spec, pod, None)),
            None => Ok(SourceMethod::direct("--copy-method direct")),
        },
        CopyMethod::Snapshot => snapshot(spec, source, snapshots, storage_classes, "asked for"),
        CopyMethod::Clone => clone(source, storage_classes, "asked for"),
        CopyMethod::Auto => {
            let Some(pod) = holder else {
                return Ok(SourceMethod::direct(""));
            };
            let why = format!(
                "the ReadWriteOncePod source is in use by pod {pod}, and no other pod may mount it"
            );
            snapshot(spec, source, snapshots, storage_classes, &why).or_else(|no_snapshot| {
                // A clone needs no API beyond the claim's; a driver that
                // cannot take a snapshot here may still clone.
                clone(source, storage_classes, &why)
                    .map_err(|no_clone| in_use(spec, pod, Some((no_snapshot, no_clone))))
            })
        }
    }
}

/// The pod that holds a ReadWriteOncePod source, if one does.
fn rwop_holder(spec: &MigrationSpec, source: &Source<'_>) -> Option<String> {
    let modes = placement::access_modes(source.claim, Some(source.volume));
    if !modes.iter().any(|m| m == "ReadWriteOncePod") {
        return None;
    }
    let claim = &spec.source;
    let users = placement::mounting_pods(&claim.namespace, &claim.name, source.pods);
    let holder = placement::preferred(&users).or_else(|| users.first().copied())?;
    Some(holder.metadata.name.clone().unwrap_or_default())
}

fn in_use(spec: &MigrationSpec, pod: String, no_copy: Option<(Refusal, Refusal)>) -> Refusal {
    Refusal::SourceInUseReadWriteOncePod {
        namespace: spec.source.namespace.clone(),
        name: spec.source.name.clone(),
        pod,
        no_copy: no_copy
            .map(|(snapshot, clone)| format!("no snapshot ({snapshot}); no clone ({clone})")),
    }
}

fn snapshot(
    spec: &MigrationSpec,
    source: &Source<'_>,
    snapshots: &SnapshotSupport,
    storage_classes: &[StorageClass],
    why: &str,
) -> Result<SourceMethod, Refusal> {
    if !snapshots.api {
        return Err(Refusal::NoSnapshotApi);
    }
    let driver = csi_driver(source, "snapshot")?;
    let class = snapshot_class(spec, driver, snapshots)?;
    let read_class = read_class(source, driver, storage_classes)?;
    Ok(SourceMethod {
        method: Method::Snapshot,
        reason: format!(
            "{why}: the sender reads a claim restored from a VolumeSnapshot (class {class}) \
             taken for each attempt"
        ),
        snapshot_class: Some(class),
        read_class: Some(read_class),
    })
}

fn clone(
    source: &Source<'_>,
    storage_classes: &[StorageClass],
    why: &str,
) -> Result<SourceMethod, Refusal> {
    let driver = csi_driver(source, "clone")?;
    let read_class = read_class(source, driver, storage_classes)?;
    Ok(SourceMethod {
        method: Method::Clone,
        reason: format!(
            "{why}: the sender reads a clone of the source made for each attempt \
             (driver {driver} must support cloning; if it does not, the first attempt fails with \
             its provisioner's message)"
        ),
        snapshot_class: None,
        read_class: Some(read_class),
    })
}

/// The source volume's CSI driver: only CSI volumes are snapshotted or
/// cloned.
fn csi_driver<'a>(source: &Source<'a>, method: &str) -> Result<&'a str, Refusal> {
    let spec = source.volume.spec.as_ref();
    let driver = spec.and_then(|s| s.csi.as_ref()).map(|c| c.driver.as_str());
    driver.ok_or_else(|| Refusal::NotCsi {
        volume: source.volume.metadata.name.clone().unwrap_or_default(),
        kind: spec.map(volume_kind).unwrap_or("unknown").to_string(),
        method: method.to_string(),
    })
}

/// What kind of volume a PV is, for the refusal's words.
fn volume_kind(spec: &k8s_openapi::api::core::v1::PersistentVolumeSpec) -> &'static str {
    [
        (spec.host_path.is_some(), "hostPath"),
        (spec.local.is_some(), "local"),
        (spec.nfs.is_some(), "nfs"),
        (spec.iscsi.is_some(), "iscsi"),
        (spec.fc.is_some(), "fc"),
    ]
    .into_iter()
    .find_map(|(set, kind)| set.then_some(kind))
    .unwrap_or("in-tree")
}

/// `--snapshot-class`, which must be of the source's driver, or else the
/// driver's one default class.
fn snapshot_class(
    spec: &MigrationSpec,
    driver: &str,
    snapshots: &SnapshotSupport,
) -> Result<String, Refusal> {
    let of_driver: Vec<&VolumeSnapshotClass> = snapshots
        .classes
        .iter()
        .filter(|c| c.driver == driver)
        .collect();
    let names = |classes: &[&VolumeSnapshotClass]| -> Vec<String> {
        let mut names: Vec<String> = classes.iter().map(|c| c.name().to_string()).collect();
        names.sort();
        names
    };
    if let Some(asked) = &spec.transfer.snapshot_class {
        return match snapshots.classes.iter().find(|c| c.name() == asked) {
            Some(c) if c.driver == driver => Ok(asked.clone()),
            Some(c) => Err(Refusal::SnapshotClassDriver {
                name: asked.clone(),
                class_driver: c.driver.clone(),
                driver: driver.to_string(),
                classes: names(&of_driver),
            }),
            None => Err(Refusal::SnapshotClassNotFound {
                name: asked.clone(),
                driver: driver.to_string(),
                classes: names(&of_driver),
                unreadable: snapshots.classes_error.clone(),
            }),
        };
    }
    let defaults: Vec<&VolumeSnapshotClass> = of_driver
        .iter()
        .copied()
        .filter(|c| c.is_default())
        .collect();
    match defaults.as_slice() {
        [one] => Ok(one.name().to_string()),
        _ => Err(Refusal::NoSnapshotClass {
            driver: driver.to_string(),
            classes: names(&of_driver),
            defaults: names(&defaults),
            unreadable: snapshots.classes_error.clone(),
        }),
    }
}

/// The storage class of the temporary claim: the source's, else a class
/// of the source's driver (the cluster's default first), since the
/// driver's provisioner is what restores a snapshot or clones.
fn read_class(
    source: &Source<'_>,
    driver: &str,
    storage_classes: &[StorageClass],
) -> Result<String, Refusal> {
    let of_driver = |c: &&StorageClass| c.provisioner == driver;
    if let Some(own) = source.storage_class {
        if storage_classes
            .iter()
            .filter(of_driver)
            .any(|c| c.metadata.name.as_deref() == Some(own))
        {
            return Ok(own.to_string());
        }
    }
    let mut candidates: Vec<&StorageClass> = storage_classes.iter().filter(of_driver).collect();
    candidates.sort_by_key(|c| (!is_default_class(c), c.metadata.name.clone()));
    candidates
        .first()
        .and_then(|c| c.metadata.name.clone())
        .ok_or_else(|| Refusal::NoClassForDriver {
            driver: driver.to_string(),
            source_class: source.storage_class.map(str::to_string),
        })
}

fn is_default_class(class: &StorageClass) -> bool {
    class
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("storageclass.kubernetes.io/is-default-class"))
        .is_some_and(|v| v == "true")
}
