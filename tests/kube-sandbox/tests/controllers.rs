//! The controllers behind the workloads and volumes volmig handles:
//! Deployments and StatefulSets scale and keep their claims, volumes are
//! reclaimed by policy, and a Retained volume is rebound by name;
//! DaemonSets place one pod per admitted node; ReplicationControllers keep
//! their replicas.

mod common;

use common::k8s::{
    bound_volume, claim_phase, host_path, node_of, pod_phase, pv_phase, volume_name,
};
use common::{await_object, client, create, kubectl_ok, object, sandbox, sandbox_with, wait_for};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const WEB: &str = r#"{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
  "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
    "template": {"metadata": {"labels": {"app": "web"}},
      "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}}}"#;

fn running_pods(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

async fn await_running(pods: &Api<Pod>, selector: &str, count: usize) -> Vec<String> {
    for _ in 0..300 {
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .expect("list");
        let running = running_pods(&list.items);
        if running.len() == count && list.items.len() == count {
            return running;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{selector}: never exactly {count} running pods");
}

#[tokio::test(flavor = "multi_thread")]
async fn deployments_scale_and_replace_pods() {
    let sb = sandbox().await;
    let pods: Api<Pod> = Api::default_namespaced(client(&sb).await);
    let out = create(&sb, WEB).await;
    assert!(out.ok, "{}", out.stderr);
    let first = await_running(&pods, "app=web", 2).await;
    assert!(first.iter().all(|n| n.starts_with("web-")), "{first:?}");

    kubectl_ok(&sb, &["scale", "deployment", "web", "--replicas=3"]).await;
    await_running(&pods, "app=web", 3).await;
    wait_for(
        &sb,
        &["get", "deployment", "web"],
        "{.status.readyReplicas}",
        "3",
    )
    .await;

    // A deleted pod is replaced.
    let victim = first[0].clone();
    pods.delete(&victim, &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    let after = await_running(&pods, "app=web", 3).await;
    assert!(!after.contains(&victim), "{after:?}");

    kubectl_ok(&sb, &["scale", "deployment", "web", "--replicas=0"]).await;
    await_running(&pods, "app=web", 0).await;
    // Zero counts are omitted (`omitempty`), as a real server returns them:
    // a Deployment's replicas too, a ReplicaSet's ready replicas but not its
    // replicas.
    let deployments: Api<Deployment> = Api::default_namespaced(client(&sb).await);
    await_object(&deployments, "web", "scaled to 0", |d| {
        let d = d.expect("deployment");
        let status = d.status.clone().unwrap_or_default();
        status.observed_generation == d.metadata.generation
            && status.replicas.is_none()
            && status.ready_replicas.is_none()
            && status.available_replicas.is_none()
    })
    .await;
    let sets: Api<ReplicaSet> = Api::default_namespaced(client(&sb).await);
    let rs = sets
        .list(&ListParams::default())
        .await
        .expect("replicasets");
    let status = rs.items[0].status.clone().expect("status");
    assert_eq!((status.replicas, status.ready_replicas), (0, None));

    // Deleting the Deployment takes its ReplicaSet (garbage collection).
    kubectl_ok(&sb, &["delete", "deployment", "web"]).await;
    wait_for(&sb, &["get", "replicasets"], "{.items}", "[]").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn statefulsets_keep_their_claims_across_scaling() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let sts: StatefulSet = object(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {
            "replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{
                "name": "c", "image": "busybox",
                "command": ["sh", "-c", "echo $HOSTNAME >> /data/owner; sleep 300"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
        },
    }));
    sets.create(&PostParams::default(), &sts)
        .await
        .expect("statefulset");
    let mut names = await_running(&pods, "app=db", 2).await;
    names.sort();
    assert_eq!(names, ["db-0", "db-1"]);
    let volume_of = |c: PersistentVolumeClaim| volume_name(&c).expect("bound");
    let before = volume_of(claims.get("data-db-0").await.expect("data-db-0"));
    claims.get("data-db-1").await.expect("data-db-1");

    let scale = |n: i32| json!({"spec": {"replicas": n}});
    sets.patch("db", &PatchParams::default(), &Patch::Merge(scale(0)))
        .await
        .expect("scale to 0");
    await_running(&pods, "app=db", 0).await;
    assert!(
        claims.get("data-db-1").await.is_ok(),
        "claims outlive their pods"
    );

    sets.patch("db", &PatchParams::default(), &Patch::Merge(scale(1)))
        .await
        .expect("scale to 1");
    assert_eq!(await_running(&pods, "app=db", 1).await, ["db-0"]);
    assert_eq!(
        volume_of(claims.get("data-db-0").await.expect("claim")),
        before
    );
    // The same volume, written by both incarnations of db-0.
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let dir = host_path(&volumes.get(&before).await.expect("pv"));
    for _ in 0..100 {
        if std::fs::read_to_string(dir.join("owner")).is_ok_and(|s| s == "db-0\ndb-0\n") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("owner")).expect("owner file"),
        "db-0\ndb-0\n"
    );

    // Claim templates are immutable, as volmig will find out.
    let change = json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"storageClassName": "local",
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}});
    let err = sets
        .patch("db", &PatchParams::default(), &Patch::Merge(change))
        .await
        .expect_err("forbidden");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("Forbidden")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn retained_volumes_are_rebound_by_name_and_deleted_ones_removed() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let claim = |name: &str, volume: Option<&str>| -> PersistentVolumeClaim {
        let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
        if let Some(v) = volume {
            c["spec"]["volumeName"] = json!(v);
        }
        object(c)
    };
    let bound = |c: Option<&PersistentVolumeClaim>| claim_phase(c) == Some("Bound");
    let in_phase =
        |want: &'static str| move |v: Option<&PersistentVolume>| pv_phase(v) == Some(want);

    claims
        .create(&PostParams::default(), &claim("old", None))
        .await
        .expect("claim");
    let (pv, dir) = bound_volume(&claims, &volumes, "old").await;
    std::fs::write(dir.join("keep.txt"), "precious").expect("write");

    // volmig's dance: Retain, delete the claim, free the volume, rebind it.
    let retain = json!({"spec": {"persistentVolumeReclaimPolicy": "Retain"}});
    volumes
        .patch(&pv, &PatchParams::default(), &Patch::Merge(retain))
        .await
        .expect("retain");
    claims
        .delete("old", &DeleteParams::default())
        .await
        .expect("delete claim");
    await_object(&volumes, &pv, "Released", in_phase("Released")).await;
    let free = json!({"spec": {"claimRef": null}});
    volumes
        .patch(&pv, &PatchParams::default(), &Patch::Merge(free))
        .await
        .expect("clear claimRef");
    await_object(&volumes, &pv, "Available", in_phase("Available")).await;
    claims
        .create(&PostParams::default(), &claim("new", Some(&pv)))
        .await
        .expect("new claim");
    await_object(&claims, "new", "Bound", bound).await;
    await_object(&volumes, &pv, "Bound", in_phase("Bound")).await;
    let reference = volumes
        .get(&pv)
        .await
        .expect("pv")
        .spec
        .and_then(|s| s.claim_ref)
        .expect("claimRef");
    assert_eq!(reference.name.as_deref(), Some("new"));
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).expect("data kept"),
        "precious"
    );

    // With the default Delete policy, the volume and its data go with the claim.
    claims
        .create(&PostParams::default(), &claim("scratch", None))
        .await
        .expect("claim");
    let (scratch, scratch_dir) = bound_volume(&claims, &volumes, "scratch").await;
    claims
        .delete("scratch", &DeleteParams::default())
        .await
        .expect("delete");
    await_object(&volumes, &scratch, "gone", |v| v.is_none()).await;
    assert!(
        !scratch_dir.exists(),
        "{} left behind",
        scratch_dir.display()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn claims_in_use_wait_for_their_pods() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let c: PersistentVolumeClaim = object(
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "busy"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    );
    claims
        .create(&PostParams::default(), &c)
        .await
        .expect("claim");
    let p: Pod = object(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user"}, "spec": {
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"], "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "busy"}}]}}),
    );
    pods.create(&PostParams::default(), &p).await.expect("pod");
    await_object(&pods, "user", "Running", |p| {
        pod_phase(p) == Some("Running")
    })
    .await;
    claims
        .delete("busy", &DeleteParams::default())
        .await
        .expect("delete");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let held = claims.get("busy").await.expect("still there");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(
        held.metadata.finalizers.unwrap_or_default(),
        ["kubernetes.io/pvc-protection"]
    );
    pods.delete("user", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    await_object(&claims, "busy", "gone", |c| c.is_none()).await;
}

/// The pods with `selector`, by node, once there is one Running pod (not
/// terminating) on each of `nodes` and no other; `check` must hold for
/// every pod.
async fn await_daemon_pods(
    pods: &Api<Pod>,
    selector: &str,
    nodes: &[&str],
    check: impl Fn(&Pod) -> bool,
) -> std::collections::BTreeMap<String, Pod> {
    let mut last = Vec::new();
    for _ in 0..600 {
        let list = pods.list(&ListParams::default().labels(selector)).await;
        let items = list.expect("pods").items;
        let running = running_pods(&items);
        let by_node: std::collections::BTreeMap<String, Pod> = items
            .iter()
            .filter_map(|p| Some((node_of(p)?.to_string(), p.clone())))
            .collect();
        let placed: Vec<&str> = by_node.keys().map(String::as_str).collect();
        if running.len() == nodes.len()
            && items.len() == nodes.len()
            && placed == nodes
            && items.iter().all(&check)
        {
            return by_node;
        }
        last = items
            .iter()
            .map(|p| (p.metadata.name.clone(), node_of(p).map(str::to_string)))
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{selector}: never one running pod on each of {nodes:?}; last {last:?}");
}

fn revision(p: &Pod) -> String {
    let labels = p.metadata.labels.clone().unwrap_or_default();
    labels
        .get("controller-revision-hash")
        .cloned()
        .unwrap_or_default()
}

/// A DaemonSet runs one pod on each node it admits (a cordoned node too: its
/// pods tolerate the cordon; not a tainted one), each controlled by the set
/// and pinned by a `matchFields` node affinity for the scheduler to bind; a
/// template change rolls the pods onto the new revision, a deleted pod comes
/// back, and the pods go with the set.
#[tokio::test(flavor = "multi_thread")]
async fn daemonsets_run_one_pod_per_admitted_node() {
    let sb = sandbox_with(vec!["node-3:dedicated=db:NoSchedule"
        .parse()
        .expect("taint")])
    .await;
    let client = client(&sb).await;
    let sets: Api<DaemonSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    kubectl_ok(&sb, &["cordon", "node-1"]).await;
    let ds: DaemonSet = object(json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [
                {"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}}}));
    let uid = sets
        .create(&PostParams::default(), &ds)
        .await
        .expect("daemonset")
        .metadata
        .uid;
    let first = await_daemon_pods(&pods, "app=agent", &["node-1", "node-2"], |_| true).await;
    for (node, pod) in &first {
        let refs = pod.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(refs.len(), 1, "{refs:?}");
        let r = &refs[0];
        assert_eq!(
            (
                r.kind.as_str(),
                r.name.as_str(),
                Some(&r.uid),
                r.controller,
                r.block_owner_deletion
            ),
            ("DaemonSet", "agent", uid.as_ref(), Some(true), Some(true))
        );
        let spec = pod.spec.clone().expect("spec");
        let required = spec.affinity.and_then(|a| {
            a.node_affinity?
                .required_during_scheduling_ignored_during_execution
        });
        let required = serde_json::to_value(required).expect("affinity");
        let pinned = json!({"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]});
        assert_eq!(required, pinned);
        let tolerations = spec.tolerations.unwrap_or_default();
        assert!(tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some("node.kubernetes.io/unschedulable")));
        assert!(pod.metadata.generate_name.as_deref() == Some("agent-"));
    }
    wait_for(
        &sb,
        &["get", "daemonset", "agent"],
        "{.status.numberReady}",
        "2",
    )
    .await;
    let status = sets.get("agent").await.expect("ds").status.expect("status");
    assert_eq!(
        (
            status.desired_number_scheduled,
            status.current_number_scheduled,
            status.number_misscheduled
        ),
        (2, 2, 0)
    );
    assert_eq!(
        (status.updated_number_scheduled, status.number_available),
        (Some(2), Some(2))
    );
    let table = kubectl_ok(&sb, &["get", "daemonset", "agent"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "NODE",
            "SELECTOR",
            "AGE"
        ]
    );
    let row: Vec<&str> = lines.next().expect("row").split_whitespace().collect();
    assert_eq!(row[..7], ["agent", "2", "2", "2", "2", "2", "<none>"]);

    // Tolerating the taint: node-3 too, every pod of the new revision.
    let old_revision = revision(&first["node-1"]);
    let tolerate = json!({"spec": {"template": {"spec": {"tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}]}}}});
    sets.patch("agent", &PatchParams::default(), &Patch::Merge(&tolerate))
        .await
        .expect("patch");
    let all = ["node-1", "node-2", "node-3"];
    let rolled = await_daemon_pods(&pods, "app=agent", &all, |p| revision(p) != old_revision).await;
    let names = |m: &std::collections::BTreeMap<String, Pod>| -> Vec<String> {
        m.values().filter_map(|p| p.metadata.name.clone()).collect()
    };
    assert!(names(&rolled).iter().all(|n| !names(&first).contains(n)));

    // A deleted pod comes back on its node.
    let victim = rolled["node-2"].metadata.name.clone().expect("name");
    pods.delete(&victim, &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    let back = await_daemon_pods(&pods, "app=agent", &all, |p| {
        p.metadata.name.as_deref() != Some(&victim)
    })
    .await;
    assert_ne!(
        back["node-2"].metadata.name.as_deref(),
        Some(victim.as_str())
    );

    sets.delete("agent", &DeleteParams::default())
        .await
        .expect("delete");
    await_running(&pods, "app=agent", 0).await;
}

/// A DaemonSet follows its node selector as nodes are labelled, and one
/// deleted with Orphan propagation leaves its pods, which the set created
/// again adopts instead of replacing.
#[tokio::test(flavor = "multi_thread")]
async fn daemonsets_follow_node_labels_and_adopt_their_orphans() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let sets: Api<DaemonSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let ds: DaemonSet = object(json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "ssd"},
        "spec": {"selector": {"matchLabels": {"app": "ssd"}},
            "template": {"metadata": {"labels": {"app": "ssd"}}, "spec": {
                "nodeSelector": {"disk": "ssd"},
                "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}}}));
    sets.create(&PostParams::default(), &ds)
        .await
        .expect("daemonset");
    wait_for(
        &sb,
        &["get", "daemonset", "ssd"],
        "{.status.desiredNumberScheduled}",
        "0",
    )
    .await;

    kubectl_ok(&sb, &["label", "node", "node-2", "node-3", "disk=ssd"]).await;
    await_daemon_pods(&pods, "app=ssd", &["node-2", "node-3"], |_| true).await;
    kubectl_ok(&sb, &["label", "node", "node-2", "disk-"]).await;
    let kept = await_daemon_pods(&pods, "app=ssd", &["node-3"], |_| true).await;
    let kept_uid = kept["node-3"].metadata.uid.clone();

    sets.delete("ssd", &DeleteParams::orphan())
        .await
        .expect("orphan delete");
    await_object(&sets, "ssd", "gone", |s| s.is_none()).await;
    let orphan = pods
        .get(kept["node-3"].metadata.name.as_deref().expect("name"))
        .await;
    assert!(orphan
        .expect("the pod outlives its set")
        .metadata
        .owner_references
        .is_none());
    let uid = sets
        .create(&PostParams::default(), &ds)
        .await
        .expect("daemonset again")
        .metadata
        .uid;
    let adopted = await_daemon_pods(&pods, "app=ssd", &["node-3"], |p| {
        let refs = p.metadata.owner_references.clone().unwrap_or_default();
        refs.iter()
            .any(|r| Some(&r.uid) == uid.as_ref() && r.controller == Some(true))
    })
    .await;
    assert_eq!(adopted["node-3"].metadata.uid, kept_uid);
}

/// A ReplicationController is a ReplicaSet with an equality selector,
/// defaulted from its template's labels: it adopts a matching orphan,
/// scales through its scale subresource, and prints as kubectl expects.
#[tokio::test(flavor = "multi_thread")]
async fn replication_controllers_keep_their_replicas() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let rcs: Api<ReplicationController> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let stray: Pod = object(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stray", "labels": {"app": "legacy"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}));
    pods.create(&PostParams::default(), &stray)
        .await
        .expect("pod");
    await_running(&pods, "app=legacy", 1).await;
    let rc: ReplicationController =
        object(json!({"apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "legacy"},
        "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "legacy"}}, "spec": {
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}}}));
    let created = rcs.create(&PostParams::default(), &rc).await.expect("rc");
    let spec = created.spec.expect("spec");
    let legacy = std::collections::BTreeMap::from([("app".to_string(), "legacy".to_string())]);
    assert_eq!(spec.selector.as_ref(), Some(&legacy));
    assert_eq!(created.metadata.labels.as_ref(), Some(&legacy));

    let mut names = await_running(&pods, "app=legacy", 2).await;
    names.sort();
    assert!(names.contains(&"stray".to_string()), "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("legacy-")), "{names:?}");
    let adopted = pods.get("stray").await.expect("stray");
    let refs = adopted.metadata.owner_references.unwrap_or_default();
    assert_eq!(
        refs.iter()
            .map(|r| (r.kind.as_str(), r.controller))
            .collect::<Vec<_>>(),
        [("ReplicationController", Some(true))]
    );
    wait_for(
        &sb,
        &["get", "rc", "legacy"],
        "{.status.readyReplicas}",
        "2",
    )
    .await;
    let scale = rcs.get_scale("legacy").await.expect("scale");
    let selector = scale.status.map(|s| s.selector);
    assert_eq!(selector, Some(Some("app=legacy".to_string())));
    let table = kubectl_ok(&sb, &["get", "rc", "legacy", "-o", "wide"]).await;
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .expect("row")
        .split_whitespace()
        .collect();
    assert_eq!(
        (row[..4].to_vec(), row.last().copied()),
        (vec!["legacy", "2", "2", "2"], Some("app=legacy"))
    );

    let zero = json!({"spec": {"replicas": 0}});
    rcs.patch_scale("legacy", &PatchParams::default(), &Patch::Merge(&zero))
        .await
        .expect("scale");
    await_running(&pods, "app=legacy", 0).await;
    wait_for(&sb, &["get", "rc", "legacy"], "{.status.replicas}", "0").await;
}
