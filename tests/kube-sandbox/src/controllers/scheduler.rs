//! The scheduler: binds each pending pod to a node chosen by
//! [`placement::schedule`], or leaves it Pending with an `Unschedulable`
//! condition and a FailedScheduling event saying why, as kube-scheduler does.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use super::placement::{self, Cluster, Decision};
use super::volumes::SELECTED_NODE;
use super::{is_terminating, log_err, name_of, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry;

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
    if pending.is_empty() {
        return;
    }
    let nodes = ctx.store.list_as("nodes");
    let claims = ctx.store.list_as("persistentvolumeclaims");
    let volumes = ctx.store.list_as("persistentvolumes");
    let classes = ctx.store.list_as("storageclasses");
    let mut pods: Vec<Pod> = ctx.store.list_as("pods");
    for raw in pending {
        let Ok(pod) = serde_json::from_value::<Pod>(raw.clone()) else {
            continue;
        };
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
                bind(ctx, raw, &node, &select_for_claims);
                // Later pods in this pass see this one on its node.
                if let Some(p) = pods.iter_mut().find(|p| p.metadata.uid == pod.metadata.uid) {
                    p.spec.get_or_insert_with(Default::default).node_name = Some(node);
                }
            }
            Decision::Unschedulable { message } => unschedulable(ctx, raw, &message),
        }
    }
}

fn bind(ctx: &Ctx, pod: &Value, node: &str, claims: &[String]) {
    let (ns, name) = name_of(pod);
    for claim in claims {
        log_err(
            "selected node",
            ctx.store
                .modify(registry::get("persistentvolumeclaims"), ns, claim, |c| {
                    c["metadata"]["annotations"][SELECTED_NODE] = json!(node);
                    true
                }),
        );
    }
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

/// Sets a pod condition by type; true when something changed. The
/// transition time moves only when the status does.
pub fn set_condition(pod: &mut Value, mut condition: Value) -> bool {
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let Some(list) = pod["status"]["conditions"].as_array_mut() else {
        return false;
    };
    let same_type = list.iter_mut().find(|c| c["type"] == condition["type"]);
    match same_type {
        Some(existing) => {
            let keep_time = existing["status"] == condition["status"];
            condition["lastTransitionTime"] = if keep_time {
                existing["lastTransitionTime"].clone()
            } else {
                json!(crate::time::now())
            };
            condition["lastProbeTime"] = Value::Null;
            if *existing == condition {
                return false;
            }
            *existing = condition;
        }
        None => {
            condition["lastTransitionTime"] = json!(crate::time::now());
            condition["lastProbeTime"] = Value::Null;
            list.push(condition);
        }
    }
    true
}
