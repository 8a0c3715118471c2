//! The app the cutover tests move: a Deployment whose one pod appends a
//! sequence number per line to `/data/seq`, syncs each, and on start goes
//! on from the last number it finds. After any move the file must read
//! 1, 2, 3, … with no gap and no repeat: a write lost across the move
//! shows as a repeat once the app goes on from an older number.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::json;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

use super::{object, volume_dir, wait_until};

/// Appends, syncs, pauses; stops cleanly between two writes on SIGTERM.
pub const SEQUENCE_SCRIPT: &str = "trap 'exit 0' TERM; n=0; \
    if [ -s /data/seq ]; then n=$(tail -n 1 /data/seq); fi; \
    while true; do n=$((n+1)); echo $n >> /data/seq; sync; sleep 0.05; done";

/// Creates Deployment `name` (1 replica) writing the sequence on `claim`;
/// waits until its pod runs.
pub async fn sequence_app(client: &Client, ns: &str, name: &str, claim: &str) {
    let container = json!({
        "name": "app", "image": "busybox",
        "command": ["sh", "-c", SEQUENCE_SCRIPT],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    });
    app_deployment(client, ns, name, claim, container).await;
}

/// Creates Deployment `name` (1 replica) of `container`, whose volume
/// `data` is claim `claim`; waits until its pod runs.
pub async fn app_deployment(
    client: &Client,
    ns: &str,
    name: &str,
    claim: &str,
    container: serde_json::Value,
) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment: Deployment = object(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 10,
                    "containers": [container],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
                },
            },
        },
    }));
    api.create(&PostParams::default(), &deployment)
        .await
        .expect("deployment");
    await_running(client, ns, name).await;
}

/// Creates StatefulSet `db` of `replicas`, each replica writing the
/// sequence on its claim `data-db-N` (from template `data`, no class: the
/// default), and waits until they all run.
pub async fn sequence_stateful_set(client: &Client, ns: &str, replicas: usize) {
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let set: StatefulSet = object(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {
            "replicas": replicas, "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"terminationGracePeriodSeconds": 10, "containers": [{
                    "name": "db", "image": "busybox", "command": ["sh", "-c", SEQUENCE_SCRIPT],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]},
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    }));
    sts.create(&PostParams::default(), &set)
        .await
        .expect("statefulset");
    await_replicas(client, ns, "db", replicas).await;
}

/// Waits until exactly `n` pods of app `name` run (none being deleted).
pub async fn await_replicas(client: &Client, ns: &str, name: &str, n: usize) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_until(&format!("{n} pods of {name} Running"), || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("app={name}")))
            .await
            .ok()?;
        let running = list
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (running == n).then_some(())
    })
    .await;
}

/// Waits until a pod of app `name` runs.
pub async fn await_running(client: &Client, ns: &str, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_until(&format!("a pod of {name} Running"), || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("app={name}")))
            .await
            .ok()?;
        list.items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .and_then(|p| p.metadata.name)
    })
    .await
}

/// The numbers in `dir/seq`, in file order.
pub fn sequence(dir: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(dir.join("seq")).unwrap_or_default();
    text.lines()
        .map(|l| {
            l.trim()
                .parse()
                .unwrap_or_else(|_| panic!("not a number: {l:?}"))
        })
        .collect()
}

/// Asserts that `seq` is 1, 2, …, n.
pub fn assert_gapless(seq: &[u64], what: &str) {
    for (i, n) in seq.iter().enumerate() {
        assert_eq!(
            *n,
            i as u64 + 1,
            "{what}: line {} holds {n} (a lost write shows as a repeat, a gap as a jump); around it: {:?}",
            i + 1,
            &seq[i.saturating_sub(3)..(i + 3).min(seq.len())]
        );
    }
}

/// Waits until `dir/seq` holds more than `n` numbers.
pub async fn await_sequence_past(dir: &Path, n: usize) -> Vec<u64> {
    wait_until(
        &format!("{} to pass {n} numbers", dir.display()),
        || async {
            let seq = sequence(dir);
            (seq.len() > n).then_some(seq)
        },
    )
    .await
}

/// A claim of the default class (`standard`) with a label and an
/// annotation of the user's, Bound; its volume's directory.
pub async fn user_claim(client: &Client, ns: &str, name: &str) -> PathBuf {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvc: PersistentVolumeClaim = object(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "labels": {"team": "db"},
            "annotations": {"example.com/owner": "alice"},
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }));
    super::create_bound(&api, pvc).await;
    volume_dir(client, ns, name).await
}

/// App `app` writing its sequence on claim `claim` (made here), some
/// numbers written; the claim's volume directory.
pub async fn running_app(client: &Client, ns: &str, claim: &str, app: &str) -> PathBuf {
    let dir = user_claim(client, ns, claim).await;
    sequence_app(client, ns, app, claim).await;
    await_sequence_past(&dir, 20).await;
    dir
}

pub async fn claim_of(client: &Client, ns: &str, name: &str) -> PersistentVolumeClaim {
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("claim")
}

pub async fn volume(client: &Client, name: &str) -> Option<PersistentVolume> {
    Api::<PersistentVolume>::all(client.clone())
        .get_opt(name)
        .await
        .expect("get volume")
}

pub fn bound_volume(claim: &PersistentVolumeClaim) -> String {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .expect("bound")
}

pub fn policy(v: &PersistentVolume) -> String {
    v.spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.clone())
        .unwrap_or_default()
}

/// Invariant 2 of the cutover, watched from outside: while the operation
/// on `claim` records FinalSync or Swap (read before and after looking at
/// the pods), no pod of `app` may run, not even a Terminating one. Runs
/// until `stop` is set; returns what it saw wrong, and how many looks
/// found the app down in those steps.
pub fn watch_app_down(
    client: Client,
    ns: String,
    app: String,
    claim: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<(Vec<String>, usize)> {
    use std::sync::atomic::Ordering;
    use volmig::record::cutover::Step;
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let store = volmig::record::store::RecordStore::new(client.clone(), &ns);
        let step = || async {
            let records = store.list().await.ok()?;
            let vm = records.into_iter().find(|r| r.spec.source.name == claim)?;
            Some(vm.status.cutover?.step)
        };
        let (mut wrong, mut checked) = (Vec::new(), 0);
        while !stop.load(Ordering::Relaxed) {
            let before = step().await;
            let running: Vec<String> = pods
                .list(&ListParams::default().labels(&format!("app={app}")))
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter_map(|p| p.metadata.name)
                .collect();
            let after = step().await;
            if before == after && matches!(before, Some(Step::FinalSync | Step::Swap)) {
                checked += 1;
                if !running.is_empty() {
                    wrong.push(format!("{running:?} ran during {before:?}"));
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        (wrong, checked)
    })
}

/// [`watch_app_down`] running until [`AppWatch::finish`].
pub struct AppWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<(Vec<String>, usize)>,
}

impl AppWatch {
    /// Watches app `app` while the operation on `claim` (in `ns`) runs.
    pub fn start(client: &Client, ns: &str, app: &str, claim: &str) -> AppWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = watch_app_down(
            client.clone(),
            ns.to_string(),
            app.to_string(),
            claim.to_string(),
            stop.clone(),
        );
        AppWatch { stop, task }
    }

    /// What it saw wrong, and how many looks found the app down in the
    /// final sync and the swap.
    pub async fn finish(self) -> (Vec<String>, usize) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.expect("watch")
    }
}

/// `kubectl-volmig migrate CLAIM --to-storage-class local --cutover EXTRA`,
/// with environment variables `vars`.
pub async fn cutover(
    env: &super::Env,
    vars: &[(&str, &str)],
    claim: &str,
    extra: &[&str],
) -> super::Run {
    let mut args = vec!["migrate", claim, "--to-storage-class", "local", "--cutover"];
    args.extend_from_slice(extra);
    super::volmig_with(env, vars, &args).await
}

/// Deployment `name`'s `spec.replicas`.
pub async fn replicas(client: &Client, ns: &str, name: &str) -> i32 {
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("deployment");
    d.spec.and_then(|s| s.replicas).unwrap_or(1)
}
