//! `migrate --cutover`, `commit` and `rollback` end to end, with an app
//! that writes a gapless sequence and syncs every line: the claim keeps its
//! name and lands on the new volume, no acknowledged write is lost, the old
//! volume is untouched until `commit`, and a rollback brings everything
//! back (after success, with the app's newer writes).

mod common;

use std::collections::BTreeMap;

use common::app::{
    assert_gapless, await_running, await_sequence_past, bound_volume, claim_of, cutover, policy,
    replicas, running_app, sequence, user_claim, volume, AppWatch,
};
use common::{env, object, records, volmig, volume_dir, wait_until};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::json;
use volmig::record::cutover::Step;
use volmig::record::{Phase, VolumeMigration};

/// The claim as the user made it: name, labels, annotations kept, no
/// binding annotation of the old binding carried over.
fn assert_same_claim(claim: &PersistentVolumeClaim) {
    let meta = &claim.metadata;
    let labels = meta.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("team").map(String::as_str),
        Some("db"),
        "{meta:?}"
    );
    let annotations: BTreeMap<String, String> = meta.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("example.com/owner").map(String::as_str),
        Some("alice"),
        "{meta:?}"
    );
}

/// The storage a claim requests.
fn request(claim: &PersistentVolumeClaim) -> String {
    let resources = claim.spec.as_ref().and_then(|s| s.resources.clone());
    let requests = resources.and_then(|r| r.requests).unwrap_or_default();
    requests
        .get("storage")
        .map(|q| q.0.clone())
        .unwrap_or_default()
}

fn cutover_of(vm: &VolumeMigration) -> &volmig::record::cutover::CutoverStatus {
    vm.status.cutover.as_ref().expect("status.cutover")
}

async fn operation(client: &Client, ns: &str) -> VolumeMigration {
    let all = records(client, ns).await;
    assert_eq!(all.len(), 1, "one operation");
    all.into_iter().next().expect("one")
}

/// The whole move: pre-copy rounds, quiesce, final sync, swap, restore;
/// the app goes on on the new volume from where it was; commit deletes
/// the old volume and its data (its policy was Delete).
#[tokio::test(flavor = "multi_thread")]
async fn cutover_moves_the_app_and_commit_deletes_the_old_volume() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_dir = running_app(&client, &ns, "data", "app").await;
    let old_volume = bound_volume(&claim_of(&client, &ns, "data").await);
    let watch = AppWatch::start(&client, &ns, "app", "data");

    let run = cutover(
        &env,
        &[],
        "data",
        &[
            "--max-downtime",
            "0s",
            "--precopy-rounds",
            "2",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (wrong, checked) = watch.finish().await;
    assert!(
        wrong.is_empty(),
        "the app ran during the final sync or the swap: {wrong:?}"
    );
    assert!(
        checked > 0,
        "the watch never saw the final sync or the swap"
    );
    let vm = run.operation();
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    let c = cutover_of(&vm);
    assert_eq!(c.step, Step::AwaitingCommit);
    assert_eq!(c.rounds.len(), 2, "two pre-copy rounds: {:?}", c.rounds);
    assert!(c.downtime_seconds.is_some_and(|d| d > 0.0), "{c:?}");
    assert_eq!(c.quiesce.len(), 1);
    assert_eq!(c.quiesce[0].replicas, 1);
    // Attempts of every pass are in the history: 2 rounds + the final sync.
    assert!(vm.status.attempts.len() >= 3, "{:?}", vm.status.attempts);
    // The passes shared one Service and one set of keys; all gone now.
    assert_eq!(common::leftovers(&client, &ns).await, Vec::<String>::new());

    // The claim: same name, labels and annotations, bound to a new volume
    // of the new class.
    let claim = claim_of(&client, &ns, "data").await;
    assert_same_claim(&claim);
    let new_volume = bound_volume(&claim);
    assert_ne!(new_volume, old_volume);
    assert_eq!(c.claims[0].new_volume.as_deref(), Some(new_volume.as_str()));
    let new = volume(&client, &new_volume).await.expect("new volume");
    assert_eq!(
        new.spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref()),
        Some("local")
    );
    // Its policy is what its class asks again.
    assert_eq!(policy(&new), "Delete");
    // The temporary claim is gone.
    let temporary = &c.claims[0].temporary_claim;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    assert!(claims.get_opt(temporary).await.expect("get").is_none());

    // The old volume is kept, Retain, labelled, its data untouched.
    let old = volume(&client, &old_volume).await.expect("old volume kept");
    assert_eq!(policy(&old), "Retain");
    let labels = old.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("volmig.io/operation"), Some(&vm.metadata.name));
    let before = sequence(&old_dir);
    assert_gapless(&before, "the old volume");

    // The app runs again, replicas restored, and goes on from where it was.
    assert_eq!(replicas(&client, &ns, "app").await, 1);
    await_running(&client, &ns, "app").await;
    let new_dir = volume_dir(&client, &ns, "data").await;
    let after = await_sequence_past(&new_dir, before.len() + 10).await;
    assert_gapless(&after, "the new volume");
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "every write before the stop is there"
    );

    // Events on the claim tell the steps.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for want in [
        "CutoverPreCopy",
        "CutoverQuiesce",
        "CutoverFinalSync",
        "CutoverSwapped",
        "CutoverSucceeded",
    ] {
        assert!(
            reasons.iter().any(|r| r == want),
            "no {want} event in {reasons:?}"
        );
    }

    let op = vm.metadata.name.clone();
    let status = volmig(&env, &["status", &op]).await;
    assert!(
        status.stdout.contains("AwaitingCommit"),
        "{}",
        status.stdout
    );
    assert!(status.stdout.contains("downtime"), "{}", status.stdout);

    let run = volmig(&env, &["commit", &op, "-o", "json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(cutover_of(&run.operation()).step, Step::Committed);
    wait_until("the old volume deleted with its data", || async {
        let gone = volume(&client, &old_volume).await.is_none() && !old_dir.exists();
        gone.then_some(())
    })
    .await;
    // The app's claim still holds everything.
    let claim = claim_of(&client, &ns, "data").await;
    assert_eq!(bound_volume(&claim), new_volume);
    let rollback = volmig(&env, &["rollback", &op]).await;
    assert_ne!(rollback.code, 0, "a committed cutover cannot roll back");
    assert!(rollback.stderr.contains("committed"), "{}", rollback.stderr);
}

/// Rollback after success: the app's writes on the new volume are copied
/// back, the claim is bound to its old volume again, and the app goes on
/// from its newest number; the new volume is kept for inspection.
#[tokio::test(flavor = "multi_thread")]
async fn rollback_after_success_keeps_the_writes_made_since() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_dir = running_app(&client, &ns, "data", "app").await;
    let old_volume = bound_volume(&claim_of(&client, &ns, "data").await);
    // An HPA on the app does not stand in the way: it leaves a target at 0
    // alone, and the recorded replicas come back, not its minimum.
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), &ns);
    let hpa = object(json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "app"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "app"},
                 "minReplicas": 1, "maxReplicas": 3},
    }));
    hpas.create(&PostParams::default(), &hpa)
        .await
        .expect("hpa");
    // A bigger volume: the claim asks for what the new volume holds, and
    // for its own size again after the rollback.
    let run = cutover(&env, &[], "data", &["--to-size", "2Gi", "-o", "json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation().metadata.name;
    await_running(&client, &ns, "app").await;
    let new_dir = volume_dir(&client, &ns, "data").await;
    let moved = claim_of(&client, &ns, "data").await;
    assert_eq!(request(&moved), "2Gi");
    let new_volume = bound_volume(&moved);
    let on_old = sequence(&old_dir).len();
    // The app writes on the new volume for a while.
    await_sequence_past(&new_dir, on_old + 30).await;

    let run = volmig(&env, &["rollback", &op, "-o", "json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(
        vm.status.phase,
        Phase::RolledBack,
        "{:?}",
        vm.status.message
    );
    let c = cutover_of(&vm);
    assert_eq!(c.step, Step::RolledBack);
    let r = c.rollback.as_ref().expect("rollback");
    assert!(r.sync_back && r.synced_back, "{r:?}");

    let claim = claim_of(&client, &ns, "data").await;
    assert_same_claim(&claim);
    assert_eq!(bound_volume(&claim), old_volume);
    assert_eq!(request(&claim), "1Gi");
    let old = volume(&client, &old_volume).await.expect("old volume");
    assert_eq!(
        policy(&old),
        "Delete",
        "the old volume's own policy is back"
    );
    // The new volume is kept, with what the app wrote there.
    let kept = volume(&client, &new_volume).await.expect("new volume kept");
    assert_eq!(policy(&kept), "Retain");
    let on_new = sequence(&new_dir);
    assert_gapless(&on_new, "the new volume");

    await_running(&client, &ns, "app").await;
    assert_eq!(replicas(&client, &ns, "app").await, 1);
    let after = await_sequence_past(&old_dir, on_new.len() + 10).await;
    assert_gapless(&after, "the old volume after the rollback");
    assert_eq!(
        &after[..on_new.len()],
        &on_new[..],
        "the writes made on the new volume came back"
    );
}

/// Consumers that scaling cannot stop are refused before anything is
/// created: a bare pod, a DaemonSet's pod.
#[tokio::test(flavor = "multi_thread")]
async fn consumers_scaling_cannot_stop_are_refused_before_anything_changes() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    user_claim(&client, &ns, "data").await;
    common::app_pod(&client, &ns, "lonely", "data", json!({})).await;
    let run = cutover(&env, &[], "data", &[]).await;
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("Pod lonely"), "{}", run.stderr);
    assert!(run.stderr.contains("nothing was changed"), "{}", run.stderr);
    assert!(records(&client, &ns).await.is_empty());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        claims
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );

    // A DaemonSet's pod.
    let daemon_sets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(client.clone(), &ns);
    let ds = object(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "containers": [{"name": "a", "image": "busybox", "command": ["sh", "-c", "sleep 3600"],
                                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
                },
            },
        },
    }));
    daemon_sets
        .create(&PostParams::default(), &ds)
        .await
        .expect("daemonset");
    await_running(&client, &ns, "agent").await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    pods.delete("lonely", &Default::default())
        .await
        .expect("delete pod");
    let run = cutover(&env, &[], "data", &[]).await;
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("DaemonSet agent"), "{}", run.stderr);
    assert!(records(&client, &ns).await.is_empty());
}

/// A StatefulSet `db` of one replica writing the sequence on its claim
/// `data-db-0` (class `standard`); that claim's directory.
async fn stateful_app(client: &Client, ns: &str) -> std::path::PathBuf {
    common::app::sequence_stateful_set(client, ns, 1).await;
    let old_dir = volume_dir(client, ns, "data-db-0").await;
    await_sequence_past(&old_dir, 20).await;
    old_dir
}

/// The class `db`'s claim template names, and the StatefulSet's uid.
async fn template_class(client: &Client, ns: &str) -> (Option<String>, String) {
    let sts = Api::<StatefulSet>::namespaced(client.clone(), ns)
        .get("db")
        .await
        .expect("db");
    let templates = sts
        .spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.clone());
    let class = templates
        .and_then(|t| t.into_iter().next())
        .and_then(|t| t.spec)
        .and_then(|s| s.storage_class_name);
    (class, sts.metadata.uid.unwrap_or_default())
}

/// A StatefulSet's claim keeps its name, so its pod comes back on the new
/// volume; the plan says the template still names the old class.
#[tokio::test(flavor = "multi_thread")]
async fn a_stateful_set_replica_claim_cuts_over() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_dir = stateful_app(&client, &ns).await;

    let args = [
        "migrate",
        "data-db-0",
        "--to-storage-class",
        "local",
        "--cutover",
    ];
    let plan = volmig(&env, &[&args[..], &["--dry-run"]].concat()).await;
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    assert!(
        plan.stdout.contains("StatefulSet db (scale 1 -> 0"),
        "{}",
        plan.stdout
    );
    assert!(
        plan.stdout
            .contains("volumeClaimTemplates still name the old class"),
        "{}",
        plan.stdout
    );
    let (class_before, uid_before) = template_class(&client, &ns).await;
    let run = volmig(&env, &[&args[..], &["-o", "json"]].concat()).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(cutover_of(&vm).step, Step::AwaitingCommit);
    let claim = claim_of(&client, &ns, "data-db-0").await;
    let new = volume(&client, &bound_volume(&claim))
        .await
        .expect("new volume");
    assert_eq!(
        new.spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref()),
        Some("local")
    );
    await_running(&client, &ns, "db").await;
    let before = sequence(&old_dir);
    let new_dir = volume_dir(&client, &ns, "data-db-0").await;
    let after = await_sequence_past(&new_dir, before.len() + 10).await;
    assert_gapless(&after, "the StatefulSet's new volume");
    assert_eq!(&after[..before.len()], &before[..]);
    let _ = operation(&client, &ns).await;
    // Without --update-owner the StatefulSet is the same object.
    assert_eq!(
        template_class(&client, &ns).await,
        (class_before, uid_before)
    );
}

/// With --update-owner the StatefulSet is made again with the new class in
/// its claim template (new replicas get it); rollback makes it again with
/// the old one.
#[tokio::test(flavor = "multi_thread")]
async fn update_owner_gives_the_stateful_set_the_new_class_and_rollback_takes_it_back() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_dir = stateful_app(&client, &ns).await;
    let (class_before, uid_before) = template_class(&client, &ns).await;
    let args = [
        "migrate",
        "data-db-0",
        "--to-storage-class",
        "local",
        "--cutover",
        "--update-owner",
    ];
    let plan = volmig(&env, &[&args[..], &["--dry-run"]].concat()).await;
    assert!(
        plan.stdout
            .contains("StatefulSet db re-created with the new class"),
        "{}",
        plan.stdout
    );
    let run = volmig(&env, &[&args[..], &["-o", "json"]].concat()).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    let owner = cutover_of(&vm)
        .owner
        .clone()
        .expect("the update is recorded");
    assert_eq!(owner.to_class.as_deref(), Some("local"));
    let (class, uid) = template_class(&client, &ns).await;
    assert_eq!(class.as_deref(), Some("local"));
    assert_ne!(uid, uid_before, "made again");
    await_running(&client, &ns, "db").await;
    let new_dir = volume_dir(&client, &ns, "data-db-0").await;
    let before = sequence(&old_dir);
    await_sequence_past(&new_dir, before.len() + 10).await;

    let run = volmig(&env, &["rollback", &vm.metadata.name, "-o", "json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(template_class(&client, &ns).await.0, class_before);
    await_running(&client, &ns, "db").await;
    let on_new = sequence(&new_dir);
    let after = await_sequence_past(&old_dir, on_new.len() + 5).await;
    assert_gapless(&after, "the StatefulSet's old volume after the rollback");
    assert_eq!(&after[..on_new.len()], &on_new[..]);
    // --update-owner for a claim no StatefulSet made is refused.
    user_claim(&client, &ns, "plain").await;
    let run = volmig(
        &env,
        &[
            "migrate",
            "plain",
            "--cutover",
            "--update-owner",
            "--to-storage-class",
            "local",
        ],
    )
    .await;
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.contains("--update-owner: no StatefulSet"),
        "{}",
        run.stderr
    );
}

/// `abort` once the app is stopped means rollback; `rollback
/// --discard-new-writes --delete-new` after success goes back without the
/// new writes and removes the new volume.
#[tokio::test(flavor = "multi_thread")]
async fn abort_after_the_stop_rolls_back_and_delete_new_removes_the_new_volume() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_dir = running_app(&client, &ns, "data1", "app1").await;
    let old_volume = bound_volume(&claim_of(&client, &ns, "data1").await);
    let run = cutover(
        &env,
        &[(volmig::driver::cutover::CRASH_AT, "step:FinalSync")],
        "data1",
        &[],
    )
    .await;
    assert!(run.stderr.contains("crash point"), "{}", run.stderr);
    assert_eq!(
        replicas(&client, &ns, "app1").await,
        0,
        "the app is stopped"
    );
    let op = operation(&client, &ns).await.metadata.name;
    let run = volmig(&env, &["abort", &op]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("aborting means rolling back"),
        "{}",
        run.stderr
    );
    let vm = operation(&client, &ns).await;
    assert_eq!(
        vm.status.phase,
        Phase::RolledBack,
        "{:?}",
        vm.status.message
    );
    assert_eq!(
        bound_volume(&claim_of(&client, &ns, "data1").await),
        old_volume
    );
    await_running(&client, &ns, "app1").await;
    let before = sequence(&old_dir).len();
    assert_gapless(
        &await_sequence_past(&old_dir, before + 5).await,
        "after abort",
    );

    let old_dir = running_app(&client, &ns, "data2", "app2").await;
    let old_volume = bound_volume(&claim_of(&client, &ns, "data2").await);
    let run = cutover(&env, &[], "data2", &["-o", "json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation().metadata.name;
    let new_volume = bound_volume(&claim_of(&client, &ns, "data2").await);
    await_running(&client, &ns, "app2").await;
    let run = volmig(
        &env,
        &[
            "rollback",
            &op,
            "--discard-new-writes",
            "--delete-new",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = cutover_of(&run.operation())
        .rollback
        .clone()
        .expect("rollback");
    assert!(!r.sync_back && r.delete_new, "{r:?}");
    assert_eq!(
        bound_volume(&claim_of(&client, &ns, "data2").await),
        old_volume
    );
    wait_until("the new volume deleted", || async {
        volume(&client, &new_volume).await.is_none().then_some(())
    })
    .await;
    await_running(&client, &ns, "app2").await;
    let before = sequence(&old_dir).len();
    assert_gapless(
        &await_sequence_past(&old_dir, before + 5).await,
        "after the rollback",
    );
}
