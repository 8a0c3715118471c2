//! `--detach`: the driver runs in the cluster, as a Job's pod from the
//! release's driver image, under a ServiceAccount holding only the grants
//! `resources::access` derives from what the driver does. The operation
//! goes on with no client: through killed senders and killed driver pods,
//! a cutover still ends with the app on the new volume and every write
//! kept; an abort stops it, `resume --detach` hands it back; at the end
//! no grant is left. On the sandbox, which enforces RBAC for
//! ServiceAccount tokens and audits every request, not one of the
//! driver's requests may be refused.

mod common;

use common::app::{
    assert_gapless, await_running, await_sequence_past, bound_volume, claim_of, cutover, policy,
    replicas, running_app, sequence, volume,
};
use common::{
    claim, finish, kill_pod_process, manifest, records, seed, spawn_volmig, volmig, volume_dir,
    wait_until, Env,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use std::time::Duration;

use kube::api::{Api, PostParams};
use kube::Client;
use kube_sandbox::auth::Identity;
use serde_json::json;
use volmig::names::{holder_pod, pod_name, Component};
use volmig::record::cutover::Step;
use volmig::record::{AttemptPhase, Phase, VolumeMigration};
use volmig::resources::access::{driver_rbac_name, Scope};

const MIB: u64 = 1 << 20;

async fn record(client: &Client, ns: &str, op: &str) -> VolumeMigration {
    records(client, ns)
        .await
        .into_iter()
        .find(|r| r.metadata.name == op)
        .expect("the record")
}

/// The pod that holds `op` now, once one does.
async fn driver_pod(client: &Client, ns: &str, op: &str) -> String {
    wait_until("a driver pod holding the operation", || async {
        let vm = record(client, ns, op).await;
        let holder = vm.status.driver?.holder;
        holder_pod(&holder).map(str::to_string)
    })
    .await
}

/// Waits until `op` has ended; returns its record.
async fn ended(client: &Client, ns: &str, op: &str) -> VolumeMigration {
    wait_until("the operation ended", || async {
        let vm = record(client, ns, op).await;
        (vm.status.phase.is_final() || vm.status.phase == Phase::Aborted).then_some(vm)
    })
    .await
}

/// The driver's RBAC objects (and its ServiceAccount) still there.
async fn grants_left(client: &Client, ns: &str, op: &str) -> Vec<String> {
    let name = driver_rbac_name(op);
    let mut left = Vec::new();
    let found = [
        (
            "Role",
            Api::<Role>::namespaced(client.clone(), ns)
                .get_opt(&name)
                .await
                .map(|o| o.is_some()),
        ),
        (
            "RoleBinding",
            Api::<RoleBinding>::namespaced(client.clone(), ns)
                .get_opt(&name)
                .await
                .map(|o| o.is_some()),
        ),
        (
            "ServiceAccount",
            Api::<ServiceAccount>::namespaced(client.clone(), ns)
                .get_opt(&name)
                .await
                .map(|o| o.is_some()),
        ),
        (
            "ClusterRole",
            Api::<ClusterRole>::all(client.clone())
                .get_opt(&name)
                .await
                .map(|o| o.is_some()),
        ),
        (
            "ClusterRoleBinding",
            Api::<ClusterRoleBinding>::all(client.clone())
                .get_opt(&name)
                .await
                .map(|o| o.is_some()),
        ),
    ];
    for (kind, there) in found {
        if there.expect("get") {
            left.push(format!("{kind}/{name}"));
        }
    }
    left
}

async fn await_no_grants(client: &Client, ns: &str, op: &str) {
    wait_until("the driver's grants removed", || async {
        grants_left(client, ns, op).await.is_empty().then_some(())
    })
    .await;
}

/// Every request the driver's pods made was allowed (sandbox only).
fn assert_never_refused(env: &Env, op: &str) {
    let Some(sandbox) = &env.sandbox else {
        return;
    };
    let account = driver_rbac_name(op);
    let mine: Vec<_> = sandbox
        .audit()
        .into_iter()
        .filter(|e| format!("{:?}", e.identity).contains(&account))
        .collect();
    assert!(mine.len() > 10, "the driver made {} requests", mine.len());
    let refused: Vec<String> = mine
        .iter()
        .filter(|e| e.authorization.as_ref().is_some_and(|a| !a.allowed))
        .map(|e| format!("{} {}", e.method, e.uri))
        .collect();
    assert!(refused.is_empty(), "refused to the driver: {refused:#?}");
}

/// The driver pods of `op`, by name.
async fn driver_pods(client: &Client, ns: &str, op: &str) -> Vec<String> {
    volmig::driver::incluster::driver_pods(client, ns, op)
        .await
        .expect("list")
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// Kills the driver pod that holds `op`, and waits until another pod of
/// its Job holds it.
async fn kill_driver(client: &Client, ns: &str, op: &str, when: &str) -> String {
    let pod = driver_pod(client, ns, op).await;
    assert!(kill_pod_process(&pod), "{when}: no process of {pod}");
    let next = wait_until(&format!("{when}: a pod replacing {pod}"), || async {
        let now = driver_pod(client, ns, op).await;
        (now != pod).then_some(now)
    })
    .await;
    eprintln!("{when}: killed {pod}; {next} took over");
    next
}

/// An app on claim `data`, with 12 MiB more to copy, and its cutover
/// handed to the cluster (`--detach`, and `extra`): the client has gone.
struct Detached {
    ns: String,
    op: String,
    old_dir: std::path::PathBuf,
    old_volume: String,
}

async fn detached_cutover(extra: &[&str]) -> (Env, Client, Detached) {
    let env = common::env_with_driver().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let old_dir = running_app(&client, &ns, "data", "app").await;
    seed(&old_dir.join("bulk"), 48, 256 << 10);
    let old_volume = bound_volume(&claim_of(&client, &ns, "data").await);
    let mut args = vec!["--detach", "-o", "json"];
    args.extend_from_slice(extra);
    let started = std::time::Instant::now();
    let run = cutover(&env, &[], "data", &args).await;
    eprintln!("migrate --detach returned after {:?}", started.elapsed());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("detached: pod"), "{}", run.stderr);
    let op = run.operation().metadata.name;
    let app = Detached {
        ns,
        op,
        old_dir,
        old_volume,
    };
    (env, client, app)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_detached_cutover_survives_its_client_its_senders_and_its_driver_pods() {
    // 12 MiB at 4 MiB/s: each pre-copy attempt runs long enough to be hit.
    let extra = [
        "--bwlimit",
        "4M",
        "--max-downtime",
        "0s",
        "--precopy-rounds",
        "2",
    ];
    let (env, client, app) = detached_cutover(&extra).await;
    let (ns, op, old_dir, old_volume) = (&app.ns, &app.op, &app.old_dir, &app.old_volume);
    let (ns, op) = (ns.as_str(), op.as_str());
    let first = driver_pod(&client, ns, op).await;
    let status = volmig(&env, &["status", op]).await;
    assert!(
        status.stdout.contains(&format!("pod/{first}")) && status.stdout.contains("In cluster"),
        "{}",
        status.stdout
    );
    // A laptop's resume follows the driver pod instead of competing.
    let follower = spawn_volmig(&env, &["resume", op]);

    // Two senders killed mid-copy: the driver retries, from the checkpoint.
    common::await_progress(&client, ns, op, 1, MIB).await;
    assert!(kill_pod_process(&pod_name(op, Component::Sender, 1)));
    common::await_progress(&client, ns, op, 2, 3 * MIB).await;
    assert!(kill_pod_process(&pod_name(op, Component::Sender, 2)));
    // The driver pod killed mid-PreCopy: the Job's next pod takes over.
    common::await_progress(&client, ns, op, 3, 5 * MIB).await;
    assert_eq!(
        record(&client, ns, op).await.status.cutover.map(|c| c.step),
        Some(Step::PreCopy)
    );
    kill_driver(&client, ns, op, "mid-PreCopy").await;
    // And mid-Swap: the moment the claim is deleted (the request takes
    // effect; the pod never sees the answer).
    if let Some(sandbox) = &env.sandbox {
        let claim_deleted = sandbox.kill_requester_when(1, |e| {
            e.authorization.as_ref().is_some_and(|a| {
                let a = &a.attributes;
                a.verb == "delete" && a.resource == "persistentvolumeclaims" && a.name == "data"
            })
        });
        assert!(
            claim_deleted.wait_fired(1, Duration::from_secs(120)).await,
            "the driver pod never deleted the claim"
        );
        let pod = match &claim_deleted.requests()[0].identity {
            Identity::ServiceAccount(s) => s.pod.clone(),
            other => panic!("the claim deleted by {other:?}"),
        };
        assert_eq!(
            record(&client, ns, op).await.status.cutover.map(|c| c.step),
            Some(Step::Swap)
        );
        let next = wait_until("a pod replacing the one killed mid-Swap", || async {
            let now = driver_pod(&client, ns, op).await;
            (now != pod).then_some(now)
        })
        .await;
        eprintln!("mid-Swap: killed {pod} as it deleted the claim; {next} took over");
    }

    let vm = ended(&client, ns, op).await;
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    let c = vm.status.cutover.clone().expect("cutover");
    assert_eq!(c.step, Step::AwaitingCommit);
    let killed = vm
        .status
        .attempts
        .iter()
        .filter(|a| a.phase == AttemptPhase::Failed)
        .count();
    assert!(killed >= 2, "{:#?}", vm.status.attempts);

    // The app runs on the new volume under its claim's name, every write kept.
    let new_volume = bound_volume(&claim_of(&client, ns, "data").await);
    assert_ne!(&new_volume, old_volume);
    let old = volume(&client, old_volume).await.expect("old volume kept");
    assert_eq!(policy(&old), "Retain");
    assert_eq!(replicas(&client, ns, "app").await, 1);
    await_running(&client, ns, "app").await;
    let before = sequence(old_dir);
    assert_gapless(&before, "old volume");
    let new_dir = volume_dir(&client, ns, "data").await;
    let after = await_sequence_past(&new_dir, before.len() + 5).await;
    assert_gapless(&after, "new volume");
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "a write before the stop is missing"
    );

    // The laptop followed to the end, and never drove.
    let followed = finish(follower).await;
    assert_eq!(followed.code, 0, "{}", followed.stderr);
    assert!(
        followed.stderr.contains("is driven by pod/"),
        "{}",
        followed.stderr
    );
    assert!(
        !followed.stderr.contains("taking it over"),
        "{}",
        followed.stderr
    );

    // Three pods drove it; the last one finished the Job; no grant is left.
    let pods = driver_pods(&client, ns, op).await;
    assert!(pods.len() >= 3, "{pods:?}");
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    wait_until("the driver Job complete", || async {
        let job = jobs.get(&driver_rbac_name(op)).await.ok()?;
        (job.status?.succeeded? == 1).then_some(())
    })
    .await;
    await_no_grants(&client, ns, op).await;
    assert_never_refused(&env, op);

    // Every driver pod's log, the last one's saying it is done.
    let logs = volmig(&env, &["logs", op, "--driver"]).await;
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    for pod in &pods {
        assert!(
            logs.stdout.contains(&format!("==> driver {pod}")),
            "{}",
            logs.stdout
        );
    }
    assert!(
        logs.stdout.contains("the driver is done"),
        "{}",
        logs.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_detached_copy_is_aborted_and_handed_back_to_the_cluster() {
    let env = common::env_with_driver().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    seed(&src, 48, 256 << 10);

    let run = volmig(
        &env,
        &[
            "migrate",
            "data",
            "--to",
            "copy",
            "--bwlimit",
            "2M",
            "--detach",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation().metadata.name;
    common::await_progress(&client, &ns, &op, 1, 2 * MIB).await;

    // abort: the driver pod stops the attempt, removes its grants, ends.
    let abort = volmig(&env, &["abort", &op]).await;
    assert_eq!(abort.code, 0, "{}", abort.stderr);
    let vm = ended(&client, &ns, &op).await;
    assert_eq!(vm.status.phase, Phase::Aborted);
    await_no_grants(&client, &ns, &op).await;

    // A client resumes it (a fresh budget), then hands it to the cluster:
    // the new driver pod follows that client, and takes over once it stops.
    let local = spawn_volmig(&env, &["resume", &op]);
    common::await_progress(&client, &ns, &op, 2, 3 * MIB).await;
    let run = volmig(&env, &["resume", &op, "--detach"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("detached: pod"), "{}", run.stderr);
    assert!(
        run.stderr.contains("and takes over when it stops"),
        "{}",
        run.stderr
    );
    let pid = local.id().expect("pid") as i32;
    // SAFETY: kill(2) takes plain integers.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let stopped = finish(local).await;
    assert_eq!(stopped.code, 130, "{}", stopped.stderr);
    driver_pod(&client, &ns, &op).await;
    let vm = wait_until("the operation succeeded", || async {
        let vm = record(&client, &ns, &op).await;
        vm.status.phase.is_final().then_some(vm)
    })
    .await;
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    assert_eq!(
        manifest(&src),
        manifest(&volume_dir(&client, &ns, "copy").await)
    );
    let second = &vm.status.attempts[1];
    assert!(second.bytes_prior >= 2 * MIB, "resumed: {second:#?}");
    await_no_grants(&client, &ns, &op).await;
    assert_never_refused(&env, &op);
}

/// A detached copy through a snapshot: the driver pod's Role has
/// `volumesnapshots` (this operation takes them), every request it makes is
/// allowed, and neither the snapshot nor its claim is left.
#[tokio::test(flavor = "multi_thread")]
async fn a_detached_snapshot_copy_needs_no_grant_it_lacks() {
    let env = common::env_with_driver().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let src = common::csi_claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    seed(&src, 24, 64 << 10);

    let args = [
        "migrate",
        "data",
        "--to",
        "copy",
        "--to-storage-class",
        "standard",
        "--copy-method",
        "snapshot",
        "--detach",
        "-o",
        "json",
    ];
    let run = volmig(&env, &args).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation().metadata.name;
    let vm = ended(&client, &ns, &op).await;
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    let copy = vm.status.attempts[0].source.as_ref().expect("a snapshot");
    assert_eq!(copy.method, volmig::plan::Method::Snapshot);
    assert_eq!(
        manifest(&src),
        manifest(&volume_dir(&client, &ns, "copy").await)
    );
    await_no_grants(&client, &ns, &op).await;
    assert_never_refused(&env, &op);
    let snapshots: Api<volmig::snapshots::VolumeSnapshot> = Api::namespaced(client.clone(), &ns);
    wait_until("the snapshot gone", || async {
        let left = snapshots.list(&Default::default()).await.ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
}

/// `rollback` while the driver pod pre-copies: the client asks, the pod
/// (which holds the operation) undoes it, the client follows to the end.
#[tokio::test(flavor = "multi_thread")]
async fn a_detached_cutover_rolls_back_when_asked_while_its_pod_drives() {
    let (env, client, app) = detached_cutover(&["--bwlimit", "2M"]).await;
    let (ns, op, old_dir, old_volume) = (&app.ns, &app.op, &app.old_dir, &app.old_volume);
    let (ns, op) = (ns.as_str(), op.as_str());
    let pod = driver_pod(&client, ns, op).await;
    common::await_progress(&client, ns, op, 1, 2 * MIB).await;

    let rollback = volmig(&env, &["rollback", op, "-o", "json"]).await;
    assert_eq!(rollback.code, 0, "{}", rollback.stderr);
    assert!(
        rollback.stderr.contains(&format!("is driven by pod/{pod}")),
        "{}",
        rollback.stderr
    );
    let vm = rollback.operation();
    assert_eq!(
        vm.status.phase,
        Phase::RolledBack,
        "{:?}",
        vm.status.message
    );
    assert_eq!(
        bound_volume(&claim_of(&client, ns, "data").await),
        *old_volume
    );
    assert_eq!(replicas(&client, ns, "app").await, 1);
    await_running(&client, ns, "app").await;
    let seq = await_sequence_past(old_dir, sequence(old_dir).len() + 5).await;
    assert_gapless(&seq, "after the rollback");
    await_no_grants(&client, ns, op).await;
    assert_never_refused(&env, op);
}

/// A user who may migrate but not create roles is told so, with each
/// missing permission, before anything is created; given what the
/// preflight asks for (and nothing more), the same user detaches, with
/// the API server checking that no role grants what they do not hold.
#[tokio::test(flavor = "multi_thread")]
async fn detaching_is_refused_before_anything_is_created_without_the_rights_and_works_with_them() {
    let env = common::env_with_driver().await;
    let Some(sandbox) = &env.sandbox else {
        return; // needs a user of our own making
    };
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    seed(&src, 20, 4096);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    accounts
        .create(
            &PostParams::default(),
            &common::object(json!({"metadata": {"name": "dev"}})),
        )
        .await
        .expect("service account");
    // All the driver may do, everywhere: the user could drive it here.
    let driver_rules = |scope| volmig::resources::access::rules("any", scope, false);
    let mut rules = driver_rules(Scope::Namespaced);
    // And what any migrate asks of its user beyond that: its record.
    rules.push(common::object(json!({
        "apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"],
    })));
    rules.extend(driver_rules(Scope::Cluster));
    for r in &mut rules {
        r.resource_names = None;
    }
    grant(&client, "volmig-user", rules.clone()).await;
    let kubeconfig = sandbox.kubeconfig_for(&ns, "dev").expect("kubeconfig");
    let args = ["migrate", "data", "--to", "copy", "--detach"];

    let refused = common::volmig_as(&env, &kubeconfig, &[], &args).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    for missing in [
        "may not start the in-cluster driver",
        "create roles.rbac.authorization.k8s.io -n default",
        "create clusterrolebindings.rbac.authorization.k8s.io (cluster-wide)",
        "create jobs.batch -n default",
        "Run it without --detach",
    ] {
        assert!(
            refused.stderr.contains(missing),
            "{missing}: {}",
            refused.stderr
        );
    }
    assert!(
        records(&client, &ns).await.is_empty(),
        "a record was created"
    );
    let roles: Api<Role> = Api::namespaced(client.clone(), &ns);
    assert!(roles
        .list(&Default::default())
        .await
        .expect("roles")
        .items
        .is_empty());

    // What the preflight asks for, and the same command works.
    let mut more = Vec::new();
    for (group, resource, verbs) in [
        (
            "rbac.authorization.k8s.io",
            "roles",
            &["create", "get", "update", "delete"][..],
        ),
        (
            "rbac.authorization.k8s.io",
            "clusterroles",
            &["create", "get", "update", "delete"],
        ),
        (
            "rbac.authorization.k8s.io",
            "rolebindings",
            &["create", "get", "patch"],
        ),
        (
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            &["create", "get", "patch"],
        ),
        ("", "serviceaccounts", &["create", "get", "patch"]),
        ("batch", "jobs", &["create", "get", "delete"]),
    ] {
        more.push(common::object(json!({
            "apiGroups": [group], "resources": [resource], "verbs": verbs,
        })));
    }
    grant(&client, "volmig-detacher", more).await;
    let run = common::volmig_as(&env, &kubeconfig, &[], &args).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = records(&client, &ns).await[0].metadata.name.clone();
    let vm = ended(&client, &ns, &op).await;
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    assert_eq!(
        manifest(&src),
        manifest(&volume_dir(&client, &ns, "copy").await)
    );
    await_no_grants(&client, &ns, &op).await;
    assert_never_refused(&env, &op);
}

/// Binds a ClusterRole `name` of `rules` to ServiceAccount default/dev.
async fn grant(client: &Client, name: &str, rules: Vec<PolicyRule>) {
    let role = ClusterRole {
        metadata: common::object(json!({"name": name})),
        rules: Some(rules),
        aggregation_rule: None,
    };
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("cluster role");
    let binding: ClusterRoleBinding = common::object(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "dev", "namespace": "default"}],
    }));
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");
}
