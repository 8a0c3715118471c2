//! HTTPS with the cluster CA, and in-cluster configuration for pods: the
//! `kubernetes` Service, the Service environment variables, ServiceAccount
//! admission's projected token volume, and tokens that authenticate as the
//! pod's ServiceAccount — proved by real `kubectl` running inside a pod
//! with nothing but in-cluster config.

mod common;

use base64::prelude::{Engine as _, BASE64_STANDARD};
use common::{create, kubectl, kubectl_ok, sandbox, wait_for};
use kube_sandbox::auth::Identity;
use kube_sandbox::Sandbox;

/// Lets the `default` ServiceAccount of `default` read pods: the sandbox
/// enforces RBAC for service accounts, which start with no grants.
async fn grant_pod_reading(sb: &Sandbox) {
    let rbac = r#"{"apiVersion": "v1", "kind": "List", "items": [
      {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "pod-reader"},
       "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
      {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "pod-reader"},
       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
       "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]}]}"#;
    let out = create(sb, rbac).await;
    assert!(out.ok, "{}", out.stderr);
}

/// The logs of a pod that ran to completion.
async fn finished_logs(sb: &Sandbox, pod: &str) -> String {
    wait_for(sb, &["get", "pod", pod], "{.status.phase}", "Succeeded").await;
    kubectl_ok(sb, &["logs", pod]).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubeconfig_names_an_https_server_and_the_ca_that_signed_it() {
    let sb = sandbox().await;
    let text = std::fs::read_to_string(sb.kubeconfig_path()).expect("kubeconfig");
    assert!(
        text.contains(&format!("server: {}", sb.server_url())),
        "{text}"
    );
    assert!(sb.server_url().starts_with("https://127.0.0.1:"));
    let ca = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .expect("certificate-authority-data");
    let ca = BASE64_STANDARD.decode(ca).expect("base64");
    assert_eq!(String::from_utf8(ca).expect("pem"), sb.ca_pem());
    // kubectl verifies the server against it and authenticates as admin.
    assert!(kubectl_ok(&sb, &["get", "namespaces", "-o", "name"])
        .await
        .contains("namespace/default"));
    assert!(sb
        .audit()
        .iter()
        .any(|e| e.identity == Identity::Admin && e.uri.starts_with("/api/v1/namespaces")));
    // A token the server did not issue is refused with 401.
    let out = kubectl(&sb, &["--token", "forged", "get", "pods"], None).await;
    assert!(
        !out.ok && out.stderr.contains("Unauthorized"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubernetes_service_points_at_the_api_server() {
    let sb = sandbox().await;
    let port = sb
        .server_url()
        .rsplit(':')
        .next()
        .expect("port")
        .to_string();
    let service = kubectl_ok(
        &sb,
        &[
            "get",
            "service",
            "kubernetes",
            "-o",
            "jsonpath={.spec.ports[0].name} {.spec.ports[0].port} {.spec.clusterIP}",
        ],
    )
    .await;
    let [name, service_port, ip] = service.split(' ').collect::<Vec<_>>()[..] else {
        panic!("{service}");
    };
    assert_eq!((name, service_port), ("https", "443"));
    assert!(ip.ends_with(".255.1"), "{ip}");
    let endpoints = kubectl_ok(
        &sb,
        &[
            "get",
            "endpoints",
            "kubernetes",
            "-o",
            "jsonpath={.subsets[0].addresses[0].ip}:{.subsets[0].ports[0].port}",
        ],
    )
    .await;
    assert_eq!(endpoints, format!("127.0.0.1:{port}"));
    // Every namespace gets the CA to verify it with.
    kubectl_ok(&sb, &["create", "namespace", "team"]).await;
    wait_for(
        &sb,
        &["-n", "team", "get", "configmap", "kube-root-ca.crt"],
        "{.metadata.name}",
        "kube-root-ca.crt",
    )
    .await;
    let ca = kubectl_ok(
        &sb,
        &[
            "-n",
            "team",
            "get",
            "configmap",
            "kube-root-ca.crt",
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ],
    )
    .await;
    assert_eq!(ca.trim(), sb.ca_pem().trim());
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_in_a_pod_reaches_the_api_server_with_in_cluster_config() {
    let sb = sandbox().await;
    grant_pod_reading(&sb).await;
    let script = format!(
        "cd /var/run/secrets/kubernetes.io/serviceaccount && ls && cat namespace && echo && \
         env | grep '^KUBERNETES_' | sort && \
         {kubectl} get pods -o name",
        kubectl = common::host_kubectl()
    );
    let manifest = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "incluster"},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "busybox", "command": ["sh", "-c", script]}
        ]},
    });
    let out = create(&sb, &manifest.to_string()).await;
    assert!(out.ok, "{}", out.stderr);
    let logs = finished_logs(&sb, "incluster").await;
    let service_ip = kubectl_ok(
        &sb,
        &[
            "get",
            "service",
            "kubernetes",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    )
    .await;
    for line in [
        "ca.crt",
        "namespace",
        "token",
        "default",
        &format!("KUBERNETES_SERVICE_HOST={service_ip}"),
        "KUBERNETES_SERVICE_PORT=443",
        &format!("KUBERNETES_PORT_443_TCP=tcp://{service_ip}:443"),
        "pod/incluster",
    ] {
        assert!(
            logs.lines().any(|l| l == line),
            "no line {line:?} in:\n{logs}"
        );
    }
    // The request reached the server as the pod's ServiceAccount.
    let as_account = sb.audit().into_iter().find_map(|e| match e.identity {
        Identity::ServiceAccount(s) if e.uri.starts_with("/api/v1/namespaces/default/pods") => {
            Some(s)
        }
        _ => None,
    });
    let subject = as_account.expect("a request as the service account");
    assert_eq!(
        (
            subject.namespace.as_str(),
            subject.service_account.as_str(),
            subject.pod.as_str()
        ),
        ("default", "default", "incluster")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn admission_injects_the_token_volume_unless_automount_is_off() {
    let sb = sandbox().await;
    let pod = |name: &str, extra: serde_json::Value| {
        let mut spec = serde_json::json!({"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}).to_string()
    };
    assert!(create(&sb, &pod("mounted", serde_json::json!({}))).await.ok);
    let volume = kubectl_ok(&sb, &["get", "pod", "mounted", "-o", "jsonpath={.spec.serviceAccountName} {.spec.volumes[0].name} {.spec.containers[0].volumeMounts[0].mountPath}"]).await;
    let [account, name, path] = volume.split(' ').collect::<Vec<_>>()[..] else {
        panic!("{volume}");
    };
    assert_eq!(account, "default");
    assert!(
        name.starts_with("kube-api-access-") && name.len() == 21,
        "{name}"
    );
    assert_eq!(path, "/var/run/secrets/kubernetes.io/serviceaccount");

    assert!(
        create(
            &sb,
            &pod(
                "off",
                serde_json::json!({"automountServiceAccountToken": false})
            )
        )
        .await
        .ok
    );
    let volumes = kubectl_ok(
        &sb,
        &["get", "pod", "off", "-o", "jsonpath={.spec.volumes}"],
    )
    .await;
    assert_eq!(volumes, "");

    let account = r#"{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "quiet"}, "automountServiceAccountToken": false}"#;
    assert!(create(&sb, account).await.ok);
    assert!(
        create(
            &sb,
            &pod("quiet", serde_json::json!({"serviceAccountName": "quiet"}))
        )
        .await
        .ok
    );
    assert_eq!(
        kubectl_ok(
            &sb,
            &["get", "pod", "quiet", "-o", "jsonpath={.spec.volumes}"]
        )
        .await,
        ""
    );

    let out = create(
        &sb,
        &pod("ghost", serde_json::json!({"serviceAccountName": "ghost"})),
    )
    .await;
    assert!(!out.ok);
    assert!(
        out.stderr
            .contains("error looking up service account default/ghost"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_stops_working_when_its_pod_is_gone() {
    let sb = sandbox().await;
    grant_pod_reading(&sb).await;
    let manifest = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}}"#;
    assert!(create(&sb, manifest).await.ok);
    wait_for(&sb, &["get", "pod", "holder"], "{.status.phase}", "Running").await;
    let uid = kubectl_ok(
        &sb,
        &["get", "pod", "holder", "-o", "jsonpath={.metadata.uid}"],
    )
    .await;
    let volume = kubectl_ok(
        &sb,
        &[
            "get",
            "pod",
            "holder",
            "-o",
            "jsonpath={.spec.volumes[0].name}",
        ],
    )
    .await;
    let file = sb
        .data_dir()
        .join(format!("pods/default_holder_{uid}/volumes/{volume}/token"));
    let token = std::fs::read_to_string(&file).expect("token file");
    let who = kubectl_ok(
        &sb,
        &["--token", &token, "get", "pod", "holder", "-o", "name"],
    )
    .await;
    assert_eq!(who.trim(), "pod/holder");
    kubectl_ok(
        &sb,
        &[
            "delete",
            "pod",
            "holder",
            "--grace-period=0",
            "--force",
            "--wait",
        ],
    )
    .await;
    let out = kubectl(&sb, &["--token", &token, "get", "pods"], None).await;
    assert!(
        !out.ok && out.stderr.contains("Unauthorized"),
        "{}",
        out.stderr
    );
}
