//! The controllers behind the workloads and volumes volmig handles:
//! Deployments and StatefulSets scale and keep their claims, volumes are
//! reclaimed by policy, and a Retained volume is rebound by name.

mod common;

use common::k8s::{bound_volume, claim_phase, host_path, pod_phase, pv_phase, volume_name};
use common::{await_object, client, create, kubectl_ok, object, sandbox, wait_for};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
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
    wait_for(
        &sb,
        &["get", "deployment", "web"],
        "{.status.replicas}",
        "0",
    )
    .await;

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
