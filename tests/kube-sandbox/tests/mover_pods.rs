//! Two pods run the real `mover`: a receiver on the destination claim and a
//! sender on the source claim, authenticated with key material from a
//! Secret. The destination ends up identical to the source.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use base64::prelude::{Engine as _, BASE64_STANDARD};
use common::k8s::{bound_volume, container, pod_phase};
use common::{await_object, client, mover_binary, object, sandbox, MOVER_IMAGE};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, LogParams, PostParams};
use serde_json::{json, Value};

fn claim(name: &str) -> PersistentVolumeClaim {
    object(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
}

/// A mover pod: `args` then `--root /data --tls-dir /tls` run by the
/// image's entrypoint, the claim at `/data`, this role's key material at
/// `/tls`.
fn mover_pod(name: &str, claim: &str, role: &str, files: &[String], args: &[&str]) -> Pod {
    let args: Vec<&str> = [args, &["--root", "/data", "--tls-dir", "/tls"]].concat();
    let items: Vec<Value> = files
        .iter()
        .filter(|f| !f.contains("sender") && !f.contains("receiver") || f.contains(role))
        .map(|f| json!({"key": f, "path": f}))
        .collect();
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "mover"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "mover",
                "image": format!("{MOVER_IMAGE}:0.1.0"),
                "args": args,
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data", "readOnly": role == "sender"},
                    {"name": "tls", "mountPath": "/tls", "readOnly": true},
                ],
            }],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": claim}},
                {"name": "tls", "secret": {"secretName": "op-keys", "defaultMode": 0o400, "items": items}},
            ],
        },
    });
    if role == "receiver" {
        // Ready once it listens; the probe's bare TCP connections are
        // refused by the receiver's TLS and must not end it.
        pod["spec"]["containers"][0]["ports"] = json!([{"name": "mover", "containerPort": 7000}]);
        pod["spec"]["containers"][0]["readinessProbe"] =
            json!({"tcpSocket": {"port": "mover"}, "periodSeconds": 1});
    }
    object(pod)
}

/// Path → BLAKE3 of contents (files) or "dir" / "-> target" (links).
fn manifest(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .expect("beneath")
                .to_string_lossy()
                .into_owned();
            let kind = entry.file_type().expect("type");
            let value = if kind.is_symlink() {
                format!("-> {}", std::fs::read_link(&path).expect("link").display())
            } else if kind.is_dir() {
                stack.push(path.clone());
                "dir".to_string()
            } else {
                blake3::hash(&std::fs::read(&path).expect("read"))
                    .to_hex()
                    .to_string()
            };
            out.insert(rel, value);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn mover_pods_copy_a_claim_over_tls() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    for name in ["src", "dst"] {
        claims
            .create(&PostParams::default(), &claim(name))
            .await
            .expect("claim");
    }
    let (_, src) = bound_volume(&claims, &volumes, "src").await;
    let (_, dst) = bound_volume(&claims, &volumes, "dst").await;
    std::fs::create_dir_all(src.join("db/wal")).expect("dirs");
    for i in 0..50 {
        let body: Vec<u8> = (0..(i * 997 + 13)).map(|b| (b * 31 + i) as u8).collect();
        std::fs::write(src.join(format!("db/wal/{i:04}.seg")), body).expect("file");
    }
    std::fs::write(src.join("db/PG_VERSION"), "16\n").expect("file");
    std::os::unix::fs::symlink("wal/0000.seg", src.join("db/current")).expect("link");

    // The operation's key material, as the plugin puts it in a Secret.
    let keys = sb.data_dir().join("keys");
    let status = std::process::Command::new(mover_binary())
        .args(["keygen", "--operation-id", "op-1", "--out"])
        .arg(&keys)
        .status()
        .expect("keygen runs");
    assert!(status.success());
    let mut data = serde_json::Map::new();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&keys).expect("keys") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        data.insert(
            name.clone(),
            json!(BASE64_STANDARD.encode(std::fs::read(entry.path()).expect("key"))),
        );
        files.push(name);
    }
    let secret: Secret = object(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "op-keys"}, "data": data}),
    );
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");

    let receive = ["receive", "--listen", "$(POD_IP):7000"];
    let receiver = mover_pod("receiver", "dst", "receiver", &files, &receive);
    pods.create(&PostParams::default(), &receiver)
        .await
        .expect("receiver");
    await_object(&pods, "receiver", "Ready", |p| {
        container(p).is_some_and(|c| c.ready)
    })
    .await;
    let ip = pods
        .get("receiver")
        .await
        .expect("receiver")
        .status
        .and_then(|s| s.pod_ip)
        .expect("pod IP");
    assert!(ip.starts_with("127.") && !ip.starts_with("127.0."), "{ip}");

    let peer = format!("{ip}:7000");
    let sender = mover_pod("sender", "src", "sender", &files, &["send", "--to", &peer]);
    pods.create(&PostParams::default(), &sender)
        .await
        .expect("sender");

    for name in ["sender", "receiver"] {
        await_object(&pods, name, "finished", |p| {
            matches!(pod_phase(p), Some("Succeeded" | "Failed"))
        })
        .await;
        let logs = pods.logs(name, &LogParams::default()).await.expect("logs");
        assert_eq!(
            pod_phase(pods.get_opt(name).await.expect("get").as_ref()),
            Some("Succeeded"),
            "{name} failed:\n{logs}"
        );
        if name == "receiver" {
            assert!(
                logs.contains("refused a connection"),
                "the probe never reached the receiver:\n{logs}"
            );
        }
    }
    assert_eq!(manifest(&dst), manifest(&src));
    assert_eq!(manifest(&src).len(), 54);
}
