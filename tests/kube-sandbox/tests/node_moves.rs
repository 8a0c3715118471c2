//! Rehoming a node-local volume as `shared/cutover-notes.md` ("Node-local
//! volumes") orders it: a PV's node affinity is immutable, so the PV is
//! re-created. Quiesce, Retain, delete the claim (Released), delete the PV
//! object (pv-protection lets an unbound PV go, Retain keeps the data),
//! create it again with the same source, the new affinity and a claimRef
//! pre-bound by namespace and name, create the claim with `volumeName`,
//! and the app comes back on the new node with the same data.

mod common;

use common::k8s::{await_lines, claim_phase, node_of, pv_phase, volume_name};
use common::{await_object, client, object, sandbox};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

fn claim(volume: Option<&str>) -> PersistentVolumeClaim {
    let mut spec = json!({"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}}});
    if let Some(volume) = volume {
        spec["volumeName"] = json!(volume);
    }
    object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"}, "spec": spec}))
}

/// A pod that appends its node's name to `/data/nodes`, on `node` if given.
fn app(name: &str, node: Option<&str>) -> Pod {
    let mut spec = json!({
        "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c",
            "echo $NODE >> /data/nodes; exec sleep 300"],
            "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]});
    if let Some(node) = node {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    object(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}))
}

fn affinity_to(node: &str) -> Value {
    json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_volume_is_rehomed_by_re_creating_its_pv() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    claims
        .create(&PostParams::default(), &claim(None))
        .await
        .expect("claim");
    pods.create(&PostParams::default(), &app("before", Some("node-1")))
        .await
        .expect("pod");
    await_object(&claims, "data", "Bound", |c| {
        claim_phase(c) == Some("Bound")
    })
    .await;
    let pv_name = volume_name(&claims.get("data").await.expect("claim")).expect("volume");
    let pv = volumes.get(&pv_name).await.expect("pv");
    let spec = pv.spec.clone().expect("spec");
    let dir = std::path::PathBuf::from(&spec.local.as_ref().expect("a local volume").path);
    assert_eq!(await_lines(&dir.join("nodes"), 1).await, "node-1\n");

    // Quiesce, Retain, delete the claim.
    pods.delete("before", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    await_object(&pods, "before", "gone", |p| p.is_none()).await;
    let retain = json!({"spec": {"persistentVolumeReclaimPolicy": "Retain"}});
    volumes
        .patch(&pv_name, &PatchParams::default(), &Patch::Merge(&retain))
        .await
        .expect("retain");
    claims
        .delete("data", &DeleteParams::default())
        .await
        .expect("delete claim");
    await_object(&volumes, &pv_name, "Released", |v| {
        pv_phase(v) == Some("Released")
    })
    .await;

    // The affinity cannot change in place.
    let moved = json!({"spec": {"nodeAffinity": affinity_to("node-2")}});
    let refused = volumes
        .patch(&pv_name, &PatchParams::default(), &Patch::Merge(&moved))
        .await;
    let Err(kube::Error::Api(status)) = refused else {
        panic!("node affinity changed in place: {refused:?}");
    };
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains("spec.nodeAffinity"),
        "{}",
        status.message
    );
    assert!(
        status.message.ends_with("field is immutable"),
        "{}",
        status.message
    );

    // Delete the PV object: it goes, the data stays.
    volumes
        .delete(&pv_name, &DeleteParams::default())
        .await
        .expect("delete pv");
    await_object(&volumes, &pv_name, "gone", |v| v.is_none()).await;
    assert_eq!(
        std::fs::read_to_string(dir.join("nodes")).expect("kept"),
        "node-1\n"
    );

    // Again, on node-2, waiting for the claim's name.
    let again: PersistentVolume = object(json!({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
        "spec": {"capacity": spec.capacity, "accessModes": spec.access_modes,
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "local",
            "volumeMode": "Filesystem", "local": {"path": dir},
            "nodeAffinity": affinity_to("node-2"),
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "namespace": "default", "name": "data"}}}));
    volumes
        .create(&PostParams::default(), &again)
        .await
        .expect("pv again");
    await_object(&volumes, &pv_name, "Available", |v| {
        pv_phase(v) == Some("Available")
    })
    .await;
    claims
        .create(&PostParams::default(), &claim(Some(&pv_name)))
        .await
        .expect("claim again");
    await_object(&claims, "data", "Bound", |c| {
        claim_phase(c) == Some("Bound")
    })
    .await;
    let new_uid = claims.get("data").await.expect("claim").metadata.uid;
    let reference = volumes
        .get(&pv_name)
        .await
        .expect("pv")
        .spec
        .and_then(|s| s.claim_ref);
    assert_eq!(reference.and_then(|r| r.uid), new_uid);

    // The app, unpinned, is scheduled where the volume now is.
    pods.create(&PostParams::default(), &app("after", None))
        .await
        .expect("pod");
    await_object(&pods, "after", "on node-2", |p| {
        p.and_then(node_of) == Some("node-2")
    })
    .await;
    assert_eq!(await_lines(&dir.join("nodes"), 2).await, "node-1\nnode-2\n");
}
