//! A volume's rehome, one change at a time, pure: what the cluster shows
//! in, the one change that brings it closer out. The same function takes
//! a volume forward (to `rehomed`) and back (to `original`), so a rollback
//! is the same walk to the other end.
//!
//! The order cannot lose data: the volume is Retain before its claim goes;
//! the claim is gone before the PV is deleted (a Retain PV's delete leaves
//! the disk alone); the PV is created again, the driver's objects
//! rewritten and only then the claim created, pre-bound; the recorded
//! reclaim policy comes back last. Which PV the cluster holds is told by
//! its node affinity: the wanted one, the other end's (deleted and made
//! again), or neither (someone else's: stop).

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use serde_json::Value;

use crate::driver::cutover::rebind::{self, Observed, RETAIN};
use crate::plan::rehome::{as_before, drivers, same_affinity};
use crate::record::rehome::VolumeRehome;

/// Which end a volume is walked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toward {
    /// The rehomed PV.
    New,
    /// The PV as it was (a rollback).
    Old,
}

impl Toward {
    /// The crash points' prefix.
    pub fn side(self) -> &'static str {
        match self {
            Toward::New => "rehome",
            Toward::Old => "rehome-back",
        }
    }
}

/// What the cluster shows of one volume.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub volume: Option<PersistentVolume>,
    pub claim: Option<PersistentVolumeClaim>,
    /// Each recorded driver object as read (`None`: not found).
    pub driver_objects: Vec<Option<Value>>,
}

/// The next change, or what to wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Set Retain on the PV.
    Retain,
    /// Delete the claim (its uid as a precondition).
    DeleteClaim {
        uid: String,
    },
    /// pvc-protection holds the claim while a pod uses it.
    AwaitClaimGone,
    /// Delete the PV (its uid as a precondition).
    DeleteVolume {
        uid: String,
    },
    /// pv-protection holds the PV until no claim is bound to it.
    AwaitVolumeGone,
    /// Create the wanted PV.
    CreateVolume,
    /// Rewrite driver object `n` to the wanted values.
    RewriteDriver(usize),
    /// The claim's part, as the cutover's rebind decides it.
    Bind(rebind::Action),
    /// Put the recorded reclaim policy back.
    RestorePolicy,
    Done,
}

impl Action {
    /// The kind of change: the record's word and the crash point's name.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Retain => "Retain",
            Action::DeleteClaim { .. } => "DeleteClaim",
            Action::AwaitClaimGone => "AwaitClaimGone",
            Action::DeleteVolume { .. } => "DeleteVolume",
            Action::AwaitVolumeGone => "AwaitVolumeGone",
            Action::CreateVolume => "CreateVolume",
            Action::RewriteDriver(_) => "RewriteDriver",
            Action::Bind(a) => a.kind(),
            Action::RestorePolicy => "RestorePolicy",
            Action::Done => "Done",
        }
    }

    pub fn changes_the_cluster(&self) -> bool {
        match self {
            Action::AwaitClaimGone | Action::AwaitVolumeGone | Action::Done => false,
            Action::Bind(a) => a.changes_the_cluster(),
            _ => true,
        }
    }
}

/// Why the walk cannot go on without a person.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Blocked {
    #[error(
        "persistentvolume {0} is pinned neither where it was nor where it goes: someone else \
         made or changed it; look at it, then resume or rollback"
    )]
    StrangerVolume(String),
    #[error(
        "claim {claim} is bound to {holds}, not to {volume}: it is not the claim volmig \
         recorded; look at it, then resume or rollback"
    )]
    StrangerClaim {
        claim: String,
        holds: String,
        volume: String,
    },
    #[error(
        "persistentvolume {0} had no claim when the rehome was planned, and a claim has bound \
         it since: look at it, then resume or rollback"
    )]
    BoundMeanwhile(String),
    #[error("{0} is gone: its driver cannot serve the volume without it")]
    DriverObjectGone(String),
    #[error(transparent)]
    Rebind(#[from] rebind::Blocked),
}

impl Blocked {
    /// Never by itself: a person has to look.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// The PV `v` ends as, walked `toward`.
pub fn wanted(v: &VolumeRehome, toward: Toward) -> PersistentVolume {
    match toward {
        Toward::New => v.rehomed.clone(),
        Toward::Old => as_before(&v.original),
    }
}

/// The next change of walking `v` `toward` an end, from what `seen` shows.
pub fn next(v: &VolumeRehome, toward: Toward, seen: &Seen) -> Result<Action, Blocked> {
    let want = wanted(v, toward);
    let other = wanted(
        v,
        match toward {
            Toward::New => Toward::Old,
            Toward::Old => Toward::New,
        },
    );
    let Some(pv) = &seen.volume else {
        return Ok(Action::CreateVolume);
    };
    if pv.metadata.deletion_timestamp.is_some() {
        return Ok(Action::AwaitVolumeGone);
    }
    if !same_affinity(pv, &want) {
        if !same_affinity(pv, &other) {
            return Err(Blocked::StrangerVolume(v.name.clone()));
        }
        if rebind::policy(pv) != RETAIN {
            return Ok(Action::Retain);
        }
        if let Some(claim) = &seen.claim {
            return claim_goes(v, claim);
        }
        // A volume recorded without a claim that some claim bound since.
        if v.claim.is_none() && phase(pv) == "Bound" {
            return Err(Blocked::BoundMeanwhile(v.name.clone()));
        }
        let uid = pv.metadata.uid.clone().unwrap_or_default();
        return Ok(Action::DeleteVolume { uid });
    }
    let back = toward == Toward::Old;
    for (n, object) in v.driver_objects.iter().enumerate() {
        match seen.driver_objects.get(n).and_then(Option::as_ref) {
            None => return Err(Blocked::DriverObjectGone(object.describe())),
            Some(o) if !drivers::applied(object, o, back) => return Ok(Action::RewriteDriver(n)),
            Some(_) => {}
        }
    }
    if let Some(claim) = &v.claim {
        // A claim of the name bound to another volume is someone else's:
        // never deleted to make room.
        let holds = seen
            .claim
            .as_ref()
            .and_then(|c| c.spec.as_ref()?.volume_name.clone());
        if let Some(other) = holds.filter(|h| *h != v.name) {
            return Err(Blocked::StrangerClaim {
                claim: format!("{}/{}", claim.namespace, claim.name),
                holds: other,
                volume: v.name.clone(),
            });
        }
        let seen_claim = Observed {
            claim: seen.claim.clone(),
            remove: Vec::new(),
            target_name: v.name.clone(),
            target: Some(pv.clone()),
            keep: Vec::new(),
        };
        let action = rebind::next(&claim.namespace, &claim.name, &seen_claim)?;
        if action != rebind::Action::Done {
            return Ok(Action::Bind(action));
        }
    }
    if rebind::policy(pv) != v.policy {
        return Ok(Action::RestorePolicy);
    }
    Ok(Action::Done)
}

fn phase(pv: &PersistentVolume) -> &str {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// The claim in the way of deleting the PV: deleted, if it is the one
/// bound to this volume (or made by volmig for it).
fn claim_goes(v: &VolumeRehome, claim: &PersistentVolumeClaim) -> Result<Action, Blocked> {
    let holds = claim.spec.as_ref().and_then(|s| s.volume_name.clone());
    if holds.as_deref() != Some(v.name.as_str()) {
        let name = v
            .claim
            .as_ref()
            .map(|c| format!("{}/{}", c.namespace, c.name));
        return Err(Blocked::StrangerClaim {
            claim: name.unwrap_or_default(),
            holds: holds.unwrap_or_else(|| "no volume".into()),
            volume: v.name.clone(),
        });
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(Action::AwaitClaimGone);
    }
    Ok(Action::DeleteClaim {
        uid: claim.metadata.uid.clone().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests;
