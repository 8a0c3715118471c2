//! Shared test helpers: a sandbox per test, real `kubectl` against it, and
//! polling for an expected state.
#![allow(dead_code)]

pub mod crds;
pub mod k8s;
pub mod oci;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use kube_sandbox::kubelet::ImageMapping;
use kube_sandbox::sandbox::Taint;
use kube_sandbox::{Sandbox, SandboxConfig};
use tokio::io::AsyncWriteExt;

/// The image name volmig's mover pods use; the sandbox runs the built binary.
pub const MOVER_IMAGE: &str = "ghcr.io/volmig/mover";

pub async fn sandbox() -> Sandbox {
    sandbox_with(Vec::new()).await
}

pub async fn sandbox_with(taints: Vec<Taint>) -> Sandbox {
    Sandbox::start(SandboxConfig {
        taints,
        images: vec![ImageMapping {
            image: MOVER_IMAGE.to_string(),
            binary: mover_binary(),
        }],
        ..SandboxConfig::default()
    })
    .await
    .expect("sandbox starts")
}

/// The workspace's `mover` binary (built when stale).
pub fn mover_binary() -> PathBuf {
    kube_sandbox::testkit::workspace_binary("mover", "mover")
}

pub fn kubectl_program() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".to_string())
}

/// Whether kubectl runs here (for tests that skip without it).
pub fn kubectl_runs() -> bool {
    std::process::Command::new(kubectl_program())
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The host's kubectl, by absolute path (a pod's `PATH` is the runtime's
/// default one).
pub fn host_kubectl() -> String {
    let program = kubectl_program();
    if program.contains('/') {
        return program;
    }
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(&program))
        .find(|p| p.is_file())
        .expect("kubectl on PATH");
    found.to_string_lossy().into_owned()
}

/// What a kubectl run printed.
#[derive(Debug)]
pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs real kubectl against the sandbox, with `stdin` piped in when given.
pub async fn kubectl(sb: &Sandbox, args: &[&str], stdin: Option<&str>) -> Out {
    let mut cmd = tokio::process::Command::new(kubectl_program());
    cmd.arg("--kubeconfig")
        .arg(sb.kubeconfig_path())
        .args(args)
        .env("HOME", sb.data_dir())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .expect("kubectl runs (install kubectl or set KUBECTL)");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).await.expect("stdin");
        drop(pipe);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("kubectl finished within 60 s")
        .expect("kubectl output");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `kubectl apply --validate=false -f -` of a manifest (the sandbox serves
/// no OpenAPI to validate against).
pub async fn apply(sb: &Sandbox, manifest: &str) -> Out {
    kubectl(
        sb,
        &["apply", "--validate=false", "-f", "-"],
        Some(manifest),
    )
    .await
}

/// `kubectl create --validate=false -f -` of a manifest.
pub async fn create(sb: &Sandbox, manifest: &str) -> Out {
    kubectl(
        sb,
        &["create", "--validate=false", "-f", "-"],
        Some(manifest),
    )
    .await
}

/// kubectl that must succeed; its stdout.
pub async fn kubectl_ok(sb: &Sandbox, args: &[&str]) -> String {
    let out = kubectl(sb, args, None).await;
    assert!(out.ok, "kubectl {args:?} failed: {}", out.stderr);
    out.stdout
}

/// Polls `kubectl get ... -o jsonpath=PATH` until it prints `want`.
pub async fn wait_for(sb: &Sandbox, args: &[&str], jsonpath: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let expr = format!("jsonpath={jsonpath}");
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["-o", &expr]);
    let mut last = String::new();
    while Instant::now() < deadline {
        let out = kubectl(sb, &full, None).await;
        last = format!("{}{}", out.stdout, out.stderr);
        if out.ok && out.stdout == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("kubectl {full:?}: wanted {want:?}, last saw {last:?}");
}

/// A kube-rs client for the sandbox, from its kubeconfig (as any cluster).
pub async fn client(sb: &Sandbox) -> kube::Client {
    client_from(sb.kubeconfig_path()).await
}

/// A kube-rs client for ServiceAccount `name` of `namespace`, from the
/// kubeconfig `Sandbox::kubeconfig_for` writes.
pub async fn client_as(sb: &Sandbox, namespace: &str, name: &str) -> kube::Client {
    let path = sb.kubeconfig_for(namespace, name).expect("kubeconfig_for");
    client_from(&path).await
}

/// A kube-rs client from a kubeconfig file.
pub async fn client_from(path: &std::path::Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// An object from JSON, typed.
pub fn object<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("valid object")
}

/// Waits until `check` holds for the named object (None while absent).
pub async fn await_object<K>(
    api: &kube::Api<K>,
    name: &str,
    what: &str,
    check: impl Fn(Option<&K>) -> bool,
) where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    while Instant::now() < deadline {
        last = api.get_opt(name).await.expect("get");
        if check(last.as_ref()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{name}: {what} not reached in 60 s; last: {last:#?}");
}

/// The events about an object, as `kubectl describe` finds them.
pub async fn events_for(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Vec<k8s_openapi::api::core::v1::Event> {
    let api: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(client.clone(), namespace);
    let lp = kube::api::ListParams::default().fields(&format!("involvedObject.name={name}"));
    api.list(&lp).await.expect("events").items
}

/// Waits for an event with this reason about the object; its message.
pub async fn await_event(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    reason: &str,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let events = events_for(client, namespace, name).await;
        if let Some(e) = events.iter().find(|e| e.reason.as_deref() == Some(reason)) {
            return e.message.clone().unwrap_or_default();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let seen: Vec<_> = events_for(client, namespace, name)
        .await
        .into_iter()
        .map(|e| (e.reason, e.message))
        .collect();
    panic!("no {reason} event for {name}; saw {seen:#?}");
}
