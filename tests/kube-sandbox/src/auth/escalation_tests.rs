use serde_json::json;

use super::*;
use crate::auth::Subject;
use crate::registry;

fn account(name: &str) -> Identity {
    Identity::ServiceAccount(Subject {
        namespace: "apps".into(),
        service_account: name.into(),
        service_account_uid: "u".into(),
        pod: String::new(),
        pod_uid: String::new(),
        node: String::new(),
    })
}

/// `writer` in `apps` holds: get/list pods and bind the Role `viewer`
/// there; cluster-wide, get nodes.
fn store() -> std::sync::Arc<Store> {
    let s = Store::new(16);
    let create = |plural: &str, ns: &str, obj: Value| {
        s.create(registry::get(plural), ns, obj).expect(plural);
    };
    create("namespaces", "", json!({"metadata": {"name": "apps"}}));
    create(
        "roles",
        "apps",
        json!({"metadata": {"name": "writer"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            {"apiGroups": [RBAC_GROUP], "resources": ["roles"], "verbs": ["bind"], "resourceNames": ["viewer"]},
        ]}),
    );
    create(
        "roles",
        "apps",
        json!({"metadata": {"name": "viewer"}, "rules": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
    );
    create(
        "roles",
        "apps",
        json!({"metadata": {"name": "deleter"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}]}),
    );
    create(
        "clusterroles",
        "",
        json!({"metadata": {"name": "nodes"}, "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}),
    );
    let subjects = json!([{"kind": "ServiceAccount", "name": "writer", "namespace": "apps"}]);
    create(
        "rolebindings",
        "apps",
        json!({"metadata": {"name": "writer"}, "subjects": subjects,
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "writer"}}),
    );
    create(
        "clusterrolebindings",
        "",
        json!({"metadata": {"name": "writer-nodes"}, "subjects": subjects,
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "nodes"}}),
    );
    s
}

fn role(rules: Value) -> Value {
    json!({"metadata": {"name": "new"}, "rules": rules})
}

fn binding(kind: &str, name: &str) -> Value {
    json!({"metadata": {"name": "b"}, "subjects": [{"kind": "ServiceAccount", "name": "other"}],
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": kind, "name": name}})
}

#[test]
fn a_role_may_grant_what_the_writer_holds_there_and_cluster_wide() {
    let s = store();
    let roles = registry::get("roles");
    let held = role(json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    ]));
    check(&s, &account("writer"), roles, "apps", &held, None).expect("held");
    let more = role(
        json!([{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "delete"]}]),
    );
    let err = check(&s, &account("writer"), roles, "apps", &more, None).expect_err("escalates");
    assert_eq!(err.code(), 403);
    assert_eq!(
        err.to_string(),
        "roles.rbac.authorization.k8s.io \"new\" is forbidden: user \"system:serviceaccount:apps:writer\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:apps\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}\n{APIGroups:[\"\"], Resources:[\"pods/log\"], Verbs:[\"get\" \"delete\"]}"
    );
    // Another namespace: the namespace's rules do not count there.
    let pods = role(json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]));
    assert!(check(&s, &account("writer"), roles, "other", &pods, None).is_err());
    // A ClusterRole counts cluster-wide rules only.
    let cluster = registry::get("clusterroles");
    assert!(check(&s, &account("writer"), cluster, "", &pods, None).is_err());
}

#[test]
fn the_admin_is_never_checked_and_escalate_lifts_the_check() {
    let s = store();
    let roles = registry::get("roles");
    let everything = role(json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]));
    check(&s, &Identity::Admin, roles, "apps", &everything, None).expect("admin");
    assert!(check(&s, &account("writer"), roles, "apps", &everything, None).is_err());
    s.create(
        roles,
        "apps",
        json!({"metadata": {"name": "escalator"}, "rules": [
            {"apiGroups": [RBAC_GROUP], "resources": ["roles"], "verbs": ["escalate"]}]}),
    )
    .expect("role");
    s.create(
        registry::get("rolebindings"),
        "apps",
        json!({"metadata": {"name": "escalator"}, "subjects": [{"kind": "ServiceAccount", "name": "writer"}],
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "escalator"}}),
    )
    .expect("binding");
    check(&s, &account("writer"), roles, "apps", &everything, None).expect("may escalate");
}

#[test]
fn a_binding_needs_bind_on_its_role_or_every_rule_of_it() {
    let s = store();
    let bindings = registry::get("rolebindings");
    let writer = account("writer");
    // `bind` on viewer (resourceNames), though secrets are not held.
    check(
        &s,
        &writer,
        bindings,
        "apps",
        &binding("Role", "viewer"),
        None,
    )
    .expect("bind");
    // deleter: neither bind nor its rules.
    let err = check(
        &s,
        &writer,
        bindings,
        "apps",
        &binding("Role", "deleter"),
        None,
    )
    .expect_err("escalates");
    assert!(
        err.to_string().starts_with("rolebindings.rbac.authorization.k8s.io \"b\" is forbidden: user \"system:serviceaccount:apps:writer\""),
        "{err}"
    );
    // A ClusterRole whose rules are held, bound in the namespace.
    check(
        &s,
        &writer,
        bindings,
        "apps",
        &binding("ClusterRole", "nodes"),
        None,
    )
    .expect("held");
    // A missing role is a 404 for whoever may not bind it.
    let missing = check(
        &s,
        &writer,
        bindings,
        "apps",
        &binding("Role", "ghost"),
        None,
    )
    .expect_err("missing");
    assert_eq!(missing.code(), 404);
    let cluster = registry::get("clusterrolebindings");
    check(
        &s,
        &writer,
        cluster,
        "",
        &binding("ClusterRole", "nodes"),
        None,
    )
    .expect("held");
    assert!(check(
        &s,
        &account("nobody"),
        cluster,
        "",
        &binding("ClusterRole", "nodes"),
        None
    )
    .is_err());
}

#[test]
fn an_update_of_gc_fields_only_is_not_checked() {
    let s = store();
    let roles = registry::get("roles");
    let old = s.get(roles, "apps", "deleter").expect("role");
    let mut owned = old.clone();
    owned["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "x"}]);
    check(&s, &account("writer"), roles, "apps", &owned, Some(&old)).expect("gc fields");
    let mut widened = owned.clone();
    widened["rules"][0]["verbs"] = json!(["delete", "get"]);
    assert!(check(&s, &account("writer"), roles, "apps", &widened, Some(&old)).is_err());
}
