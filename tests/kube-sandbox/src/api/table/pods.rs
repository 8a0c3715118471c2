//! The pod printer: `kubectl get pods` columns and cells.

use serde_json::{json, Value};
use time::OffsetDateTime;

use super::{age, has_condition, int, is_true, list, name, or, parse_time, since, text};

pub(super) const POD_COLUMNS: &str = "Name
    Ready|string|The aggregate readiness state of this pod for accepting traffic.
    Status|string|The aggregate status of the containers in this pod.
    Restarts|string|The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.
    Age
    +IP|string|podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.
    +Node|string|NodeName indicates in which node this pod is scheduled.
    +Nominated Node|string|nominatedNodeName is set only when this pod preempts other pods on the node.
    +Readiness Gates|string|If specified, all readiness gates will be evaluated for pod readiness.";

pub(super) fn pod_cells(pod: &Value, now: OffsetDateTime) -> Vec<Value> {
    let summary = PodSummary::of(pod);
    let restarts = match summary.restarts.last {
        Some(at) if summary.restarts.count != 0 => {
            format!("{} ({} ago)", summary.restarts.count, since(at, now))
        }
        _ => summary.restarts.count.to_string(),
    };
    let first_ip = list(pod, "status.podIPs").first().map(|ip| text(ip, "ip"));
    cells![
        name(pod),
        format!("{}/{}", summary.ready, summary.total),
        summary.reason,
        restarts,
        age(pod, now),
        or(
            or(first_ip.unwrap_or_default(), text(pod, "status.podIP")),
            "<none>"
        ),
        or(text(pod, "spec.nodeName"), "<none>"),
        or(text(pod, "status.nominatedNodeName"), "<none>"),
        readiness_gates(pod),
    ]
}

/// The row conditions the pod printer sets: `Completed` once the pod has finished.
pub(super) fn pod_conditions(pod: &Value) -> Option<Value> {
    let (reason, message) = match text(pod, "status.phase") {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    let condition =
        json!({"type": "Completed", "status": "True", "reason": reason, "message": message});
    Some(json!([condition]))
}

/// What the pod printer derives from a pod's status: ready and total containers, the
/// most telling reason (an unfinished init container's first), and the restarts.
struct PodSummary {
    ready: usize,
    total: usize,
    reason: String,
    restarts: Restarts,
}

/// Restart counts summed over containers, and when the latest restarted one ended.
#[derive(Default)]
struct Restarts {
    count: i64,
    last: Option<OffsetDateTime>,
}

impl Restarts {
    fn add(&mut self, status: &Value) {
        self.count += int(status, "restartCount");
        let finished = parse_time(text(status, "lastState.terminated.finishedAt"));
        self.last = self.last.max(finished);
    }
}

impl PodSummary {
    fn of(pod: &Value) -> Self {
        let init_specs = list(pod, "spec.initContainers");
        let sidecars: Vec<&str> = init_specs
            .iter()
            .filter(|c| text(c, "restartPolicy") == "Always")
            .map(|c| text(c, "name"))
            .collect();
        let phase = or(text(pod, "status.phase"), "Pending");
        let mut s = PodSummary {
            ready: 0,
            total: list(pod, "spec.containers").len() + sidecars.len(),
            reason: or(text(pod, "status.reason"), phase).to_owned(),
            restarts: Restarts::default(),
        };
        if has_condition(pod, "PodScheduled", |c| {
            text(c, "reason") == "SchedulingGated"
        }) {
            s.reason = "SchedulingGated".to_owned();
        }
        let mut sidecar_restarts = Restarts::default();
        let mut initializing = false;
        for (i, status) in list(pod, "status.initContainerStatuses").iter().enumerate() {
            s.restarts.add(status);
            let sidecar = sidecars.contains(&text(status, "name"));
            if sidecar {
                sidecar_restarts.add(status);
            }
            let terminated = &status["state"]["terminated"];
            if terminated.is_object() && int(terminated, "exitCode") == 0 {
                continue;
            }
            if sidecar && status["started"] == true {
                s.ready += usize::from(status["ready"] == true);
                continue;
            }
            s.reason = match text(status, "state.waiting.reason") {
                _ if terminated.is_object() => format!("Init:{}", terminated_reason(terminated)),
                "" | "PodInitializing" => format!("Init:{i}/{}", init_specs.len()),
                waiting => format!("Init:{waiting}"),
            };
            initializing = true;
            break;
        }
        if !initializing || has_condition(pod, "Initialized", is_true) {
            s.restarts = sidecar_restarts;
            s.add_containers(pod);
        }
        if !text(pod, "metadata.deletionTimestamp").is_empty() {
            if text(pod, "status.reason") == "NodeLost" {
                s.reason = "Unknown".to_owned();
            } else if !matches!(phase, "Succeeded" | "Failed") {
                s.reason = "Terminating".to_owned();
            }
        }
        s
    }

    /// Folds in the regular containers, last to first as the real printer does.
    fn add_containers(&mut self, pod: &Value) {
        let mut running = false;
        for status in list(pod, "status.containerStatuses").iter().rev() {
            self.restarts.add(status);
            let terminated = &status["state"]["terminated"];
            let waiting = text(status, "state.waiting.reason");
            if !waiting.is_empty() {
                self.reason = waiting.to_owned();
            } else if terminated.is_object() {
                self.reason = terminated_reason(terminated);
            } else if status["ready"] == true && status["state"]["running"].is_object() {
                running = true;
                self.ready += 1;
            }
        }
        if self.reason == "Completed" && running {
            let ready = has_condition(pod, "Ready", is_true);
            self.reason = if ready { "Running" } else { "NotReady" }.to_owned();
        }
    }
}

/// A terminated state's reason, or `Signal:N` / `ExitCode:N` when it gives none.
fn terminated_reason(terminated: &Value) -> String {
    match (text(terminated, "reason"), int(terminated, "signal")) {
        ("", 0) => format!("ExitCode:{}", int(terminated, "exitCode")),
        ("", signal) => format!("Signal:{signal}"),
        (reason, _) => reason.to_owned(),
    }
}

/// `met/total` over the pod's readiness gates, `<none>` without any.
fn readiness_gates(pod: &Value) -> String {
    let gates = list(pod, "spec.readinessGates");
    let conditions = list(pod, "status.conditions");
    let met = |gate: &&Value| {
        let wanted = text(gate, "conditionType");
        let condition = conditions.iter().find(|c| text(c, "type") == wanted);
        condition.is_some_and(is_true)
    };
    match gates.len() {
        0 => "<none>".to_owned(),
        total => format!("{}/{total}", gates.iter().filter(met).count()),
    }
}
