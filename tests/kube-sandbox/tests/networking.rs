//! Reaching a sandbox from outside, and one sandbox from another, as
//! cross-cluster migration does: LoadBalancer Services get an address from
//! the sandbox's cloud (or none, with load balancers off) and NodePort
//! listeners on every node; node ports are allocated and refused as the
//! API server does; `pods/portforward` over WebSocket moves 64 MiB through
//! kube-rs byte for byte, and needs `create` on it; two sandboxes in one
//! process are two clusters in one kubeconfig, and a pod of one reaches
//! the other's load balancer and node ports.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::k8s::is_running;
use common::{await_event, await_object, client, client_as, client_from, create, kubectl, object};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, PostParams};
use kube_sandbox::{Sandbox, SandboxConfig};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn sandbox(config: SandboxConfig) -> Sandbox {
    Sandbox::start(config).await.expect("sandbox starts")
}

/// A pod answering every connection on `$(POD_IP):8080` with `hello from
/// NAME`, Ready once it listens.
async fn echo_pod(client: &kube::Client, name: &str) {
    let script = "import socket,os\ns=socket.create_server((os.environ['POD_IP'], 8080))\nwhile True:\n    c,_=s.accept(); c.sendall(b'hello from '+os.environ['HOSTNAME'].encode()); c.close()";
    let pod: Pod = object(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "echo"}},
        "spec": {"containers": [{"name": "c", "image": "python:3", "command": ["python3", "-c", script],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "ports": [{"name": "echo", "containerPort": 8080}],
            "readinessProbe": {"tcpSocket": {"port": "echo"}, "periodSeconds": 1}}]}}));
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    await_object(&pods, name, "Ready", ready).await;
}

fn ready(p: Option<&Pod>) -> bool {
    is_running(p) && common::k8s::container(p).is_some_and(|c| c.ready)
}

/// A Service of `kind` in front of the echo pods, port 80.
async fn echo_service(client: &kube::Client, name: &str, kind: &str) -> Service {
    let services: Api<Service> = Api::default_namespaced(client.clone());
    let service: Service = object(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"type": kind, "selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": "echo"}]}}),
    );
    services
        .create(&PostParams::default(), &service)
        .await
        .expect("service")
}

fn ingress_ip(s: Option<&Service>) -> Option<String> {
    s?.status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

fn node_port(s: &Service) -> u16 {
    let port = s
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.first());
    let node_port = port.and_then(|p| p.node_port).expect("a node port");
    assert!((30000..=32767).contains(&node_port), "{node_port}");
    u16::try_from(node_port).expect("port")
}

/// What a connection to `addr` reads, once one reads something (60 s).
async fn reply(addr: SocketAddr) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(mut conn) => {
                let mut text = String::new();
                if conn.read_to_string(&mut text).await.is_ok() && !text.is_empty() {
                    return text;
                }
                last = "EOF".into();
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{addr}: no reply in 60 s; last: {last}");
}

/// Waits until nothing listens at `addr` any more (60 s).
async fn refused(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match tokio::net::TcpStream::connect(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    panic!("{addr} still listens after 60 s");
}

fn node_ips(sb: &Sandbox) -> Vec<IpAddr> {
    let ips: Vec<IpAddr> = sb
        .node_names()
        .iter()
        .map(|n| sb.node_ip(n).expect("InternalIP"))
        .collect();
    let mut distinct = ips.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), ips.len(), "{ips:?}");
    ips
}

#[tokio::test(flavor = "multi_thread")]
async fn a_load_balancer_gets_an_address_that_reaches_its_pods() {
    let sb = sandbox(SandboxConfig::default()).await;
    let client = client(&sb).await;
    echo_pod(&client, "echo").await;
    let created = echo_service(&client, "web", "LoadBalancer").await;
    let node_port = node_port(&created);
    let services: Api<Service> = Api::default_namespaced(client.clone());
    await_object(&services, "web", "an ingress IP", |s| {
        ingress_ip(s).is_some()
    })
    .await;
    let web = services.get("web").await.expect("service");
    let ip: IpAddr = ingress_ip(Some(&web)).expect("ip").parse().expect("an IP");
    assert_eq!(ip.to_string(), format!("127.{}.254.1", sb.block()));
    let ingress = &web
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.clone())
        .expect("ingress")[0];
    assert_eq!(ingress.ip_mode.as_deref(), Some("VIP"));
    let finalizers = web.metadata.finalizers.clone().unwrap_or_default();
    assert_eq!(finalizers, ["service.kubernetes.io/load-balancer-cleanup"]);
    assert_eq!(
        await_event(&client, "default", "web", "EnsuredLoadBalancer").await,
        "Ensured load balancer"
    );
    assert_eq!(reply(SocketAddr::new(ip, 80)).await, "hello from echo");
    for node in node_ips(&sb) {
        assert_eq!(
            reply(SocketAddr::new(node, node_port)).await,
            "hello from echo"
        );
    }
    // kubectl shows the address as EXTERNAL-IP, with both ports.
    let table = kubectl(&sb, &["get", "service", "web", "--no-headers"], None).await;
    assert!(
        table.stdout.contains(&format!("{ip}"))
            && table.stdout.contains(&format!("80:{node_port}/TCP")),
        "{}",
        table.stdout
    );
    // Deleted: the load balancer goes, then the Service, then its listeners.
    services
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    await_object(&services, "web", "gone", |s| s.is_none()).await;
    await_event(&client, "default", "web", "DeletedLoadBalancer").await;
    refused(SocketAddr::new(ip, 80)).await;
    refused(SocketAddr::new(node_ips(&sb)[0], node_port)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_load_balancers_the_ingress_stays_empty_and_node_ports_serve() {
    let sb = sandbox(SandboxConfig {
        load_balancers: false,
        ..SandboxConfig::default()
    })
    .await;
    let client = client(&sb).await;
    echo_pod(&client, "echo").await;
    let created = echo_service(&client, "web", "LoadBalancer").await;
    let node_port = node_port(&created);
    for node in node_ips(&sb) {
        assert_eq!(
            reply(SocketAddr::new(node, node_port)).await,
            "hello from echo"
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let services: Api<Service> = Api::default_namespaced(client.clone());
    let web = services.get("web").await.expect("service");
    assert_eq!(ingress_ip(Some(&web)), None, "{:?}", web.status);
    assert!(web.metadata.finalizers.is_none(), "no cloud, no finalizer");
    let table = kubectl(&sb, &["get", "service", "web", "--no-headers"], None).await;
    assert!(table.stdout.contains("<pending>"), "{}", table.stdout);
    // Turned on, the cloud gives it one.
    sb.set_load_balancers(true);
    await_object(&services, "web", "an ingress IP", |s| {
        ingress_ip(s).is_some()
    })
    .await;
    // Made a ClusterIP Service, it loses its node port and its load balancer.
    let patched = kubectl(
        &sb,
        &[
            "patch",
            "service",
            "web",
            "-p",
            r#"{"spec":{"type":"ClusterIP"}}"#,
        ],
        None,
    )
    .await;
    assert!(patched.ok, "{}", patched.stderr);
    let web = services.get("web").await.expect("service");
    let ports = web
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .expect("ports");
    assert_eq!(ports[0].node_port, None);
    refused(SocketAddr::new(node_ips(&sb)[1], node_port)).await;
    await_object(&services, "web", "no load balancer", |s| {
        ingress_ip(s).is_none()
            && s.is_some_and(|s| s.metadata.finalizers.as_ref().is_none_or(Vec::is_empty))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn node_ports_are_refused_as_the_api_server_refuses_them() {
    let sb = sandbox(SandboxConfig {
        nodes: 1,
        ..SandboxConfig::default()
    })
    .await;
    let service = |name: &str, kind: &str, node_port: u32| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"type": kind, "selector": {"app": name}, "ports": [{"port": 80, "nodePort": node_port}]}})
        .to_string()
    };
    let first = create(&sb, &service("a", "NodePort", 30080)).await;
    assert!(first.ok, "{}", first.stderr);
    let taken = create(&sb, &service("b", "LoadBalancer", 30080)).await;
    assert!(!taken.ok);
    assert!(
        taken.stderr.contains("The Service \"b\" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"),
        "{}",
        taken.stderr
    );
    let low = create(&sb, &service("c", "NodePort", 8080)).await;
    assert!(
        low.stderr.contains("spec.ports[0].nodePort: Invalid value: 8080: provided port is not in the valid range. The range of valid ports is 30000-32767"),
        "{}",
        low.stderr
    );
    let plain = create(&sb, &service("d", "ClusterIP", 30081)).await;
    assert!(
        plain.stderr.contains(
            "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"
        ),
        "{}",
        plain.stderr
    );
    // Freed with its Service, the port can be had again.
    let deleted = kubectl(&sb, &["delete", "service", "a"], None).await;
    assert!(deleted.ok, "{}", deleted.stderr);
    let again = create(&sb, &service("b", "LoadBalancer", 30080)).await;
    assert!(again.ok, "{}", again.stderr);
}

/// A pod that reads an 8-byte big-endian length and that many bytes on
/// each connection (its readiness probe's, with none, only closes) at
/// `$(POD_IP):7000`, then writes the SHA-256 of what it read, the SHA-256
/// of 16 MiB of random bytes, and those bytes.
const CHECKSUM: &str = "import socket,os,hashlib,struct\ns=socket.create_server((os.environ['POD_IP'], 7000))\nwhile True:\n    c,_=s.accept()\n    d=c.recv(8,socket.MSG_WAITALL)\n    if len(d)<8: c.close(); continue\n    n=struct.unpack('>Q',d)[0]\n    h=hashlib.sha256()\n    while n>0:\n        b=c.recv(min(n,1<<20))\n        if not b: break\n        h.update(b); n-=len(b)\n    back=os.urandom(16<<20)\n    c.sendall(h.hexdigest().encode()+hashlib.sha256(back).hexdigest().encode()+back)\n    c.close()";

async fn checksum_pod(client: &kube::Client) {
    let pod: Pod = object(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sum"},
        "spec": {"containers": [{"name": "c", "image": "python:3", "command": ["python3", "-c", CHECKSUM],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "ports": [{"name": "sum", "containerPort": 7000}],
            "readinessProbe": {"tcpSocket": {"port": "sum"}, "periodSeconds": 1}}]}}),
    );
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    await_object(&pods, "sum", "Ready", ready).await;
}

/// 1 MiB of xorshift output, continuing from `state`.
fn chunk(state: &mut u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 << 20);
    while out.len() < 1 << 20 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn port_forward_moves_64_mib_byte_identical() {
    const MIB: usize = 64;
    let sb = sandbox(SandboxConfig::default()).await;
    let client = client(&sb).await;
    checksum_pod(&client).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let mut forward = pods
        .portforward("sum", &[7000])
        .await
        .expect("port forward");
    let stream = forward.take_stream(7000).expect("the port's stream");
    let (mut from_pod, mut to_pod) = tokio::io::split(stream);
    let started = Instant::now();
    let sender = tokio::spawn(async move {
        let mut sent = Sha256::new();
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        to_pod
            .write_all(&((MIB << 20) as u64).to_be_bytes())
            .await
            .expect("length");
        for _ in 0..MIB {
            let data = chunk(&mut state);
            sent.update(&data);
            to_pod.write_all(&data).await.expect("write");
        }
        to_pod.flush().await.expect("flush");
        // Not shut down: v4 has no half-close, and the port would go.
        (to_pod, format!("{:x}", sent.finalize()))
    });
    let mut digests = [0u8; 128];
    from_pod.read_exact(&mut digests).await.expect("digests");
    let (to_pod, sent) = sender.await.expect("sender");
    assert_eq!(
        std::str::from_utf8(&digests[..64]).expect("hex"),
        sent,
        "what the pod read"
    );
    let mut back = vec![0u8; 16 << 20];
    from_pod.read_exact(&mut back).await.expect("16 MiB back");
    let elapsed = started.elapsed();
    assert_eq!(
        std::str::from_utf8(&digests[64..]).expect("hex"),
        format!("{:x}", Sha256::digest(&back)),
        "what the pod sent"
    );
    eprintln!("port forward: {} MiB there and 16 back in {elapsed:?}", MIB);
    // The pod closes its end: the port is done and the WebSocket closes.
    let mut rest = Vec::new();
    from_pod.read_to_end(&mut rest).await.expect("EOF");
    assert!(rest.is_empty());
    drop((from_pod, to_pod));
    // kube-rs answers the server's close, then sends its own once its
    // stream is dropped: tungstenite refuses that ("Sending after
    // closing is not allowed"), as it
    // would against a kubelet, which closes first the same way.
    let ended = tokio::time::timeout(Duration::from_secs(10), forward.join())
        .await
        .expect("the forward ends");
    if let Err(e) = ended {
        assert!(e.to_string().contains("Sending after closing"), "{e}");
    }
    // A port nothing listens on is reported on its error channel.
    let mut closed = pods
        .portforward("sum", &[7001])
        .await
        .expect("port forward");
    let error = closed.take_error(7001).expect("error channel").await;
    let error = error.expect("an error");
    assert!(
        error.starts_with("error forwarding port 7001 to pod "),
        "{error}"
    );
    // Pods that do not exist, or have no node, are the API server's errors.
    let missing = pods.portforward("nobody", &[80]).await.err().expect("404");
    assert!(missing.to_string().contains("404"), "{missing}");
}

#[tokio::test(flavor = "multi_thread")]
async fn port_forward_needs_get_and_create_on_pods_portforward() {
    let sb = sandbox(SandboxConfig {
        nodes: 1,
        ..SandboxConfig::default()
    })
    .await;
    let admin = client(&sb).await;
    checksum_pod(&admin).await;
    let role = |verbs: &[&str]| {
        json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "mover"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "forward"},
             "rules": [{"apiGroups": [""], "resources": ["pods/portforward"], "verbs": verbs}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "forward"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "forward"},
             "subjects": [{"kind": "ServiceAccount", "name": "mover", "namespace": "default"}]}]})
        .to_string()
    };
    let applied = common::apply(&sb, &role(&["get"])).await;
    assert!(applied.ok, "{}", applied.stderr);
    let pods: Api<Pod> = Api::default_namespaced(client_as(&sb, "default", "mover").await);
    let refused = pods.portforward("sum", &[7000]).await.err().expect("403");
    assert!(refused.to_string().contains("403"), "{refused}");
    let denied = sb
        .audit()
        .into_iter()
        .rev()
        .find(|e| e.uri.contains("/portforward"))
        .expect("audited");
    assert_eq!(
        denied.authorization.map(|a| a.attributes.verb),
        Some("get".into())
    );
    let applied = common::apply(&sb, &role(&["create"])).await;
    assert!(applied.ok, "{}", applied.stderr);
    assert!(
        pods.portforward("sum", &[7000]).await.is_err(),
        "create alone is not get"
    );
    let applied = common::apply(&sb, &role(&["get", "create"])).await;
    assert!(applied.ok, "{}", applied.stderr);
    let mut forward = pods.portforward("sum", &[7000]).await.expect("allowed");
    let mut stream = forward.take_stream(7000).expect("stream");
    stream.write_all(&4u64.to_be_bytes()).await.expect("length");
    stream.write_all(b"data").await.expect("data");
    let mut digest = [0u8; 64];
    stream.read_exact(&mut digest).await.expect("digest");
    assert_eq!(
        std::str::from_utf8(&digest).expect("hex"),
        format!("{:x}", Sha256::digest(b"data"))
    );
}

/// A pod that connects to each `HOST:PORT` argument and prints the first
/// reply it reads there, retrying for a minute.
const CLIENT: &str = "import socket,sys,time\nfor target in sys.argv[1:]:\n    host,port=target.rsplit(':',1)\n    for _ in range(600):\n        try:\n            c=socket.create_connection((host,int(port)),timeout=5); d=c.recv(100)\n            if d: print(target, d.decode(), flush=True); break\n        except OSError: pass\n        time.sleep(0.1)";

#[tokio::test(flavor = "multi_thread")]
async fn two_sandboxes_are_two_clusters_that_reach_each_other() {
    let src = sandbox(SandboxConfig {
        nodes: 2,
        name: "src".into(),
        ..SandboxConfig::default()
    })
    .await;
    let dst = sandbox(SandboxConfig {
        nodes: 2,
        name: "dst".into(),
        ..SandboxConfig::default()
    })
    .await;
    assert_ne!(src.block(), dst.block());
    let (src_nodes, dst_nodes) = (node_ips(&src), node_ips(&dst));
    assert!(
        src_nodes.iter().all(|ip| !dst_nodes.contains(ip)),
        "{src_nodes:?} {dst_nodes:?}"
    );
    // One kubeconfig, two contexts.
    let path = src.data_dir().join("two-clusters");
    kube_sandbox::testkit::merged_kubeconfig(&[(&src, "src"), (&dst, "dst")], &path)
        .expect("kubeconfig");
    let run = |args: &[&str]| {
        let mut command = tokio::process::Command::new(common::kubectl_program());
        command.arg("--kubeconfig").arg(&path).args(args);
        async move {
            let out = command.output().await.expect("kubectl runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    assert_eq!(
        run(&["config", "get-contexts", "-o", "name"]).await,
        "dst\nsrc\n"
    );
    assert_eq!(run(&["config", "current-context"]).await, "src\n");
    let address = |sb: &Sandbox| format!("{}", sb.node_ip("node-1").expect("node"));
    let jsonpath = "jsonpath={.status.addresses[0].address}";
    let dst_node = run(&["--context", "dst", "get", "node", "node-1", "-o", jsonpath]).await;
    assert_eq!(dst_node, address(&dst));
    let src_node = run(&["--context", "src", "get", "node", "node-1", "-o", jsonpath]).await;
    assert_eq!(src_node, address(&src));
    let options = kube::config::KubeConfigOptions {
        context: Some("dst".into()),
        ..Default::default()
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("config");
    let dst_client = kube::Client::try_from(config).expect("client");
    // A load balancer in dst, reached from a pod in src.
    echo_pod(&dst_client, "echo").await;
    let created = echo_service(&dst_client, "web", "LoadBalancer").await;
    let services: Api<Service> = Api::default_namespaced(dst_client.clone());
    await_object(&services, "web", "an ingress IP", |s| {
        ingress_ip(s).is_some()
    })
    .await;
    let ingress = ingress_ip(services.get("web").await.ok().as_ref()).expect("ip");
    let node_port = format!("{}:{}", dst_nodes[1], node_port(&created));
    let targets = [format!("{ingress}:80"), node_port];
    let mut command = vec!["python3".to_string(), "-c".into(), CLIENT.into()];
    command.extend(targets.iter().cloned());
    let pod: Pod = object(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "caller"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "python:3", "command": command}]}}),
    );
    let src_client = client_from(&path).await;
    let pods: Api<Pod> = Api::default_namespaced(src_client);
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    await_object(&pods, "caller", "Succeeded", |p| {
        common::k8s::pod_phase(p) == Some("Succeeded")
    })
    .await;
    let logs = pods
        .logs("caller", &Default::default())
        .await
        .expect("logs");
    let want: Vec<String> = targets
        .iter()
        .map(|t| format!("{t} hello from echo"))
        .collect();
    assert_eq!(logs.lines().collect::<Vec<_>>(), want);
}
