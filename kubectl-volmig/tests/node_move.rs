//! Node moves (issue 19): a Deployment's claim of the node-local class
//! `local` on node-1 moved to node-3 with `--to-node node-3 --cutover`: the
//! new volume is made on node-3 in the same class, the app follows it
//! there and goes on from where it was, every write kept; a cordoned node
//! is refused before anything is created. `drain node-1 --to-node node-3`
//! moves two workloads' claims off node-1 in one operation, and after
//! `commit` no volume is left on node-1.

mod common;

use common::app::{
    assert_gapless, await_running, await_sequence_past, bound_volume, claim_of, sequence,
    sequence_app, volume, AppWatch,
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
    node_of(client, ns, "app").await
}

/// The node a running pod of app `app` is on.
async fn node_of(client: &Client, ns: &str, app: &str) -> String {
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

    let watch = AppWatch::start(&client, &ns, "app", "data");
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
    let (wrong, _) = watch.finish().await;
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

/// The volumes pinned to `node`'s hostname, by name.
async fn volumes_on(client: &Client, node: &str) -> Vec<String> {
    let all = Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("volumes");
    all.items
        .into_iter()
        .filter(|pv| pinned_to(pv) == [node])
        .filter_map(|pv| pv.metadata.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_moves_every_node_local_claim_off_a_node() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let mut dirs = Vec::new();
    for (claim, app) in [("data-a", "app-a"), ("data-b", "app-b")] {
        let dir = local_claim_on(&client, &ns, claim, "node-1").await;
        sequence_app(&client, &ns, app, claim).await;
        dirs.push(dir);
    }
    // A claim on another node stays where it is.
    local_claim_on(&client, &ns, "elsewhere", "node-2").await;
    for dir in &dirs {
        await_sequence_past(dir, 20).await;
    }
    let on_node_1 = volumes_on(&client, "node-1").await;
    assert_eq!(on_node_1.len(), 2, "{on_node_1:?}");

    let needs_target = volmig(&env, &["drain", "node-1"]).await;
    assert_eq!(needs_target.code, 1, "{}", needs_target.stderr);
    assert!(
        needs_target.stderr.contains("--to-node"),
        "{}",
        needs_target.stderr
    );

    let run = volmig(
        &env,
        &[
            "drain",
            "node-1",
            "--to-node",
            "node-3",
            "--max-downtime",
            "5s",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("2 claims"), "{}", run.stderr);
    for ((claim, app), old_dir) in [("data-a", "app-a"), ("data-b", "app-b")].iter().zip(&dirs) {
        let pv = volume(&client, &bound_volume(&claim_of(&client, &ns, claim).await))
            .await
            .expect("the new volume");
        assert_eq!(pinned_to(&pv), ["node-3"], "{claim}");
        await_running(&client, &ns, app).await;
        assert_eq!(node_of(&client, &ns, app).await, "node-3", "{app}");
        let new_dir = volume_dir(&client, &ns, claim).await;
        let before = sequence(old_dir).len();
        let seq = await_sequence_past(&new_dir, before + 20).await;
        assert_gapless(&seq, claim);
    }
    let untouched = volume(
        &client,
        &bound_volume(&claim_of(&client, &ns, "elsewhere").await),
    )
    .await
    .expect("volume");
    assert_eq!(pinned_to(&untouched), ["node-2"]);

    // The old volumes wait for `commit` (a rollback needs them); then none
    // is left on node-1.
    let heads = volmig::record::store::GroupStore::new(client.clone(), &ns)
        .list()
        .await
        .expect("heads");
    let op = heads[0].metadata.name.clone();
    let commit = volmig(&env, &["commit", &op]).await;
    assert_eq!(commit.code, 0, "{}", commit.stderr);
    common::wait_until("node-1 free of volumes", || async {
        volumes_on(&client, "node-1").await.is_empty().then_some(())
    })
    .await;
}
