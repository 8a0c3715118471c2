//! StatefulSets, after the apps/statefulset controller's
//! `updateStatefulSet`: pods `NAME-0..N-1`, each with its claims
//! `TEMPLATE-NAME-ORDINAL` from the volumeClaimTemplates (kept when the pod
//! or the set goes, as the default retention policy says).
//!
//! With OrderedReady, the pods below an ordinal must be Running and Ready
//! (and none terminating) before it is created; scale-down deletes the
//! highest ordinal, one pod at a time, once every pod below is Running and
//! Ready and the previous one is gone. Parallel does both at once. A
//! changed template rolls one pod at a time from the top (RollingUpdate
//! down to the partition; OnDelete leaves pods alone).
//!
//! Pods carry `controller-revision-hash: NAME-HASH`, the revision name
//! that `status.currentRevision`/`updateRevision` hold. The hash covers
//! the pod template only (`getPatch` puts nothing else in the revision), so
//! a set deleted with Orphan propagation and created again with other
//! volumeClaimTemplates adopts its pods at their revision: none restarts.
//! The status counts as `computeReplicaStatus` does: every pod (terminating
//! ones included) in `replicas`, the Running and Ready ones in
//! `readyReplicas`.

use serde_json::{json, Value};

use super::ownership::claim;
use super::pod_control::{create_pods, Controller};
use super::workloads::{pod_from_template, replicas, template_hash, write_status, REVISION};
use super::{is_terminating, log_err, name_of, Ctx};
use crate::registry;
use crate::store::DeleteOptions;

pub fn sync(ctx: &Ctx, sts: &Value, pods: &[Value]) {
    let name = name_of(sts).1;
    let want = replicas(sts) as usize;
    let update_revision = format!("{name}-{}", template_hash(&sts["spec"]["template"]));
    let current_revision = sts["status"]["currentRevision"]
        .as_str()
        .filter(|r| !r.is_empty())
        .unwrap_or(&update_revision)
        .to_string();
    // Pods whose name is not NAME-ORDINAL are not the set's to manage
    // (`isMemberOf`); the others it adopts by selector.
    let member = |p: &Value| ordinal(name, name_of(p).1).is_some();
    let selector = &sts["spec"]["selector"];
    let Some(claimed) = claim(ctx, sts, "pods", pods, selector, member) else {
        return;
    };
    let mut owned: Vec<(usize, &Value)> = claimed
        .iter()
        .filter_map(|p| ordinal(name, name_of(p).1).map(|i| (i, p)))
        .collect();
    owned.sort_by_key(|(i, _)| *i);
    let set = Set {
        ctx,
        sts,
        want,
        monotonic: sts["spec"]["podManagementPolicy"].as_str() != Some("Parallel"),
        revision: &update_revision,
    };
    set.reconcile(&owned);

    let status = replica_status(sts, &owned, &current_revision, &update_revision);
    write_status(ctx, "statefulsets", sts, status);
}

/// One pass over a set: what it wants and how it may get there.
struct Set<'a> {
    ctx: &'a Ctx,
    sts: &'a Value,
    want: usize,
    /// OrderedReady: one pod at a time, each waiting for its predecessors.
    monotonic: bool,
    revision: &'a str,
}

impl Set<'_> {
    /// Replicas first (create, replace finished), then condemned pods
    /// (scale-down), then the rolling update; in OrderedReady, anything
    /// that must wait ends the pass.
    fn reconcile(&self, owned: &[(usize, &Value)]) {
        for i in 0..self.want {
            if self.replica(i, pod_at(owned, i)) == Step::Wait && self.monotonic {
                return;
            }
        }
        // Condemned pods, highest ordinal first. The first unhealthy pod
        // (every replica is healthy by now in OrderedReady) may go even if
        // it is not Ready; anything above it waits for it.
        let condemned: Vec<&Value> = owned
            .iter()
            .filter(|(i, _)| *i >= self.want)
            .map(|(_, p)| *p)
            .collect();
        let first_unhealthy = owned
            .iter()
            .map(|(_, p)| *p)
            .find(|p| !is_healthy(p))
            .map(|p| name_of(p).1);
        for pod in condemned.iter().rev() {
            if is_terminating(pod) {
                if self.monotonic {
                    return;
                }
                continue;
            }
            if self.monotonic
                && !is_running_and_ready(pod)
                && first_unhealthy != Some(name_of(pod).1)
            {
                return;
            }
            self.delete(pod, "scale down");
            if self.monotonic {
                return;
            }
        }
        if self.monotonic && !condemned.is_empty() {
            return;
        }
        self.roll(owned);
    }

    /// One ordinal below `want`: created when missing, replaced when
    /// finished; Wait when its successors must wait for it.
    fn replica(&self, i: usize, pod: Option<&Value>) -> Step {
        let Some(pod) = pod else {
            ensure_claims(self.ctx, self.sts, i);
            let pod = pod_for(self.sts, i, self.revision);
            create_pods(self.ctx, Controller::StatefulSet, self.sts, &[pod]);
            return Step::Wait;
        };
        let phase = pod["status"]["phase"].as_str().unwrap_or_default();
        if phase == "Failed" || phase == "Succeeded" {
            // Replaced: the new pod comes once this one is gone.
            if !is_terminating(pod) {
                self.delete(pod, "replace finished pod");
            }
            return Step::Wait;
        }
        if phase.is_empty() || phase == "Pending" {
            ensure_claims(self.ctx, self.sts, i);
        }
        let min_ready = min_ready_seconds(self.sts);
        if is_terminating(pod) || !is_running_and_ready(pod) || !available(pod, min_ready) {
            return Step::Wait;
        }
        Step::Go
    }

    /// Deletes the highest-ordinal pod of an older revision, from the top
    /// down to the partition, once the pods above it are healthy; it comes
    /// back from the new template.
    fn roll(&self, owned: &[(usize, &Value)]) {
        let strategy = &self.sts["spec"]["updateStrategy"];
        if strategy["type"].as_str() == Some("OnDelete") {
            return;
        }
        let partition = strategy["rollingUpdate"]["partition"].as_u64().unwrap_or(0) as usize;
        for i in (partition..self.want).rev() {
            // A pod created in this pass is not healthy yet: wait for it.
            let Some(pod) = pod_at(owned, i) else { return };
            if pod["metadata"]["labels"][REVISION] != json!(self.revision) && !is_terminating(pod) {
                self.delete(pod, "rolling update");
                return;
            }
            if !is_healthy(pod) {
                return;
            }
        }
    }

    fn delete(&self, pod: &Value, why: &str) {
        let (ns, pod_name) = name_of(pod);
        log_err(
            why,
            self.ctx.store.delete(
                registry::get("pods"),
                ns,
                pod_name,
                &DeleteOptions::default(),
            ),
        );
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Go,
    Wait,
}

/// The pod of ordinal `i`, if there is one.
fn pod_at<'a>(owned: &[(usize, &'a Value)], i: usize) -> Option<&'a Value> {
    owned.iter().find(|(o, _)| *o == i).map(|(_, p)| *p)
}

fn min_ready_seconds(sts: &Value) -> i64 {
    sts["spec"]["minReadySeconds"].as_i64().unwrap_or(0)
}

/// Ready for `min_ready` seconds (a Ready pod is available at once when
/// that is 0).
pub(super) fn available(pod: &Value, min_ready: i64) -> bool {
    let now = time::OffsetDateTime::now_utc();
    min_ready <= 0 || ready_since(pod).is_some_and(|t| (now - t).whole_seconds() >= min_ready)
}

/// `isRunningAndReady`: phase Running and the Ready condition True,
/// terminating or not.
fn is_running_and_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running" && ready_condition(pod).is_some()
}

/// `isHealthy`: Running and Ready, and not terminating.
fn is_healthy(pod: &Value) -> bool {
    is_running_and_ready(pod) && !is_terminating(pod)
}

pub(super) fn ready_condition(pod: &Value) -> Option<&Value> {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn ready_since(pod: &Value) -> Option<time::OffsetDateTime> {
    crate::time::parse(ready_condition(pod)?["lastTransitionTime"].as_str()?)
}

/// `computeReplicaStatus`, then `completeRollingUpdate`. Zero counts the
/// API omits (`omitempty`) are left out, as a real server returns them.
fn replica_status(
    sts: &Value,
    owned: &[(usize, &Value)],
    current_revision: &str,
    update_revision: &str,
) -> Value {
    let min_ready = min_ready_seconds(sts);
    let (mut replicas, mut ready, mut available_count, mut current, mut updated) = (0, 0, 0, 0, 0);
    for (_, pod) in owned {
        replicas += 1;
        if is_running_and_ready(pod) {
            ready += 1;
            if available(pod, min_ready) {
                available_count += 1;
            }
        }
        if !is_terminating(pod) {
            let revision = &pod["metadata"]["labels"][REVISION];
            if revision == current_revision {
                current += 1;
            }
            if revision == update_revision {
                updated += 1;
            }
        }
    }
    let mut current_revision = current_revision;
    let rolling = sts["spec"]["updateStrategy"]["type"].as_str() != Some("OnDelete");
    if rolling && updated == replicas && ready == replicas {
        current = updated;
        current_revision = update_revision;
    }
    let mut status = json!({
        "observedGeneration": sts["metadata"]["generation"],
        "replicas": replicas,
        "availableReplicas": available_count,
        "currentRevision": current_revision,
        "updateRevision": update_revision,
        "collisionCount": 0,
    });
    for (field, count) in [
        ("readyReplicas", ready),
        ("currentReplicas", current),
        ("updatedReplicas", updated),
    ] {
        if count > 0 {
            status[field] = json!(count);
        }
    }
    status
}

fn ordinal(set: &str, pod: &str) -> Option<usize> {
    pod.strip_prefix(set)?.strip_prefix('-')?.parse().ok()
}

fn claim_name(template: &Value, set: &str, i: usize) -> String {
    format!(
        "{}-{set}-{i}",
        template["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn ensure_claims(ctx: &Ctx, sts: &Value, i: usize) {
    let (ns, name) = name_of(sts);
    let claims = registry::get("persistentvolumeclaims");
    for template in sts["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let claim_name = claim_name(template, name, i);
        if ctx.store.get(claims, ns, &claim_name).is_ok() {
            continue;
        }
        let mut labels = template["metadata"]["labels"].clone();
        for (k, v) in sts["spec"]["selector"]["matchLabels"]
            .as_object()
            .into_iter()
            .flatten()
        {
            labels[k] = v.clone();
        }
        let claim = json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim_name, "labels": labels, "annotations": template["metadata"]["annotations"]},
            "spec": template["spec"],
        });
        log_err("create claim", ctx.store.create(claims, ns, claim));
    }
}

/// The pod for ordinal `i`, labelled with its revision's name.
fn pod_for(sts: &Value, i: usize, revision: &str) -> Value {
    let name = name_of(sts).1;
    let template = &sts["spec"]["template"];
    let mut spec = template["spec"].clone();
    spec["hostname"] = json!(format!("{name}-{i}"));
    if let Some(service) = sts["spec"]["serviceName"].as_str() {
        spec["subdomain"] = json!(service);
    }
    if !spec["volumes"].is_array() {
        spec["volumes"] = json!([]);
    }
    for t in sts["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let volume = json!({"name": t["metadata"]["name"], "persistentVolumeClaim": {"claimName": claim_name(t, name, i)}});
        if let Some(volumes) = spec["volumes"].as_array_mut() {
            volumes.retain(|v| v["name"] != t["metadata"]["name"]);
            volumes.push(volume);
        }
    }
    let mut labels = template["metadata"]["labels"].clone();
    labels["statefulset.kubernetes.io/pod-name"] = json!(format!("{name}-{i}"));
    labels["apps.kubernetes.io/pod-index"] = json!(i.to_string());
    labels[REVISION] = json!(revision);
    let mut pod = pod_from_template(sts, labels, spec);
    pod["metadata"]["name"] = json!(format!("{name}-{i}"));
    pod
}
