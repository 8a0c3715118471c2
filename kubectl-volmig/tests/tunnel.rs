//! The tunnel network path (issue 23) between two clusters: a sender pod
//! in `src` and a receiver pod in `dst`, both listening, joined by
//! `driver::tunnel::relay` through two `pods/portforward` streams, one per
//! API server. The movers authenticate each other end to end; the tree
//! arrives whole.

mod common;

use std::time::{Duration, Instant};

use common::{Env, MOVER_IMAGE};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::Client;
use kube_sandbox::SandboxConfig;
use mover::tls::{KeyMaterial, Role, CA_CERT, OPERATION_FILE};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use volmig::driver::tunnel::{self, Ending, Endpoint, Moved, Side, TunnelError};

const RECEIVER_PORT: u16 = 7000;
const SENDER_PORT: u16 = 7001;

async fn cluster(name: &str) -> Env {
    common::env_configured(SandboxConfig {
        name: name.into(),
        nodes: 1,
        ..SandboxConfig::default()
    })
    .await
}

/// The operation's key material as a Secret (the plugin's keys Secret
/// holds the same files).
async fn keys_secret(client: &Client, ns: &str, material: &KeyMaterial) {
    let data = material
        .files()
        .map(|(name, bytes)| (name.to_string(), ByteString(bytes.to_vec())))
        .collect();
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("tunnel-keys".into()),
            ..Default::default()
        },
        data: Some(data),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("keys secret");
}

/// A mover pod of `role` on `claim` listening on `$(POD_IP):port`, with
/// its files of the key material at /tls.
async fn mover_pod(client: &Client, ns: &str, name: &str, role: Role, claim: &str, port: u16) {
    let (verb, read_only) = match role {
        Role::Sender => ("send", true),
        Role::Receiver => ("receive", false),
    };
    let listen = format!("$(POD_IP):{port}");
    let items: Vec<_> = [CA_CERT, OPERATION_FILE, role.cert_file(), role.key_file()]
        .iter()
        .map(|f| json!({"key": f, "path": f}))
        .collect();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "mover", "image": MOVER_IMAGE,
                "args": [verb, "--listen", listen, "--root", "/data", "--tls-dir", "/tls",
                         "--progress", "json"],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data", "readOnly": read_only},
                    {"name": "tls", "mountPath": "/tls", "readOnly": true},
                ],
            }],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": claim}},
                {"name": "tls", "secret": {"secretName": "tunnel-keys", "items": items}},
            ],
        },
    });
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.create(&PostParams::default(), &common::object(pod))
        .await
        .expect("mover pod");
    // What the plugin waits for before it connects.
    common::wait_until(&format!("{name} listening"), || async {
        let log = pods.logs(name, &Default::default()).await.ok()?;
        log.contains("mover: listening on ").then_some(())
    })
    .await;
}

async fn phase(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get(name).await.ok()?.status?.phase
}

/// Waits until pod `name` has ended; its phase and log.
async fn ended(pods: &Api<Pod>, name: &str) -> (String, String) {
    let phase = common::wait_until(&format!("{name} ended"), || async {
        phase(pods, name)
            .await
            .filter(|p| p == "Succeeded" || p == "Failed")
    })
    .await;
    let log = pods
        .logs(name, &Default::default())
        .await
        .unwrap_or_default();
    (phase, log)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tree_crosses_two_clusters_through_the_tunnel() {
    // RUST_LOG=volmig::driver::tunnel=debug says how each side ended.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let (src, dst) = (cluster("src").await, cluster("dst").await);
    let (src_client, dst_client) = (src.client().await, dst.client().await);
    let (src_ns, dst_ns) = (src.namespace.clone(), dst.namespace.clone());
    common::claim(&src_client, &src_ns, "tunnel-src", "ReadWriteOnce", "1Gi").await;
    common::claim(&dst_client, &dst_ns, "tunnel-dst", "ReadWriteOnce", "1Gi").await;
    let source = common::volume_dir(&src_client, &src_ns, "tunnel-src").await;
    common::seed(&source, 200, 16 << 10);
    let big = source.join("big");
    std::fs::create_dir(&big).expect("dir");
    common::fill_incompressible(&big, 48, 7);
    let material = KeyMaterial::generate("op-tunnel", Duration::from_secs(3600)).expect("keys");
    keys_secret(&src_client, &src_ns, &material).await;
    keys_secret(&dst_client, &dst_ns, &material).await;
    let (sender_pod, receiver_pod) = ("tunnel-sender", "tunnel-receiver");
    mover_pod(
        &dst_client,
        &dst_ns,
        receiver_pod,
        Role::Receiver,
        "tunnel-dst",
        RECEIVER_PORT,
    )
    .await;
    mover_pod(
        &src_client,
        &src_ns,
        sender_pod,
        Role::Sender,
        "tunnel-src",
        SENDER_PORT,
    )
    .await;
    let src_pods: Api<Pod> = Api::namespaced(src_client.clone(), &src_ns);
    let dst_pods: Api<Pod> = Api::namespaced(dst_client.clone(), &dst_ns);
    let sender = |pod, port| Endpoint {
        pods: src_pods.clone(),
        pod,
        port,
    };
    let receiver = Endpoint {
        pods: dst_pods.clone(),
        pod: receiver_pod,
        port: RECEIVER_PORT,
    };

    // A pod that does not exist: the API server's 404, for good.
    let moved = Moved::default();
    let cancel = CancellationToken::new();
    let missing = tunnel::relay(
        sender("nobody", SENDER_PORT),
        receiver.clone(),
        cancel.clone(),
        &moved,
    )
    .await;
    match missing {
        Err(
            e @ TunnelError::Open {
                side: Side::Sender, ..
            },
        ) => {
            assert!(!e.is_retryable(), "{e}");
            assert!(e.to_string().contains("sender pod nobody"), "{e}");
        }
        other => panic!("a missing sender pod: {other:?}"),
    }
    // A port nothing listens on: the pod's refusal, worth another try; the
    // receiver took the relay's connection and refused it at the handshake.
    let closed = tunnel::relay(
        sender(sender_pod, 7009),
        receiver.clone(),
        cancel.clone(),
        &moved,
    )
    .await;
    match closed {
        Err(
            e @ TunnelError::Unreachable {
                side: Side::Sender, ..
            },
        ) => {
            assert!(e.is_retryable(), "{e}");
            assert!(e.to_string().contains("tunnel-sender"), "{e}");
        }
        other => panic!("a port nothing listens on: {other:?}"),
    }
    assert_eq!(
        phase(&dst_pods, receiver_pod).await.as_deref(),
        Some("Running")
    );

    let moved = Moved::default();
    let started = Instant::now();
    let relayed = tokio::time::timeout(
        Duration::from_secs(240),
        tunnel::relay(sender(sender_pod, SENDER_PORT), receiver, cancel, &moved),
    )
    .await
    .expect("the relay ends with the session")
    .expect("the relay");
    let elapsed = started.elapsed();
    let (sent, received) = (
        ended(&src_pods, sender_pod).await,
        ended(&dst_pods, receiver_pod).await,
    );
    assert_eq!(
        sent.0, "Succeeded",
        "sender:\n{}\nreceiver:\n{}",
        sent.1, received.1
    );
    assert_eq!(received.0, "Succeeded", "receiver:\n{}", received.1);
    assert!(matches!(relayed.ending, Ending::Closed(_)), "{relayed:?}");
    assert!(
        sent.1.contains("authenticated session from "),
        "the sender took the relay's connection: {}",
        sent.1
    );
    let destination = common::volume_dir(&dst_client, &dst_ns, "tunnel-dst").await;
    assert_eq!(
        common::manifest(&destination),
        common::manifest(&source),
        "the destination's tree is the source's"
    );
    let mib = relayed.to_receiver as f64 / f64::from(1 << 20);
    eprintln!(
        "tunnel: {mib:.1} MiB to the receiver and {} KiB back in {elapsed:.2?} \
         ({:.1} MiB/s), ended by {:?}",
        relayed.to_sender >> 10,
        mib / elapsed.as_secs_f64(),
        relayed.ending,
    );
}
