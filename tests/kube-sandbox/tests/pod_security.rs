//! Pod Security admission from namespace labels, as a client meets it:
//! pods refused with 403 and the plugin's message, controllers whose pods
//! are refused saying so in FailedCreate events, invalid labels refused.

mod common;

use common::{await_event, await_object, client, kubectl, object, sandbox};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

const ENFORCE: &str = "pod-security.kubernetes.io/enforce";

async fn namespace(client: &kube::Client, name: &str, level: &str) {
    let ns: Namespace = object(json!({"metadata": {"name": name, "labels": {ENFORCE: level}}}));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    // Pods wait for the ServiceAccount controller, as on any cluster.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    await_object(&accounts, "default", "created", |a| a.is_some()).await;
}

/// A pod running `sh -c sleep` with this container security context.
fn pod(name: &str, security: Value, extra_spec: Value) -> Pod {
    let mut spec = json!({"containers": [{"name": "mover", "image": "busybox",
        "command": ["sh", "-c", "sleep 3600"], "securityContext": security}]});
    for (k, v) in extra_spec.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    object(json!({"metadata": {"name": name}, "spec": spec}))
}

/// All the restricted profile asks of a container.
fn restricted_container() -> Value {
    json!({"allowPrivilegeEscalation": false, "runAsNonRoot": true, "runAsUser": 1000,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
}

/// The API error of a create that must fail.
async fn refused(pods: &Api<Pod>, pod: &Pod) -> kube::core::Status {
    match pods.create(&PostParams::default(), pod).await {
        Err(kube::Error::Api(e)) => *e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn await_running(pods: &Api<Pod>, name: &str) {
    await_object(pods, name, "Running", common::k8s::is_running).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restricted_namespace_refuses_root_and_added_capabilities_with_the_plugins_words() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    namespace(&client, "locked", "restricted").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "locked");

    let root = pod(
        "mover-root",
        json!({"runAsUser": 0, "capabilities": {"add": ["CHOWN", "DAC_OVERRIDE"]}}),
        json!({}),
    );
    let e = refused(&pods, &root).await;
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "pods \"mover-root\" is forbidden: violates PodSecurity \"restricted:latest\": \
         allowPrivilegeEscalation != false (container \"mover\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"mover\" must set securityContext.capabilities.drop=[\"ALL\"]; \
         container \"mover\" must not include \"CHOWN\", \"DAC_OVERRIDE\" in securityContext.capabilities.add), \
         runAsNonRoot != true (pod or container \"mover\" must set securityContext.runAsNonRoot=true), \
         runAsUser=0 (container \"mover\" must not set runAsUser=0), \
         seccompProfile (pod or container \"mover\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );

    let mut adding = restricted_container();
    adding["capabilities"]["add"] = json!(["NET_BIND_SERVICE", "NET_ADMIN"]);
    let e = refused(&pods, &pod("mover-caps", adding, json!({}))).await;
    assert_eq!(
        e.message,
        "pods \"mover-caps\" is forbidden: violates PodSecurity \"restricted:latest\": \
         unrestricted capabilities (container \"mover\" must not include \"NET_ADMIN\" in securityContext.capabilities.add)"
    );

    // kubectl shows the same words.
    let manifest = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "by-kubectl", "namespace": "locked"},
        "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"]}]}});
    let out = kubectl(
        &sb,
        &["create", "--validate=false", "-f", "-"],
        Some(&manifest.to_string()),
    )
    .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("Error from server (Forbidden)")
            && out.stderr.contains(
                "pods \"by-kubectl\" is forbidden: violates PodSecurity \"restricted:latest\": host namespaces (hostNetwork=true), allowPrivilegeEscalation != false"
            ),
        "{}",
        out.stderr
    );

    let fine = pod("mover", restricted_container(), json!({}));
    pods.create(&PostParams::default(), &fine)
        .await
        .expect("a compliant pod is admitted");
    await_running(&pods, "mover").await;
    let names: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(names, ["mover"], "nothing refused was stored");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_baseline_namespace_runs_root_with_default_capabilities_and_refuses_host_paths() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    namespace(&client, "base", "baseline").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "base");

    let root = pod(
        "root",
        json!({"runAsUser": 0, "capabilities": {"drop": ["ALL"], "add": ["DAC_OVERRIDE", "CHOWN"]}}),
        json!({}),
    );
    pods.create(&PostParams::default(), &root)
        .await
        .expect("root with default capabilities is baseline");
    await_running(&pods, "root").await;

    let host = pod(
        "host",
        json!({}),
        json!({"volumes": [{"name": "host", "hostPath": {"path": "/var/lib"}}]}),
    );
    let e = refused(&pods, &host).await;
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "pods \"host\" is forbidden: violates PodSecurity \"baseline:latest\": hostPath volumes (volume \"host\")"
    );
    let e = refused(
        &pods,
        &pod(
            "raw",
            json!({"privileged": true, "capabilities": {"add": ["NET_RAW", "SYS_ADMIN"]}}),
            json!({}),
        ),
    )
    .await;
    assert_eq!(
        e.message,
        "pods \"raw\" is forbidden: violates PodSecurity \"baseline:latest\": \
         non-default capabilities (container \"mover\" must not include \"NET_RAW\", \"SYS_ADMIN\" in securityContext.capabilities.add), \
         privileged (container \"mover\" must not set securityContext.privileged=true)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_is_checked_again_only_when_its_image_changes() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    namespace(&client, "later", "privileged").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "later");
    let extra = json!({"volumes": [{"name": "host", "hostPath": {"path": "/var/lib"}}]});
    pods.create(&PostParams::default(), &pod("old", json!({}), extra))
        .await
        .expect("privileged namespace");
    let label = json!({"metadata": {"labels": {ENFORCE: "baseline", "pod-security.kubernetes.io/enforce-version": "v1.30"}}});
    Api::<Namespace>::all(client.clone())
        .patch("later", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("relabel");
    let relabel = json!({"metadata": {"labels": {"touched": "yes"}}});
    pods.patch("old", &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .expect("a label change is not evaluated");
    let image = json!({"spec": {"containers": [{"name": "mover", "image": "busybox:2"}]}});
    match pods
        .patch("old", &PatchParams::default(), &Patch::Strategic(&image))
        .await
    {
        Err(kube::Error::Api(e)) => assert_eq!(
            e.message,
            "pods \"old\" is forbidden: violates PodSecurity \"baseline:v1.30\": hostPath volumes (volume \"host\")"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn controllers_in_a_restricted_namespace_make_no_pods_and_record_failed_create() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    namespace(&client, "locked", "restricted").await;
    let template = json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [
        {"name": "app", "image": "busybox", "command": ["sleep", "3600"]}]}});
    let selector = json!({"matchLabels": {"app": "x"}});
    let deployment: Deployment = object(json!({"metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": selector, "template": template}}));
    Api::<Deployment>::namespaced(client.clone(), "locked")
        .create(&PostParams::default(), &deployment)
        .await
        .expect("a Deployment is only warned about");
    let mut sts_template = template.clone();
    sts_template["metadata"]["labels"] = json!({"app": "db"});
    let sts: StatefulSet = object(json!({"metadata": {"name": "db"},
        "spec": {"serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": sts_template}}));
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "locked");
    sets.create(&PostParams::default(), &sts)
        .await
        .expect("statefulset");
    let mut job_template = template.clone();
    job_template["metadata"]["labels"] = json!({"app": "job"});
    job_template["spec"]["restartPolicy"] = json!("Never");
    let job: Job =
        object(json!({"metadata": {"name": "once"}, "spec": {"template": job_template}}));
    Api::<Job>::namespaced(client.clone(), "locked")
        .create(&PostParams::default(), &job)
        .await
        .expect("job");

    let violations = "violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"app\" must set securityContext.allowPrivilegeEscalation=false)";
    let message = await_event(&client, "locked", "db", "FailedCreate").await;
    assert!(
        message.starts_with(
            "create Pod db-0 in StatefulSet db failed error: pods \"db-0\" is forbidden: "
        ) && message.contains(violations),
        "{message}"
    );
    let message = await_event(&client, "locked", "once", "FailedCreate").await;
    assert!(
        message.starts_with("Error creating: pods \"once-") && message.contains(violations),
        "{message}"
    );
    let sets_api: Api<ReplicaSet> = Api::namespaced(client.clone(), "locked");
    let rs = loop {
        let list = sets_api.list(&ListParams::default()).await.expect("rs");
        if let Some(name) = list.items.into_iter().find_map(|r| r.metadata.name) {
            break name;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let message = await_event(&client, "locked", &rs, "FailedCreate").await;
    assert!(
        message.starts_with(&format!("Error creating: pods \"{rs}-"))
            && message.contains(violations),
        "{message}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "locked");
    await_object(&deployments, "web", "a ReplicaFailure condition", |d| {
        let conditions = d
            .and_then(|d| d.status.as_ref()?.conditions.clone())
            .unwrap_or_default();
        conditions.iter().any(|c| {
            c.type_ == "ReplicaFailure"
                && c.reason.as_deref() == Some("FailedCreate")
                && c.message.as_deref().is_some_and(|m| m.contains(violations))
        })
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "locked");
    assert!(pods
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items
        .is_empty());

    // Relaxed, the controllers catch up within their back-off.
    let relax = json!({"metadata": {"labels": {ENFORCE: "privileged"}}});
    Api::<Namespace>::all(client.clone())
        .patch("locked", &PatchParams::default(), &Patch::Merge(&relax))
        .await
        .expect("relabel");
    await_running(&pods, "db-0").await;
    await_object(&deployments, "web", "two ready replicas", |d| {
        d.and_then(|d| d.status.as_ref()?.ready_replicas) == Some(2)
    })
    .await;
    let deployment = deployments.get("web").await.expect("web");
    let conditions = deployment.status.and_then(|s| s.conditions);
    assert!(
        !conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "ReplicaFailure"),
        "the failure is cleared once pods are made"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_with_an_invalid_level_is_refused() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let ns: Namespace =
        object(json!({"metadata": {"name": "typo", "labels": {ENFORCE: "strict"}}}));
    let namespaces = Api::<Namespace>::all(client.clone());
    match namespaces.create(&PostParams::default(), &ns).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
            assert_eq!(
                e.message,
                "Namespace \"typo\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"
            );
        }
        other => panic!("expected 422, got {other:?}"),
    }
    namespace(&client, "fine", "baseline").await;
    let typo =
        json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce-version": "1.30"}}});
    match namespaces
        .patch("fine", &PatchParams::default(), &Patch::Merge(&typo))
        .await
    {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 422, "{}", e.message),
        other => panic!("expected 422, got {other:?}"),
    }
}
