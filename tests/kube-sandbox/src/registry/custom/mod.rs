//! CustomResourceDefinitions as kube-apiserver's apiextensions server
//! serves them: each served version of a definition whose names are
//! accepted is a resource (`crdHandler` serves a version while
//! `NamesAccepted` or `Established` is true; discovery lists it once
//! `Established`), named by `status.acceptedNames`, with the version's
//! schema, subresources and printer columns. All versions share one
//! storage (conversion strategy `None`: only `apiVersion` changes).
//!
//! The store keeps an [`Index`] of them, rebuilt whenever a definition is
//! written, so a request never sees a resource its definition no longer
//! has.

mod schema;
mod version;

use std::sync::Arc;

use base64::prelude::{Engine as _, BASE64_STANDARD};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Resource, Text};

pub use schema::{default_fields, prune, schema_causes};
pub use version::compare as compare_versions;

pub const CRD_GROUP: &str = "apiextensions.k8s.io";
pub const CRD_PLURAL: &str = "customresourcedefinitions";
pub const CRD_KIND: &str = "CustomResourceDefinition";
/// The finalizer a definition gets on its first DELETE: it stays until
/// its custom resources are gone (the apiextensions finalizer controller).
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The verbs of a served custom resource, in the order the apiextensions
/// discovery controller lists them.
const VERBS: [&str; 8] = [
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
];
/// The verbs left while its definition is being deleted.
const TERMINATING_VERBS: [&str; 5] = ["delete", "deletecollection", "get", "list", "watch"];

/// What one served version of a definition adds to its [`Resource`].
#[derive(Debug, PartialEq, Eq)]
pub struct Definition {
    /// The definition's name, `plural.group`: also the store's key for its
    /// objects, whatever the version.
    pub name: String,
    pub list_kind: String,
    /// This version's `schema.openAPIV3Schema` (Null without one).
    pub schema: Value,
    /// `spec.preserveUnknownFields`: no pruning at all.
    pub preserve_unknown_fields: bool,
    /// This version's `additionalPrinterColumns`.
    pub columns: Vec<Value>,
    /// Listed by discovery (`Established`).
    pub established: bool,
    /// Being deleted: no creates, fewer verbs.
    pub terminating: bool,
    /// The version objects are stored in.
    pub storage_version: String,
    /// discovery's `storageVersionHash` of the storage version.
    pub storage_version_hash: String,
}

impl Definition {
    /// Whether this resource's version is the storage version.
    pub fn is_storage(&self, res: &Resource) -> bool {
        res.version == self.storage_version.as_str()
    }
}

/// Whether the definition has a condition `kind` with status True.
pub fn condition_true(crd: &Value, kind: &str) -> bool {
    crd["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// The storage version of a definition's spec, if exactly one is marked.
pub fn storage_version(crd: &Value) -> Option<&str> {
    let mut marked = versions(crd).filter(|v| v["storage"] == true);
    let first = marked.next()?;
    match marked.next() {
        None => first["name"].as_str(),
        Some(_) => None,
    }
}

fn versions(crd: &Value) -> impl Iterator<Item = &Value> {
    crd["spec"]["versions"].as_array().into_iter().flatten()
}

fn text(v: &Value) -> Text {
    Text::Owned(v.as_str().unwrap_or_default().to_string())
}

fn texts(v: &Value) -> Vec<Text> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect::<Vec<_>>()
}

/// `discovery.StorageVersionHash`: the first 8 bytes of the SHA-256 of
/// `group/version/kind`, in base64.
fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    let digest = Sha256::digest(format!("{group}/{version}/{kind}").as_bytes());
    BASE64_STANDARD.encode(&digest[..8])
}

/// The resources a stored definition serves: one per served version, none
/// until its names are accepted (or once it stops being established).
pub fn resources_of(crd: &Value) -> Vec<Resource> {
    let accepted = &crd["status"]["acceptedNames"];
    let served = condition_true(crd, "NamesAccepted") || condition_true(crd, "Established");
    let plural = accepted["plural"].as_str().unwrap_or_default();
    let Some(storage) = storage_version(crd) else {
        return Vec::new();
    };
    if !served || plural.is_empty() {
        return Vec::new();
    }
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let terminating = !crd["metadata"]["deletionTimestamp"].is_null();
    let verbs: &[&str] = if terminating {
        &TERMINATING_VERBS
    } else {
        &VERBS
    };
    let kind = accepted["kind"].as_str().unwrap_or_default();
    let hash_kind = spec["names"]["kind"].as_str().unwrap_or(kind);
    versions(crd)
        .filter(|v| v["served"] == true)
        .map(|v| {
            let version = v["name"].as_str().unwrap_or_default();
            let status = v["subresources"]["status"].is_object();
            Resource {
                group: Text::Owned(group.to_string()),
                version: Text::Owned(version.to_string()),
                plural: Text::Owned(plural.to_string()),
                singular: text(&accepted["singular"]),
                kind: Text::Owned(kind.to_string()),
                short_names: texts(&accepted["shortNames"]),
                namespaced: spec["scope"] == "Namespaced",
                subresources: if status {
                    vec![Text::Borrowed("status")]
                } else {
                    Vec::new()
                },
                categories: texts(&accepted["categories"]),
                verbs: verbs.iter().map(|v| Text::Borrowed(*v)).collect(),
                custom: Some(Arc::new(Definition {
                    name: crd["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    list_kind: accepted["listKind"]
                        .as_str()
                        .filter(|k| !k.is_empty())
                        .map_or_else(|| format!("{kind}List"), str::to_string),
                    schema: v["schema"]["openAPIV3Schema"].clone(),
                    preserve_unknown_fields: spec["preserveUnknownFields"] == true,
                    columns: v["additionalPrinterColumns"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default(),
                    established: condition_true(crd, "Established"),
                    terminating,
                    storage_version: storage.to_string(),
                    storage_version_hash: storage_version_hash(group, storage, hash_kind),
                })),
            }
        })
        .collect()
}

/// The custom resources the stored definitions serve.
#[derive(Debug, Default)]
pub struct Index {
    resources: Vec<Arc<Resource>>,
}

impl Index {
    /// The index of these definitions.
    pub fn build<'a>(crds: impl IntoIterator<Item = &'a Value>) -> Index {
        Index {
            resources: crds
                .into_iter()
                .flat_map(resources_of)
                .map(Arc::new)
                .collect(),
        }
    }

    /// The resource `plural` of `group`/`version`, as a URL names it.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Resource>> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned()
    }

    /// The storage version's resource of the definition `name` (the key
    /// its objects are stored under).
    pub fn storage_of(&self, name: &str) -> Option<Arc<Resource>> {
        self.resources
            .iter()
            .find(|r| {
                r.custom
                    .as_ref()
                    .is_some_and(|d| d.name == name && d.is_storage(r))
            })
            .or_else(|| {
                self.resources
                    .iter()
                    .find(|r| r.custom.as_ref().is_some_and(|d| d.name == name))
            })
            .cloned()
    }

    /// Every served custom resource, a definition's versions together.
    pub fn resources(&self) -> &[Arc<Resource>] {
        &self.resources
    }

    /// One resource per definition (see [`Index::storage_of`]): each
    /// custom resource's objects once, whatever its versions.
    pub fn stored(&self) -> Vec<Arc<Resource>> {
        let mut names: Vec<&str> = Vec::new();
        for r in &self.resources {
            if let Some(d) = r
                .custom
                .as_ref()
                .filter(|d| !names.contains(&d.name.as_str()))
            {
                names.push(&d.name);
            }
        }
        names
            .into_iter()
            .filter_map(|n| self.storage_of(n))
            .collect()
    }
}

#[cfg(test)]
mod tests;
