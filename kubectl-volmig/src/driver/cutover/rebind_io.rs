//! The rebind's I/O: what the cluster shows, each change written ahead
//! then made, waits that say who holds what when they do not end. The
//! decisions are [`super::rebind`]'s.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::Client;
use serde_json::json;
use tokio::time::Instant;

use super::rebind::{self, Action, Observed};
use super::workload;
use super::{crash_point, Cutover, POLL, TERMINATING_LIMIT};
use crate::driver::DriverError;
use crate::record::cutover::{ClaimShape, Step};

impl Cutover {
    /// Binds the claim to `target`, one written-ahead change at a time.
    pub(super) async fn rebind(
        &mut self,
        meta: &ClaimShape,
        spec: &ClaimShape,
        target: &str,
        remove: &[String],
        keep: &[String],
    ) -> Result<(), DriverError> {
        let claim = self.claim().clone();
        self.rebind_claim(&claim.name, meta, spec, target, remove, keep)
            .await
    }

    /// Binds claim `name` (in the claim's namespace) to `target`.
    pub(super) async fn rebind_claim(
        &mut self,
        name: &str,
        meta: &ClaimShape,
        spec: &ClaimShape,
        target: &str,
        remove: &[String],
        keep: &[String],
    ) -> Result<(), DriverError> {
        let ns = self.claim().namespace.clone();
        let mut waiting: Option<(Action, Instant)> = None;
        loop {
            let seen = self.observe(name, remove, target, keep).await?;
            let action =
                rebind::next(&ns, name, &seen).map_err(|b| DriverError::Refused(b.to_string()))?;
            if action == Action::Done {
                return Ok(());
            }
            if action.changes_the_cluster() {
                waiting = None;
                let label = action.label();
                self.note_change(&label).await?;
                let step = self.cutover().step;
                let side = if step == Step::RollingBack {
                    "rollback"
                } else {
                    "swap"
                };
                crash_point(&format!("{side}:{}", action.kind()));
                crash_point(&format!("{side}:{label}"));
                crash_point(&format!("{side}:{} {name}", action.kind()));
                apply(
                    &self.client,
                    &ns,
                    name,
                    meta,
                    spec,
                    &action,
                    seen.target.as_ref(),
                )
                .await?;
                continue;
            }
            let since = match &waiting {
                Some((a, t)) if *a == action => *t,
                _ => {
                    waiting = Some((action.clone(), Instant::now()));
                    Instant::now()
                }
            };
            if since.elapsed() >= TERMINATING_LIMIT {
                return Err(self.stuck(&ns, &action).await);
            }
            self.keep_alive().await?;
            tokio::time::sleep(POLL).await;
        }
    }

    async fn observe(
        &self,
        name: &str,
        remove: &[String],
        target: &str,
        keep: &[String],
    ) -> Result<Observed, DriverError> {
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &self.claim().namespace);
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let mut seen = Observed {
            claim: get_opt(&claims, name, "claim").await?,
            target_name: target.to_string(),
            ..Observed::default()
        };
        for r in remove {
            seen.remove
                .push((r.clone(), get_opt(&claims, r, "claim").await?));
        }
        for k in keep {
            seen.keep
                .push((k.clone(), get_opt(&volumes, k, "volume").await?));
        }
        // The target is one of the volumes kept (read once), or read alone.
        seen.target = match seen.keep.iter().find(|(k, _)| k == target) {
            Some((_, v)) => v.clone(),
            None => get_opt(&volumes, target, "volume").await?,
        };
        Ok(seen)
    }

    /// A wait that did not end: say who holds what.
    async fn stuck(&self, ns: &str, action: &Action) -> DriverError {
        match action {
            Action::AwaitClaimGone(claim) => {
                let pods = workload::consumers(&self.client, ns, claim)
                    .await
                    .unwrap_or_default();
                DriverError::Refused(format!(
                    "claim {ns}/{claim} stays Terminating: pvc-protection keeps it while a pod uses it ({}); stop {}, then resume",
                    if pods.is_empty() { "none is listed now".to_string() } else { pods.join(", ") },
                    if pods.is_empty() { "its consumer" } else { "them" }
                ))
            }
            other => DriverError::Refused(format!(
                "{} did not happen in {}s; see kubectl describe pvc -n {ns}",
                other.label(),
                TERMINATING_LIMIT.as_secs()
            )),
        }
    }
}

/// Makes one change of a rebind (of claim `ns/name`, to `target`).
pub(crate) async fn apply(
    client: &Client,
    ns: &str,
    name: &str,
    meta: &ClaimShape,
    spec: &ClaimShape,
    action: &Action,
    target: Option<&PersistentVolume>,
) -> Result<(), DriverError> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    match action {
        Action::Retain(v) => super::volumes::set_policy(client, v, rebind::RETAIN).await,
        Action::DeleteClaim { name, uid } => {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match claims.delete(name, &dp).await {
                // Gone already; or the uid changed, another claim took
                // the name: either way, look again.
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
                Err(e) => Err(DriverError::kube(format!("delete claim {name}"), e)),
            }
        }
        Action::FreeVolume(v) => {
            let patch = json!({"spec": {"claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": ns,
                "name": name,
                "uid": null,
                "resourceVersion": null,
            }}});
            let what = format!("free for claim {name} the");
            super::volumes::patch_volume(client, v, &patch, &what).await
        }
        Action::CreateClaim => {
            let target =
                target.ok_or_else(|| DriverError::Refused("the target volume is gone".into()))?;
            let claim = rebind::claim_for(ns, name, meta, spec, target);
            match claims.create(&PostParams::default(), &claim).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                Err(e) => Err(DriverError::kube(format!("create claim {ns}/{name}"), e)),
            }
        }
        Action::AwaitClaimGone(_) | Action::AwaitBound | Action::Done => Ok(()),
    }
}

/// `api.get_opt(name)`, its error saying what was read.
pub(crate) async fn get_opt<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
) -> Result<Option<K>, DriverError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .map_err(|e| DriverError::kube(format!("get {what} {name}"), e))
}
