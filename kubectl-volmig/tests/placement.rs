//! Placement: a ReadWriteOnce source in use by a running app gets its
//! sender on the app's node, with the app's tolerations; refusals, bad
//! values among them, create nothing.

mod common;

use common::{
    app_pod, claim, env, env_with, everything_volmig_made, manifest, seed, volume_dir, MOVER_IMAGE,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube_sandbox::sandbox::Taint;
use serde_json::json;
use volmig::record::{AttemptPhase, Phase};

#[tokio::test(flavor = "multi_thread")]
async fn sender_runs_next_to_the_app_with_its_tolerations() {
    let taint: Taint = "node-2:dedicated=db:NoSchedule".parse().expect("taint");
    let env = env_with(vec![taint]).await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "db", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "db").await;
    seed(&src, 40, 10_000);
    // The app holds the claim on the tainted node-2: any other node would
    // leave the sender in ContainerCreating with a Multi-Attach error.
    app_pod(
        &client,
        &ns,
        "postgres",
        "db",
        json!({
            "nodeSelector": {"kubernetes.io/hostname": "node-2"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}],
        }),
    )
    .await;

    let run = common::volmig(
        &env,
        &[
            "migrate",
            "db",
            "--mover-image",
            MOVER_IMAGE,
            "--start-timeout",
            "60",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation();
    assert_eq!(op.status.phase, Phase::Succeeded, "{:?}", op.status.message);
    let placement = op.status.placement.as_ref().expect("placement");
    assert_eq!(placement.sender.node.as_deref(), Some("node-2"));
    assert_eq!(placement.sender.app_pod.as_deref(), Some("postgres"));
    assert!(
        placement.sender.reason.contains("postgres"),
        "{}",
        placement.sender.reason
    );
    assert!(
        placement
            .sender
            .tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some("dedicated")),
        "{placement:?}"
    );
    assert_eq!(op.status.attempts.len(), 1);
    assert_eq!(op.status.attempts[0].sender.node.as_deref(), Some("node-2"));
    let dst = volume_dir(&client, &ns, "db-migrated").await;
    assert_eq!(manifest(&dst), manifest(&src));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sender_follows_the_app_to_its_new_node() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "db", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "db").await;
    seed(&src, 10, 1024 * 1024);
    app_pod(
        &client,
        &ns,
        "app-a",
        "db",
        json!({"nodeSelector": {"kubernetes.io/hostname": "node-2"}}),
    )
    .await;

    let args = [
        "migrate",
        "db",
        "--mover-image",
        MOVER_IMAGE,
        "--bwlimit",
        "1M",
        "--backoff",
        "1",
        "-o",
        "json",
    ];
    let (child, _) = common::start_moving(&env, &client, &args, 1).await;
    // The app is rescheduled to node-3; its new pod waits for the volume
    // the sender still holds on node-2, until the sender follows it.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.delete(
        "app-a",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .expect("delete app-a");
    let mut moved = common::app_pod_spec("app-b", "db");
    moved["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "node-3"});
    pods.create(&PostParams::default(), &common::object(moved))
        .await
        .expect("app-b");

    let run = common::finish(child).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation();
    assert_eq!(op.status.phase, Phase::Succeeded, "{:?}", op.status.message);
    let attempts = &op.status.attempts;
    assert_eq!(attempts[0].phase, AttemptPhase::Replaced, "{attempts:#?}");
    assert!(
        attempts[0]
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("node-3"),
        "{attempts:#?}"
    );
    let last = attempts.last().expect("attempts");
    assert_eq!(last.phase, AttemptPhase::Succeeded);
    assert_eq!(last.sender.node.as_deref(), Some("node-3"));
    assert!(last.bytes_prior > 0, "{last:#?}");
    let placement = op.status.placement.as_ref().expect("placement");
    assert_eq!(placement.sender.app_pod.as_deref(), Some("app-b"));
    let dst = volume_dir(&client, &ns, "db-migrated").await;
    assert_eq!(manifest(&dst), manifest(&src));
}

#[tokio::test(flavor = "multi_thread")]
async fn migrations_that_cannot_work_are_refused_before_anything_is_created() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    claim(&client, &ns, "solo", "ReadWriteOncePod", "1Gi").await;
    app_pod(&client, &ns, "solo-app", "solo", json!({})).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    // A claim no volume will bind, and a destination the user made.
    let pending: PersistentVolumeClaim = common::object(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "waiting"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
                 "resources": {"requests": {"storage": "1Gi"}}},
    }));
    claims
        .create(&PostParams::default(), &pending)
        .await
        .expect("claim");
    claim(&client, &ns, "theirs", "ReadWriteOnce", "1Gi").await;
    let before = claims
        .list(&Default::default())
        .await
        .expect("claims")
        .items
        .len();

    let cases: [(&[&str], &[&str]); 13] = [
        (
            &["migrate", "data", "--to-size", "10Mi"],
            &["10Mi", "1Gi", "--allow-shrink"],
        ),
        (
            &["migrate", "data", "--to-storage-class", "nope"],
            &["nope", "standard", "local"],
        ),
        (&["migrate", "solo"], &["ReadWriteOncePod", "solo-app"]),
        (&["migrate", "missing"], &["missing", "not found"]),
        (&["migrate", "waiting"], &["waiting", "Pending", "Bound"]),
        (
            &["migrate", "data", "--to", "theirs"],
            &["theirs", "--reuse"],
        ),
        // Values the API server or the mover would reject, refused before
        // a claim or a record exists.
        (
            &["migrate", "data", "--to", "nosuchclaim", "--reuse"],
            &[
                "nosuchclaim",
                "not found",
                "--reuse copies into an existing claim",
            ],
        ),
        (
            &["migrate", "data", "--to", "Bad_Name"],
            &["invalid --to \"Bad_Name\"", "RFC 1123 subdomain"],
        ),
        (
            &["migrate", "data", "--bwlimit", "abc"],
            &["invalid --bwlimit \"abc\"", "20M"],
        ),
        (
            &["migrate", "data", "--mover-cpu", "lots"],
            &["invalid --mover-cpu \"lots\"", "100m"],
        ),
        (
            &[
                "migrate",
                "data",
                "--mover-memory",
                "1Gi",
                "--mover-memory-limit",
                "512Mi",
            ],
            &["--mover-memory-limit 512Mi is below --mover-memory 1Gi"],
        ),
        (
            &["migrate", "data", "--start-timeout", "0"],
            &["invalid --start-timeout 0"],
        ),
        (
            &["migrate", "data", "--to-size", "20GB"],
            &["invalid --to-size \"20GB\"", "write Gi"],
        ),
    ];
    for (args, words) in cases {
        let run = common::volmig(&env, args).await;
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        for word in words {
            assert!(
                run.stderr.contains(word),
                "{args:?}: {word:?} not in:\n{}",
                run.stderr
            );
        }
        assert_eq!(
            everything_volmig_made(&client, &ns).await,
            Vec::<String>::new(),
            "{args:?}"
        );
        let after = claims
            .list(&Default::default())
            .await
            .expect("claims")
            .items
            .len();
        assert_eq!(after, before, "{args:?} created a claim");
    }
}
