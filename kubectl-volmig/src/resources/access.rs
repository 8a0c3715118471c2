//! What the driver does to the cluster, as one list: each (API group,
//! resource, verbs) with its scope and the code that needs it. The in-cluster
//! driver's Role and ClusterRole (issue 17) are derived from this list and
//! from nothing else, and `docs/kubectl-volmig.md#permissions` quotes it, so
//! a new request in the driver means a new row here.
//!
//! Pure: no I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Where a grant applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// In the operation's namespaces (a Role in each).
    Namespaced,
    /// Cluster-scoped objects: a ClusterRole.
    Cluster,
}

/// One grant the driver needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// `""` is the core group.
    pub group: &'static str,
    /// With a subresource: `pods/log`, `deployments/scale`.
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
    pub scope: Scope,
    /// Only on the driver's own objects (`resourceNames`).
    pub own: bool,
    /// Only for an operation whose sender reads a snapshot or a clone of
    /// the source (issue 24): a user without the snapshot API's
    /// permissions may still detach a direct copy.
    pub copies: bool,
    /// What needs it.
    pub why: &'static str,
}

const fn grant(
    scope: Scope,
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
    why: &'static str,
) -> Access {
    Access {
        group,
        resource,
        verbs,
        scope,
        own: false,
        copies: false,
        why,
    }
}

const fn namespaced(
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
    why: &'static str,
) -> Access {
    grant(Scope::Namespaced, group, resource, verbs, why)
}

const fn cluster(
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
    why: &'static str,
) -> Access {
    grant(Scope::Cluster, group, resource, verbs, why)
}

/// Everything the driver (attempts and cutover) asks of the API server.
pub const DRIVER_ACCESS: &[Access] = &[
    namespaced(
        "",
        "pods",
        &["get", "list", "watch", "create", "delete"],
        "mover pods; the app's pods (placement, quiesce)",
    ),
    namespaced(
        "",
        "pods/log",
        &["get"],
        "progress and results from the movers' logs",
    ),
    namespaced(
        "",
        "services",
        &["get", "list", "create", "patch", "delete"],
        "the receiver's Service",
    ),
    namespaced(
        "",
        "secrets",
        &["get", "list", "create", "delete"],
        "the key Secrets",
    ),
    namespaced(
        "",
        "configmaps",
        &["get", "list", "update"],
        "the operation record",
    ),
    namespaced(
        "",
        "events",
        &["create", "list"],
        "Events on the claims; why a snapshot or its claim is not ready",
    ),
    namespaced(
        "",
        "persistentvolumeclaims",
        &["get", "list", "create", "delete", "patch"],
        "the destination claim (a given-up one labelled); the cutover's swap; the claims restored from snapshots or cloned",
    ),
    Access {
        copies: true,
        ..namespaced(
            "snapshot.storage.k8s.io",
            "volumesnapshots",
            &["get", "list", "create", "delete"],
            "--copy-method snapshot: a snapshot of the source per attempt",
        )
    },
    namespaced(
        "",
        "replicationcontrollers",
        &["get", "list"],
        "the app's owners",
    ),
    namespaced(
        "",
        "replicationcontrollers/scale",
        &["patch"],
        "quiesce and restore",
    ),
    namespaced("apps", "deployments", &["get", "list"], "the app's owners"),
    namespaced("apps", "replicasets", &["get", "list"], "the app's owners"),
    namespaced(
        "apps",
        "statefulsets",
        &["get", "list", "create", "delete"],
        "the app's owners; --update-owner",
    ),
    namespaced(
        "apps",
        "deployments/scale",
        &["patch"],
        "quiesce and restore",
    ),
    namespaced(
        "apps",
        "replicasets/scale",
        &["patch"],
        "quiesce and restore",
    ),
    namespaced(
        "apps",
        "statefulsets/scale",
        &["patch"],
        "quiesce and restore",
    ),
    namespaced(
        "autoscaling",
        "horizontalpodautoscalers",
        &["list"],
        "who would scale the app back",
    ),
    namespaced(
        "keda.sh",
        "scaledobjects",
        &["list"],
        "who would scale the app back",
    ),
    cluster(
        "",
        "persistentvolumes",
        &["get", "patch", "delete"],
        "reclaim policies, claimRef, commit",
    ),
    cluster(
        "",
        "nodes",
        &["get", "list"],
        "placement; whether a destination's node is away",
    ),
    cluster(
        "",
        "namespaces",
        &["get"],
        "the movers' namespaces: existence, Pod Security labels",
    ),
    cluster(
        "storage.k8s.io",
        "storageclasses",
        &["get", "list"],
        "the destination's class; whether a restored claim waits for its pod",
    ),
    // Its last act: its roles go, and with them (owned) the bindings and
    // the ServiceAccount. Nothing else of RBAC, and only these names.
    Access {
        group: RBAC,
        resource: "roles",
        verbs: &["delete"],
        scope: Scope::Namespaced,
        own: true,
        copies: false,
        why: "the driver removes its own Role when the operation ends",
    },
    Access {
        group: RBAC,
        resource: "clusterroles",
        verbs: &["delete"],
        scope: Scope::Cluster,
        own: true,
        copies: false,
        why: "the driver removes its own ClusterRole when the operation ends",
    },
];

/// The grants an operation's driver needs: those for snapshots and clones
/// only when its sender reads one (`copies`).
pub fn needed(copies: bool) -> impl Iterator<Item = &'static Access> {
    DRIVER_ACCESS.iter().filter(move |a| copies || !a.copies)
}

/// The policy rules of `scope` for operation `op`, grouped by API group
/// and verbs as `kubectl create role` would write them; grants on the
/// driver's own objects name them.
pub fn rules(op: &str, scope: Scope, copies: bool) -> Vec<PolicyRule> {
    let mut by_group: BTreeMap<(&str, Vec<&str>), Vec<&str>> = BTreeMap::new();
    let mut own = Vec::new();
    for a in needed(copies).filter(|a| a.scope == scope) {
        if a.own {
            own.push(PolicyRule {
                api_groups: Some(vec![a.group.to_string()]),
                resources: Some(vec![a.resource.to_string()]),
                resource_names: Some(vec![driver_rbac_name(op)]),
                verbs: a.verbs.iter().map(|v| v.to_string()).collect(),
                ..PolicyRule::default()
            });
            continue;
        }
        let mut verbs = a.verbs.to_vec();
        verbs.sort_unstable();
        by_group
            .entry((a.group, verbs))
            .or_default()
            .push(a.resource);
    }
    by_group
        .into_iter()
        .map(|((group, verbs), mut resources)| {
            resources.sort_unstable();
            PolicyRule {
                api_groups: Some(vec![group.to_string()]),
                resources: Some(resources.into_iter().map(str::to_string).collect()),
                verbs: verbs.into_iter().map(str::to_string).collect(),
                ..PolicyRule::default()
            }
        })
        .chain(own)
        .collect()
}

/// One thing a user must be allowed to do to start the in-cluster driver,
/// asked of the API server (a SelfSubjectAccessReview) before anything is
/// created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub group: &'static str,
    /// With a subresource: `pods/log`.
    pub resource: &'static str,
    pub verb: &'static str,
    /// `None`: cluster-wide.
    pub namespace: Option<String>,
    /// Only this object (`resourceNames`).
    pub name: Option<String>,
    pub need: Need,
}

/// Why a [`Check`] is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// To create the driver's Job, ServiceAccount, roles and bindings.
    Create,
    /// A grant the driver's roles hold: Kubernetes lets no one grant (or
    /// bind) a permission they do not hold themselves.
    Grant,
}

impl Check {
    /// `resource`, `subresource` as a review asks them.
    pub fn resource_and_subresource(&self) -> (&'static str, Option<&'static str>) {
        match self.resource.split_once('/') {
            Some((r, sub)) => (r, Some(sub)),
            None => (self.resource, None),
        }
    }
}

impl std::fmt::Display for Check {
    /// As `kubectl auth can-i` takes it: `create roles.rbac.authorization.k8s.io -n apps`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (resource, sub) = self.resource_and_subresource();
        write!(f, "{} {resource}", self.verb)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(name) = &self.name {
            write!(f, "/{name}")?;
        }
        if let Some(sub) = sub {
            write!(f, " --subresource={sub}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " -n {ns}"),
            None => write!(f, " (cluster-wide)"),
        }
    }
}

/// Everything a user needs to start `op`'s in-cluster driver, recorded in
/// `home` and touching `namespaces` (home among them): creating its
/// objects, and holding every grant they give.
pub fn needed_to_detach(op: &str, home: &str, namespaces: &[String], copies: bool) -> Vec<Check> {
    let check =
        |group, resource, verb, namespace: Option<&str>, name: Option<String>, need| Check {
            group,
            resource,
            verb,
            namespace: namespace.map(str::to_string),
            name,
            need,
        };
    // What `start` does to each of its objects: create it, or find it
    // from an earlier start and bring it up to date (roles are replaced,
    // the others re-owned by a patch; a finished Job is deleted).
    const ROLE: &[&str] = &["create", "get", "update"];
    const OWNED: &[&str] = &["create", "get", "patch"];
    const JOB: &[&str] = &["create", "get", "delete"];
    let mut wanted: Vec<(&'static str, &'static str, &[&'static str], Option<&str>)> = Vec::new();
    for ns in namespaces {
        wanted.push((RBAC, "roles", ROLE, Some(ns)));
        wanted.push((RBAC, "rolebindings", OWNED, Some(ns)));
    }
    wanted.push((RBAC, "clusterroles", ROLE, None));
    wanted.push((RBAC, "clusterrolebindings", OWNED, None));
    wanted.push(("", "serviceaccounts", OWNED, Some(home)));
    wanted.push(("batch", "jobs", JOB, Some(home)));
    let mut out = Vec::new();
    for (group, resource, verbs, ns) in wanted {
        for verb in verbs {
            out.push(check(group, resource, verb, ns, None, Need::Create));
        }
    }
    for a in needed(copies) {
        let name = a.own.then(|| driver_rbac_name(op));
        let places: Vec<Option<&str>> = match a.scope {
            Scope::Namespaced => namespaces.iter().map(|n| Some(n.as_str())).collect(),
            Scope::Cluster => vec![None],
        };
        for ns in places {
            for verb in a.verbs {
                out.push(check(
                    a.group,
                    a.resource,
                    verb,
                    ns,
                    name.clone(),
                    Need::Grant,
                ));
            }
        }
    }
    out
}

pub(crate) const RBAC: &str = "rbac.authorization.k8s.io";

/// The name of the driver's RBAC objects for operation `op`.
pub fn driver_rbac_name(op: &str) -> String {
    format!("volmig-{op}-driver")
}

/// The Role the in-cluster driver of `op` gets in `namespace`.
pub fn driver_role(op: &str, namespace: &str, copies: bool) -> Role {
    Role {
        metadata: ObjectMeta {
            name: Some(driver_rbac_name(op)),
            namespace: Some(namespace.to_string()),
            labels: Some(super::driver::labels(op)),
            ..ObjectMeta::default()
        },
        rules: Some(rules(op, Scope::Namespaced, copies)),
    }
}

/// The ClusterRole for the cluster-scoped objects it reads and changes.
pub fn driver_cluster_role(op: &str, copies: bool) -> ClusterRole {
    ClusterRole {
        metadata: ObjectMeta {
            name: Some(driver_rbac_name(op)),
            labels: Some(super::driver::labels(op)),
            ..ObjectMeta::default()
        },
        rules: Some(rules(op, Scope::Cluster, copies)),
        aggregation_rule: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_grant_is_in_exactly_one_rule_of_its_scope() {
        for scope in [Scope::Namespaced, Scope::Cluster] {
            let rules = rules("op", scope, true);
            for a in DRIVER_ACCESS.iter().filter(|a| a.scope == scope) {
                let holding: Vec<&PolicyRule> = rules
                    .iter()
                    .filter(|r| {
                        r.api_groups.as_deref() == Some(&[a.group.to_string()])
                            && r.resources.iter().flatten().any(|x| x == a.resource)
                    })
                    .collect();
                assert_eq!(holding.len(), 1, "{a:?}");
                let mut want: Vec<String> = a.verbs.iter().map(|v| v.to_string()).collect();
                want.sort();
                assert_eq!(holding[0].verbs, want, "{a:?}");
            }
        }
    }

    #[test]
    fn no_wildcards_and_no_escalation() {
        for a in DRIVER_ACCESS {
            assert!(
                !a.verbs.contains(&"*") && a.resource != "*" && a.group != "*",
                "{a:?}"
            );
            for verb in a.verbs {
                assert!(
                    ["get", "list", "watch", "create", "update", "patch", "delete"].contains(verb),
                    "{a:?}"
                );
            }
            // Of RBAC, the driver only deletes its own roles; it reads
            // nodes, namespaces and classes.
            if a.group.starts_with("rbac.") {
                assert!(a.own && a.verbs == ["delete"], "{a:?}");
            }
            if matches!(a.resource, "nodes" | "namespaces" | "storageclasses") {
                assert!(
                    a.verbs.iter().all(|v| matches!(*v, "get" | "list")),
                    "{a:?}"
                );
            }
        }
        let cluster: Vec<&str> = DRIVER_ACCESS
            .iter()
            .filter(|a| a.scope == Scope::Cluster)
            .map(|a| a.resource)
            .collect();
        assert_eq!(
            cluster,
            [
                "persistentvolumes",
                "nodes",
                "namespaces",
                "storageclasses",
                "clusterroles"
            ]
        );
    }

    #[test]
    fn the_permissions_doc_names_every_resource() {
        let doc = include_str!("../../../docs/kubectl-volmig.md");
        let section = doc
            .split("## Permissions")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("a Permissions section");
        for a in DRIVER_ACCESS {
            assert!(
                section.contains(&format!("`{}`", a.resource)),
                "{} missing",
                a.resource
            );
        }
    }

    #[test]
    fn detaching_asks_for_every_grant_in_every_namespace_and_the_objects_it_creates() {
        let namespaces = ["apps".to_string(), "old".to_string()];
        let checks = needed_to_detach("data-x7k2p", "apps", &namespaces, false);
        let has = |verb: &str, resource: &str, ns: Option<&str>| {
            checks
                .iter()
                .any(|c| c.verb == verb && c.resource == resource && c.namespace.as_deref() == ns)
        };
        assert!(has("create", "roles", Some("old")) && has("create", "rolebindings", Some("apps")));
        assert!(has("create", "clusterroles", None) && has("create", "jobs", Some("apps")));
        assert!(!has("create", "jobs", Some("old")), "the Job runs at home");
        // An earlier start's objects are brought up to date.
        assert!(
            has("update", "clusterroles", None) && has("patch", "serviceaccounts", Some("apps"))
        );
        for a in needed(false) {
            for verb in a.verbs {
                match a.scope {
                    Scope::Namespaced => {
                        assert!(
                            namespaces.iter().all(|n| has(verb, a.resource, Some(n))),
                            "{a:?}"
                        )
                    }
                    Scope::Cluster => assert!(has(verb, a.resource, None), "{a:?}"),
                }
            }
        }
        let own = checks
            .iter()
            .find(|c| c.resource == "clusterroles" && c.verb == "delete")
            .expect("its own ClusterRole");
        assert_eq!(
            own.to_string(),
            "delete clusterroles.rbac.authorization.k8s.io/volmig-data-x7k2p-driver (cluster-wide)"
        );
        let log = checks
            .iter()
            .find(|c| c.resource == "pods/log")
            .expect("pods/log");
        assert_eq!(log.resource_and_subresource(), ("pods", Some("log")));
        assert_eq!(log.to_string(), "get pods --subresource=log -n apps");
    }

    #[test]
    fn snapshots_are_granted_only_to_an_operation_that_takes_them() {
        let snapshots = |rules: Vec<PolicyRule>| {
            rules
                .iter()
                .any(|r| r.resources.iter().flatten().any(|x| x == "volumesnapshots"))
        };
        assert!(!snapshots(rules("op", Scope::Namespaced, false)));
        assert!(snapshots(rules("op", Scope::Namespaced, true)));
        let namespaces = ["apps".to_string()];
        let asks = |copies| {
            needed_to_detach("op", "apps", &namespaces, copies)
                .iter()
                .any(|c| c.resource == "volumesnapshots" && c.verb == "create")
        };
        assert!(!asks(false) && asks(true));
    }

    #[test]
    fn the_roles_carry_the_operation_s_labels() {
        let role = driver_role("data-x7k2p", "apps", false);
        assert_eq!(
            role.metadata.name.as_deref(),
            Some("volmig-data-x7k2p-driver")
        );
        let labels = role.metadata.labels.expect("labels");
        assert_eq!(
            labels
                .get(super::super::driver::DRIVER_OF_KEY)
                .map(String::as_str),
            Some("data-x7k2p")
        );
        let cr = driver_cluster_role("data-x7k2p", false);
        assert!(cr
            .rules
            .expect("rules")
            .iter()
            .all(|r| r.verbs.iter().all(|v| v != "create")));
    }
}
