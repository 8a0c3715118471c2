//! TokenRequest (`serviceaccounts/token`), as `kubectl create token` and
//! kube-rs ask it: a token that authenticates as the ServiceAccount, is
//! held to its RBAC grants (SelfSubjectAccessReview answering the same),
//! is bound to no pod, and expires when asked; a missing ServiceAccount
//! is a 404. And `Sandbox::kubeconfig_for`, a kubeconfig for such a
//! token.

mod common;

use common::{client, client_from, create, kubectl, kubectl_ok, object, sandbox};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use kube_sandbox::auth::Identity;
use serde_json::json;

const GRANT: &str = r#"{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader"},
   "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "reader"},
   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
   "subjects": [{"kind": "ServiceAccount", "name": "reader"}]}]}"#;

fn request(spec: serde_json::Value) -> TokenRequest {
    object(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}))
}

/// A client that presents `token` to the sandbox.
async fn client_with_token(sb: &kube_sandbox::Sandbox, token: &str) -> Client {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = sb.data_dir().join(format!("kubeconfig-token-{n}"));
    let admin = std::fs::read_to_string(sb.kubeconfig_path()).expect("kubeconfig");
    let text = admin.replace(sb.admin_token(), token);
    std::fs::write(&path, text).expect("write kubeconfig");
    client_from(&path).await
}

/// Asks a SelfSubjectAccessReview as `client`.
async fn may(client: &Client, verb: &str, resource: &str) -> bool {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review: SelfSubjectAccessReview = object(json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"namespace": "default", "verb": verb, "resource": resource}},
    }));
    let answer = reviews
        .create(&PostParams::default(), &review)
        .await
        .expect("review");
    answer.status.expect("status").allowed
}

#[tokio::test(flavor = "multi_thread")]
async fn a_requested_token_is_the_service_account_held_to_its_grants() {
    let sb = sandbox().await;
    assert!(create(&sb, GRANT).await.ok);
    let admin = client(&sb).await;
    let accounts: Api<ServiceAccount> = Api::default_namespaced(admin.clone());
    let before = time_now();
    let answer = accounts
        .create_token_request("reader", &PostParams::default(), &request(json!({})))
        .await
        .expect("token request");
    let meta = &answer.metadata;
    assert_eq!(
        (meta.name.as_deref(), meta.namespace.as_deref()),
        (Some("reader"), Some("default"))
    );
    let spec = &answer.spec;
    assert_eq!(spec.expiration_seconds, Some(3600));
    assert_eq!(
        spec.audiences,
        ["https://kubernetes.default.svc.cluster.local"]
    );
    let status = answer.status.expect("status");
    let expires = status.expiration_timestamp.0.as_second();
    assert!(
        (before + 3600 - 5..=before + 3600 + 5).contains(&expires),
        "{expires} vs {before}"
    );

    let reader = client_with_token(&sb, &status.token).await;
    let config_maps: Api<ConfigMap> = Api::default_namespaced(reader.clone());
    config_maps
        .list(&Default::default())
        .await
        .expect("granted");
    let pods: Api<Pod> = Api::default_namespaced(reader.clone());
    match pods.list(&Default::default()).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 403);
            assert!(
                e.message.contains(
                    r#"User "system:serviceaccount:default:reader" cannot list resource "pods""#
                ),
                "{}",
                e.message
            );
        }
        other => panic!("pods listed: {other:?}"),
    }
    // SelfSubjectAccessReview answers for the token's identity.
    assert!(may(&reader, "list", "configmaps").await);
    assert!(!may(&reader, "list", "pods").await);
    assert!(!may(&reader, "delete", "configmaps").await);

    // The audit shows the account, bound to no pod.
    let subject = sb
        .audit()
        .into_iter()
        .find_map(|e| match e.identity {
            Identity::ServiceAccount(s) if s.service_account == "reader" => Some(s),
            _ => None,
        })
        .expect("a request as reader");
    assert_eq!(subject.namespace, "default");
    assert!(
        !subject.is_pod_bound() && subject.node.is_empty(),
        "{subject:?}"
    );

    // The token goes with its ServiceAccount.
    accounts
        .delete("reader", &DeleteParams::default())
        .await
        .expect("delete");
    match config_maps.list(&Default::default()).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 401),
        other => panic!("a deleted account's token worked: {other:?}"),
    }
}

fn time_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[tokio::test(flavor = "multi_thread")]
async fn token_requests_are_validated_as_the_api_server_does() {
    let sb = sandbox().await;
    let admin = client(&sb).await;
    let accounts: Api<ServiceAccount> = Api::default_namespaced(admin.clone());
    let pp = PostParams::default();
    let status = |r: kube::Result<TokenRequest>| match r {
        Err(kube::Error::Api(e)) => (e.code, e.message),
        other => panic!("expected a refusal: {other:?}"),
    };
    let (code, message) = status(
        accounts
            .create_token_request("ghost", &pp, &request(json!({})))
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (404, r#"serviceaccounts "ghost" not found"#)
    );
    let (code, message) = status(
        accounts
            .create_token_request("default", &pp, &request(json!({"expirationSeconds": 60})))
            .await,
    );
    assert_eq!(code, 422);
    assert!(
        message.contains("may not specify a duration less than 10 minutes"),
        "{message}"
    );
    // Another audience: issued, but not accepted by the API server.
    let vault = accounts
        .create_token_request(
            "default",
            &pp,
            &request(json!({"audiences": ["vault"], "expirationSeconds": 600})),
        )
        .await
        .expect("token for vault");
    assert_eq!(vault.spec.audiences, ["vault"]);
    assert_eq!(vault.spec.expiration_seconds, Some(600));
    let token = vault.status.expect("status").token;
    let elsewhere: Api<ConfigMap> = Api::default_namespaced(client_with_token(&sb, &token).await);
    match elsewhere.list(&Default::default()).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 401),
        other => panic!("a token for vault worked: {other:?}"),
    }
    // A ServiceAccount may be asked for only with `create serviceaccounts/token`.
    let nobody = common::client_as(&sb, "default", "default").await;
    let theirs: Api<ServiceAccount> = Api::default_namespaced(nobody);
    let (code, message) = status(
        theirs
            .create_token_request("default", &pp, &request(json!({})))
            .await,
    );
    assert_eq!(code, 403);
    assert!(
        message.contains(r#"cannot create resource "serviceaccounts/token""#),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_create_token_and_a_kubeconfig_for_a_service_account() {
    let sb = sandbox().await;
    assert!(create(&sb, GRANT).await.ok);
    let token = kubectl_ok(&sb, &["create", "token", "reader", "--duration", "20m"]).await;
    let token = token.trim();
    assert_eq!(token.split('.').count(), 3, "{token}");
    kubectl_ok(&sb, &["--token", token, "get", "configmaps"]).await;
    let as_reader = sb.audit().into_iter().rev().find_map(|e| match e.identity {
        Identity::ServiceAccount(s) => Some(s),
        _ => None,
    });
    assert_eq!(
        as_reader.map(|s| (s.namespace, s.service_account)),
        Some(("default".to_string(), "reader".to_string()))
    );
    let out = kubectl(&sb, &["create", "token", "ghost"], None).await;
    assert!(
        !out.ok && out.stderr.contains(r#"serviceaccounts "ghost" not found"#),
        "{}",
        out.stderr
    );

    let path = sb.kubeconfig_for("default", "reader").expect("kubeconfig");
    let config = path.to_string_lossy().into_owned();
    let home = sb.data_dir().to_path_buf();
    let run = |args: &'static [&'static str]| {
        let (config, home) = (config.clone(), home.clone());
        async move {
            let out = tokio::process::Command::new(common::kubectl_program())
                .arg("--kubeconfig")
                .arg(&config)
                .args(args)
                .env("HOME", home)
                .output()
                .await
                .expect("kubectl runs");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let (ok, stderr) = run(&["get", "configmaps", "-o", "name"]).await;
    assert!(ok, "{stderr}");
    let (ok, stderr) = run(&["delete", "configmap", "kube-root-ca.crt"]).await;
    assert!(
        !ok && stderr.contains(
            r#"User "system:serviceaccount:default:reader" cannot delete resource "configmaps""#
        ),
        "{stderr}"
    );
    let reader = client_from(&path).await;
    assert!(may(&reader, "list", "configmaps").await);
    assert!(!may(&reader, "list", "pods").await);
    assert_eq!(
        sb.kubeconfig_for("default", "ghost")
            .map_err(|e| e.kind())
            .err(),
        Some(std::io::ErrorKind::NotFound)
    );
}
