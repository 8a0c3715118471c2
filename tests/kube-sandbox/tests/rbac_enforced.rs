//! RBAC enforced for service-account tokens: a request its bindings do not
//! grant is the apiserver's 403, a Role bound to it (or a ClusterRole
//! bound in its namespace or cluster-wide) grants exactly its rules, the
//! audit log records each request's (group, resource, verb, namespace,
//! name) and the answer, and SelfSubjectAccessReview answers the caller
//! with the same rules.

mod common;

use common::{create, kubectl, kubectl_ok, sandbox, wait_for};
use kube_sandbox::api::Authorization;
use kube_sandbox::auth::Identity;
use kube_sandbox::Sandbox;

const RBAC: &str = r#"{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "driver"},
   "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
             {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["record"]}]},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "driver"},
   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "driver"},
   "subjects": [{"kind": "ServiceAccount", "name": "driver", "namespace": "default"}]},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "driver-nodes"},
   "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "driver-nodes"},
   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "driver-nodes"},
   "subjects": [{"kind": "ServiceAccount", "name": "driver", "namespace": "default"}]}]}"#;

/// The token of a running pod of ServiceAccount `driver`.
async fn driver_token(sb: &Sandbox) -> String {
    let objects = r#"{"apiVersion": "v1", "kind": "List", "items": [
      {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "driver"}},
      {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "record"}},
      {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "driver"},
       "spec": {"serviceAccountName": "driver", "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}}]}"#;
    let out = create(sb, objects).await;
    assert!(out.ok, "{}", out.stderr);
    wait_for(sb, &["get", "pod", "driver"], "{.status.phase}", "Running").await;
    let uid = kubectl_ok(
        sb,
        &["get", "pod", "driver", "-o", "jsonpath={.metadata.uid}"],
    )
    .await;
    let volume = kubectl_ok(
        sb,
        &[
            "get",
            "pod",
            "driver",
            "-o",
            "jsonpath={.spec.volumes[0].name}",
        ],
    )
    .await;
    let file = sb
        .data_dir()
        .join(format!("pods/default_driver_{uid}/volumes/{volume}/token"));
    std::fs::read_to_string(file).expect("token file")
}

async fn as_driver(sb: &Sandbox, token: &str, args: &[&str]) -> common::Out {
    let mut all = vec!["--token", token];
    all.extend_from_slice(args);
    kubectl(sb, &all, None).await
}

/// The driver's authorization records, as (verb, resource, namespace, name, allowed).
fn driver_requests(sb: &Sandbox) -> Vec<(String, String, String, String, bool)> {
    sb.audit()
        .into_iter()
        .filter(
            |e| matches!(&e.identity, Identity::ServiceAccount(s) if s.service_account == "driver"),
        )
        .filter_map(|e| e.authorization)
        .map(
            |Authorization {
                 attributes: a,
                 allowed,
             }| {
                (
                    a.verb.clone(),
                    a.combined_resource(),
                    a.namespace,
                    a.name,
                    allowed,
                )
            },
        )
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_account_may_do_what_its_bindings_grant_and_nothing_more() {
    let sb = sandbox().await;
    let token = driver_token(&sb).await;

    // No bindings yet: the apiserver's 403, word for word.
    let out = as_driver(&sb, &token, &["get", "pods"]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(r#"Error from server (Forbidden): pods is forbidden: User "system:serviceaccount:default:driver" cannot list resource "pods" in API group "" in the namespace "default""#),
        "{}",
        out.stderr
    );

    let out = create(&sb, RBAC).await;
    assert!(out.ok, "{}", out.stderr);
    let pods = as_driver(&sb, &token, &["get", "pods", "-o", "name"]).await;
    assert!(pods.ok && pods.stdout.contains("pod/driver"), "{pods:?}");
    assert!(as_driver(&sb, &token, &["logs", "driver"]).await.ok);
    assert!(
        as_driver(&sb, &token, &["get", "nodes"]).await.ok,
        "the ClusterRoleBinding"
    );
    assert!(
        as_driver(&sb, &token, &["get", "configmap", "record"])
            .await
            .ok
    );

    let named = as_driver(&sb, &token, &["get", "configmap", "kube-root-ca.crt"]).await;
    assert!(
        named.stderr.contains(r#"configmaps "kube-root-ca.crt" is forbidden: User "system:serviceaccount:default:driver" cannot get resource "configmaps" in API group "" in the namespace "default""#),
        "{}",
        named.stderr
    );
    let delete = as_driver(&sb, &token, &["delete", "pod", "driver", "--wait=false"]).await;
    assert!(
        !delete.ok && delete.stderr.contains("cannot delete resource \"pods\""),
        "{}",
        delete.stderr
    );
    let other = as_driver(&sb, &token, &["-n", "kube-system", "get", "pods"]).await;
    assert!(
        !other.ok && other.stderr.contains("in the namespace \"kube-system\""),
        "{}",
        other.stderr
    );
    let pv = as_driver(&sb, &token, &["get", "persistentvolumes"]).await;
    assert!(
        pv.stderr.contains(
            "cannot list resource \"persistentvolumes\" in API group \"\" at the cluster scope"
        ),
        "{}",
        pv.stderr
    );
    // The pod is still there: a refused request changes nothing.
    kubectl_ok(&sb, &["get", "pod", "driver"]).await;

    let seen = driver_requests(&sb);
    let has = |verb: &str, resource: &str, ns: &str, name: &str, allowed: bool| {
        seen.contains(&(
            verb.into(),
            resource.into(),
            ns.into(),
            name.into(),
            allowed,
        ))
    };
    assert!(has("list", "pods", "default", "", false), "{seen:?}");
    assert!(has("list", "pods", "default", "", true), "{seen:?}");
    assert!(
        has("get", "pods/log", "default", "driver", true),
        "{seen:?}"
    );
    assert!(has("list", "nodes", "", "", true), "{seen:?}");
    assert!(
        has("delete", "pods", "default", "driver", false),
        "{seen:?}"
    );
    assert!(
        has("get", "configmaps", "default", "record", true),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_self_subject_access_review_answers_with_the_caller_s_rules() {
    let sb = sandbox().await;
    let token = driver_token(&sb).await;
    assert!(create(&sb, RBAC).await.ok);
    let ask = |verb: &str, resource: &str, sub: &str, name: &str| {
        serde_json::json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"namespace": "default", "verb": verb, "resource": resource, "subresource": sub, "name": name}}})
        .to_string()
    };
    let review = |body: String| {
        let (sb, token) = (&sb, token.clone());
        async move {
            let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
            let args = ["--token", &token, "create", "--raw", path, "-f", "-"];
            let out = kubectl(sb, &args, Some(&body)).await;
            assert!(out.ok, "{}", out.stderr);
            let answer: serde_json::Value = serde_json::from_str(&out.stdout).expect("a review");
            answer["status"].clone()
        }
    };
    let yes = review(ask("get", "pods", "log", "driver")).await;
    assert_eq!(yes["allowed"], true, "{yes}");
    assert_eq!(
        yes["reason"],
        r#"RBAC: allowed by RoleBinding "driver/default" of Role "driver" to ServiceAccount "driver/default""#
    );
    let no = review(ask("delete", "pods", "", "driver")).await;
    assert_eq!(no, serde_json::json!({"allowed": false}));
    let named = review(ask("get", "configmaps", "", "other")).await;
    assert_eq!(named["allowed"], false);
}
