//! PersistentVolume binding as kube-controller-manager and kube-scheduler do
//! it, for volmig's data moves: claimRef pre-binding, selectors,
//! WaitForFirstConsumer, requested volumes, reclaim policies and the
//! protection finalizers.

mod common;

use std::time::{Duration, Instant};

use common::k8s::{self, claim_phase, host_path, pod_phase, pv_phase, volume_name};
use common::{await_event, await_object, client, events_for, object, sandbox};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use serde_json::{json, Value};

/// A claim of `size`; `class` None leaves the class to the default one.
fn claim(name: &str, class: Option<&str>, size: &str, extra_spec: Value) -> PersistentVolumeClaim {
    let mut spec =
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}});
    if let Some(class) = class {
        spec["storageClassName"] = json!(class);
    }
    merge(&mut spec, extra_spec);
    object(
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}),
    )
}

/// A static volume (hostPath unless `extra_spec` names another source).
fn volume(name: &str, size: &str, extra_spec: Value) -> PersistentVolume {
    let mut spec = json!({"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain"});
    if extra_spec.get("local").is_none() && extra_spec.get("hostPath").is_none() {
        spec["hostPath"] = json!({"path": format!("/var/lib/kube-sandbox-tests/{name}")});
    }
    merge(&mut spec, extra_spec);
    object(
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}),
    )
}

fn merge(into: &mut Value, extra: Value) {
    for (k, v) in extra.as_object().into_iter().flatten() {
        into[k] = v.clone();
    }
}

fn pod(name: &str, claim: &str, command: &str, restart: &str, extra_spec: Value) -> Pod {
    let mut spec = json!({
        "restartPolicy": restart,
        "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", command],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
    });
    merge(&mut spec, extra_spec);
    object(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}))
}

struct Apis {
    client: kube::Client,
    claims: Api<PersistentVolumeClaim>,
    volumes: Api<PersistentVolume>,
    pods: Api<Pod>,
}

impl Apis {
    async fn new(sb: &kube_sandbox::Sandbox) -> Apis {
        let client = client(sb).await;
        Apis {
            claims: Api::default_namespaced(client.clone()),
            volumes: Api::all(client.clone()),
            pods: Api::default_namespaced(client.clone()),
            client,
        }
    }

    async fn create_claim(&self, c: PersistentVolumeClaim) {
        self.claims
            .create(&PostParams::default(), &c)
            .await
            .expect("create claim");
    }

    async fn create_volume(&self, v: PersistentVolume) {
        self.volumes
            .create(&PostParams::default(), &v)
            .await
            .expect("create volume");
    }

    async fn create_pod(&self, p: Pod) {
        self.pods
            .create(&PostParams::default(), &p)
            .await
            .expect("pod");
    }

    async fn await_pod_phase(&self, name: &str, want: &'static str) {
        await_object(&self.pods, name, want, move |p| pod_phase(p) == Some(want)).await;
    }

    async fn await_claim_phase(&self, name: &str, want: &'static str) {
        await_object(&self.claims, name, want, move |c| {
            claim_phase(c) == Some(want)
        })
        .await;
    }

    /// A provisioned claim, Bound: its volume's name.
    async fn bound_claim(&self, name: &str) -> String {
        self.create_claim(claim(name, Some("standard"), "1Gi", json!({})))
            .await;
        self.await_claim_phase(name, "Bound").await;
        volume_name(&k8s::claim(&self.claims, name).await).expect("volumeName")
    }

    /// Keeps the volume when its claim goes.
    async fn retain(&self, name: &str) {
        let retain = json!({"spec": {"persistentVolumeReclaimPolicy": "Retain"}});
        k8s::patch_volume(&self.volumes, name, retain).await;
    }

    async fn delete_volume(&self, name: &str) {
        self.volumes
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete volume");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_volume_pre_bound_by_claim_ref_rebinds_without_volume_name() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    let pv = api.bound_claim("old").await;
    let dir = host_path(&k8s::volume(&api.volumes, &pv).await);
    std::fs::write(dir.join("keep.txt"), "precious").expect("write");
    api.retain(&pv).await;
    k8s::delete_claim(&api.claims, "old").await;
    k8s::await_volume_phase(&api.volumes, &pv, "Released").await;

    // volmig's move: point the volume at the next claim by name only.
    k8s::patch_volume(
        &api.volumes,
        &pv,
        json!({"spec": {"claimRef": {"name": "new", "uid": null, "resourceVersion": null}}}),
    )
    .await;
    k8s::await_volume_phase(&api.volumes, &pv, "Available").await;
    // Neither the class nor delayed binding matters to a pre-bound volume.
    api.create_claim(claim("new", Some("standard-wffc"), "1Gi", json!({})))
        .await;
    api.await_claim_phase("new", "Bound").await;
    let new = k8s::claim(&api.claims, "new").await;
    assert_eq!(volume_name(&new).as_deref(), Some(pv.as_str()));
    let reference = k8s::volume(&api.volumes, &pv)
        .await
        .spec
        .and_then(|s| s.claim_ref)
        .expect("claimRef");
    assert_eq!(reference.name.as_deref(), Some("new"));
    assert_eq!(reference.uid, new.metadata.uid);
    k8s::await_volume_phase(&api.volumes, &pv, "Bound").await;
    assert_eq!(
        k8s::volume_names(&api.volumes).await,
        vec![pv],
        "nothing provisioned"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).expect("data kept"),
        "precious"
    );
    let annotations = new.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations
            .get("pv.kubernetes.io/bind-completed")
            .map(String::as_str),
        Some("yes")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_completed_pod_holds_its_claim_until_it_is_deleted() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    api.bound_claim("done").await;
    api.create_pod(pod(
        "job",
        "done",
        "echo ok > /data/out",
        "Never",
        json!({}),
    ))
    .await;
    api.await_pod_phase("job", "Succeeded").await;
    k8s::delete_claim(&api.claims, "done").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let held = k8s::claim(&api.claims, "done").await;
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(
        held.metadata.finalizers.unwrap_or_default(),
        ["kubernetes.io/pvc-protection"]
    );
    api.pods
        .delete("job", &DeleteParams::default())
        .await
        .expect("delete pod");
    await_object(&api.claims, "done", "gone", |c| c.is_none()).await;

    // A pod that never got a node holds nothing.
    api.bound_claim("idle").await;
    let nowhere = json!({"nodeSelector": {"kubernetes.io/hostname": "no-such-node"}});
    api.create_pod(pod("stuck", "idle", "sleep 300", "Always", nowhere))
        .await;
    k8s::delete_claim(&api.claims, "idle").await;
    await_object(&api.claims, "idle", "gone", |c| c.is_none()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_for_first_consumer_binds_a_static_volume_only_once_a_pod_is_scheduled() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    let dir = sb.data_dir().join("static-wffc");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("seed"), "from before").expect("seed");
    let source = json!({"storageClassName": "standard-wffc",
        "hostPath": {"path": dir.to_string_lossy()}});
    api.create_volume(volume("static-wffc", "1Gi", source))
        .await;
    k8s::await_volume_phase(&api.volumes, "static-wffc", "Available").await;
    api.create_claim(claim("wffc", Some("standard-wffc"), "1Gi", json!({})))
        .await;
    let message = await_event(&api.client, "default", "wffc", "WaitForFirstConsumer").await;
    assert_eq!(
        message,
        "waiting for first consumer to be created before binding"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    let waiting = k8s::claim(&api.claims, "wffc").await;
    assert_eq!(claim_phase(Some(&waiting)), Some("Pending"));
    assert_eq!(volume_name(&waiting), None);
    let free = k8s::volume(&api.volumes, "static-wffc").await;
    assert_eq!(pv_phase(Some(&free)), Some("Available"));
    assert!(free.spec.and_then(|s| s.claim_ref).is_none());

    api.create_pod(pod(
        "consumer",
        "wffc",
        "cat /data/seed; sleep 300",
        "Always",
        json!({}),
    ))
    .await;
    api.await_pod_phase("consumer", "Running").await;
    let bound = k8s::claim(&api.claims, "wffc").await;
    assert_eq!(claim_phase(Some(&bound)), Some("Bound"));
    assert_eq!(volume_name(&bound).as_deref(), Some("static-wffc"));
    assert_eq!(
        k8s::volume_names(&api.volumes).await,
        ["static-wffc"],
        "nothing provisioned"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_gets_its_node_only_once_its_claims_are_bound() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    api.create_claim(claim("late", Some("standard-wffc"), "1Gi", json!({})))
        .await;
    api.create_pod(pod("user", "late", "sleep 300", "Always", json!({})))
        .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let node = loop {
        assert!(Instant::now() < deadline, "the pod never got a node");
        let pod = api.pods.get("user").await.expect("pod");
        let node = pod.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty());
        let claim = k8s::claim(&api.claims, "late").await;
        if let Some(node) = node {
            // Read after the pod: a node there means the claim was Bound.
            assert_eq!(claim_phase(Some(&claim)), Some("Bound"), "pod bound first");
            break node;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let claim = k8s::claim(&api.claims, "late").await;
    let annotations = claim.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("volume.kubernetes.io/selected-node"),
        Some(&node)
    );
    api.await_pod_phase("user", "Running").await;
    let failed: Vec<_> = events_for(&api.client, "default", "user")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .map(|e| e.message)
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn claims_with_a_selector_bind_only_volumes_it_selects() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    let class = json!({"storageClassName": "standard"});
    api.create_volume(volume("plain", "1Gi", class.clone()))
        .await;
    let mut gold = volume("gold", "5Gi", class);
    gold.metadata.labels = Some([("tier".to_string(), "gold".to_string())].into());
    api.create_volume(gold).await;
    k8s::await_volume_phase(&api.volumes, "plain", "Available").await;
    k8s::await_volume_phase(&api.volumes, "gold", "Available").await;

    let select = |tier: &str| json!({"selector": {"matchLabels": {"tier": tier}}});
    api.create_claim(claim("picky", Some("standard"), "1Gi", select("gold")))
        .await;
    api.await_claim_phase("picky", "Bound").await;
    assert_eq!(
        volume_name(&k8s::claim(&api.claims, "picky").await).as_deref(),
        Some("gold")
    );

    // Nothing selected, and no provisioning for a selector.
    api.create_claim(claim("rare", Some("standard"), "1Gi", select("platinum")))
        .await;
    let message = await_event(&api.client, "default", "rare", "ProvisioningFailed").await;
    assert!(
        message.ends_with("claim Selector is not supported"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        claim_phase(Some(&k8s::claim(&api.claims, "rare").await)),
        Some("Pending")
    );
    let mut names = k8s::volume_names(&api.volumes).await;
    names.sort();
    assert_eq!(names, ["gold", "plain"], "nothing provisioned");
    assert_eq!(
        pv_phase(Some(&k8s::volume(&api.volumes, "plain").await)),
        Some("Available")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_requested_volume_binds_as_soon_as_it_is_freed() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    let pv = api.bound_claim("first").await;
    api.retain(&pv).await;
    k8s::delete_claim(&api.claims, "first").await;
    k8s::await_volume_phase(&api.volumes, &pv, "Released").await;
    api.create_claim(claim(
        "second",
        Some("standard"),
        "1Gi",
        json!({"volumeName": pv}),
    ))
    .await;
    let message = await_event(&api.client, "default", "second", "FailedBinding").await;
    assert_eq!(
        message,
        format!("volume \"{pv}\" already bound to a different claim.")
    );
    assert_eq!(
        claim_phase(Some(&k8s::claim(&api.claims, "second").await)),
        Some("Pending")
    );
    // Freed while Released: bound at once, no Available phase needed.
    k8s::patch_volume(&api.volumes, &pv, json!({"spec": {"claimRef": null}})).await;
    api.await_claim_phase("second", "Bound").await;
    k8s::await_volume_phase(&api.volumes, &pv, "Bound").await;

    // A requested volume that cannot serve the claim says why.
    api.create_volume(volume(
        "small",
        "1Gi",
        json!({"storageClassName": "standard"}),
    ))
    .await;
    api.create_claim(claim(
        "big",
        Some("standard"),
        "5Gi",
        json!({"volumeName": "small"}),
    ))
    .await;
    let message = await_event(&api.client, "default", "big", "VolumeMismatch").await;
    assert_eq!(
        message,
        "Cannot bind to requested volume \"small\": requested PV is too small"
    );

    // Nor does one being deleted.
    let mut doomed = volume("doomed", "1Gi", json!({"storageClassName": "standard"}));
    doomed.metadata.finalizers = Some(vec!["example.com/hold".to_string()]);
    api.create_volume(doomed).await;
    api.delete_volume("doomed").await;
    api.create_claim(claim(
        "late",
        Some("standard"),
        "1Gi",
        json!({"volumeName": "doomed"}),
    ))
    .await;
    let message = await_event(&api.client, "default", "late", "VolumeMismatch").await;
    assert_eq!(
        message,
        "Cannot bind to requested volume \"doomed\": the volume is marked for deletion \"doomed\""
    );
    k8s::patch_volume(
        &api.volumes,
        "doomed",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    await_object(&api.volumes, "doomed", "gone", |v| v.is_none()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_delete_policy_releases_the_volume_before_deleting_it() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    let mut events = Box::pin(watcher(api.volumes.clone(), watcher::Config::default()));
    let pv = api.bound_claim("scratch").await;
    let dir = host_path(&k8s::volume(&api.volumes, &pv).await);
    k8s::delete_claim(&api.claims, "scratch").await;
    let mut phases: Vec<String> = Vec::new();
    let gone = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(event) = events.try_next().await.expect("watch") {
            match event {
                watcher::Event::Apply(v) | watcher::Event::InitApply(v)
                    if v.metadata.name.as_deref() == Some(pv.as_str()) =>
                {
                    let phase = pv_phase(Some(&v)).unwrap_or_default().to_string();
                    if phases.last() != Some(&phase) {
                        phases.push(phase);
                    }
                }
                watcher::Event::Delete(v) if v.metadata.name.as_deref() == Some(pv.as_str()) => {
                    return;
                }
                _ => {}
            }
        }
    })
    .await;
    assert!(gone.is_ok(), "{pv} not deleted; phases {phases:?}");
    assert_eq!(
        phases.last().map(String::as_str),
        Some("Released"),
        "{phases:?}"
    );
    assert!(phases.iter().any(|p| p == "Bound"), "{phases:?}");
    assert!(!phases.iter().any(|p| p == "Available"), "{phases:?}");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[tokio::test(flavor = "multi_thread")]
async fn static_volumes_with_the_delete_policy_fail_as_in_tree_deleters_do() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    let none = json!({"storageClassName": "", "persistentVolumeReclaimPolicy": "Delete"});
    api.create_volume(volume("outside", "1Gi", none.clone()))
        .await;
    let mut local = none.clone();
    local["local"] = json!({"path": "/var/lib/kube-sandbox-tests/local"});
    local["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}});
    api.create_volume(volume("node-local", "1Gi", local)).await;
    for (name, pv) in [("c1", "outside"), ("c2", "node-local")] {
        api.create_claim(claim(name, Some(""), "1Gi", json!({"volumeName": pv})))
            .await;
        api.await_claim_phase(name, "Bound").await;
        k8s::delete_claim(&api.claims, name).await;
    }
    k8s::await_volume_phase(&api.volumes, "outside", "Failed").await;
    k8s::await_volume_phase(&api.volumes, "node-local", "Failed").await;
    let message = |v: PersistentVolume| v.status.and_then(|s| s.message).unwrap_or_default();
    assert_eq!(
        message(k8s::volume(&api.volumes, "outside").await),
        "host_path deleter only supports /tmp/.+ but received provided /var/lib/kube-sandbox-tests/outside"
    );
    let expected = "error getting deleter volume plugin for volume \"node-local\": no deletable volume plugin matched";
    assert_eq!(
        message(k8s::volume(&api.volumes, "node-local").await),
        expected
    );
    let event = await_event(&api.client, "default", "node-local", "VolumeFailedDelete").await;
    assert_eq!(event, expected);

    // Not Bound, so deleting them is not held up.
    for pv in ["outside", "node-local"] {
        api.delete_volume(pv).await;
        await_object(&api.volumes, pv, "gone", |v| v.is_none()).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bound_volume_is_deleted_only_once_released() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    let pv = api.bound_claim("held").await;
    api.retain(&pv).await;
    api.delete_volume(&pv).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = k8s::volume(&api.volumes, &pv).await;
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(pv_phase(Some(&held)), Some("Bound"));
    k8s::delete_claim(&api.claims, "held").await;
    await_object(&api.volumes, &pv, "gone", |v| v.is_none()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_with_no_class_and_no_volume_waits_with_a_normal_event() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    api.create_claim(claim("classless", Some(""), "1Gi", json!({})))
        .await;
    let message = await_event(&api.client, "default", "classless", "FailedBinding").await;
    assert_eq!(
        message,
        "no persistent volumes available for this claim and no storage class is set"
    );
    let events = events_for(&api.client, "default", "classless").await;
    assert!(
        events.iter().all(|e| e.type_.as_deref() == Some("Normal")),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_whose_volume_names_another_claim_is_lost() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    let pv = api.bound_claim("a").await;
    k8s::patch_volume(
        &api.volumes,
        &pv,
        json!({"spec": {"persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"name": "b", "uid": "00000000-0000-0000-0000-000000000000"}}}),
    )
    .await;
    api.await_claim_phase("a", "Lost").await;
    let message = await_event(&api.client, "default", "a", "ClaimMisbound").await;
    assert_eq!(
        message,
        "Two claims are bound to the same volume, this one is bound incorrectly"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_waits_unbound_while_an_external_provisioner_works() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    let classes: Api<StorageClass> = Api::all(api.client.clone());
    let class: StorageClass = object(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "external"},
        "provisioner": "example.com/external", "volumeBindingMode": "WaitForFirstConsumer",
    }));
    classes
        .create(&PostParams::default(), &class)
        .await
        .expect("class");
    api.create_claim(claim("ext", Some("external"), "1Gi", json!({})))
        .await;
    api.create_pod(pod("patient", "ext", "sleep 300", "Always", json!({})))
        .await;
    await_object(&api.claims, "ext", "a selected node", |c| {
        c.and_then(|c| c.metadata.annotations.as_ref())
            .is_some_and(|a| a.contains_key("volume.kubernetes.io/selected-node"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let waiting = api.pods.get("patient").await.expect("pod");
    assert_eq!(waiting.spec.and_then(|s| s.node_name), None);
    let scheduling: Vec<_> = events_for(&api.client, "default", "patient")
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    assert!(scheduling.is_empty(), "{scheduling:?}");
    let ext = k8s::claim(&api.claims, "ext").await;
    let node = ext.metadata.annotations.clone().unwrap_or_default()
        ["volume.kubernetes.io/selected-node"]
        .clone();

    // The provisioner delivers a volume for the claim on that node.
    let dir = sb.data_dir().join("delivered");
    std::fs::create_dir_all(&dir).expect("dir");
    let mut delivered = volume(
        "delivered",
        "1Gi",
        json!({"storageClassName": "external", "hostPath": {"path": dir.to_string_lossy()},
            "claimRef": {"namespace": "default", "name": "ext", "uid": ext.metadata.uid}}),
    );
    delivered.metadata.annotations = Some(
        [(
            "pv.kubernetes.io/provisioned-by".to_string(),
            "example.com/external".to_string(),
        )]
        .into(),
    );
    api.create_volume(delivered).await;
    api.await_pod_phase("patient", "Running").await;
    let running = api.pods.get("patient").await.expect("pod");
    assert_eq!(running.spec.and_then(|s| s.node_name), Some(node));
    assert_eq!(
        volume_name(&k8s::claim(&api.claims, "ext").await).as_deref(),
        Some("delivered")
    );
}
