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
use common::nodes::{app_node, local_claim_on, node_of, pinned_to, two_apps_on, volumes_on};
use common::{env, everything_volmig_made, records, volmig, volume_dir};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use volmig::record::Phase;

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

    // The dry run says where the new volume is made, and changes nothing.
    let dry = volmig(
        &env,
        &[
            "migrate",
            "data",
            "--to-node",
            "node-3",
            "--cutover",
            "--dry-run",
        ],
    )
    .await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(dry.stdout.contains("made on node node-3"), "{}", dry.stdout);
    assert!(
        dry.stdout
            .contains(&format!("keep     the old volume {old_volume}")),
        "{}",
        dry.stdout
    );
    assert!(everything_volmig_made(&client, &ns).await.is_empty());

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

#[tokio::test(flavor = "multi_thread")]
async fn drain_moves_every_node_local_claim_off_a_node() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let dirs = two_apps_on(&client, &ns, "node-1", 20).await;
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
    for vm in records(&client, &ns).await {
        let downtime = vm.status.cutover.as_ref().and_then(|c| c.downtime_seconds);
        eprintln!("drain: {} downtime {downtime:?} s", vm.spec.source);
        assert!(
            downtime.is_some(),
            "{}: no downtime recorded",
            vm.spec.source
        );
    }

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
