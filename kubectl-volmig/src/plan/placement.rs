//! Where the mover pods run, and why (VolSync's ReadWriteOnce affinity).
//!
//! A ReadWriteOnce volume attaches to one node at a time: while an app pod
//! mounts the source, the sender must run on that pod's node, with the app
//! pod's tolerations so that the node's taints admit it. A ReadWriteMany or
//! ReadOnlyMany source mounts anywhere, and an unused one wherever the
//! scheduler (and the volume's own node affinity) allows. The receiver goes
//! where `--to-node` says, or where the scheduler puts it, which is where a
//! WaitForFirstConsumer destination gets provisioned, or where an existing
//! destination is already tied to.
//!
//! A pinned pod gets required node affinity on `kubernetes.io/hostname`,
//! never `nodeName`, so the scheduler still binds WaitForFirstConsumer
//! claims: hence [`NodePlacement::hostname`], the node's label value.

use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod, Toleration, Volume,
};

use super::NodePlacement;
use crate::spec::DestinationSpec;

/// The node label required node affinity matches.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Pods in `claim_ns` that mount `claim` and still hold it: not Succeeded
/// or Failed. Terminating pods count: they hold the volume until they are
/// gone. In the order given.
pub fn mounting_pods<'a>(claim_ns: &str, claim: &str, pods: &'a [Pod]) -> Vec<&'a Pod> {
    pods.iter()
        .filter(|pod| pod.metadata.namespace.as_deref() == Some(claim_ns))
        .filter(|pod| !matches!(phase(pod), "Succeeded" | "Failed"))
        .filter(|pod| {
            let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
            volumes
                .unwrap_or_default()
                .iter()
                .any(|v| mounts(pod, v, claim))
        })
        .collect()
}

/// Where the sender runs: next to the app pod that holds a ReadWriteOnce
/// source, else wherever the scheduler likes.
pub fn sender(
    source: &PersistentVolumeClaim,
    volume: Option<&PersistentVolume>,
    pods: &[Pod],
    nodes: &[Node],
) -> NodePlacement {
    let modes = access_modes(source, volume);
    if let Some(shared) = ["ReadWriteMany", "ReadOnlyMany"]
        .into_iter()
        .find(|m| modes.iter().any(|mode| mode == m))
    {
        return unpinned(format!("the source is {shared}: any node can mount it"));
    }
    let namespace = source.metadata.namespace.as_deref().unwrap_or_default();
    let name = source.metadata.name.as_deref().unwrap_or_default();
    let users = mounting_pods(namespace, name, pods);
    let Some(app) = preferred(&users) else {
        return unused(volume, nodes, &users);
    };
    let node = app
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let mode = if modes.iter().any(|m| m == "ReadWriteOncePod") {
        "ReadWriteOncePod"
    } else {
        "ReadWriteOnce"
    };
    let app_name = app.metadata.name.clone().unwrap_or_default();
    let state = if app.metadata.deletion_timestamp.is_some() {
        "terminating"
    } else {
        phase(app)
    };
    NodePlacement {
        hostname: Some(hostname(&node, nodes)),
        reason: format!(
            "{mode} source in use by {state} pod {app_name} on {node}: \
             the sender must run on the same node"
        ),
        node: Some(node),
        tolerations: app
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.clone())
            .unwrap_or_default(),
        app_pod: Some(app_name),
        avoid: Vec::new(),
    }
}

/// Where the sender runs when it reads a snapshot or a clone of the
/// source: a claim of its own, with no app beside it.
pub fn copy_reader() -> NodePlacement {
    unpinned(
        "the sender reads a snapshot or clone of the source, a claim no app uses: \
         the scheduler places it"
            .to_string(),
    )
}

/// The annotation the scheduler puts on a WaitForFirstConsumer claim: the
/// node its volume is provisioned for.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// Where the receiver runs: on `--to-node`, else wherever the scheduler
/// likes. An existing destination already tied to a node takes the receiver
/// there, and the reason says so: its volume's node affinity (a local PV),
/// or, for a claim not bound yet, the node the scheduler selected for it
/// ([`SELECTED_NODE`]), which the scheduler keeps to.
pub fn receiver(
    spec: &DestinationSpec,
    destination_claim: Option<&PersistentVolumeClaim>,
    destination_volume: Option<&PersistentVolume>,
    nodes: &[Node],
) -> NodePlacement {
    if let Some(node) = &spec.node {
        let found = nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(node.as_str()));
        return NodePlacement {
            node: Some(node.clone()),
            hostname: Some(hostname(node, nodes)),
            tolerations: found.map(tolerations_for).unwrap_or_default(),
            reason: format!("pinned to {node} by --to-node"),
            app_pod: None,
            avoid: Vec::new(),
        };
    }
    if let Some(volume) = destination_volume {
        let name = volume.metadata.name.as_deref().unwrap_or_default();
        return match required_affinity(volume) {
            Some(pin) if pin.hostnames.is_empty() => unpinned(format!(
                "destination volume {name} is restricted by node affinity: the scheduler \
                 places the receiver where it can mount it"
            )),
            Some(pin) => unpinned(format!(
                "destination volume {name} is bound to {} (node affinity): the scheduler \
                 places the receiver there",
                pin.nodes(nodes).join(" or ")
            )),
            None => unpinned(format!(
                "destination volume {name} has no node affinity: the scheduler chooses"
            )),
        };
    }
    let selected = destination_claim.and_then(|c| {
        let node = c.metadata.annotations.as_ref()?.get(SELECTED_NODE)?;
        Some((c, node)).filter(|(_, node)| !node.is_empty())
    });
    match selected {
        Some((claim, node)) => unpinned(format!(
            "destination claim {}/{} is bound to {node} ({SELECTED_NODE}): its volume is \
             provisioned there, and the scheduler places the receiver there",
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default(),
        )),
        None => unpinned(
            "the scheduler chooses; a WaitForFirstConsumer destination is created \
             where the receiver lands"
                .to_string(),
        ),
    }
}

/// A volume's required node affinity, as the nodes it names by hostname
/// (empty when it pins by other labels, a zone for instance).
pub(super) struct Pin {
    hostnames: Vec<String>,
}

impl Pin {
    /// The hostnames it pins to, sorted (empty: by other labels).
    pub(super) fn hostnames(&self) -> &[String] {
        &self.hostnames
    }

    /// Whether a node whose hostname label is `hostname` may mount it, as
    /// far as hostname terms tell (other terms are the scheduler's to judge).
    pub(super) fn admits(&self, hostname: &str) -> bool {
        self.hostnames.is_empty() || self.hostnames.iter().any(|h| h == hostname)
    }

    /// The node names it pins to (by hostname label, when nodes show one).
    pub(super) fn nodes(&self, nodes: &[Node]) -> Vec<String> {
        self.hostnames
            .iter()
            .map(|h| {
                nodes
                    .iter()
                    .find(|n| label(n, HOSTNAME_LABEL) == Some(h.as_str()))
                    .and_then(|n| n.metadata.name.clone())
                    .unwrap_or_else(|| h.clone())
            })
            .collect()
    }

    fn describe(&self, nodes: &[Node]) -> String {
        if self.hostnames.is_empty() {
            "is restricted by node affinity".to_string()
        } else {
            format!(
                "is pinned to {} by node affinity",
                self.nodes(nodes).join(", ")
            )
        }
    }
}

/// The volume's required node affinity, `None` when it has none.
pub(super) fn required_affinity(volume: &PersistentVolume) -> Option<Pin> {
    let selector = volume
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?;
    let mut hostnames: Vec<String> = selector
        .node_selector_terms
        .iter()
        .flat_map(|term| term.match_expressions.as_deref().unwrap_or_default())
        .filter(|e| e.key == HOSTNAME_LABEL && e.operator == "In")
        .flat_map(|e| e.values.clone().unwrap_or_default())
        .collect();
    hostnames.sort();
    hostnames.dedup();
    Some(Pin { hostnames })
}

/// The node's `kubernetes.io/hostname` label, or its name when the node is
/// unknown or unlabelled.
pub(super) fn hostname(node: &str, nodes: &[Node]) -> String {
    nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node))
        .and_then(|n| label(n, HOSTNAME_LABEL))
        .unwrap_or(node)
        .to_string()
}

/// The claim's access modes, else its volume's.
pub(super) fn access_modes(
    claim: &PersistentVolumeClaim,
    volume: Option<&PersistentVolume>,
) -> Vec<String> {
    let of_claim = claim.spec.as_ref().and_then(|s| s.access_modes.clone());
    let of_volume = || volume?.spec.as_ref()?.access_modes.clone();
    of_claim
        .filter(|m| !m.is_empty())
        .or_else(of_volume)
        .unwrap_or_default()
}

/// The app pod whose node the sender takes: scheduled ones only, Running
/// before Pending before the rest (terminating, Unknown), then the oldest,
/// then by name, so that the choice is the same on every run.
pub(super) fn preferred<'a>(users: &[&'a Pod]) -> Option<&'a Pod> {
    users
        .iter()
        .copied()
        .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
        .min_by_key(|p| {
            let rank = match (phase(p), p.metadata.deletion_timestamp.is_some()) {
                ("Running", false) => 0,
                ("Pending", false) => 1,
                _ => 2,
            };
            // Pods without a creation time (never from the API) go last.
            let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (rank, created.is_none(), created, p.metadata.name.clone())
        })
}

/// The reason for an unpinned sender on an unused ReadWriteOnce source.
fn unused(volume: Option<&PersistentVolume>, nodes: &[Node], users: &[&Pod]) -> NodePlacement {
    let mut reason = if users.is_empty() {
        "the source is not in use".to_string()
    } else {
        let names: Vec<&str> = users
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        format!(
            "the source's pods ({}) are not scheduled yet",
            names.join(", ")
        )
    };
    let mut tolerations = Vec::new();
    match volume.and_then(required_affinity) {
        Some(pin) => {
            reason.push_str(&format!(
                ": the scheduler chooses; its volume {}, which the scheduler honours",
                pin.describe(nodes)
            ));
            // The volume's one node may be tainted: the sender must go there.
            if let [only] = pin.nodes(nodes).as_slice() {
                let node = nodes
                    .iter()
                    .find(|n| n.metadata.name.as_deref() == Some(only));
                tolerations = node.map(tolerations_for).unwrap_or_default();
            }
        }
        None => reason.push_str(
            ": the scheduler chooses (a node-local volume's node affinity still applies)",
        ),
    }
    NodePlacement {
        tolerations,
        ..unpinned(reason)
    }
}

fn unpinned(reason: String) -> NodePlacement {
    NodePlacement {
        node: None,
        hostname: None,
        tolerations: Vec::new(),
        reason,
        app_pod: None,
        avoid: Vec::new(),
    }
}

/// Tolerations for the taints a user put on a node (`NoSchedule`,
/// `NoExecute`): pinning a pod there asks for them. The node lifecycle's
/// own taints (`node.kubernetes.io/…`: not ready, unreachable, cordoned)
/// are left alone: they mean the node cannot take the pod now.
fn tolerations_for(node: &Node) -> Vec<Toleration> {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
    taints
        .unwrap_or_default()
        .iter()
        .filter(|t| t.effect != "PreferNoSchedule")
        .filter(|t| !t.key.starts_with("node.kubernetes.io/"))
        .map(|t| Toleration {
            key: Some(t.key.clone()),
            operator: Some(if t.value.is_some() { "Equal" } else { "Exists" }.to_string()),
            value: t.value.clone(),
            effect: Some(t.effect.clone()),
            toleration_seconds: None,
        })
        .collect()
}

/// Whether volume `v` of `pod` is claim `claim`: by reference, or as the
/// claim of a generic ephemeral volume (`<pod>-<volume>`).
fn mounts(pod: &Pod, v: &Volume, claim: &str) -> bool {
    if let Some(source) = &v.persistent_volume_claim {
        return source.claim_name == claim;
    }
    v.ephemeral.is_some()
        && pod.metadata.name.as_deref().is_some_and(|p| {
            claim
                .strip_prefix(p)
                .and_then(|rest| rest.strip_prefix('-'))
                == Some(v.name.as_str())
        })
}

fn phase(pod: &Pod) -> &str {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    phase.unwrap_or("Pending")
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}
