//! Who must stop for a cutover, and how: the first piece of issue 16.
//!
//! Every pod that mounts the claim is followed up its chain of controllers
//! (`ownerReferences` with `controller: true`) to the owner at the top,
//! whose `scale` subresource stops it for good: Pod → ReplicaSet →
//! Deployment, Pod → StatefulSet, Pod → ReplicationController. Scaling a
//! ReplicaSet that a Deployment owns would be undone by the Deployment, so
//! the Deployment is scaled. Consumers that scaling cannot stop — a pod of
//! no controller, a DaemonSet's, a Job's, one under a custom resource
//! whose controller would scale it back, a workload that KEDA or a GitOps
//! controller would scale up again — refuse the cutover before anything
//! changes, each named with what to do. An HPA is no obstacle: it does not
//! scale a target at 0 replicas (the HPA controller's "scaling is
//! disabled" case), and restoring uses the recorded replicas, not the
//! HPA's minimum (../shared/cutover-notes.md).
//!
//! Pure: the cluster's objects in, a [`Quiesce`] plan or the list of
//! [`Unstoppable`] consumers out.

#[cfg(test)]
mod tests;

use std::fmt;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::{Deserialize, Serialize};

/// What the quiesce planner reads, all in the claim's namespace.
#[derive(Debug, Clone, Default)]
pub struct Workloads {
    pub pods: Vec<Pod>,
    pub replica_sets: Vec<ReplicaSet>,
    pub deployments: Vec<Deployment>,
    pub stateful_sets: Vec<StatefulSet>,
    pub replication_controllers: Vec<ReplicationController>,
    pub autoscalers: Vec<HorizontalPodAutoscaler>,
    /// KEDA `ScaledObject`s (keda.sh/v1alpha1), when the CRD exists.
    pub scaled_objects: Vec<serde_json::Value>,
}

/// A workload kind the cutover scales through its `scale` subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ScalableKind {
    Deployment,
    StatefulSet,
    ReplicaSet,
    ReplicationController,
}

impl ScalableKind {
    fn of(kind: &str) -> Option<ScalableKind> {
        Some(match kind {
            "Deployment" => ScalableKind::Deployment,
            "StatefulSet" => ScalableKind::StatefulSet,
            "ReplicaSet" => ScalableKind::ReplicaSet,
            "ReplicationController" => ScalableKind::ReplicationController,
            _ => return None,
        })
    }
}

/// One owner to scale to zero, and back to `replicas` afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTarget {
    pub kind: ScalableKind,
    pub name: String,
    /// `spec.replicas` now (1 when unset, as the API server defaults it):
    /// what Restore scales back to.
    pub replicas: i32,
    /// The pods of this owner that mount the claim.
    pub pods: Vec<String>,
    /// An HPA that targets it (harmless at 0 replicas; named in the plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<String>,
}

/// How a claim's consumers are stopped: each owner once, in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quiesce {
    pub targets: Vec<ScaleTarget>,
}

/// A consumer the cutover cannot stop by scaling, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unstoppable {
    /// `Pod web-0`, `DaemonSet agent`, ...
    pub consumer: String,
    pub why: String,
    pub what_to_do: String,
}

impl fmt::Display for Unstoppable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; {}", self.consumer, self.why, self.what_to_do)
    }
}

const STOP_YOURSELF: &str = "stop it yourself, then run the cutover on a claim no pod mounts";

/// The owners to scale so that no pod mounts `claim`, or every consumer
/// that scaling cannot stop.
pub fn plan(claim: &str, w: &Workloads) -> Result<Quiesce, Vec<Unstoppable>> {
    let mut targets: Vec<ScaleTarget> = Vec::new();
    let mut refused = Vec::new();
    for pod in w.pods.iter().filter(|p| mounts(p, claim) && !finished(p)) {
        let pod_name = name(&pod.metadata);
        match top_owner(pod, w) {
            Ok(target) => match targets
                .iter_mut()
                .find(|t| t.kind == target.kind && t.name == target.name)
            {
                Some(known) => known.pods.push(pod_name),
                None => targets.push(ScaleTarget {
                    pods: vec![pod_name],
                    ..target
                }),
            },
            Err(u) => {
                if !refused.contains(&u) {
                    refused.push(u);
                }
            }
        }
    }
    for target in &mut targets {
        target.pods.sort();
        if let Some(u) = scaled_back_by(target, w) {
            refused.push(u);
        }
        target.autoscaler = w
            .autoscalers
            .iter()
            .find(|h| {
                let r = &h.spec.as_ref().map(|s| s.scale_target_ref.clone());
                r.as_ref().is_some_and(|r| {
                    r.name == target.name && ScalableKind::of(&r.kind) == Some(target.kind)
                })
            })
            .map(|h| name(&h.metadata));
    }
    if !refused.is_empty() {
        return Err(refused);
    }
    targets.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    Ok(Quiesce { targets })
}

/// Whether `pod` mounts `claim` (directly: ephemeral volumes name their own
/// claims).
pub fn mounts(pod: &Pod, claim: &str) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .any(|c| c.claim_name == claim)
}

/// A pod that has ended no longer holds its volume (pvc-protection lets the
/// claim go).
pub fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn name(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// The owner that controls an object (`controller: true`), if any.
pub(super) fn controller(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// The owner at the top of `pod`'s chain that scaling stops.
fn top_owner(pod: &Pod, w: &Workloads) -> Result<ScaleTarget, Unstoppable> {
    let pod_name = name(&pod.metadata);
    let refuse = |consumer: String, why: String, what: &str| Unstoppable {
        consumer,
        why,
        what_to_do: what.to_string(),
    };
    let Some(owner) = controller(&pod.metadata) else {
        return Err(refuse(
            format!("Pod {pod_name}"),
            "no controller owns it, so nothing can stop it and start it again".into(),
            STOP_YOURSELF,
        ));
    };
    let target = |kind, meta: &ObjectMeta, replicas: Option<i32>| ScaleTarget {
        kind,
        name: name(meta),
        replicas: replicas.unwrap_or(1),
        pods: Vec::new(),
        autoscaler: None,
    };
    let missing = |kind: &str, n: &str| {
        refuse(
            format!("{kind} {n}"),
            format!("it owns pod {pod_name} but could not be read"),
            "check that it exists and that you may read it, then run the command again",
        )
    };
    match owner.kind.as_str() {
        "ReplicaSet" => {
            let rs = w
                .replica_sets
                .iter()
                .find(|r| name(&r.metadata) == owner.name)
                .ok_or_else(|| missing("ReplicaSet", &owner.name))?;
            match controller(&rs.metadata) {
                None => Ok(target(ScalableKind::ReplicaSet, &rs.metadata, rs.spec.as_ref().and_then(|s| s.replicas))),
                Some(up) if up.kind == "Deployment" => {
                    let d = w
                        .deployments
                        .iter()
                        .find(|d| name(&d.metadata) == up.name)
                        .ok_or_else(|| missing("Deployment", &up.name))?;
                    Ok(target(ScalableKind::Deployment, &d.metadata, d.spec.as_ref().and_then(|s| s.replicas)))
                }
                Some(up) => Err(refuse(
                    format!("ReplicaSet {}", owner.name),
                    format!(
                        "its controller is {} {} ({}), which would scale it back up",
                        up.kind, up.name, up.api_version
                    ),
                    "scale that resource to zero yourself (or stop its controller), then run the cutover on a claim no pod mounts",
                )),
            }
        }
        "StatefulSet" => {
            let s = w
                .stateful_sets
                .iter()
                .find(|s| name(&s.metadata) == owner.name)
                .ok_or_else(|| missing("StatefulSet", &owner.name))?;
            // Scaled to zero, it would delete the claims of the replicas it
            // removes, and with them a Delete volume and its data.
            let deletes_claims = s
                .spec
                .as_ref()
                .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref())
                .and_then(|p| p.when_scaled.as_deref())
                == Some("Delete");
            if deletes_claims {
                return Err(refuse(
                    format!("StatefulSet {}", owner.name),
                    "its persistentVolumeClaimRetentionPolicy.whenScaled is Delete: scaled to zero, it would delete its claims".to_string(),
                    "set whenScaled to Retain first (kubectl patch statefulset NAME -p '{\"spec\":{\"persistentVolumeClaimRetentionPolicy\":{\"whenScaled\":\"Retain\"}}}'), then try again",
                ));
            }
            match controller(&s.metadata) {
                None => Ok(target(ScalableKind::StatefulSet, &s.metadata, s.spec.as_ref().and_then(|s| s.replicas))),
                Some(up) => Err(refuse(
                    format!("StatefulSet {}", owner.name),
                    format!("its controller is {} {}, which would scale it back up", up.kind, up.name),
                    "scale that resource to zero yourself, then run the cutover on a claim no pod mounts",
                )),
            }
        }
        "ReplicationController" => {
            let rc = w
                .replication_controllers
                .iter()
                .find(|r| name(&r.metadata) == owner.name)
                .ok_or_else(|| missing("ReplicationController", &owner.name))?;
            Ok(target(
                ScalableKind::ReplicationController,
                &rc.metadata,
                rc.spec.as_ref().and_then(|s| s.replicas),
            ))
        }
        "DaemonSet" => Err(refuse(
            format!("DaemonSet {}", owner.name),
            "a DaemonSet cannot be scaled to zero".into(),
            "remove its pods from the nodes (a nodeSelector that matches none) or delete it, then run the cutover on a claim no pod mounts",
        )),
        "Job" => Err(refuse(
            format!("Job {}", owner.name),
            format!("its pod {pod_name} runs to completion and cannot be scaled down and back"),
            "wait for the Job to finish (suspend its CronJob, if any), then run the cutover",
        )),
        other => Err(refuse(
            format!("{other} {}", owner.name),
            format!(
                "a controller of kind {other} ({}) owns pod {pod_name}; volmig cannot stop it",
                owner.api_version
            ),
            STOP_YOURSELF,
        )),
    }
}

/// Whether something outside the workload would scale `target` back up
/// while the cutover holds it at zero.
fn scaled_back_by(target: &ScaleTarget, w: &Workloads) -> Option<Unstoppable> {
    let kind = format!("{:?}", target.kind);
    for so in &w.scaled_objects {
        let r = &so["spec"]["scaleTargetRef"];
        let target_kind = r["kind"].as_str().unwrap_or("Deployment");
        if r["name"].as_str() == Some(target.name.as_str()) && target_kind == kind {
            let so_name = so["metadata"]["name"].as_str().unwrap_or_default();
            return Some(Unstoppable {
                consumer: format!("{kind} {}", target.name),
                why: format!("KEDA ScaledObject {so_name} scales it up from zero"),
                what_to_do: format!(
                    "pause it (annotation autoscaling.keda.sh/paused-replicas: \"0\" on ScaledObject {so_name}), then run the cutover"
                ),
            });
        }
    }
    let meta = match target.kind {
        ScalableKind::Deployment => w
            .deployments
            .iter()
            .map(|d| &d.metadata)
            .find(|m| name(m) == target.name),
        ScalableKind::StatefulSet => w
            .stateful_sets
            .iter()
            .map(|s| &s.metadata)
            .find(|m| name(m) == target.name),
        ScalableKind::ReplicaSet => w
            .replica_sets
            .iter()
            .map(|r| &r.metadata)
            .find(|m| name(m) == target.name),
        ScalableKind::ReplicationController => w
            .replication_controllers
            .iter()
            .map(|r| &r.metadata)
            .find(|m| name(m) == target.name),
    }?;
    let keys = meta
        .labels
        .iter()
        .flatten()
        .chain(meta.annotations.iter().flatten())
        .map(|(k, _)| k.as_str());
    for key in keys {
        let tool = if key.starts_with("argocd.argoproj.io/") {
            "Argo CD"
        } else if key.starts_with("kustomize.toolkit.fluxcd.io/")
            || key.starts_with("helm.toolkit.fluxcd.io/")
        {
            "Flux"
        } else {
            continue;
        };
        return Some(Unstoppable {
            consumer: format!("{kind} {}", target.name),
            why: format!("{tool} manages it ({key}) and would restore its replicas while the cutover holds it at zero"),
            what_to_do: format!("suspend {tool}'s sync of it (or its self-heal), then run the cutover"),
        });
    }
    None
}
