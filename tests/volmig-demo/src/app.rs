//! The demo's application: a ReadWriteOnce claim and a one-replica
//! Deployment on the tainted node that fills it with a small, realistic
//! dataset, then idles. Also a byte-for-byte comparison of two trees on the
//! host, which only a sandbox allows.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{ListParams, LogParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// The claim the app writes to, and the one the demo migrates.
pub const CLAIM: &str = "app-data";
/// How long the app may take to start and write its dataset.
const READY_WITHIN: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

/// What the app writes: uploads in monthly folders, a few CSV tables, a
/// database-like blob, a log; then `/data/.ready`, then nothing more (a
/// log still growing would make the copy race the app).
const SCRIPT: &str = r#"set -eu
mkdir -p /data/log /data/db /data/cache
log() { echo "$(date -u +%FT%TZ) $*" >> /data/log/app.log; }
log "app starting"
for m in 01 02 03 04 05 06 07 08 09 10; do
  mkdir -p /data/uploads/2024-$m/thumbs
  for i in $(seq 1 24); do
    head -c $((i * 1536 + 2048)) /dev/urandom > /data/uploads/2024-$m/photo-$i.jpg
    head -c 1024 /dev/urandom > /data/uploads/2024-$m/thumbs/photo-$i.jpg
  done
  log "imported uploads for 2024-$m"
done
for t in users orders invoices; do
  seq 1 20000 | sed "s/^/$t,/" > /data/db/$t.csv
done
head -c 4194304 /dev/urandom > /data/db/store.bin
ln -s ../db/store.bin /data/cache/current
log "dataset ready"
touch /data/.ready
while true; do sleep 1; done
"#;

/// Creates the claim and the Deployment: pinned to `node`, tolerating
/// `dedicated=db:NoSchedule`.
pub async fn deploy(client: &Client, ns: &str, node: &str) -> anyhow::Result<()> {
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": CLAIM},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "standard",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }))?;
    let pod_spec = json!({
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}],
        "containers": [{
            "name": "app",
            "image": "busybox",
            "command": ["sh", "-c", SCRIPT],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}}],
    });
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "app", "labels": {"app": "app"}},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app": "app"}},
            "template": {"metadata": {"labels": {"app": "app"}}, "spec": pod_spec},
        },
    }))?;
    let pp = PostParams::default();
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .create(&pp, &claim)
        .await
        .with_context(|| format!("creating claim {CLAIM}"))?;
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&pp, &deployment)
        .await
        .context("creating deployment app")?;
    Ok(())
}

/// Waits until the app's pod runs and has written its dataset; returns the
/// pod's name and the claim's directory on the host.
pub async fn await_dataset(client: &Client, ns: &str) -> anyhow::Result<(String, PathBuf)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + READY_WITHIN;
    let mut seen = String::from("no pod yet");
    loop {
        let list = pods.list(&ListParams::default().labels("app=app")).await?;
        if let Some(pod) = list.items.first() {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let status = pod.status.as_ref();
            let phase = status.and_then(|s| s.phase.clone()).unwrap_or_default();
            if phase == "Running" {
                if let Some(dir) = claim_dir(client, ns, CLAIM).await? {
                    if dir.join(".ready").exists() {
                        return Ok((name, dir));
                    }
                }
            }
            let waiting = status
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.first())
                .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
            seen = format!("pod {name}: {phase} {}", waiting.unwrap_or_default());
            if Instant::now() > deadline {
                let log = pods
                    .logs(&name, &LogParams::default())
                    .await
                    .unwrap_or_default();
                bail!("the demo app did not write its dataset within {READY_WITHIN:?} ({seen}); its log:\n{log}");
            }
        } else if Instant::now() > deadline {
            bail!("the demo app did not start within {READY_WITHIN:?} ({seen})");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The host directory behind a bound claim: the sandbox's PVs are
/// `hostPath` (class `standard`) or `local` (class `local`) directories.
pub async fn claim_dir(client: &Client, ns: &str, claim: &str) -> anyhow::Result<Option<PathBuf>> {
    let Some(pv) = bound_volume(client, ns, claim).await? else {
        return Ok(None);
    };
    Ok(pv.spec.and_then(|s| {
        let path = s.host_path.map(|h| h.path).or(s.local.map(|l| l.path))?;
        Some(PathBuf::from(path))
    }))
}

/// The node a bound claim's volume is tied to (a `local` PV's
/// `kubernetes.io/hostname` node affinity), if any.
pub async fn claim_node(client: &Client, ns: &str, claim: &str) -> anyhow::Result<Option<String>> {
    let pv = bound_volume(client, ns, claim).await?;
    let terms = pv
        .and_then(|pv| pv.spec?.node_affinity?.required)
        .map(|r| r.node_selector_terms)
        .unwrap_or_default();
    Ok(terms
        .into_iter()
        .flat_map(|t| t.match_expressions.unwrap_or_default())
        .find(|e| e.key == "kubernetes.io/hostname" && e.operator == "In")
        .and_then(|e| e.values?.into_iter().next()))
}

async fn bound_volume(
    client: &Client,
    ns: &str,
    claim: &str,
) -> anyhow::Result<Option<PersistentVolume>> {
    let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get_opt(claim)
        .await
        .with_context(|| format!("reading claim {claim}"))?;
    let Some(volume) = pvc.and_then(|c| c.spec?.volume_name) else {
        return Ok(None);
    };
    Api::<PersistentVolume>::all(client.clone())
        .get_opt(&volume)
        .await
        .with_context(|| format!("reading volume {volume}"))
}

/// Files, directories and symlinks under a tree, and its file bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct TreeSize {
    pub entries: u64,
    pub bytes: u64,
}

/// The size of the tree at `dir` (the tree compared with itself).
pub fn tree_size(dir: &Path) -> anyhow::Result<TreeSize> {
    compare_trees(dir, dir)
}

/// Checks that every entry under `src` is in `dst` with the same type,
/// contents (files) and target (symlinks), compared byte for byte.
pub fn compare_trees(src: &Path, dst: &Path) -> anyhow::Result<TreeSize> {
    let mut size = TreeSize::default();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(src.join(&rel))? {
            let rel = rel.join(entry?.file_name());
            let (a, b) = (src.join(&rel), dst.join(&rel));
            let kind = std::fs::symlink_metadata(&a)?.file_type();
            let other = std::fs::symlink_metadata(&b)
                .with_context(|| format!("{} is missing at the destination", rel.display()))?
                .file_type();
            if kind != other {
                bail!(
                    "{} is not of the same type at the destination",
                    rel.display()
                );
            }
            size.entries += 1;
            if kind.is_dir() {
                stack.push(rel);
            } else if kind.is_symlink() {
                if std::fs::read_link(&a)? != std::fs::read_link(&b)? {
                    bail!(
                        "symlink {} points elsewhere at the destination",
                        rel.display()
                    );
                }
            } else if kind.is_file() {
                let data = std::fs::read(&a)?;
                if data != std::fs::read(&b)? {
                    bail!("{} differs at the destination", rel.display());
                }
                size.bytes += data.len() as u64;
            }
        }
    }
    Ok(size)
}
