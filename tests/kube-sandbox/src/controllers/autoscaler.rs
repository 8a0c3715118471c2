//! The horizontal pod autoscaler, after `reconcileAutoscaler` in
//! `pkg/controller/podautoscaler/horizontal.go`, on a cluster without a
//! metrics API (the sandbox serves none):
//!
//! - a target whose scale cannot be read: AbleToScale False FailedGetScale,
//!   and a FailedGetScale event;
//! - a target at 0 replicas (and `minReplicas` not 0): nothing is scaled,
//!   ScalingActive False ScalingDisabled, "scaling is disabled since the
//!   replica count of the target is zero". This is what makes quiescing to
//!   0 safe with an HPA;
//! - above `maxReplicas` or below `minReplicas` (1 when unset): scaled to
//!   the bound through the target's replicas, AbleToScale True
//!   SucceededRescale and a SuccessfulRescale event "New size: N; reason:
//!   Current number of replicas below Spec.MinReplicas";
//! - within the bounds the metrics would decide; without them nothing is
//!   scaled and ScalingActive is False, as on a cluster without
//!   metrics-server (the reason is the real one for the first metric's
//!   type, the message the sandbox's).
//!
//! The status (`currentReplicas`, `desiredReplicas`, `lastScaleTime`,
//! `conditions`) is set as `setStatus` and `setCondition` set it. Scaling
//! behaviors and stabilization windows are not emulated.

use serde_json::{json, Value};

use super::workloads::drop_unset_zeros;
use super::{is_terminating, log_err, name_of, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry;

pub fn reconcile(ctx: &Ctx) {
    let (autoscalers, _) = ctx
        .store
        .list(registry::get("horizontalpodautoscalers"), None);
    for hpa in autoscalers.iter().filter(|h| !is_terminating(h)) {
        sync(ctx, hpa);
    }
}

/// What one pass decided for an autoscaler.
struct Decision {
    current: i64,
    desired: i64,
    rescaled: bool,
    conditions: Vec<(&'static str, bool, String, String)>,
}

fn sync(ctx: &Ctx, hpa: &Value) {
    let (ns, name) = name_of(hpa);
    let target = &hpa["spec"]["scaleTargetRef"];
    let target_name = target["name"].as_str().unwrap_or_default();
    let current = match scale_of(ctx, ns, target) {
        Ok(replicas) => replicas,
        Err(e) => {
            event(ctx, hpa, EventType::Warning, "FailedGetScale", &e);
            let message =
                format!("the HPA controller was unable to get the target's current scale: {e}");
            let able = ("AbleToScale", false, "FailedGetScale".into(), message);
            let current = hpa["status"]["currentReplicas"].as_i64().unwrap_or(0);
            let decision = Decision {
                current,
                desired: current,
                rescaled: false,
                conditions: vec![able],
            };
            return write_status(ctx, hpa, &decision);
        }
    };
    let min = hpa["spec"]["minReplicas"].as_i64().unwrap_or(1);
    let max = hpa["spec"]["maxReplicas"].as_i64().unwrap_or(0);
    let able = (
        "AbleToScale",
        true,
        "SucceededGetScale".to_string(),
        "the HPA controller was able to get the target's current scale".to_string(),
    );
    let (desired, reason) = if current == 0 && min != 0 {
        let disabled = (
            "ScalingActive",
            false,
            "ScalingDisabled".to_string(),
            "scaling is disabled since the replica count of the target is zero".to_string(),
        );
        let decision = Decision {
            current,
            desired: 0,
            rescaled: false,
            conditions: vec![able, disabled],
        };
        return write_status(ctx, hpa, &decision);
    } else if current > max {
        (max, "Current number of replicas above Spec.MaxReplicas")
    } else if current < min {
        (min, "Current number of replicas below Spec.MinReplicas")
    } else {
        let no_metrics = (
            "ScalingActive",
            false,
            metric_failure(hpa).to_string(),
            "the HPA was unable to compute the replica count: kube-sandbox serves no metrics API"
                .to_string(),
        );
        let decision = Decision {
            current,
            desired: current,
            rescaled: false,
            conditions: vec![able, no_metrics],
        };
        return write_status(ctx, hpa, &decision);
    };
    let kind = target["kind"].as_str().unwrap_or_default();
    let Some(res) = scalable(target) else { return };
    let scaled = ctx.store.modify(res, ns, target_name, |o| {
        o["spec"]["replicas"] = json!(desired);
        true
    });
    if log_err("rescale", scaled).is_none() {
        tracing::debug!("{ns}/{name}: could not scale {kind} {target_name}");
        return;
    }
    let message = format!("New size: {desired}; reason: {reason}");
    event(ctx, hpa, EventType::Normal, "SuccessfulRescale", &message);
    let rescaled = (
        "AbleToScale",
        true,
        "SucceededRescale".to_string(),
        format!("the HPA controller was able to update the target scale to {desired}"),
    );
    let decision = Decision {
        current,
        desired,
        rescaled: true,
        conditions: vec![rescaled],
    };
    write_status(ctx, hpa, &decision);
}

/// The served resource with a scale subresource that `scaleTargetRef`
/// names.
fn scalable(target: &Value) -> Option<&'static registry::Resource> {
    let api_version = target["apiVersion"].as_str().unwrap_or_default();
    let kind = target["kind"].as_str().unwrap_or_default();
    registry::by_kind(api_version, kind).filter(|r| r.has_subresource("scale"))
}

/// The target's `spec.replicas`, or why it cannot be read.
fn scale_of(ctx: &Ctx, ns: &str, target: &Value) -> Result<i64, String> {
    let kind = target["kind"].as_str().unwrap_or_default();
    let name = target["name"].as_str().unwrap_or_default();
    let Some(res) = scalable(target) else {
        let api_version = target["apiVersion"].as_str().unwrap_or_default();
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        return Err(format!(
            "unable to determine resource for scale target reference: no matches for kind \"{kind}\" in group \"{group}\""
        ));
    };
    let obj = ctx.store.get(res, ns, name).map_err(|e| e.to_string())?;
    Ok(obj["spec"]["replicas"].as_i64().unwrap_or(1))
}

/// The condition reason `computeReplicasForMetrics` gives when the first
/// metric cannot be read.
fn metric_failure(hpa: &Value) -> &'static str {
    match hpa["spec"]["metrics"][0]["type"].as_str() {
        Some("Pods") => "FailedGetPodsMetric",
        Some("Object") => "FailedGetObjectMetric",
        Some("External") => "FailedGetExternalMetric",
        Some("ContainerResource") => "FailedGetContainerResourceMetric",
        _ => "FailedGetResourceMetric",
    }
}

/// `setStatus` and `setCondition`: a condition's transition time moves
/// only when its status does; `lastScaleTime` only on a rescale.
fn write_status(ctx: &Ctx, hpa: &Value, decision: &Decision) {
    let (ns, name) = name_of(hpa);
    let now = crate::time::now();
    let written = ctx
        .store
        .modify(registry::get("horizontalpodautoscalers"), ns, name, |o| {
            let status = &mut o["status"];
            if !status.is_object() {
                *status = json!({});
            }
            status["desiredReplicas"] = json!(decision.desired);
            status["currentReplicas"] = json!(decision.current);
            // `currentReplicas` is omitempty.
            drop_unset_zeros("HorizontalPodAutoscalerStatus", status);
            if decision.rescaled {
                status["lastScaleTime"] = json!(now);
            }
            for (kind, ok, reason, message) in &decision.conditions {
                set_condition(status, kind, *ok, reason, message, &now);
            }
            true
        });
    log_err("autoscaler status", written);
}

fn set_condition(status: &mut Value, kind: &str, ok: bool, reason: &str, message: &str, now: &str) {
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let Some(list) = status["conditions"].as_array_mut() else {
        return;
    };
    let state = if ok { "True" } else { "False" };
    let since = list
        .iter()
        .find(|c| c["type"] == kind && c["status"] == state)
        .map_or_else(|| json!(now), |c| c["lastTransitionTime"].clone());
    let condition = json!({"type": kind, "status": state, "lastTransitionTime": since,
        "reason": reason, "message": message});
    match list.iter_mut().find(|c| c["type"] == kind) {
        Some(existing) => *existing = condition,
        None => list.push(condition),
    }
}

fn event(ctx: &Ctx, hpa: &Value, kind: EventType, reason: &str, message: &str) {
    let source = Source::new("horizontal-pod-autoscaler");
    events::record(&ctx.store, &source, hpa, kind, reason, message);
}
