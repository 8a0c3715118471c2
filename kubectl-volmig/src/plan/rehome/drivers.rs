//! The CSI drivers whose own objects record the node that owns a volume
//! (docs/design-rehome.md §6): a rehome rewrites them too, or the driver's
//! node agent on the new node refuses to mount the volume ("volume is owned
//! by different node"). Pure: which kind, which fields, which values.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Target;

/// A kind of object one CSI driver keeps per volume, named as the PV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverKind {
    /// The CSI driver (`spec.csi.driver` of its PVs).
    pub driver: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    /// The field that names the owning node.
    pub owner_field: &'static [&'static str],
    /// The node label whose value the driver's node agent takes as its
    /// id (the PV's topology key); the node's name when the node lacks it.
    pub owner_label: &'static str,
    /// The field `--pool` rewrites, when the driver has one.
    pub pool_field: Option<&'static [&'static str]>,
}

impl DriverKind {
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }
}

/// OpenEBS LocalPV-ZFS, LocalPV-LVM and TopoLVM, as read 2026-11-26.
pub const KINDS: &[DriverKind] = &[
    DriverKind {
        driver: "zfs.csi.openebs.io",
        group: "zfs.openebs.io",
        version: "v1",
        kind: "ZFSVolume",
        plural: "zfsvolumes",
        namespaced: true,
        owner_field: &["spec", "ownerNodeID"],
        owner_label: "openebs.io/nodeid",
        pool_field: Some(&["spec", "poolName"]),
    },
    DriverKind {
        driver: "local.csi.openebs.io",
        group: "local.openebs.io",
        version: "v1alpha1",
        kind: "LVMVolume",
        plural: "lvmvolumes",
        namespaced: true,
        owner_field: &["spec", "ownerNodeID"],
        owner_label: "openebs.io/nodename",
        pool_field: Some(&["spec", "volGroup"]),
    },
    DriverKind {
        driver: "topolvm.io",
        group: "topolvm.io",
        version: "v1",
        kind: "LogicalVolume",
        plural: "logicalvolumes",
        namespaced: false,
        owner_field: &["spec", "nodeName"],
        owner_label: "topology.topolvm.io/node",
        pool_field: None,
    },
];

/// The kind of object `driver` keeps per volume, if it keeps one.
pub fn kind_of(driver: &str) -> Option<&'static DriverKind> {
    KINDS.iter().find(|k| k.driver == driver)
}

/// One driver object to rewrite: written ahead in the record, the old
/// values kept for a rollback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriverObject {
    pub api_version: String,
    pub kind: String,
    pub plural: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub fields: Vec<FieldChange>,
}

impl DriverObject {
    /// `ZFSVolume openebs/pvc-1`.
    pub fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

/// One field of a driver object: its path and both values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldChange {
    pub path: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<String>,
    pub new: String,
}

impl FieldChange {
    /// `spec.ownerNodeID`.
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }
}

/// Why the driver's objects cannot be rewritten as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// `--topology` with another key than the driver's: the node that owns
    /// the volume is not known.
    #[error(
        "{kind} {name} records the node that owns the volume, and --topology {key}=... does not \
         say which node that is: use --to-node, or --topology {owner_label}=NODE-ID"
    )]
    OwnerUnknown {
        kind: String,
        name: String,
        key: String,
        owner_label: String,
    },
    #[error("--pool: {kind} has no pool field; only ZFSVolume (spec.poolName) and LVMVolume (spec.volGroup) do")]
    NoPool { kind: String },
}

impl DriverError {
    /// Never: the same objects and flags give the same answer.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// The id of the node that will own the volume, as `kind`'s node agent
/// knows it.
pub fn owner(kind: &DriverKind, name: &str, target: &Target<'_>) -> Result<String, DriverError> {
    match target {
        Target::Node(node) => {
            let labels = node.metadata.labels.as_ref();
            let label = labels.and_then(|l| l.get(kind.owner_label));
            Ok(label
                .cloned()
                .unwrap_or_else(|| node.metadata.name.clone().unwrap_or_default()))
        }
        Target::Topology { key, value } if *key == kind.owner_label => Ok(value.to_string()),
        Target::Topology { key, .. } => Err(DriverError::OwnerUnknown {
            kind: kind.kind.to_string(),
            name: name.to_string(),
            key: key.to_string(),
            owner_label: kind.owner_label.to_string(),
        }),
    }
}

/// The changes that point `object` (of `kind`) at `owner` and, with
/// `--pool`, at `pool`; fields already so are left out.
pub fn rewrite(
    kind: &DriverKind,
    object: &Value,
    owner: &str,
    pool: Option<&str>,
) -> Result<DriverObject, DriverError> {
    let mut fields = vec![change(object, kind.owner_field, owner)];
    if let Some(pool) = pool {
        let path = kind.pool_field.ok_or_else(|| DriverError::NoPool {
            kind: kind.kind.to_string(),
        })?;
        fields.push(change(object, path, pool));
    }
    fields.retain(|f| f.old.as_deref() != Some(f.new.as_str()));
    let meta = &object["metadata"];
    Ok(DriverObject {
        api_version: kind.api_version(),
        kind: kind.kind.to_string(),
        plural: kind.plural.to_string(),
        namespace: meta["namespace"].as_str().map(str::to_string),
        name: meta["name"].as_str().unwrap_or_default().to_string(),
        fields,
    })
}

fn change(object: &Value, path: &[&str], new: &str) -> FieldChange {
    FieldChange {
        path: path.iter().map(|p| p.to_string()).collect(),
        old: read(object, path).map(str::to_string),
        new: new.to_string(),
    }
}

/// The string at `path` in `object`.
pub fn read<'a, S: AsRef<str>>(object: &'a Value, path: &[S]) -> Option<&'a str> {
    path.iter()
        .try_fold(object, |v, p| v.get(p.as_ref()))
        .and_then(Value::as_str)
}

/// A JSON merge patch that sets every field to its new value (`back`:
/// to its old one; a field that had none is removed), guarded by
/// `resource_version` when given.
pub fn patch(object: &DriverObject, back: bool, resource_version: Option<&str>) -> Value {
    let mut patch = serde_json::json!({});
    for f in &object.fields {
        let value = match back {
            false => Value::String(f.new.clone()),
            true => f.old.clone().map_or(Value::Null, Value::String),
        };
        let mut at = &mut patch;
        for (i, p) in f.path.iter().enumerate() {
            if i + 1 == f.path.len() {
                at[p.as_str()] = value.clone();
            } else {
                at = &mut at[p.as_str()];
            }
        }
    }
    if let Some(rv) = resource_version {
        patch["metadata"]["resourceVersion"] = Value::String(rv.to_string());
    }
    patch
}

/// Whether `object` shows every field at its new value (`back`: its old).
pub fn applied(object: &DriverObject, seen: &Value, back: bool) -> bool {
    object.fields.iter().all(|f| {
        let want = if back {
            f.old.as_deref()
        } else {
            Some(f.new.as_str())
        };
        read(seen, &f.path) == want
    })
}
