//! Binding a claim name to a given volume: the swap, and the swap back of
//! a rollback (../shared/cutover-notes.md, "Binding and rebinding").
//!
//! [`next`] is pure: what the cluster shows in, the one change that brings
//! it closer out. The caller writes that change ahead in the record, makes
//! it, looks again, and so on until [`Action::Done`]. Each change is safe
//! to make twice and the next one is always worked out afresh from what
//! the cluster shows, so a client killed between any two of them finds the
//! way on when it comes back. The order is the one that cannot lose data:
//! every volume involved is Retain before any claim goes; the claims in
//! the way go before the target volume is freed; the claim is created
//! only once the volume waits for it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::record::cutover::ClaimShape;

/// Annotations that belong to a binding (the PV controller's and the
/// scheduler's), never copied to a re-created claim.
pub const BINDING_ANNOTATIONS: &[&str] = &[
    "pv.kubernetes.io/bind-completed",
    "pv.kubernetes.io/bound-by-controller",
    "volume.beta.kubernetes.io/storage-provisioner",
    "volume.kubernetes.io/storage-provisioner",
    "volume.kubernetes.io/selected-node",
];

const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const RETAIN: &str = "Retain";

/// What the cluster shows of one rebind.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The claim that must end bound to `target` (by name).
    pub claim: Option<PersistentVolumeClaim>,
    /// Other claims to remove first (the temporary one; the sync-back
    /// one), by name, with what the API shows of each.
    pub remove: Vec<(String, Option<PersistentVolumeClaim>)>,
    /// The volume the claim must be bound to, and what the API shows of it.
    pub target_name: String,
    pub target: Option<PersistentVolume>,
    /// Volumes that must be Retain before any claim is deleted (the
    /// target among them), as the API shows them.
    pub keep: Vec<(String, Option<PersistentVolume>)>,
}

/// The next change, or what to wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Set `persistentVolumeReclaimPolicy: Retain` on this volume.
    Retain(String),
    /// Delete this claim (the uid, as a precondition).
    DeleteClaim {
        name: String,
        uid: String,
    },
    /// The claim is Terminating: wait until it is gone (pvc-protection
    /// holds it while a pod uses it).
    AwaitClaimGone(String),
    /// Make the target volume wait for the claim name: its `claimRef`
    /// keeps namespace and name, loses uid and resourceVersion.
    FreeVolume(String),
    /// Create the claim with `volumeName` set to the target.
    CreateClaim,
    /// The claim names the target; wait until it is Bound.
    AwaitBound,
    Done,
}

impl Action {
    /// A name for the record, the events and the tests' crash points:
    /// the kind, and the object when the action names one.
    pub fn label(&self) -> String {
        match self {
            Action::Retain(object)
            | Action::DeleteClaim { name: object, .. }
            | Action::AwaitClaimGone(object)
            | Action::FreeVolume(object) => format!("{} {object}", self.kind()),
            Action::CreateClaim | Action::AwaitBound | Action::Done => self.kind().to_string(),
        }
    }

    /// The kind of change, without its object: the crash point's name.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Retain(_) => "Retain",
            Action::DeleteClaim { .. } => "DeleteClaim",
            Action::AwaitClaimGone(_) => "AwaitClaimGone",
            Action::FreeVolume(_) => "FreeVolume",
            Action::CreateClaim => "CreateClaim",
            Action::AwaitBound => "AwaitBound",
            Action::Done => "Done",
        }
    }

    pub fn changes_the_cluster(&self) -> bool {
        matches!(
            self,
            Action::Retain(_)
                | Action::DeleteClaim { .. }
                | Action::FreeVolume(_)
                | Action::CreateClaim
        )
    }
}

/// Why a rebind cannot go on without a person.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Blocked {
    #[error("volume {0} is gone")]
    TargetGone(String),
    #[error("volume {volume} is bound to claim {holder}, not to {claim}; it was not volmig that bound it there")]
    TargetTaken {
        volume: String,
        holder: String,
        claim: String,
    },
    #[error("claim {claim} exists but names no volume: it was not made by volmig; delete it, then resume")]
    StrangerClaim { claim: String },
}

/// The next step of binding `claim_ns/claim_name` to the target volume.
pub fn next(claim_ns: &str, claim_name: &str, seen: &Observed) -> Result<Action, Blocked> {
    for (name, volume) in &seen.keep {
        if let Some(v) = volume {
            if policy(v) != RETAIN {
                return Ok(Action::Retain(name.clone()));
            }
        }
    }
    let target = seen
        .target
        .as_ref()
        .ok_or_else(|| Blocked::TargetGone(seen.target_name.clone()))?;
    let target_name = seen.target_name.clone();
    for (name, claim) in &seen.remove {
        if let Some(c) = claim {
            return Ok(gone(name, c));
        }
    }
    if let Some(claim) = &seen.claim {
        let volume = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref());
        match volume {
            Some(v) if v == target_name => {}
            Some(_) => return Ok(gone(claim_name, claim)),
            None => {
                return Err(Blocked::StrangerClaim {
                    claim: format!("{claim_ns}/{claim_name}"),
                })
            }
        }
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        return Ok(match claim_ref(target) {
            Some((_, _, Some(ref_uid))) if ref_uid != uid => Action::FreeVolume(target_name),
            _ if claim_phase(claim) == "Bound" => Action::Done,
            _ => Action::AwaitBound,
        });
    }
    match claim_ref(target) {
        None => Ok(Action::FreeVolume(target_name)),
        Some((ns, name, uid)) => {
            if ns != claim_ns || name != claim_name {
                // Bound to another claim that is not one we remove: a
                // stranger's, unless it is gone already (uid left behind).
                let ours = seen.remove.iter().any(|(n, _)| *n == name) && ns == claim_ns;
                if !ours && volume_phase(target) == "Bound" {
                    return Err(Blocked::TargetTaken {
                        volume: target_name,
                        holder: format!("{ns}/{name}"),
                        claim: format!("{claim_ns}/{claim_name}"),
                    });
                }
                return Ok(Action::FreeVolume(target_name));
            }
            Ok(match uid {
                Some(_) => Action::FreeVolume(target_name),
                None => Action::CreateClaim,
            })
        }
    }
}

fn gone(name: &str, claim: &PersistentVolumeClaim) -> Action {
    if claim.metadata.deletion_timestamp.is_some() {
        Action::AwaitClaimGone(name.to_string())
    } else {
        Action::DeleteClaim {
            name: name.to_string(),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

pub fn policy(v: &PersistentVolume) -> &str {
    v.spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("Delete")
}

fn volume_phase(v: &PersistentVolume) -> &str {
    v.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn claim_phase(c: &PersistentVolumeClaim) -> &str {
    c.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// The volume's `claimRef`: namespace, name and uid (if set).
fn claim_ref(v: &PersistentVolume) -> Option<(String, String, Option<String>)> {
    let r = v.spec.as_ref()?.claim_ref.as_ref()?;
    Some((
        r.namespace.clone().unwrap_or_default(),
        r.name.clone().unwrap_or_default(),
        r.uid.clone().filter(|u| !u.is_empty()),
    ))
}

/// A claim's shape as volmig re-creates it: its labels, its annotations
/// but the binding's, its finalizers but pvc-protection (the admission
/// plugin adds that), its spec's access modes, request and volume mode.
pub fn shape_of(claim: &PersistentVolumeClaim) -> ClaimShape {
    let meta = &claim.metadata;
    let spec = claim.spec.clone().unwrap_or_default();
    let annotations = meta
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !BINDING_ANNOTATIONS.contains(&k.as_str()))
        .collect();
    ClaimShape {
        labels: meta.labels.clone().unwrap_or_default(),
        annotations,
        finalizers: meta
            .finalizers
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|f| f != PVC_PROTECTION)
            .collect(),
        access_modes: spec.access_modes.unwrap_or_default(),
        request: spec
            .resources
            .and_then(|r| r.requests)
            .and_then(|r| r.get("storage").map(|q| q.0.clone()))
            .unwrap_or_default(),
        volume_mode: spec.volume_mode,
    }
}

/// The claim to create: `meta`'s labels and annotations, `spec`'s access
/// modes, request and volume mode, bound to `volume` (whose class it
/// takes: a pre-bound claim must name the volume's class).
pub fn claim_for(
    namespace: &str,
    name: &str,
    meta: &ClaimShape,
    spec: &ClaimShape,
    volume: &PersistentVolume,
) -> PersistentVolumeClaim {
    let class = volume
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default();
    let non_empty = |m: &BTreeMap<String, String>| (!m.is_empty()).then(|| m.clone());
    let mut requests = BTreeMap::new();
    requests.insert("storage".to_string(), Quantity(spec.request.clone()));
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: non_empty(&meta.labels),
            annotations: non_empty(&meta.annotations),
            finalizers: (!meta.finalizers.is_empty()).then(|| meta.finalizers.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
            access_modes: Some(spec.access_modes.clone()),
            resources: Some(k8s_openapi::api::core::v1::VolumeResourceRequirements {
                requests: Some(requests),
                ..Default::default()
            }),
            storage_class_name: Some(class),
            volume_mode: spec.volume_mode.clone(),
            volume_name: volume.metadata.name.clone(),
            ..Default::default()
        }),
        status: None,
    }
}
