//! Printers for Deployments, ReplicaSets, StatefulSets, DaemonSets,
//! ReplicationControllers and HorizontalPodAutoscalers.

use serde_json::Value;
use time::OffsetDateTime;

use super::core_v1::format_labels;
use super::{age, int, list, name, or, text};

pub(super) const DEPLOYMENT_COLUMNS: &str = "Name
    Ready|string|Number of the pod with ready state
    Up-to-date|string|Total number of non-terminated pods targeted by this deployment that have the desired template spec.
    Available|string|Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.
    Age
    +Containers|string|Names of each container in the template.
    +Images|string|Images referenced by each container in the template.
    +Selector|string|Label selector for pods.";
pub(super) const REPLICA_SET_COLUMNS: &str = "Name
    Desired|integer|Replicas is the number of desired pods.
    Current|integer|Replicas is the most recently observed number of replicas.
    Ready|integer|The number of ready replicas for this replica set.
    Age
    +Containers|string|Names of each container in the template.
    +Images|string|Images referenced by each container in the template.
    +Selector|string|Selector is a label query over pods that should match the replica count.";
pub(super) const STATEFUL_SET_COLUMNS: &str = "Name
    Ready|string|Number of the pod with ready state
    Age
    +Containers|string|Names of each container in the template.
    +Images|string|Images referenced by each container in the template.";

pub(super) const DAEMON_SET_COLUMNS: &str = "Name
    Desired|integer|The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).
    Current|integer|The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.
    Ready|integer|numberReady is the number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition.
    Up-to-date|integer|The total number of nodes that are running updated daemon pod
    Available|integer|The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)
    Node Selector|string|NodeSelector is a selector which must be true for the pod to fit on a node.
    Age
    +Containers|string|Names of each container in the template.
    +Images|string|Images referenced by each container in the template.
    +Selector|string|A label query over pods that are managed by the daemon set.";
pub(super) const REPLICATION_CONTROLLER_COLUMNS: &str = "Name
    Desired|integer|Replicas is the number of desired replicas.
    Current|integer|Replicas is the most recently observed number of replicas.
    Ready|integer|The number of ready replicas for this replication controller.
    Age
    +Containers|string|Names of each container in the template.
    +Images|string|Images referenced by each container in the template.
    +Selector|string|Selector is a label query over pods that should match the Replicas count.";

pub(super) const AUTOSCALER_COLUMNS: &str = "Name
    Reference|string|scaleTargetRef points to the target resource to scale, and is used to the pods for which metrics should be collected, as well as to actually change the replica count.
    Targets|string|metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used).
    MinPods|string|minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.
    MaxPods|integer|maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up.
    Replicas|integer|currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler.
    Age";

/// `printHorizontalPodAutoscaler`.
pub(super) fn autoscaler_cells(hpa: &Value, now: OffsetDateTime) -> Vec<Value> {
    let target = &hpa["spec"]["scaleTargetRef"];
    let reference = format!("{}/{}", text(target, "kind"), text(target, "name"));
    let min = match hpa["spec"]["minReplicas"].as_i64() {
        Some(n) => n.to_string(),
        None => "<unset>".to_string(),
    };
    cells![
        name(hpa),
        reference,
        autoscaler_targets(hpa),
        min,
        int(hpa, "spec.maxReplicas"),
        int(hpa, "status.currentReplicas"),
        age(hpa, now),
    ]
}

/// `formatHPAMetrics` for resource metrics (`cpu: 42%/80%`, `<unknown>`
/// while none is measured); at most three, then `+ N more...`.
fn autoscaler_targets(hpa: &Value) -> String {
    let specs = list(hpa, "spec.metrics");
    if specs.is_empty() {
        return "<none>".to_string();
    }
    let current = list(hpa, "status.currentMetrics");
    let shown: Vec<String> = specs
        .iter()
        .take(3)
        .enumerate()
        .map(|(i, spec)| {
            let kind = text(spec, "type");
            let source = match kind {
                "ContainerResource" => &spec["containerResource"],
                _ => &spec["resource"],
            };
            let target = &source["target"];
            let measured = &current.get(i).map_or(&Value::Null, |c| match kind {
                "ContainerResource" => &c["containerResource"]["current"],
                _ => &c["resource"]["current"],
            });
            let (now, goal) = match text(target, "type") {
                "Utilization" => (
                    measured["averageUtilization"]
                        .as_i64()
                        .map(|u| format!("{u}%")),
                    format!("{}%", int(target, "averageUtilization")),
                ),
                _ => (
                    measured["averageValue"].as_str().map(str::to_string),
                    text(target, "averageValue").to_string(),
                ),
            };
            let now = now.unwrap_or_else(|| "<unknown>".to_string());
            match kind {
                "Resource" | "ContainerResource" => {
                    format!("{}: {now}/{goal}", text(source, "name"))
                }
                _ => format!("{now}/{goal}"),
            }
        })
        .collect();
    let mut out = shown.join(", ");
    if specs.len() > 3 {
        out.push_str(&format!(" + {} more...", specs.len() - 3));
    }
    out
}

/// `printDaemonSet`.
pub(super) fn daemon_set_cells(ds: &Value, now: OffsetDateTime) -> Vec<Value> {
    let (names, images) = container_cells(ds);
    cells![
        name(ds),
        int(ds, "status.desiredNumberScheduled"),
        int(ds, "status.currentNumberScheduled"),
        int(ds, "status.numberReady"),
        int(ds, "status.updatedNumberScheduled"),
        int(ds, "status.numberAvailable"),
        format_labels(&ds["spec"]["template"]["spec"]["nodeSelector"]),
        age(ds, now),
        names,
        images,
        or(&selector_string(&ds["spec"]["selector"]), "<none>"),
    ]
}

/// `printReplicationController`: its selector is a plain map.
pub(super) fn replication_controller_cells(rc: &Value, now: OffsetDateTime) -> Vec<Value> {
    let (names, images) = container_cells(rc);
    cells![
        name(rc),
        replicas(rc),
        int(rc, "status.replicas"),
        int(rc, "status.readyReplicas"),
        age(rc, now),
        names,
        images,
        format_labels(&rc["spec"]["selector"]),
    ]
}

pub(super) fn deployment_cells(deploy: &Value, now: OffsetDateTime) -> Vec<Value> {
    let (names, images) = container_cells(deploy);
    cells![
        name(deploy),
        format!(
            "{}/{}",
            int(deploy, "status.readyReplicas"),
            replicas(deploy)
        ),
        int(deploy, "status.updatedReplicas"),
        int(deploy, "status.availableReplicas"),
        age(deploy, now),
        names,
        images,
        selector_string(&deploy["spec"]["selector"]),
    ]
}

pub(super) fn replica_set_cells(rs: &Value, now: OffsetDateTime) -> Vec<Value> {
    let (names, images) = container_cells(rs);
    cells![
        name(rs),
        replicas(rs),
        int(rs, "status.replicas"),
        int(rs, "status.readyReplicas"),
        age(rs, now),
        names,
        images,
        or(&selector_string(&rs["spec"]["selector"]), "<none>"),
    ]
}

pub(super) fn stateful_set_cells(sts: &Value, now: OffsetDateTime) -> Vec<Value> {
    let (names, images) = container_cells(sts);
    let ready = format!("{}/{}", int(sts, "status.readyReplicas"), replicas(sts));
    cells![name(sts), ready, age(sts, now), names, images]
}

/// A workload's `spec.replicas`, 1 when unset as the API server defaults it.
fn replicas(obj: &Value) -> i64 {
    obj["spec"]["replicas"].as_i64().unwrap_or(1)
}

/// Names and images of a workload's pod template containers, comma separated.
pub(super) fn container_cells(obj: &Value) -> (String, String) {
    let containers = list(obj, "spec.template.spec.containers");
    let join = |field| Vec::from_iter(containers.iter().map(|c| text(c, field))).join(",");
    (join("name"), join("image"))
}

/// A `LabelSelector` in selector syntax (`app=web,tier in (a,b),!legacy`), sorted by key.
pub(super) fn selector_string(selector: &Value) -> String {
    let mut requirements = Vec::new();
    for (key, value) in selector["matchLabels"].as_object().into_iter().flatten() {
        let value = value.as_str().unwrap_or_default();
        requirements.push((key.as_str(), format!("{key}={value}")));
    }
    for expr in list(selector, "matchExpressions") {
        let key = text(expr, "key");
        let mut values = Vec::from_iter(list(expr, "values").iter().filter_map(Value::as_str));
        values.sort_unstable();
        let values = values.join(",");
        let requirement = match text(expr, "operator") {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "DoesNotExist" => format!("!{key}"),
            _ => key.to_owned(),
        };
        requirements.push((key, requirement));
    }
    requirements.sort_by(|a, b| a.0.cmp(b.0));
    Vec::from_iter(requirements.into_iter().map(|(_, r)| r)).join(",")
}
