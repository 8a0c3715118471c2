//! Containers run as their pod's identity: the user, group and
//! supplementary groups of the security context (or the image), the
//! runtime's capabilities, `runAsNonRoot` verified, and `fsGroup` given to
//! the volumes that take it, as a process in the pod and a client of the
//! API see them.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::k8s::{container, pod_phase};
use common::oci::{strings, Compression, Image, Layer};
use common::{await_event, await_object, client, object, sandbox};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use kube::api::{Api, LogParams, PostParams};
use kube_sandbox::kubelet::OciArchive;
use kube_sandbox::{Sandbox, SandboxConfig};
use serde_json::{json, Value};

/// What the kernel says the process is and may do.
const STATUS: &str =
    "grep -E '^(Uid|Gid|Groups|CapPrm|CapEff|CapBnd|NoNewPrivs):' /proc/self/status";

/// The restricted profile's pod-level settings, running as 1000:2000 with
/// fsGroup 2000.
fn restricted_pod_context() -> Value {
    json!({"runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 2000,
        "seccompProfile": {"type": "RuntimeDefault"}})
}

fn restricted_container_context() -> Value {
    json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
}

/// A pod of `containers` (name, security context, script), restartPolicy
/// Never, mounting claim `claim` at /data when given.
fn pod(name: &str, context: Value, containers: &[(&str, Value, &str)], claim: Option<&str>) -> Pod {
    let mounts = match claim {
        Some(_) => json!([{"name": "data", "mountPath": "/data"}]),
        None => json!([]),
    };
    let containers: Vec<Value> = containers
        .iter()
        .map(|(name, security, script)| {
            json!({"name": name, "image": "busybox", "command": ["sh", "-c", script],
                "securityContext": security, "volumeMounts": mounts})
        })
        .collect();
    let mut spec =
        json!({"restartPolicy": "Never", "securityContext": context, "containers": containers});
    if let Some(claim) = claim {
        spec["volumes"] = json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]);
    }
    object(json!({"metadata": {"name": name}, "spec": spec}))
}

async fn claim(client: &kube::Client, ns: &str, name: &str, class: &str) {
    let claim: PersistentVolumeClaim = object(json!({"metadata": {"name": name}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": class,
        "resources": {"requests": {"storage": "1Gi"}}}}));
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &claim)
        .await
        .expect("claim");
}

/// A bound claim's directory on the host (hostPath or local volume).
async fn volume_dir(client: &kube::Client, ns: &str, claim: &str) -> PathBuf {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    await_object(&claims, claim, "Bound", |c| {
        common::k8s::claim_phase(c) == Some("Bound")
    })
    .await;
    let bound = claims.get(claim).await.expect("claim");
    let pv = common::k8s::volume_name(&bound).expect("volume name");
    let spec = Api::<PersistentVolume>::all(client.clone())
        .get(&pv)
        .await
        .expect("volume")
        .spec
        .expect("spec");
    let path = spec
        .local
        .map(|l| l.path)
        .or(spec.host_path.map(|h| h.path));
    PathBuf::from(path.expect("a local or hostPath volume"))
}

/// Creates the pod, waits until it has succeeded, returns each
/// container's log by name.
async fn run(pods: &Api<Pod>, pod: &Pod) -> Vec<String> {
    pods.create(&PostParams::default(), pod).await.expect("pod");
    let name = pod.metadata.name.as_deref().expect("name");
    await_object(pods, name, "finished", |p| {
        matches!(pod_phase(p), Some("Succeeded" | "Failed"))
    })
    .await;
    let mut logs = Vec::new();
    for c in &pod.spec.as_ref().expect("spec").containers {
        let params = LogParams {
            container: Some(c.name.clone()),
            ..LogParams::default()
        };
        logs.push(pods.logs(name, &params).await.expect("logs"));
    }
    let phase = pod_phase(pods.get_opt(name).await.expect("get").as_ref()).map(str::to_string);
    assert_eq!(phase.as_deref(), Some("Succeeded"), "{name}: {logs:#?}");
    logs
}

fn owner(path: &Path) -> (u32, u32, u32) {
    let meta = std::fs::metadata(path).expect("stat");
    (meta.uid(), meta.gid(), meta.mode() & 0o7777)
}

/// `path` with `text`, owned by uid:gid 3000 and mode 0600, appearing at
/// once (renamed into place).
fn foreign_file(path: &Path, text: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, text).expect("write");
    std::os::unix::fs::chown(&staged, Some(3000), Some(3000)).expect("chown");
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::rename(&staged, path).expect("rename");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restricted_pod_on_a_claim_runs_as_its_user_and_owns_what_it_writes() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let ns: Namespace = object(json!({"metadata": {"name": "locked",
        "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "locked");
    await_object(&accounts, "default", "created", |a| a.is_some()).await;
    // A node-local volume: its plugin manages ownership (hostPath's does not).
    claim(&client, "locked", "data", "local").await;
    let script = format!(
        "{STATUS}; stat -c 'root %g %A' /data; echo hi > /data/out && stat -c 'out %u:%g' /data/out; \
         while [ ! -e /data/foreign ]; do sleep 0.1; done; cat /data/foreign"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "locked");
    let mover = pod(
        "mover",
        restricted_pod_context(),
        &[("mover", restricted_container_context(), &script)],
        Some("data"),
    );
    pods.create(&PostParams::default(), &mover)
        .await
        .expect("a compliant pod is admitted");
    let dir = volume_dir(&client, "locked", "data").await;
    await_object(&pods, "mover", "Running", common::k8s::is_running).await;
    foreign_file(&dir.join("foreign"), "not yours\n");
    await_object(&pods, "mover", "finished", |p| {
        matches!(pod_phase(p), Some("Succeeded" | "Failed"))
    })
    .await;
    let log = pods
        .logs("mover", &LogParams::default())
        .await
        .expect("log");
    let mut lines: Vec<&str> = log.lines().collect();
    // Groups the host's /etc/group gives a user 1000 may come too.
    let groups = lines.remove(2);
    assert!(
        groups.starts_with("Groups:\t") && groups.split_whitespace().any(|g| g == "2000"),
        "{log}"
    );
    assert_eq!(
        lines,
        [
            "Uid:\t1000\t1000\t1000\t1000",
            "Gid:\t2000\t2000\t2000\t2000",
            "CapPrm:\t0000000000000000",
            "CapEff:\t0000000000000000",
            "CapBnd:\t0000000000000000",
            "NoNewPrivs:\t1",
            "root 2000 drwxrwsrwx",
            "out 1000:2000",
            "cat: /data/foreign: Permission denied",
        ],
        "{log}"
    );
    let exit = container(pods.get("mover").await.ok().as_ref())
        .and_then(|c| c.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code));
    assert_eq!(exit, Some(1), "cat failed with EACCES");
    assert_eq!(owner(&dir), (0, 2000, 0o2777));
    assert_eq!(owner(&dir.join("out")), (1000, 2000, 0o644));
    assert_eq!(owner(&dir.join("foreign")), (3000, 3000, 0o600));
}

#[tokio::test(flavor = "multi_thread")]
async fn on_root_mismatch_leaves_a_volume_alone_and_always_walks_it() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    claim(&client, "default", "shared", "local").await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let user = json!({"runAsUser": 1000, "fsGroup": 2000});
    run(
        &pods,
        &pod(
            "first",
            user.clone(),
            &[("c", json!({}), "touch /data/mine")],
            Some("shared"),
        ),
    )
    .await;
    let dir = volume_dir(&client, "default", "shared").await;
    assert_eq!(owner(&dir.join("mine")), (1000, 2000, 0o644));
    foreign_file(&dir.join("foreign"), "group readable now\n");

    let probe = "stat -c '%a %u:%g' /data/foreign; cat /data/foreign || true";
    let mut policy = user.clone();
    policy["fsGroupChangePolicy"] = json!("OnRootMismatch");
    let logs = run(
        &pods,
        &pod("second", policy, &[("c", json!({}), probe)], Some("shared")),
    )
    .await;
    assert_eq!(
        logs[0], "600 3000:3000\ncat: /data/foreign: Permission denied\n",
        "the root matched: nothing below it changed"
    );
    let logs = run(
        &pods,
        &pod("third", user, &[("c", json!({}), probe)], Some("shared")),
    )
    .await;
    assert_eq!(logs[0], "660 3000:2000\ngroup readable now\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_as_non_root_with_a_root_user_never_starts() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let p = pod(
        "rooted",
        json!({"runAsNonRoot": true}),
        &[("c", json!({}), "echo ran")],
        None,
    );
    pods.create(&PostParams::default(), &p).await.expect("pod");
    let event = await_event(&client, "default", "rooted", "Failed").await;
    let uid = pods
        .get("rooted")
        .await
        .expect("pod")
        .metadata
        .uid
        .expect("uid");
    let message =
        format!("container has runAsNonRoot and image will run as root (pod: \"rooted_default({uid})\", container: c)");
    assert_eq!(event, format!("Error: {message}"));
    await_object(&pods, "rooted", "CreateContainerConfigError", |p| {
        container(p)
            .and_then(|c| c.state.as_ref()?.waiting.as_ref())
            .is_some_and(|w| {
                w.reason.as_deref() == Some("CreateContainerConfigError")
                    && w.message.as_deref() == Some(message.as_str())
            })
    })
    .await;
    assert_eq!(
        pod_phase(pods.get_opt("rooted").await.expect("get").as_ref()),
        Some("Pending")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn capabilities_are_the_runtimes_and_a_non_root_process_keeps_none() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let bind = json!({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}});
    let mut non_root = bind.clone();
    non_root["runAsUser"] = json!(1000);
    non_root["allowPrivilegeEscalation"] = json!(false);
    let logs = run(
        &pods,
        &pod(
            "caps",
            json!({"supplementalGroups": [4000, 300]}),
            &[
                ("default", json!({}), STATUS),
                ("bind", bind, STATUS),
                ("nonroot", non_root, STATUS),
            ],
            None,
        ),
    )
    .await;
    let field = |log: &str, name: &str| -> String {
        log.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    assert_eq!(field(&logs[0], "Uid:"), "0\t0\t0\t0");
    assert_eq!(
        field(&logs[0], "CapEff:"),
        "00000000a80425fb",
        "{}",
        logs[0]
    );
    assert_eq!(field(&logs[0], "CapBnd:"), "00000000a80425fb");
    assert_eq!(field(&logs[0], "NoNewPrivs:"), "0");
    let groups = field(&logs[0], "Groups:");
    assert!(
        groups.contains("300") && groups.contains("4000"),
        "{groups}"
    );
    assert_eq!(field(&logs[1], "CapEff:"), "0000000000000400");
    assert_eq!(field(&logs[1], "CapBnd:"), "0000000000000400");
    assert_eq!(field(&logs[2], "Uid:"), "1000\t1000\t1000\t1000");
    assert_eq!(
        field(&logs[2], "CapPrm:"),
        "0000000000000000",
        "{}",
        logs[2]
    );
    assert_eq!(field(&logs[2], "CapEff:"), "0000000000000000");
    assert_eq!(field(&logs[2], "CapBnd:"), "0000000000000400");
    assert_eq!(field(&logs[2], "NoNewPrivs:"), "1");
}

#[tokio::test(flavor = "multi_thread")]
async fn volumes_that_take_fs_group_get_it_and_host_path_claims_do_not() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let secret: Secret = object(json!({"metadata": {"name": "keys"},
        "stringData": {"open": "a", "closed": "b"}}));
    Api::<Secret>::default_namespaced(client.clone())
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    claim(&client, "default", "plain", "standard").await;
    let script = "cd /var/run/secrets/kubernetes.io/serviceaccount && \
                  stat -c '%n %a %u:%g' /scratch /keys/open /keys/closed token namespace /data; \
                  echo x > /data/written && stat -c '%n %a %u:%g' /data/written";
    let mut p = pod(
        "volumes",
        json!({"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000}),
        &[("c", json!({}), script)],
        Some("plain"),
    );
    let spec = p.spec.as_mut().expect("spec");
    let mut value = serde_json::to_value(&*spec).expect("spec json");
    value["volumes"].as_array_mut().expect("volumes").extend([
        json!({"name": "scratch", "emptyDir": {}}),
        json!({"name": "keys", "secret": {"secretName": "keys", "items": [
            {"key": "open", "path": "open"}, {"key": "closed", "path": "closed", "mode": 0o400}]}}),
    ]);
    value["containers"][0]["volumeMounts"]
        .as_array_mut()
        .expect("mounts")
        .extend([
            json!({"name": "scratch", "mountPath": "/scratch"}),
            json!({"name": "keys", "mountPath": "/keys"}),
        ]);
    *spec = object(value);
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let logs = run(&pods, &p).await;
    assert_eq!(
        logs[0].lines().collect::<Vec<_>>(),
        [
            // emptyDir: 0777 as made, group rwx and setgid added.
            "/scratch 2777 0:2000",
            // Secrets are read-only volumes: group read added.
            "/keys/open 644 0:2000",
            "/keys/closed 440 0:2000",
            // The token is the pod's user's, 0600, then group read.
            "token 640 1000:2000",
            "namespace 644 0:2000",
            // A hostPath claim as the provisioner made it.
            "/data 777 0:0",
            "/data/written 644 1000:3000",
        ],
        "{}",
        logs[0]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_user_is_the_default_user_and_runs_as_non_root_when_numeric() {
    const IMAGE: &str = "registry.example/tools/user";
    let show = "while read -r line; do case \"$line\" in Uid*|Gid*|Groups*) echo \"$line\";; esac; done < /proc/self/status";
    let base = || {
        Layer::new(Compression::Gzip)
            .shell()
            .dir("etc")
            .file(
                "etc/passwd",
                b"root:x:0:0::/root:/bin/sh\napp:x:1234:2345::/:/bin/sh\n",
                0o644,
            )
            .file(
                "etc/group",
                b"root:x:0:\napp:x:2345:\nextra:x:777:app\n",
                0o644,
            )
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut archives = Vec::new();
    for (tag, user) in [("named", "app"), ("numeric", "1234:99")] {
        let path = common::oci::archive_path(dir.path(), tag);
        Image {
            layers: vec![base()],
            entrypoint: Some(strings(&["/bin/sh", "-c", show])),
            user: Some(user.to_string()),
            ..Image::default()
        }
        .write(&path);
        archives.push(OciArchive::new(format!("{IMAGE}-{tag}"), path));
    }
    let sb = Sandbox::start(SandboxConfig {
        nodes: 1,
        oci_archives: archives,
        ..SandboxConfig::default()
    })
    .await
    .expect("sandbox starts");
    let client = client(&sb).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let image_pod = |name: &str, tag: &str, context: Value| -> Pod {
        object(
            json!({"metadata": {"name": name}, "spec": {"restartPolicy": "Never",
            "securityContext": context,
            "containers": [{"name": "c", "image": format!("{IMAGE}-{tag}:1")}]}}),
        )
    };
    let logs = run(&pods, &image_pod("named", "named", json!({"fsGroup": 5}))).await;
    assert_eq!(
        logs[0],
        "Uid:\t1234\t1234\t1234\t1234\nGid:\t2345\t2345\t2345\t2345\nGroups:\t5 777 2345\n"
    );
    // The group of `1234:99` does not reach the runtime: /etc/passwd's.
    let logs = run(
        &pods,
        &image_pod("numeric", "numeric", json!({"runAsNonRoot": true})),
    )
    .await;
    assert_eq!(
        logs[0],
        "Uid:\t1234\t1234\t1234\t1234\nGid:\t2345\t2345\t2345\t2345\nGroups:\t777 2345\n"
    );
    let refused = image_pod("unverified", "named", json!({"runAsNonRoot": true}));
    pods.create(&PostParams::default(), &refused)
        .await
        .expect("pod");
    let event = await_event(&client, "default", "unverified", "Failed").await;
    assert!(
        event.starts_with(
            "Error: container has runAsNonRoot and image has non-numeric user (app), cannot verify user is non-root"
        ),
        "{event}"
    );
}
