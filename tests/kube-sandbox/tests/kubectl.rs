//! Real `kubectl` against the sandbox: apply, get, describe, patch, logs -f,
//! get -w and delete, each checked by what kubectl prints; `kubectl create`
//! generators and `kubectl run`, whose protobuf bodies the sandbox decodes.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{apply, create, kubectl, kubectl_ok, sandbox, wait_for, Out};
use kube_sandbox::Sandbox;
use tokio::io::{AsyncBufReadExt, BufReader};

const APP: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
---
apiVersion: v1
kind: Pod
metadata:
  name: app
  labels:
    app: demo
spec:
  containers:
  - name: writer
    image: busybox:1.36
    command: ["sh", "-c", "echo started; while true; do date >> /data/log; sleep 1; done"]
    volumeMounts:
    - name: data
      mountPath: /data
  volumes:
  - name: data
    persistentVolumeClaim:
      claimName: data
"#;

#[tokio::test(flavor = "multi_thread")]
async fn apply_get_describe_and_delete() {
    let sb = sandbox().await;
    let out = apply(&sb, APP).await;
    assert!(out.ok, "apply: {}", out.stderr);
    assert_printed(&out, "persistentvolumeclaim/data created");
    assert_printed(&out, "pod/app created");

    wait_for(&sb, &["get", "pvc", "data"], "{.status.phase}", "Bound").await;
    wait_for(&sb, &["get", "pod", "app"], "{.status.phase}", "Running").await;

    let table = kubectl_ok(&sb, &["get", "pods"]).await;
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(&row[..4], ["app", "1/1", "Running", "0"], "{table}");

    let pvc = kubectl_ok(&sb, &["get", "pvc", "data", "--no-headers"]).await;
    let cols: Vec<&str> = pvc.split_whitespace().collect();
    assert_eq!(
        (cols[0], cols[1], cols[3], cols[4], cols[5]),
        ("data", "Bound", "1Gi", "RWO", "standard"),
        "{pvc}"
    );

    // The app really runs: its volume directory fills up.
    let volume = kubectl_ok(
        &sb,
        &["get", "pv", cols[2], "-o", "jsonpath={.spec.hostPath.path}"],
    )
    .await;
    wait_until(|| {
        std::fs::read_to_string(format!("{volume}/log")).is_ok_and(|s| s.lines().count() >= 2)
    })
    .await;

    let described = kubectl_ok(&sb, &["describe", "pod", "app"]).await;
    for want in [
        "Name:",
        "app",
        "Status:",
        "Running",
        "Node:",
        "node-",
        "ClaimName:",
        "data",
        "Events:",
        "Scheduled",
        "Started",
    ] {
        assert!(
            described.contains(want),
            "describe lacks {want:?}:\n{described}"
        );
    }

    let out = kubectl(&sb, &["delete", "pod", "app", "--grace-period=1"], None).await;
    assert!(out.ok, "delete: {}", out.stderr);
    assert_printed(&out, "pod \"app\" deleted");
    let gone = kubectl(&sb, &["get", "pod", "app"], None).await;
    assert!(!gone.ok);
    assert!(
        gone.stderr
            .contains("Error from server (NotFound): pods \"app\" not found"),
        "{}",
        gone.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_twice_updates_in_place() {
    let sb = sandbox().await;
    let cm = |value: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: {value}\n  keep: \"yes\"\n")
    };
    let out = apply(&sb, &cm("fast")).await;
    assert_printed(&out, "configmap/settings created");
    let out = apply(&sb, &cm("safe")).await;
    assert_printed(&out, "configmap/settings configured");
    let data = jsonpath(&sb, "cm", "settings", "{.data.mode} {.data.keep}").await;
    assert_eq!(data, "safe yes");
    let out = apply(&sb, &cm("safe")).await;
    assert_printed(&out, "configmap/settings unchanged");
    let out = kubectl(
        &sb,
        &["apply", "--server-side", "--validate=false", "-f", "-"],
        Some(&cm("server")),
    )
    .await;
    assert!(out.ok, "server-side apply: {}", out.stderr);
    let data = jsonpath(&sb, "cm", "settings", "{.data.mode}").await;
    assert_eq!(data, "server");
}

#[tokio::test(flavor = "multi_thread")]
async fn patch_by_all_three_types() {
    let sb = sandbox().await;
    let pod = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1"}},
        "spec": {"nodeSelector": {"none": "such"}, "containers": [
            {"name": "one", "image": "busybox:1", "command": ["sleep", "60"], "env": [{"name": "X", "value": "1"}]},
            {"name": "two", "image": "busybox:1", "command": ["sleep", "60"]}]}}"#;
    let out = create(&sb, pod).await;
    assert!(out.ok, "create: {}", out.stderr);

    kubectl_ok(
        &sb,
        &[
            "patch",
            "pod",
            "p",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"b":"2","a":null}}}"#,
        ],
    )
    .await;
    let labels = jsonpath(&sb, "pod", "p", "{.metadata.labels}").await;
    assert_eq!(labels, r#"{"b":"2"}"#);

    // Strategic merge: the container list merges by name, so `one` keeps
    // its env and `two` stays.
    kubectl_ok(
        &sb,
        &[
            "patch",
            "pod",
            "p",
            "-p",
            r#"{"spec":{"containers":[{"name":"one","image":"busybox:2"}]}}"#,
        ],
    )
    .await;
    let images = jsonpath(
        &sb,
        "pod",
        "p",
        "{.spec.containers[*].image} {.spec.containers[0].env[0].name}",
    )
    .await;
    assert_eq!(images, "busybox:2 busybox:1 X");

    kubectl_ok(
        &sb,
        &[
            "patch",
            "pod",
            "p",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/containers/1/image","value":"busybox:3"}]"#,
        ],
    )
    .await;
    let images = jsonpath(&sb, "pod", "p", "{.spec.containers[*].image}").await;
    assert_eq!(images, "busybox:2 busybox:3");

    // Pod specs are immutable beyond images: the server says so.
    let out = kubectl(
        &sb,
        &[
            "patch",
            "pod",
            "p",
            "-p",
            r#"{"spec":{"containers":[{"name":"one","command":["true"]}]}}"#,
        ],
        None,
    )
    .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("is invalid")
            && out.stderr.contains("pod updates may not change fields"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_follow_until_the_container_exits() {
    let sb = sandbox().await;
    let pod = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "counter"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox",
        "command": ["sh", "-c", "for i in 1 2 3 4 5; do echo line $i; sleep 0.3; done"]}]}}"#;
    create(&sb, pod).await;
    wait_for(
        &sb,
        &["get", "pod", "counter"],
        "{.status.phase}",
        "Running",
    )
    .await;
    let followed = kubectl_ok(&sb, &["logs", "-f", "counter"]).await;
    assert_eq!(followed, "line 1\nline 2\nline 3\nline 4\nline 5\n");
    wait_for(
        &sb,
        &["get", "pod", "counter"],
        "{.status.phase}",
        "Succeeded",
    )
    .await;
    let tail = kubectl_ok(&sb, &["logs", "counter", "--tail=2"]).await;
    assert_eq!(tail, "line 4\nline 5\n");
    let table = kubectl_ok(&sb, &["get", "pod", "counter", "--no-headers"]).await;
    assert!(table.contains("Completed"), "{table}");
}

#[tokio::test(flavor = "multi_thread")]
async fn get_watch_sees_new_pods_until_its_timeout() {
    let sb = sandbox().await;
    let mut watch = tokio::process::Command::new(common::kubectl_program())
        .arg("--kubeconfig")
        .arg(sb.kubeconfig_path())
        .args(["get", "pods", "-w", "--request-timeout=4s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl get -w");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pod = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "watched"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "30"]}]}}"#;
    create(&sb, pod).await;
    let mut seen = Vec::new();
    let finished = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push(line);
        }
    })
    .await;
    assert!(
        finished.is_ok(),
        "kubectl get -w did not end at its request timeout"
    );
    assert!(
        seen.iter()
            .any(|l| l.starts_with("watched") && l.contains("Running")),
        "{seen:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn create_generators_send_protobuf_the_sandbox_takes() {
    let sb = sandbox().await;
    let out = kubectl(&sb, &["create", "namespace", "demo"], None).await;
    assert!(out.ok, "{}", out.stderr);
    assert_printed(&out, "namespace/demo created");
    wait_for(
        &sb,
        &["get", "namespace", "demo"],
        "{.status.phase}",
        "Active",
    )
    .await;

    let ns = ["-n", "demo"];
    let create = |args: &'static [&'static str]| {
        let sb = &sb;
        async move {
            let mut full = vec!["create"];
            full.extend(ns);
            full.extend(args);
            let out = kubectl(sb, &full, None).await;
            assert!(out.ok, "kubectl {full:?}: {}", out.stderr);
        }
    };
    create(&[
        "secret",
        "generic",
        "creds",
        "--from-literal=user=admin",
        "--from-literal=pass=s3cr=t",
    ])
    .await;
    let user = kubectl_ok(
        &sb,
        &[
            "get",
            "secret",
            "creds",
            "-n",
            "demo",
            "-o",
            "jsonpath={.data.user} {.type}",
        ],
    )
    .await;
    assert_eq!(user, "YWRtaW4= Opaque");
    create(&["configmap", "settings", "--from-literal=mode=fast"]).await;
    let mode = kubectl_ok(
        &sb,
        &[
            "get",
            "configmap",
            "settings",
            "-n",
            "demo",
            "-o",
            "jsonpath={.data.mode}",
        ],
    )
    .await;
    assert_eq!(mode, "fast");
    create(&["serviceaccount", "robot"]).await;
    kubectl_ok(&sb, &["get", "serviceaccount", "robot", "-n", "demo"]).await;

    // A Deployment whose container has a command runs it from the host.
    create(&[
        "deployment",
        "sleeper",
        "--image=busybox",
        "--replicas=2",
        "--",
        "sleep",
        "3600",
    ])
    .await;
    wait_for(
        &sb,
        &["get", "deployment", "sleeper", "-n", "demo"],
        "{.status.readyReplicas}",
        "2",
    )
    .await;
    create(&["service", "clusterip", "sleeper", "--tcp=80:8080"]).await;
    let service = kubectl_ok(
        &sb,
        &["get", "service", "sleeper", "-n", "demo", "-o", "jsonpath={.spec.clusterIP} {.spec.ports[0].port} {.spec.ports[0].targetPort} {.spec.selector.app}"],
    )
    .await;
    let fields: Vec<&str> = service.split(' ').collect();
    assert!(fields[0].starts_with("127."), "{service}");
    assert_eq!(fields[1..], ["80", "8080", "sleeper"], "{service}");
    wait_for(
        &sb,
        &["get", "endpoints", "sleeper", "-n", "demo"],
        "{.subsets[0].ports[0].port}",
        "8080",
    )
    .await;

    // Without a command, busybox has nothing to run: an unmapped image runs
    // host commands only, and says so.
    create(&["deployment", "web", "--image=busybox"]).await;
    wait_for(
        &sb,
        &["get", "pods", "-n", "demo", "-l", "app=web"],
        "{.items[0].status.containerStatuses[0].state.waiting.reason}",
        "CreateContainerError",
    )
    .await;
    let message = kubectl_ok(
        &sb,
        &[
            "get",
            "pods",
            "-n",
            "demo",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].status.containerStatuses[0].state.waiting.message}",
        ],
    )
    .await;
    assert!(
        message.contains("kube-sandbox runs containers as host commands"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_run_starts_a_pod() {
    let sb = sandbox().await;
    let out = kubectl(
        &sb,
        &[
            "run",
            "once",
            "--image=busybox",
            "--restart=Never",
            "--labels=app=once",
            "--",
            "sh",
            "-c",
            "echo hello from $HOSTNAME",
        ],
        None,
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    assert_printed(&out, "pod/once created");
    wait_for(&sb, &["get", "pod", "once"], "{.status.phase}", "Succeeded").await;
    assert_eq!(
        kubectl_ok(&sb, &["logs", "once"]).await,
        "hello from once\n"
    );
}

/// A protobuf body as client-go sends it: the magic, then a
/// `runtime.Unknown` of `typeMeta` (apiVersion, kind) and `raw`.
fn protobuf_envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let field = |number: u8, bytes: &[u8]| {
        let mut out = vec![number << 3 | 2, u8::try_from(bytes.len()).expect("short")];
        out.extend(bytes);
        out
    };
    let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
    let unknown = [field(1, &type_meta), field(2, raw)].concat();
    [b"k8s\0".as_slice(), &unknown].concat()
}

/// Sends `body` as `application/vnd.kubernetes.protobuf`; status and body.
async fn send_protobuf(sb: &Sandbox, method: &str, path: &str, body: Vec<u8>) -> (u16, String) {
    let url = format!("{}{path}", sb.server_url());
    let request = axum::http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/vnd.kubernetes.protobuf")
        .header("accept", "application/vnd.kubernetes.protobuf, */*")
        .body(body)
        .expect("request");
    let client = common::client(sb).await;
    match client.request_text(request).await {
        Ok(text) => (200, text),
        Err(kube::Error::Api(status)) => (status.code, status.message),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn protobuf_puts_replace_and_other_kinds_are_415() {
    let sb = sandbox().await;
    let out = create(
        &sb,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: slow\n",
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    // What `kubectl create configmap settings --from-literal=mode=fast
    // --from-literal=level=3` sent, PUT over the object.
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/api/protobuf/fixtures/configmap.pb"
    ))
    .expect("fixture");
    let (code, text) = send_protobuf(
        &sb,
        "PUT",
        "/api/v1/namespaces/default/configmaps/settings",
        body,
    )
    .await;
    assert_eq!(code, 200, "{text}");
    let data = kubectl_ok(
        &sb,
        &[
            "get",
            "configmap",
            "settings",
            "-o",
            "jsonpath={.data.mode} {.data.level}",
        ],
    )
    .await;
    assert_eq!(data, "fast 3");

    let class = protobuf_envelope("storage.k8s.io/v1", "StorageClass", b"");
    let (code, message) =
        send_protobuf(&sb, "POST", "/apis/storage.k8s.io/v1/storageclasses", class).await;
    assert_eq!(code, 415, "{message}");
    assert!(
        message.contains("application/vnd.kubernetes.protobuf for ")
            && message.contains("apps/Deployment")
            && message.contains("StorageClass in storage.k8s.io/v1"),
        "{message}"
    );
    let (code, message) =
        send_protobuf(&sb, "POST", "/api/v1/namespaces", b"not protobuf".to_vec()).await;
    assert_eq!(code, 400, "{message}");
}

async fn wait_until(mut check: impl FnMut() -> bool) {
    for _ in 0..300 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("condition not reached in 30 s");
}

/// kubectl's stdout says `want`.
fn assert_printed(out: &Out, want: &str) {
    assert!(
        out.stdout.contains(want),
        "{want:?} not in {} {}",
        out.stdout,
        out.stderr
    );
}

/// `kubectl get KIND NAME -o jsonpath=PATH`, which must succeed.
async fn jsonpath(sb: &Sandbox, kind: &str, name: &str, path: &str) -> String {
    kubectl_ok(sb, &["get", kind, name, "-o", &format!("jsonpath={path}")]).await
}

#[tokio::test(flavor = "multi_thread")]
async fn protobuf_and_json_bodies_make_the_same_object() {
    let sb = sandbox().await;
    // kubectl's generator posts protobuf; its `--dry-run=client -o yaml`
    // output, created from a file, is JSON: the same Deployment either way.
    let generator = [
        "create",
        "deployment",
        "web",
        "--image=busybox",
        "--replicas=0",
        "--port=80",
        "--",
        "sleep",
        "1",
    ];
    let out = kubectl(&sb, &generator, None).await;
    assert!(out.ok, "{}", out.stderr);
    let manifest = kubectl(
        &sb,
        &[
            &generator[..5],
            &["--dry-run=client", "-o", "yaml"],
            &generator[5..],
        ]
        .concat(),
        None,
    )
    .await;
    assert!(manifest.ok, "{}", manifest.stderr);
    let out = create(
        &sb,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: viajson\n",
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    let out = kubectl(
        &sb,
        &["create", "-n", "viajson", "--validate=false", "-f", "-"],
        Some(&manifest.stdout),
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    let spec = |ns: &'static str| {
        let sb = &sb;
        async move {
            let json = kubectl_ok(
                sb,
                &[
                    "get",
                    "deployment",
                    "web",
                    "-n",
                    ns,
                    "-o",
                    "jsonpath={.spec}",
                ],
            )
            .await;
            serde_json::from_str::<serde_json::Value>(&json).expect("spec")
        }
    };
    let (via_protobuf, via_json) = (spec("default").await, spec("viajson").await);
    assert_eq!(via_protobuf, via_json);
    assert_eq!(via_protobuf["replicas"], 0, "a pointer set to zero stays");
}

/// kubectl with these space-separated arguments, which must succeed.
async fn ok(sb: &Sandbox, args: &str) -> String {
    kubectl_ok(sb, &args.split(' ').collect::<Vec<_>>()).await
}

#[tokio::test(flavor = "multi_thread")]
async fn custom_resources_print_their_columns_by_plural_and_short_name() {
    if !common::kubectl_runs() {
        eprintln!("kubectl does not run here: skipped");
        return;
    }
    let sb = sandbox().await;
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/crds/zfsvolume.yaml"
    );
    let created = ok(&sb, &format!("apply --validate=false -f {crd}")).await;
    assert_eq!(
        created.trim(),
        "customresourcedefinition.apiextensions.k8s.io/zfsvolumes.zfs.openebs.io created"
    );
    ok(
        &sb,
        "wait --for=condition=Established crd/zfsvolumes.zfs.openebs.io",
    )
    .await;
    ok(&sb, "create namespace openebs").await;
    let volume = r#"{"apiVersion": "zfs.openebs.io/v1", "kind": "ZFSVolume",
        "metadata": {"name": "pvc-1", "namespace": "openebs"},
        "spec": {"ownerNodeID": "node-a", "poolName": "tank", "capacity": "1073741824",
                 "volumeType": "DATASET", "fsType": "zfs"}}"#;
    assert_printed(
        &apply(&sb, volume).await,
        "zfsvolume.zfs.openebs.io/pvc-1 created",
    );
    // A cell whose path finds nothing prints empty, as against a real
    // server: the state is set first.
    ok(
        &sb,
        r#"patch zv pvc-1 -n openebs --type=merge -p {"status":{"state":"Ready"}}"#,
    )
    .await;

    let table = ok(&sb, "get zfsvolumes -n openebs").await;
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let header: Vec<&str> = "NAME ZPOOL NODEID SIZE STATUS FILESYSTEM AGE"
        .split(' ')
        .collect();
    assert_eq!(rows[0], header, "{table}");
    let row = ["pvc-1", "tank", "node-a", "1073741824", "Ready", "zfs"];
    assert_eq!(rows[1][..6], row, "{table}");
    let name = ok(&sb, "get zfsvol -n openebs -o name").await;
    assert_eq!(name.trim(), "zfsvolume.zfs.openebs.io/pvc-1");
    assert!(ok(&sb, "get crds")
        .await
        .contains("zfsvolumes.zfs.openebs.io"));

    ok(&sb, "delete crd zfsvolumes.zfs.openebs.io").await;
    let gone = kubectl(&sb, &["get", "zfsvolumes", "-n", "openebs"], None).await;
    assert!(!gone.ok, "{}", gone.stdout);
}
