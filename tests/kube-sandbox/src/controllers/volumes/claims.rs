//! Claims: the pvc-protection controller and claim sync (`syncClaim`).

use serde_json::{json, Value};

use super::binding::{
    bind, check_volume_satisfies_claim, class_of, delay_binding, find_best_match,
    is_volume_bound_to_claim,
};
use super::provision::provision_claim;
use super::{
    annotation, event, has_finalizer, phase, remove_finalizer, str_at, update, View,
    BIND_COMPLETED, BOUND_BY_CONTROLLER, CLAIMS, PVC_PROTECTION, SELECTED_NODE,
};
use crate::controllers::{is_terminating, name_of, Ctx};
use crate::events::EventType;
use crate::store::controller_uid;

// ---------------------------------------------------------------------------
// pvc-protection

/// The pvc-protection controller: a terminating claim loses its finalizer
/// once no pod uses it.
pub(super) fn protect_claim(ctx: &Ctx, view: &mut View, claim: &Value) {
    if !has_finalizer(claim, PVC_PROTECTION) || claim_in_use(view, claim) {
        return;
    }
    update(ctx, view, CLAIMS, claim, |c| {
        remove_finalizer(c, PVC_PROTECTION);
    });
}

/// `podUsesPVC` over every pod: a pod scheduled to a node (whatever its
/// phase: a finished pod holds its claims until it is deleted) that mounts
/// the claim, or owns it as a generic ephemeral volume and has not shut
/// down. Pods not yet scheduled never hold a claim.
fn claim_in_use(view: &View, claim: &Value) -> bool {
    let (ns, name) = name_of(claim);
    view.pods
        .iter()
        .filter(|p| name_of(p).0 == ns && !str_at(p, &["spec", "nodeName"]).is_empty())
        .any(|pod| {
            let mut volumes = pod["spec"]["volumes"].as_array().into_iter().flatten();
            volumes.any(|v| {
                v["persistentVolumeClaim"]["claimName"] == json!(name)
                    || (!pod_is_shut_down(pod)
                        && v["ephemeral"].is_object()
                        && format!("{}-{}", name_of(pod).1, str_at(v, &["name"])) == name
                        && controlled_by(claim, pod))
            })
        })
}

/// Done with by its kubelet or force-deleted: deleted with no grace left.
fn pod_is_shut_down(pod: &Value) -> bool {
    is_terminating(pod) && pod["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(0)
}

fn controlled_by(obj: &Value, owner: &Value) -> bool {
    controller_uid(obj) == Some(&owner["metadata"]["uid"])
}

// ---------------------------------------------------------------------------
// Claims

pub(super) fn sync_claim(ctx: &Ctx, view: &mut View, claim: &Value) {
    if annotation(claim, BIND_COMPLETED).is_some() {
        sync_bound_claim(ctx, view, claim);
    } else {
        sync_unbound_claim(ctx, view, claim);
    }
}

fn sync_unbound_claim(ctx: &Ctx, view: &mut View, claim: &Value) {
    let wanted = str_at(claim, &["spec", "volumeName"]);
    if wanted.is_empty() {
        let delay = delay_binding(claim, &view.classes);
        let found = match find_best_match(claim, &view.volumes, None, delay) {
            Ok(found) => found,
            Err(e) => {
                let (ns, name) = name_of(claim);
                tracing::debug!("error finding PV for claim \"{ns}/{name}\": {e}");
                return;
            }
        };
        // With the scheduler's choice of node, a static volume that node
        // can reach may serve the claim (VolumeBinding's static binding).
        let node = annotation(claim, SELECTED_NODE).unwrap_or_default();
        let found = found.or_else(|| {
            let labels = view.node_labels(node).filter(|_| delay)?;
            find_best_match(claim, &view.volumes, Some(&labels), delay)
                .ok()
                .flatten()
        });
        if let Some(volume) = found.cloned() {
            bind(ctx, view, &volume, claim);
            return;
        }
        if delay && node.is_empty() {
            wait_for_consumer(ctx, view, claim);
        } else if !class_of(claim).is_empty() {
            provision_claim(ctx, view, claim);
        } else {
            event(
                ctx,
                claim,
                EventType::Normal,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set",
            );
        }
        claim_pending(ctx, view, claim);
        return;
    }
    let Some(volume) = view.volume(wanted).cloned() else {
        // Not there (yet): wait for it.
        claim_pending(ctx, view, claim);
        return;
    };
    if volume["spec"]["claimRef"].is_null() {
        match check_volume_satisfies_claim(&volume, claim) {
            Ok(()) => bind(ctx, view, &volume, claim),
            Err(reason) => {
                event(
                    ctx,
                    claim,
                    EventType::Warning,
                    "VolumeMismatch",
                    &format!("Cannot bind to requested volume \"{wanted}\": {reason}"),
                );
                claim_pending(ctx, view, claim);
            }
        }
    } else if is_volume_bound_to_claim(&volume, claim) {
        bind(ctx, view, &volume, claim);
    } else {
        event(
            ctx,
            claim,
            EventType::Warning,
            "FailedBinding",
            &format!("volume \"{wanted}\" already bound to a different claim."),
        );
        if annotation(claim, BOUND_BY_CONTROLLER).is_none() {
            claim_pending(ctx, view, claim);
        }
    }
}

fn sync_bound_claim(ctx: &Ctx, view: &mut View, claim: &Value) {
    let wanted = str_at(claim, &["spec", "volumeName"]);
    if wanted.is_empty() {
        let message =
            "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!";
        return claim_lost(ctx, view, claim, "ClaimLost", message);
    }
    let Some(volume) = view.volume(wanted).cloned() else {
        let message = "Bound claim has lost its PersistentVolume. Data on the volume is lost!";
        return claim_lost(ctx, view, claim, "ClaimLost", message);
    };
    let reference = &volume["spec"]["claimRef"];
    if reference.is_null() || reference["uid"] == claim["metadata"]["uid"] {
        bind(ctx, view, &volume, claim);
    } else {
        let message = "Two claims are bound to the same volume, this one is bound incorrectly";
        claim_lost(ctx, view, claim, "ClaimMisbound", message);
    }
}

/// `updateClaimStatus(Pending, nil)`.
fn claim_pending(ctx: &Ctx, view: &mut View, claim: &Value) {
    let status = &claim["status"];
    if phase(claim) == "Pending" && status["accessModes"].is_null() && status["capacity"].is_null()
    {
        return;
    }
    update(ctx, view, CLAIMS, claim, |c| set_claim_status(c, "Pending"));
}

/// `updateClaimStatusWithEvent(Lost, nil, Warning, ...)`: the event only
/// when the phase changes.
fn claim_lost(ctx: &Ctx, view: &mut View, claim: &Value, reason: &str, message: &str) {
    if phase(claim) == "Lost" {
        return;
    }
    if let Some(lost) = update(ctx, view, CLAIMS, claim, |c| set_claim_status(c, "Lost")) {
        event(ctx, &lost, EventType::Warning, reason, message);
    }
}

/// A claim phase without a volume: access modes and capacity reset.
fn set_claim_status(claim: &mut Value, phase: &str) {
    claim["status"]["phase"] = json!(phase);
    if let Some(status) = claim["status"].as_object_mut() {
        status.remove("accessModes");
        status.remove("capacity");
    }
}

/// `emitEventForUnboundDelayBindingClaim`.
fn wait_for_consumer(ctx: &Ctx, view: &View, claim: &Value) {
    let (ns, name) = name_of(claim);
    let waiting: Vec<&str> = view
        .pods
        .iter()
        .filter(|p| name_of(p).0 == ns && !is_finished(p))
        .filter(|p| str_at(p, &["spec", "nodeName"]).is_empty())
        .filter(|p| {
            p["spec"]["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["persistentVolumeClaim"]["claimName"] == json!(name))
        })
        .map(|p| name_of(p).1)
        .collect();
    let (reason, message) = match waiting.as_slice() {
        [] => (
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding".to_string(),
        ),
        [pod] => (
            "WaitForPodScheduled",
            format!("waiting for pod {pod} to be scheduled"),
        ),
        pods => (
            "WaitForPodScheduled",
            format!("waiting for pods {} to be scheduled", pods.join(",")),
        ),
    };
    event(ctx, claim, EventType::Normal, reason, &message);
}

fn is_finished(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}
