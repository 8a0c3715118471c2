//! A volume's walk: what the cluster shows, each change written ahead in
//! the record and then made, waits that say what holds what when they do
//! not end. The decisions are [`super::decide`]'s.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
    PostParams, Preconditions,
};
use tokio::time::Instant;

use super::decide::{self, Action, Seen, Toward};
use super::{Rehomer, POLL, TERMINATING_LIMIT};
use crate::driver::cutover::rebind;
use crate::driver::cutover::rebind_io::{self, get_opt};
use crate::driver::cutover::{crash_point, volumes, workload};
use crate::driver::DriverError;
use crate::plan::placement::SELECTED_NODE;
use crate::plan::rehome::drivers::{self, DriverObject};
use crate::record::cutover::ClaimShape;
use crate::record::rehome::{RehomeTarget, VolumeRehome};

/// How often one change may be made again before the walk stops.
const MAX_REPEATS: u32 = 10;

impl Rehomer {
    /// Walks volume `name` `toward` an end, one written-ahead change at a
    /// time.
    pub(super) async fn walk(&mut self, name: &str, toward: Toward) -> Result<(), DriverError> {
        let mut waiting: Option<(Action, Instant)> = None;
        // The same change made again and again (a controller that puts a
        // field back, a conflict each time) stops the walk.
        let mut repeated: (String, u32) = (String::new(), 0);
        loop {
            if toward == Toward::New && self.record.status.rollback.is_some() {
                return Ok(());
            }
            let v =
                self.record.volume(name).cloned().ok_or_else(|| {
                    DriverError::Refused(format!("the record has no volume {name}"))
                })?;
            let seen = self.observe(&v).await?;
            let action =
                decide::next(&v, toward, &seen).map_err(|b| DriverError::Refused(b.to_string()))?;
            if action == Action::Done {
                return Ok(());
            }
            if action.changes_the_cluster() {
                waiting = None;
                let label = format!("{} {name}", action.kind());
                repeated = match repeated {
                    (last, n) if last == label => (last, n + 1),
                    _ => (label.clone(), 1),
                };
                if repeated.1 > MAX_REPEATS {
                    return Err(DriverError::Refused(format!(
                        "{label} was made {MAX_REPEATS} times and the cluster keeps showing it \
                         undone: something changes it back; look at it, then resume or rollback"
                    )));
                }
                if repeated.1 > 1 {
                    tokio::time::sleep(POLL * repeated.1).await;
                }
                self.write(|r| {
                    if let Some(v) = r.volume_mut(name) {
                        v.change = Some(label.clone());
                    }
                })
                .await?;
                crash_point(&format!("{}:{}", toward.side(), action.kind()));
                self.apply(&v, toward, &action, &seen).await?;
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
                return Err(self.stuck(&v, &action).await);
            }
            self.keep_alive().await?;
            tokio::time::sleep(POLL).await;
        }
    }

    async fn observe(&self, v: &VolumeRehome) -> Result<Seen, DriverError> {
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let claim = match &v.claim {
            Some(c) => {
                let api: Api<PersistentVolumeClaim> =
                    Api::namespaced(self.client.clone(), &c.namespace);
                get_opt(&api, &c.name, "claim").await?
            }
            None => None,
        };
        let mut driver_objects = Vec::new();
        for o in &v.driver_objects {
            let api = driver_api(&self.client, o);
            driver_objects.push(
                get_opt(&api, &o.name, &o.kind)
                    .await?
                    .map(|d| serde_json::to_value(d).unwrap_or_default()),
            );
        }
        Ok(Seen {
            volume: get_opt(&volumes, &v.name, "volume").await?,
            claim,
            driver_objects,
        })
    }

    async fn apply(
        &self,
        v: &VolumeRehome,
        toward: Toward,
        action: &Action,
        seen: &Seen,
    ) -> Result<(), DriverError> {
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        match action {
            Action::Retain => volumes::set_policy(&self.client, &v.name, rebind::RETAIN).await,
            Action::RestorePolicy => volumes::set_policy(&self.client, &v.name, &v.policy).await,
            Action::DeleteClaim { uid } => {
                let claim = v
                    .claim
                    .as_ref()
                    .ok_or_else(|| DriverError::Refused("no claim recorded".into()))?;
                let api: Api<PersistentVolumeClaim> =
                    Api::namespaced(self.client.clone(), &claim.namespace);
                delete_guarded(&api, &claim.name, uid, "claim").await
            }
            Action::DeleteVolume { uid } => delete_guarded(&volumes, &v.name, uid, "volume").await,
            Action::CreateVolume => {
                let pv = decide::wanted(v, toward);
                match volumes.create(&PostParams::default(), &pv).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    Err(e) => Err(DriverError::kube(format!("create volume {}", v.name), e)),
                }
            }
            Action::RewriteDriver(n) => {
                let object = &v.driver_objects[*n];
                let rv = seen
                    .driver_objects
                    .get(*n)
                    .and_then(Option::as_ref)
                    .and_then(|o| o["metadata"]["resourceVersion"].as_str());
                let patch = drivers::patch(object, toward == Toward::Old, rv);
                match driver_api(&self.client, object)
                    .patch(&object.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    // Changed meanwhile: read again and decide again.
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    Err(e) => Err(DriverError::kube(
                        format!("rewrite {}", object.describe()),
                        e,
                    )),
                }
            }
            Action::Bind(bind) => {
                let claim = v
                    .claim
                    .as_ref()
                    .ok_or_else(|| DriverError::Refused("no claim recorded".into()))?;
                let shape = claim_shape(v, toward, &self.record.spec.target);
                rebind_io::apply(
                    &self.client,
                    &claim.namespace,
                    &claim.name,
                    &shape,
                    &shape,
                    bind,
                    seen.volume.as_ref(),
                )
                .await
            }
            Action::AwaitClaimGone | Action::AwaitVolumeGone | Action::Done => Ok(()),
        }
    }

    /// A wait that did not end: say what holds what.
    async fn stuck(&self, v: &VolumeRehome, action: &Action) -> DriverError {
        match (action, &v.claim) {
            (Action::AwaitClaimGone, Some(claim)) => {
                let pods = workload::consumers(&self.client, &claim.namespace, &claim.name).await.unwrap_or_default();
                DriverError::Refused(format!(
                    "claim {claim} stays Terminating: pvc-protection keeps it while a pod uses it ({}); stop it, then resume",
                    if pods.is_empty() { "none is listed now".to_string() } else { pods.join(", ") },
                ))
            }
            (Action::AwaitVolumeGone, _) => DriverError::Refused(format!(
                "persistentvolume {} stays Terminating: a finalizer holds it (kubectl get pv {} -o jsonpath='{{.metadata.finalizers}}'); then resume",
                v.name, v.name
            )),
            (other, _) => DriverError::Refused(format!(
                "{} of {} did not happen in {}s; see kubectl describe pv {}",
                other.kind(),
                v.name,
                TERMINATING_LIMIT.as_secs(),
                v.name
            )),
        }
    }
}

/// Deletes `name` if its uid is still `uid`; gone already, or another
/// object under the name, is no error: the next look decides.
async fn delete_guarded<K>(
    api: &Api<K>,
    name: &str,
    uid: &str,
    what: &str,
) -> Result<(), DriverError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(DriverError::kube(format!("delete {what} {name}"), e)),
    }
}

/// The API of a driver object's kind.
pub(crate) fn driver_api(client: &kube::Client, o: &DriverObject) -> Api<DynamicObject> {
    let (group, version) = o
        .api_version
        .split_once('/')
        .unwrap_or(("", &o.api_version));
    let gvk = GroupVersionKind::gvk(group, version, &o.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &o.plural);
    match &o.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// The claim to create again: its recorded shape, and the node it was
/// selected for: the new one going forward (TopoLVM deletes a claim whose
/// selected node is deleted), its own going back.
fn claim_shape(v: &VolumeRehome, toward: Toward, target: &RehomeTarget) -> ClaimShape {
    let mut shape = v.claim_shape.clone().unwrap_or_default();
    let node = match (toward, target, &v.selected_node) {
        (_, _, None) => None,
        (Toward::New, RehomeTarget::Node { node }, Some(_)) => Some(node.clone()),
        (Toward::New, RehomeTarget::Topology { .. }, Some(_)) => None,
        (Toward::Old, _, Some(old)) => Some(old.clone()),
    };
    if let Some(node) = node {
        shape.annotations.insert(SELECTED_NODE.to_string(), node);
    }
    shape
}
