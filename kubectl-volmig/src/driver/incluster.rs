//! The in-cluster driver (`--detach`): the same driver, run by
//! `kubectl-volmig drive OP` in a Job's pod under a ServiceAccount of its
//! own, so that an operation goes on when the client that started it does
//! not.
//!
//! - before anything is created, [`preflight`] asks the API server whether
//!   the user may create the driver's objects and holds every grant they
//!   give (SelfSubjectAccessReviews);
//! - [`start`] creates them, roles first (the ServiceAccount and the
//!   bindings are owned by the roles), idempotently: `resume --detach`
//!   after a failed start finds some of them there;
//! - [`remove_grants`] is the driver's last act (its roles go, the rest
//!   with them); [`remove`] is what a client does when it ends or cleans
//!   up an operation it drove in the cluster before (the Job too);
//! - [`live_holder`] tells who drives now: a pod holder that has died is
//!   replaced at once by the Job's next pod, and a client follows that
//!   pod instead of competing with it.

use std::time::Duration;

use futures::stream::{self, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::DriverError;
use crate::names;
use crate::record::{Driver as Lease, InCluster, Phase, VolumeMigration};
use crate::resources::access::{self, driver_rbac_name, Check};
use crate::resources::driver::{self as objects, Owner, DRIVER_OF_KEY};

/// How many access reviews are asked at once.
const REVIEWS_AT_ONCE: usize = 8;
/// How long an object of a previous run may take to go.
const GONE_WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(500);

/// The namespaces an operation's driver works in: the record's (where
/// the Job runs) first, then the source's when it differs.
pub fn namespaces(vm: &VolumeMigration) -> Vec<String> {
    let home = vm.metadata.namespace.clone();
    let source = &vm.spec.source.namespace;
    let mut out = vec![home];
    if !out.contains(source) {
        out.push(source.clone());
    }
    out
}

/// What `vm`'s in-cluster driver will be, to record before it is created.
pub fn in_cluster(vm: &VolumeMigration, image: &str, who: &str) -> InCluster {
    InCluster {
        job: driver_rbac_name(&vm.metadata.name),
        image: image.to_string(),
        namespaces: namespaces(vm),
        started_by: who.to_string(),
        started_at: Timestamp::now(),
    }
}

/// The checks the API server answers no to, for starting `op`'s driver.
pub async fn preflight(
    client: &Client,
    op: &str,
    home: &str,
    namespaces: &[String],
) -> Result<Vec<Check>, DriverError> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let checks = access::needed_to_detach(op, home, namespaces);
    let answers: Vec<Result<Option<Check>, DriverError>> = stream::iter(checks)
        .map(|check| {
            let reviews = reviews.clone();
            async move {
                let allowed = review(&reviews, &check).await?;
                Ok((!allowed).then_some(check))
            }
        })
        .buffered(REVIEWS_AT_ONCE)
        .collect()
        .await;
    answers.into_iter().filter_map(Result::transpose).collect()
}

async fn review(
    reviews: &Api<SelfSubjectAccessReview>,
    check: &Check,
) -> Result<bool, DriverError> {
    let (resource, subresource) = check.resource_and_subresource();
    let asked = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(check.group.to_string()),
                resource: Some(resource.to_string()),
                subresource: subresource.map(str::to_string),
                verb: Some(check.verb.to_string()),
                namespace: check.namespace.clone(),
                name: check.name.clone(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = reviews
        .create(&PostParams::default(), &asked)
        .await
        .map_err(|e| DriverError::kube(format!("ask whether you may {check}"), e))?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Creates the driver of `vm` (its `status.inCluster` recorded): the
/// ClusterRole and a Role in each namespace, the ServiceAccount and the
/// bindings they own, then the Job. A finished Job of an earlier run is
/// replaced; a running one is kept (it drives already).
pub async fn start(
    client: &Client,
    vm: &VolumeMigration,
    ic: &InCluster,
) -> Result<(), DriverError> {
    let op = vm.metadata.name.as_str();
    let home = vm.metadata.namespace.as_str();
    let cluster_role = ensure(&Api::all(client.clone()), &access::driver_cluster_role(op)).await?;
    let cluster_owner = owner("ClusterRole", &cluster_role)?;
    for ns in &ic.namespaces {
        let role = ensure(
            &Api::namespaced(client.clone(), ns),
            &access::driver_role(op, ns),
        )
        .await?;
        let role_owner = owner("Role", &role)?;
        let binding = objects::role_binding(op, ns, home, &role_owner);
        ensure_owned(
            &Api::<RoleBinding>::namespaced(client.clone(), ns),
            &binding,
            &role_owner,
        )
        .await?;
        if ns == home {
            let account = objects::service_account(op, home, &role_owner);
            ensure_owned(
                &Api::<ServiceAccount>::namespaced(client.clone(), home),
                &account,
                &role_owner,
            )
            .await?;
        }
    }
    let binding = objects::cluster_role_binding(op, home, &cluster_owner);
    ensure_owned(
        &Api::<ClusterRoleBinding>::all(client.clone()),
        &binding,
        &cluster_owner,
    )
    .await?;
    ensure_job(client, home, &objects::job(op, home, &ic.image)).await
}

fn owner<K: Resource>(kind: &'static str, object: &K) -> Result<Owner, DriverError> {
    let meta = object.meta();
    let name = meta.name.clone().unwrap_or_default();
    let uid = meta
        .uid
        .clone()
        .ok_or_else(|| DriverError::Conflict(format!("{kind} {name} has no uid")))?;
    Ok(Owner { kind, name, uid })
}

/// A role as built: created, or one of that name brought up to date (an
/// earlier version of volmig may have granted something else).
async fn ensure<K>(api: &Api<K>, object: &K) -> Result<K, DriverError>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    loop {
        match api.create(&PostParams::default(), object).await {
            Ok(created) => return Ok(created),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(DriverError::kube(format!("create {name}"), e)),
        }
        let Some(found) = get(api, &name).await? else {
            continue;
        };
        if found.meta().deletion_timestamp.is_some() {
            wait_gone(api, &name).await?;
            continue;
        }
        // Rules as built, keeping the found object's identity.
        let mut wanted = object.clone();
        wanted.meta_mut().resource_version = found.meta().resource_version.clone();
        return api
            .replace(&name, &PostParams::default(), &wanted)
            .await
            .map_err(|e| DriverError::kube(format!("update {name}"), e));
    }
}

/// An owned object as built: created, or one of that name made the
/// current owner's (the previous owner, deleted since, would take it
/// with it).
async fn ensure_owned<K>(api: &Api<K>, object: &K, owner: &Owner) -> Result<(), DriverError>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    loop {
        match api.create(&PostParams::default(), object).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(DriverError::kube(format!("create {name}"), e)),
        }
        let Some(found) = get(api, &name).await? else {
            continue;
        };
        if found.meta().deletion_timestamp.is_some() {
            wait_gone(api, &name).await?;
            continue;
        }
        let owned = found.owner_references().iter().any(|r| r.uid == owner.uid);
        if owned {
            return Ok(());
        }
        let patch = json!({"metadata": {"ownerReferences": object.meta().owner_references}});
        return api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| DriverError::kube(format!("take over {name}"), e));
    }
}

/// The Job: created, or kept while it runs; one that has finished (an
/// earlier run's) is deleted first, its pods with it.
async fn ensure_job(client: &Client, home: &str, job: &Job) -> Result<(), DriverError> {
    let api: Api<Job> = Api::namespaced(client.clone(), home);
    let name = job.metadata.name.clone().unwrap_or_default();
    loop {
        match api.create(&PostParams::default(), job).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(DriverError::kube(format!("create Job {name}"), e)),
        }
        let Some(found) = get(&api, &name).await? else {
            continue;
        };
        if found.metadata.deletion_timestamp.is_none() && is_active(&found) {
            return Ok(());
        }
        delete(&api, &name, PropagationPolicy::Background).await?;
        wait_gone(&api, &name).await?;
    }
}

/// Whether a Job may still run a pod: not deleted, not Complete, not
/// Failed.
fn is_active(job: &Job) -> bool {
    let ended = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| matches!(c.type_.as_str(), "Complete" | "Failed") && c.status == "True");
    job.metadata.deletion_timestamp.is_none() && !ended
}

/// The driver's last act once the operation has ended: the ClusterRole,
/// the Roles of the other namespaces, then its own namespace's Role,
/// which owns the ServiceAccount it runs as (so that goes last). The
/// bindings go with their roles.
pub async fn remove_grants(client: &Client, op: &str, ic: &InCluster) -> Result<(), DriverError> {
    let name = driver_rbac_name(op);
    delete(
        &Api::<ClusterRole>::all(client.clone()),
        &name,
        PropagationPolicy::Background,
    )
    .await?;
    for ns in ic.namespaces.iter().rev() {
        let roles: Api<Role> = Api::namespaced(client.clone(), ns);
        delete(&roles, &name, PropagationPolicy::Background).await?;
    }
    Ok(())
}

/// What a client removes when it ends (or cleans up) an operation once
/// driven in the cluster: the Job, its pods with it, and the grants.
pub async fn remove(client: &Client, vm: &VolumeMigration) -> Result<(), DriverError> {
    let Some(ic) = &vm.status.in_cluster else {
        return Ok(());
    };
    let jobs: Api<Job> = Api::namespaced(client.clone(), &vm.metadata.namespace);
    delete(&jobs, &ic.job, PropagationPolicy::Background).await?;
    remove_grants(client, &vm.metadata.name, ic).await
}

/// The driver that holds `vm` now, other than `me`, if it is alive: its
/// heartbeat is recent, it is not a process of this machine that has
/// gone, and, for a pod, the pod still runs. A dead pod of a Job that
/// will replace it is alive for a client (which follows the
/// replacement) but not for the replacement itself (which takes over).
pub async fn live_holder(client: &Client, vm: &VolumeMigration, me: &str) -> Option<Lease> {
    let lease = vm.status.driver.as_ref()?;
    if lease.holder == me || !lease.is_alive(Timestamp::now()) {
        return None;
    }
    let Some(pod) = names::holder_pod(&lease.holder) else {
        return Some(lease.clone());
    };
    let ns = &vm.metadata.namespace;
    if !pod_gone(client, ns, pod).await {
        return Some(lease.clone());
    }
    let replaced = names::holder_pod(me).is_none() && job_active(client, vm).await;
    replaced.then(|| lease.clone())
}

/// Whether the pod `name` has stopped for good: deleted, or its
/// container ended (a driver pod never restarts). A pod being deleted
/// still runs: it lets its lease go itself.
async fn pod_gone(client: &Client, ns: &str, name: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    match pods.get_opt(name).await {
        Ok(None) => true,
        Ok(Some(pod)) => pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| matches!(p, "Succeeded" | "Failed")),
        // Unknown: as alive, until the heartbeat goes stale.
        Err(_) => false,
    }
}

/// Whether `vm`'s driver Job may still run a pod.
pub async fn job_active(client: &Client, vm: &VolumeMigration) -> bool {
    let Some(ic) = &vm.status.in_cluster else {
        return false;
    };
    let jobs: Api<Job> = Api::namespaced(client.clone(), &vm.metadata.namespace);
    matches!(jobs.get_opt(&ic.job).await, Ok(Some(job)) if is_active(&job))
}

/// `op`'s driver pods in `ns`, oldest first.
pub async fn driver_pods(client: &Client, ns: &str, op: &str) -> Result<Vec<Pod>, DriverError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("{DRIVER_OF_KEY}={op}");
    let mut list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| DriverError::kube(format!("list the driver pods of {op}"), e))?
        .items;
    list.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
    Ok(list)
}

/// How a freshly started driver is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// This pod holds the operation.
    Driving(String),
    /// The operation ended before a pod was seen to drive it.
    Ended(Phase),
    /// Why no pod drives it (yet): an image that cannot be pulled, a
    /// Job that gave up, or no pod within the time given.
    Stuck(String),
}

/// Waits until a pod of `vm`'s Job holds the operation, or says why none
/// does within `timeout`.
pub async fn await_start(
    client: &Client,
    store: &crate::record::store::RecordStore,
    op: &str,
    timeout: Duration,
) -> Result<Start, DriverError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let vm = store.get(op).await?;
        let holder = vm.status.driver.as_ref().map(|d| d.holder.as_str());
        if let Some(pod) = holder.and_then(names::holder_pod) {
            return Ok(Start::Driving(pod.to_string()));
        }
        if vm.status.phase.is_final() || vm.status.phase == Phase::Aborted {
            return Ok(Start::Ended(vm.status.phase));
        }
        let pods = driver_pods(client, &vm.metadata.namespace, op).await?;
        if let Some(why) = pods.iter().rev().find_map(cannot_start) {
            return Ok(Start::Stuck(why));
        }
        if !job_active(client, &vm).await && !pods.is_empty() {
            return Ok(Start::Stuck(format!(
                "its Job {} has given up (kubectl describe job {} -n {})",
                driver_rbac_name(op),
                driver_rbac_name(op),
                vm.metadata.namespace
            )));
        }
        if tokio::time::Instant::now() >= deadline {
            let state = match pods.last() {
                Some(p) => format!("pod {} is {}", p.name_any(), phase_of(p)),
                None => "no pod was created".to_string(),
            };
            return Ok(Start::Stuck(format!(
                "no driver pod took it up within {}s ({state})",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn phase_of(pod: &Pod) -> String {
    let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
    phase.unwrap_or_else(|| "Pending".to_string())
}

/// Why a driver pod's container cannot start, if it waits for something
/// that will not come by itself.
fn cannot_start(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|c| {
        let waiting = c.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.as_deref()?;
        let stuck = matches!(
            reason,
            "ErrImagePull"
                | "ImagePullBackOff"
                | "InvalidImageName"
                | "CreateContainerConfigError"
                | "CreateContainerError"
        );
        stuck.then(|| {
            format!(
                "pod {} cannot start: {reason}{}",
                pod.name_any(),
                waiting
                    .message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            )
        })
    })
}

async fn get<K>(api: &Api<K>, name: &str) -> Result<Option<K>, DriverError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .map_err(|e| DriverError::kube(format!("get {name}"), e))
}

/// Deletes `name`; one already gone is fine.
async fn delete<K>(
    api: &Api<K>,
    name: &str,
    propagation: PropagationPolicy,
) -> Result<(), DriverError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        propagation_policy: Some(propagation),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(DriverError::kube(format!("delete {name}"), e)),
    }
}

async fn wait_gone<K>(api: &Api<K>, name: &str) -> Result<(), DriverError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let deadline = tokio::time::Instant::now() + GONE_WAIT;
    while get(api, name).await?.is_some() {
        if tokio::time::Instant::now() >= deadline {
            return Err(DriverError::Conflict(format!(
                "{name}, of an earlier run, is still being deleted after {}s",
                GONE_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};

    fn job(conditions: &[(&str, &str)]) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s)| JobCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            ..JobCondition::default()
                        })
                        .collect(),
                ),
                ..JobStatus::default()
            }),
            ..Job::default()
        }
    }

    #[test]
    fn a_job_runs_pods_until_it_is_complete_or_has_failed() {
        assert!(is_active(&job(&[])));
        assert!(is_active(&job(&[
            ("Suspended", "True"),
            ("Complete", "False")
        ])));
        assert!(!is_active(&job(&[("Complete", "True")])));
        assert!(!is_active(&job(&[
            ("FailureTarget", "True"),
            ("Failed", "True")
        ])));
    }

    #[test]
    fn the_driver_works_at_home_and_in_the_source_s_namespace() {
        let mut vm: VolumeMigration =
            serde_saphyr::from_str(include_str!("../../tests/fixtures/record/running.yaml"))
                .expect("fixture");
        vm.metadata.namespace = "apps".into();
        vm.spec.source.namespace = "apps".into();
        assert_eq!(namespaces(&vm), ["apps"]);
        vm.spec.source.namespace = "old".into();
        assert_eq!(namespaces(&vm), ["apps", "old"]);
    }
}
