use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::auth::Subject;

fn attrs(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        subresource: sub.into(),
        namespace: ns.into(),
        name: name.into(),
    }
}

fn driver() -> Identity {
    Identity::ServiceAccount(Subject {
        namespace: "apps".into(),
        service_account: "driver".into(),
        service_account_uid: "u".into(),
        pod: "p".into(),
        pod_uid: "pu".into(),
        node: "node-1".into(),
    })
}

fn store() -> Arc<Store> {
    let s = Store::new(16);
    let create = |plural: &str, ns: &str, obj: Value| {
        s.create(registry::get(plural), ns, obj).expect(plural);
    };
    for ns in ["apps", "other"] {
        create("namespaces", "", json!({"metadata": {"name": ns}}));
    }
    create(
        "roles",
        "apps",
        json!({"metadata": {"name": "driver"}, "rules": [
            {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
            {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["patch"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["delete"], "resourceNames": ["driver"]},
        ]}),
    );
    create(
        "rolebindings",
        "apps",
        json!({"metadata": {"name": "driver"},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "driver"},
        "subjects": [{"kind": "ServiceAccount", "name": "driver"}]}),
    );
    create(
        "clusterroles",
        "",
        json!({"metadata": {"name": "pv-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get"]}]}),
    );
    create(
        "clusterrolebindings",
        "",
        json!({"metadata": {"name": "pv-reader"},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "pv-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "driver", "namespace": "apps"}]}),
    );
    // A RoleBinding in "other" of a ClusterRole, to every service account
    // of "apps" by group.
    create(
        "clusterroles",
        "",
        json!({"metadata": {"name": "cm-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]}),
    );
    create(
        "rolebindings",
        "other",
        json!({"metadata": {"name": "cm"},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "cm-reader"},
        "subjects": [{"kind": "Group", "name": "system:serviceaccounts:apps"}]}),
    );
    s
}

#[test]
fn rules_match_verb_group_resource_subresource_and_name() {
    let rule = json!({"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get"]});
    assert!(rule_allows(
        &rule,
        &attrs("get", "", "pods", "log", "ns", "p")
    ));
    assert!(!rule_allows(
        &rule,
        &attrs("get", "", "pods", "exec", "ns", "p")
    ));
    assert!(!rule_allows(
        &rule,
        &attrs("list", "", "pods", "", "ns", "")
    ));
    assert!(!rule_allows(
        &rule,
        &attrs("get", "apps", "pods", "", "ns", "p")
    ));
    let any_scale = json!({"apiGroups": ["*"], "resources": ["*/scale"], "verbs": ["patch"]});
    assert!(rule_allows(
        &any_scale,
        &attrs("patch", "apps", "statefulsets", "scale", "ns", "s")
    ));
    assert!(!rule_allows(
        &any_scale,
        &attrs("patch", "apps", "statefulsets", "", "ns", "s")
    ));
    let named = json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"], "resourceNames": ["k"]});
    assert!(rule_allows(
        &named,
        &attrs("delete", "", "secrets", "", "ns", "k")
    ));
    assert!(!rule_allows(
        &named,
        &attrs("delete", "", "secrets", "", "ns", "j")
    ));
    assert!(
        !rule_allows(&named, &attrs("list", "", "secrets", "", "ns", "")),
        "a list names nothing"
    );
}

#[test]
fn a_service_account_gets_what_its_bindings_grant_and_nothing_else() {
    let s = store();
    let sa = driver();
    let ok = |a: Attributes| authorize(&s, &sa, &a);
    let yes = ok(attrs("get", "", "pods", "log", "apps", "p"));
    assert!(yes.allowed);
    assert_eq!(
        yes.reason,
        "RBAC: allowed by RoleBinding \"driver/apps\" of Role \"driver\" to ServiceAccount \"driver/apps\""
    );
    assert!(
        ok(attrs(
            "patch",
            "apps",
            "deployments",
            "scale",
            "apps",
            "web"
        ))
        .allowed
    );
    assert!(!ok(attrs("patch", "apps", "deployments", "", "apps", "web")).allowed);
    assert!(
        !ok(attrs("get", "", "pods", "", "other", "p")).allowed,
        "a Role holds in its namespace only"
    );
    assert!(ok(attrs("delete", RBAC_GROUP, "roles", "", "apps", "driver")).allowed);
    assert!(!ok(attrs("delete", RBAC_GROUP, "roles", "", "apps", "admin")).allowed);
    let pv = ok(attrs("get", "", "persistentvolumes", "", "", "pv-1"));
    assert_eq!(
        pv.reason,
        "RBAC: allowed by ClusterRoleBinding \"pv-reader\" of ClusterRole \"pv-reader\" to ServiceAccount \"driver/apps\""
    );
    assert!(!ok(attrs("delete", "", "persistentvolumes", "", "", "pv-1")).allowed);
    assert!(
        ok(attrs("update", "", "configmaps", "", "other", "c")).allowed,
        "by group"
    );
    assert!(!ok(attrs("update", "", "configmaps", "", "apps", "c")).allowed);
    assert!(
        ok(attrs(
            "create",
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "",
            "",
            ""
        ))
        .allowed
    );
    // The admin and anonymous are not restricted.
    for who in [Identity::Admin, Identity::Anonymous] {
        assert!(authorize(&s, &who, &attrs("delete", "", "nodes", "", "", "n")).allowed);
    }
}

#[test]
fn a_missing_role_is_named_in_the_reason() {
    let s = store();
    s.create(
        registry::get("rolebindings"),
        "apps",
        json!({"metadata": {"name": "ghost"},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "ghost"},
        "subjects": [{"kind": "ServiceAccount", "name": "driver"}]}),
    )
    .expect("binding");
    let no = authorize(&s, &driver(), &attrs("list", "", "secrets", "", "apps", ""));
    assert!(!no.allowed);
    assert_eq!(
        no.reason,
        "RBAC: role.rbac.authorization.k8s.io \"ghost\" not found"
    );
}

#[test]
fn the_forbidden_message_is_the_apiserver_s() {
    let user = "system:serviceaccount:ns:sa";
    assert_eq!(
        forbidden_message(user, &attrs("list", "", "pods", "", "ns", "")),
        "User \"system:serviceaccount:ns:sa\" cannot list resource \"pods\" in API group \"\" in the namespace \"ns\""
    );
    assert_eq!(
        forbidden_message(user, &attrs("patch", "", "persistentvolumes", "", "", "pv")),
        "User \"system:serviceaccount:ns:sa\" cannot patch resource \"persistentvolumes\" in API group \"\" at the cluster scope"
    );
    let err = crate::status::ApiError::Denied {
        group: "apps".into(),
        resource: "deployments".into(),
        name: "web".into(),
        message: forbidden_message(
            user,
            &attrs("patch", "apps", "deployments", "scale", "ns", "web"),
        ),
    };
    assert_eq!(
        err.to_string(),
        "deployments.apps \"web\" is forbidden: User \"system:serviceaccount:ns:sa\" cannot patch resource \"deployments/scale\" in API group \"apps\" in the namespace \"ns\""
    );
    let status = err.to_status();
    assert_eq!(
        (status["code"].clone(), status["reason"].clone()),
        (json!(403), json!("Forbidden"))
    );
    assert_eq!(
        status["details"],
        json!({"name": "web", "group": "apps", "kind": "deployments"})
    );
}
