//! `kubectl volmig migrate` end to end: a claim with a few hundred files to
//! another storage class, through kubectl's plugin discovery; a dry run.

mod common;

use common::{
    claim, env, env_from_release, everything_volmig_made, leftovers, manifest, records, seed,
    volmig_binary, volume_dir, Env, MOVER_IMAGE,
};
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use volmig::record::{AttemptPhase, Phase};

/// Runs `kubectl volmig ARGS` (plugin discovery: the binary's directory is
/// first on PATH).
async fn kubectl_volmig(env: &Env, args: &[&str]) -> common::Run {
    let dir = common::volmig_binary().parent().expect("dir").to_path_buf();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let child = tokio::process::Command::new(kubectl)
        .env("PATH", path)
        .env("KUBECONFIG", &env.kubeconfig)
        .arg("volmig")
        .args(["-n", &env.namespace])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl runs");
    common::finish(child).await
}

/// The happy path, with the mover pods running the release's image.
#[tokio::test(flavor = "multi_thread")]
async fn migrate_to_another_storage_class() {
    let env = env_from_release().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    seed(&src, 300, 3000);

    let run = kubectl_volmig(
        &env,
        &[
            "migrate",
            "data",
            "--to",
            "data-local",
            "--to-storage-class",
            "local",
            "--mover-image",
            MOVER_IMAGE,
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation();
    assert_eq!(op.kind, "VolumeMigration");
    assert_eq!(op.status.phase, Phase::Succeeded, "{:?}", op.status.message);
    assert_eq!(op.status.attempts.len(), 1);
    assert_eq!(op.status.attempts[0].phase, AttemptPhase::Succeeded);
    let summary = op.status.summary.as_ref().expect("summary");
    assert_eq!(summary.files, 300);
    // The copy and the verification count the same entries (the root is
    // not one): 300 files in 10 directories, an empty one and a symlink.
    assert_eq!(summary.entries, 312, "{summary:?}");
    assert_eq!(summary.verified_entries, Some(312), "{summary:?}");

    // The destination: bound to a new volume of the other class, the same tree.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let dest = claims.get("data-local").await.expect("destination claim");
    let volume = dest.spec.and_then(|s| s.volume_name).expect("bound");
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(&volume)
        .await
        .expect("pv");
    assert_eq!(
        pv.spec.and_then(|s| s.storage_class_name).as_deref(),
        Some("local")
    );
    let dst = volume_dir(&client, &ns, "data-local").await;
    assert_eq!(manifest(&dst), manifest(&src));
    assert_eq!(manifest(&src).len(), 300 + 10 + 2);

    // Nothing left but the claim and the record; the record says the same.
    assert_eq!(leftovers(&client, &ns).await, Vec::<String>::new());
    let recorded = records(&client, &ns).await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].status.phase, Phase::Succeeded);
    assert_eq!(recorded[0].status.attempts.len(), 1);
    let status = kubectl_volmig(&env, &["status"]).await;
    assert!(
        status.stdout.contains(&op.metadata.name) && status.stdout.contains("Succeeded"),
        "{}",
        status.stdout
    );

    // `kubectl volmig status <TAB>` offers the operation (kubectl runs
    // kubectl_complete-volmig, which asks `__complete`).
    let completed = tokio::process::Command::new(volmig_binary())
        .arg("__complete")
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args(["-n", &ns, "status", ""])
        .output()
        .await
        .expect("kubectl-volmig runs");
    let offered = String::from_utf8_lossy(&completed.stdout);
    assert!(
        offered
            .lines()
            .any(|l| l == format!("{}\tSucceeded", op.metadata.name)),
        "{offered}"
    );

    // `kubectl describe pvc` tells the story on both claims.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let events = events
        .list(&Default::default())
        .await
        .expect("events")
        .items;
    // The movers ran from the image: the kubelet pulled it for each pod.
    if env.sandbox.is_some() {
        let pulled: Vec<&str> = events
            .iter()
            .filter(|e| e.reason.as_deref() == Some("Pulled"))
            .filter_map(|e| e.involved_object.name.as_deref())
            .collect();
        assert!(
            pulled.iter().any(|p| p.ends_with("-sender-1"))
                && pulled.iter().any(|p| p.ends_with("-receiver-1")),
            "{pulled:?}"
        );
    }
    for claim in ["data", "data-local"] {
        let reasons: Vec<&str> = events
            .iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(claim))
            .filter_map(|e| e.reason.as_deref())
            .collect();
        assert!(
            reasons.contains(&"MigrationStarted") && reasons.contains(&"MigrationSucceeded"),
            "{claim}: {reasons:?}"
        );
    }

    // One side's log has its header too, like both sides' together.
    let logs = kubectl_volmig(&env, &["logs", &op.metadata.name, "--role", "sender"]).await;
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    let sender = format!(
        "==> sender volmig-{}-sender-1 (attempt 1) <==",
        op.metadata.name
    );
    assert!(logs.stdout.starts_with(&sender), "{}", logs.stdout);

    // cleanup takes the record too, and keeps the destination; it says so
    // on stdout, as the command's result.
    let run = kubectl_volmig(&env, &["cleanup", &op.metadata.name]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with(&format!("removed operation {}", op.metadata.name)),
        "stdout: {}\nstderr: {}",
        run.stdout,
        run.stderr
    );
    assert!(records(&client, &ns).await.is_empty());
    assert!(claims.get_opt("data-local").await.expect("get").is_some());
    assert_eq!(manifest(&dst), manifest(&src));
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_prints_the_objects_and_creates_none() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;

    let run = common::volmig(&env, &["migrate", "data", "--dry-run", "-o", "yaml"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let list: serde_json::Value = serde_saphyr::from_str(&run.stdout).expect("YAML");
    assert_eq!(list["kind"], "List");
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["kind"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "PersistentVolumeClaim",
            "Secret",
            "Service",
            "Pod",
            "Pod"
        ]
    );
    assert!(
        !run.stdout.contains("BEGIN"),
        "key material printed:\n{}",
        run.stdout
    );
    assert_eq!(
        everything_volmig_made(&client, &ns).await,
        Vec::<String>::new()
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    assert!(claims
        .get_opt("data-migrated")
        .await
        .expect("get")
        .is_none());
}

/// The app rewrites a file after it was copied: the operation ends Succeeded in one attempt,
/// with a warning that names the file, and the destination holds the version sent. (A
/// destination that does not hold what was sent still fails: the mover's `verify` tests and
/// the driver's verdict tests.)
#[tokio::test(flavor = "multi_thread")]
async fn a_source_written_during_the_copy_ends_succeeded_with_a_warning() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "live", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "live").await;
    // a.txt is sent first; 8 MiB behind it at 2 MiB/s keep the copy going for seconds.
    std::fs::write(src.join("a.txt"), b"version one\n").expect("a.txt");
    seed(&src, 1, 8 << 20);

    let child = common::spawn_volmig(
        &env,
        &[
            "migrate",
            "live",
            "--to",
            "live-copy",
            "--bwlimit",
            "2M",
            "--mover-image",
            MOVER_IMAGE,
            "-o",
            "json",
        ],
    );
    let dst = common::wait_until("the destination volume", || async {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
        let bound = claims.get_opt("live-copy").await.ok().flatten()?;
        bound.spec?.volume_name?;
        Some(volume_dir(&client, &ns, "live-copy").await)
    })
    .await;
    common::wait_until("a.txt at the destination", || async {
        dst.join("a.txt").is_file().then_some(())
    })
    .await;
    std::fs::write(src.join("a.txt"), b"version two, longer\n").expect("a.txt again");

    let run = common::finish(child).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation();
    assert_eq!(op.status.phase, Phase::Succeeded, "{:?}", op.status.message);
    assert_eq!(
        op.status.attempts.len(),
        1,
        "not retried: {:?}",
        op.status.attempts
    );
    let reason = op.status.attempts[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("changed during the copy"), "{reason}");
    let summary = op.status.summary.as_ref().expect("summary");
    assert!(summary.changed >= 1, "{summary:?}");
    assert!(
        summary.changed_paths.iter().any(|p| p == "a.txt"),
        "{summary:?}"
    );
    assert_eq!(
        std::fs::read(dst.join("a.txt")).expect("copied a.txt"),
        b"version one\n"
    );
    let status = common::volmig(&env, &["status", &op.metadata.name]).await;
    assert!(
        status.stdout.contains("changed during the copy (a.txt"),
        "{}",
        status.stdout
    );
}

/// An operation cleaned up mid-copy leaves its checkpoint and partial files in the
/// destination claim; a new operation into that claim ends with exactly the source's tree:
/// no `.volmig` state, no `.volmig-*.tmp` file (issue 25, finding 1).
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_abandoned_mid_way_leaves_nothing_in_the_next_one() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    // 12 MiB at 2 MiB/s: still copying when it is cleaned up.
    seed(&src, 48, 256 << 10);
    let args = [
        "migrate",
        "data",
        "--to",
        "twin",
        "--bwlimit",
        "2M",
        "--mover-image",
        MOVER_IMAGE,
    ];
    let (child, op) = common::start_moving(&env, &client, &args, 2 << 20).await;
    common::kill(child).await;
    let cleanup = common::volmig(&env, &["cleanup", &op, "--force"]).await;
    assert_eq!(cleanup.code, 0, "{}", cleanup.stderr);
    let dst = volume_dir(&client, &ns, "twin").await;
    // The receiver stopped with files in flight and finished ones waiting for their commit
    // group: their temporary files stay, named by its checkpoint.
    let temps = manifest(&dst)
        .into_keys()
        .filter(|k| k.contains(".volmig-"))
        .count();
    assert!(
        dst.join(".volmig").exists() && temps > 0,
        "the abandoned copy left no checkpoint or partial file ({temps}): the test proves nothing"
    );

    // Copies into the same claim, as a user would run them again.
    let into_twin = [
        "migrate",
        "data",
        "--to",
        "twin",
        "--reuse",
        "--mover-image",
        MOVER_IMAGE,
        "-o",
        "json",
    ];
    let again = common::volmig(&env, &into_twin).await;
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.operation().status.phase, Phase::Succeeded);
    // Before the first attempt, it said what the claim held (issue 20): the
    // abandoned copy's files are all still temporary, none up to date.
    let held = again.operation().status.reusable.unwrap_or_default();
    assert!(
        held.starts_with(&format!("a checkpoint of operation {op} (")),
        "{held}"
    );
    assert!(held.contains("by size and time, 0 of 48 files ("), "{held}");
    let left: Vec<String> = manifest(&dst)
        .into_keys()
        .filter(|k| k.contains(".volmig"))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "volmig's own names left behind");
    assert_eq!(manifest(&dst), manifest(&src));

    // The source moves on (one file grows, one is rewritten): a third copy
    // into the claim foretells, before it starts, how much of the source it
    // finds there already, and the copy finds exactly that.
    std::fs::write(src.join("d00/f0000.bin"), b"grown\n").expect("write");
    std::fs::write(src.join("d01/f0001.bin"), vec![1u8; (256 << 10) + 1]).expect("write");
    let third = common::volmig(&env, &into_twin).await;
    assert_eq!(third.code, 0, "{}", third.stderr);
    let status = third.operation().status;
    let held = status.reusable.clone().unwrap_or_default();
    let found = status
        .summary
        .as_ref()
        .map(|s| (s.files_up_to_date, s.files));
    assert_eq!(found, Some((46, 48)), "{held}");
    assert!(
        held.starts_with("no checkpoint; by size and time, 46 of 48 files ("),
        "{held}"
    );
    assert_eq!(manifest(&dst), manifest(&src));
}
