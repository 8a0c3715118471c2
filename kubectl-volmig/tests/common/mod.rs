//! The plugin's end-to-end harness: a cluster (a fresh kube-sandbox, or the
//! one `VOLMIG_E2E_KUBECONFIG` names), the real `kubectl-volmig` binary,
//! and checks of what a user would look at.
#![allow(dead_code)]

pub mod app;
pub mod clusters;
pub mod nodes;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use kube_sandbox::kubelet::{ImageMapping, OciArchive};
use kube_sandbox::sandbox::Taint;
use kube_sandbox::{Sandbox, SandboxConfig};
use serde_json::{json, Value};
use volmig::record::store::RecordStore;
use volmig::record::VolumeMigration;

/// The mover image the tests ask for; the sandbox runs the built binary.
pub const MOVER_IMAGE: &str = "ghcr.io/volmig/mover:0.1.0";

/// Where a test runs.
pub struct Env {
    /// `None` when the cluster is an external one.
    pub sandbox: Option<Sandbox>,
    pub kubeconfig: PathBuf,
    pub namespace: String,
}

pub async fn env() -> Env {
    env_with(Vec::new()).await
}

/// A sandbox whose nodes run the mover from the release's image (the OCI
/// archive `cargo xtask dist` built): what users pull, not the test build.
pub async fn env_from_release() -> Env {
    if let Some(external) = external_env() {
        return external;
    }
    sandbox_env(SandboxConfig {
        oci_archives: vec![OciArchive::new(
            "ghcr.io/volmig/mover",
            release_mover_image(),
        )],
        ..SandboxConfig::default()
    })
    .await
}

/// The image the in-cluster driver runs (`--detach`): the plugin's version.
pub const DRIVER_IMAGE: &str = "ghcr.io/volmig/driver:0.1.0";

/// A sandbox whose nodes run the release's images, the driver's too
/// (`--detach` starts it): the OCI archives `cargo xtask dist` built.
pub async fn env_with_driver() -> Env {
    if let Some(external) = external_env() {
        return external;
    }
    sandbox_env(SandboxConfig {
        oci_archives: vec![
            OciArchive::new("ghcr.io/volmig/mover", release_mover_image()),
            OciArchive::new(
                "ghcr.io/volmig/driver",
                kube_sandbox::testkit::release_file("driver", ".oci.tar"),
            ),
        ],
        ..SandboxConfig::default()
    })
    .await
}

async fn sandbox_env(config: SandboxConfig) -> Env {
    let sandbox = Sandbox::start(config).await.expect("sandbox starts");
    let volumes = sandbox.volume_dir("-").parent().map(Path::to_path_buf);
    VOLUME_DIRS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(volumes);
    Env {
        kubeconfig: sandbox.kubeconfig_path().to_path_buf(),
        sandbox: Some(sandbox),
        namespace: "default".into(),
    }
}

fn external_env() -> Option<Env> {
    let path = std::env::var("VOLMIG_E2E_KUBECONFIG").ok()?;
    Some(Env {
        sandbox: None,
        kubeconfig: path.into(),
        namespace: std::env::var("VOLMIG_E2E_NAMESPACE").unwrap_or_else(|_| "default".into()),
    })
}

/// A sandbox with `taints` (they are ignored on an external cluster, whose
/// nodes are what they are).
pub async fn env_with(taints: Vec<Taint>) -> Env {
    env_configured(SandboxConfig {
        taints,
        ..SandboxConfig::default()
    })
    .await
}

/// A sandbox as `config` says, its nodes running the built mover (an
/// external cluster is what it is).
pub async fn env_configured(config: SandboxConfig) -> Env {
    if let Some(external) = external_env() {
        return external;
    }
    let mover = kube_sandbox::testkit::workspace_binary("mover", "mover");
    sandbox_env(SandboxConfig {
        images: vec![ImageMapping {
            image: "ghcr.io/volmig/mover".into(),
            binary: mover,
        }],
        ..config
    })
    .await
}

impl Env {
    pub async fn client(&self) -> Client {
        let file = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
            .await
            .expect("config");
        Client::try_from(config).expect("client")
    }

    /// The sandbox; tests that need one skip the check on a real cluster.
    pub fn sandbox(&self) -> &Sandbox {
        self.sandbox.as_ref().expect("this check needs the sandbox")
    }
}

/// What a run of the plugin printed.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// stdout as a VolumeMigration (after `-o json`).
    pub fn operation(&self) -> VolumeMigration {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "not an operation ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

pub fn volmig_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kubectl-volmig"))
}

/// The release's mover image, an OCI archive.
pub fn release_mover_image() -> PathBuf {
    kube_sandbox::testkit::release_file("mover", ".oci.tar")
}

/// The release's plugin (static), unpacked from its archive into `dir`.
pub fn release_plugin(dir: &Path) -> PathBuf {
    let archive = kube_sandbox::testkit::release_file("kubectl-volmig", ".tar.gz");
    let status = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(dir)
        .status()
        .expect("tar runs");
    assert!(status.success(), "tar -xzf {}", archive.display());
    dir.join("kubectl-volmig")
}

/// `kubectl-volmig --kubeconfig K -n NS ARGS`, within 5 minutes.
pub async fn volmig(env: &Env, args: &[&str]) -> Run {
    volmig_with(env, &[], args).await
}

/// [`volmig`] with environment variables `vars` set.
pub async fn volmig_with(env: &Env, vars: &[(&str, &str)], args: &[&str]) -> Run {
    volmig_as(env, &env.kubeconfig, vars, args).await
}

/// [`volmig_with`] as the user of `kubeconfig`.
pub async fn volmig_as(env: &Env, kubeconfig: &Path, vars: &[(&str, &str)], args: &[&str]) -> Run {
    let child = tokio::process::Command::new(volmig_binary())
        .envs(vars.iter().copied())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", &env.namespace])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl-volmig runs");
    finish(child).await
}

/// Waits for a started plugin process (5 minutes at most).
pub async fn finish(child: tokio::process::Child) -> Run {
    let out = tokio::time::timeout(Duration::from_secs(300), child.wait_with_output())
        .await
        .expect("kubectl-volmig finished within 5 minutes")
        .expect("kubectl-volmig output");
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    eprintln!(
        "kubectl-volmig exit {}\n--- stderr\n{}",
        run.code, run.stderr
    );
    run
}

/// SIGKILLs a started plugin process (a client that crashed, or whose
/// machine went away: nothing releases its lease) and returns what it
/// printed until then.
pub async fn kill(mut child: tokio::process::Child) -> Run {
    child.kill().await.expect("kill kubectl-volmig");
    finish(child).await
}

/// Starts the plugin without waiting for it.
pub fn spawn_volmig(env: &Env, args: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new(volmig_binary())
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args(["-n", &env.namespace])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl-volmig runs")
}

pub fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a valid object")
}

/// Creates a claim and waits until it is Bound (Immediate classes).
pub async fn claim(client: &Client, ns: &str, name: &str, mode: &str, size: &str) {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvc: PersistentVolumeClaim = object(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": [mode], "resources": {"requests": {"storage": size}}},
    }));
    create_bound(&api, pvc).await;
}

/// The CSI class the snapshot and clone tests use: the sandbox's `csi`, or
/// `VOLMIG_E2E_CSI_CLASS` on another cluster.
pub fn csi_class() -> String {
    std::env::var("VOLMIG_E2E_CSI_CLASS").unwrap_or_else(|_| "csi".into())
}

/// A claim of the CSI class ([`csi_class`]), Bound; its volume's directory.
pub async fn csi_claim(client: &Client, ns: &str, name: &str, mode: &str, size: &str) -> PathBuf {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvc: PersistentVolumeClaim = object(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": [mode], "storageClassName": csi_class(),
                 "resources": {"requests": {"storage": size}}},
    }));
    create_bound(&api, pvc).await;
    volume_dir(client, ns, name).await
}

/// Creates `pvc` and waits until it is Bound (Immediate classes).
pub async fn create_bound(api: &Api<PersistentVolumeClaim>, pvc: PersistentVolumeClaim) {
    let name = pvc.metadata.name.clone().expect("a name");
    api.create(&PostParams::default(), &pvc)
        .await
        .expect("claim");
    wait_until(&format!("claim {name} Bound"), || async {
        let phase = api.get(&name).await.ok()?.status?.phase;
        phase.filter(|p| p == "Bound")
    })
    .await;
}

/// The host directory of a bound claim's volume (sandbox only).
pub async fn volume_dir(client: &Client, ns: &str, claim: &str) -> PathBuf {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let name = claims
        .get(claim)
        .await
        .expect("claim")
        .spec
        .and_then(|s| s.volume_name)
        .expect("bound");
    let spec = volumes
        .get(&name)
        .await
        .expect("volume")
        .spec
        .expect("spec");
    if let Some(csi) = spec.csi {
        // The sandbox's CSI driver keeps the volume under its handle.
        return csi_volume_dir(&csi.volume_handle);
    }
    let path = spec
        .host_path
        .map(|h| h.path)
        .or(spec.local.map(|l| l.path))
        .expect("a hostPath, local or CSI volume");
    PathBuf::from(path)
}

/// The directory of the sandbox's CSI volume `handle` (its PV's name), in
/// the volumes directory of the sandbox that holds it.
pub fn csi_volume_dir(handle: &str) -> PathBuf {
    let dirs = VOLUME_DIRS.lock().unwrap_or_else(|e| e.into_inner());
    dirs.iter()
        .map(|d| d.join(handle))
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no sandbox holds CSI volume {handle}"))
}

/// The volumes directories of the sandboxes this test binary started.
static VOLUME_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Polls `probe` every 200 ms until it gives something (2 minutes at most).
pub async fn wait_until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Writes `files` files of `size` pseudo-random bytes in a few directories,
/// plus a symlink and an empty directory.
pub fn seed(dir: &Path, files: usize, size: usize) {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..files {
        let sub = dir.join(format!("d{:02}", i % 10));
        std::fs::create_dir_all(&sub).expect("dir");
        let body: Vec<u8> = (0..size + i)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        std::fs::write(sub.join(format!("f{i:04}.bin")), body).expect("file");
    }
    std::fs::create_dir_all(dir.join("empty")).expect("dir");
    std::os::unix::fs::symlink("d00/f0000.bin", dir.join("first")).expect("link");
}

/// Fills `dir` with `mib` MiB of incompressible data in 4 MiB files
/// (`seed` makes each tree different): what the benchmarks copy.
pub fn fill_incompressible(dir: &Path, mib: usize, seed: u64) {
    use std::io::Write;
    let mut state: u64 = 0x2545_f491_4f6c_dd1d ^ seed;
    let mut chunk = vec![0u8; 4 << 20];
    for i in 0..mib.div_ceil(4) {
        for word in chunk.chunks_exact_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            word.copy_from_slice(&state.to_le_bytes());
        }
        let mut f = std::fs::File::create(dir.join(format!("f{i:04}.bin"))).expect("file");
        f.write_all(&chunk).expect("write");
    }
}

/// Path → BLAKE3 of contents, "dir", or "-> target": equal manifests are
/// equal trees. The checkpoint directory `.volmig` must be gone too.
pub fn manifest(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            let rel = path
                .strip_prefix(root)
                .expect("beneath")
                .display()
                .to_string();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let value = if meta.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&path).expect("link").display())
            } else if meta.is_dir() {
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

/// The operations recorded in `ns`.
pub async fn records(client: &Client, ns: &str) -> Vec<VolumeMigration> {
    RecordStore::new(client.clone(), ns)
        .list()
        .await
        .expect("records")
}

/// Everything volmig made in `ns` that an ended operation must not leave:
/// pods, Services, Secrets (by the managed-by label).
pub async fn leftovers(client: &Client, ns: &str) -> Vec<String> {
    let mut out = made::<Pod>(client, ns, "pod").await;
    out.extend(made::<Service>(client, ns, "service").await);
    out.extend(made::<Secret>(client, ns, "secret").await);
    out
}

/// Every object volmig made in `ns`, records and claims included.
pub async fn everything_volmig_made(client: &Client, ns: &str) -> Vec<String> {
    let mut out = leftovers(client, ns).await;
    out.extend(made::<ConfigMap>(client, ns, "configmap").await);
    out.extend(made::<PersistentVolumeClaim>(client, ns, "claim").await);
    out
}

/// `kind/name` of each object of type `K` in `ns` with volmig's label.
async fn made<K>(client: &Client, ns: &str, kind: &str) -> Vec<String>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=kubectl-volmig");
    api.list(&lp)
        .await
        .expect(kind)
        .items
        .iter()
        .map(|o| format!("{kind}/{}", o.meta().name.clone().unwrap_or_default()))
        .collect()
}

/// Starts `kubectl-volmig ARGS` (a migrate) and waits until its operation
/// is recorded and attempt 1's receiver reports at least `bytes` done.
pub async fn start_moving(
    env: &Env,
    client: &Client,
    args: &[&str],
    bytes: u64,
) -> (tokio::process::Child, String) {
    let child = spawn_volmig(env, args);
    let op = first_operation(client, &env.namespace).await;
    await_progress(client, &env.namespace, &op, 1, bytes).await;
    (child, op)
}

/// The name of the first operation recorded in `ns`, once there is one.
pub async fn first_operation(client: &Client, ns: &str) -> String {
    wait_until("the record", || async {
        records(client, ns)
            .await
            .first()
            .map(|r| r.metadata.name.clone())
    })
    .await
}

/// Waits until attempt `attempt`'s receiver reports at least `bytes` done;
/// returns what it reports.
pub async fn await_progress(client: &Client, ns: &str, op: &str, attempt: u32, bytes: u64) -> u64 {
    let receiver = volmig::names::pod_name(op, volmig::names::Component::Receiver, attempt);
    wait_until(&format!("attempt {attempt} past {bytes} bytes"), || async {
        progress_in_log(client, ns, &receiver)
            .await
            .filter(|b| *b >= bytes)
    })
    .await
}

/// A pod that mounts `claim` and sleeps, created with `extra` merged into
/// its spec; waits until it runs.
pub async fn app_pod(client: &Client, ns: &str, name: &str, claim: &str, extra: Value) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut pod = app_pod_spec(name, claim);
    if let (Some(spec), Some(more)) = (pod["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in more {
            spec.insert(k.clone(), v.clone());
        }
    }
    api.create(&PostParams::default(), &object(pod))
        .await
        .expect("app pod");
    wait_until(&format!("pod {name} Running"), || async {
        let phase = api.get(name).await.ok()?.status?.phase;
        phase.filter(|p| p == "Running")
    })
    .await;
}

/// An app pod that mounts `claim` at /data and idles.
pub fn app_pod_spec(name: &str, claim: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "containers": [{
                "name": "app", "image": "busybox",
                "command": ["sh", "-c", "while true; do sleep 1; done"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    })
}

/// The latest progress event in a pod's log (bytes done), if any.
pub async fn progress_in_log(client: &Client, ns: &str, pod: &str) -> Option<u64> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let log = api.logs(pod, &Default::default()).await.ok()?;
    log.lines()
        .rev()
        .filter(|l| l.starts_with("{\"event\":\"progress\""))
        .find_map(|l| serde_json::from_str::<Value>(l).ok()?["bytes_done"].as_u64())
}

/// SIGKILLs the container process of sandbox pod `pod` (found by the
/// HOSTNAME its kubelet sets), as a crash or an OOM kill would.
pub fn kill_pod_process(pod: &str) -> bool {
    let want = format!("HOSTNAME={pod}");
    let mut killed = false;
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
            // SAFETY: kill(2) takes plain integers.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
    }
    killed
}
