//! Whether a pod may run on a node, as the scheduler's filters say it
//! (issue 19): NodeUnschedulable (a cordoned node), TaintToleration (the
//! node's `NoSchedule` and `NoExecute` taints against the pod's
//! tolerations) and NodeAffinity (the pod's `nodeSelector` and required
//! node affinity against the node's labels and name). Pure: `--to-node`
//! checks a node move with it before anything is created, so that the app
//! is not moved onto a node where it cannot run.
//!
//! The rules are those of `k8s.io/component-helpers/scheduling/corev1`
//! (`ToleratesTaint`, `nodeaffinity.NodeSelector`) as of Kubernetes 1.31.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration,
};

/// Why a pod cannot run on a node, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misfit {
    /// `spec.unschedulable`: `kubectl cordon`.
    Cordoned,
    /// A `NoSchedule` or `NoExecute` taint the pod does not tolerate.
    Taint(String),
    /// A `nodeSelector` entry the node's labels do not have.
    Selector {
        key: String,
        value: String,
        has: Option<String>,
    },
    /// No term of the required node affinity matches.
    Affinity,
}

impl std::fmt::Display for Misfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Misfit::Cordoned => write!(f, "it is cordoned (spec.unschedulable)"),
            Misfit::Taint(taint) => write!(f, "its taint {taint} is not tolerated"),
            Misfit::Selector { key, value, has } => match has {
                Some(has) => write!(
                    f,
                    "nodeSelector {key}={value} does not match its label {key}={has}"
                ),
                None => write!(
                    f,
                    "nodeSelector {key}={value} does not match: it has no label {key}"
                ),
            },
            Misfit::Affinity => write!(
                f,
                "no term of the required node affinity matches its labels"
            ),
        }
    }
}

/// Whether the node is cordoned.
pub fn cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// Why `pod` may not run on `node`, if it may not: the first filter that
/// refuses it, in the scheduler's order (a cordoned node is told apart by
/// [`cordoned`], since movers are refused there too).
pub fn misfit(pod: &Pod, node: &Node) -> Option<Misfit> {
    let spec = pod.spec.as_ref()?;
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    let untolerated = taints
        .iter()
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)));
    if let Some(t) = untolerated {
        return Some(Misfit::Taint(taint_text(t)));
    }
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    for (key, value) in spec.node_selector.iter().flatten() {
        if labels.get(key) != Some(value) {
            return Some(Misfit::Selector {
                key: key.clone(),
                value: value.clone(),
                has: labels.get(key).cloned(),
            });
        }
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let name = node.metadata.name.as_deref().unwrap_or_default();
    match required {
        Some(selector)
            if !selector
                .node_selector_terms
                .iter()
                .any(|t| term_matches(t, labels, name)) =>
        {
            Some(Misfit::Affinity)
        }
        _ => None,
    }
}

/// `ToleratesTaint`: the effect (empty: all), the key (empty with
/// `Exists`: all), then the operator (`Equal`, the default, compares values).
fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

fn taint_text(t: &Taint) -> String {
    match t.value.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => format!("{}={v}:{}", t.key, t.effect),
        None => format!("{}:{}", t.key, t.effect),
    }
}

/// Whether `node` is one a node selector (a PV's required node affinity)
/// allows: any of its terms matches.
pub fn selector_matches(selector: &NodeSelector, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let name = node.metadata.name.as_deref().unwrap_or_default();
    selector
        .node_selector_terms
        .iter()
        .any(|t| term_matches(t, labels, name))
}

/// A term matches when all its requirements do; a term with none matches
/// no node.
fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let by_field = |r: &NodeSelectorRequirement| {
        // `metadata.name` is the only field a node selector may name.
        let value = (r.key == "metadata.name").then_some(name);
        requirement_matches(r, value)
    };
    expressions
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(by_field)
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |v: &str| v.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(bound)) = (
                value.and_then(number),
                values.first().and_then(|v| number(v)),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

/// Whether the node's `Ready` condition is `True`.
pub fn ready(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref());
    conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(extra: serde_json::Value) -> Node {
        let mut n = json!({"metadata": {"name": "node-3", "labels": {
            "kubernetes.io/hostname": "node-3", "disk": "ssd", "gen": "5"}}});
        if let (Some(base), Some(more)) = (n.as_object_mut(), extra.as_object()) {
            base.extend(more.clone());
        }
        serde_json::from_value(n).expect("node")
    }

    fn pod(spec: serde_json::Value) -> Pod {
        let mut s = json!({"containers": [{"name": "app", "image": "busybox"}]});
        if let (Some(base), Some(more)) = (s.as_object_mut(), spec.as_object()) {
            base.extend(more.clone());
        }
        serde_json::from_value(json!({"metadata": {"name": "db-0"}, "spec": s})).expect("pod")
    }

    #[test]
    fn taints_are_matched_as_the_scheduler_matches_them() {
        let tainted = node(json!({"spec": {"taints": [
            {"key": "dedicated", "value": "db", "effect": "NoSchedule"},
            {"key": "soft", "effect": "PreferNoSchedule"},
        ]}}));
        let plain = pod(json!({}));
        assert_eq!(
            misfit(&plain, &tainted),
            Some(Misfit::Taint("dedicated=db:NoSchedule".into()))
        );
        for tol in [
            json!({"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}),
            json!({"key": "dedicated", "value": "db"}),
            json!({"key": "dedicated", "operator": "Exists"}),
            json!({"operator": "Exists"}),
        ] {
            assert_eq!(
                misfit(&pod(json!({"tolerations": [tol]})), &tainted),
                None,
                "{tol}"
            );
        }
        for tol in [
            json!({"key": "dedicated", "value": "web"}),
            json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}),
            json!({"key": "other", "operator": "Exists"}),
        ] {
            assert!(
                misfit(&pod(json!({"tolerations": [tol]})), &tainted).is_some(),
                "{tol}"
            );
        }
    }

    #[test]
    fn node_selectors_and_required_affinity_must_match() {
        let n = node(json!({}));
        assert_eq!(
            misfit(&pod(json!({"nodeSelector": {"disk": "ssd"}})), &n),
            None
        );
        let wrong = misfit(&pod(json!({"nodeSelector": {"disk": "hdd"}})), &n).expect("misfit");
        assert_eq!(
            wrong.to_string(),
            "nodeSelector disk=hdd does not match its label disk=ssd"
        );
        let affinity = |terms: serde_json::Value| {
            pod(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms}}}}),
            )
        };
        let fits = [
            json!([{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd", "nvme"]}]}]),
            json!([{"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}]),
            json!([{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}]),
            json!([{"matchExpressions": [{"key": "disk", "operator": "NotIn", "values": ["hdd"]}]}]),
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-3"]}]}]),
            // Terms are ORed.
            json!([{"matchExpressions": [{"key": "x", "operator": "Exists"}]},
                   {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}]),
        ];
        for terms in fits {
            assert_eq!(misfit(&affinity(terms.clone()), &n), None, "{terms}");
        }
        let misfits = [
            json!([{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]}]),
            json!([{"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["5"]}]}]),
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]),
            // Within a term, requirements are ANDed; an empty term matches nothing.
            json!([{"matchExpressions": [{"key": "disk", "operator": "Exists"},
                                         {"key": "zone", "operator": "Exists"}]}]),
            json!([{}]),
        ];
        for terms in misfits {
            assert_eq!(
                misfit(&affinity(terms.clone()), &n),
                Some(Misfit::Affinity),
                "{terms}"
            );
        }
    }

    #[test]
    fn cordoned_and_ready_read_the_node() {
        assert!(cordoned(&node(json!({"spec": {"unschedulable": true}}))));
        assert!(!cordoned(&node(json!({}))));
        let ready_node =
            node(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}));
        assert!(ready(&ready_node));
        let unknown =
            node(json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}));
        assert!(!ready(&unknown));
    }
}
