//! Node moves (issue 19): a Deployment's claim of the node-local class
//! `local` on node-1 moved to node-3 with `--to-node node-3 --cutover`: the
//! new volume is made on node-3 in the same class, the app follows it
//! there and goes on from where it was, every write kept; a node the app
//! could not run on is refused before anything is created.

mod common;

use common::app::{
    assert_gapless, await_running, await_sequence_past, bound_volume, claim_of, sequence,
    sequence_app, volume, watch_app_down,
};
use common::{create_bound, env, everything_volmig_made, object, records, volmig, volume_dir};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::json;
use volmig::record::Phase;

/// A claim of the `local` class provisioned on `node` (as the scheduler's
/// selected-node annotation asks); its volume's directory.
async fn local_claim_on(client: &Client, ns: &str, name: &str, node: &str) -> std::path::PathBuf {
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
fn pinned_to(pv: &k8s_openapi::api::core::v1::PersistentVolume) -> Vec<String> {
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

async fn app_node(client: &Client, ns: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels("app=app"))
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

#[tokio::test(flavor = "multi_thread")]
async fn a_node_local_claim_moves_to_another_node_and_its_app_follows() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_dir = local_claim_on(&client, &ns, "data", "node-1").await;
    sequence_app(&client, &ns, "app", "data").await;
    await_sequence_past(&old_dir, 20).await;
    assert_eq!(app_node(&client, &ns).await, "node-1");
    let old_volume = bound_volume(&claim_of(&client, &ns, "data").await);

    // A cordoned node is refused, and nothing is created.
    let nodes: Api<Node> = Api::all(client.clone());
    let cordon = |on: bool| json!({"spec": {"unschedulable": on}});
    nodes
        .patch(
            "node-2",
            &PatchParams::default(),
            &Patch::Merge(cordon(true)),
        )
        .await
        .expect("cordon");
    let refused = volmig(
        &env,
        &["migrate", "data", "--to-node", "node-2", "--cutover"],
    )
    .await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("is cordoned"), "{}", refused.stderr);
    assert!(everything_volmig_made(&client, &ns).await.is_empty());
    nodes
        .patch(
            "node-2",
            &PatchParams::default(),
            &Patch::Merge(cordon(false)),
        )
        .await
        .expect("uncordon");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = watch_app_down(
        client.clone(),
        ns.clone(),
        "app".into(),
        "data".into(),
        stop.clone(),
    );
    let args = [
        "migrate",
        "data",
        "--to-node",
        "node-3",
        "--cutover",
        "--max-downtime",
        "5s",
    ];
    let run = volmig(&env, &args).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (wrong, _) = watch.await.expect("watch");
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        wrong.is_empty(),
        "the app ran during the final sync: {wrong:?}"
    );

    // The claim is on a new volume of the same class, pinned to node-3.
    let claim = claim_of(&client, &ns, "data").await;
    let new_volume = bound_volume(&claim);
    assert_ne!(new_volume, old_volume);
    assert_eq!(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref()),
        Some("local")
    );
    let pv = volume(&client, &new_volume).await.expect("the new volume");
    assert_eq!(pinned_to(&pv), ["node-3"]);

    // The app runs on node-3 with its data and goes on from where it was.
    await_running(&client, &ns, "app").await;
    assert_eq!(app_node(&client, &ns).await, "node-3");
    let new_dir = volume_dir(&client, &ns, "data").await;
    let before = sequence(&old_dir).len();
    let seq = await_sequence_past(&new_dir, before + 20).await;
    assert_gapless(&seq, "the sequence across the node move");

    let vm = records(&client, &ns).await.remove(0);
    assert_eq!(vm.status.phase, Phase::Succeeded);
    let downtime = vm.status.cutover.as_ref().and_then(|c| c.downtime_seconds);
    eprintln!("node move: downtime {downtime:?} s");
    assert!(downtime.is_some());
}
