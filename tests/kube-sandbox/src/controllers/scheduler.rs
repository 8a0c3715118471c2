//! The scheduler: binds each pending pod to a node chosen by
//! [`placement::schedule`], or leaves it Pending with an `Unschedulable`
//! condition and a FailedScheduling event saying why, as kube-scheduler does.
//!
//! A pod with unbound WaitForFirstConsumer claims goes through
//! VolumeBinding's PreBind first: its claims are annotated with the chosen
//! node, and the pod is bound to that node only once they all are Bound.
//! Until then the pod stays assumed on the node, without nodeName.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
use serde_json::{json, Value};

use super::placement::{self, Cluster, Decision};
use super::volumes::SELECTED_NODE;
use super::{is_terminating, log_err, name_of, set_condition, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry;

/// A pod waiting in VolumeBinding's PreBind: the node it is assumed on and
/// the claims it waits for.
#[derive(Clone)]
pub(crate) struct Assumed {
    node: String,
    claims: Vec<String>,
}

/// A sandbox's pods waiting in PreBind, by uid (the scheduler's cache of
/// assumed pods).
pub(crate) type Assumptions = Mutex<HashMap<String, Assumed>>;

fn assumed(ctx: &Ctx) -> MutexGuard<'_, HashMap<String, Assumed>> {
    ctx.assumed.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn reconcile(ctx: &Ctx) {
    let (raw_pods, _) = ctx.store.list(registry::get("pods"), None);
    let pending: Vec<&Value> = raw_pods
        .iter()
        .filter(|p| p["spec"]["nodeName"].as_str().is_none_or(str::is_empty) && !is_terminating(p))
        .filter(|p| {
            p["spec"]["schedulerName"]
                .as_str()
                .is_none_or(|s| s == "default-scheduler")
        })
        .collect();
    // A pod that left PreBind without being bound (deleted, or bound by
    // someone else) is assumed no longer.
    assumed(ctx).retain(|uid, _| pending.iter().any(|p| p["metadata"]["uid"] == uid.as_str()));
    if pending.is_empty() {
        return;
    }
    let nodes: Vec<Node> = ctx.store.list_as("nodes");
    let claims = ctx.store.list_as("persistentvolumeclaims");
    let volumes = ctx.store.list_as("persistentvolumes");
    let classes = ctx.store.list_as("storageclasses");
    let mut pods: Vec<Pod> = raw_pods
        .iter()
        .filter_map(|p| serde_json::from_value(p.clone()).ok())
        .collect();
    // Pods waiting in PreBind count on their nodes, as assumed pods do in
    // the scheduler's cache.
    let waiting = assumed(ctx).clone();
    for pod in &mut pods {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if let Some(a) = waiting.get(uid) {
            let spec = pod.spec.get_or_insert_with(Default::default);
            if spec.node_name.as_deref().is_none_or(str::is_empty) {
                spec.node_name = Some(a.node.clone());
            }
        }
    }
    for raw in pending {
        let Ok(pod) = serde_json::from_value::<Pod>(raw.clone()) else {
            continue;
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some(waiting) = waiting.get(&uid) {
            match check_bindings(ctx, raw, waiting, &nodes) {
                Ok(false) => continue,
                Ok(true) => {
                    assumed(ctx).remove(&uid);
                    bind(ctx, raw, &waiting.node);
                    continue;
                }
                // Back to scheduling, as after a failed PreBind.
                Err(e) => {
                    tracing::debug!("pod {uid}: {e}");
                    assumed(ctx).remove(&uid);
                }
            }
        }
        let cluster = Cluster {
            nodes: &nodes,
            pods: &pods,
            claims: &claims,
            volumes: &volumes,
            classes: &classes,
        };
        match placement::schedule(&pod, &cluster) {
            Decision::Bind {
                node,
                select_for_claims,
            } => {
                if select_for_claims.is_empty() || select_node(ctx, raw, &node, &select_for_claims)
                {
                    bind(ctx, raw, &node);
                } else {
                    let waiting = Assumed {
                        node: node.clone(),
                        claims: select_for_claims,
                    };
                    assumed(ctx).insert(uid, waiting);
                }
                // Later pods in this pass see this one on its node (bound,
                // or assumed there).
                if let Some(p) = pods.iter_mut().find(|p| p.metadata.uid == pod.metadata.uid) {
                    p.spec.get_or_insert_with(Default::default).node_name = Some(node);
                }
            }
            Decision::Unschedulable { message } => unschedulable(ctx, raw, &message),
        }
    }
}

/// VolumeBinding's PreBind for claims to provision: each gets the
/// selected-node annotation. True when all of them are bound already.
fn select_node(ctx: &Ctx, pod: &Value, node: &str, claims: &[String]) -> bool {
    let ns = name_of(pod).0;
    let mut all_bound = true;
    for claim in claims {
        let annotated = ctx
            .store
            .modify(registry::get("persistentvolumeclaims"), ns, claim, |c| {
                c["metadata"]["annotations"][SELECTED_NODE] = json!(node);
                true
            });
        all_bound &= log_err("selected node", annotated).is_some_and(|c| fully_bound(&c));
    }
    all_bound
}

/// `checkBindings`: whether the claims a pod waits for are all bound (an
/// error sends the pod back to scheduling: a claim gone, its provisioning
/// given up, or its volume out of the node's reach).
fn check_bindings(
    ctx: &Ctx,
    pod: &Value,
    waiting: &Assumed,
    nodes: &[Node],
) -> Result<bool, String> {
    let ns = name_of(pod).0;
    let node = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(waiting.node.as_str()))
        .ok_or_else(|| format!("node \"{}\" not found", waiting.node))?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut all_bound = true;
    for name in &waiting.claims {
        let claim = ctx
            .store
            .get(registry::get("persistentvolumeclaims"), ns, name)
            .map_err(|e| e.to_string())?;
        if claim["metadata"]["annotations"][SELECTED_NODE] != json!(waiting.node) {
            return Err(format!("provisioning failed for PVC \"{name}\""));
        }
        let volume = claim["spec"]["volumeName"].as_str().unwrap_or_default();
        if !volume.is_empty() {
            let pv = ctx
                .store
                .get(registry::get("persistentvolumes"), "", volume)
                .map_err(|e| e.to_string())?;
            let pv: PersistentVolume = serde_json::from_value(pv).map_err(|e| e.to_string())?;
            if !placement::volume_admits(&pv, &labels) {
                return Err(format!(
                    "pv \"{volume}\" node affinity doesn't match node \"{}\"",
                    waiting.node
                ));
            }
        }
        all_bound &= fully_bound(&claim);
    }
    Ok(all_bound)
}

/// Bound by the PV controller: volumeName, bind-completed and phase Bound.
fn fully_bound(claim: &Value) -> bool {
    claim["spec"]["volumeName"]
        .as_str()
        .is_some_and(|v| !v.is_empty())
        && !claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"].is_null()
        && claim["status"]["phase"] == json!("Bound")
}

fn bind(ctx: &Ctx, pod: &Value, node: &str) {
    let (ns, name) = name_of(pod);
    let bound = ctx.store.modify(registry::get("pods"), ns, name, |p| {
        p["spec"]["nodeName"] = json!(node);
        set_condition(p, json!({"type": "PodScheduled", "status": "True"}));
        true
    });
    if let Some(bound) = log_err("binding", bound) {
        let message = format!("Successfully assigned {ns}/{name} to {node}");
        events::record(
            &ctx.store,
            &Source::new("default-scheduler"),
            &bound,
            EventType::Normal,
            "Scheduled",
            &message,
        );
    }
}

fn unschedulable(ctx: &Ctx, pod: &Value, message: &str) {
    let (ns, name) = name_of(pod);
    let condition = json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message});
    let updated = ctx.store.modify(registry::get("pods"), ns, name, |p| {
        p["status"]["phase"] = json!("Pending");
        set_condition(p, condition)
    });
    if let Some(updated) = log_err("unschedulable", updated) {
        events::record(
            &ctx.store,
            &Source::new("default-scheduler"),
            &updated,
            EventType::Warning,
            "FailedScheduling",
            message,
        );
    }
}
