//! The resources the sandbox serves: names, kinds, scopes and verbs as
//! discovery reports them, and the per-kind rules the API server applies on
//! write (defaults, validation, immutable fields).

pub mod rules;

pub use rules::{admit, default_object, validate_create, validate_update};

/// One served resource type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    /// "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub short_names: &'static [&'static str],
    pub namespaced: bool,
    /// Subresources besides the object itself ("status", "log", "scale").
    pub subresources: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// The verbs discovery lists ([`VERBS`] for stored kinds; `create`
    /// only for reviews, which are answered, never stored).
    pub verbs: &'static [&'static str],
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
        self.subresources.contains(&sub)
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
) -> Resource {
    Resource {
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
) -> Resource {
    Resource {
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

/// Every resource served, in discovery order.
pub static RESOURCES: &[Resource] = &[
    core(
        "namespaces",
        "namespace",
        "Namespace",
        &["ns"],
        false,
        &["status"],
    ),
    core("nodes", "node", "Node", &["no"], false, &["status"]),
    Resource {
        categories: ALL,
        ..core("pods", "pod", "Pod", &["po"], true, &["status", "log"])
    },
    Resource {
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
    Resource {
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
    Resource {
        subresources: &["status"],
        ..apps("daemonsets", "daemonset", "DaemonSet", &["ds"])
    },
    Resource {
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
    Resource {
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
    Resource {
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
    Resource {
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
) -> Resource {
    Resource {
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
) -> Resource {
    Resource {
        group: "rbac.authorization.k8s.io",
        ..core(plural, singular, kind, &[], namespaced, &[])
    }
}

/// The group versions served, in discovery order ("" = core).
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
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
        let mut names: Vec<&str> = RESOURCES.iter().map(|r| r.plural).collect();
        names.extend(RESOURCES.iter().flat_map(|r| r.short_names.iter().copied()));
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
            by_kind("apps/v1", "StatefulSet").map(|r| r.plural),
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
    }
}
