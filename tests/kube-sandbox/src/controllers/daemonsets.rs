//! DaemonSets, after `pkg/controller/daemon` (`daemon_controller.go`,
//! `update.go`, `util/daemonset_util.go`):
//!
//! - a node should run the set's pod when `NodeShouldRunDaemonPod` says
//!   so: the template's `nodeName` (if any) is the node's, its node
//!   selector and required node affinity admit the node, and every
//!   NoSchedule and NoExecute taint of the node is tolerated (the template
//!   plus the daemon tolerations: not-ready and unreachable NoExecute,
//!   disk-, memory-, pid-pressure and unschedulable NoSchedule); a pod
//!   already there may keep running while only its NoExecute taints are
//!   tolerated;
//! - the controller does not pick nodes itself: each pod it creates
//!   (`generateName: NAME-`, controlled by the set, labelled
//!   `controller-revision-hash`) gets a required node affinity with one
//!   `matchFields` term `metadata.name In [node]`, which replaces the
//!   template's required terms, and the scheduler binds it;
//! - failed pods are deleted (with a back-off per node, 1 s doubling up to
//!   15 min, and a `FailedDaemonPod` event), succeeded ones too, and of
//!   several running pods on one node all but the oldest;
//! - pods on nodes that should no longer run them, and unscheduled pods for
//!   nodes that are gone, are deleted;
//! - RollingUpdate (without surge) deletes old-revision pods while no more
//!   than `maxUnavailable` of the desired pods are unavailable; OnDelete
//!   leaves them;
//! - the set adopts orphans its selector matches ([`super::ownership`]).
//!
//! Not emulated: `maxSurge` (rolls as with 0), ControllerRevisions and
//! `pod-template-generation`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use super::ownership::claim;
use super::placement::daemon_should_run;
use super::pod_control::{create_pods, Controller};
use super::workloads::{pod_from_template, template_hash, write_status, REVISION};
use super::workloads_sts::{available, ready_condition};
use super::{is_terminating, log_err, name_of, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry;
use crate::store::DeleteOptions;

const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);

/// `failedPodsBackoff`: per set and node, when a failed pod was last
/// deleted and the delay before the next may be.
#[derive(Default)]
pub(crate) struct Backoff(Mutex<HashMap<String, (Instant, Duration)>>);

impl Backoff {
    /// `IsInBackOffSinceUpdate`, and if not, `Next`: whether a failed pod
    /// may be deleted now (the delay then doubles).
    fn allow(&self, key: String, now: Instant) -> bool {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let next = match map.get(&key) {
            Some((at, delay)) if now.duration_since(*at) < *delay => return false,
            // Entries idle for twice the maximum start over.
            Some((at, delay)) if now.duration_since(*at) <= 2 * MAX_BACKOFF => {
                (*delay * 2).min(MAX_BACKOFF)
            }
            _ => INITIAL_BACKOFF,
        };
        map.insert(key, (now, next));
        true
    }
}

pub fn reconcile(ctx: &Ctx) {
    let (sets, _) = ctx.store.list(registry::get("daemonsets"), None);
    if sets.is_empty() {
        return;
    }
    let nodes: Vec<Node> = ctx.store.list_as("nodes");
    let (pods, _) = ctx.store.list(registry::get("pods"), None);
    for ds in sets.iter().filter(|ds| !is_terminating(ds)) {
        sync(ctx, ds, &nodes, &pods);
    }
}

/// One set: `manage`, then (when it had nothing to do) `rollingUpdate`,
/// then the status, all from the state the pass began with.
fn sync(ctx: &Ctx, ds: &Value, nodes: &[Node], pods: &[Value]) {
    let Some(claimed) = claim(ctx, ds, "pods", pods, &ds["spec"]["selector"], |_| true) else {
        return;
    };
    let Some(template) = daemon_pod(ds) else {
        return;
    };
    let hash = template_hash(&ds["spec"]["template"]);
    // `NodeShouldRunDaemonPod` once per node for the whole pass.
    let nodes: Vec<NodeFit> = nodes
        .iter()
        .map(|node| {
            let (should_run, should_continue) = daemon_should_run(&template, node);
            NodeFit {
                node,
                should_run,
                should_continue,
            }
        })
        .collect();
    let set = Set {
        ctx,
        ds,
        hash: &hash,
        by_node: by_node(&claimed),
    };
    let (create, delete) = set.manage(&nodes);
    if create.is_empty() && delete.is_empty() {
        set.delete_all(&set.rolling_update(&nodes));
    } else {
        set.create_on(&create);
        set.delete_all(&delete);
    }
    write_status(ctx, "daemonsets", ds, set.status(&nodes));
}

/// A node and what `daemon_should_run` decides for the set's pod there.
struct NodeFit<'a> {
    node: &'a Node,
    should_run: bool,
    should_continue: bool,
}

/// One pass over a set.
struct Set<'a> {
    ctx: &'a Ctx,
    ds: &'a Value,
    hash: &'a str,
    /// The set's pods by the node they run on or are meant for (terminal
    /// pods being deleted left out).
    by_node: BTreeMap<String, Vec<&'a Value>>,
}

impl Set<'_> {
    /// `manage`: the nodes needing a pod, and the pods to delete.
    fn manage(&self, nodes: &[NodeFit]) -> (Vec<String>, Vec<String>) {
        let (mut create, mut delete) = (Vec::new(), Vec::new());
        for fit in nodes {
            let node_name = fit.node.metadata.name.clone().unwrap_or_default();
            let (should_run, should_continue) = (fit.should_run, fit.should_continue);
            let pods = self.by_node.get(&node_name);
            match pods {
                None if should_run => create.push(node_name),
                Some(pods) if should_continue => {
                    delete.extend(self.excess(&node_name, pods));
                }
                Some(pods) => {
                    let live = pods.iter().filter(|p| !is_terminating(p));
                    delete.extend(live.map(|p| name_of(p).1.to_string()));
                }
                None => {}
            }
        }
        // `getUnscheduledPodsWithoutNode`.
        let known = |n: &str| {
            nodes
                .iter()
                .any(|fit| fit.node.metadata.name.as_deref() == Some(n))
        };
        for (node, pods) in self.by_node.iter().filter(|(n, _)| !known(n)) {
            let unscheduled = pods.iter().filter(|p| node_name(p).is_empty());
            delete.extend(unscheduled.map(|p| name_of(p).1.to_string()));
            tracing::debug!("{}: pods for missing node {node}", name_of(self.ds).1);
        }
        (create, delete)
    }

    /// On a node that may keep its pod: failed pods (with back-off) and
    /// succeeded ones go, and of several running ones all but the oldest.
    fn excess(&self, node: &str, pods: &[&Value]) -> Vec<String> {
        let mut delete = Vec::new();
        let mut running = Vec::new();
        for pod in pods.iter().filter(|p| !is_terminating(p)) {
            let (ns, name) = name_of(pod);
            match pod["status"]["phase"].as_str() {
                Some("Failed") => {
                    let key = format!("{}/{node}", self.ds["metadata"]["uid"]);
                    if !self.ctx.daemon_backoff.allow(key, Instant::now()) {
                        continue;
                    }
                    let message = format!(
                        "Found failed daemon pod {ns}/{name} on node {node}, will try to kill it"
                    );
                    self.event(EventType::Warning, "FailedDaemonPod", &message);
                    delete.push(name.to_string());
                }
                Some("Succeeded") => {
                    let message = format!(
                        "Found succeeded daemon pod {ns}/{name} on node {node}, will try to delete it"
                    );
                    self.event(EventType::Normal, "SucceededDaemonPod", &message);
                    delete.push(name.to_string());
                }
                _ => running.push(*pod),
            }
        }
        running.sort_by_key(|p| oldest_first(p));
        delete.extend(running.iter().skip(1).map(|p| name_of(p).1.to_string()));
        delete
    }

    /// `rollingUpdate` without surge: old pods to delete, as many as keep
    /// the unavailable pods within `maxUnavailable` (unavailable old pods
    /// always may go).
    fn rolling_update(&self, nodes: &[NodeFit]) -> Vec<String> {
        let strategy = &self.ds["spec"]["updateStrategy"];
        if strategy["type"].as_str() == Some("OnDelete") {
            return Vec::new();
        }
        let min_ready = self.ds["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
        let mut by_node: BTreeMap<String, Vec<&Value>> = self.by_node.clone();
        let mut desired = 0;
        for fit in nodes.iter().filter(|fit| fit.should_run) {
            desired += 1;
            by_node
                .entry(fit.node.metadata.name.clone().unwrap_or_default())
                .or_default();
        }
        let limit = &strategy["rollingUpdate"]["maxUnavailable"];
        let max_unavailable = scaled(limit, desired).max(usize::from(desired > 0));
        let (mut unavailable, mut replace, mut candidates) = (0, Vec::new(), Vec::new());
        for pods in by_node.values() {
            let live: Vec<&Value> = pods
                .iter()
                .copied()
                .filter(|p| !is_terminating(p))
                .collect();
            let (new, old): (Vec<&Value>, Vec<&Value>) = live
                .iter()
                .partition(|p| p["metadata"]["labels"][REVISION] == json!(self.hash));
            match (new.as_slice(), old.as_slice()) {
                ([new], []) if !is_available(new, min_ready) => unavailable += 1,
                ([_], []) => {}
                ([], [old]) if !is_available(old, min_ready) => replace.push(*old),
                ([], [old]) => candidates.push(*old),
                // None yet, one of each, or more than one of a kind: the
                // core loop's to fix.
                _ => unavailable += 1,
            }
        }
        let room = max_unavailable.saturating_sub(unavailable);
        replace.extend(candidates.into_iter().take(room));
        replace.iter().map(|p| name_of(p).1.to_string()).collect()
    }

    /// `syncNodes`' creations: one pod per node, bound there by affinity.
    fn create_on(&self, nodes: &[String]) {
        let name = name_of(self.ds).1;
        let template = &self.ds["spec"]["template"];
        let mut labels = template["metadata"]["labels"].clone();
        labels[REVISION] = json!(self.hash);
        let spec = daemon_spec(self.ds);
        let pods: Vec<Value> = nodes
            .iter()
            .map(|node| {
                let mut spec = spec.clone();
                pin_to_node(&mut spec, node);
                let mut pod = pod_from_template(self.ds, labels.clone(), spec);
                pod["metadata"]["generateName"] = json!(format!("{name}-"));
                pod
            })
            .collect();
        let controller = Controller::Generic("daemonset-controller");
        create_pods(self.ctx, controller, self.ds, &pods);
    }

    fn delete_all(&self, pods: &[String]) {
        let ns = name_of(self.ds).0;
        for pod in pods {
            let deleted =
                self.ctx
                    .store
                    .delete(registry::get("pods"), ns, pod, &DeleteOptions::default());
            log_err("delete daemon pod", deleted);
        }
    }

    /// `updateDaemonSetStatus`, counting the oldest pod of each node.
    fn status(&self, nodes: &[NodeFit]) -> Value {
        let min_ready = self.ds["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
        let (mut desired, mut current, mut misscheduled) = (0, 0, 0);
        let (mut ready, mut updated, mut available_count) = (0, 0, 0);
        for fit in nodes {
            let node_name = fit.node.metadata.name.as_deref().unwrap_or_default();
            let pods = self.by_node.get(node_name).filter(|p| !p.is_empty());
            if !fit.should_run {
                misscheduled += usize::from(pods.is_some());
                continue;
            }
            desired += 1;
            let Some(pods) = pods else { continue };
            current += 1;
            let Some(pod) = pods.iter().min_by_key(|p| oldest_first(p)) else {
                continue;
            };
            ready += usize::from(ready_condition(pod).is_some());
            available_count += usize::from(is_available(pod, min_ready));
            updated += usize::from(pod["metadata"]["labels"][REVISION] == json!(self.hash));
        }
        // Zero counts the API omits are left out by `write_status`.
        json!({
            "observedGeneration": self.ds["metadata"]["generation"].as_u64().unwrap_or(0),
            "currentNumberScheduled": current,
            "numberMisscheduled": misscheduled,
            "desiredNumberScheduled": desired,
            "numberReady": ready,
            "updatedNumberScheduled": updated,
            "numberAvailable": available_count,
            "numberUnavailable": desired - available_count,
        })
    }

    fn event(&self, kind: EventType, reason: &str, message: &str) {
        let source = Source::new("daemonset-controller");
        events::record(&self.ctx.store, &source, self.ds, kind, reason, message);
    }
}

/// The template's pod spec with the daemon tolerations.
fn daemon_spec(ds: &Value) -> Value {
    let mut spec = ds["spec"]["template"]["spec"].clone();
    add_daemon_tolerations(&mut spec);
    spec
}

/// `NewPod`: the daemon pod as a typed pod for the node predicates. None
/// when it does not deserialize.
fn daemon_pod(ds: &Value) -> Option<Pod> {
    let pod = json!({"metadata": ds["spec"]["template"]["metadata"], "spec": daemon_spec(ds)});
    match serde_json::from_value(pod) {
        Ok(pod) => Some(pod),
        Err(e) => {
            tracing::debug!("{}: template: {e}", name_of(ds).1);
            None
        }
    }
}

/// `AddOrUpdateDaemonPodTolerations`.
fn add_daemon_tolerations(spec: &mut Value) {
    let mut wanted = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec["hostNetwork"] == json!(true) {
        wanted.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    if !spec["tolerations"].is_array() {
        spec["tolerations"] = json!([]);
    }
    let Some(list) = spec["tolerations"].as_array_mut() else {
        return;
    };
    for (key, effect) in wanted {
        let toleration = json!({"key": key, "operator": "Exists", "effect": effect});
        // `AddOrUpdateTolerationInPodSpec`: one with the same key and
        // effect is replaced.
        list.retain(|t| !(t["key"] == json!(key) && t["effect"] == json!(effect)));
        list.push(toleration);
    }
}

/// `ReplaceDaemonSetPodNodeNameNodeAffinity`: the required node affinity
/// becomes the single term `metadata.name In [node]`.
fn pin_to_node(spec: &mut Value, node: &str) {
    let term =
        json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]});
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
        json!({"nodeSelectorTerms": [term]});
}

/// `getNodesToDaemonPods`: pods by `spec.nodeName`, or else by the node
/// their affinity names (`GetTargetNodeName`).
fn by_node(pods: &[Value]) -> BTreeMap<String, Vec<&Value>> {
    let mut map: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for pod in pods {
        let terminal = matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        );
        if terminal && is_terminating(pod) {
            continue;
        }
        if let Some(node) = target_node(pod) {
            map.entry(node).or_default().push(pod);
        }
    }
    map
}

fn target_node(pod: &Value) -> Option<String> {
    let node = node_name(pod);
    if !node.is_empty() {
        return Some(node.to_string());
    }
    let required =
        &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    let terms = required["nodeSelectorTerms"].as_array()?;
    let fields = terms
        .iter()
        .flat_map(|t| t["matchFields"].as_array().into_iter().flatten());
    let pinned = fields
        .filter(|f| f["key"] == "metadata.name" && f["operator"] == "In")
        .find_map(|f| match f["values"].as_array().map(Vec::as_slice) {
            Some([node]) => node.as_str(),
            _ => None,
        });
    pinned.map(str::to_string)
}

fn node_name(pod: &Value) -> &str {
    pod["spec"]["nodeName"].as_str().unwrap_or_default()
}

/// `podByCreationTimestampAndPhase`: scheduled pods first, then the oldest,
/// then by name.
fn oldest_first(pod: &Value) -> (bool, String, String) {
    let created = pod["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap_or_default();
    (
        node_name(pod).is_empty(),
        created.to_string(),
        name_of(pod).1.to_string(),
    )
}

/// `IsPodAvailable`: Ready, for at least `min_ready` seconds.
fn is_available(pod: &Value, min_ready: i64) -> bool {
    ready_condition(pod).is_some() && available(pod, min_ready)
}

/// `GetScaledValueFromIntOrPercent`, rounding up: an integer, or a
/// percentage of `total`.
fn scaled(value: &Value, total: usize) -> usize {
    match value {
        Value::Number(n) => n.as_u64().unwrap_or(0) as usize,
        Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<usize>().ok()) {
            Some(percent) => (percent * total).div_ceil(100),
            None => 0,
        },
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daemon_tolerations_are_added_once() {
        let mut spec = json!({"tolerations": [
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}]});
        add_daemon_tolerations(&mut spec);
        let list = spec["tolerations"].as_array().expect("list");
        assert_eq!(list.len(), 7);
        assert_eq!(list[0]["key"], "dedicated");
        let mut host = json!({"hostNetwork": true});
        add_daemon_tolerations(&mut host);
        assert_eq!(host["tolerations"].as_array().map(Vec::len), Some(7));
    }

    #[test]
    fn pods_are_pinned_by_a_match_fields_term() {
        let mut spec = json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]}}});
        pin_to_node(&mut spec, "node-2");
        let affinity = &spec["affinity"]["nodeAffinity"];
        let terms =
            &affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
        assert_eq!(
            *terms,
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-2"]}]}])
        );
        assert!(affinity["preferredDuringSchedulingIgnoredDuringExecution"].is_array());
        let pod = json!({"spec": spec});
        assert_eq!(target_node(&pod).as_deref(), Some("node-2"));
    }

    #[test]
    fn max_unavailable_scales_up() {
        assert_eq!(scaled(&json!(2), 3), 2);
        assert_eq!(scaled(&json!("10%"), 3), 1);
        assert_eq!(scaled(&json!("50%"), 3), 2);
        assert_eq!(scaled(&json!("0%"), 3), 0);
    }

    #[test]
    fn failed_pods_back_off() {
        let backoff = Backoff::default();
        let t0 = Instant::now();
        assert!(backoff.allow("k".into(), t0));
        assert!(!backoff.allow("k".into(), t0 + Duration::from_millis(500)));
        assert!(backoff.allow("k".into(), t0 + Duration::from_secs(1)));
        // Now 2 s.
        assert!(!backoff.allow("k".into(), t0 + Duration::from_millis(2500)));
        assert!(backoff.allow("k".into(), t0 + Duration::from_secs(3)));
        assert!(backoff.allow("other".into(), t0));
    }
}
