//! RBAC objects stored and returned, and SelfSubjectAccessReview answered
//! for the admin (enforcement for service accounts: `rbac_enforced.rs`).

mod common;

use common::{apply, kubectl, kubectl_ok, sandbox};

const OBJECTS: &str = r#"{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "driver"}},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "driver"},
   "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "create"]}]},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "driver"},
   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "driver"},
   "subjects": [{"kind": "ServiceAccount", "name": "driver", "namespace": "default"}]},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "driver-pv"},
   "rules": [{"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get", "patch"]}]},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "driver-pv"},
   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "driver-pv"},
   "subjects": [{"kind": "ServiceAccount", "name": "driver", "namespace": "default"}, {"kind": "User", "name": "jane"}]}
]}"#;

#[tokio::test(flavor = "multi_thread")]
async fn rbac_objects_are_discovered_stored_listed_and_deleted() {
    let sb = sandbox().await;
    let resources = kubectl_ok(
        &sb,
        &[
            "api-resources",
            "--api-group=rbac.authorization.k8s.io",
            "-o",
            "name",
        ],
    )
    .await;
    for r in [
        "clusterrolebindings",
        "clusterroles",
        "rolebindings",
        "roles",
    ] {
        assert!(resources.lines().any(|l| l.starts_with(r)), "{resources}");
    }
    let out = apply(&sb, OBJECTS).await;
    assert!(out.ok, "{}", out.stderr);
    let rules = kubectl_ok(
        &sb,
        &[
            "get",
            "role",
            "driver",
            "-o",
            "jsonpath={.rules[0].resources}",
        ],
    )
    .await;
    assert_eq!(rules, r#"["pods","pods/log"]"#);
    let table = kubectl_ok(
        &sb,
        &["get", "clusterrolebinding", "driver-pv", "-o", "wide"],
    )
    .await;
    let header = table.lines().next().unwrap_or_default();
    for column in ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"] {
        assert!(header.contains(column), "{table}");
    }
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(
        row.contains("ClusterRole/driver-pv")
            && row.contains("jane")
            && row.contains("default/driver"),
        "{table}"
    );
    let binding = kubectl_ok(&sb, &["get", "rolebinding", "driver"]).await;
    assert!(binding.contains("Role/driver"), "{binding}");
    kubectl_ok(
        &sb,
        &["delete", "clusterrole,clusterrolebinding", "driver-pv"],
    )
    .await;
    let left = kubectl_ok(&sb, &["get", "clusterroles", "-o", "name"]).await;
    assert!(!left.contains("driver-pv"), "{left}");
}

#[tokio::test(flavor = "multi_thread")]
async fn can_i_is_answered_yes_for_the_admin() {
    let sb = sandbox().await;
    let out = kubectl(
        &sb,
        &[
            "auth",
            "can-i",
            "create",
            "roles.rbac.authorization.k8s.io",
            "-n",
            "default",
        ],
        None,
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "yes");
}
