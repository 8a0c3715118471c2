//! Rehome (issue 19): node-local volumes whose disks moved to another
//! node get their PVs made again, pinned there; no data moves. The
//! sandbox's nodes share one disk, which stands in for disks that moved.
//!
//! A Deployment's `local` claim on node-1 is rehomed to node-2 with the
//! plugin killed in the middle of the PV's re-creation (once before the
//! delete, once before the create): `resume` finishes it, the app runs on
//! node-2 on the same data and its sequence has no gap; `rollback` then
//! restores the original PV, policy and all, and the app runs on node-1
//! again. `--all-from-node` rehomes every volume pinned to a node and
//! leaves the others; `--dry-run` changes nothing; `--topology` pins to a
//! label.

mod common;

use common::app::{
    assert_gapless, await_running, await_sequence_past, bound_volume, claim_of, policy, sequence,
    sequence_app, volume,
};
use common::nodes::{app_node, local_claim_on, node_of, pinned_to, two_apps_on};
use common::{env, volmig, volmig_with, volume_dir, Env};
use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::json;
use volmig::driver::cutover::CRASH_AT;
use volmig::record::rehome::{Rehome, Step};
use volmig::record::store::Store;
use volmig::record::Phase;

async fn rehomes(client: &Client, ns: &str) -> Vec<Rehome> {
    Store::<Rehome>::new(client.clone(), ns)
        .list()
        .await
        .expect("rehome records")
}

/// A `rehome` killed at crash point `point`: its operation.
async fn crashed(env: &Env, point: &str, args: &[&str]) -> String {
    let run = volmig_with(env, &[(CRASH_AT, point)], args).await;
    assert_ne!(run.code, 0, "killed at {point}: {}", run.stderr);
    assert!(
        run.stderr.contains("crash point"),
        "never reached {point}: {}",
        run.stderr
    );
    let client = env.client().await;
    let found = rehomes(&client, &env.namespace).await;
    found[0].metadata.name.clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rehome_killed_mid_way_is_resumed_then_rolled_back() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let dir = local_claim_on(&client, &ns, "data", "node-1").await;
    sequence_app(&client, &ns, "app", "data").await;
    await_sequence_past(&dir, 20).await;
    assert_eq!(app_node(&client, &ns).await, "node-1");
    let pv_name = bound_volume(&claim_of(&client, &ns, "data").await);
    let original = volume(&client, &pv_name).await.expect("the volume");
    let original_policy = policy(&original);

    // Killed after writing the PV's delete ahead, before making it: the
    // old PV is still there, Retain, its claim gone.
    let args = ["rehome", "data", "--to-node", "node-2"];
    let op = crashed(&env, "rehome:DeleteVolume", &args).await;
    let pv = volume(&client, &pv_name).await.expect("not deleted yet");
    assert_eq!(policy(&pv), "Retain");
    let record = &rehomes(&client, &ns).await[0];
    assert_eq!(record.status.step, Step::Move);
    let change = record.status.volumes[0].change.clone();
    assert_eq!(change, Some(format!("DeleteVolume {pv_name}")));

    // Resumed, and killed again between the delete and the create: only
    // the record holds the PV's spec now.
    let run = volmig_with(&env, &[(CRASH_AT, "rehome:CreateVolume")], &["resume", &op]).await;
    assert!(run.stderr.contains("crash point"), "{}", run.stderr);
    assert!(
        volume(&client, &pv_name).await.is_none(),
        "the PV is deleted"
    );

    let run = volmig(&env, &["resume", &op]).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let pv = volume(&client, &pv_name).await.expect("made again");
    assert_eq!(pinned_to(&pv), ["node-2"]);
    assert_eq!(policy(&pv), original_policy, "the policy is put back");
    assert_eq!(
        pv.spec.as_ref().and_then(|s| s.local.clone()),
        original.spec.as_ref().and_then(|s| s.local.clone())
    );
    let claim = claim_of(&client, &ns, "data").await;
    assert_eq!(
        bound_volume(&claim),
        pv_name,
        "the claim is bound to the same volume name"
    );

    // The app runs on node-2, on the same data, and goes on.
    await_running(&client, &ns, "app").await;
    assert_eq!(app_node(&client, &ns).await, "node-2");
    assert_eq!(volume_dir(&client, &ns, "data").await, dir);
    let before = sequence(&dir).len();
    let seq = await_sequence_past(&dir, before + 20).await;
    assert_gapless(&seq, "the sequence across the rehome");
    let record = &rehomes(&client, &ns).await[0];
    assert_eq!(
        (record.status.step, record.status.phase),
        (Step::Done, Phase::Succeeded)
    );
    eprintln!("rehome: downtime {:?} s", record.status.downtime_seconds);

    // Rollback restores the original PV: affinity, policy, source.
    let run = volmig(&env, &["rollback", &op]).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let back = volume(&client, &pv_name).await.expect("the original PV");
    assert_eq!(pinned_to(&back), ["node-1"]);
    assert_eq!(policy(&back), original_policy);
    let (was, is) = (
        original.spec.clone().expect("spec"),
        back.spec.clone().expect("spec"),
    );
    assert_eq!(
        (was.node_affinity, was.local, was.capacity),
        (is.node_affinity, is.local, is.capacity)
    );
    assert_eq!(bound_volume(&claim_of(&client, &ns, "data").await), pv_name);
    await_running(&client, &ns, "app").await;
    assert_eq!(app_node(&client, &ns).await, "node-1");
    let before = sequence(&dir).len();
    let seq = await_sequence_past(&dir, before + 20).await;
    assert_gapless(&seq, "the sequence across the rollback");
    let record = &rehomes(&client, &ns).await[0];
    assert_eq!(
        (record.status.step, record.status.phase),
        (Step::RolledBack, Phase::RolledBack)
    );

    // Ended: its record goes with cleanup.
    let run = volmig(&env, &["cleanup", &op]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(rehomes(&client, &ns).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn all_from_node_rehomes_every_volume_pinned_there_and_dry_run_changes_nothing() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let dirs = two_apps_on(&client, &ns, "node-1", 10).await;
    let pvs = |claim: &'static str| {
        let client = client.clone();
        let ns = ns.clone();
        async move { bound_volume(&claim_of(&client, &ns, claim).await) }
    };
    let (a, b, other) = (
        pvs("data-a").await,
        pvs("data-b").await,
        pvs("elsewhere").await,
    );

    let args = ["rehome", "--all-from-node", "node-1", "--to-node", "node-3"];
    let dry = volmig(&env, &[&args[..], &["--dry-run"]].concat()).await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    for pv in [&a, &b] {
        assert!(
            dry.stdout
                .contains(&format!("# persistentvolume {pv} before")),
            "{}",
            dry.stdout
        );
        assert!(
            dry.stdout
                .contains(&format!("# persistentvolume {pv} after")),
            "{}",
            dry.stdout
        );
    }
    assert!(!dry.stdout.contains(&other), "{}", dry.stdout);
    assert!(dry.stdout.contains("scale Deployment"), "{}", dry.stdout);
    assert!(
        rehomes(&client, &ns).await.is_empty(),
        "a dry run records nothing"
    );
    assert_eq!(
        pinned_to(&volume(&client, &a).await.expect("pv")),
        ["node-1"]
    );

    let run = volmig(&env, &args).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let op = rehomes(&client, &ns).await[0].metadata.name.clone();
    let status = volmig(&env, &["status", &op]).await;
    assert!(
        status.stdout.contains("Step:        Done"),
        "{}",
        status.stdout
    );
    let list = volmig(&env, &["status"]).await;
    assert!(list.stdout.contains(&op), "{}", list.stdout);
    for (pv, app) in [(&a, "app-a"), (&b, "app-b")] {
        assert_eq!(
            pinned_to(&volume(&client, pv).await.expect("pv")),
            ["node-3"]
        );
        await_running(&client, &ns, app).await;
        assert_eq!(node_of(&client, &ns, app).await, "node-3");
    }
    for dir in &dirs {
        let before = sequence(dir).len();
        assert_gapless(
            &await_sequence_past(dir, before + 10).await,
            "after --all-from-node",
        );
    }
    assert_eq!(
        pinned_to(&volume(&client, &other).await.expect("pv")),
        ["node-2"]
    );
    let record = &rehomes(&client, &ns).await[0];
    eprintln!(
        "rehome --all-from-node (2 volumes): downtime {:?} s",
        record.status.downtime_seconds
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn topology_pins_a_volume_to_a_label_rather_than_a_host() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    // A label only node-2 carries: the pool's own key.
    let key = format!("pool.volmig.test/{ns}");
    let nodes: Api<Node> = Api::all(client.clone());
    let label = json!({"metadata": {"labels": {key.as_str(): "tank"}}});
    nodes
        .patch("node-2", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("label node-2");
    let dir = local_claim_on(&client, &ns, "data", "node-1").await;
    sequence_app(&client, &ns, "app", "data").await;
    await_sequence_past(&dir, 10).await;
    let pv_name = bound_volume(&claim_of(&client, &ns, "data").await);

    let topology = format!("{key}=tank");
    let run = volmig(
        &env,
        &["rehome", &format!("pv/{pv_name}"), "--topology", &topology],
    )
    .await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let pv: PersistentVolume = volume(&client, &pv_name).await.expect("pv");
    let terms = pv
        .spec
        .and_then(|s| s.node_affinity)
        .and_then(|a| a.required)
        .expect("required affinity")
        .node_selector_terms;
    let requirements: Vec<(String, Vec<String>)> = terms[0]
        .match_expressions
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.key, r.values.unwrap_or_default()))
        .collect();
    assert_eq!(requirements, [(key.clone(), vec!["tank".to_string()])]);
    await_running(&client, &ns, "app").await;
    assert_eq!(app_node(&client, &ns).await, "node-2");
    let before = sequence(&dir).len();
    assert_gapless(
        &await_sequence_past(&dir, before + 10).await,
        "after --topology",
    );
    let unlabel = json!({"metadata": {"labels": {key.as_str(): null}}});
    nodes
        .patch("node-2", &PatchParams::default(), &Patch::Merge(&unlabel))
        .await
        .expect("unlabel node-2");
}

/// Installs the CRD of `fixture` (tests/fixtures/crds) and waits until the
/// API server serves it.
async fn install_crd(client: &Client, fixture: &str) -> String {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/crds")
        .join(fixture);
    let text = std::fs::read_to_string(&path).expect("the CRD fixture");
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).expect("a CRD");
    let name = crd.metadata.name.clone().expect("named");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.create(&Default::default(), &crd)
        .await
        .expect("CRD created");
    common::wait_until("the CRD is established", || async {
        let crd = api.get(&name).await.ok()?;
        let conditions = crd.status?.conditions?;
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
    name
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zfs_volume_is_rehomed_with_its_owner_and_pool_rewritten() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    install_crd(&client, "zfsvolume.yaml").await;
    // The node agent's id of each node, as LocalPV-ZFS labels them.
    let nodes: Api<Node> = Api::all(client.clone());
    for n in ["node-1", "node-2"] {
        let label = json!({"metadata": {"labels": {"openebs.io/nodeid": format!("zfs-{n}")}}});
        nodes
            .patch(n, &PatchParams::default(), &Patch::Merge(&label))
            .await
            .expect("label node");
    }
    let pv_name = format!("pvc-zfs-{ns}");
    let pv: PersistentVolume = common::object(json!({
        "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "zfs",
                 "csi": {"driver": "zfs.csi.openebs.io", "volumeHandle": pv_name, "fsType": "zfs"},
                 "claimRef": {"namespace": ns, "name": "zdata"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "openebs.io/nodeid", "operator": "In", "values": ["zfs-node-1"]}]}]}}},
    }));
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    volumes
        .create(&PostParams::default(), &pv)
        .await
        .expect("PV");
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), &ns);
    common::create_bound(
        &claims,
        common::object(json!({
            "metadata": {"name": "zdata"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "zfs", "volumeName": pv_name,
                     "resources": {"requests": {"storage": "1Gi"}}},
        })),
    )
    .await;
    let gvk = GroupVersionKind::gvk("zfs.openebs.io", "v1", "ZFSVolume");
    let zfs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk(&gvk));
    let object: DynamicObject = common::object(json!({
        "apiVersion": "zfs.openebs.io/v1", "kind": "ZFSVolume",
        "metadata": {"name": pv_name, "labels": {"kubernetes.io/nodename": "node-1"}},
        "spec": {"ownerNodeID": "zfs-node-1", "poolName": "tank", "capacity": "1073741824",
                 "fsType": "zfs", "volumeType": "DATASET"},
    }));
    zfs.create(&PostParams::default(), &object)
        .await
        .expect("ZFSVolume");
    let owner = |o: &DynamicObject| {
        (
            o.data["spec"]["ownerNodeID"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            o.data["spec"]["poolName"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    let key_values = |pv: &PersistentVolume| -> Vec<String> {
        pv.spec
            .as_ref()
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
            .map(|r| {
                r.node_selector_terms
                    .iter()
                    .flat_map(|t| t.match_expressions.clone().unwrap_or_default())
                    .map(|e| format!("{}={}", e.key, e.values.unwrap_or_default().join("|")))
                    .collect()
            })
            .unwrap_or_default()
    };

    // Killed after writing the rewrite ahead, before making it: resume
    // makes it.
    let args = ["rehome", "zdata", "--to-node", "node-2", "--pool", "tank2"];
    let op = crashed(&env, "rehome:RewriteDriver", &args).await;
    let before = owner(&zfs.get(&pv_name).await.expect("ZFSVolume"));
    assert_eq!(before, ("zfs-node-1".into(), "tank".into()));
    let run = volmig(&env, &["resume", &op]).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let pv = volume(&client, &pv_name).await.expect("made again");
    assert_eq!(key_values(&pv), ["openebs.io/nodeid=zfs-node-2"]);
    assert_eq!(
        owner(&zfs.get(&pv_name).await.expect("ZFSVolume")),
        ("zfs-node-2".into(), "tank2".into())
    );
    assert_eq!(
        bound_volume(&claim_of(&client, &ns, "zdata").await),
        pv_name
    );
    let status = volmig(&env, &["status", &op]).await;
    assert!(
        status
            .stdout
            .contains("spec.ownerNodeID zfs-node-1 → zfs-node-2"),
        "{}",
        status.stdout
    );

    // Rollback puts the driver's object back too.
    let run = volmig(&env, &["rollback", &op]).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let pv = volume(&client, &pv_name).await.expect("the original");
    assert_eq!(key_values(&pv), ["openebs.io/nodeid=zfs-node-1"]);
    assert_eq!(
        owner(&zfs.get(&pv_name).await.expect("ZFSVolume")),
        ("zfs-node-1".into(), "tank".into())
    );
    assert_eq!(
        bound_volume(&claim_of(&client, &ns, "zdata").await),
        pv_name
    );

    // Without its ZFSVolume, the volume is refused before anything changes.
    zfs.delete(&pv_name, &Default::default())
        .await
        .expect("delete ZFSVolume");
    let run = volmig(&env, &["rehome", "zdata", "--to-node", "node-2"]).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("ZFSVolume") && run.stderr.contains("was not found"),
        "{}",
        run.stderr
    );
    assert_eq!(rehomes(&client, &ns).await.len(), 1, "no second record");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owner_deleted_while_the_rehome_was_stopped_does_not_block_it() {
    use k8s_openapi::api::apps::v1::Deployment;
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let dir = local_claim_on(&client, &ns, "data", "node-1").await;
    sequence_app(&client, &ns, "app", "data").await;
    await_sequence_past(&dir, 5).await;
    let args = ["rehome", "data", "--to-node", "node-2"];
    let op = crashed(&env, "rehome:CreateVolume", &args).await;
    // Someone removes the app meanwhile.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .delete("app", &Default::default())
        .await
        .expect("delete the Deployment");
    let run = volmig(&env, &["resume", &op]).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("is gone: not scaled"), "{}", run.stderr);
    let pv = volume(
        &client,
        &bound_volume(&claim_of(&client, &ns, "data").await),
    )
    .await
    .expect("made again");
    assert_eq!(pinned_to(&pv), ["node-2"]);
}
