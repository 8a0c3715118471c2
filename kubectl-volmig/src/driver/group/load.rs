//! The nodes' load of a set's movers, from the pods the cluster shows and
//! the placements of claims whose pods are not there yet.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::Client;

use super::admit::{Candidate, Load};
use crate::driver::DriverError;
use crate::names::{self, Component};
use crate::plan::quiesce::finished;
use crate::plan::Plan;
use crate::record::group::Member;

/// The load, and each node's `kubernetes.io/hostname` label (what a
/// placement's affinity names); `known` is false when it could not be read.
#[derive(Default)]
pub struct NodeLoad {
    pub load: Load,
    pub hostnames: BTreeMap<String, String>,
    pub known: bool,
}

/// The load of the claims that run now, from their pods in the cluster.
pub async fn now(client: &Client, running: &[(&Member, &Plan)]) -> Result<NodeLoad, DriverError> {
    let mut pods = Vec::new();
    let mut namespaces: Vec<&str> = running
        .iter()
        .flat_map(|(_, p)| {
            [
                p.destination.namespace.as_str(),
                p.spec.source.namespace.as_str(),
            ]
        })
        .collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    if !running.is_empty() {
        let ops: Vec<&str> = running.iter().map(|(m, _)| m.operation.as_str()).collect();
        let selector = format!(
            "{}={},{} in ({})",
            names::MANAGED_BY_KEY,
            names::MANAGED_BY,
            names::OPERATION_KEY,
            ops.join(",")
        );
        for ns in namespaces {
            let api: Api<Pod> = Api::namespaced(client.clone(), ns);
            let listed = api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| DriverError::kube(format!("list the movers in namespace {ns}"), e))?;
            pods.extend(listed.items);
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes = nodes
        .list(&ListParams::default())
        .await
        .map_err(|e| DriverError::kube("list nodes", e))?;
    let hostnames = nodes
        .items
        .iter()
        .filter_map(|n| {
            let name = n.metadata.name.clone()?;
            let label = n
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/hostname"))
                .cloned()
                .unwrap_or_else(|| name.clone());
            Some((name, label))
        })
        .collect();
    Ok(NodeLoad {
        load: count(&pods, running),
        hostnames,
        known: true,
    })
}

/// Movers per node: a pod counts on its node once scheduled, on its
/// pinned node before; a mover not created yet (or between attempts)
/// counts on its pinned node.
/// A scheduler-placed mover without a node (or not created yet) is
/// `unplaced`.
pub fn count(pods: &[Pod], running: &[(&Member, &Plan)]) -> Load {
    let mut load = Load {
        running: running.len() as u32,
        ..Load::default()
    };
    let add = |node: &Option<String>, load: &mut Load| match node {
        Some(node) => *load.per_node.entry(node.clone()).or_default() += 1,
        None => load.unplaced += 1,
    };
    for (m, plan) in running {
        let roles = [
            (Component::Receiver, &plan.placement.receiver.node),
            (Component::Sender, &plan.placement.sender.node),
        ];
        for (role, pinned) in roles {
            let own: Vec<&Pod> = pods
                .iter()
                .filter(|p| label(p, names::OPERATION_KEY) == Some(m.operation.as_str()))
                .filter(|p| label(p, names::COMPONENT_KEY) == Some(role.as_str()))
                .filter(|p| !finished(p))
                .collect();
            if own.is_empty() {
                add(pinned, &mut load);
            }
            for pod in own {
                let scheduled = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                add(&scheduled.or_else(|| pinned.clone()), &mut load);
            }
        }
    }
    load
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// A queued claim as [`super::admit::admit`] sees it.
pub fn candidate(key: u32, plan: &Plan) -> Candidate {
    let nodes = [&plan.placement.receiver.node, &plan.placement.sender.node];
    Candidate {
        key,
        pinned: nodes.iter().filter_map(|n| (*n).clone()).collect(),
        unpinned: nodes.iter().filter(|n| n.is_none()).count() as u32,
    }
}

/// `plan` with its scheduler-placed movers kept off `avoid` (node names),
/// by their hostname labels.
pub fn avoiding(mut plan: Plan, avoid: &[String], hostnames: &BTreeMap<String, String>) -> Plan {
    let labels: Vec<String> = avoid
        .iter()
        .map(|n| hostnames.get(n).cloned().unwrap_or_else(|| n.clone()))
        .collect();
    for p in [&mut plan.placement.receiver, &mut plan.placement.sender] {
        if p.node.is_none() {
            p.avoid = labels.clone();
        }
    }
    plan
}
