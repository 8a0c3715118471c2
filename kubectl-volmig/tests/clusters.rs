//! Copies into another cluster (`migrate --to-context`, issue 23), on two
//! sandboxes side by side: the sender in the source's cluster, the receiver,
//! the destination claim and the record in the destination's, over each
//! network path.

mod common;

use std::collections::BTreeMap;

use common::clusters::Pair;
use volmig::record::network::NetworkStatus;
use volmig::record::{Phase, VolumeMigration};
use volmig::spec::NetworkPath;

fn migrate_args<'a>(network: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "migrate",
        "data",
        "--to-context",
        "dst",
        "--network",
        network,
        "--mover-image",
        common::MOVER_IMAGE,
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    args
}

/// Copies the seeded `data` into `claim` of the other cluster over
/// `network` with `extra` flags; asserts it succeeded with the source's
/// tree (`want`) and returns the record and its network path.
async fn copied(
    pair: &Pair,
    network: &str,
    extra: &[&str],
    claim: &str,
    want: &BTreeMap<String, String>,
) -> (VolumeMigration, NetworkStatus) {
    let run = pair.volmig(&migrate_args(network, extra)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(vm.status.phase, Phase::Succeeded);
    assert_eq!(&pair.destination_manifest(claim).await, want);
    let net = vm.status.network.clone();
    (vm, net.expect("the network path is recorded"))
}

#[tokio::test(flavor = "multi_thread")]
async fn copies_into_another_cluster_through_a_load_balancer() {
    let pair = Pair::start(true).await;
    let want = pair.seeded_source().await;
    let (vm, net) = copied(&pair, "loadbalancer", &[], "data", &want).await;
    // The claim keeps its name in the other cluster.
    assert_eq!(vm.spec.destination.name, "data");
    assert_eq!(net.path, Some(NetworkPath::LoadBalancer));
    let lb = format!("127.{}.254.", pair.dst.sandbox().block());
    let address = net.address.clone().unwrap_or_default();
    assert!(
        address.starts_with(&lb),
        "{address} is not a load balancer's"
    );
    assert!(net.tried.is_empty(), "{:?}", net.tried);

    // The record is in the destination's cluster, the pointer to it in the
    // source's; pods, Services and Secrets are gone from both.
    let (src, dst) = (pair.src.client().await, pair.dst.client().await);
    let op = vm.metadata.name.clone();
    let records: Vec<VolumeMigration> = common::records(&dst, "default").await;
    assert_eq!(records.len(), 1);
    assert!(common::records(&src, "default").await.is_empty());
    assert!(common::leftovers(&dst, "default").await.is_empty());
    assert!(common::leftovers(&src, "default").await.is_empty());
    assert_eq!(
        common::everything_volmig_made(&src, "default").await,
        vec![format!("configmap/volmig-{op}-record-pointer")]
    );

    // Given either context, the operation is found.
    for context in ["src", "dst"] {
        let status = pair
            .volmig(&["--context", context, "status", &op, "-o", "json"])
            .await;
        assert_eq!(status.code, 0, "{context}: {}", status.stderr);
        assert_eq!(status.operation().metadata.name, op, "{context}");
    }
    // The source's namespace lists it as one whose record is elsewhere.
    let listed = pair.volmig(&["status"]).await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(
        listed
            .stderr
            .contains(&format!("{op}: into another cluster"))
            && listed.stderr.contains("context dst"),
        "{}",
        listed.stderr
    );
    let text = pair.volmig(&["status", &op]).await;
    assert!(
        text.stdout.contains("Network:") && text.stdout.contains("loadbalancer"),
        "{}",
        text.stdout
    );

    // Clean-up from the source's context leaves only the destination claim.
    let clean = pair.volmig(&["cleanup", &op]).await;
    assert_eq!(clean.code, 0, "{}", clean.stderr);
    assert_eq!(
        common::everything_volmig_made(&src, "default").await,
        Vec::<String>::new()
    );
    assert_eq!(
        common::everything_volmig_made(&dst, "default").await,
        vec!["claim/data".to_string()]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_falls_back_to_a_node_port_when_no_load_balancer_comes() {
    let pair = Pair::start(false).await;
    let want = pair.seeded_source().await;
    let extra = ["--start-timeout", "8", "--to", "copy"];
    let (_, net) = copied(&pair, "auto", &extra, "copy", &want).await;
    assert_eq!(net.path, Some(NetworkPath::NodePort));
    let node = format!("127.{}.0.", pair.dst.sandbox().block());
    let address = net.address.clone().unwrap_or_default();
    assert!(address.starts_with(&node), "{address} is not a node's");
    // Why the load balancer was given up is recorded.
    assert_eq!(net.tried.len(), 1, "{:?}", net.tried);
    assert_eq!(net.tried[0].path, NetworkPath::LoadBalancer);
    assert!(
        net.tried[0].why.contains("no load-balancer address in 8s"),
        "{}",
        net.tried[0].why
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_path_asked_for_that_does_not_work_fails_the_operation_saying_why() {
    let pair = Pair::start(false).await;
    pair.seeded_source().await;
    let args = migrate_args("loadbalancer", &["--start-timeout", "5"]);
    let run = pair.volmig(&args).await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(vm.status.phase, Phase::Failed);
    let message = vm.status.message.clone().unwrap_or_default();
    assert!(
        message.contains("no network path") && message.contains("--network auto"),
        "{message}"
    );
    // Nothing but the record, its pointer and the (empty) claim is left.
    let (src, dst) = (pair.src.client().await, pair.dst.client().await);
    assert!(common::leftovers(&dst, "default").await.is_empty());
    assert!(common::leftovers(&src, "default").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn what_cannot_cross_clusters_is_refused_before_anything_is_made() {
    let pair = Pair::start(true).await;
    pair.seeded_source().await;
    let cutover = pair.volmig(&migrate_args("auto", &["--cutover"])).await;
    assert_eq!(cutover.code, 1);
    assert!(
        cutover
            .stderr
            .contains("--cutover cannot move an app into another cluster"),
        "{}",
        cutover.stderr
    );
    let detach = pair.volmig(&migrate_args("auto", &["--detach"])).await;
    assert_eq!(detach.code, 1);
    assert!(detach.stderr.contains("--detach"), "{}", detach.stderr);
    let same = pair
        .volmig(&["migrate", "data", "--to-context", "src", "-o", "json"])
        .await;
    assert_eq!(same.code, 1);
    assert!(
        same.stderr.contains("is the source's cluster"),
        "{}",
        same.stderr
    );
    let dst = pair.dst.client().await;
    assert!(common::everything_volmig_made(&dst, "default")
        .await
        .is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn sync_rounds_follow_the_source_then_the_final_one_ends_the_operation() {
    let pair = Pair::start(true).await;
    pair.seeded_source().await;
    let run = pair.volmig(&migrate_args("nodeport", &[])).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation().metadata.name;

    // The app goes on writing: a new file, a changed one, a deleted one.
    let src = pair.src.client().await;
    let dir = common::volume_dir(&src, "default", "data").await;
    std::fs::write(dir.join("new-file"), b"written after the first copy").unwrap();
    let first = common::manifest(&dir)
        .into_keys()
        .find(|k| k.contains('/'))
        .unwrap();
    std::fs::write(dir.join(&first), b"changed").unwrap();
    let gone = common::manifest(&dir)
        .into_keys()
        .rfind(|k| k.contains('/') && *k != first)
        .unwrap();
    std::fs::remove_file(dir.join(&gone)).unwrap();
    let want = common::manifest(&dir);

    let round = pair.volmig(&["sync", &op, "-o", "json"]).await;
    assert_eq!(round.code, 0, "{}", round.stderr);
    let vm = round.operation();
    assert_eq!(vm.status.phase, Phase::Succeeded);
    assert_eq!(pair.destination_manifest("data").await, want);
    let sync = vm.status.sync.clone().expect("the round is recorded");
    assert_eq!(sync.rounds.len(), 1);
    assert!(!sync.ended && sync.rounds[0].completion_time.is_some());
    assert_eq!(sync.rounds[0].first_attempt, 2);

    // The app is stopped; the last writes go over in the final round.
    std::fs::write(dir.join("last-file"), b"the last write").unwrap();
    let want = common::manifest(&dir);
    let last = pair.volmig(&["sync", &op, "--final", "-o", "json"]).await;
    assert_eq!(last.code, 0, "{}", last.stderr);
    let vm = last.operation();
    assert_eq!(pair.destination_manifest("data").await, want);
    let sync = vm.status.sync.clone().unwrap();
    assert!(sync.ended && sync.rounds[1].r#final, "{sync:?}");
    assert!(vm.status.attempts.iter().all(|a| a.phase.is_over()));

    let again = pair.volmig(&["--context", "dst", "sync", &op]).await;
    assert_eq!(again.code, 1);
    assert!(
        again.stderr.contains("ended by sync --final"),
        "{}",
        again.stderr
    );
    // Ended: the source's cluster keeps nothing, the destination's only
    // the claim and the record.
    assert_eq!(
        common::everything_volmig_made(&src, "default").await,
        Vec::<String>::new()
    );
    let dst = pair.dst.client().await;
    assert_eq!(
        common::everything_volmig_made(&dst, "default").await,
        vec![format!("configmap/volmig-{op}"), "claim/data".to_string()]
    );
    // From the destination's context it is still there to read.
    let status = pair.volmig(&["--context", "dst", "status", &op]).await;
    assert_eq!(status.code, 0, "{}", status.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn copies_through_the_tunnel_when_asked() {
    let pair = Pair::start(true).await;
    let want = pair.seeded_source().await;
    let (_, net) = copied(&pair, "tunnel", &[], "data", &want).await;
    assert_eq!(net.path, Some(NetworkPath::Tunnel));
    // No address is exposed: the Service stayed a ClusterIP one.
    assert_eq!(net.address, None);
    let (src, dst) = (pair.src.client().await, pair.dst.client().await);
    assert!(common::leftovers(&dst, "default").await.is_empty());
    assert!(common::leftovers(&src, "default").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sender_killed_mid_copy_over_the_tunnel_is_resumed() {
    const MIB: u64 = 1024 * 1024;
    let pair = Pair::start(true).await;
    let want = pair.seeded_source_of(16, MIB as usize).await;
    let args = migrate_args("tunnel", &["--bwlimit", "3M", "--backoff", "1"]);
    let child = pair.spawn(&args);
    let dst = pair.dst.client().await;
    let op = common::first_operation(&dst, "default").await;
    let done = common::await_progress(&dst, "default", &op, 1, 4 * MIB).await;
    assert!(done < 16 * MIB, "attempt 1 finished before it was killed");
    let sender = volmig::names::pod_name(&op, volmig::names::Component::Sender, 1);
    assert!(common::kill_pod_process(&sender), "no process for {sender}");

    let run = common::finish(child).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    assert_eq!(pair.destination_manifest("data").await, want);
    let attempts = &vm.status.attempts;
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    assert_eq!(attempts[0].retryable, Some(true), "{:#?}", attempts[0]);
    // The second attempt went on from what the first had verified.
    assert!(attempts[1].bytes_prior >= 4 * MIB, "{:#?}", attempts[1]);
    assert_eq!(
        vm.status.network.and_then(|n| n.path),
        Some(NetworkPath::Tunnel)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn given_the_source_context_abort_logs_and_resume_reach_both_clusters() {
    const MIB: u64 = 1024 * 1024;
    let pair = Pair::start(true).await;
    let want = pair.seeded_source_of(12, MIB as usize).await;
    let src = pair.src.client().await;
    let child = pair.spawn(&migrate_args("nodeport", &["--bwlimit", "2M"]));
    let dst = pair.dst.client().await;
    let op = common::first_operation(&dst, "default").await;
    common::await_progress(&dst, "default", &op, 1, 2 * MIB).await;

    // Given the source's context, abort stops both sides.
    let abort = pair.volmig(&["abort", &op]).await;
    assert_eq!(abort.code, 0, "{}", abort.stderr);
    let driven = common::finish(child).await;
    assert_eq!(driven.code, 4, "{}", driven.stderr);
    assert!(common::leftovers(&src, "default").await.is_empty());
    assert!(common::leftovers(&dst, "default").await.is_empty());

    // logs shows the sender's side from the source's cluster too.
    let logs = pair.volmig(&["logs", &op, "--attempt", "1"]).await;
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    assert!(
        logs.stdout.contains("==> sender") && logs.stdout.contains("==> receiver"),
        "{}",
        logs.stdout
    );

    // resume finishes it from the checkpoint.
    let resumed = pair.volmig(&["resume", &op, "-o", "json"]).await;
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let vm = resumed.operation();
    assert_eq!(vm.status.phase, Phase::Succeeded);
    assert!(
        vm.status.attempts[1].bytes_prior >= 2 * MIB,
        "{:#?}",
        vm.status.attempts[1]
    );
    assert_eq!(pair.destination_manifest("data").await, want);
}
