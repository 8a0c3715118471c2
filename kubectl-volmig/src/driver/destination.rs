//! The destination between attempts (issue 20): reused (the next attempt
//! resumes from its checkpoint), waited for while its node is away,
//! emptied by the receiver when its data keeps failing attempts, or given
//! up for a fresh claim. The decisions are [`super::reuse`]'s; this is
//! what the driver reads for them and what it does with them.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::reuse::{self, Decision, Facts};
use super::run::{Driver, State, Update, RECORD_EVERY};
use super::{objects, DriverError};
use crate::events::Severity;
use crate::names::{self, Component};
use crate::plan::ClaimAction;
use crate::record::{AbandonedDestination, AttemptPhase};
use crate::resources;

/// What the next attempt does with the destination.
pub(super) enum Prepared {
    /// Start it: with a receiver that empties the destination first
    /// (`wipe`), and what to note in its history.
    Go { wipe: bool, note: Option<String> },
    /// Not now: this state next.
    Wait(State),
}

/// The longest a destination name may be (a claim's name is a DNS
/// subdomain).
const NAME_MAX: usize = 253;

impl Driver {
    /// Decides, and does what is needed before attempt `number` may start.
    pub(super) async fn prepare_destination(
        &mut self,
        number: u32,
    ) -> Result<Prepared, DriverError> {
        let facts = self.destination_facts(number).await?;
        let reusing_users = self.plan.destination.action == ClaimAction::Reuse;
        match reuse::decide(&facts) {
            Decision::Reuse => {
                if self.record.status.destination_unavailable_since.is_some() {
                    let msg = "the destination's node is back: the next attempt resumes on it";
                    self.write(|vm| {
                        vm.status.destination_unavailable_since = None;
                        vm.status.destination_unavailable = None;
                        vm.status.message = None;
                    })
                    .await?;
                    self.post(Severity::Normal, "DestinationBack", msg).await;
                }
                Ok(Prepared::Go {
                    wipe: false,
                    note: None,
                })
            }
            Decision::Wait {
                node,
                why,
                waited,
                left,
            } => {
                let since = facts.unavailable_since.unwrap_or(facts.now);
                let text = format!(
                    "waiting for {node} (destination volume, {why}), {} of {}",
                    reuse::human(waited),
                    reuse::human(facts.wait)
                );
                let first = facts.unavailable_since.is_none();
                self.write(|vm| {
                    vm.status.destination_unavailable_since = Some(since);
                    vm.status.destination_unavailable = Some(text.clone());
                    vm.status.message = Some(text.clone());
                })
                .await?;
                let _ = self.updates.send(Update::Destination(text.clone()));
                if first {
                    self.post(Severity::Warning, "DestinationUnavailable", &text)
                        .await;
                }
                tokio::time::sleep(left.min(RECORD_EVERY)).await;
                Ok(Prepared::Wait(State::StartAttempt { number }))
            }
            Decision::Replace { why } if reusing_users => Err(DriverError::Refused(format!(
                "the destination claim {} cannot be reused ({why}), and it is yours (--reuse): \
                 volmig makes no other in its place; migrate again to a new claim",
                self.plan.destination.name
            ))),
            Decision::Wipe { why } if reusing_users => Err(DriverError::Refused(format!(
                "the destination claim {} keeps failing attempts ({why}), and it is yours \
                 (--reuse): volmig does not empty it; look at its data, or migrate again to a \
                 new claim",
                self.plan.destination.name
            ))),
            Decision::Replace { why } => {
                let away = facts.node.filter(|n| n.away.is_some()).map(|n| n.name);
                let new = self.replace_destination(number, &why, away).await?;
                Ok(Prepared::Go {
                    wipe: false,
                    note: Some(format!("fresh claim {new}: {why}")),
                })
            }
            Decision::Wipe { why } => {
                let msg = format!("attempt {number} empties the destination first: {why}");
                self.post(Severity::Warning, "DestinationWiped", &msg).await;
                Ok(Prepared::Go {
                    wipe: true,
                    note: Some(format!("wiped: {why}")),
                })
            }
        }
    }

    /// What [`reuse::decide`] needs, read now.
    async fn destination_facts(&self, number: u32) -> Result<Facts, DriverError> {
        let dest = &self.plan.destination;
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &dest.namespace);
        let claim = claims
            .get_opt(&dest.name)
            .await
            .map_err(|e| DriverError::kube(format!("get claim {}", dest.name), e))?;
        let bound = claim
            .and_then(|c| c.spec?.volume_name)
            .filter(|v| !v.is_empty());
        let volume = match bound {
            Some(v) => Api::<PersistentVolume>::all(self.client.clone())
                .get_opt(&v)
                .await
                .map_err(|e| DriverError::kube(format!("get volume {v}"), e))?,
            None => None,
        };
        let node = match &volume {
            Some(v) => reuse::destination_node(v, &self.nodes().await?),
            None => None,
        };
        let status = &self.record.status;
        let first = status
            .abandoned_destinations
            .last()
            .map_or(0, |a| a.replaced_before_attempt);
        let on_this: Vec<_> = status
            .attempts
            .iter()
            .filter(|a| a.number >= first && a.number < number)
            .collect();
        let written = on_this.iter().any(|a| a.receiver.node.is_some());
        let last = on_this.iter().rev().find(|a| a.phase.is_over());
        let wipe_failed = last.is_some_and(|a| {
            a.wipe
                && a.destination_fault
                && a.reason
                    .as_deref()
                    .is_some_and(|r| r.contains("cannot wipe"))
        });
        // Failures on the destination's data in a row since it was last
        // emptied: a transient failure in between tells nothing either way.
        let mut destination_failures = 0;
        for a in on_this.iter().rev().filter(|a| a.phase.is_over()) {
            if a.phase == AttemptPhase::Succeeded || a.wipe {
                break;
            }
            if a.phase == AttemptPhase::Failed && a.destination_fault {
                destination_failures += 1;
            }
        }
        let retry = &self.plan.spec.retry;
        Ok(Facts {
            node,
            unavailable_since: status.destination_unavailable_since,
            now: Timestamp::now(),
            written,
            destination_failures,
            wipe_failed,
            wait: Duration::from_secs(retry.reuse_wait_seconds),
            limit: retry.reuse_limit,
            asked_new: status.destination_change.clone(),
        })
    }

    /// Gives the destination claim up for a fresh one (written ahead in
    /// the record; the old claim is kept, labelled, until `cleanup`), and
    /// makes it. Its name.
    async fn replace_destination(
        &mut self,
        number: u32,
        why: &str,
        away: Option<String>,
    ) -> Result<String, DriverError> {
        let pinned = self.plan.placement.receiver.node.clone();
        if let Some(node) = pinned.filter(|p| away.as_ref() == Some(p)) {
            return Err(DriverError::Refused(format!(
                "the destination cannot be reused ({why}), and the receiver is pinned to node \
                 {node} (--to-node): a fresh destination there would wait for the same node; \
                 migrate again with another --to-node"
            )));
        }
        let old = self.plan.destination.name.clone();
        let status = &self.record.status;
        let base = status
            .abandoned_destinations
            .first()
            .map_or(old.clone(), |a| a.name.clone());
        let suffix = format!("-{}", status.abandoned_destinations.len() + 2);
        let keep = NAME_MAX - suffix.len();
        let new = format!("{}{suffix}", &base[..base.len().min(keep)]);
        let abandoned = AbandonedDestination {
            name: old.clone(),
            reason: why.to_string(),
            replaced_before_attempt: number,
            at: Some(Timestamp::now()),
        };
        self.write(|vm| {
            if !vm
                .status
                .abandoned_destinations
                .iter()
                .any(|a| a.name == old)
            {
                vm.status.abandoned_destinations.push(abandoned.clone());
            }
            if let Some(d) = vm.status.destination.as_mut() {
                d.name = new.clone();
            }
            vm.status.destination_unavailable_since = None;
            vm.status.destination_unavailable = None;
            vm.status.destination_change = None;
            vm.status.message = None;
        })
        .await?;
        self.plan.destination.name = new.clone();
        // Labelled as given up: `cleanup` removes it; nothing else does.
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &self.plan.destination.namespace);
        let label = json!({"metadata": {"labels": {
            names::COMPONENT_KEY: Component::AbandonedDestination.as_str()
        }}});
        match claims
            .patch(&old, &PatchParams::default(), &Patch::Merge(&label))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(DriverError::kube(format!("label claim {old}"), e)),
        }
        objects::ensure_destination(&self.client, &self.plan).await?;
        let msg = format!(
            "the destination claim {old} is given up ({why}); attempt {number} copies in full \
             into a fresh claim {new}; {old} is kept until kubectl volmig cleanup {}",
            self.plan.operation
        );
        self.post(Severity::Warning, "DestinationReplaced", &msg)
            .await;
        let _ = self.updates.send(Update::Destination(msg));
        Ok(new)
    }

    /// Before the first attempt into a reused claim (`--reuse`): what it
    /// holds, read by `mover inspect` in a pod placed as the receiver,
    /// recorded and said. Not knowing never stops the copy.
    pub(super) async fn inspect_destination(&mut self) -> Result<(), DriverError> {
        let pod = resources::inspect_pod(&self.plan);
        let name = names::inspect_pod_name(&self.plan.operation);
        objects::create_or_get(&self.receiver_pods, &pod).await?;
        let deadline = tokio::time::Instant::now() + self.options.start_timeout.min(INSPECT_LIMIT);
        let mut said = None;
        while tokio::time::Instant::now() < deadline {
            let seen = self
                .receiver_pods
                .get_opt(&name)
                .await
                .map_err(|e| DriverError::kube(format!("get pod {name}"), e))?;
            let phase = seen.and_then(|p| p.status?.phase).unwrap_or_default();
            if phase == "Succeeded" || phase == "Failed" {
                let log = self.receiver_pods.logs(&name, &Default::default()).await;
                said = log.ok().and_then(|text| {
                    let line = text.lines().find(|l| l.trim_start().starts_with('{'))?;
                    serde_json::from_str::<serde_json::Value>(line).ok()
                });
                break;
            }
            tokio::time::sleep(RECORD_EVERY / 5).await;
        }
        objects::delete_pods(
            &self.receiver_pods,
            std::slice::from_ref(&name),
            RECORD_EVERY,
        )
        .await?;
        let text = match said {
            Some(json) => reuse::reusable(&json, &self.plan.operation),
            None => "not known (mover inspect did not answer): files already there are \
                     compared by size and time as they are sent"
                .to_string(),
        };
        self.write(|vm| vm.status.reusable = Some(text.clone()))
            .await?;
        let msg = format!(
            "the destination {} holds {text}",
            self.plan.destination.name
        );
        let _ = self.updates.send(Update::Destination(msg));
        Ok(())
    }
}

/// The longest the inspection of a reused destination may take.
const INSPECT_LIMIT: Duration = Duration::from_secs(60);
