//! `--workload KIND/NAME`: the claims a workload uses. Its pods' claims
//! first (the most telling reason), then a StatefulSet's replica claims,
//! pod or not (a scale-up must find them moved too), then the claims its
//! pod template names (a Deployment scaled to zero still has its claims).

use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::{name, Candidate, Found, SelectError};
use crate::plan::quiesce::{self, Workloads};

/// A workload whose claims `--workload` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    ReplicaSet,
    Pod,
}

impl WorkloadKind {
    const ALL: [WorkloadKind; 4] = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::ReplicaSet,
        WorkloadKind::Pod,
    ];

    /// The Kubernetes kind (as in `ownerReferences`), and kubectl's names
    /// of the resource: singular, plural, short.
    fn spelled(self) -> (&'static str, [&'static str; 3]) {
        match self {
            WorkloadKind::Deployment => ("Deployment", ["deployment", "deployments", "deploy"]),
            WorkloadKind::StatefulSet => ("StatefulSet", ["statefulset", "statefulsets", "sts"]),
            WorkloadKind::ReplicaSet => ("ReplicaSet", ["replicaset", "replicasets", "rs"]),
            WorkloadKind::Pod => ("Pod", ["pod", "pods", "po"]),
        }
    }

    /// The Kubernetes kind: `StatefulSet`.
    pub fn kind(self) -> &'static str {
        self.spelled().0
    }

    /// As the user writes it after `--workload`: `statefulset`.
    pub fn as_str(self) -> &'static str {
        self.spelled().1[0]
    }

    /// `word` as kubectl reads a resource: any case, kubectl's names, an
    /// optional group (`deployment.apps`, `deployments.v1.apps`).
    fn of(word: &str) -> Option<WorkloadKind> {
        let word = word.to_ascii_lowercase();
        let (resource, group) = word.split_once('.').unwrap_or((&word, ""));
        let kind = (Self::ALL.into_iter()).find(|k| k.spelled().1.contains(&resource))?;
        let apps = kind != WorkloadKind::Pod;
        let group_fits = group.is_empty() || (apps && matches!(group, "apps" | "v1.apps"));
        group_fits.then_some(kind)
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn not_a_kind(word: &str) -> String {
    format!("{word:?} is not a kind whose claims can be selected")
}

impl FromStr for WorkloadKind {
    type Err = SelectError;

    /// A kind alone (`sts`, `Deployment`, `deployment.apps`).
    fn from_str(word: &str) -> Result<WorkloadKind, SelectError> {
        WorkloadKind::of(word).ok_or_else(|| SelectError::BadWorkload {
            arg: word.to_string(),
            why: not_a_kind(word),
        })
    }
}

/// `--workload KIND/NAME` (`statefulset/db`, `sts/db`, `deploy/web`,
/// `deployment.apps/web`), as kubectl takes a resource. A clap value
/// parser.
pub fn parse_workload(arg: &str) -> Result<(WorkloadKind, String), SelectError> {
    let bad = |why: String| SelectError::BadWorkload {
        arg: arg.to_string(),
        why,
    };
    let Some((word, name)) = arg.split_once('/') else {
        return Err(bad("no /NAME after the kind".to_string()));
    };
    let kind = WorkloadKind::of(word).ok_or_else(|| bad(not_a_kind(word)))?;
    if name.is_empty() || name.contains('/') {
        return Err(bad(format!("{name:?} is not a name")));
    }
    Ok((kind, name.to_string()))
}

/// The claims `sts`'s claim templates made (`TEMPLATE-STS-ORDINAL`) among
/// `claims` (its namespace's), in ordinal order. Ordinals at or above
/// `replicas` too: a scale-up will mount them.
pub fn replica_claims(sts: &StatefulSet, claims: &[PersistentVolumeClaim]) -> Vec<String> {
    let namespace = sts.metadata.namespace.as_deref();
    let elsewhere = |c: &PersistentVolumeClaim| {
        let theirs = c.metadata.namespace.as_deref();
        namespace.is_some() && theirs.is_some() && theirs != namespace
    };
    let mut made: Vec<(u64, &str)> = (claims.iter())
        .filter(|c| !elsewhere(c))
        .filter_map(|c| {
            let claim = c.metadata.name.as_deref()?;
            Some((ordinal(claim, sts)?, claim))
        })
        .collect();
    made.sort();
    made.into_iter()
        .map(|(_, claim)| claim.to_string())
        .collect()
}

/// The claims of workload `kind`/`wanted`, each with why, most telling
/// reason first; or why there are none.
pub(super) fn by_workload<'a>(
    kind: WorkloadKind,
    wanted: &str,
    found: &'a [Found],
    scope: &str,
) -> Result<Vec<Candidate<'a>>, SelectError> {
    let workload = format!("{kind}/{wanted}");
    let scope = scope.to_string();
    let mut out = Vec::new();
    let mut exists = false;
    for f in found {
        let Some(template) = template(kind, wanted, &f.workloads) else {
            continue;
        };
        exists = true;
        let claim = |n: &str| f.claims.iter().find(|c| name(&c.metadata) == n);
        let mut pods: Vec<&Pod> = (f.workloads.pods.iter())
            .filter(|p| belongs(p, kind, wanted, &f.workloads))
            .collect();
        pods.sort_by_key(|p| name(&p.metadata));
        let of = match kind {
            WorkloadKind::Pod => String::new(),
            _ => format!(" of {} {wanted}", kind.kind()),
        };
        for pod in pods {
            let why = format!("mounted by pod {}{of}", name(&pod.metadata));
            for c in claims_in(pod.spec.as_ref()).filter_map(claim) {
                out.push(Candidate::new(f, c, why.clone()));
            }
        }
        let sts = (f.workloads.stateful_sets.iter())
            .find(|s| kind == WorkloadKind::StatefulSet && name(&s.metadata) == wanted);
        if let Some(sts) = sts {
            for n in replica_claims(sts, &f.claims) {
                let why = format!(
                    "replica claim of StatefulSet {wanted} ({})",
                    no_pod(&n, sts)
                );
                out.extend(claim(&n).map(|c| Candidate::new(f, c, why)));
            }
        }
        // A pod's template is itself.
        let template = template.filter(|_| kind != WorkloadKind::Pod);
        let why = format!("named in the pod template of {} {wanted}", kind.kind());
        for c in claims_in(template).filter_map(claim) {
            out.push(Candidate::new(f, c, why.clone()));
        }
    }
    if !exists {
        let resource = format!("{}s", kind.as_str());
        return Err(SelectError::UnknownWorkload {
            workload,
            resource,
            scope,
        });
    }
    if out.is_empty() {
        return Err(SelectError::WorkloadWithoutClaims { workload, scope });
    }
    Ok(out)
}

/// The workload's pod template (a pod's own spec), or `None` when there is
/// no such workload: `Some(None)` is one without a template.
fn template<'a>(kind: WorkloadKind, wanted: &str, w: &'a Workloads) -> Option<Option<&'a PodSpec>> {
    let is = |meta: &ObjectMeta| name(meta) == wanted;
    Some(match kind {
        WorkloadKind::Deployment => {
            let d = w.deployments.iter().find(|d| is(&d.metadata))?;
            d.spec.as_ref().and_then(|s| s.template.spec.as_ref())
        }
        WorkloadKind::StatefulSet => {
            let s = w.stateful_sets.iter().find(|s| is(&s.metadata))?;
            s.spec.as_ref().and_then(|s| s.template.spec.as_ref())
        }
        WorkloadKind::ReplicaSet => {
            let r = w.replica_sets.iter().find(|r| is(&r.metadata))?;
            let template = r.spec.as_ref().and_then(|s| s.template.as_ref());
            template.and_then(|t| t.spec.as_ref())
        }
        WorkloadKind::Pod => w.pods.iter().find(|p| is(&p.metadata))?.spec.as_ref(),
    })
}

/// Whether `pod` is the workload's: the pod itself, or one whose chain of
/// controllers (Pod → ReplicaSet → Deployment, Pod → StatefulSet) passes
/// through it, so that `replicaset/web-5d8f` also finds the pods of a
/// Deployment's ReplicaSet. Pods that have ended hold no volume.
fn belongs(pod: &Pod, kind: WorkloadKind, wanted: &str, w: &Workloads) -> bool {
    if kind == WorkloadKind::Pod {
        return name(&pod.metadata) == wanted;
    }
    if quiesce::finished(pod) {
        return false;
    }
    let mut meta = &pod.metadata;
    // Only a ReplicaSet has a controller above it here: two steps at most.
    for _ in 0..2 {
        let Some(owner) = quiesce::controller(meta) else {
            return false;
        };
        let apps = owner.api_version.starts_with("apps/");
        if apps && owner.kind == kind.kind() && owner.name == wanted {
            return true;
        }
        let up = (w.replica_sets.iter()).find(|r| name(&r.metadata) == owner.name);
        match up {
            Some(rs) if apps && owner.kind == "ReplicaSet" => meta = &rs.metadata,
            _ => return false,
        }
    }
    false
}

/// The claims a pod spec mounts by name (not ephemeral volumes' claims,
/// which live and die with their pod).
fn claims_in(spec: Option<&PodSpec>) -> impl Iterator<Item = &str> {
    spec.into_iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
}

/// The ordinal of the replica whose claim `claim` is, if `sts` made it.
fn ordinal(claim: &str, sts: &StatefulSet) -> Option<u64> {
    let template = template_of(claim, sts)?;
    let set = name(&sts.metadata);
    let digits = claim.strip_prefix(&format!("{template}-{set}-"))?;
    digits.parse().ok()
}

/// Why no pod mounts replica claim `claim`, from its ordinal.
fn no_pod(claim: &str, sts: &StatefulSet) -> String {
    let spec = sts.spec.as_ref();
    let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
    let ordinals = spec.and_then(|s| s.ordinals.as_ref());
    let start = i64::from(ordinals.and_then(|o| o.start).unwrap_or(0));
    let end = start + i64::from(replicas);
    match ordinal(claim, sts).map(i64::try_from) {
        Some(Ok(n)) if n >= end && start == 0 => {
            format!("ordinal {n} >= replicas {replicas}: no pod")
        }
        Some(Ok(n)) if n >= end || n < start => {
            format!("ordinal {n} outside {start}..{end}: no pod")
        }
        Some(Ok(n)) => format!("ordinal {n}: no pod now"),
        _ => "no pod".to_string(),
    }
}

/// The claim template of `sts` that made `claim` (`TEMPLATE-STS-ORDINAL`).
pub fn template_of(claim: &str, sts: &StatefulSet) -> Option<String> {
    let name = sts.metadata.name.as_deref()?;
    let templates = sts.spec.as_ref()?.volume_claim_templates.as_ref()?;
    templates
        .iter()
        .filter_map(|t| t.metadata.name.clone())
        .find(|t| {
            claim
                .strip_prefix(&format!("{t}-{name}-"))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}
