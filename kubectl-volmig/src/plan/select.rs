//! Which claims an operation migrates (issue 18): the [`Selection`] the
//! command was given, applied to what was read of the cluster ([`Found`]).
//!
//! Pure: `driver::gather::select::found` does the reading. `-l` is applied
//! by the API server (the claims arrive filtered by `labelSelector`), so a
//! selector has one parser, the API server's. Every selection leaves out
//! the claims volmig created itself (destinations, sync-back claims: a copy
//! of a copy is never meant) and claims being deleted (nothing to keep).
//!
//! - `workload`: `--workload KIND/NAME`, its parsing and its claims.

#[cfg(test)]
mod tests;
mod workload;

pub use workload::{parse_workload, replica_claims, template_of, WorkloadKind};

use std::cmp::Ordering;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::quiesce::Workloads;
use crate::names::{MANAGED_BY, MANAGED_BY_KEY};
use crate::spec::ClaimRef;

/// How the claims of an operation were chosen; recorded in the operation's
/// spec so that `describe` can say it, and a plan can be made again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Selection {
    /// `migrate a b c`.
    Claims { names: Vec<String> },
    /// `--workload statefulset/db`: the claims its pods mount, its pod
    /// template names, and a StatefulSet's replica claims.
    Workload { kind: WorkloadKind, name: String },
    /// `-l tier=db [-A]`.
    Labels {
        selector: String,
        all_namespaces: bool,
    },
    /// `--all`: every claim of one namespace.
    All,
    /// `--from-storage-class standard [-A]`.
    StorageClass { class: String, all_namespaces: bool },
    /// `--from-node node-1`, `drain node-1`: every claim whose volume is
    /// pinned to that node alone (its `kubernetes.io/hostname` label), in
    /// every namespace.
    Node { node: String, hostname: String },
}

impl Selection {
    /// Whether it looks in every namespace (`-A`).
    pub fn all_namespaces(&self) -> bool {
        match self {
            Selection::Labels { all_namespaces, .. }
            | Selection::StorageClass { all_namespaces, .. } => *all_namespaces,
            Selection::Node { .. } => true,
            Selection::Claims { .. } | Selection::Workload { .. } | Selection::All => false,
        }
    }

    /// For messages and `describe`: `claims a, b`, `statefulset/db`,
    /// `-l tier=db, all namespaces`.
    pub fn describe(&self) -> String {
        let chosen = match self {
            Selection::Claims { names } if names.len() == 1 => format!("claim {}", names[0]),
            Selection::Claims { names } => format!("claims {}", names.join(", ")),
            Selection::Workload { kind, name } => format!("{kind}/{name}"),
            Selection::Labels { selector, .. } => format!("-l {selector}"),
            Selection::All => "every claim".to_string(),
            Selection::StorageClass { class, .. } => format!("storage class {class}"),
            Selection::Node { node, .. } => format!("the volumes of node {node}"),
        };
        match self.all_namespaces() {
            true => format!("{chosen}, all namespaces"),
            false => chosen,
        }
    }
}

/// What selection reads of one namespace.
#[derive(Debug, Clone, Default)]
pub struct Found {
    pub namespace: String,
    /// Its claims (only those `-l` matches, when one was given).
    pub claims: Vec<PersistentVolumeClaim>,
    /// The volumes its claims are bound to.
    pub volumes: Vec<PersistentVolume>,
    pub workloads: Workloads,
}

/// A claim chosen, and why: shown by the dry run, so that a user sees what
/// a selection took in before anything moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub claim: ClaimRef,
    /// `named`, `mounted by pod db-1 of StatefulSet db`, `storage class
    /// standard (from its volume)`, ...
    pub why: String,
}

/// Why no claim, or not the claims asked for, can be selected; each says
/// what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// `--workload` is not `KIND/NAME` of a kind selection knows.
    #[error(
        "invalid --workload {arg:?}: {why}; give KIND/NAME with KIND deployment, statefulset, \
         replicaset or pod, as kubectl names them (statefulset/db, sts/db, deploy/web)"
    )]
    BadWorkload { arg: String, why: String },

    /// Claims named that do not exist, or that no selection takes.
    #[error("{}", named_message(.scope, .missing, .excluded))]
    Named {
        /// `namespace prod`.
        scope: String,
        missing: Vec<String>,
        /// Each with why: `x-migrated was created by volmig (...)`.
        excluded: Vec<String>,
    },

    /// `--workload` names nothing.
    #[error(
        "no {workload} in {scope}: check its name with `kubectl get {resource}`, \
         and the namespace (-n)"
    )]
    UnknownWorkload {
        /// `statefulset/db`.
        workload: String,
        /// `statefulsets`.
        resource: String,
        scope: String,
    },

    /// The workload exists but neither its pods nor its templates use a
    /// claim.
    #[error(
        "{workload} in {scope} uses no claim: none of its running pods mounts one and its \
         templates name none; name the claims to migrate instead"
    )]
    WorkloadWithoutClaims { workload: String, scope: String },

    /// The selection took in nothing.
    #[error("no claim {what} in {scope}{hint}")]
    NoMatch {
        /// `matches -l tier=db`, `of storage class standard`.
        what: String,
        scope: String,
        /// What to try, starting with `; `, or empty.
        hint: String,
    },
}

impl SelectError {
    /// Never: selection reads nothing, so running it again changes nothing
    /// until the command or the cluster does.
    pub fn is_retryable(&self) -> bool {
        match self {
            SelectError::BadWorkload { .. }
            | SelectError::Named { .. }
            | SelectError::UnknownWorkload { .. }
            | SelectError::WorkloadWithoutClaims { .. }
            | SelectError::NoMatch { .. } => false,
        }
    }
}

fn named_message(scope: &str, missing: &[String], excluded: &[String]) -> String {
    let mut parts = Vec::new();
    match missing {
        [] => {}
        [one] => parts.push(format!("no claim {one} in {scope}")),
        many => parts.push(format!("no claims {} in {scope}", many.join(", "))),
    }
    if !missing.is_empty() {
        parts.push("`kubectl get pvc` lists them, -n picks the namespace".to_string());
    }
    parts.extend(excluded.iter().cloned());
    parts.join("; ")
}

/// The claims `selection` takes in `found`, by namespace and then by name
/// (`data-db-2` before `data-db-10`), each once. Names, workloads and
/// `--all` look in every namespace of `found`: the command reads one.
pub fn select(selection: &Selection, found: &[Found]) -> Result<Vec<Chosen>, SelectError> {
    let scope = scope(selection, found);
    let mut candidates = match selection {
        Selection::Claims { names } => return by_names(names, found, scope),
        Selection::Workload { kind, name } => workload::by_workload(*kind, name, found, &scope)?,
        Selection::Labels { selector, .. } => every(found, &format!("label selector {selector}")),
        Selection::All => every(found, "every claim"),
        Selection::StorageClass { class, .. } => by_class(class, found),
        Selection::Node { node, hostname } => by_node(node, hostname, found),
    };
    let before = candidates.len();
    candidates.retain(|c| left_out(c.claim).is_none());
    if candidates.is_empty() {
        let what = match selection {
            Selection::Claims { .. } => "named".to_string(),
            Selection::Workload { kind, name } => format!("of {kind}/{name} to migrate"),
            Selection::Labels { selector, .. } => format!("matches -l {selector}"),
            Selection::All => "to migrate".to_string(),
            Selection::StorageClass { class, .. } => format!("of storage class {class}"),
            Selection::Node { node, .. } => format!("has a volume pinned to node {node}"),
        };
        let hint = hint(selection, before);
        return Err(SelectError::NoMatch { what, scope, hint });
    }
    Ok(ordered(candidates))
}

/// A claim under consideration, and why.
struct Candidate<'a> {
    namespace: &'a str,
    claim: &'a PersistentVolumeClaim,
    why: String,
}

impl<'a> Candidate<'a> {
    fn new(f: &'a Found, claim: &'a PersistentVolumeClaim, why: String) -> Candidate<'a> {
        let namespace = &f.namespace;
        Candidate {
            namespace,
            claim,
            why,
        }
    }
}

fn name(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

/// Why no selection takes `claim`, if none does.
fn left_out(claim: &PersistentVolumeClaim) -> Option<&'static str> {
    let labels = claim.metadata.labels.as_ref();
    let by = labels.and_then(|l| l.get(MANAGED_BY_KEY));
    if by.is_some_and(|by| by == MANAGED_BY) {
        return Some(
            "was created by volmig (app.kubernetes.io/managed-by=kubectl-volmig): name the claim \
             it copies (its volmig.io/source annotation), or remove that label if the copy is yours now",
        );
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return Some("is being deleted: leave it out, or wait until it is gone or re-created");
    }
    None
}

/// Where `selection` looked, for messages.
fn scope(selection: &Selection, found: &[Found]) -> String {
    match found {
        [one] if !selection.all_namespaces() => format!("namespace {}", one.namespace),
        _ => "any namespace".to_string(),
    }
}

/// What to try when `selection` took in nothing; `skipped` claims matched
/// but are never migrated.
fn hint(selection: &Selection, skipped: usize) -> String {
    let mut hint = String::new();
    if skipped > 0 {
        hint = format!(
            " ({skipped} left out: claims volmig created and claims being deleted are never migrated)"
        );
    }
    hint.push_str(match (selection, selection.all_namespaces()) {
        (Selection::Labels { .. } | Selection::StorageClass { .. }, false) => {
            "; add -A to look in every namespace"
        }
        (Selection::Labels { .. }, true) => {
            "; `kubectl get pvc -A -l SELECTOR` shows what the API server matches"
        }
        (Selection::StorageClass { .. }, true) => {
            "; a bound claim's class is its volume's: `kubectl get pv` shows them"
        }
        (Selection::All, _) => "; -n picks the namespace",
        (Selection::Node { .. }, _) => {
            "; only volumes whose node affinity names that node's hostname alone are node-local to it"
        }
        (Selection::Claims { .. } | Selection::Workload { .. }, _) => "",
    });
    hint
}

fn by_names(names: &[String], found: &[Found], scope: String) -> Result<Vec<Chosen>, SelectError> {
    let (mut chosen, mut missing, mut excluded) = (Vec::new(), Vec::new(), Vec::new());
    for (i, wanted) in names.iter().enumerate() {
        if names[..i].contains(wanted) {
            continue;
        }
        let mut seen = false;
        for f in found {
            for claim in f.claims.iter().filter(|c| name(&c.metadata) == wanted) {
                seen = true;
                match left_out(claim) {
                    Some(why) => excluded.push(format!("{wanted} {why}")),
                    None => chosen.push(Candidate::new(f, claim, "named".to_string())),
                }
            }
        }
        if !seen {
            missing.push(wanted.clone());
        }
    }
    if !missing.is_empty() || !excluded.is_empty() {
        return Err(SelectError::Named {
            scope,
            missing,
            excluded,
        });
    }
    if chosen.is_empty() {
        let hint = "; name at least one claim".to_string();
        let what = "named".to_string();
        return Err(SelectError::NoMatch { what, scope, hint });
    }
    Ok(ordered(chosen))
}

/// The claims bound to a volume pinned to `hostname` alone.
fn by_node<'a>(node: &str, hostname: &str, found: &'a [Found]) -> Vec<Candidate<'a>> {
    let pinned_here = |claim: &PersistentVolumeClaim, volumes: &[PersistentVolume]| {
        let bound = claim.spec.as_ref()?.volume_name.as_deref()?;
        let volume = volumes.iter().find(|pv| name(&pv.metadata) == bound)?;
        let pin = super::placement::required_affinity(volume)?;
        Some(pin.hostnames() == [hostname])
    };
    (found.iter())
        .flat_map(|f| {
            (f.claims.iter())
                .filter(|c| pinned_here(c, &f.volumes) == Some(true))
                .map(move |c| {
                    let why = format!("its volume is pinned to node {node}");
                    Candidate::new(f, c, why)
                })
        })
        .collect()
}

fn every<'a>(found: &'a [Found], why: &str) -> Vec<Candidate<'a>> {
    (found.iter())
        .flat_map(|f| (f.claims.iter()).map(move |c| Candidate::new(f, c, why.to_string())))
        .collect()
}

/// A claim's class: its volume's when bound, else its own; `from` says
/// which, for the dry run.
fn class_of<'a>(
    claim: &'a PersistentVolumeClaim,
    volumes: &'a [PersistentVolume],
) -> Option<(&'a str, &'static str)> {
    let spec = claim.spec.as_ref()?;
    let volume = spec
        .volume_name
        .as_deref()
        .filter(|v| !v.is_empty())
        .and_then(|v| volumes.iter().find(|pv| name(&pv.metadata) == v));
    let (class, from) = match volume {
        Some(pv) => (
            pv.spec.as_ref()?.storage_class_name.as_deref(),
            "from its volume",
        ),
        None => (spec.storage_class_name.as_deref(), "from the claim"),
    };
    Some((class.filter(|c| !c.is_empty())?, from))
}

fn by_class<'a>(class: &str, found: &'a [Found]) -> Vec<Candidate<'a>> {
    let mut out = Vec::new();
    for f in found {
        for claim in &f.claims {
            if let Some((_, from)) = class_of(claim, &f.volumes).filter(|(c, _)| *c == class) {
                let why = format!("storage class {class} ({from})");
                out.push(Candidate::new(f, claim, why));
            }
        }
    }
    out
}

/// By namespace, then name with numbers compared as numbers; each claim
/// once, with the first reason found for it.
fn ordered(mut candidates: Vec<Candidate<'_>>) -> Vec<Chosen> {
    candidates.sort_by(|a, b| {
        a.namespace
            .cmp(b.namespace)
            .then_with(|| natural(name(&a.claim.metadata), name(&b.claim.metadata)))
    });
    candidates.dedup_by(|b, a| {
        a.namespace == b.namespace && a.claim.metadata.name == b.claim.metadata.name
    });
    candidates
        .into_iter()
        .map(|c| Chosen {
            claim: ClaimRef::new(c.namespace, name(&c.claim.metadata)),
            why: c.why,
        })
        .collect()
}

/// `a` against `b` with runs of digits compared by value: `data-db-2`
/// before `data-db-10`. Equal only when the same (`01` after `1`).
fn natural(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let (da, ra) = a.split_at(a.iter().take_while(|c| c.is_ascii_digit()).count());
                let (db, rb) = b.split_at(b.iter().take_while(|c| c.is_ascii_digit()).count());
                let strip = |d: &[u8]| -> usize { d.iter().take_while(|c| **c == b'0').count() };
                let (va, vb) = (&da[strip(da)..], &db[strip(db)..]);
                let by_value = va.len().cmp(&vb.len()).then_with(|| va.cmp(vb));
                match by_value.then_with(|| da.len().cmp(&db.len())) {
                    Ordering::Equal => (a, b) = (ra, rb),
                    other => return other,
                }
            }
            (Some(x), Some(y)) if x != y => return x.cmp(y),
            _ => (a, b) = (&a[1..], &b[1..]),
        }
    }
}
