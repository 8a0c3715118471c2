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
//! - [`liveness`]: [`live_holder`] tells who drives now: a pod holder that has died is
//!   replaced at once by the Job's next pod, and a client follows that
//!   pod instead of competing with it.

use std::time::Duration;

use futures::stream::{self, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::authorization::v1::ResourceAttributes;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::DriverError;

mod liveness;

use crate::record::{InCluster, VolumeMigration};
use crate::resources::access::{self, driver_rbac_name, Check};
use crate::resources::driver::{self as objects, Owner};
use liveness::is_active;
pub use liveness::{await_start, driver_pods, job_active, live_holder, Start};

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
    copies: bool,
) -> Result<Vec<Check>, DriverError> {
    let checks = access::needed_to_detach(op, home, namespaces, copies);
    let answers: Vec<Result<Option<Check>, DriverError>> = stream::iter(checks)
        .map(|check| async move {
            let allowed = review(client, &check).await?;
            Ok((!allowed).then_some(check))
        })
        .buffered(REVIEWS_AT_ONCE)
        .collect()
        .await;
    answers.into_iter().filter_map(Result::transpose).collect()
}

async fn review(client: &Client, check: &Check) -> Result<bool, DriverError> {
    let (resource, subresource) = check.resource_and_subresource();
    let attributes = ResourceAttributes {
        group: Some(check.group.to_string()),
        resource: Some(resource.to_string()),
        subresource: subresource.map(str::to_string),
        verb: Some(check.verb.to_string()),
        namespace: check.namespace.clone(),
        name: check.name.clone(),
        ..ResourceAttributes::default()
    };
    crate::cluster::can_i(client, attributes)
        .await
        .map_err(|e| DriverError::kube(format!("ask whether you may {check}"), e))
}

/// Creates the driver of `vm` (its `status.inCluster` recorded): the
/// ClusterRole and a Role in each namespace, the ServiceAccount and the
/// bindings they own, then the Job. A finished Job of an earlier run is
/// replaced; a running one is kept (it drives already).
pub async fn start(
    client: &Client,
    vm: &VolumeMigration,
    ic: &InCluster,
    start_timeout: Duration,
) -> Result<(), DriverError> {
    let op = vm.metadata.name.as_str();
    let home = vm.metadata.namespace.as_str();
    // A driver whose senders read snapshots needs the grants for them.
    let copies = vm.reads().reads_copy();
    let cluster_role = ensure(
        &Api::all(client.clone()),
        &access::driver_cluster_role(op, copies),
    )
    .await?;
    let cluster_owner = owner("ClusterRole", &cluster_role)?;
    for ns in &ic.namespaces {
        let role = ensure(
            &Api::namespaced(client.clone(), ns),
            &access::driver_role(op, ns, copies),
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
    let job = objects::job(op, home, &ic.image, start_timeout.as_secs());
    ensure_job(client, home, &job).await
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

/// What [`create_or_find`] did.
enum Made<K> {
    Created(K),
    /// One of that name was there (not being deleted).
    Found(K),
}

/// Creates `object`, or finds the live one of its name; one being deleted
/// is waited out and created again.
async fn create_or_find<K>(api: &Api<K>, object: &K) -> Result<Made<K>, DriverError>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    loop {
        match api.create(&PostParams::default(), object).await {
            Ok(created) => return Ok(Made::Created(created)),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(DriverError::kube(format!("create {name}"), e)),
        }
        match get(api, &name).await? {
            Some(found) if found.meta().deletion_timestamp.is_some() => {
                wait_gone(api, &name).await?
            }
            Some(found) => return Ok(Made::Found(found)),
            None => {}
        }
    }
}

/// A role as built: created, or one of that name brought up to date (an
/// earlier version of volmig may have granted something else).
async fn ensure<K>(api: &Api<K>, object: &K) -> Result<K, DriverError>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let found = match create_or_find(api, object).await? {
        Made::Created(created) => return Ok(created),
        Made::Found(found) => found,
    };
    // Rules as built, keeping the found object's identity.
    let name = object.meta().name.clone().unwrap_or_default();
    let mut wanted = object.clone();
    wanted.meta_mut().resource_version = found.meta().resource_version.clone();
    api.replace(&name, &PostParams::default(), &wanted)
        .await
        .map_err(|e| DriverError::kube(format!("update {name}"), e))
}

/// An owned object as built: created, or one of that name made the
/// current owner's (the previous owner, deleted since, would take it
/// with it).
async fn ensure_owned<K>(api: &Api<K>, object: &K, owner: &Owner) -> Result<(), DriverError>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let found = match create_or_find(api, object).await? {
        Made::Created(_) => return Ok(()),
        Made::Found(found) => found,
    };
    if found.owner_references().iter().any(|r| r.uid == owner.uid) {
        return Ok(());
    }
    let name = object.meta().name.clone().unwrap_or_default();
    let patch = json!({"metadata": {"ownerReferences": object.meta().owner_references}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| DriverError::kube(format!("take over {name}"), e))
}

/// The Job: created, or kept while it runs; one that has finished (an
/// earlier run's) or runs another image is deleted first, its pods with
/// it.
async fn ensure_job(client: &Client, home: &str, job: &Job) -> Result<(), DriverError> {
    let api: Api<Job> = Api::namespaced(client.clone(), home);
    let name = job.metadata.name.clone().unwrap_or_default();
    loop {
        let found = match create_or_find(&api, job).await? {
            Made::Created(_) => return Ok(()),
            Made::Found(found) => found,
        };
        // A running Job drives already, unless it runs another image
        // than asked for now (one that could not be pulled, say).
        if is_active(&found) && image_of(&found) == image_of(job) {
            return Ok(());
        }
        delete(&api, &name).await?;
        wait_gone(&api, &name).await?;
    }
}

fn image_of(job: &Job) -> Option<&str> {
    let pod = job.spec.as_ref()?.template.spec.as_ref()?;
    pod.containers.first()?.image.as_deref()
}

/// The driver's last act once the operation has ended: the ClusterRole,
/// the Roles of the other namespaces, then its own namespace's Role,
/// which owns the ServiceAccount it runs as (so that goes last). The
/// bindings go with their roles.
pub async fn remove_grants(client: &Client, op: &str, ic: &InCluster) -> Result<(), DriverError> {
    let name = driver_rbac_name(op);
    delete(&Api::<ClusterRole>::all(client.clone()), &name).await?;
    for ns in ic.namespaces.iter().rev() {
        let roles: Api<Role> = Api::namespaced(client.clone(), ns);
        delete(&roles, &name).await?;
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
    delete(&jobs, &ic.job).await?;
    remove_grants(client, &vm.metadata.name, ic).await
}

async fn get<K>(api: &Api<K>, name: &str) -> Result<Option<K>, DriverError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .map_err(|e| DriverError::kube(format!("get {name}"), e))
}

/// Deletes `name` and, in the background, what it owns (a Job's pods, a
/// role's bindings and account); one already gone is fine.
async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), DriverError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    let kind = K::kind(&K::DynamicType::default()).to_string();
    super::objects::delete_if_there(api, name, &params, &kind)
        .await
        .map(|_| ())
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

    #[test]
    fn the_driver_works_at_home_and_in_the_source_s_namespace() {
        let mut vm: VolumeMigration =
            serde_saphyr::from_str(include_str!("../../../tests/fixtures/record/running.yaml"))
                .expect("fixture");
        vm.metadata.namespace = "apps".into();
        vm.spec.source.namespace = "apps".into();
        assert_eq!(namespaces(&vm), ["apps"]);
        vm.spec.source.namespace = "old".into();
        assert_eq!(namespaces(&vm), ["apps", "old"]);
    }
}
