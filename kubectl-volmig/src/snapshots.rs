//! The `snapshot.storage.k8s.io/v1` kinds volmig uses, which k8s-openapi
//! does not carry (they are CRDs, installed with the external-snapshotter):
//! `VolumeSnapshot` and `VolumeSnapshotClass`, with the fields volmig
//! reads or writes; the rest of an object passes through untouched.
//!
//! Typed by hand, with `kube::Resource` implemented for each, so that
//! `Api<VolumeSnapshot>` works as `Api<Pod>` does, without deriving a
//! `CustomResource` (which would bring schemars for a schema never used).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// The API group of the snapshot kinds.
pub const GROUP: &str = "snapshot.storage.k8s.io";
/// The version volmig speaks.
pub const VERSION: &str = "v1";
/// On a `VolumeSnapshotClass`: `"true"` makes it its driver's default.
pub const DEFAULT_CLASS_ANNOTATION: &str = "snapshot.storage.kubernetes.io/is-default-class";

/// A request for a snapshot of a claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshot {
    #[serde(default = "snapshot_api_version")]
    pub api_version: String,
    #[serde(default = "snapshot_kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: VolumeSnapshotSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VolumeSnapshotStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotSpec {
    pub source: VolumeSnapshotSource,
    /// None: the default class of the source volume's driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_class_name: Option<String>,
}

/// Exactly one of the two is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_content_name: Option<String>,
}

/// Every field is absent until the snapshot controller writes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_volume_snapshot_content_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_to_use: Option<bool>,
    /// A quantity: the smallest claim the snapshot can be restored into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<SnapshotError>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotError {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

impl VolumeSnapshot {
    /// A new snapshot request, with its `apiVersion` and `kind`.
    pub fn new(metadata: ObjectMeta, spec: VolumeSnapshotSpec) -> VolumeSnapshot {
        VolumeSnapshot {
            api_version: snapshot_api_version(),
            kind: snapshot_kind(),
            metadata,
            spec,
            status: None,
        }
    }

    /// Whether the snapshot can be restored from.
    pub fn ready(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.ready_to_use)
            .unwrap_or(false)
    }

    /// The error the snapshot controller reported, if any.
    pub fn error(&self) -> Option<&str> {
        self.status.as_ref()?.error.as_ref()?.message.as_deref()
    }

    pub fn restore_size(&self) -> Option<&str> {
        self.status.as_ref()?.restore_size.as_deref()
    }
}

/// How snapshots of one CSI driver are taken.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotClass {
    #[serde(default = "class_api_version")]
    pub api_version: String,
    #[serde(default = "class_kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub driver: String,
    /// `Delete` or `Retain`.
    pub deletion_policy: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

impl VolumeSnapshotClass {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// Whether the class says it is its driver's default.
    pub fn is_default(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
            .is_some_and(|v| v == "true")
    }
}

fn snapshot_api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

fn snapshot_kind() -> String {
    "VolumeSnapshot".to_string()
}

fn class_api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

fn class_kind() -> String {
    "VolumeSnapshotClass".to_string()
}

/// `kube::Resource` for a kind of this group known at compile time.
macro_rules! snapshot_resource {
    ($ty:ty, $kind:literal, $plural:literal, $scope:ty) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }

            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }

            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(VERSION)
            }

            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

snapshot_resource!(
    VolumeSnapshot,
    "VolumeSnapshot",
    "volumesnapshots",
    k8s_openapi::NamespaceResourceScope
);
snapshot_resource!(
    VolumeSnapshotClass,
    "VolumeSnapshotClass",
    "volumesnapshotclasses",
    k8s_openapi::ClusterResourceScope
);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn paths_are_the_crds() {
        assert_eq!(
            VolumeSnapshot::url_path(&(), Some("prod")),
            "/apis/snapshot.storage.k8s.io/v1/namespaces/prod/volumesnapshots"
        );
        assert_eq!(
            VolumeSnapshotClass::url_path(&(), None),
            "/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses"
        );
    }

    #[test]
    fn a_snapshot_as_the_controller_writes_it_reads_back() {
        let text = r#"{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshot",
            "metadata":{"name":"s","namespace":"prod"},
            "spec":{"source":{"persistentVolumeClaimName":"data"},"volumeSnapshotClassName":"c"},
            "status":{"boundVolumeSnapshotContentName":"snapcontent-1","readyToUse":true,
                      "restoreSize":"1Gi","creationTime":"2026-11-26T10:00:00Z"}}"#;
        let snap: VolumeSnapshot = serde_json::from_str(text).unwrap();
        assert!(snap.ready());
        assert_eq!(snap.restore_size(), Some("1Gi"));
        assert_eq!(snap.error(), None);
        let failing: VolumeSnapshot = serde_json::from_str(
            r#"{"metadata":{"name":"s"},"spec":{"source":{"persistentVolumeClaimName":"d"}},
                "status":{"readyToUse":false,"error":{"message":"boom"}}}"#,
        )
        .unwrap();
        assert!(!failing.ready());
        assert_eq!(failing.error(), Some("boom"));
        assert_eq!(failing.api_version, "snapshot.storage.k8s.io/v1");
    }
}
