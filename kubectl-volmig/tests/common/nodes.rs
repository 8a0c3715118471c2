//! Nodes and node-local volumes: claims of the `local` class made on a
//! given node, where volumes are pinned and where apps run.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams};
use kube::Client;
use serde_json::json;

use super::app::{await_sequence_past, sequence_app};
use super::{create_bound, object, volume_dir};

/// A claim of the `local` class provisioned on `node` (as the scheduler's
/// selected-node annotation asks); its volume's directory.
pub async fn local_claim_on(
    client: &Client,
    ns: &str,
    name: &str,
    node: &str,
) -> std::path::PathBuf {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvc: PersistentVolumeClaim = object(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "annotations": {"volume.kubernetes.io/selected-node": node}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                 "resources": {"requests": {"storage": "1Gi"}}},
    }));
    create_bound(&api, pvc).await;
    volume_dir(client, ns, name).await
}

/// The hostnames a volume's node affinity pins it to.
pub fn pinned_to(pv: &PersistentVolume) -> Vec<String> {
    let terms = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.clone())
        .unwrap_or_default();
    terms
        .iter()
        .flat_map(|t| t.match_expressions.clone().unwrap_or_default())
        .flat_map(|e| e.values.unwrap_or_default())
        .collect()
}

pub async fn app_node(client: &Client, ns: &str) -> String {
    node_of(client, ns, "app").await
}

/// The node a running pod of app `app` is on.
pub async fn node_of(client: &Client, ns: &str, app: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("pods");
    let running = list.items.into_iter().find(|p| {
        p.metadata.deletion_timestamp.is_none()
            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    });
    running
        .and_then(|p| p.spec?.node_name)
        .expect("a running app pod")
}

/// The volumes pinned to `node`'s hostname, by name.
pub async fn volumes_on(client: &Client, node: &str) -> Vec<String> {
    let all = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("volumes");
    all.items
        .into_iter()
        .filter(|pv| pinned_to(pv) == [node])
        .filter_map(|pv| pv.metadata.name)
        .collect()
}

/// Two Deployments, `app-a` and `app-b`, writing sequences to the `local`
/// claims `data-a` and `data-b` on `node`, and a claim `elsewhere` on
/// node-2 that must stay where it is; their volumes' directories, once
/// each sequence is past `n`.
pub async fn two_apps_on(
    client: &Client,
    ns: &str,
    node: &str,
    n: usize,
) -> Vec<std::path::PathBuf> {
    let mut dirs = Vec::new();
    for (claim, app) in [("data-a", "app-a"), ("data-b", "app-b")] {
        let dir = local_claim_on(client, ns, claim, node).await;
        sequence_app(client, ns, app, claim).await;
        dirs.push(dir);
    }
    local_claim_on(client, ns, "elsewhere", "node-2").await;
    for dir in &dirs {
        await_sequence_past(dir, n).await;
    }
    dirs
}
