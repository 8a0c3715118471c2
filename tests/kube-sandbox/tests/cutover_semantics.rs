//! The Kubernetes behaviour volmig's cutover relies on, step by step, as
//! `shared/cutover-notes.md` lists it and `pv_controller.go`,
//! `pvc_protection_controller.go` and the workload controllers implement it:
//! quiesce through the scale subresource, Retain, delete the claims, free
//! the new volume for the claim's name, rebind, restore, reclaim the old
//! volume by policy.
//!
//! Where the sandbox must wait for the PV controller to have looked at a
//! claim that should stay Pending, the tests create a throwaway claim and
//! wait for it to bind: every controller pass syncs every claim, so once it
//! is Bound, the claim under test has been synced against the current
//! volumes too.

mod common;

use common::k8s::{
    self, await_lines, bound_volume, claim_phase, is_running, pv_phase, volume_name,
};
use common::{await_event, await_object, client, events_for, object, sandbox};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

struct Apis {
    client: kube::Client,
    claims: Api<PersistentVolumeClaim>,
    volumes: Api<PersistentVolume>,
    pods: Api<Pod>,
    deployments: Api<Deployment>,
}

impl Apis {
    async fn new(sb: &kube_sandbox::Sandbox) -> Apis {
        let client = client(sb).await;
        Apis {
            claims: Api::default_namespaced(client.clone()),
            volumes: Api::all(client.clone()),
            pods: Api::default_namespaced(client.clone()),
            deployments: Api::default_namespaced(client.clone()),
            client,
        }
    }

    /// Creates a claim of the default class ("standard", reclaim policy
    /// Delete), naming `volume` when given.
    async fn create_claim(&self, name: &str, volume: Option<&str>) {
        let mut spec = json!({"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}});
        if let Some(volume) = volume {
            spec["volumeName"] = json!(volume);
            spec["storageClassName"] = json!("standard");
        }
        let claim: PersistentVolumeClaim = object(json!({"apiVersion": "v1",
            "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}));
        self.claims
            .create(&PostParams::default(), &claim)
            .await
            .expect("create claim");
    }

    async fn set_policy(&self, name: &str, policy: &str) {
        let patch = json!({"spec": {"persistentVolumeReclaimPolicy": policy}});
        k8s::patch_volume(&self.volumes, name, patch).await;
    }

    /// Makes sure the PV controller has synced every claim since now: a
    /// new claim is provisioned and bound only by later passes.
    async fn controller_pass(&self, name: &str) {
        self.create_claim(name, None).await;
        bound_volume(&self.claims, &self.volumes, name).await;
    }

    /// `claimRef` of a volume: namespace, name and uid.
    async fn claim_ref(&self, volume: &str) -> (String, String, Option<String>) {
        let pv = k8s::volume(&self.volumes, volume).await;
        let reference = pv.spec.and_then(|s| s.claim_ref).expect("claimRef");
        (
            reference.namespace.unwrap_or_default(),
            reference.name.unwrap_or_default(),
            reference.uid,
        )
    }

    /// Scales the Deployment through its scale subresource, as the cutover
    /// quiesces and restores owners.
    async fn scale(&self, name: &str, replicas: i32) {
        let scale = k8s::scale(&self.deployments, name, replicas).await;
        assert_eq!(scale.spec.and_then(|s| s.replicas), Some(replicas));
    }

    /// Names of the pods, in any phase and terminating or not, that mount
    /// the claim: what the API still returns holds the volume.
    async fn users_of(&self, claim: &str) -> Vec<String> {
        let pods = self.pods.list(&ListParams::default()).await.expect("pods");
        let mounts = |p: &Pod| {
            let volumes = p.spec.as_ref().and_then(|s| s.volumes.as_ref());
            volumes.into_iter().flatten().any(|v| {
                v.persistent_volume_claim
                    .as_ref()
                    .is_some_and(|c| c.claim_name == claim)
            })
        };
        (pods.items.iter().filter(|p| mounts(p)))
            .filter_map(|p| p.metadata.name.clone())
            .collect()
    }

    async fn await_no_users(&self, claim: &str) {
        for _ in 0..600 {
            if self.users_of(claim).await.is_empty() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("pods still use {claim}: {:?}", self.users_of(claim).await);
    }

    /// The one running pod with `label`, once there is exactly one.
    async fn running_pod(&self, label: &str) -> String {
        for _ in 0..600 {
            let list = self.pods.list(&ListParams::default().labels(label)).await;
            let items = list.expect("pods").items;
            if let [pod] = items.as_slice() {
                if is_running(Some(pod)) && pod.metadata.deletion_timestamp.is_none() {
                    return pod.metadata.name.clone().expect("name");
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("never exactly one running pod with {label}");
    }
}

/// A Deployment of one pod that records its name in its volume, `/data`.
fn app(claim: &str) -> Deployment {
    object(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "app"}},
            "template": {"metadata": {"labels": {"app": "app"}}, "spec": {
                "containers": [{"name": "c", "image": "busybox",
                    "command": ["sh", "-c", "echo $HOSTNAME >> /data/owners; exec sleep 300"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}}}),
    )
}

fn annotations(claim: &PersistentVolumeClaim) -> Vec<String> {
    let map = claim.metadata.annotations.clone().unwrap_or_default();
    map.into_keys().collect()
}

/// The whole swap of `cutover-notes.md`: the claim `data` keeps its name
/// and moves from its provisioned volume onto the one provisioned for
/// `data-new`, the app comes back on it, and the old volume goes once its
/// policy is Delete again.
#[tokio::test(flavor = "multi_thread")]
async fn the_swap_moves_a_claim_name_onto_the_new_volume() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    api.create_claim("data", None).await;
    let (pv_a, dir_a) = bound_volume(&api.claims, &api.volumes, "data").await;
    api.create_claim("data-new", None).await;
    let (pv_b, dir_b) = bound_volume(&api.claims, &api.volumes, "data-new").await;
    std::fs::write(dir_b.join("copied"), "the final sync").expect("seed the new volume");
    let old_a = k8s::claim(&api.claims, "data")
        .await
        .metadata
        .uid
        .expect("uid");
    let old_b = k8s::claim(&api.claims, "data-new")
        .await
        .metadata
        .uid
        .expect("uid");
    api.deployments
        .create(&PostParams::default(), &app("data"))
        .await
        .expect("deployment");
    let first = api.running_pod("app=app").await;
    assert_eq!(
        await_lines(&dir_a.join("owners"), 1)
            .await
            .lines()
            .collect::<Vec<_>>(),
        [first.as_str()]
    );

    // Quiesce: scale the top owner to 0, wait until no pod uses the claim.
    api.scale("app", 0).await;
    api.await_no_users("data").await;

    // Retain both, then delete the new claim and the old one: both go at
    // once (nothing uses them) and both volumes are Released, their
    // claimRef still carrying the deleted claims' uids.
    api.set_policy(&pv_a, "Retain").await;
    api.set_policy(&pv_b, "Retain").await;
    k8s::delete_claim(&api.claims, "data-new").await;
    k8s::delete_claim(&api.claims, "data").await;
    await_object(&api.claims, "data", "gone", |c| c.is_none()).await;
    await_object(&api.claims, "data-new", "gone", |c| c.is_none()).await;
    k8s::await_volume_phase(&api.volumes, &pv_a, "Released").await;
    k8s::await_volume_phase(&api.volumes, &pv_b, "Released").await;
    let ns = "default".to_string();
    let reference = (ns.clone(), "data".to_string(), Some(old_a));
    assert_eq!(api.claim_ref(&pv_a).await, reference);
    let reference = (ns.clone(), "data-new".to_string(), Some(old_b.clone()));
    assert_eq!(api.claim_ref(&pv_b).await, reference);
    let volumes = k8s::volume_names(&api.volumes).await;

    // `data` again, naming the new volume: refused while its claimRef names
    // another claim (syncUnboundClaim: FailedBinding, claim Pending), and
    // nothing is provisioned for it.
    api.create_claim("data", Some(&pv_b)).await;
    let message = await_event(&api.client, "default", "data", "FailedBinding").await;
    assert_eq!(
        message,
        format!("volume \"{pv_b}\" already bound to a different claim.")
    );
    assert_eq!(
        claim_phase(Some(&k8s::claim(&api.claims, "data").await)),
        Some("Pending")
    );
    assert_eq!(k8s::volume_names(&api.volumes).await, volumes);

    // Without uid and resourceVersion the volume is Available again, but
    // still reserved for the claim its claimRef names: `data-new`.
    let forget_uid = r#"[{"op": "remove", "path": "/spec/claimRef/uid"},
        {"op": "remove", "path": "/spec/claimRef/resourceVersion"}]"#;
    let patch = ["patch", "pv", &pv_b, "--type=json", "-p", forget_uid];
    common::kubectl_ok(&sb, &patch).await;
    k8s::await_volume_phase(&api.volumes, &pv_b, "Available").await;
    api.controller_pass("barrier-1").await;
    assert_eq!(
        claim_phase(Some(&k8s::claim(&api.claims, "data").await)),
        Some("Pending")
    );
    let reference = (ns.clone(), "data-new".to_string(), None);
    assert_eq!(api.claim_ref(&pv_b).await, reference);

    // Pre-bound to `data` by name, it binds at once: no provisioning, the
    // claimRef completed with the new claim's uid.
    let rename = json!({"spec": {"claimRef": {"name": "data"}}});
    k8s::patch_volume(&api.volumes, &pv_b, rename).await;
    let (bound_to, dir) = bound_volume(&api.claims, &api.volumes, "data").await;
    assert_eq!(
        (bound_to.as_str(), dir.as_path()),
        (pv_b.as_str(), dir_b.as_path())
    );
    k8s::await_volume_phase(&api.volumes, &pv_b, "Bound").await;
    let claim = k8s::claim(&api.claims, "data").await;
    let new_uid = claim.metadata.uid.clone();
    assert_eq!(
        api.claim_ref(&pv_b).await,
        (ns.clone(), "data".to_string(), new_uid.clone())
    );
    // Events of this claim, not of the deleted one of the same name.
    let events = events_for(&api.client, "default", "data").await;
    let events = events.iter().filter(|e| e.involved_object.uid == new_uid);
    let reasons: Vec<_> = events.filter_map(|e| e.reason.clone()).collect();
    assert!(reasons.iter().any(|r| r == "FailedBinding"), "{reasons:?}");
    assert!(
        !reasons.iter().any(|r| r == "ProvisioningSucceeded"),
        "{reasons:?}"
    );
    let mut expected = volumes.clone();
    expected.push(volume_name(&k8s::claim(&api.claims, "barrier-1").await).expect("bound"));
    expected.sort();
    assert_eq!(k8s::volume_names(&api.volumes).await, expected);
    // The user named the volume: only bind-completed is the controller's.
    assert_eq!(annotations(&claim), [BIND_COMPLETED]);
    let pv = k8s::volume(&api.volumes, &pv_b).await;
    let pv_annotations = pv.metadata.annotations.unwrap_or_default();
    assert!(
        !pv_annotations.contains_key(BOUND_BY_CONTROLLER),
        "{pv_annotations:?}"
    );
    let status = claim.status.expect("status");
    assert_eq!(status.capacity.expect("capacity")["storage"].0, "1Gi");

    // Restore: the app's new pod mounts the new volume.
    api.scale("app", 1).await;
    let second = api.running_pod("app=app").await;
    assert_ne!(second, first);
    assert_eq!(
        await_lines(&dir_b.join("owners"), 1)
            .await
            .lines()
            .collect::<Vec<_>>(),
        [second]
    );
    let copied = std::fs::read_to_string(dir_b.join("copied")).expect("copied");
    assert_eq!(copied, "the final sync");
    let old_owners = std::fs::read_to_string(dir_a.join("owners")).expect("owners");
    assert_eq!(old_owners, format!("{first}\n"));

    // Commit: the old volume, Released, goes with its directory once its
    // policy is Delete again.
    assert!(dir_a.exists());
    api.set_policy(&pv_a, "Delete").await;
    await_object(&api.volumes, &pv_a, "gone", |v| v.is_none()).await;
    assert!(!dir_a.exists(), "{} left behind", dir_a.display());
    assert!(dir_b.join("copied").exists());
}

/// Rollback's rebind, and the trap on the way: a Released volume keeps the
/// deleted claim's uid, so a claim of the same name does not get it back
/// (by `volumeName` it waits; without, it gets a new volume provisioned)
/// until the uid is removed, and then it binds with its name kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_released_volume_takes_its_claim_name_back_only_without_the_old_uid() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    api.create_claim("data", None).await;
    let (pv, dir) = bound_volume(&api.claims, &api.volumes, "data").await;
    std::fs::write(dir.join("keep"), "precious").expect("seed");
    api.set_policy(&pv, "Retain").await;
    k8s::delete_claim(&api.claims, "data").await;
    k8s::await_volume_phase(&api.volumes, &pv, "Released").await;

    // The same name without volumeName: FindMatchingVolume skips a volume
    // whose claimRef has another uid, so the class provisions a new one.
    api.create_claim("data", None).await;
    let (other, _) = bound_volume(&api.claims, &api.volumes, "data").await;
    assert_ne!(other, pv);
    assert_eq!(
        pv_phase(Some(&k8s::volume(&api.volumes, &pv).await)),
        Some("Released")
    );
    k8s::delete_claim(&api.claims, "data").await;
    await_object(&api.volumes, &other, "gone", |v| v.is_none()).await;

    // With volumeName: Pending, the same FailedBinding as for a volume of
    // another claim.
    api.create_claim("data", Some(&pv)).await;
    let message = await_event(&api.client, "default", "data", "FailedBinding").await;
    assert_eq!(
        message,
        format!("volume \"{pv}\" already bound to a different claim.")
    );
    assert_eq!(
        claim_phase(Some(&k8s::claim(&api.claims, "data").await)),
        Some("Pending")
    );

    // The name stays, uid and resourceVersion go: Bound to the new claim.
    let forget_uid = json!({"spec": {"claimRef": {"uid": null, "resourceVersion": null}}});
    k8s::patch_volume(&api.volumes, &pv, forget_uid).await;
    let (bound_to, _) = bound_volume(&api.claims, &api.volumes, "data").await;
    assert_eq!(bound_to, pv);
    let uid = k8s::claim(&api.claims, "data").await.metadata.uid;
    assert_eq!(
        api.claim_ref(&pv).await,
        ("default".into(), "data".into(), uid)
    );
    let kept = std::fs::read_to_string(dir.join("keep")).expect("data kept");
    assert_eq!(kept, "precious");
}

/// A claim deleted while pods use it stays Terminating until the last pod
/// is gone: a scheduled Pending pod holds it as a Running one does. A pod
/// the scheduler has not placed does not (`podUsesPVC` looks at scheduled
/// pods only: the kubelet would refuse to start it on a terminating claim,
/// and so does the scheduler).
#[tokio::test(flavor = "multi_thread")]
async fn pvc_protection_holds_a_claim_while_scheduled_pods_use_it() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    api.create_claim("data", None).await;
    bound_volume(&api.claims, &api.volumes, "data").await;
    let pod = |name: &str, command: Value, extra: Value| -> Pod {
        let mut spec = json!({
            "containers": [{"name": "c", "image": "busybox", "command": command,
                "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]});
        for (k, v) in extra.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        object(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}))
    };
    let pods = &api.pods;
    let create = |p: Pod| async move {
        pods.create(&PostParams::default(), &p).await.expect("pod");
    };
    // Running; Pending on a node (no command: CreateContainerError), the
    // same node, as the volume attaches to one node at a time; Pending
    // without a node.
    let node_1 = json!({"nodeSelector": {"kubernetes.io/hostname": "node-1"}});
    create(pod("running", json!(["sleep", "300"]), node_1.clone())).await;
    create(pod("stuck", Value::Null, node_1)).await;
    create(pod(
        "nowhere",
        json!(["sleep", "300"]),
        json!({"nodeSelector": {"disk": "none"}}),
    ))
    .await;
    await_object(&api.pods, "running", "Running", is_running).await;
    await_object(&api.pods, "stuck", "CreateContainerError", |p| {
        common::k8s::waiting_reason(p) == Some("CreateContainerError")
    })
    .await;
    await_event(&api.client, "default", "nowhere", "FailedScheduling").await;
    assert_eq!(
        common::k8s::pod_phase(Some(&api.pods.get("stuck").await.expect("stuck"))),
        Some("Pending")
    );

    k8s::delete_claim(&api.claims, "data").await;
    let held = |c: Option<&PersistentVolumeClaim>| {
        c.is_some_and(|c| c.metadata.deletion_timestamp.is_some())
    };
    await_object(&api.claims, "data", "Terminating", held).await;
    let zero = DeleteParams::default().grace_period(0);
    api.pods.delete("running", &zero).await.expect("delete");
    await_object(&api.pods, "running", "gone", |p| p.is_none()).await;
    api.controller_pass("barrier-1").await;
    let claim = k8s::claim(&api.claims, "data").await;
    assert!(claim.metadata.deletion_timestamp.is_some());
    let finalizers = claim.metadata.finalizers.unwrap_or_default();
    assert_eq!(finalizers, ["kubernetes.io/pvc-protection"]);

    // The scheduled Pending pod was the last holder.
    api.pods.delete("stuck", &zero).await.expect("delete");
    await_object(&api.claims, "data", "gone", |c| c.is_none()).await;
    assert!(api.pods.get_opt("nowhere").await.expect("get").is_some());
}

/// A StatefulSet of `replicas` whose pods record their name in their claim
/// `data` (of `class`) when they start.
fn db(replicas: i32, class: &str) -> StatefulSet {
    object(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {
            "replicas": replicas, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{
                "name": "c", "image": "busybox",
                "command": ["sh", "-c", "echo $HOSTNAME >> /data/starts; exec sleep 300"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "storageClassName": class, "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}],
        },
    }))
}

/// Waits until the set reports `ready` Ready replicas of its update
/// revision; the set.
async fn await_ready_set(sets: &Api<StatefulSet>, ready: i32) -> StatefulSet {
    let settled = move |s: Option<&StatefulSet>| {
        let status = s.and_then(|s| s.status.as_ref());
        status.is_some_and(|st| {
            st.ready_replicas == Some(ready)
                && st.replicas == ready
                && st.current_revision.is_some()
                && st.current_revision == st.update_revision
        })
    };
    await_object(sets, "db", "ready", settled).await;
    sets.get("db").await.expect("statefulset")
}

/// How a pod is, for telling whether it was replaced or restarted: uid,
/// revision label, restart count.
async fn pod_state(pods: &Api<Pod>, name: &str) -> (String, String, i32) {
    let pod = pods.get(name).await.expect("pod");
    let uid = pod.metadata.uid.clone().expect("uid");
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let revision = labels["controller-revision-hash"].clone();
    let restarts = common::k8s::container(Some(&pod)).map_or(-1, |c| c.restart_count);
    (uid, revision, restarts)
}

/// `spec.volumeClaimTemplates` is immutable (422 with the API server's
/// message); to change a template's class, the set is deleted with Orphan
/// propagation, which leaves its pods and claims, and created again: it
/// adopts the pods by selector without restarting them (the revision hash
/// covers the pod template only), keeps the existing claims, and gives only
/// new ordinals claims of the new class.
#[tokio::test(flavor = "multi_thread")]
async fn a_statefulset_recreated_with_new_claim_templates_adopts_its_pods() {
    let sb = sandbox().await;
    let api = Apis::new(&sb).await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client.clone());
    sets.create(&PostParams::default(), &db(2, "standard"))
        .await
        .expect("statefulset");
    let old = await_ready_set(&sets, 2).await;
    let before = [
        pod_state(&api.pods, "db-0").await,
        pod_state(&api.pods, "db-1").await,
    ];
    let (_, dir_0) = bound_volume(&api.claims, &api.volumes, "data-db-0").await;
    assert_eq!(
        await_lines(&dir_0.join("starts"), 1)
            .await
            .lines()
            .collect::<Vec<_>>(),
        ["db-0"]
    );

    let change = json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
        "spec": {"storageClassName": "standard-wffc", "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}}]}});
    let refused = sets
        .patch("db", &PatchParams::default(), &Patch::Merge(change))
        .await;
    let Err(kube::Error::Api(status)) = refused else {
        panic!("a claim template change was accepted: {refused:?}");
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "StatefulSet.apps \"db\" is invalid: spec: Forbidden: updates to statefulset spec for \
         fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', \
         'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
    );

    sets.delete("db", &DeleteParams::orphan())
        .await
        .expect("orphan delete");
    await_object(&sets, "db", "gone", |s| s.is_none()).await;
    for name in ["db-0", "db-1"] {
        let pod = api.pods.get(name).await.expect("the pod outlives its set");
        assert!(pod.metadata.owner_references.is_none(), "{name}: {pod:?}");
        assert!(pod.metadata.deletion_timestamp.is_none());
    }

    sets.create(&PostParams::default(), &db(2, "standard-wffc"))
        .await
        .expect("statefulset again");
    let new = await_ready_set(&sets, 2).await;
    let status = new.status.clone().expect("status");
    assert_eq!(
        status.update_revision,
        old.status.expect("status").update_revision
    );
    let new_uid = new.metadata.uid.clone();
    for (name, was) in ["db-0", "db-1"].into_iter().zip(before) {
        assert_eq!(
            pod_state(&api.pods, name).await,
            was,
            "{name} was replaced or restarted"
        );
        let pod = api.pods.get(name).await.expect("pod");
        let refs = pod.metadata.owner_references.unwrap_or_default();
        let controllers: Vec<_> = refs.iter().filter(|r| r.controller == Some(true)).collect();
        assert_eq!(controllers.len(), 1, "{name}: {refs:?}");
        assert_eq!(
            (controllers[0].kind.as_str(), Some(&controllers[0].uid)),
            ("StatefulSet", new_uid.as_ref())
        );
    }
    // The containers did not start again.
    let starts = std::fs::read_to_string(dir_0.join("starts")).expect("starts");
    assert_eq!(starts, "db-0\n");
    let class = |c: PersistentVolumeClaim| c.spec.and_then(|s| s.storage_class_name);
    assert_eq!(
        class(k8s::claim(&api.claims, "data-db-1").await).as_deref(),
        Some("standard")
    );

    // A new ordinal's claim follows the new template.
    let patch = json!({"spec": {"replicas": 3}});
    sets.patch_scale("db", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("scale");
    await_ready_set(&sets, 3).await;
    assert_eq!(
        class(k8s::claim(&api.claims, "data-db-2").await).as_deref(),
        Some("standard-wffc")
    );
}
