//! A StatefulSet's replicas cut over together: one stop of the app for
//! the whole set, every replica's sequence gapless, the claim template
//! made again once with the new class (a scale-up gets it), and the whole
//! set rolled back as one.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use common::app::{
    assert_gapless, await_replicas, await_sequence_past, sequence, sequence_stateful_set,
};
use common::{env, volume_dir, wait_until};
use volmig::record::cutover::{PassKind, Step};
use volmig::record::store::RecordStore;

const REPLICAS: usize = 3;

/// StatefulSet `db` of three replicas, each writing the sequence on its
/// claim `data-db-N` (class `standard`); each claim's directory.
async fn replicated_app(client: &Client, ns: &str) -> Vec<std::path::PathBuf> {
    sequence_stateful_set(client, ns, REPLICAS).await;
    let mut dirs = Vec::new();
    for i in 0..REPLICAS {
        let dir = volume_dir(client, ns, &format!("data-db-{i}")).await;
        await_sequence_past(&dir, 20).await;
        dirs.push(dir);
    }
    dirs
}

async fn running_replicas(client: &Client, ns: &str, n: usize) {
    await_replicas(client, ns, "db", n).await;
}

/// The class of claim `name`'s volume.
async fn class_of(client: &Client, ns: &str, name: &str) -> Option<String> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let volume = claims.get(name).await.ok()?.spec?.volume_name?;
    let volumes: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client.clone());
    volumes.get(&volume).await.ok()?.spec?.storage_class_name
}

/// The class `db`'s claim template names.
async fn template_class(client: &Client, ns: &str) -> Option<String> {
    let sts = Api::<StatefulSet>::namespaced(client.clone(), ns)
        .get("db")
        .await
        .expect("db");
    let template = sts.spec?.volume_claim_templates?.into_iter().next()?;
    template.spec?.storage_class_name
}

/// Watches the app while the set moves: how many times it went down, and
/// any look that found a pod of it running while a claim was in its
/// final sync or swap (read before and after looking at the pods).
fn watch_app(
    client: Client,
    ns: String,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(usize, Vec<String>)> {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let store = RecordStore::new(client.clone(), &ns);
        let moving = || async {
            let records = store.list().await.unwrap_or_default();
            records
                .iter()
                .filter_map(|r| r.status.cutover.as_ref())
                .any(|c| matches!(c.step, Step::FinalSync | Step::Swap))
        };
        let (mut downs, mut wrong, mut was_up) = (0, Vec::new(), true);
        while !stop.load(Ordering::Relaxed) {
            let before = moving().await;
            let running: Vec<String> = pods
                .list(&ListParams::default().labels("app=db"))
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter_map(|p| p.metadata.name)
                .collect();
            let after = moving().await;
            if before && after && !running.is_empty() {
                wrong.push(format!("{running:?} ran during a final sync or swap"));
            }
            let up = !running.is_empty();
            if was_up && !up {
                downs += 1;
            }
            was_up = up;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (downs, wrong)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_statefulsets_replicas_cut_over_together_and_roll_back_together() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_dirs = replicated_app(&client, &ns).await;
    let class_before = template_class(&client, &ns).await;

    let args = [
        "migrate",
        "--workload",
        "statefulset/db",
        "--to-storage-class",
        "local",
        "--cutover",
        "--update-owner",
    ];
    let plan = common::volmig(&env, &[&args[..], &["--dry-run"]].concat()).await;
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    assert!(
        plan.stdout
            .contains("one stop of StatefulSet db (3 -> 0 -> 3)"),
        "{}",
        plan.stdout
    );
    for i in 0..REPLICAS {
        assert!(
            plan.stdout.contains(&format!("default/data-db-{i}  ")),
            "{}",
            plan.stdout
        );
    }

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_app(client.clone(), ns.clone(), stop.clone());
    let run = common::volmig(&env, &[&args[..], &["-o", "json"]].concat()).await;
    stop.store(true, Ordering::Relaxed);
    let (downs, wrong) = watcher.await.expect("watcher");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let set: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(set["status"]["phase"], "Succeeded", "{set:#}");
    assert!(wrong.is_empty(), "{wrong:?}");
    assert_eq!(downs, 1, "the app went down {downs} times");
    for i in 0..REPLICAS {
        let claim = format!("data-db-{i}");
        assert_eq!(
            class_of(&client, &ns, &claim).await.as_deref(),
            Some("local"),
            "{claim}"
        );
    }
    assert_eq!(template_class(&client, &ns).await.as_deref(), Some("local"));
    running_replicas(&client, &ns, REPLICAS).await;
    let mut on_new = Vec::new();
    for (i, old) in old_dirs.iter().enumerate() {
        let before = sequence(old);
        let new_dir = volume_dir(&client, &ns, &format!("data-db-{i}")).await;
        let after = await_sequence_past(&new_dir, before.len() + 10).await;
        assert_gapless(&after, &format!("replica {i} on its new volume"));
        assert_eq!(&after[..before.len()], &before[..], "replica {i}");
        on_new.push(new_dir);
    }
    // A new replica gets the template's new class.
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    sts.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": REPLICAS + 1}})),
    )
    .await
    .expect("scale up");
    running_replicas(&client, &ns, REPLICAS + 1).await;
    let fourth = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
        .get("data-db-3")
        .await
        .expect("the new replica's claim");
    let class = fourth.spec.and_then(|s| s.storage_class_name);
    assert_eq!(class.as_deref(), Some("local"));
    sts.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": REPLICAS}})),
    )
    .await
    .expect("scale down");
    running_replicas(&client, &ns, REPLICAS).await;

    // The whole set goes back, with what the app wrote since; one claim
    // of it alone does not.
    let op = set["metadata"]["name"].as_str().expect("name");
    let one = format!("{op}-0");
    let alone = common::volmig(&env, &["rollback", &one]).await;
    assert_ne!(alone.code, 0, "{}", alone.stdout);
    assert!(
        alone.stderr.contains("which moves as one"),
        "{}",
        alone.stderr
    );
    let back = common::volmig(&env, &["rollback", op, "-o", "json"]).await;
    assert_eq!(back.code, 0, "{}", back.stderr);
    let rolled: Value = serde_json::from_str(&back.stdout).expect("JSON");
    assert_eq!(rolled["status"]["phase"], "RolledBack", "{rolled:#}");
    assert_eq!(template_class(&client, &ns).await, class_before);
    running_replicas(&client, &ns, REPLICAS).await;
    for (i, old) in old_dirs.iter().enumerate() {
        let claim = format!("data-db-{i}");
        assert_eq!(
            class_of(&client, &ns, &claim).await.as_deref(),
            Some("standard")
        );
        let written = sequence(&on_new[i]);
        let after = await_sequence_past(old, written.len() + 5).await;
        assert_gapless(&after, &format!("replica {i} back on its old volume"));
        assert_eq!(&after[..written.len()], &written[..], "replica {i}");
    }
}

/// A claim whose final sync fails takes the whole set back by itself: the
/// others had verified and waited, nobody left an old volume, and the app
/// runs on the old volumes with every write kept (exit 5).
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_final_sync_rolls_the_whole_set_back_by_itself() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_dirs = replicated_app(&client, &ns).await;
    let child = common::spawn_volmig(
        &env,
        &[
            "migrate",
            "--workload",
            "statefulset/db",
            "--to-storage-class",
            "local",
            "--cutover",
            "--precopy-rounds",
            "1",
            "--backoff-limit",
            "0",
            "--bwlimit",
            "4M",
        ],
    );
    // Once replica 2's pre-copy is done (its claim at Quiesce, the app
    // being stopped), 24 MiB more on its old volume: its final sync, at
    // 4 MiB/s, is sure to run for seconds when its sender is killed.
    let store = RecordStore::new(client.clone(), &ns);
    let grown = Arc::new(AtomicBool::new(false));
    let killed = wait_until("replica 2's final sync to start", || {
        let (store, dir, grown) = (store.clone(), old_dirs[2].clone(), grown.clone());
        async move {
            let records = store.list().await.ok()?;
            let vm = records
                .into_iter()
                .find(|r| r.spec.source.name == "data-db-2")?;
            let c = vm.status.cutover?;
            if c.step != Step::PreCopy && !grown.swap(true, Ordering::Relaxed) {
                common::seed(&dir.join("late"), 6, 4 * 1024 * 1024);
            }
            let pass = c.pass.filter(|p| p.kind == PassKind::FinalSync)?;
            let sender = volmig::names::pod_name(
                &vm.metadata.name,
                volmig::names::Component::Sender,
                pass.first_attempt,
            );
            common::kill_pod_process(&sender).then_some(sender)
        }
    })
    .await;
    let run = common::finish(child).await;
    assert_eq!(
        run.code, 5,
        "killed {killed}; {}\n{}",
        run.stdout, run.stderr
    );
    assert!(run.stdout.contains("3 RolledBack"), "{}", run.stdout);
    running_replicas(&client, &ns, REPLICAS).await;
    for (i, old) in old_dirs.iter().enumerate() {
        let claim = format!("data-db-{i}");
        assert_eq!(
            volume_dir(&client, &ns, &claim).await,
            *old,
            "{claim} is on its old volume"
        );
        let before = sequence(old);
        let after = await_sequence_past(old, before.len() + 5).await;
        assert_gapless(&after, &format!("replica {i} after the rollback"));
    }
}

/// The client dies as the first claim enters its swap (the others waiting
/// at the barrier): `resume` of the set finishes every claim, and the app,
/// down meanwhile, comes back on the new volumes with every write kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_set_killed_at_the_swap_is_finished_by_resume() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_dirs = replicated_app(&client, &ns).await;
    let crash = [(volmig::driver::cutover::CRASH_AT, "step:Swap")];
    let args = [
        "migrate",
        "--workload",
        "statefulset/db",
        "--to-storage-class",
        "local",
        "--cutover",
    ];
    let run = common::volmig_with(&env, &crash, &args).await;
    assert_ne!(
        run.code, 0,
        "the crash point was not reached: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains("crash point step:Swap"),
        "{}",
        run.stderr
    );
    let set = common::wait_until("the set's record", || async {
        let heads = volmig::record::store::GroupStore::new(client.clone(), &ns)
            .list()
            .await
            .ok()?;
        heads.into_iter().next()
    })
    .await;
    let resumed = common::volmig(&env, &["resume", &set.metadata.name, "-o", "json"]).await;
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let view: Value = serde_json::from_str(&resumed.stdout).expect("JSON");
    assert_eq!(view["status"]["phase"], "Succeeded", "{view:#}");
    running_replicas(&client, &ns, REPLICAS).await;
    for (i, old) in old_dirs.iter().enumerate() {
        let claim = format!("data-db-{i}");
        assert_eq!(
            class_of(&client, &ns, &claim).await.as_deref(),
            Some("local"),
            "{claim}"
        );
        let before = sequence(old);
        let new_dir = volume_dir(&client, &ns, &claim).await;
        let after = await_sequence_past(&new_dir, before.len() + 5).await;
        assert_gapless(&after, &format!("replica {i} after resume"));
        assert_eq!(&after[..before.len()], &before[..], "replica {i}");
    }
}
