//! Planning a rehome, pure: from the volumes chosen, their claims, the
//! nodes, the workloads that mount the claims and the drivers' objects as
//! read, either every change to make or every reason it cannot be made,
//! before anything is touched.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use serde_json::Value;

use super::drivers::{self, DriverObject};
use super::{affinity, rehomed, RehomeError, Target};
use crate::plan::fit;
use crate::plan::quiesce::{self, ScaleTarget, Workloads};

/// What a rehome is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    Node(String),
    Topology { key: String, value: String },
}

/// A volume chosen, with what was read around it.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub volume: PersistentVolume,
    /// The claim its `claimRef` names, when it exists.
    pub claim: Option<PersistentVolumeClaim>,
    /// Its driver's object, when the driver keeps one and its CRD is
    /// served: `None` inside when the object was not found.
    pub driver_object: Option<Option<Value>>,
    /// Found by `--all-from-node`: a volume that cannot be rehomed as it is
    /// (its claim gone, being deleted) is left out with a warning rather
    /// than refusing the rest.
    pub skippable: bool,
}

/// One volume planned.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub original: PersistentVolume,
    pub rehomed: PersistentVolume,
    pub claim: Option<PersistentVolumeClaim>,
    pub driver_objects: Vec<DriverObject>,
}

/// A whole rehome planned.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub volumes: Vec<Planned>,
    /// The owners to stop, per namespace.
    pub stops: Vec<(String, ScaleTarget)>,
    /// What the user should know but need not act on.
    pub warnings: Vec<String>,
}

/// Why a rehome cannot be made as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("node {0:?} does not exist")]
    NodeNotFound(String),
    #[error("node {0:?} is cordoned: the app's pods could not start there (kubectl uncordon {0})")]
    NodeCordoned(String),
    #[error("no persistentvolume is pinned to node {0:?}")]
    NothingOnNode(String),
    #[error("persistentvolume {volume:?} is pinned there already")]
    AlreadyThere { volume: String },
    #[error(transparent)]
    Volume(#[from] RehomeError),
    #[error(transparent)]
    Driver(#[from] drivers::DriverError),
    #[error(
        "claim {claim} names persistentvolume {volume:?} but is {phase}: only a bound claim \
         (or a volume with no claim) is rehomed"
    )]
    ClaimNotBound {
        claim: String,
        volume: String,
        phase: String,
    },
    #[error("cannot stop every consumer of {claim}: {list}")]
    Unstoppable { claim: String, list: String },
    #[error(
        "persistentvolume {volume:?} is {state}: its claim {claim} is gone, and made again it \
         would wait for any new claim of that name; delete it, or bind it first"
    )]
    ClaimGone {
        volume: String,
        claim: String,
        state: String,
    },
    #[error("persistentvolume {0:?} is being deleted")]
    Terminating(String),
    #[error(
        "no schedulable node has the label {key}={value}: the app's pods could not run anywhere"
    )]
    NoNodeWithLabel { key: String, value: String },
    #[error("pod {pod} could not run on node {node:?}: {why}")]
    Misfit {
        pod: String,
        node: String,
        why: String,
    },
    #[error(
        "{object} was not found, though persistentvolume {volume:?} is of {driver}: \
         its node agent would refuse the volume on the new node"
    )]
    DriverObjectMissing {
        object: String,
        volume: String,
        driver: String,
    },
}

impl Refusal {
    /// Never: the cluster has to change first.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// Plans the rehome of `candidates` to `want`, or says every reason it
/// cannot be done.
pub fn plan(
    candidates: &[Candidate],
    want: &Want,
    pool: Option<&str>,
    nodes: &[Node],
    workloads: &BTreeMap<String, Workloads>,
) -> Result<Plan, Vec<Refusal>> {
    let mut refusals = Vec::new();
    let node = match want {
        Want::Node(name) => match nodes
            .iter()
            .find(|n| n.metadata.name.as_ref() == Some(name))
        {
            Some(n) if fit::cordoned(n) => {
                refusals.push(Refusal::NodeCordoned(name.clone()));
                Some(n)
            }
            Some(n) => Some(n),
            None => return Err(vec![Refusal::NodeNotFound(name.clone())]),
        },
        Want::Topology { .. } => None,
    };
    let target = match (want, node) {
        (Want::Topology { key, value }, _) => Target::Topology { key, value },
        (Want::Node(_), Some(n)) => Target::Node(n),
        (Want::Node(name), None) => return Err(vec![Refusal::NodeNotFound(name.clone())]),
    };
    if let Want::Topology { key, value } = want {
        let labelled = nodes.iter().any(|n| {
            let labels = n.metadata.labels.as_ref();
            labels.and_then(|l| l.get(key)) == Some(value) && !fit::cordoned(n)
        });
        if !labelled {
            refusals.push(Refusal::NoNodeWithLabel {
                key: key.clone(),
                value: value.clone(),
            });
        }
    }
    let mut planned = Vec::new();
    let mut stops: Vec<(String, ScaleTarget)> = Vec::new();
    let mut warnings = Vec::new();
    for c in candidates {
        match volume(c, &target, pool) {
            Ok(p) => planned.push(p),
            Err(r @ (Refusal::ClaimGone { .. } | Refusal::Terminating(_))) if c.skippable => {
                warnings.push(format!("left out: {r}"));
                continue;
            }
            Err(r) => refusals.push(r),
        }
        let Some(claim) = &c.claim else { continue };
        let ns = claim.metadata.namespace.clone().unwrap_or_default();
        let name = claim.metadata.name.clone().unwrap_or_default();
        let empty = Workloads::default();
        let w = workloads.get(&ns).unwrap_or(&empty);
        match quiesce::plan(&name, w) {
            Ok(q) => {
                for t in q.targets {
                    let known = stops
                        .iter()
                        .any(|(n, s)| *n == ns && s.kind == t.kind && s.name == t.name);
                    if !known {
                        stops.push((ns.clone(), t));
                    }
                }
            }
            Err(unstoppable) => refusals.push(Refusal::Unstoppable {
                claim: format!("{ns}/{name}"),
                list: unstoppable
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            }),
        }
        // The app's pods must be able to run where the volume goes.
        if let Some(node) = node {
            for pod in w.pods.iter().filter(|p| quiesce::mounts(p, &name)) {
                if let Some(why) = fit::misfit(pod, node).filter(|m| *m != fit::Misfit::Cordoned) {
                    refusals.push(Refusal::Misfit {
                        pod: format!("{ns}/{}", pod.metadata.name.clone().unwrap_or_default()),
                        node: node.metadata.name.clone().unwrap_or_default(),
                        why: why.to_string(),
                    });
                }
            }
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    if let Some(n) = node.filter(|n| !fit::ready(n)) {
        warnings.push(format!(
            "node {} is not Ready: the app's pods wait for it",
            n.metadata.name.clone().unwrap_or_default()
        ));
    }
    Ok(Plan {
        volumes: planned,
        stops,
        warnings,
    })
}

/// One volume planned, or why not.
fn volume(c: &Candidate, target: &Target<'_>, pool: Option<&str>) -> Result<Planned, Refusal> {
    let pv = &c.volume;
    let name = pv.metadata.name.clone().unwrap_or_default();
    if pv.metadata.deletion_timestamp.is_some() {
        return Err(Refusal::Terminating(name));
    }
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    if let (Some(r), None) = (claim_ref, &c.claim) {
        return Err(Refusal::ClaimGone {
            volume: name,
            claim: format!(
                "{}/{}",
                r.namespace.clone().unwrap_or_default(),
                r.name.clone().unwrap_or_default()
            ),
            state: pv
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Released".into()),
        });
    }
    if let Some(claim) = &c.claim {
        let phase = claim
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".into());
        let bound_here = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(&name);
        if phase != "Bound" || !bound_here {
            return Err(Refusal::ClaimNotBound {
                claim: format!(
                    "{}/{}",
                    claim.metadata.namespace.clone().unwrap_or_default(),
                    claim.metadata.name.clone().unwrap_or_default()
                ),
                volume: name,
                phase,
            });
        }
    }
    let new = rehomed(pv, target)?;
    if affinity(&new) == affinity(pv) {
        return Err(Refusal::AlreadyThere { volume: name });
    }
    let mut driver_objects = Vec::new();
    let driver = pv
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .map(|c| c.driver.clone());
    if let (Some(kind), Some(found)) = (
        driver.as_deref().and_then(drivers::kind_of),
        &c.driver_object,
    ) {
        let object = found.as_ref().ok_or_else(|| Refusal::DriverObjectMissing {
            object: format!("{} {name}", kind.kind),
            volume: name.clone(),
            driver: kind.driver.to_string(),
        })?;
        let owner = drivers::owner(kind, &name, target)?;
        let rewrite = drivers::rewrite(kind, object, &owner, pool)?;
        if !rewrite.fields.is_empty() {
            driver_objects.push(rewrite);
        }
    }
    Ok(Planned {
        original: pv.clone(),
        rehomed: new,
        claim: c.claim.clone(),
        driver_objects,
    })
}

/// The volumes pinned to node `name`: each term of the affinity has a
/// one-value `In` requirement whose value is the node's own for that key
/// (its hostname, a driver's node id), or the node's name (a node that is
/// gone, whose labels cannot be read), or a `metadata.name` field naming
/// it.
pub fn pinned_to(
    volumes: &[PersistentVolume],
    name: &str,
    node: Option<&Node>,
) -> Vec<PersistentVolume> {
    let labels = node
        .and_then(|n| n.metadata.labels.clone())
        .unwrap_or_default();
    // Only keys that name one node: the hostname, and the node keys of
    // the drivers volmig knows (a zone names many).
    let node_key = |key: &str| {
        key == crate::plan::placement::HOSTNAME_LABEL
            || super::drivers::KINDS.iter().any(|k| k.owner_label == key)
    };
    let names_it = |key: &str, value: &str| {
        node_key(key) && labels.get(key).map_or(value == name, |own| own == value)
    };
    volumes
        .iter()
        .filter(|pv| {
            let Some(required) = affinity(pv) else {
                return false;
            };
            let terms = &required.node_selector_terms;
            !terms.is_empty()
                && terms.iter().all(|t| {
                    let by_label = t.match_expressions.iter().flatten().any(|r| {
                        r.operator == "In"
                            && matches!(r.values.as_deref(), Some([v]) if names_it(&r.key, v))
                    });
                    let by_name = t.match_fields.iter().flatten().any(|f| {
                        f.key == "metadata.name"
                            && f.operator == "In"
                            && matches!(f.values.as_deref(), Some([v]) if v == name)
                    });
                    by_label || by_name
                })
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests;
