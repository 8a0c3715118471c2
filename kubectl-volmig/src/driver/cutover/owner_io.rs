//! The StatefulSet update's I/O (`--update-owner`): recording it, then
//! deleting and creating the StatefulSet one written-ahead change at a
//! time, forward to the new class or back to the old.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions, PropagationPolicy};

use super::owner::{self, OwnerAction};
use super::{crash_point, Cutover, POLL, TERMINATING_LIMIT};
use crate::driver::DriverError;
use crate::events::Severity;
use crate::record::cutover::OwnerUpdate;

impl Cutover {
    /// Records the StatefulSet to update (once, before anything changes
    /// it): the one among the stopped owners whose claim template made the
    /// claim, with the class it names and the new volume's.
    pub(super) async fn record_owner(&mut self, new_volume: &str) -> Result<(), DriverError> {
        let wanted = self
            .plan
            .spec
            .cutover
            .as_ref()
            .is_some_and(|c| c.update_owner);
        if !wanted || self.cutover().owner.is_some() {
            return Ok(());
        }
        let ns = self.claim().namespace.clone();
        let claim = self.claim().name.clone();
        let api: Api<StatefulSet> = Api::namespaced(self.client.clone(), &ns);
        let sets = api
            .list(&ListParams::default())
            .await
            .map_err(|e| DriverError::kube(format!("list StatefulSets in {ns}"), e))?
            .items;
        // In a set, the owners any claim stopped: this claim's own may be
        // empty when another claim stopped the app first.
        let stopped = match &self.gate {
            Some(gate) => gate.stops(),
            None => self.cutover().quiesce,
        };
        let Some((sts, template)) = owner::template_owner(&claim, &stopped, &sets) else {
            return Err(DriverError::Refused(format!(
                "--update-owner: no StatefulSet that was stopped made claim {ns}/{claim} from its volumeClaimTemplates"
            )));
        };
        // In a set, the StatefulSet is made again once, by its
        // lowest-keyed claim, after every claim is swapped.
        if let Some(gate) = &self.gate {
            let made = |c: &crate::spec::ClaimRef| {
                c.namespace == ns && owner::template_of(&c.name, sts).is_some()
            };
            if !gate.leads(made) {
                return Ok(());
            }
        }
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let to_class = volumes
            .get(new_volume)
            .await
            .map_err(|e| DriverError::kube(format!("get volume {new_volume}"), e))?
            .spec
            .and_then(|s| s.storage_class_name);
        let update = OwnerUpdate {
            name: sts.metadata.name.clone().unwrap_or_default(),
            from_class: owner::template_class(sts, &template),
            to_class,
            original: owner::original_of(sts),
            template,
        };
        self.write(|vm| {
            let c = vm.status.cutover.get_or_insert_with(Default::default);
            c.owner.get_or_insert_with(|| update.clone());
        })
        .await
    }

    /// Brings the recorded StatefulSet's template to the new class
    /// (`forward`) or back to the old one.
    pub(super) async fn update_owner(&mut self, forward: bool) -> Result<(), DriverError> {
        let Some(update) = self.cutover().owner else {
            return Ok(());
        };
        let want = if forward {
            &update.to_class
        } else {
            &update.from_class
        };
        let ns = self.claim().namespace.clone();
        let api: Api<StatefulSet> = Api::namespaced(self.client.clone(), &ns);
        let side = if forward { "owner" } else { "rollback-owner" };
        let mut waited = None;
        let mut changed = false;
        loop {
            let seen = api
                .get_opt(&update.name)
                .await
                .map_err(|e| DriverError::kube(format!("get StatefulSet {}", update.name), e))?;
            match owner::next(&update, want.as_deref(), seen.as_ref()) {
                OwnerAction::Done => break,
                OwnerAction::AwaitGone => {
                    let since = *waited.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= TERMINATING_LIMIT {
                        return Err(DriverError::Refused(format!(
                            "StatefulSet {ns}/{} is still being deleted after {}s",
                            update.name,
                            TERMINATING_LIMIT.as_secs()
                        )));
                    }
                    self.keep_alive().await?;
                    tokio::time::sleep(POLL).await;
                }
                OwnerAction::Delete { uid } => {
                    changed = true;
                    self.note_change("DeleteOwner").await?;
                    crash_point(&format!("{side}:Delete"));
                    let params = DeleteParams {
                        propagation_policy: Some(PropagationPolicy::Orphan),
                        preconditions: Some(Preconditions {
                            uid: Some(uid),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    match api.delete(&update.name, &params).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                        Err(e) => {
                            let what =
                                format!("delete StatefulSet {} (orphaning its pods)", update.name);
                            return Err(DriverError::kube(what, e));
                        }
                    }
                }
                OwnerAction::Create(sts) => {
                    changed = true;
                    self.note_change("CreateOwner").await?;
                    crash_point(&format!("{side}:Create"));
                    match api.create(&PostParams::default(), &sts).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(e)) if e.code == 409 => {}
                        Err(e) => {
                            let what = format!("create StatefulSet {} again", update.name);
                            return Err(DriverError::kube(what, e));
                        }
                    }
                }
            }
        }
        if !changed {
            return Ok(());
        }
        let msg = format!(
            "StatefulSet {} re-created with class {} in its claim template {} (its pods and claims stayed)",
            update.name,
            want.as_deref().unwrap_or("(the default)"),
            update.template
        );
        self.post(Severity::Normal, "CutoverOwnerUpdated", &msg)
            .await;
        Ok(())
    }
}
