//! The copy of the source an attempt's sender reads, when it does not read
//! the source itself (issue 24): a VolumeSnapshot and the claim restored
//! from it, or a CSI clone.
//!
//! [`Driver::prepare_source`] is the `PrepareSource` state's step. Each
//! pass works out what is left from the cluster: the attempt's
//! [`SourceCopy`] was written ahead when the attempt was recorded, the
//! snapshot and the claim are created by name (an existing one is taken),
//! so a driver that stops anywhere in it resumes there. A copy that is
//! not ready within the start timeout fails the attempt, retryable (the
//! next attempt takes a new snapshot), with the controller's or the
//! provisioner's last words; a driver that cannot clone fails it for good.
//!
//! Copies are deleted when their attempt ends (the claim first: a
//! snapshot a claim is being restored from is protected from deletion),
//! without waiting; what a crash leaves, `cleanup` and the next set-up
//! remove by label.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams};
use kube::Client;

use super::objects;
use super::run::{AttemptEnd, Driver, State, TICK};
use super::DriverError;
use crate::names;
use crate::plan::{Method, Plan};
use crate::record::{AttemptPhase, SourceCopy};
use crate::resources;
use crate::snapshots::VolumeSnapshot;

/// The external-provisioner's words for a driver without the
/// CLONE_VOLUME capability: no retry fixes it.
const NO_CLONE: &str = "does not support clone operations";

/// What the copy of attempt `number` is to be, written ahead in it.
pub(super) fn planned_copy(plan: &Plan, number: u32) -> Option<SourceCopy> {
    let method = plan.source_method.method;
    method.reads_copy().then(|| SourceCopy {
        method,
        snapshot: (method == Method::Snapshot)
            .then(|| names::snapshot_name(&plan.operation, number)),
        claim: names::read_claim_name(&plan.operation, number),
        requested_at: Some(Timestamp::now()),
        ..SourceCopy::default()
    })
}

/// How far a copy has got.
enum Readiness {
    Ready,
    Waiting(Option<String>),
    /// A failure no new attempt fixes.
    Refused(String),
}

impl Driver {
    pub(super) async fn prepare_source(&mut self, number: u32) -> Result<State, DriverError> {
        let copy = self
            .record
            .status
            .attempts
            .iter()
            .find(|a| a.number == number)
            .and_then(|a| a.source.clone());
        let Some(copy) = copy else {
            // An attempt recorded without one reads the source itself.
            return self.launch_receiver(number).await;
        };
        let namespace = self.plan.spec.source.namespace.clone();
        let mut restore_size = copy.restore_size.clone();
        if let Some(snapshot_name) = &copy.snapshot {
            let api: Api<VolumeSnapshot> = Api::namespaced(self.sides.source.clone(), &namespace);
            let wanted = resources::source_snapshot(&self.plan, number);
            let snapshot = objects::get_or_create(&api, &wanted).await?;
            if !snapshot.ready() {
                let error = snapshot.error().map(str::to_string);
                let events = latest_warning(
                    &self.sides.source,
                    &namespace,
                    "VolumeSnapshot",
                    snapshot_name,
                )
                .await;
                return self
                    .wait_for_copy(
                        number,
                        &copy,
                        error.or(events),
                        "VolumeSnapshot",
                        snapshot_name,
                    )
                    .await;
            }
            if copy.ready_at.is_none() {
                restore_size = snapshot.restore_size().map(str::to_string);
                let size = restore_size.clone();
                self.write_copy(number, |c| {
                    c.ready_at = Some(Timestamp::now());
                    c.restore_size = size.clone();
                    c.error = None;
                })
                .await?;
            }
        }
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.sides.source.clone(), &namespace);
        let wanted = resources::read_claim(&self.plan, number, restore_size.as_deref());
        let claim = objects::get_or_create(&claims, &wanted).await?;
        match self.claim_readiness(&claim).await? {
            Readiness::Ready => {}
            Readiness::Refused(reason) => {
                return Ok(State::EndAttempt {
                    number,
                    end: AttemptEnd {
                        phase: AttemptPhase::Failed,
                        reason: Some(format!(
                            "claim {} was not provisioned: {reason}",
                            copy.claim
                        )),
                        retryable: Some(false),
                        destination_fault: false,
                    },
                })
            }
            Readiness::Waiting(why) => {
                return self
                    .wait_for_copy(number, &copy, why, "PersistentVolumeClaim", &copy.claim)
                    .await
            }
        }
        if copy.method == Method::Clone && copy.ready_at.is_none() {
            self.write_copy(number, |c| {
                c.ready_at = Some(Timestamp::now());
                c.error = None;
            })
            .await?;
        }
        self.launch_receiver(number).await
    }

    /// Whether the sender may mount `claim` now: Bound, or of a
    /// WaitForFirstConsumer class (it binds when the sender is scheduled;
    /// the sender's start timeout covers it).
    async fn claim_readiness(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<Readiness, DriverError> {
        let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        if bound {
            return Ok(Readiness::Ready);
        }
        if let Some(class) = claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
        {
            let classes: Api<StorageClass> = Api::all(self.sides.source.clone());
            let found = classes
                .get_opt(&class)
                .await
                .map_err(|e| DriverError::kube(format!("get storage class {class}"), e))?;
            let mode = found.and_then(|c| c.volume_binding_mode);
            if mode.as_deref() == Some("WaitForFirstConsumer") {
                return Ok(Readiness::Ready);
            }
        }
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        let namespace = &self.plan.spec.source.namespace;
        let warning =
            latest_warning(&self.sides.source, namespace, "PersistentVolumeClaim", name).await;
        Ok(match warning {
            Some(w) if w.contains(NO_CLONE) => Readiness::Refused(w),
            other => Readiness::Waiting(other),
        })
    }

    /// Waits for the copy (recording its latest error once), or fails the
    /// attempt once the start timeout has passed since it was asked for.
    async fn wait_for_copy(
        &mut self,
        number: u32,
        copy: &SourceCopy,
        error: Option<String>,
        kind: &str,
        name: &str,
    ) -> Result<State, DriverError> {
        if error.is_some() && error != copy.error {
            let latest = error.clone();
            self.write_copy(number, |c| c.error = latest.clone())
                .await?;
        }
        let asked = copy.requested_at.unwrap_or_else(Timestamp::now);
        let waited = Timestamp::now().duration_since(asked).unsigned_abs();
        if waited >= self.options.start_timeout {
            let why = error.map(|e| format!(": {e}")).unwrap_or_default();
            return Ok(State::EndAttempt {
                number,
                end: AttemptEnd {
                    phase: AttemptPhase::Failed,
                    reason: Some(format!(
                        "{kind} {name} was not ready within {}s (--start-timeout){why}",
                        self.options.start_timeout.as_secs()
                    )),
                    retryable: Some(true),
                    destination_fault: false,
                },
            });
        }
        self.heartbeat().await?;
        tokio::time::sleep(TICK).await;
        Ok(State::PrepareSource { number })
    }

    /// Changes attempt `number`'s copy in the record.
    async fn write_copy(
        &mut self,
        number: u32,
        mut change: impl FnMut(&mut SourceCopy),
    ) -> Result<(), DriverError> {
        self.write(|vm| {
            let attempt = vm.status.attempts.iter_mut().find(|a| a.number == number);
            if let Some(copy) = attempt.and_then(|a| a.source.as_mut()) {
                change(copy);
            }
        })
        .await
    }

    /// Deletes attempt `number`'s copy, if it made one: the claim, then the
    /// snapshot. Nothing waits for them to go.
    pub(super) async fn release_source(&self, number: u32) -> Result<(), DriverError> {
        let attempt = self
            .record
            .status
            .attempts
            .iter()
            .find(|a| a.number == number);
        let Some(copy) = attempt.and_then(|a| a.source.as_ref()) else {
            return Ok(());
        };
        release(&self.sides.source, &self.plan.spec.source.namespace, copy).await
    }
}

/// Deletes `copy` from `namespace`: the claim, then the snapshot.
pub(super) async fn release(
    client: &Client,
    namespace: &str,
    copy: &SourceCopy,
) -> Result<(), DriverError> {
    let background = DeleteParams::background();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    objects::delete_if_there(&claims, &copy.claim, &background, "claim").await?;
    if let Some(snapshot) = &copy.snapshot {
        let snapshots: Api<VolumeSnapshot> = Api::namespaced(client.clone(), namespace);
        objects::delete_if_there(&snapshots, snapshot, &background, "volumesnapshot").await?;
    }
    Ok(())
}

/// The message of the newest Warning event about `kind` `name`, if any
/// (what `kubectl describe` would show last). Unreadable events are no
/// reason to fail: the wait goes on without them.
async fn latest_warning(
    client: &Client,
    namespace: &str,
    kind: &str,
    name: &str,
) -> Option<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let fields = format!("involvedObject.kind={kind},involvedObject.name={name},type=Warning");
    let list = match events.list(&ListParams::default().fields(&fields)).await {
        Ok(list) => list,
        Err(e) => {
            tracing::debug!("cannot read the events of {kind} {name}: {e}");
            return None;
        }
    };
    let newest = list.items.into_iter().max_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
    })?;
    let reason = newest.reason.unwrap_or_default();
    Some(format!("{reason}: {}", newest.message.unwrap_or_default()))
}
