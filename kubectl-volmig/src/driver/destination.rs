//! The destination between attempts (issue 20): reused (the next attempt
//! resumes from its checkpoint), waited for while its node is away,
//! emptied by the receiver when its data keeps failing attempts, or given
//! up for a fresh claim. The decisions are [`super::reuse`]'s; this is
//! what the driver reads for them and what it does with them.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::reuse::{self, Decision, Facts};
use super::run::{Driver, State, Update, POD_GONE_WAIT, RECORD_EVERY};
use super::{objects, DriverError};
use crate::cluster::Side;
use crate::events::Severity;
use crate::names::{self, Component};
use crate::plan::ClaimAction;
use crate::record::AbandonedDestination;
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
        let decision = reuse::decide(&facts);
        let waiting = matches!(decision, Decision::Wait { .. });
        if !waiting && self.record.status.destination_unavailable_since.is_some() {
            self.write(|vm| {
                vm.status.destination_unavailable_since = None;
                vm.status.destination_unavailable = None;
                vm.status.message = None;
            })
            .await?;
            if facts.node.as_ref().is_some_and(|n| n.away.is_none()) {
                let msg = "the destination's node is back: the next attempt resumes on it";
                self.post(Severity::Normal, "DestinationBack", msg).await;
            }
        }
        // The final sync runs with the app down: no waiting, emptying or
        // copying in full then; the pass fails and the cutover rolls back.
        let final_sync = self
            .record
            .status
            .cutover
            .as_ref()
            .and_then(|c| c.pass)
            .is_some_and(|p| p.kind == crate::record::cutover::PassKind::FinalSync);
        if final_sync && decision != Decision::Reuse {
            return Err(DriverError::Refused(format!(
                "the destination cannot be reused for the final sync ({decision:?}) while the app \
                 is down"
            )));
        }
        match decision {
            Decision::Reuse => Ok(Prepared::Go {
                wipe: false,
                note: None,
            }),
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
        let volume = self.destination_volume().await?;
        let node = match &volume {
            Some(v) => reuse::destination_node(v, &self.nodes(Side::Destination).await?),
            None => None,
        };
        let status = &self.record.status;
        let replaced = status
            .abandoned_destinations
            .last()
            .map_or(0, |a| a.replaced_before_attempt);
        // A cutover's passes copy into different claims (the sync back into
        // the old one): each counts its own.
        let since = replaced.max(super::run::pass_first(&self.record).unwrap_or(0));
        let users = self.plan.destination.action == ClaimAction::Reuse;
        let h = reuse::history(&status.attempts, since, number, users);
        let retry = &self.plan.spec.retry;
        Ok(Facts {
            node,
            unavailable_since: status.destination_unavailable_since,
            now: Timestamp::now(),
            written: h.written,
            destination_failures: h.destination_failures,
            wipe_failed: h.wipe_failed,
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
        // The record is the truth: `resume --to-node` may have changed the
        // receiver's node or the class since this driver read it.
        if let Some(d) = &self.record.status.destination {
            self.plan.destination.storage_class = d.storage_class.clone();
        }
        if let Some(p) = &self.record.status.placement {
            self.plan.placement.receiver = p.receiver.clone();
        }
        let old = self.plan.destination.name.clone();
        let base = self
            .record
            .status
            .abandoned_destinations
            .first()
            .map_or(old.clone(), |a| a.name.clone());
        let new = self.free_name(&base).await?;
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
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(
            self.sides.destination.clone(),
            &self.plan.destination.namespace,
        );
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
        objects::ensure_destination(&self.sides.destination, &self.plan).await?;
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

    /// The first of `base-2`, `base-3`, ... that no claim has, or that this
    /// operation made (a replacement written ahead before a crash).
    async fn free_name(&self, base: &str) -> Result<String, DriverError> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(
            self.sides.destination.clone(),
            &self.plan.destination.namespace,
        );
        for n in 2..100 {
            let suffix = format!("-{n}");
            let keep = NAME_MAX - suffix.len();
            let name = format!("{}{suffix}", &base[..base.len().min(keep)]);
            let given_up = self
                .record
                .status
                .abandoned_destinations
                .iter()
                .any(|a| a.name == name);
            let found = claims
                .get_opt(&name)
                .await
                .map_err(|e| DriverError::kube(format!("get claim {name}"), e))?;
            let ours = |c: &PersistentVolumeClaim| {
                let labels = c.metadata.labels.as_ref();
                labels.and_then(|l| l.get(names::OPERATION_KEY)) == Some(&self.plan.operation)
            };
            match found {
                None if !given_up => return Ok(name),
                Some(c) if ours(&c) && !given_up => return Ok(name),
                _ => continue,
            }
        }
        Err(DriverError::Refused(format!(
            "no free name for a fresh destination claim after {base}-99"
        )))
    }

    /// Before the first attempt into a reused claim (`--reuse`): what it
    /// holds, read by `mover inspect` in a pod placed as the receiver,
    /// recorded and said. Not knowing never stops the copy.
    pub(super) async fn inspect_destination(&mut self) -> Result<(), DriverError> {
        let pod = resources::inspect_pod(&self.plan);
        let name = names::inspect_pod_name(&self.plan.operation);
        objects::create_or_get(&self.receiver_pods, &pod).await?;
        let deadline = tokio::time::Instant::now() + self.options.start_timeout;
        let mut said = None;
        while tokio::time::Instant::now() < deadline {
            let seen = self
                .receiver_pods
                .get_opt(&name)
                .await
                .map_err(|e| DriverError::kube(format!("get pod {name}"), e))?;
            let phase = seen.and_then(|p| p.status?.phase).unwrap_or_default();
            if phase == "Succeeded" || phase == "Failed" {
                let params = kube::api::LogParams {
                    container: Some(resources::CONTAINER.to_string()),
                    ..Default::default()
                };
                let log = self.receiver_pods.logs(&name, &params).await;
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
            Some(json) => {
                let apart = resources::source_beside(&self.plan).err();
                reuse::reusable(&json, &self.plan.operation, apart)
            }
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

    /// How long to wait for pod `name` to go once deleted: not at all when
    /// its node is unreachable (its kubelet cannot confirm the deletion
    /// until the node is back, and then kills it first) and it cannot
    /// write what the next attempt uses: a sender (it only reads, and a
    /// receiver of another attempt refuses it), or a receiver whose
    /// destination volume is pinned to that very node (the next attempt
    /// waits for the node, or copies into another volume). Otherwise
    /// [`POD_GONE_WAIT`].
    pub(super) async fn gone_wait(
        &self,
        api: &Api<Pod>,
        name: &str,
    ) -> Result<Duration, DriverError> {
        let pod = api
            .get_opt(name)
            .await
            .map_err(|e| DriverError::kube(format!("get pod {name}"), e))?;
        let Some(pod) = pod else {
            return Ok(POD_GONE_WAIT);
        };
        let labels = pod.metadata.labels.as_ref();
        let role = labels.and_then(|l| l.get(names::COMPONENT_KEY)).cloned();
        let Some(node) = pod.spec.and_then(|s| s.node_name) else {
            return Ok(POD_GONE_WAIT);
        };
        let nodes = self.nodes(Side::Destination).await?;
        let unreachable = nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))
            .is_some_and(reuse::unreachable);
        if !unreachable {
            return Ok(POD_GONE_WAIT);
        }
        if role.as_deref() == Some(Component::Sender.as_str()) {
            return Ok(Duration::ZERO);
        }
        let pinned = self
            .destination_volume()
            .await?
            .and_then(|v| reuse::destination_node(&v, &nodes));
        Ok(match pinned {
            Some(d) if d.name == node && d.away.is_some() => Duration::ZERO,
            _ => POD_GONE_WAIT,
        })
    }

    /// The destination claim's volume, when it is bound.
    async fn destination_volume(&self) -> Result<Option<PersistentVolume>, DriverError> {
        let dest = &self.plan.destination;
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.sides.destination.clone(), &dest.namespace);
        let claim = claims
            .get_opt(&dest.name)
            .await
            .map_err(|e| DriverError::kube(format!("get claim {}", dest.name), e))?;
        let bound = claim
            .and_then(|c| c.spec?.volume_name)
            .filter(|v| !v.is_empty());
        match bound {
            Some(v) => Api::<PersistentVolume>::all(self.sides.destination.clone())
                .get_opt(&v)
                .await
                .map_err(|e| DriverError::kube(format!("get volume {v}"), e)),
            None => Ok(None),
        }
    }
}
