//! The plan of a set of claims: each claim planned on its own by
//! [`super::plan`](super::plan()) (so every refusal of one claim applies),
//! then the set checked as a whole. Pure.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::quiesce::{ScalableKind, ScaleTarget};
use super::select::{replica_claims, Found, Selection};
use super::{ClaimAction, Plan, Refusal};
use crate::spec::ClaimRef;

/// One claim of the set, planned or refused.
#[derive(Debug, Clone)]
pub struct ClaimPlanned {
    /// Its key in the set: its place in plan order, kept by its record's
    /// name (`<op>-<key>`) whether or not the others are refused.
    pub key: u32,
    pub source: ClaimRef,
    /// Why the selection chose it, in words.
    pub why: String,
    pub outcome: Result<Plan, Refusal>,
}

/// The plan of a set.
#[derive(Debug, Clone)]
pub struct ManyPlan {
    pub operation: String,
    pub selection: Selection,
    pub claims: Vec<ClaimPlanned>,
    /// With `--cutover`: the owners stopped once for the whole set, in
    /// words (`StatefulSet db (3 -> 0 -> 3)`).
    pub stops: Vec<String>,
}

impl ManyPlan {
    /// The set of `claims` (in plan order), with the checks that span
    /// claims made: no two onto one destination.
    pub fn new(operation: &str, selection: Selection, mut claims: Vec<ClaimPlanned>) -> ManyPlan {
        refuse_shared_destinations(&mut claims);
        ManyPlan {
            operation: operation.to_string(),
            selection,
            claims,
            stops: Vec::new(),
        }
    }

    /// The claims that can be moved, with their plans.
    pub fn accepted(&self) -> impl Iterator<Item = (&ClaimPlanned, &Plan)> {
        self.claims
            .iter()
            .filter_map(|c| c.outcome.as_ref().ok().map(|p| (c, p)))
    }

    pub fn refused(&self) -> usize {
        self.claims.iter().filter(|c| c.outcome.is_err()).count()
    }

    /// Under `--cutover`, refuses each claim whose StatefulSet would stop
    /// (`stopped`: each claim's stopped owners) while claims of its running
    /// replicas stay out of the set: stopping a StatefulSet stops them all.
    pub fn refuse_partial_statefulsets(
        &mut self,
        found: &[Found],
        stopped: &BTreeMap<u32, Vec<ScaleTarget>>,
    ) {
        let selected: Vec<ClaimRef> = self.accepted().map(|(c, _)| c.source.clone()).collect();
        for c in &mut self.claims {
            if c.outcome.is_err() {
                continue;
            }
            let ns = &c.source.namespace;
            let targets = stopped.get(&c.key).map(Vec::as_slice).unwrap_or_default();
            let sets = targets
                .iter()
                .filter(|t| t.kind == ScalableKind::StatefulSet);
            for t in sets {
                let Some(f) = found.iter().find(|f| &f.namespace == ns) else {
                    continue;
                };
                let sts = f.workloads.stateful_sets.iter();
                let Some(sts) = sts
                    .into_iter()
                    .find(|s| s.metadata.name.as_deref() == Some(&t.name))
                else {
                    continue;
                };
                let replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let missing: Vec<String> = replica_claims(sts, &f.claims)
                    .into_iter()
                    .filter(|claim| ordinal(claim).is_some_and(|o| o < i64::from(replicas)))
                    .filter(|claim| !selected.contains(&ClaimRef::new(ns, claim)))
                    .collect();
                if !missing.is_empty() {
                    c.outcome = Err(Refusal::PartialStatefulSet {
                        namespace: ns.clone(),
                        sts: t.name.clone(),
                        missing,
                    });
                    break;
                }
            }
        }
    }

    /// Whether the set may go ahead: every claim planned, or with
    /// `skip_refused` at least one.
    pub fn verdict(&self, skip_refused: bool) -> Result<(), Refusal> {
        let (refused, total) = (self.refused(), self.claims.len());
        match refused {
            0 => Ok(()),
            r if r == total => Err(Refusal::NothingToMove { total }),
            _ if skip_refused => Ok(()),
            _ => Err(Refusal::ClaimsRefused { refused, total }),
        }
    }

    /// The plan as an object for `--dry-run -o json|yaml` (output only,
    /// not a resource): every claim with its source, consumers, destination
    /// and placement, or why it is refused; the owners a cutover stops;
    /// `objects`, what would be created.
    pub fn to_object(
        &self,
        namespace: &str,
        parallel: u32,
        per_node: u32,
        objects: Value,
    ) -> Value {
        let claims: Vec<Value> = self
            .claims
            .iter()
            .map(|c| match &c.outcome {
                Ok(p) => json!({
                    "key": c.key,
                    "operation": p.operation,
                    "why": c.why,
                    "source": {
                        "namespace": c.source.namespace, "name": c.source.name,
                        "volume": p.source.volume, "storageClass": p.source.storage_class,
                        "capacity": p.source.capacity, "usedBy": p.source.used_by,
                    },
                    "destination": p.destination,
                    "placement": {
                        "sender": placement_text(&p.placement.sender),
                        "receiver": placement_text(&p.placement.receiver),
                    },
                }),
                Err(refusal) => json!({
                    "key": c.key,
                    "why": c.why,
                    "source": {"namespace": c.source.namespace, "name": c.source.name},
                    "refused": refusal.to_string(),
                }),
            })
            .collect();
        json!({
            "apiVersion": "volmig.io/v1alpha2",
            "kind": "VolumeMigrationPlan",
            "metadata": {"name": self.operation, "namespace": namespace},
            "spec": {
                "selection": self.selection,
                "parallelism": {"claims": parallel, "perNode": per_node},
            },
            "claims": claims,
            "stops": self.stops,
            "objects": objects,
        })
    }

    /// The plan in words: a line per claim, as printed before anything is
    /// created.
    pub fn text(&self, parallel: u32, per_node: u32) -> String {
        let n = self.claims.len();
        let mut out = format!(
            "operation {}: {} ({n} claim{}); {parallel} at once, at most {per_node} movers on a node\n",
            self.operation,
            self.selection.describe(),
            if n == 1 { "" } else { "s" }
        );
        for c in &self.claims {
            out += &match &c.outcome {
                Ok(p) => claim_line(c, p),
                Err(refusal) => format!("  {}  REFUSED: {refusal}\n", c.source),
            };
        }
        let cutover = self.accepted().any(|(_, p)| p.spec.cutover.is_some());
        if cutover {
            out += "  cutover  every claim pre-copied while the app runs; then one stop of ";
            out += &match self.stops.is_empty() {
                true => "nothing (no pod mounts these claims)".to_string(),
                false => self.stops.join(", "),
            };
            out += "; final syncs side by side; every claim swapped before the app starts again; \
                     a claim whose final sync fails rolls the whole set back\n";
        }
        out
    }
}

/// `  prod/data-db-0  1Gi standard -> prod/data-db-0-migrated (local, new claim); sender node-1, receiver any node  [mounted by ...]`
fn claim_line(c: &ClaimPlanned, p: &Plan) -> String {
    let s = &p.source;
    let d = &p.destination;
    let node = |n: &Option<String>| n.clone().unwrap_or_else(|| "any node".to_string());
    let used = match s.used_by.as_slice() {
        [] => "mounted by no pod".to_string(),
        pods => format!("used by {}", pods.join(", ")),
    };
    let reads = match p.source_method.method {
        m if m.reads_copy() => format!(" (reads a {} of it)", m.as_str()),
        _ => String::new(),
    };
    format!(
        "  {}  {} {} -> {}/{} ({}, {}); sender {}{reads}, receiver {}; {used}; {}\n",
        c.source,
        s.capacity,
        s.storage_class.as_deref().unwrap_or("no class"),
        d.namespace,
        d.name,
        d.storage_class.as_deref().unwrap_or("default class"),
        match d.action {
            ClaimAction::Create => "new claim",
            ClaimAction::Reuse => "existing claim",
        },
        node(&p.placement.sender.node),
        node(&p.placement.receiver.node),
        c.why
    )
}

/// `node-1: why`, or `any node: why`.
fn placement_text(p: &super::NodePlacement) -> String {
    format!("{}: {}", p.node.as_deref().unwrap_or("any node"), p.reason)
}

/// A replica claim's ordinal: what follows its last `-`.
fn ordinal(claim: &str) -> Option<i64> {
    claim.rsplit_once('-')?.1.parse().ok()
}

/// Every claim after the first whose destination another accepted claim
/// takes is refused, naming all the claims that wanted it.
fn refuse_shared_destinations(claims: &mut [ClaimPlanned]) {
    let wanted: Vec<(ClaimRef, Option<ClaimRef>)> = claims
        .iter()
        .map(|c| {
            let dest = c.outcome.as_ref().ok();
            let dest = dest.map(|p| ClaimRef::new(&p.destination.namespace, &p.destination.name));
            (c.source.clone(), dest)
        })
        .collect();
    for (i, c) in claims.iter_mut().enumerate() {
        let Some(dest) = &wanted[i].1 else {
            continue;
        };
        let sharing: Vec<&ClaimRef> = wanted
            .iter()
            .filter(|(_, d)| d.as_ref() == Some(dest))
            .map(|(source, _)| source)
            .collect();
        if sharing.len() > 1 && *sharing[0] != wanted[i].0 {
            c.outcome = Err(Refusal::DuplicateDestination {
                namespace: dest.namespace.clone(),
                name: dest.name.clone(),
                sources: sharing.iter().map(|s| s.to_string()).collect(),
            });
        }
    }
}
