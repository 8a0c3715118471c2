//! Killing a pod at a precise request (`Sandbox::kill_requester_when`):
//! the request is served, then the pod that made it dies by SIGKILL before
//! it reads the answer, as an OOM kill or a crash would land there. Its
//! container is reported terminated with exit code 137; a Job replaces
//! the pod, a restartPolicy restarts the container. And `kill_pod`, the
//! same kill of one pod at any moment.

mod common;

use std::time::Duration;

use common::k8s::{container, pod_phase};
use common::{await_object, client, create, kubectl_ok, object, sandbox};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube_sandbox::api::AuditEntry;
use kube_sandbox::auth::Identity;
use kube_sandbox::Sandbox;
use serde_json::json;

/// ServiceAccount `driver` may get, create and delete ConfigMaps.
async fn driver_account(sb: &Sandbox) {
    let rbac = r#"{"apiVersion": "v1", "kind": "List", "items": [
      {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "driver"}},
      {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "driver"},
       "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "delete"]}]},
      {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "driver"},
       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "driver"},
       "subjects": [{"kind": "ServiceAccount", "name": "driver"}]}]}"#;
    let out = create(sb, rbac).await;
    assert!(out.ok, "{}", out.stderr);
}

/// A request of `verb` on ConfigMaps in `default`.
fn config_map_request(entry: &AuditEntry, verb: &str) -> bool {
    entry.authorization.as_ref().is_some_and(|a| {
        let a = &a.attributes;
        a.verb == verb && a.resource == "configmaps" && a.namespace == "default"
    })
}

fn pod_of(entry: &AuditEntry) -> String {
    match &entry.identity {
        Identity::ServiceAccount(s) => s.pod.clone(),
        other => panic!("not a pod's request: {other:?}"),
    }
}

/// (exit code, reason) of the first container's terminated state, or of
/// its last one.
fn terminated(pod: &Pod, last: bool) -> Option<(i32, String)> {
    let status = container(Some(pod))?;
    let state = if last {
        status.last_state.as_ref()?
    } else {
        status.state.as_ref()?
    };
    let t = state.terminated.as_ref()?;
    Some((t.exit_code, t.reason.clone().unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_s_pod_killed_at_its_create_leaves_the_object_and_is_replaced() {
    let sb = sandbox().await;
    driver_account(&sb).await;
    let kubectl = common::host_kubectl();
    // Creates the marker unless it is there; says so once it is created.
    let script = format!(
        "{kubectl} get configmap marker -o name || {kubectl} create configmap marker --from-literal=by=driver"
    );
    let wire = sb.kill_requester_when(1, |e| config_map_request(e, "create"));
    let c = client(&sb).await;
    let jobs: Api<Job> = Api::default_namespaced(c.clone());
    let job: Job = object(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "drive"},
        "spec": {"backoffLimit": 2, "template": {"spec": {
            "serviceAccountName": "driver", "restartPolicy": "Never",
            "containers": [{"name": "driver", "image": "busybox", "command": ["sh", "-c", script]}],
        }}},
    }));
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create job");
    assert!(
        wire.wait_fired(1, Duration::from_secs(60)).await,
        "no pod made the request"
    );
    let killed = pod_of(&wire.requests()[0]);
    assert!(killed.starts_with("drive-"), "{killed}");

    // The create was served: the ConfigMap is there.
    let config_maps: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let marker = config_maps.get("marker").await.expect("the marker");
    let data = marker.data.expect("data");
    assert_eq!(data.get("by").map(String::as_str), Some("driver"));

    // The pod died by SIGKILL before kubectl read the answer.
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    await_object(&pods, &killed, "Failed", |p| pod_phase(p) == Some("Failed")).await;
    let dead = pods.get(&killed).await.expect("the killed pod");
    assert_eq!(terminated(&dead, false), Some((137, "Error".to_string())));
    let logs = kubectl_ok(&sb, &["logs", &killed]).await;
    assert!(!logs.contains("created"), "kubectl saw the answer: {logs}");

    // The Job replaced it; the replacement found the marker and finished.
    await_object(&jobs, "drive", "Complete", |j| {
        let s = j.and_then(|j| j.status.as_ref());
        s.is_some_and(|s| s.succeeded == Some(1))
    })
    .await;
    let status = jobs
        .get("drive")
        .await
        .expect("job")
        .status
        .expect("status");
    assert_eq!(status.failed, Some(1));
    let all = pods
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=drive"))
        .await
        .expect("list");
    let done: Vec<&Pod> = all
        .items
        .iter()
        .filter(|p| pod_phase(Some(p)) == Some("Succeeded"))
        .collect();
    assert_eq!(done.len(), 1, "{:?}", all.items);
    assert_ne!(done[0].metadata.name.as_deref(), Some(killed.as_str()));
    assert_eq!(wire.fired(), 1, "a one-shot rule");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_counted_rule_kills_each_run_at_its_delete() {
    let sb = sandbox().await;
    driver_account(&sb).await;
    for name in ["one", "two", "three"] {
        kubectl_ok(&sb, &["create", "configmap", name]).await;
    }
    let kubectl = common::host_kubectl();
    // Each run deletes the first ConfigMap still there.
    let script = ["one", "two", "three"]
        .map(|n| format!("if {kubectl} get configmap {n} -o name; then {kubectl} delete configmap {n}; exit $?; fi"))
        .join("; ");
    let wire = sb.kill_requester_when(2, |e| config_map_request(e, "delete"));
    let c = client(&sb).await;
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    let pod: Pod = object(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "deleter"},
        "spec": {"serviceAccountName": "driver", "restartPolicy": "OnFailure",
            "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", script]}]},
    }));
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    await_object(&pods, "deleter", "Succeeded", |p| {
        pod_phase(p) == Some("Succeeded")
    })
    .await;
    let done = pods.get("deleter").await.expect("pod");
    let previous = common::kubectl(&sb, &["logs", "deleter", "--previous"], None).await;
    let logs = format!("{}{}", previous.stdout, previous.stderr);
    assert_eq!(
        wire.fired(),
        2,
        "{:#?}\nprevious run's log: {logs}",
        done.status
    );
    let names: Vec<String> = wire
        .requests()
        .iter()
        .filter_map(|e| Some(e.authorization.as_ref()?.attributes.name.clone()))
        .collect();
    assert_eq!(names, ["one", "two"]);
    assert_eq!(container(Some(&done)).map(|c| c.restart_count), Some(2));
    assert_eq!(terminated(&done, true), Some((137, "Error".to_string())));
    let config_maps: Api<ConfigMap> = Api::default_namespaced(c);
    for name in ["one", "two", "three"] {
        assert!(
            config_maps.get_opt(name).await.expect("get").is_none(),
            "{name} is still there"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_pod_kills_one_pod_s_containers() {
    let sb = sandbox().await;
    let c = client(&sb).await;
    let pods: Api<Pod> = Api::default_namespaced(c);
    for name in ["victim", "bystander"] {
        let pod: Pod = object(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]},
        }));
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("pod");
        await_object(&pods, name, "Running", common::k8s::is_running).await;
    }
    assert_eq!(sb.kill_pod("default", "victim").await, 1);
    await_object(&pods, "victim", "restarted", |p| {
        p.and_then(|p| container(Some(p)))
            .is_some_and(|c| c.restart_count == 1)
    })
    .await;
    let victim = pods.get("victim").await.expect("pod");
    assert_eq!(terminated(&victim, true), Some((137, "Error".to_string())));
    let bystander = pods.get("bystander").await.expect("pod");
    assert_eq!(
        container(Some(&bystander)).map(|c| c.restart_count),
        Some(0)
    );
    assert_eq!(sb.kill_pod("default", "ghost").await, 0);
}
