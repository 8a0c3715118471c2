//! Pods of real OCI images: an image archive mapped with
//! `SandboxConfig::oci_archives` (`--image REF=oci-archive:PATH`) runs in its
//! own root file system, with the image's entrypoint, command, environment
//! and working directory, the kubelet's files and the pod's volumes; a
//! corrupt archive is refused as a failed pull.

mod common;

use std::time::{Duration, Instant};

use common::oci::{strings, Compression, Image, Layer};
use common::{apply, client, events_for, kubectl_ok, wait_for};
use kube_sandbox::kubelet::OciArchive;
use kube_sandbox::{Sandbox, SandboxConfig};

const IMAGE: &str = "registry.example/tools/probe";

/// A one-node sandbox running `IMAGE` from the archive `image` writes.
async fn sandbox_running(image: Image) -> (Sandbox, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = common::oci::archive_path(dir.path(), "probe");
    let digest = image.write(&path);
    let sb = Sandbox::start(SandboxConfig {
        nodes: 1,
        oci_archives: vec![OciArchive::new(IMAGE, path)],
        ..SandboxConfig::default()
    })
    .await
    .expect("sandbox starts");
    (sb, dir, digest)
}

/// Waits until the pod has succeeded; its log.
async fn log_of_finished(sb: &Sandbox, pod: &str) -> String {
    wait_for(sb, &["get", "pod", pod], "{.status.phase}", "Succeeded").await;
    kubectl_ok(sb, &["logs", pod]).await
}

fn pod(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: main\n    image: {IMAGE}:1.0\n{extra}"
    )
}

const PROBE: &str = r#"cd /
echo "root:" *
[ -e /etc/os-release ] && echo "host os-release: visible" || echo "host os-release: absent"
read -r release < /etc/image-release && echo "image release: $release"
read -r key < /tls/key; echo "secret: $key"
read -r name < /etc/hostname && echo "hostname: $name"
while read -r line; do case "$line" in *"$name") echo "hosts: has $name";; esac; done < /etc/hosts
echo x > /dev/null && echo "dev null: ok"
[ -d /proc/self ] && echo "proc: ok"
echo x > /tmp/x && echo "tmp: writable"
(echo x > /probe.sh) 2>/dev/null && echo "image: writable" || echo "image: read-only"
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_runs_its_image_entrypoint_in_the_image_root() {
    let image = Image {
        layers: vec![Layer::new(Compression::Gzip)
            .shell()
            .dir("etc")
            .file("etc/image-release", b"probe 1.0\n", 0o644)
            .file("probe.sh", PROBE.as_bytes(), 0o755)],
        entrypoint: Some(strings(&["/bin/sh", "/probe.sh"])),
        ..Image::default()
    };
    let (sb, _dir, digest) = sandbox_running(image).await;
    let secret =
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: tls\nstringData:\n  key: s3cret\n---\n";
    let volumes = "    volumeMounts:\n    - name: tls\n      mountPath: /tls\n  volumes:\n  - name: tls\n    secret:\n      secretName: tls\n";
    let out = apply(&sb, &format!("{secret}{}", pod("probe", volumes))).await;
    assert!(out.ok, "{}", out.stderr);
    let log = log_of_finished(&sb, "probe").await;
    assert_eq!(
        log,
        // `var`: the mount point of the service-account token volume.
        "root: bin dev etc lib lib64 probe.sh proc sys tls tmp var\n\
         host os-release: absent\n\
         image release: probe 1.0\n\
         secret: s3cret\n\
         hostname: probe\n\
         hosts: has probe\n\
         dev null: ok\n\
         proc: ok\n\
         tmp: writable\n\
         image: read-only\n"
    );
    let image_id = kubectl_ok(
        &sb,
        &[
            "get",
            "pod",
            "probe",
            "-o",
            "jsonpath={.status.containerStatuses[0].imageID}",
        ],
    )
    .await;
    assert_eq!(image_id, format!("{IMAGE}@{digest}"));
    let client = client(&sb).await;
    let events: Vec<(String, String)> = events_for(&client, "default", "probe")
        .await
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect();
    assert!(
        events.iter().any(|(reason, message)| reason == "Pulled"
            && message.starts_with(&format!("Successfully pulled image \"{IMAGE}:1.0\""))),
        "{events:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn command_and_args_override_the_image_and_env_merges() {
    let image = Image {
        layers: vec![Layer::new(Compression::Zstd).shell().dir("work")],
        entrypoint: Some(strings(&[
            "/bin/sh",
            "-c",
            r#"echo "ep $0 $1 IMG=$IMG OVR=$OVR"; pwd"#,
        ])),
        cmd: Some(strings(&["c0", "c1"])),
        env: strings(&["PATH=/bin", "IMG=image", "OVR=image"]),
        working_dir: Some("/work".into()),
        ..Image::default()
    };
    let (sb, _dir, _) = sandbox_running(image).await;
    let cases = [
        ("plain", "", "ep c0 c1 IMG=image OVR=image\n/work\n"),
        (
            "args",
            "    args: [\"$(OVR)\", a1]\n    env:\n    - {name: OVR, value: pod}\n",
            "ep pod a1 IMG=image OVR=pod\n/work\n",
        ),
        (
            "command",
            "    command: [/bin/sh, -c, 'echo cmd $0 $#; pwd']\n    workingDir: /tmp\n",
            "cmd /bin/sh 0\n/tmp\n",
        ),
        (
            "both",
            "    command: [/bin/sh, -c, 'echo both $0 $1 $IMG']\n    args: [x1, y1]\n",
            "both x1 y1 image\n",
        ),
    ];
    let manifests: Vec<String> = cases
        .iter()
        .map(|(name, extra, _)| pod(name, extra))
        .collect();
    let out = apply(&sb, &manifests.join("---\n")).await;
    assert!(out.ok, "{}", out.stderr);
    for (name, _, want) in cases {
        assert_eq!(log_of_finished(&sb, name).await, want, "pod {name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn layers_apply_in_order_with_their_whiteouts() {
    let script =
        "cd /; for p in a/* a/.wh.* o/* o/sub f f/* g; do [ -e \"$p\" ] && echo \"$p\"; done; true";
    let image = Image {
        layers: vec![
            Layer::new(Compression::Gzip)
                .shell()
                .file("a/keep", b"1", 0o644)
                .file("a/gone", b"1", 0o644)
                .file("a/dir/x", b"1", 0o644)
                .file("o/old", b"1", 0o644)
                .file("o/sub/deep", b"1", 0o644)
                .file("f", b"a file, then a directory", 0o644)
                .file("g", b"1", 0o644),
            Layer::new(Compression::Zstd)
                .whiteout("a/gone")
                .whiteout("a/dir")
                .file("o/new", b"2", 0o644)
                .opaque("o")
                .dir("f")
                .file("f/inner", b"2", 0o644)
                .whiteout("g"),
            Layer::new(Compression::None).file("g", b"3: back again", 0o644),
        ],
        entrypoint: Some(strings(&["/bin/sh", "-c", script])),
        ..Image::default()
    };
    let (sb, _dir, _) = sandbox_running(image).await;
    let out = apply(&sb, &pod("layers", "")).await;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(
        log_of_finished(&sb, "layers").await,
        "a/keep\no/new\nf\nf/inner\ng\n",
        "whiteouts hide lower entries only; an opaque directory keeps what its own layer adds"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_blob_is_a_failed_pull() {
    let image = Image {
        layers: vec![Layer::new(Compression::Gzip).shell()],
        entrypoint: Some(strings(&["/bin/sh", "-c", "echo should not run"])),
        corrupt_layer: Some(0),
        ..Image::default()
    };
    let (sb, _dir, _) = sandbox_running(image).await;
    let out = apply(&sb, &pod("corrupt", "")).await;
    assert!(out.ok, "{}", out.stderr);
    let client = client(&sb).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let failed = loop {
        let events = events_for(&client, "default", "corrupt").await;
        let found = events.iter().find_map(|e| {
            let message = e.message.clone().unwrap_or_default();
            message
                .starts_with("Failed to pull image")
                .then_some(message)
        });
        if let Some(message) = found {
            break message;
        }
        assert!(Instant::now() < deadline, "no failed pull: {events:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        failed.contains("corrupt image archive") && failed.contains("hashes to sha256:"),
        "{failed}"
    );
    let reason = kubectl_ok(
        &sb,
        &[
            "get",
            "pod",
            "corrupt",
            "-o",
            "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.reason}",
        ],
    )
    .await;
    assert!(
        reason == "Pending ErrImagePull" || reason == "Pending ImagePullBackOff",
        "{reason}"
    );
}
