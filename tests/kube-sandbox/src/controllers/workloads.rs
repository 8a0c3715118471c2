//! Deployments, ReplicaSets, ReplicationControllers and StatefulSets:
//! enough of their controllers to scale pods up and down, replace deleted
//! pods, roll a changed template and keep a StatefulSet's stable pod and
//! claim names. Each adopts the orphans its selector matches and releases
//! what it no longer selects ([`super::ownership`]).
//!
//! Simplified: a Deployment rolls by scaling its old ReplicaSet to zero as
//! the new one is created (no surge accounting); a StatefulSet rolls one pod
//! at a time from the highest ordinal once all pods are ready. The
//! ReplicationController is the ReplicaSet's controller with an equality
//! selector, as `pkg/controller/replication` wraps the ReplicaSet's.

use serde_json::{json, Value};

use super::ownership::claim;
use super::pod_control::{create_pods, Controller, Outcome};
use super::{is_terminating, log_err, name_of, Ctx};
use crate::api::protobuf::omits_zero;
use crate::registry;
use crate::store::{controller_uid, DeleteOptions};

pub const TEMPLATE_HASH: &str = "pod-template-hash";
pub const REVISION: &str = "controller-revision-hash";

pub fn reconcile(ctx: &Ctx) {
    let list = |p: &str| ctx.store.list(registry::get(p), None).0;
    for deployment in list("deployments") {
        if !is_terminating(&deployment) {
            sync_deployment(ctx, &deployment);
        }
    }
    let pods = list("pods");
    for rs in list("replicasets") {
        if !is_terminating(&rs) {
            sync_replicaset(ctx, "replicasets", &rs, &rs["spec"]["selector"], &pods);
        }
    }
    for rc in list("replicationcontrollers") {
        if !is_terminating(&rc) {
            // An equality selector is a LabelSelector's matchLabels.
            let selector = json!({"matchLabels": rc["spec"]["selector"]});
            sync_replicaset(ctx, "replicationcontrollers", &rc, &selector, &pods);
        }
    }
    for sts in list("statefulsets") {
        if !is_terminating(&sts) {
            super::workloads_sts::sync(ctx, &sts, &pods);
        }
    }
}

/// A short stable hash of a pod template, as the controllers label pods.
/// Stable across builds and toolchains (std's hasher is not), so pod and
/// ReplicaSet names do not change with the compiler.
pub fn template_hash(template: &Value) -> String {
    let digest = blake3::hash(template.to_string().as_bytes());
    digest.to_hex()[..10].to_string()
}

pub fn owner_ref(owner: &Value) -> Value {
    json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// A pod from `owner`'s `spec.template`, as `GetPodFromTemplate` makes
/// it: the template's annotations, `labels`, `spec` (the template's, or the
/// controller's edit of it) and `owner` as its controller. The caller names
/// it (`generateName` or `name`) and adds what else its controller sets.
pub fn pod_from_template(owner: &Value, labels: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "labels": labels,
            "annotations": owner["spec"]["template"]["metadata"]["annotations"],
            "ownerReferences": [owner_ref(owner)],
        },
        "spec": spec,
    })
}

pub fn owned_by<'a>(owner: &Value, items: &'a [Value]) -> Vec<&'a Value> {
    let uid = &owner["metadata"]["uid"];
    items
        .iter()
        .filter(|i| controller_uid(i) == Some(uid))
        .collect()
}

pub fn is_active(pod: &Value) -> bool {
    let phase = pod["status"]["phase"].as_str().unwrap_or_default();
    !is_terminating(pod) && phase != "Succeeded" && phase != "Failed"
}

pub fn is_ready(pod: &Value) -> bool {
    is_active(pod)
        && pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// A workload's `spec.replicas` (1 when unset, never below 0).
pub(super) fn replicas(obj: &Value) -> i64 {
    obj["spec"]["replicas"].as_i64().unwrap_or(1).max(0)
}

fn sync_deployment(ctx: &Ctx, deployment: &Value) {
    let (ns, name) = name_of(deployment);
    let sets = registry::get("replicasets");
    let (all, _) = ctx.store.list(sets, Some(ns));
    let selector = &deployment["spec"]["selector"];
    let Some(owned) = claim(ctx, deployment, "replicasets", &all, selector, |_| true) else {
        return;
    };
    let hash = template_hash(&deployment["spec"]["template"]);
    let current_name = format!("{name}-{hash}");
    let want = replicas(deployment);
    for rs in &owned {
        let rs_name = name_of(rs).1;
        let target = if rs_name == current_name { want } else { 0 };
        if replicas(rs) != target {
            log_err(
                "scale replicaset",
                ctx.store.modify(sets, ns, rs_name, |r| {
                    r["spec"]["replicas"] = json!(target);
                    true
                }),
            );
        }
    }
    if !owned.iter().any(|rs| name_of(rs).1 == current_name) {
        let mut template = deployment["spec"]["template"].clone();
        template["metadata"]["labels"][TEMPLATE_HASH] = json!(hash);
        let mut selector = deployment["spec"]["selector"].clone();
        selector["matchLabels"][TEMPLATE_HASH] = json!(hash);
        let rs = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": current_name,
                "labels": template["metadata"]["labels"],
                "ownerReferences": [owner_ref(deployment)],
            },
            "spec": {"replicas": want, "selector": selector, "template": template},
        });
        log_err("create replicaset", ctx.store.create(sets, ns, rs));
    }
    let (all, _) = ctx.store.list(sets, Some(ns));
    let owned = owned_by(deployment, &all);
    let sum = |field: &str| {
        owned
            .iter()
            .map(|r| r["status"][field].as_i64().unwrap_or(0))
            .sum::<i64>()
    };
    let updated = owned
        .iter()
        .find(|r| name_of(r).1 == current_name)
        .and_then(|r| r["status"]["replicas"].as_i64())
        .unwrap_or(0);
    let (total, ready) = (sum("replicas"), sum("readyReplicas"));
    let generation = deployment["metadata"]["generation"].clone();
    let available = if ready >= want { "True" } else { "False" };
    let mut status = json!({
        "observedGeneration": generation,
        "replicas": total,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": (want - ready).max(0),
        "conditions": [{"type": "Available", "status": available, "reason": if available == "True" { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" }}],
    });
    // `getReplicaFailures`: a set's ReplicaFailure shows on the Deployment.
    if let Some(failure) = owned.iter().find_map(|rs| failure_condition(rs)) {
        if let Some(conditions) = status["conditions"].as_array_mut() {
            conditions.push(failure.clone());
        }
    }
    write_status(ctx, "deployments", deployment, status);
}

/// A ReplicaSet or ReplicationController (`plural`): its active pods,
/// adopted by `selector`, made `spec.replicas` in number.
fn sync_replicaset(ctx: &Ctx, plural: &str, rs: &Value, selector: &Value, pods: &[Value]) {
    let (ns, name) = name_of(rs);
    let pod_res = registry::get("pods");
    // `FilterActivePods`, then `claimPods`.
    let active: Vec<Value> = pods.iter().filter(|p| is_active(p)).cloned().collect();
    let Some(active) = claim(ctx, rs, "pods", &active, selector, |_| true) else {
        return;
    };
    let want = replicas(rs) as usize;
    let mut created = Outcome::Created;
    if active.len() < want {
        let template = &rs["spec"]["template"];
        let labels = template["metadata"]["labels"].clone();
        let mut pod = pod_from_template(rs, labels, template["spec"].clone());
        pod["metadata"]["generateName"] = json!(format!("{name}-"));
        let component = match plural {
            "replicationcontrollers" => "replication-controller",
            _ => "replicaset-controller",
        };
        let pods = vec![pod; want - active.len()];
        created = create_pods(ctx, Controller::Generic(component), rs, &pods).1;
    } else if active.len() > want {
        // Unscheduled and not-ready pods go first, then the newest.
        let mut victims = active.clone();
        victims.sort_by_key(|p| {
            (
                !p["spec"]["nodeName"].as_str().is_none_or(str::is_empty),
                is_ready(p),
                std::cmp::Reverse(
                    p["metadata"]["creationTimestamp"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ),
            )
        });
        for pod in victims.into_iter().take(active.len() - want) {
            log_err(
                "scale down",
                ctx.store
                    .delete(pod_res, ns, name_of(&pod).1, &DeleteOptions::default()),
            );
        }
    }
    // As the pass began: pods created or deleted now count on the next.
    let ready = active.iter().filter(|p| is_ready(p)).count();
    let mut status = json!({
        "observedGeneration": rs["metadata"]["generation"],
        "replicas": active.len(),
        "fullyLabeledReplicas": active.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
    });
    if let Some(failure) = replica_failure(rs, &created) {
        status["conditions"] = json!([failure]);
    }
    write_status(ctx, plural, rs, status);
}

/// The `ReplicaFailure` condition `calculateStatus` keeps: set (once, its
/// first message kept) when a create failed, kept while the set backs off,
/// gone once creating works again.
fn replica_failure(rs: &Value, created: &Outcome) -> Option<Value> {
    let existing = failure_condition(rs).cloned();
    match created {
        Outcome::Created => None,
        Outcome::BackingOff => existing,
        Outcome::Failed(message) => existing.or_else(|| {
            Some(json!({
                "type": REPLICA_FAILURE,
                "status": "True",
                "reason": "FailedCreate",
                "message": message,
                "lastTransitionTime": crate::time::now(),
            }))
        }),
    }
}

const REPLICA_FAILURE: &str = "ReplicaFailure";

fn failure_condition(obj: &Value) -> Option<&Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == REPLICA_FAILURE)
}

/// Leaves out of `status`, a Go struct `message` (`DeploymentStatus`), the
/// fields at 0 or false that Go's JSON omits (`omitempty`).
pub fn drop_unset_zeros(message: &str, status: &mut Value) {
    if let Some(fields) = status.as_object_mut() {
        fields.retain(|field, v| v != &json!(0) || !omits_zero(message, field));
    }
}

/// Writes a workload's status, the zero counts the API omits
/// (`omitempty`) left out as a real server returns them: a Deployment
/// scaled to 0 has no `status.replicas`, a ReplicaSet no `readyReplicas`.
/// None when the write failed.
pub fn write_status(ctx: &Ctx, plural: &str, obj: &Value, mut status: Value) -> Option<()> {
    let message = format!("{}Status", obj["kind"].as_str().unwrap_or_default());
    drop_unset_zeros(&message, &mut status);
    let (ns, name) = name_of(obj);
    log_err(
        "workload status",
        // An unchanged status is no write: `modify` compares.
        ctx.store.modify(registry::get(plural), ns, name, |o| {
            o["status"] = status;
            true
        }),
    )
    .map(|_| ())
}
