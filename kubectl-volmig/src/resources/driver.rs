//! The in-cluster driver's objects (`migrate --detach`): a Job that runs
//! `kubectl-volmig drive OP` from the driver image under a
//! ServiceAccount of its own, bound to the Role and ClusterRole that
//! [`super::access`] derives from what the driver does.
//!
//! They go when the operation ends without leaving grants behind: the
//! bindings and the ServiceAccount are owned by the roles (the garbage
//! collector removes them with their owner; a cluster-scoped binding is
//! owned by the cluster-scoped ClusterRole, as ownership must stay within
//! a scope), the driver deletes its roles as its last act (the one grant
//! it has on RBAC: `delete` on those names only), and the Job goes by its
//! TTL once finished.
//!
//! The driver's pods are labelled `volmig.io/driver-of=OP`, not with the
//! operation's own label: the driver deletes and waits out the operation's
//! pods by that label, and must not count itself among them.
//!
//! Pure: no I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec, PodTemplateSpec,
    ResourceRequirements, SecurityContext, ServiceAccount, Toleration,
};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::access::{driver_rbac_name, RBAC as RBAC_GROUP};
use crate::names;

/// The driver pod's one container.
pub const DRIVER_CONTAINER: &str = "driver";
/// The label that marks an operation's driver pods (and only them).
pub const DRIVER_OF_KEY: &str = "volmig.io/driver-of";
/// Failed driver pods the Job replaces before it gives up (then `resume`
/// from anywhere takes over).
pub const DRIVER_BACKOFF_LIMIT: i32 = 6;
/// How long a finished Job (and its pod's log) stays.
pub const DRIVER_TTL_SECONDS: i32 = 600;
/// The image's user: nobody needs root to talk to the API server.
const DRIVER_UID: i64 = 65532;

/// An owner reference to a role just created (its uid known).
#[derive(Debug, Clone)]
pub struct Owner {
    pub kind: &'static str,
    pub name: String,
    pub uid: String,
}

impl Owner {
    fn reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: format!("{RBAC_GROUP}/v1"),
            kind: self.kind.to_string(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            block_owner_deletion: None,
            controller: None,
        }
    }
}

/// The labels of the driver's pods and RBAC objects.
pub(crate) fn labels(op: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            names::MANAGED_BY_KEY.to_string(),
            names::MANAGED_BY.to_string(),
        ),
        (DRIVER_OF_KEY.to_string(), op.to_string()),
        (
            names::COMPONENT_KEY.to_string(),
            names::Component::Driver.as_str().to_string(),
        ),
    ])
}

fn meta(op: &str, namespace: Option<&str>, owner: Option<&Owner>) -> ObjectMeta {
    ObjectMeta {
        name: Some(driver_rbac_name(op)),
        namespace: namespace.map(str::to_string),
        labels: Some(labels(op)),
        owner_references: owner.map(|o| vec![o.reference()]),
        ..ObjectMeta::default()
    }
}

/// The driver's ServiceAccount in `namespace`, owned by its Role there.
pub fn service_account(op: &str, namespace: &str, role: &Owner) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(op, Some(namespace), Some(role)),
        ..ServiceAccount::default()
    }
}

fn subject(op: &str, sa_namespace: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".to_string(),
        name: driver_rbac_name(op),
        namespace: Some(sa_namespace.to_string()),
        api_group: None,
    }
}

/// Binds the Role in `namespace` (its owner) to the ServiceAccount in
/// `sa_namespace`.
pub fn role_binding(op: &str, namespace: &str, sa_namespace: &str, role: &Owner) -> RoleBinding {
    RoleBinding {
        metadata: meta(op, Some(namespace), Some(role)),
        role_ref: RoleRef {
            api_group: RBAC_GROUP.to_string(),
            kind: "Role".to_string(),
            name: driver_rbac_name(op),
        },
        subjects: Some(vec![subject(op, sa_namespace)]),
    }
}

/// Binds the ClusterRole (its owner) to the ServiceAccount.
pub fn cluster_role_binding(op: &str, sa_namespace: &str, role: &Owner) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(op, None, Some(role)),
        role_ref: RoleRef {
            api_group: RBAC_GROUP.to_string(),
            kind: "ClusterRole".to_string(),
            name: driver_rbac_name(op),
        },
        subjects: Some(vec![subject(op, sa_namespace)]),
    }
}

/// The Job that drives `op` (recorded in `namespace`) from `image`,
/// giving mover pods `start_timeout` seconds to start.
pub fn job(op: &str, namespace: &str, image: &str, start_timeout: u64) -> Job {
    let container = Container {
        name: DRIVER_CONTAINER.to_string(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".to_string()),
        args: Some(vec![
            "drive".to_string(),
            op.to_string(),
            "-n".to_string(),
            namespace.to_string(),
            "--start-timeout".to_string(),
            start_timeout.to_string(),
        ]),
        env: Some(vec![EnvVar {
            name: names::DRIVER_POD_ENV.to_string(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".to_string(),
                    api_version: None,
                }),
                ..EnvVarSource::default()
            }),
            value: None,
        }]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("50m".to_string())),
                ("memory".to_string(), Quantity("64Mi".to_string())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_string(),
                Quantity("256Mi".to_string()),
            )])),
            ..ResourceRequirements::default()
        }),
        // All the Pod Security "restricted" profile asks.
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            run_as_user: Some(DRIVER_UID),
            run_as_group: Some(DRIVER_UID),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_string()]),
                add: None,
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    let mut job_meta = meta(op, Some(namespace), None);
    job_meta.annotations = None;
    Job {
        metadata: job_meta,
        spec: Some(JobSpec {
            backoff_limit: Some(DRIVER_BACKOFF_LIMIT),
            ttl_seconds_after_finished: Some(DRIVER_TTL_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(op)),
                    annotations: Some(BTreeMap::from([
                        ("sidecar.istio.io/inject".to_string(), "false".to_string()),
                        ("linkerd.io/inject".to_string(), "disabled".to_string()),
                    ])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    service_account_name: Some(driver_rbac_name(op)),
                    automount_service_account_token: Some(true),
                    restart_policy: Some("Never".to_string()),
                    enable_service_links: Some(false),
                    security_context: Some(super::pods::runtime_default_seccomp()),
                    tolerations: Some(leave_a_lost_node()),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// How long the driver pod stays bound to a node that stopped reporting.
pub const LOST_NODE_SECONDS: i64 = 30;

/// A driver pod on a node that stopped reporting is evicted after
/// [`LOST_NODE_SECONDS`] instead of the 300 s the DefaultTolerationSeconds
/// admission plugin would give it: the Job replaces a pod as soon as it
/// is terminating, and the operation (maybe an app scaled to zero) should
/// not wait five minutes for that.
fn leave_a_lost_node() -> Vec<Toleration> {
    [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ]
    .map(|key| Toleration {
        key: Some(key.to_string()),
        operator: Some("Exists".to_string()),
        effect: Some("NoExecute".to_string()),
        toleration_seconds: Some(LOST_NODE_SECONDS),
        value: None,
    })
    .to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(kind: &'static str) -> Owner {
        Owner {
            kind,
            name: driver_rbac_name("data-x7k2p"),
            uid: "u-1".into(),
        }
    }

    #[test]
    fn the_bindings_and_the_account_go_with_their_roles() {
        let role = owner("Role");
        let sa = service_account("data-x7k2p", "apps", &role);
        let rb = role_binding("data-x7k2p", "apps", "apps", &role);
        for refs in [&sa.metadata.owner_references, &rb.metadata.owner_references] {
            let r = &refs.as_ref().expect("owned")[0];
            assert_eq!((r.kind.as_str(), r.uid.as_str()), ("Role", "u-1"));
            assert_eq!(r.api_version, "rbac.authorization.k8s.io/v1");
        }
        let crb = cluster_role_binding("data-x7k2p", "apps", &owner("ClusterRole"));
        assert!(crb.metadata.namespace.is_none());
        let r = &crb.metadata.owner_references.expect("owned")[0];
        assert_eq!(
            r.kind, "ClusterRole",
            "cluster-scoped, owned within its scope"
        );
        let subject = &crb.subjects.expect("subjects")[0];
        assert_eq!(subject.name, "volmig-data-x7k2p-driver");
        assert_eq!(subject.namespace.as_deref(), Some("apps"));
        assert_eq!(rb.role_ref.kind, "Role");
    }

    #[test]
    fn the_job_resumes_the_operation_as_its_own_account_under_restricted() {
        let job = job("data-x7k2p", "apps", "ghcr.io/volmig/driver:0.1.0", 300);
        let spec = job.spec.expect("spec");
        assert_eq!(spec.backoff_limit, Some(DRIVER_BACKOFF_LIMIT));
        let pod = spec.template.spec.expect("pod");
        assert_eq!(
            pod.service_account_name.as_deref(),
            Some("volmig-data-x7k2p-driver")
        );
        let lost = pod.tolerations.as_deref().unwrap_or_default();
        assert!(
            lost.iter()
                .all(|t| t.toleration_seconds == Some(LOST_NODE_SECONDS))
                && lost.len() == 2,
            "{lost:?}"
        );
        let c = &pod.containers[0];
        assert_eq!(
            c.args.as_deref(),
            Some(
                &[
                    "drive",
                    "data-x7k2p",
                    "-n",
                    "apps",
                    "--start-timeout",
                    "300"
                ]
                .map(String::from)[..]
            )
        );
        let sc = c.security_context.as_ref().expect("security context");
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_string()])
        );
        // Not the operation's label: the driver sweeps those pods.
        let labels = spec
            .template
            .metadata
            .expect("meta")
            .labels
            .expect("labels");
        assert!(!labels.contains_key(names::OPERATION_KEY));
        assert_eq!(
            labels.get(DRIVER_OF_KEY).map(String::as_str),
            Some("data-x7k2p")
        );
    }
}
