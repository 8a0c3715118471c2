//! The resources the sandbox serves: names, kinds, scopes and verbs as
//! discovery reports them, and the per-kind rules the API server applies on
//! write (defaults, validation, immutable fields).
//!
//! Built-in kinds come from a static table ([`RESOURCES`]); the kinds of
//! CustomResourceDefinitions are made from the stored definitions
//! ([`custom`]) and owned by the store, which rebuilds them on every write
//! of a definition. Both are one [`Resource`]: its names are `Cow`s,
//! borrowed from the table for built-ins and owned for custom resources,
//! so a definition that goes frees what it took.

pub mod custom;
pub mod rules;

use std::borrow::Cow;
use std::ops::Deref;
use std::sync::{Arc, LazyLock};

pub use rules::{admit, default_object, prepare_create, validate_create, validate_update};

/// A name: borrowed from the static table, or owned by a custom resource.
pub type Text = Cow<'static, str>;

/// One served resource type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// "" for the core group.
    pub group: Text,
    pub version: Text,
    pub plural: Text,
    pub singular: Text,
    pub kind: Text,
    pub short_names: Vec<Text>,
    pub namespaced: bool,
    /// Subresources besides the object itself ("status", "log", "scale").
    pub subresources: Vec<Text>,
    pub categories: Vec<Text>,
    /// The verbs discovery lists ([`VERBS`] for stored kinds; `create`
    /// only for reviews, which are answered, never stored).
    pub verbs: Vec<Text>,
    /// The definition a custom resource is served from; None for the
    /// built-in kinds.
    pub custom: Option<Arc<custom::Definition>>,
}

impl Resource {
    /// `v1` or `apps/v1`, as objects carry it.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn has_subresource(&self, sub: &str) -> bool {
        self.subresources.iter().any(|s| s == sub)
    }

    /// The kind, for the rules that apply to built-in kinds only: "" for a
    /// custom resource, so that a CRD whose kind is `Pod` in its own group
    /// gets none of a Pod's defaults, validation or printing.
    pub fn builtin_kind(&self) -> &str {
        match self.custom {
            None => &self.kind,
            Some(_) => "",
        }
    }

    /// `<Kind>List`, or a custom resource's `listKind`.
    pub fn list_kind(&self) -> String {
        match &self.custom {
            Some(def) => def.list_kind.clone(),
            None => format!("{}List", self.kind),
        }
    }

    /// What the store files the objects under: the plural for built-ins,
    /// `plural.group` (the definition's name) for custom resources, whose
    /// versions share one storage and whose plurals may repeat a
    /// built-in's in another group.
    pub fn store_key(&self) -> Text {
        match &self.custom {
            None => self.plural.clone(),
            Some(def) => Cow::Owned(def.name.clone()),
        }
    }
}

/// A resource a request names: one of the static table's, or a custom
/// resource the store's definitions serve (shared, not copied).
#[derive(Debug, Clone)]
pub enum Served {
    Builtin(&'static Resource),
    Custom(Arc<Resource>),
}

impl Deref for Served {
    type Target = Resource;

    fn deref(&self) -> &Resource {
        match self {
            Served::Builtin(r) => r,
            Served::Custom(r) => r,
        }
    }
}

/// A row of the static table: a built-in kind as discovery lists it.
struct Spec {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    short_names: &'static [&'static str],
    namespaced: bool,
    subresources: &'static [&'static str],
    categories: &'static [&'static str],
    verbs: &'static [&'static str],
}

impl Spec {
    fn resource(&self) -> Resource {
        let names =
            |list: &'static [&'static str]| list.iter().map(|s| Cow::Borrowed(*s)).collect();
        Resource {
            group: Cow::Borrowed(self.group),
            version: Cow::Borrowed(self.version),
            plural: Cow::Borrowed(self.plural),
            singular: Cow::Borrowed(self.singular),
            kind: Cow::Borrowed(self.kind),
            short_names: names(self.short_names),
            namespaced: self.namespaced,
            subresources: names(self.subresources),
            categories: names(self.categories),
            verbs: names(self.verbs),
            custom: None,
        }
    }
}

/// The verbs every resource here allows (discovery lists them; kubectl
/// checks `watch`/`patch` before it uses them).
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

const fn core(
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    short_names: &'static [&'static str],
    namespaced: bool,
    subresources: &'static [&'static str],
) -> Spec {
    Spec {
        group: "",
        version: "v1",
        plural,
        singular,
        kind,
        short_names,
        namespaced,
        subresources,
        categories: &[],
        verbs: VERBS,
    }
}

/// A workload of `apps/v1`: namespaced, scalable, in the `all` category.
const fn apps(
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    short_names: &'static [&'static str],
) -> Spec {
    Spec {
        group: "apps",
        categories: ALL,
        ..core(
            plural,
            singular,
            kind,
            short_names,
            true,
            &["status", "scale"],
        )
    }
}

const ALL: &[&str] = &["all"];

/// Every built-in resource served, in discovery order.
pub static RESOURCES: LazyLock<Vec<Resource>> =
    LazyLock::new(|| TABLE.iter().map(Spec::resource).collect());

static TABLE: &[Spec] = &[
    core(
        "namespaces",
        "namespace",
        "Namespace",
        &["ns"],
        false,
        &["status"],
    ),
    core("nodes", "node", "Node", &["no"], false, &["status"]),
    Spec {
        categories: ALL,
        ..core(
            "pods",
            "pod",
            "Pod",
            &["po"],
            true,
            &["status", "log", "portforward"],
        )
    },
    Spec {
        categories: ALL,
        ..core(
            "services",
            "service",
            "Service",
            &["svc"],
            true,
            &["status"],
        )
    },
    core("endpoints", "endpoints", "Endpoints", &["ep"], true, &[]),
    core("configmaps", "configmap", "ConfigMap", &["cm"], true, &[]),
    core("secrets", "secret", "Secret", &[], true, &[]),
    // `token`: TokenRequest (authentication.k8s.io/v1), create only.
    core(
        "serviceaccounts",
        "serviceaccount",
        "ServiceAccount",
        &["sa"],
        true,
        &["token"],
    ),
    core("events", "event", "Event", &["ev"], true, &[]),
    core(
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        &["pvc"],
        true,
        &["status"],
    ),
    core(
        "persistentvolumes",
        "persistentvolume",
        "PersistentVolume",
        &["pv"],
        false,
        &["status"],
    ),
    Spec {
        categories: ALL,
        ..core(
            "replicationcontrollers",
            "replicationcontroller",
            "ReplicationController",
            &["rc"],
            true,
            &["status", "scale"],
        )
    },
    apps("deployments", "deployment", "Deployment", &["deploy"]),
    apps("statefulsets", "statefulset", "StatefulSet", &["sts"]),
    apps("replicasets", "replicaset", "ReplicaSet", &["rs"]),
    // A DaemonSet has no scale subresource: its size is the nodes'.
    Spec {
        subresources: &["status"],
        ..apps("daemonsets", "daemonset", "DaemonSet", &["ds"])
    },
    Spec {
        group: "batch",
        version: "v1",
        plural: "jobs",
        singular: "job",
        kind: "Job",
        short_names: &[],
        namespaced: true,
        subresources: &["status"],
        categories: ALL,
        verbs: VERBS,
    },
    Spec {
        group: "autoscaling",
        version: "v2",
        plural: "horizontalpodautoscalers",
        singular: "horizontalpodautoscaler",
        kind: "HorizontalPodAutoscaler",
        short_names: &["hpa"],
        namespaced: true,
        subresources: &["status"],
        categories: ALL,
        verbs: VERBS,
    },
    Spec {
        group: "storage.k8s.io",
        version: "v1",
        plural: "storageclasses",
        singular: "storageclass",
        kind: "StorageClass",
        short_names: &["sc"],
        namespaced: false,
        subresources: &[],
        categories: &[],
        verbs: VERBS,
    },
    rbac("roles", "role", "Role", true),
    rbac("rolebindings", "rolebinding", "RoleBinding", true),
    rbac("clusterroles", "clusterrole", "ClusterRole", false),
    rbac(
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        false,
    ),
    Spec {
        group: "authorization.k8s.io",
        verbs: &["create"],
        ..core(
            SELF_SUBJECT_ACCESS_REVIEWS,
            "selfsubjectaccessreview",
            "SelfSubjectAccessReview",
            &[],
            false,
            &[],
        )
    },
    // CustomResourceDefinitions (apiextensions.k8s.io/v1), whose served
    // versions become resources ([`custom`]).
    Spec {
        group: custom::CRD_GROUP,
        version: "v1",
        plural: custom::CRD_PLURAL,
        singular: "customresourcedefinition",
        kind: custom::CRD_KIND,
        short_names: &["crd", "crds"],
        namespaced: false,
        subresources: &["status"],
        categories: &[],
        verbs: VERBS,
    },
    // The kinds of the external-snapshotter's CRDs (`client/config/crd`):
    // no categories, a status subresource on snapshots and contents.
    snapshot(
        "volumesnapshots",
        "volumesnapshot",
        "VolumeSnapshot",
        &["vs"],
        true,
        &["status"],
    ),
    snapshot(
        "volumesnapshotcontents",
        "volumesnapshotcontent",
        "VolumeSnapshotContent",
        &["vsc", "vscs"],
        false,
        &["status"],
    ),
    snapshot(
        "volumesnapshotclasses",
        "volumesnapshotclass",
        "VolumeSnapshotClass",
        &["vsclass", "vsclasses"],
        false,
        &[],
    ),
];

/// The group of the CSI snapshot CRDs, served unless the sandbox is
/// configured as a cluster without them.
pub const SNAPSHOT_GROUP: &str = "snapshot.storage.k8s.io";

const fn snapshot(
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    short_names: &'static [&'static str],
    namespaced: bool,
    subresources: &'static [&'static str],
) -> Spec {
    Spec {
        group: SNAPSHOT_GROUP,
        ..core(
            plural,
            singular,
            kind,
            short_names,
            namespaced,
            subresources,
        )
    }
}

/// The review the API server answers for the requesting identity.
pub const SELF_SUBJECT_ACCESS_REVIEWS: &str = "selfsubjectaccessreviews";

/// A kind of `rbac.authorization.k8s.io/v1`: stored, returned, and enforced
/// for service-account requests ([`crate::auth::rbac`]).
const fn rbac(
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> Spec {
    Spec {
        group: "rbac.authorization.k8s.io",
        ..core(plural, singular, kind, &[], namespaced, &[])
    }
}

/// The group versions served, in discovery order ("" = core).
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES.iter() {
        if !out.contains(&(&*r.group, &*r.version)) {
            out.push((&r.group, &r.version));
        }
    }
    out
}

/// The resource `plural` of `group`/`version`, as a URL names it.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource for an object's `apiVersion` and `kind`.
pub fn by_kind(api_version: &str, kind: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.kind == kind && r.api_version() == api_version)
}

/// Shorthand for the controllers: the resource with this plural (plurals are
/// unique across the groups served).
pub fn get(plural: &str) -> &'static Resource {
    RESOURCES
        .iter()
        .find(|r| r.plural == plural)
        .unwrap_or_else(|| panic!("kube-sandbox serves no resource {plural:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_and_short_names_are_unique() {
        let mut names: Vec<&str> = RESOURCES.iter().map(|r| &*r.plural).collect();
        names.extend(
            RESOURCES
                .iter()
                .flat_map(|r| r.short_names.iter().map(|s| &**s)),
        );
        let before = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), before);
    }

    #[test]
    fn lookups_agree() {
        let pods = find("", "v1", "pods").expect("pods served");
        assert_eq!(pods.api_version(), "v1");
        assert_eq!(
            by_kind("apps/v1", "StatefulSet").map(|r| &*r.plural),
            Some("statefulsets")
        );
        assert!(by_kind("v1", "StatefulSet").is_none());
        assert_eq!(group_versions()[0], ("", "v1"));
        assert!(group_versions().contains(&("storage.k8s.io", "v1")));
        assert_eq!(
            by_kind("rbac.authorization.k8s.io/v1", "ClusterRoleBinding").map(|r| r.namespaced),
            Some(false)
        );
        assert_eq!(get(SELF_SUBJECT_ACCESS_REVIEWS).verbs, ["create"]);
        let crds = find("apiextensions.k8s.io", "v1", "customresourcedefinitions");
        assert_eq!(
            crds.map(|r| (r.namespaced, r.store_key(), r.builtin_kind())),
            Some((
                false,
                "customresourcedefinitions".into(),
                "CustomResourceDefinition"
            ))
        );
    }
}
