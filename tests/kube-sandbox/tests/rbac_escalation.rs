//! RBAC escalation prevention, as a less privileged client sees it over
//! the API: a ServiceAccount that may write roles and bindings can grant
//! only what it holds (in that namespace, cluster-wide rules counted),
//! unless it may `escalate` roles or `bind` the role; the admin
//! (`system:masters`) may grant anything. And the garbage collector
//! removes what a deleted Role or ClusterRole owned.

mod common;

use std::time::{Duration, Instant};

use common::{client, client_as, object, sandbox};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

const GROUP: &str = "rbac.authorization.k8s.io";

fn role(name: &str, rules: Value) -> Role {
    object(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name}, "rules": rules}),
    )
}

fn cluster_role(name: &str, rules: Value) -> ClusterRole {
    object(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules}),
    )
}

fn binding<K: serde::de::DeserializeOwned>(
    kind: &str,
    name: &str,
    role_kind: &str,
    role: &str,
) -> K {
    object(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name},
        "roleRef": {"apiGroup": GROUP, "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "grantee", "namespace": "default"}]}),
    )
}

/// The admin makes ServiceAccount `writer` in `default`, which may write
/// roles and rolebindings there, get and list pods, `bind` the Role
/// `bindable` only; cluster-wide it may get nodes and write ClusterRoles
/// and ClusterRoleBindings.
async fn setup(admin: &Client) {
    let pp = PostParams::default();
    let accounts: Api<ServiceAccount> = Api::default_namespaced(admin.clone());
    for name in ["writer", "grantee"] {
        accounts
            .create(&pp, &object(json!({"metadata": {"name": name}})))
            .await
            .expect("service account");
    }
    let roles: Api<Role> = Api::default_namespaced(admin.clone());
    let writes = json!(["create", "update", "patch", "get"]);
    roles
        .create(
            &pp,
            &role(
                "writer",
                json!([
                    {"apiGroups": [GROUP], "resources": ["roles", "rolebindings"], "verbs": writes},
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["settings"]},
                    {"apiGroups": [GROUP], "resources": ["roles"], "verbs": ["bind"], "resourceNames": ["bindable"]},
                ]),
            ),
        )
        .await
        .expect("role");
    for (name, rules) in [
        (
            "bindable",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
        ),
        (
            "secrets",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
        ),
        (
            "pod-reader",
            json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]),
        ),
    ] {
        roles.create(&pp, &role(name, rules)).await.expect("role");
    }
    let bindings: Api<RoleBinding> = Api::default_namespaced(admin.clone());
    let mut writer: RoleBinding = binding("RoleBinding", "writer", "Role", "writer");
    writer.subjects = Some(vec![object(
        json!({"kind": "ServiceAccount", "name": "writer"}),
    )]);
    bindings.create(&pp, &writer).await.expect("binding");
    let cluster_roles: Api<ClusterRole> = Api::all(admin.clone());
    cluster_roles
        .create(
            &pp,
            &cluster_role(
                "writer",
                json!([
                    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                    {"apiGroups": [GROUP], "resources": ["clusterroles", "clusterrolebindings"], "verbs": writes},
                ]),
            ),
        )
        .await
        .expect("cluster role");
    let mut cluster_writer: ClusterRoleBinding =
        binding("ClusterRoleBinding", "writer", "ClusterRole", "writer");
    cluster_writer.subjects = Some(vec![object(
        json!({"kind": "ServiceAccount", "name": "writer", "namespace": "default"}),
    )]);
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&pp, &cluster_writer)
        .await
        .expect("cluster binding");
}

/// The API's refusal: its code and message.
fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

const WRITER: &str = r#"user "system:serviceaccount:default:writer" (groups=["system:serviceaccounts" "system:serviceaccounts:default" "system:authenticated"]) is attempting to grant RBAC permissions not currently held:"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_role_grants_only_what_its_writer_holds() {
    let sb = sandbox().await;
    let admin = client(&sb).await;
    setup(&admin).await;
    let writer = client_as(&sb, "default", "writer").await;
    let roles: Api<Role> = Api::default_namespaced(writer.clone());
    let pp = PostParams::default();

    // Held: in the namespace, cluster-wide (nodes), and a named configmap.
    let held = json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["settings"]},
    ]);
    roles
        .create(&pp, &role("held", held))
        .await
        .expect("held rules");

    let (code, message) = refusal(
        roles
            .create(
                &pp,
                &role(
                    "more",
                    json!([
                        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "delete"]},
                        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
                    ]),
                ),
            )
            .await,
    );
    assert_eq!(code, 403);
    assert_eq!(
        message,
        format!(
            "roles.rbac.authorization.k8s.io \"more\" is forbidden: {WRITER}\n{}\n{}\n{}",
            r#"{APIGroups:[""], Resources:["configmaps"], Verbs:["get"]}"#,
            r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}"#,
            r#"{APIGroups:[""], Resources:["pods/log"], Verbs:["get" "delete"]}"#,
        )
    );
    assert!(roles.get_opt("more").await.expect("get").is_none());

    // A wildcard is held only as a wildcard; another namespace holds nothing.
    let star = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}]);
    assert_eq!(refusal(roles.create(&pp, &role("star", star)).await).0, 403);
    let elsewhere: Api<Role> = Api::namespaced(writer.clone(), "kube-system");
    let pods = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]);
    // Refused by the authorizer first: it may not create roles there.
    assert_eq!(
        refusal(elsewhere.create(&pp, &role("p", pods)).await).0,
        403
    );

    // Widening a role it wrote is an escalation too, by PUT and by patch.
    let mut widened = roles.get("held").await.expect("get");
    widened.rules = Some(vec![object(
        json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}),
    )]);
    let (code, message) = refusal(roles.replace("held", &pp, &widened).await);
    assert_eq!(code, 403);
    assert!(
        message.ends_with(r#"{APIGroups:[""], Resources:["secrets"], Verbs:["list"]}"#),
        "{message}"
    );
    let patch =
        json!({"rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}]});
    let patched = roles
        .patch("held", &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    assert_eq!(refusal(patched).0, 403);
    // Only ownerReferences: what the garbage collector writes is not checked.
    let owner = json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ServiceAccount", "name": "writer", "uid": "x"}]}});
    roles
        .patch("held", &PatchParams::default(), &Patch::Merge(&owner))
        .await
        .expect("GC fields");

    // The admin grants anything.
    let everything = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
    Api::<Role>::default_namespaced(admin.clone())
        .create(&pp, &role("everything", everything.clone()))
        .await
        .expect("admin");

    // `escalate` on roles lifts the check in that namespace.
    let escalate = json!([{"apiGroups": [GROUP], "resources": ["roles"], "verbs": ["escalate"]}]);
    Api::<Role>::default_namespaced(admin.clone())
        .create(&pp, &role("escalator", escalate))
        .await
        .expect("role");
    let mut grant: RoleBinding = binding("RoleBinding", "escalator", "Role", "escalator");
    grant.subjects = Some(vec![object(
        json!({"kind": "ServiceAccount", "name": "writer"}),
    )]);
    Api::<RoleBinding>::default_namespaced(admin.clone())
        .create(&pp, &grant)
        .await
        .expect("binding");
    roles
        .create(&pp, &role("anything", everything))
        .await
        .expect("may escalate");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_role_counts_cluster_wide_rules_only() {
    let sb = sandbox().await;
    let admin = client(&sb).await;
    setup(&admin).await;
    let writer = client_as(&sb, "default", "writer").await;
    let cluster_roles: Api<ClusterRole> = Api::all(writer);
    let pp = PostParams::default();
    let nodes = json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]);
    cluster_roles
        .create(&pp, &cluster_role("nodes", nodes))
        .await
        .expect("held cluster-wide");
    // Pods are held in `default` only.
    let pods = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]);
    let (code, message) = refusal(cluster_roles.create(&pp, &cluster_role("pods", pods)).await);
    assert_eq!(code, 403);
    assert!(
        message.starts_with(&format!(
            "clusterroles.rbac.authorization.k8s.io \"pods\" is forbidden: {WRITER}"
        )),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_binding_needs_its_role_s_rules_or_bind() {
    let sb = sandbox().await;
    let admin = client(&sb).await;
    setup(&admin).await;
    let writer = client_as(&sb, "default", "writer").await;
    let bindings: Api<RoleBinding> = Api::default_namespaced(writer.clone());
    let pp = PostParams::default();

    // Every rule of pod-reader is held.
    bindings
        .create(&pp, &binding("RoleBinding", "reads", "Role", "pod-reader"))
        .await
        .expect("held rules");
    // `bind` on bindable (by name), though secrets are not held.
    bindings
        .create(&pp, &binding("RoleBinding", "bound", "Role", "bindable"))
        .await
        .expect("bind");
    // The same rules under another name: neither held nor bindable.
    let (code, message) = refusal(
        bindings
            .create(&pp, &binding("RoleBinding", "secrets", "Role", "secrets"))
            .await,
    );
    assert_eq!(code, 403);
    assert_eq!(
        message,
        format!(
            "rolebindings.rbac.authorization.k8s.io \"secrets\" is forbidden: {WRITER}\n{}",
            r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}"#
        )
    );
    // A role that is not there: 404 for whoever may not bind it.
    let (code, _) = refusal(
        bindings
            .create(&pp, &binding("RoleBinding", "ghost", "Role", "ghost"))
            .await,
    );
    assert_eq!(code, 404);
    // Pointing a binding elsewhere is checked as a new grant.
    let mut moved = bindings.get("reads").await.expect("get");
    moved.role_ref.name = "secrets".into();
    assert_eq!(refusal(bindings.replace("reads", &pp, &moved).await).0, 403);

    // Cluster-wide: a ClusterRole whose rules are held cluster-wide.
    let pp = PostParams::default();
    let nodes = json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]);
    let everything = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
    let admin_roles: Api<ClusterRole> = Api::all(admin.clone());
    admin_roles
        .create(&pp, &cluster_role("nodes", nodes))
        .await
        .expect("cr");
    admin_roles
        .create(&pp, &cluster_role("admin-ish", everything))
        .await
        .expect("cr");
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(writer.clone());
    cluster_bindings
        .create(
            &pp,
            &binding("ClusterRoleBinding", "nodes", "ClusterRole", "nodes"),
        )
        .await
        .expect("held cluster-wide");
    let (code, message) = refusal(
        cluster_bindings
            .create(
                &pp,
                &binding(
                    "ClusterRoleBinding",
                    "admin-ish",
                    "ClusterRole",
                    "admin-ish",
                ),
            )
            .await,
    );
    assert_eq!(code, 403);
    assert!(
        message.ends_with(r#"{APIGroups:["*"], Resources:["*"], Verbs:["*"]}"#),
        "{message}"
    );
    // Bound in a namespace, a ClusterRole counts the namespace's rules too.
    let pod_get = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]);
    admin_roles
        .create(&pp, &cluster_role("pod-get", pod_get))
        .await
        .expect("cr");
    bindings
        .create(
            &pp,
            &binding("RoleBinding", "pod-get", "ClusterRole", "pod-get"),
        )
        .await
        .expect("held in default");
    assert_eq!(
        refusal(
            cluster_bindings
                .create(
                    &pp,
                    &binding("ClusterRoleBinding", "pod-get", "ClusterRole", "pod-get")
                )
                .await
        )
        .0,
        403
    );
    // The admin binds anything.
    Api::<ClusterRoleBinding>::all(admin)
        .create(
            &pp,
            &binding(
                "ClusterRoleBinding",
                "admin-ish",
                "ClusterRole",
                "admin-ish",
            ),
        )
        .await
        .expect("admin");
}

/// Waits until `api` has no object `name`.
async fn gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if api.get_opt(name).await.expect("get").is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{name} outlived its owner");
}

fn owned_by(kind: &str, owner: &ObjectMeta) -> Value {
    json!([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "name": owner.name, "uid": owner.uid}])
}

#[tokio::test(flavor = "multi_thread")]
async fn what_a_role_or_cluster_role_owns_goes_with_it() {
    let sb = sandbox().await;
    let admin = client(&sb).await;
    let pp = PostParams::default();
    let roles: Api<Role> = Api::default_namespaced(admin.clone());
    let cluster_roles: Api<ClusterRole> = Api::all(admin.clone());
    let rules = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]);
    let owner = roles
        .create(&pp, &role("owner", rules.clone()))
        .await
        .expect("role");
    let cluster_owner = cluster_roles
        .create(&pp, &cluster_role("owner", rules))
        .await
        .expect("cluster role");

    let accounts: Api<ServiceAccount> = Api::default_namespaced(admin.clone());
    let owners = owned_by("Role", &owner.metadata);
    accounts
        .create(
            &pp,
            &object(json!({"metadata": {"name": "owned", "ownerReferences": owners}})),
        )
        .await
        .expect("sa");
    let bindings: Api<RoleBinding> = Api::default_namespaced(admin.clone());
    let mut owned: RoleBinding = binding("RoleBinding", "owned", "Role", "owner");
    owned.metadata.owner_references = Some(object(owners));
    bindings.create(&pp, &owned).await.expect("binding");
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let mut cluster_owned: ClusterRoleBinding =
        binding("ClusterRoleBinding", "owned", "ClusterRole", "owner");
    cluster_owned.metadata.owner_references =
        Some(object(owned_by("ClusterRole", &cluster_owner.metadata)));
    cluster_bindings
        .create(&pp, &cluster_owned)
        .await
        .expect("cluster binding");

    // Owners alive: nothing is collected.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(accounts.get_opt("owned").await.expect("get").is_some());
    assert!(cluster_bindings
        .get_opt("owned")
        .await
        .expect("get")
        .is_some());

    roles
        .delete("owner", &DeleteParams::background())
        .await
        .expect("delete");
    gone(&accounts, "owned").await;
    gone(&bindings, "owned").await;
    assert!(cluster_bindings
        .get_opt("owned")
        .await
        .expect("get")
        .is_some());
    cluster_roles
        .delete("owner", &DeleteParams::background())
        .await
        .expect("delete");
    gone(&cluster_bindings, "owned").await;
}
