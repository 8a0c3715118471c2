//! Several claims in one operation: a storage class across two namespaces
//! two at a time; one claim whose sender keeps dying fails on its own
//! budget while the others finish, and `resume` finishes it alone; at most
//! `--per-node` movers on a node.

mod common;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::{json, Value};

use common::{claim, env, manifest, object, seed, volume_dir, MOVER_IMAGE};
use volmig::names::{pod_name, Component};
use volmig::record::group::MigrationGroup;
use volmig::record::store::{GroupStore, RecordStore};
use volmig::record::{AttemptPhase, VolumeMigration};

const MIB: usize = 1024 * 1024;

async fn namespace(client: &Client, name: &str) {
    let ns: Namespace = object(json!({"metadata": {"name": name}}));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
}

/// The set's head in `ns`, once `migrate` has recorded it.
async fn head(client: &Client, ns: &str) -> MigrationGroup {
    common::wait_until("the set's record", || async {
        let heads = GroupStore::new(client.clone(), ns).list().await.ok()?;
        heads.into_iter().next()
    })
    .await
}

/// The most attempts of `claims` that ran at one time, from their
/// recorded start and end.
fn most_at_once(claims: &[VolumeMigration]) -> usize {
    let spans: Vec<(jiff::Timestamp, jiff::Timestamp)> = claims
        .iter()
        .flat_map(|vm| &vm.status.attempts)
        .map(|a| (a.start_time.expect("start"), a.end_time.expect("end")))
        .collect();
    spans
        .iter()
        .map(|(start, _)| {
            spans
                .iter()
                .filter(|(s, e)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The claims' records a set's JSON lists, each read back from its store.
async fn claims_of(client: &Client, set: &Value) -> Vec<VolumeMigration> {
    let mut out = Vec::new();
    for c in set["spec"]["claims"].as_array().expect("claims") {
        let ns = c["destination"]["namespace"].as_str().expect("namespace");
        let op = c["operation"].as_str().expect("operation");
        let vm = RecordStore::new(client.clone(), ns)
            .get(op)
            .await
            .expect("claim's record");
        out.push(vm);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_storage_class_across_namespaces_moves_two_claims_at_a_time() {
    let env = env().await;
    let client = env.client().await;
    namespace(&client, "team-b").await;
    let mut sources = Vec::new();
    for (ns, name) in [
        ("default", "a"),
        ("default", "b"),
        ("team-b", "c"),
        ("team-b", "d"),
    ] {
        claim(&client, ns, name, "ReadWriteOnce", "1Gi").await;
        let dir = volume_dir(&client, ns, name).await;
        seed(&dir, 6, MIB / 2);
        sources.push((ns, name, dir));
    }
    let select = ["migrate", "--from-storage-class", "standard", "-A"];
    // The plan first: every claim with its consumers and destination, or
    // why it is refused; nothing is created.
    let dry = [&select[..], &["--dry-run", "-o", "json"]].concat();
    let plan = common::volmig(&env, &dry).await;
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let plan: Value = serde_json::from_str(&plan.stdout).expect("JSON");
    assert_eq!(plan["kind"], "VolumeMigrationPlan");
    let planned = plan["claims"].as_array().expect("claims");
    let listed: Vec<String> = planned
        .iter()
        .map(|c| {
            format!(
                "{}/{}",
                c["source"]["namespace"].as_str().unwrap_or(""),
                c["source"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(listed, ["default/a", "default/b", "team-b/c", "team-b/d"]);
    assert_eq!(planned[2]["destination"]["name"], "c-migrated");
    assert_eq!(planned[2]["source"]["storageClass"], "standard");
    let refused = common::volmig(&env, &[&dry[..], &["--to-node", "nowhere"]].concat()).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    let refused: Value = serde_json::from_str(&refused.stdout).expect("JSON");
    for c in refused["claims"].as_array().expect("claims") {
        let why = c["refused"].as_str().expect("each claim refused");
        assert!(why.contains("nowhere"), "{why}");
    }
    for ns in ["default", "team-b"] {
        assert!(
            common::records(&client, ns).await.is_empty(),
            "a dry run made a record in {ns}"
        );
    }

    let run = common::volmig(
        &env,
        &[
            &select[..],
            &[
                "--parallel",
                "2",
                "--mover-image",
                MOVER_IMAGE,
                "-o",
                "json",
            ],
        ]
        .concat(),
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let set: Value = serde_json::from_str(&run.stdout).expect("one JSON object");
    assert_eq!(set["apiVersion"], "volmig.io/v1alpha2");
    assert_eq!(set["kind"], "VolumeMigration");
    assert_eq!(set["status"]["phase"], "Succeeded", "{}", run.stderr);
    assert_eq!(set["spec"]["selection"]["by"], "storageClass");
    let statuses = set["status"]["claims"].as_array().expect("claims");
    assert_eq!(statuses.len(), 4, "{set:#}");
    assert!(
        statuses.iter().all(|c| c["phase"] == "Succeeded"),
        "{set:#}"
    );
    let total = &set["status"]["progress"];
    assert_eq!(total["bytesDone"], total["bytesTotal"]);
    // The set's total is its claims' (each 3 MiB of files).
    let sum: u64 = statuses
        .iter()
        .map(|c| {
            c["progress"]["bytesTotal"]
                .as_u64()
                .expect("a claim's total")
        })
        .sum();
    assert_eq!(total["bytesTotal"], json!(sum), "{total}");
    assert!(sum >= 4 * 3 * MIB as u64, "{total}");
    for (ns, name, dir) in &sources {
        let dst = volume_dir(&client, ns, &format!("{name}-migrated")).await;
        assert_eq!(manifest(&dst), manifest(dir), "{ns}/{name}");
    }
    let claims = claims_of(&client, &set).await;
    assert!(most_at_once(&claims) <= 2, "{claims:#?}");
    // The table: the set's row, then each claim's.
    let table = common::volmig(&env, &["status", "-A"]).await;
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(
        table
            .stdout
            .contains("storage class standard, all namespaces (4 claims)"),
        "{}",
        table.stdout
    );
    let op = set["metadata"]["name"].as_str().expect("name");
    let detail = common::volmig(&env, &["status", op]).await;
    assert!(detail.stdout.contains("4 Succeeded"), "{}", detail.stdout);
    assert!(detail.stdout.contains("team-b/c"), "{}", detail.stdout);
    let gone = common::volmig(&env, &["cleanup", op]).await;
    assert_eq!(gone.code, 0, "{}", gone.stderr);
    for ns in ["default", "team-b"] {
        assert!(
            common::records(&client, ns).await.is_empty(),
            "records left in {ns}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_that_keeps_failing_fails_alone_and_resume_finishes_only_it() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let mut dirs = Vec::new();
    for (name, files) in [("a", 2), ("b", 24), ("c", 2)] {
        claim(&client, &ns, name, "ReadWriteOnce", "1Gi").await;
        let dir = volume_dir(&client, &ns, name).await;
        seed(&dir, files, MIB);
        dirs.push((name, dir));
    }
    let child = common::spawn_volmig(
        &env,
        &[
            "migrate",
            "a",
            "b",
            "c",
            "--parallel",
            "3",
            "--bwlimit",
            "4M",
            "--backoff-limit",
            "1",
            "--backoff",
            "1",
            "--mover-image",
            MOVER_IMAGE,
        ],
    );
    let set = head(&client, &ns).await;
    let b = set.member("b").expect("claim b").operation.clone();
    for attempt in 1..=2 {
        common::await_progress(&client, &ns, &b, attempt, 2 * MIB as u64).await;
        let sender = pod_name(&b, Component::Sender, attempt);
        assert!(common::kill_pod_process(&sender), "no process for {sender}");
    }
    let run = common::finish(child).await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(run.stdout.contains("1 Failed"), "{}", run.stdout);
    let record = |op: String| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            RecordStore::new(client, &ns)
                .get(&op)
                .await
                .expect("record")
        }
    };
    let op_of = |name: &str| set.member(name).expect("member").operation.clone();
    for name in ["a", "c"] {
        let vm = record(op_of(name)).await;
        assert_eq!(
            vm.status.attempts.len(),
            1,
            "{name}: {:#?}",
            vm.status.attempts
        );
        assert_eq!(vm.status.attempts[0].phase, AttemptPhase::Succeeded);
    }
    let failed = record(b.clone()).await;
    assert_eq!(failed.status.attempts.len(), 2);
    assert!(failed
        .status
        .attempts
        .iter()
        .all(|a| a.phase == AttemptPhase::Failed));

    let resumed = common::volmig(&env, &["resume", &set.metadata.name, "-o", "json"]).await;
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let view: Value = serde_json::from_str(&resumed.stdout).expect("JSON");
    assert_eq!(view["status"]["phase"], "Succeeded", "{view:#}");
    for name in ["a", "c"] {
        assert_eq!(
            record(op_of(name)).await.status.attempts.len(),
            1,
            "{name} ran again"
        );
    }
    let done = record(b).await;
    assert_eq!(done.status.attempts.len(), 3);
    assert_eq!(done.status.budget_from, Some(3));
    for (name, dir) in &dirs {
        let dst = volume_dir(&client, &ns, &format!("{name}-migrated")).await;
        assert_eq!(manifest(&dst), manifest(dir), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn per_node_caps_the_movers_on_a_node() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let names = ["p", "q", "r", "s"];
    for name in names {
        claim(&client, &ns, name, "ReadWriteOnce", "1Gi").await;
        seed(&volume_dir(&client, &ns, name).await, 4, MIB);
    }
    // Every receiver on node-1: with two places there, at most two
    // claims copy at once, whatever --parallel says.
    let mut args = vec!["migrate"];
    args.extend(names);
    args.extend([
        "--to-node",
        "node-1",
        "--parallel",
        "4",
        "--per-node",
        "2",
        "--bwlimit",
        "4M",
        "--mover-image",
        MOVER_IMAGE,
        "-o",
        "json",
    ]);
    let run = common::volmig(&env, &args).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let set: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(set["status"]["phase"], "Succeeded");
    let claims = claims_of(&client, &set).await;
    for vm in &claims {
        let a = vm.status.attempts.last().expect("an attempt");
        assert_eq!(a.receiver.node.as_deref(), Some("node-1"), "{a:#?}");
    }
    assert!(most_at_once(&claims) <= 2, "{claims:#?}");
}

/// `abort` of a set stops every claim (the driving client exits 4 and the
/// set says Aborted), and `resume` of the set finishes them from their
/// checkpoints.
#[tokio::test(flavor = "multi_thread")]
async fn an_aborted_set_stops_whole_and_resumes_whole() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let mut dirs = Vec::new();
    for name in ["x", "y"] {
        claim(&client, &ns, name, "ReadWriteOnce", "1Gi").await;
        let dir = volume_dir(&client, &ns, name).await;
        seed(&dir, 16, MIB);
        dirs.push((name, dir));
    }
    let child = common::spawn_volmig(
        &env,
        &[
            "migrate",
            "x",
            "y",
            "--bwlimit",
            "2M",
            "--mover-image",
            MOVER_IMAGE,
        ],
    );
    let set = head(&client, &ns).await;
    let x = set.member("x").expect("claim x").operation.clone();
    common::await_progress(&client, &ns, &x, 1, 2 * MIB as u64).await;
    let abort = common::volmig(&env, &["abort", &set.metadata.name]).await;
    assert_eq!(abort.code, 0, "{}", abort.stderr);
    let run = common::finish(child).await;
    assert_eq!(run.code, 4, "{}\n{}", run.stdout, run.stderr);
    let status = common::volmig(&env, &["status", &set.metadata.name, "-o", "json"]).await;
    let view: Value = serde_json::from_str(&status.stdout).expect("JSON");
    assert_eq!(view["status"]["phase"], "Aborted", "{view:#}");
    assert!(view["status"]["abortedBy"].is_string(), "{view:#}");
    let resumed = common::volmig(&env, &["resume", &set.metadata.name, "-o", "json"]).await;
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let view: Value = serde_json::from_str(&resumed.stdout).expect("JSON");
    assert_eq!(view["status"]["phase"], "Succeeded", "{view:#}");
    for (name, dir) in &dirs {
        let dst = volume_dir(&client, &ns, &format!("{name}-migrated")).await;
        assert_eq!(manifest(&dst), manifest(dir), "{name}");
    }
    // A claim of a set is driven with its set, not alone.
    let alone = common::volmig(&env, &["resume", &x]).await;
    assert_eq!(
        alone.code, 0,
        "a copy's claim may be resumed alone: {}",
        alone.stderr
    );
}
