//! What the kubelets and the service forwarders do: a crashed node's
//! containers restart, deletion sends SIGTERM within the grace period, and
//! a ClusterIP Service reaches a ready pod.

mod common;

use std::time::Duration;

use common::k8s::{container, is_running, pod_phase};
use common::{await_object, client, object, sandbox};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn restarts(p: Option<&Pod>) -> i32 {
    container(p).map_or(0, |c| c.restart_count)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_nodes_containers_restart_by_policy() {
    let sb = sandbox().await;
    let pods: Api<Pod> = Api::default_namespaced(client(&sb).await);
    for (name, policy) in [("always", "Always"), ("never", "Never")] {
        let pod: Pod = object(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
            "restartPolicy": policy, "nodeName": "node-2",
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}),
        );
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("pod");
        await_object(&pods, name, "Running", is_running).await;
    }
    sb.kill_pods_on("node-2");
    await_object(&pods, "always", "restarted", |p| {
        is_running(p) && restarts(p) == 1
    })
    .await;
    let always = pods.get("always").await.expect("pod");
    let last = container(Some(&always))
        .and_then(|c| c.last_state.clone()?.terminated)
        .expect("last terminated state");
    assert_eq!(last.exit_code, 137);
    await_object(&pods, "never", "Failed", |p| pod_phase(p) == Some("Failed")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn deletion_sends_sigterm_and_waits_for_the_grace_period() {
    let sb = sandbox().await;
    let pods: Api<Pod> = Api::default_namespaced(client(&sb).await);
    let marker = sb.data_dir().join("marker");
    std::fs::create_dir_all(&marker).expect("marker dir");
    let pod: Pod = object(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "graceful"}, "spec": {
        "terminationGracePeriodSeconds": 20,
        "containers": [{"name": "c", "image": "busybox",
            "command": ["sh", "-c", "trap 'echo term > /out/signal; exit 0' TERM; while true; do sleep 0.1; done"],
            "volumeMounts": [{"name": "out", "mountPath": "/out"}]}],
        "volumes": [{"name": "out", "hostPath": {"path": marker.to_string_lossy()}}]}}),
    );
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    await_object(&pods, "graceful", "Running", is_running).await;
    let deleting = pods
        .delete("graceful", &DeleteParams::default())
        .await
        .expect("delete");
    let terminating = deleting.left().expect("terminating, not gone at once");
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(20));
    await_object(&pods, "graceful", "gone", |p| p.is_none()).await;
    assert_eq!(
        std::fs::read_to_string(marker.join("signal")).expect("the trap ran"),
        "term\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_ip_services_reach_ready_pods() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let services: Api<Service> = Api::default_namespaced(client.clone());
    let pod: Pod = object(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "echo", "labels": {"app": "echo"}}, "spec": {
        "containers": [{"name": "c", "image": "python:3",
            "command": ["python3", "-c", "import socket,os\ns=socket.create_server((os.environ['POD_IP'], 8080))\nwhile True:\n    c,_=s.accept(); c.sendall(b'hello from '+os.environ['HOSTNAME'].encode()); c.close()"],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "ports": [{"name": "echo", "containerPort": 8080}]}]}}),
    );
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let service: Service = object(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo"},
        "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": "echo"}]}}),
    );
    let created = services
        .create(&PostParams::default(), &service)
        .await
        .expect("service");
    let ip = created.spec.and_then(|s| s.cluster_ip).expect("cluster IP");
    assert!(ip.starts_with("127.") && ip.contains(".255."), "{ip}");
    await_object(&pods, "echo", "Running", is_running).await;
    let mut reply = String::new();
    for _ in 0..100 {
        reply.clear();
        if let Ok(mut conn) = tokio::net::TcpStream::connect((ip.as_str(), 80)).await {
            let _ = conn.write_all(b"hi").await;
            let _ = conn.read_to_string(&mut reply).await;
            if !reply.is_empty() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(reply, "hello from echo");
    // Written back without its address (kubectl replace), it keeps it.
    let mut again: Service = object(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo"},
        "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": "echo"}]}}),
    );
    again.metadata.resource_version = services
        .get("echo")
        .await
        .expect("service")
        .metadata
        .resource_version;
    let replaced = services
        .replace("echo", &PostParams::default(), &again)
        .await
        .expect("replace");
    assert_eq!(
        replaced.spec.and_then(|s| s.cluster_ip).as_deref(),
        Some(ip.as_str())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_sandbox_kills_its_pods() {
    let sb = sandbox().await;
    let pods: Api<Pod> = Api::default_namespaced(client(&sb).await);
    let pod: Pod = object(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orphan"}, "spec": {
        "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 300 & wait"]}]}}),
    );
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    await_object(&pods, "orphan", "Running", is_running).await;
    let id = pods.get_opt("orphan").await.expect("get");
    let id = container(id.as_ref())
        .and_then(|c| c.container_id.clone())
        .expect("container id");
    let pid = id.strip_prefix("sandbox://").expect("sandbox id");
    let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
    assert!(proc_dir.exists());
    drop(sb);
    // The runtime goes on; the container must not.
    for _ in 0..100 {
        if !proc_dir.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("pid {pid} outlived its sandbox");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_nodes_pods_stay_terminating_until_it_returns() {
    let sb = sandbox().await;
    let pods: Api<Pod> = Api::default_namespaced(client(&sb).await);
    let pod: Pod = object(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stranded"}, "spec": {
        "nodeName": "node-1", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}),
    );
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let once: Pod = object(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "once"}, "spec": {
        "nodeName": "node-1", "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}),
    );
    pods.create(&PostParams::default(), &once)
        .await
        .expect("pod");
    for name in ["stranded", "once"] {
        await_object(&pods, name, "Running", is_running).await;
    }
    sb.set_node_ready("node-1", false)
        .expect("node-1 unreachable");
    // What dies on an unreachable node is not heard of until it is back.
    sb.kill_pods_on("node-1");
    let ready = |p: Option<&Pod>| {
        p.and_then(|p| {
            p.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.status.clone())
        })
    };
    await_object(&pods, "stranded", "not Ready", |p| {
        ready(p).as_deref() == Some("False")
    })
    .await;
    pods.delete("stranded", &DeleteParams::default())
        .await
        .expect("delete");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = pods
        .get("stranded")
        .await
        .expect("still there: nobody confirmed the kill");
    assert!(held.metadata.deletion_timestamp.is_some());
    let stale = pods.get("once").await.expect("once");
    assert_eq!(
        pod_phase(Some(&stale)),
        Some("Running"),
        "reported while unreachable"
    );
    sb.set_node_ready("node-1", true).expect("node-1 back");
    await_object(&pods, "stranded", "gone", |p| p.is_none()).await;
    await_object(&pods, "once", "Failed", |p| pod_phase(p) == Some("Failed")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_waits_for_the_probe() {
    let sb = sandbox().await;
    let pods: Api<Pod> = Api::default_namespaced(client(&sb).await);
    // The pod's /tmp is its own: the go-ahead comes through a volume.
    let signal = sb.data_dir().join("signal");
    std::fs::create_dir_all(&signal).expect("signal dir");
    let script = "import socket,os,time\nwhile not os.path.exists('/signal/listen'): time.sleep(0.05)\ns=socket.create_server((os.environ['POD_IP'], 7000))\nwhile True: s.accept()[0].close()";
    let pod: Pod = object(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "slow"}, "spec": {
        "containers": [{"name": "c", "image": "python:3", "command": ["python3", "-c", script],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "ports": [{"name": "data", "containerPort": 7000}],
            "volumeMounts": [{"name": "signal", "mountPath": "/signal"}],
            "readinessProbe": {"tcpSocket": {"port": "data"}, "periodSeconds": 1}}],
        "volumes": [{"name": "signal", "hostPath": {"path": signal.to_string_lossy()}}]}}),
    );
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    await_object(&pods, "slow", "Running", is_running).await;
    let ready = |p: Option<&Pod>| container(p).map(|c| c.ready);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        ready(pods.get_opt("slow").await.expect("get").as_ref()),
        Some(false),
        "ready before it listens"
    );
    std::fs::write(signal.join("listen"), "").expect("go-ahead");
    await_object(&pods, "slow", "Ready", |p| ready(p) == Some(true)).await;
}
