//! StatefulSets: pods `NAME-0..N-1` created in order (OrderedReady) or all at
//! once (Parallel), each with its claims `TEMPLATE-NAME-ORDINAL` from the
//! volumeClaimTemplates (kept when the pod or the set goes, as the default
//! retention policy says); scale-down from the highest ordinal; a changed
//! template rolls one pod at a time from the top.

use serde_json::{json, Value};

use super::workloads::{
    is_active, is_ready, owned_by, owner_ref, template_hash, write_status, REVISION,
};
use super::{is_terminating, log_err, name_of, Ctx};
use crate::registry;
use crate::store::DeleteOptions;

pub fn sync(ctx: &Ctx, sts: &Value, pods: &[Value]) {
    let (ns, name) = name_of(sts);
    let pod_res = registry::get("pods");
    let want = sts["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
    let ordered = sts["spec"]["podManagementPolicy"].as_str() != Some("Parallel");
    let revision = template_hash(&sts["spec"]["template"]);
    let owned = owned_by(sts, pods);
    let pod_at = |i: usize| {
        owned
            .iter()
            .find(|p| name_of(p).1 == format!("{name}-{i}"))
            .copied()
    };

    // Finished pods are replaced, as the controller does.
    for pod in owned.iter().filter(|p| !is_active(p) && !is_terminating(p)) {
        log_err(
            "replace finished pod",
            ctx.store
                .delete(pod_res, ns, name_of(pod).1, &DeleteOptions::default()),
        );
    }
    for i in 0..want {
        ensure_claims(ctx, sts, i);
        match pod_at(i) {
            Some(_) => {}
            None => {
                log_err(
                    "create pod",
                    ctx.store.create(pod_res, ns, pod_for(sts, i, &revision)),
                );
                if ordered {
                    break;
                }
            }
        }
        if ordered && !pod_at(i).is_some_and(is_ready) {
            break;
        }
    }
    // Scale down from the top, one at a time when ordered.
    let mut extra: Vec<(usize, &Value)> = owned
        .iter()
        .filter_map(|p| ordinal(name, name_of(p).1).map(|i| (i, *p)))
        .filter(|(i, p)| *i >= want && !is_terminating(p))
        .collect();
    extra.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
    for (_, pod) in extra.iter().take(if ordered { 1 } else { usize::MAX }) {
        log_err(
            "scale down",
            ctx.store
                .delete(pod_res, ns, name_of(pod).1, &DeleteOptions::default()),
        );
    }
    roll(ctx, sts, &owned, want, &revision);

    let active: Vec<&&Value> = owned.iter().filter(|p| is_active(p)).collect();
    let ready = active.iter().filter(|p| is_ready(p)).count();
    let updated = active
        .iter()
        .filter(|p| p["metadata"]["labels"][REVISION] == json!(revision))
        .count();
    let status = json!({
        "observedGeneration": sts["metadata"]["generation"],
        "replicas": active.len(),
        "readyReplicas": ready,
        "currentReplicas": active.len(),
        "updatedReplicas": updated,
        "availableReplicas": ready,
        "currentRevision": format!("{name}-{revision}"),
        "updateRevision": format!("{name}-{revision}"),
    });
    write_status(ctx, "statefulsets", sts, status);
}

/// Deletes the highest-ordinal pod of an older revision once every pod is
/// ready; it comes back from the new template.
fn roll(ctx: &Ctx, sts: &Value, owned: &[&Value], want: usize, revision: &str) {
    let (ns, name) = name_of(sts);
    let all_ready = owned.len() == want && owned.iter().all(|p| is_ready(p));
    if !all_ready {
        return;
    }
    let stale = owned
        .iter()
        .filter(|p| p["metadata"]["labels"][REVISION] != json!(revision))
        .filter_map(|p| ordinal(name, name_of(p).1).map(|i| (i, p)))
        .max_by_key(|(i, _)| *i);
    if let Some((_, pod)) = stale {
        log_err(
            "rolling update",
            ctx.store.delete(
                registry::get("pods"),
                ns,
                name_of(pod).1,
                &DeleteOptions::default(),
            ),
        );
    }
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
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{name}-{i}"),
            "labels": labels,
            "annotations": template["metadata"]["annotations"],
            "ownerReferences": [owner_ref(sts)],
        },
        "spec": spec,
    })
}
