//! Placement as a real cluster does it: ReadWriteOnce multi-attach,
//! ReadWriteOncePod, taints, node affinity from local volumes, and
//! WaitForFirstConsumer binding on the scheduled node.

mod common;

use common::k8s::{node_of, pod_phase, waiting_reason};
use common::{await_event, await_object, client, object, sandbox, sandbox_with};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{json, Value};

/// Creates a 1Gi claim of `class` with the access mode `mode`.
async fn create_claim(claims: &Api<PersistentVolumeClaim>, name: &str, class: &str, mode: &str) {
    let claim: PersistentVolumeClaim = object(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"storageClassName": class, "accessModes": [mode], "resources": {"requests": {"storage": "1Gi"}}},
    }));
    claims
        .create(&PostParams::default(), &claim)
        .await
        .expect("claim");
}

/// Creates a pod that sleeps, with `claim` (if any) at `/data` and
/// `extra_spec` merged into its spec.
async fn create_pod(pods: &Api<Pod>, name: &str, claim: Option<&str>, extra_spec: Value) {
    let mut spec =
        json!({"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]});
    if let Some(claim) = claim {
        spec["volumes"] = json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]);
        spec["containers"][0]["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    }
    for (k, v) in extra_spec.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    let pod: Pod = object(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}),
    );
    pods.create(&PostParams::default(), &pod).await.expect(name);
}

async fn await_running(pods: &Api<Pod>, name: &str) {
    await_object(pods, name, "Running", |p| pod_phase(p) == Some("Running")).await;
}

/// Deletes the pod at once (grace period 0).
async fn delete_now(pods: &Api<Pod>, name: &str) {
    pods.delete(name, &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
}

fn on_node(node: &str) -> Value {
    json!({"nodeSelector": {"kubernetes.io/hostname": node}})
}

#[tokio::test(flavor = "multi_thread")]
async fn rwo_claim_in_use_on_one_node_cannot_attach_on_another() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    create_claim(&claims, "data", "standard", "ReadWriteOnce").await;
    create_pod(&pods, "app", Some("data"), on_node("node-1")).await;
    await_running(&pods, "app").await;

    create_pod(&pods, "intruder", Some("data"), on_node("node-2")).await;
    let message = await_event(&client, "default", "intruder", "FailedAttachVolume").await;
    assert!(
        message.starts_with("Multi-Attach error for volume"),
        "{message}"
    );
    assert!(
        message.contains("Volume is already used by pod(s) app"),
        "{message}"
    );
    let intruder = pods.get("intruder").await.expect("intruder");
    assert_eq!(
        node_of(&intruder),
        Some("node-2"),
        "scheduled: RWO is not a scheduler filter"
    );
    assert_eq!(
        (pod_phase(Some(&intruder)), waiting_reason(Some(&intruder))),
        (Some("Pending"), Some("ContainerCreating"))
    );

    // A second pod on the same node shares the volume.
    create_pod(&pods, "sidecar", Some("data"), on_node("node-1")).await;
    await_running(&pods, "sidecar").await;

    // Once the app pods are gone, the intruder attaches and runs.
    for name in ["app", "sidecar"] {
        delete_now(&pods, name).await;
    }
    await_running(&pods, "intruder").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rwop_claim_refuses_a_second_pod_even_on_the_same_node() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    create_claim(&claims, "solo", "standard", "ReadWriteOncePod").await;
    create_pod(&pods, "first", Some("solo"), on_node("node-1")).await;
    await_running(&pods, "first").await;
    create_pod(&pods, "second", Some("solo"), on_node("node-1")).await;
    let message = await_event(&client, "default", "second", "FailedScheduling").await;
    assert!(message.contains("ReadWriteOncePod"), "{message}");
    let second = pods.get("second").await.expect("second");
    assert_eq!(
        (node_of(&second), pod_phase(Some(&second))),
        (None, Some("Pending"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn taints_keep_pods_off_unless_tolerated() {
    let sb = sandbox_with(vec!["node-3:dedicated=db:NoSchedule"
        .parse()
        .expect("taint")])
    .await;
    let client = client(&sb).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    create_pod(&pods, "plain", None, on_node("node-3")).await;
    let message = await_event(&client, "default", "plain", "FailedScheduling").await;
    assert!(message.starts_with("0/3 nodes are available:"), "{message}");
    assert!(
        message.contains("1 node(s) had untolerated taint {dedicated: db}"),
        "{message}"
    );
    assert!(
        message.contains("2 node(s) didn't match Pod's node affinity/selector"),
        "{message}"
    );

    let mut spec = on_node("node-3");
    spec["tolerations"] =
        json!([{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}]);
    create_pod(&pods, "tolerant", None, spec).await;
    await_object(&pods, "tolerant", "Running on node-3", |p| {
        pod_phase(p) == Some("Running") && p.and_then(node_of) == Some("node-3")
    })
    .await;

    // A NotReady node takes no new pods.
    sb.set_node_ready("node-1", false).expect("node-1 down");
    for i in 0..4 {
        create_pod(&pods, &format!("spread-{i}"), None, json!({})).await;
    }
    for i in 0..4 {
        await_object(&pods, &format!("spread-{i}"), "Running off node-1", |p| {
            pod_phase(p) == Some("Running") && p.and_then(node_of) == Some("node-2")
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn local_volumes_pin_their_pods_and_wait_for_the_first_consumer() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    create_claim(&claims, "local-data", "local", "ReadWriteOnce").await;
    let message = await_event(&client, "default", "local-data", "WaitForFirstConsumer").await;
    assert_eq!(
        message,
        "waiting for first consumer to be created before binding"
    );
    assert_eq!(
        claims
            .get("local-data")
            .await
            .expect("claim")
            .status
            .and_then(|s| s.phase)
            .as_deref(),
        Some("Pending")
    );

    create_pod(&pods, "first", Some("local-data"), json!({})).await;
    await_running(&pods, "first").await;
    let first = pods.get("first").await.expect("pod");
    let node = node_of(&first).expect("scheduled").to_string();
    let bound = claims.get("local-data").await.expect("claim");
    let annotations = bound.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("volume.kubernetes.io/selected-node"),
        Some(&node)
    );
    let pv_name = bound.spec.and_then(|s| s.volume_name).expect("bound");
    let pv = volumes.get(&pv_name).await.expect("pv");
    let affinity = serde_json::to_value(pv.spec.and_then(|s| s.node_affinity)).expect("json");
    assert_eq!(
        affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
        json!([node])
    );

    // Its next consumer lands on the same node, however busy that node is.
    for i in 0..3 {
        create_pod(&pods, &format!("filler-{i}"), None, on_node(&node)).await;
    }
    delete_now(&pods, "first").await;
    await_object(&pods, "first", "gone", |p| p.is_none()).await;
    create_pod(&pods, "second", Some("local-data"), json!({})).await;
    await_object(&pods, "second", "Running on the volume's node", |p| {
        pod_phase(p) == Some("Running") && p.and_then(node_of) == Some(node.as_str())
    })
    .await;

    // WaitForFirstConsumer on shared storage binds where the pod went.
    create_claim(&claims, "late", "standard-wffc", "ReadWriteOnce").await;
    create_pod(&pods, "consumer", Some("late"), on_node("node-2")).await;
    await_object(&claims, "late", "Bound", |c| {
        c.and_then(|c| c.status.as_ref()?.phase.as_deref()) == Some("Bound")
    })
    .await;
    let late = claims.get("late").await.expect("claim");
    assert_eq!(
        late.metadata
            .annotations
            .unwrap_or_default()
            .get("volume.kubernetes.io/selected-node")
            .map(String::as_str),
        Some("node-2")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_volume_does_not_mount_on_another_node() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    create_claim(&claims, "pinned", "local", "ReadWriteOnce").await;
    create_pod(&pods, "owner", Some("pinned"), on_node("node-1")).await;
    await_running(&pods, "owner").await;
    delete_now(&pods, "owner").await;
    await_object(&pods, "owner", "gone", |p| p.is_none()).await;
    // Bypassing the scheduler with nodeName does not bypass the disk.
    create_pod(
        &pods,
        "elsewhere",
        Some("pinned"),
        json!({"nodeName": "node-2"}),
    )
    .await;
    let message = await_event(&client, "default", "elsewhere", "FailedMount").await;
    assert!(
        message.starts_with("MountVolume.NodeAffinity check failed for volume \"pvc-"),
        "{message}"
    );
    let stuck = pods.get("elsewhere").await.expect("pod");
    assert_eq!(
        (pod_phase(Some(&stuck)), waiting_reason(Some(&stuck))),
        (Some("Pending"), Some("ContainerCreating"))
    );
}
