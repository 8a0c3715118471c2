//! Creating what an attempt needs, idempotently (a resumed operation finds
//! some of it there already), and removing it by label once it is over.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::DriverError;
use crate::cluster::Sides;
use crate::names::{self, Component};
use crate::plan::{ClaimAction, Method, Plan};
use crate::resources;
use crate::snapshots::VolumeSnapshot;

/// How long the operation's key material is valid: longer than any
/// migration, short enough that a leaked Secret soon expires.
const KEYS_VALID_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

/// Creates `object`; one that exists already is taken as it is.
pub async fn create_or_get<K>(api: &Api<K>, object: &K) -> Result<K, DriverError>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), object).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(e)) if e.code == 409 => api
            .get(&name)
            .await
            .map_err(|e| DriverError::kube(format!("get {name}"), e)),
        Err(e) => Err(DriverError::kube(format!("create {name}"), e)),
    }
}

/// `object` as it is in the cluster, created first if it is not there: for
/// a step taken again each tick while it waits, a GET rather than a POST
/// refused with 409 and then a GET.
pub async fn get_or_create<K>(api: &Api<K>, object: &K) -> Result<K, DriverError>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    match api.get_opt(&name).await {
        Ok(Some(found)) => Ok(found),
        Ok(None) => create_or_get(api, object).await,
        Err(e) => Err(DriverError::kube(format!("get {name}"), e)),
    }
}

/// The destination claim, created unless the plan reuses one. A claim of
/// that name that volmig did not create for this operation is refused.
pub async fn ensure_destination(client: &Client, plan: &Plan) -> Result<(), DriverError> {
    let dest = &plan.destination;
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &dest.namespace);
    if plan.destination.action == ClaimAction::Reuse {
        return match api.get_opt(&dest.name).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(DriverError::Conflict(format!(
                "the destination claim {}/{} to reuse is gone",
                dest.namespace, dest.name
            ))),
            Err(e) => Err(DriverError::kube(format!("get claim {}", dest.name), e)),
        };
    }
    let claim = create_or_get(&api, &resources::destination_claim(plan)).await?;
    let ours = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(names::OPERATION_KEY))
        .is_some_and(|op| *op == plan.operation);
    if !ours {
        return Err(DriverError::Conflict(format!(
            "a claim {}/{} appeared that this operation did not create; \
             migrate again with --reuse to copy into it",
            dest.namespace, dest.name
        )));
    }
    Ok(())
}

/// The key Secret in the destination namespace (the receiver's) and, when it
/// differs (or is in another cluster), the source namespace (the sender's),
/// both with the same material.
pub async fn ensure_keys(sides: &Sides, plan: &Plan) -> Result<(), DriverError> {
    let name = names::keys_name(&plan.operation);
    let dest: Api<Secret> = Api::namespaced(sides.destination.clone(), &plan.destination.namespace);
    let existing = dest
        .get_opt(&name)
        .await
        .map_err(|e| DriverError::kube(format!("get secret {name}"), e))?;
    let secret = match existing {
        Some(secret) => secret,
        None => {
            let material = mover::tls::KeyMaterial::generate(&plan.operation, KEYS_VALID_FOR)
                .map_err(|e| DriverError::Keys(e.to_string()))?;
            let files: Vec<(&str, &[u8])> = material.files().collect();
            let secret = resources::keys_secret(plan, &plan.destination.namespace, &files);
            create_or_get(&dest, &secret).await?
        }
    };
    let source_ns = &plan.spec.source.namespace;
    if *source_ns != plan.destination.namespace || sides.is_remote() {
        let src: Api<Secret> = Api::namespaced(sides.source.clone(), source_ns);
        let data = secret.data.unwrap_or_default();
        let files: Vec<(&str, &[u8])> = data.iter().map(|(k, v)| (k.as_str(), &v.0[..])).collect();
        let copy = resources::keys_secret(plan, source_ns, &files);
        create_or_get(&src, &copy).await?;
    }
    Ok(())
}

/// Across clusters, the source namespace's pointer to the record.
pub async fn ensure_pointer(sides: &Sides, plan: &Plan) -> Result<(), DriverError> {
    let Some(pointer) = resources::record_pointer(plan) else {
        return Ok(());
    };
    let api: Api<ConfigMap> = Api::namespaced(sides.source.clone(), &plan.spec.source.namespace);
    create_or_get(&api, &pointer).await.map(|_| ())
}

/// Removes the pointer [`ensure_pointer`] made, if there is one.
pub async fn remove_pointer(sides: &Sides, op: &str, source_ns: &str) -> Result<(), DriverError> {
    if !sides.is_remote() {
        return Ok(());
    }
    let api: Api<ConfigMap> = Api::namespaced(sides.source.clone(), source_ns);
    let name = names::pointer_name(op);
    delete_if_there(&api, &name, &DeleteParams::default(), "configmap").await?;
    Ok(())
}

/// The receiver's Service; returns the address senders connect to.
pub async fn ensure_service(client: &Client, plan: &Plan) -> Result<String, DriverError> {
    let api: Api<Service> = Api::namespaced(client.clone(), &plan.destination.namespace);
    let service = create_or_get(&api, &resources::service(plan)).await?;
    let ip = service
        .spec
        .and_then(|s| s.cluster_ip)
        .filter(|ip| !ip.is_empty() && ip != "None")
        .ok_or_else(|| {
            DriverError::Conflict(format!(
                "Service {} has no cluster IP",
                names::service_name(&plan.operation)
            ))
        })?;
    Ok(format!("{ip}:{}", names::MOVER_PORT))
}

/// Points the Service at attempt `number`'s receiver only: a receiver of
/// an earlier attempt that is still going away must not get the sender.
pub async fn route_to_attempt(
    client: &Client,
    plan: &Plan,
    number: u32,
) -> Result<(), DriverError> {
    let api: Api<Service> = Api::namespaced(client.clone(), &plan.destination.namespace);
    let name = names::service_name(&plan.operation);
    let patch = serde_json::json!({"spec": {"selector": {names::ATTEMPT_KEY: number.to_string()}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| DriverError::kube(format!("route Service {name} to attempt {number}"), e))?;
    Ok(())
}

/// Deletes `name` (`what` it is, for the error) with `params`: whether it
/// was there. One already gone is what was wanted, not an error.
pub async fn delete_if_there<K>(
    api: &Api<K>,
    name: &str,
    params: &DeleteParams,
    what: &str,
) -> Result<bool, DriverError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(DriverError::kube(format!("delete {what} {name}"), e)),
    }
}

/// Deletes the pods `names` (if there) and waits up to `wait` for them to
/// be gone, so the next attempt's receiver is the only writer of the
/// destination.
pub async fn delete_pods(
    api: &Api<Pod>,
    pods: &[String],
    wait: Duration,
) -> Result<(), DriverError> {
    for name in pods {
        delete_if_there(api, name, &DeleteParams::default(), "pod").await?;
    }
    let deadline = tokio::time::Instant::now() + wait;
    for name in pods {
        while tokio::time::Instant::now() < deadline {
            match api.get_opt(name).await {
                Ok(None) => break,
                Ok(Some(_)) => tokio::time::sleep(Duration::from_millis(300)).await,
                Err(e) => return Err(DriverError::kube(format!("get pod {name}"), e)),
            }
        }
    }
    Ok(())
}

/// The taint of a node that stopped reporting.
pub(crate) const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// What [`cleanup`] removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub pods: usize,
    pub services: usize,
    pub secrets: usize,
    /// Snapshots of the source and the claims restored or cloned from it.
    pub copies: usize,
}

/// Removes the operation's pods, Service and key Secrets in its source's
/// and destination's `namespaces`, each in its cluster (found by label):
/// everything but the record and the destination claim; and the copies of
/// the source its senders read (`reads`), if they read any: only then are
/// snapshots listed, which others may not be allowed.
pub async fn cleanup(
    sides: &Sides,
    op: &str,
    (source_ns, destination_ns): (&str, &str),
    reads: Method,
) -> Result<Removed, DriverError> {
    let mut removed = Removed::default();
    for (client, namespaces) in sides.scopes(source_ns, destination_ns) {
        remove(client, op, &namespaces, Some(reads), &mut removed).await?;
    }
    Ok(removed)
}

/// Deletes the destination claims `vm` gave up for fresh ones (issue 20),
/// by the names its record keeps, if they are still the operation's;
/// their names.
pub async fn remove_abandoned(
    client: &Client,
    vm: &crate::record::VolumeMigration,
) -> Result<Vec<String>, DriverError> {
    let ns = &vm.spec.destination.namespace;
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let mut removed = Vec::new();
    for a in &vm.status.abandoned_destinations {
        let claim = api
            .get_opt(&a.name)
            .await
            .map_err(|e| DriverError::kube(format!("get claim {}", a.name), e))?;
        let ours = claim
            .and_then(|c| c.metadata.labels)
            .is_some_and(|l| l.get(names::OPERATION_KEY) == Some(&vm.metadata.name));
        if ours {
            delete_if_there(&api, &a.name, &DeleteParams::default(), "claim").await?;
            removed.push(format!("{ns}/{}", a.name));
        }
    }
    Ok(removed)
}

/// Removes the operation's pods only, in both sides' namespaces: a
/// cutover's next pass runs behind the same Service with the same keys.
pub async fn remove_pods(
    sides: &Sides,
    op: &str,
    (source_ns, destination_ns): (&str, &str),
) -> Result<(), DriverError> {
    let mut removed = Removed::default();
    for (client, namespaces) in sides.scopes(source_ns, destination_ns) {
        remove(client, op, &namespaces, None, &mut removed).await?;
    }
    Ok(())
}

/// Removes the pods in `namespaces` of `client`'s cluster; with `all`
/// (what the senders read), the rest too; counted into `removed`.
async fn remove(
    client: &Client,
    op: &str,
    namespaces: &[&str],
    all: Option<Method>,
    removed: &mut Removed,
) -> Result<(), DriverError> {
    let selector = names::disposable_selector(op);
    let mut seen: Vec<&str> = Vec::new();
    for ns in namespaces.iter().copied() {
        if seen.contains(&ns) {
            continue;
        }
        seen.push(ns);
        removed.pods += delete_all::<Pod>(client, ns, &selector).await?;
        if let Some(reads) = all {
            removed.services += delete_all::<Service>(client, ns, &selector).await?;
            removed.secrets += delete_all::<Secret>(client, ns, &selector).await?;
            if reads.reads_copy() {
                removed.copies += remove_source_copies(client, op, ns, None).await?;
            }
        }
    }
    Ok(())
}

/// Removes operation `op`'s snapshots and temporary claims in `ns`, but
/// attempt `keep`'s: the claims first (a snapshot being restored from is
/// protected from deletion), then the snapshots. A cluster without the
/// snapshot API has none to remove, and neither does a user who may not
/// list them (they could not have made any).
pub async fn remove_source_copies(
    client: &Client,
    op: &str,
    ns: &str,
    keep: Option<u32>,
) -> Result<usize, DriverError> {
    let selector = match keep {
        Some(n) => format!(
            "{},{}!={n}",
            names::source_copy_selector(op),
            names::ATTEMPT_KEY
        ),
        None => names::source_copy_selector(op),
    };
    let claims = delete_all::<PersistentVolumeClaim>(client, ns, &selector).await?;
    let snapshots = match delete_all::<VolumeSnapshot>(client, ns, &selector).await {
        Ok(n) => n,
        Err(DriverError::Kube { source, .. }) if matches!(source.as_ref(), kube::Error::Api(e) if e.code == 404 || e.code == 403) => {
            0
        }
        Err(e) => return Err(e),
    };
    Ok(claims + snapshots)
}

async fn delete_all<K>(client: &Client, ns: &str, selector: &str) -> Result<usize, DriverError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let kind = K::kind(&K::DynamicType::default()).to_string();
    let list = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| DriverError::kube(format!("list {kind}s"), e))?;
    let mut n = 0;
    for item in list.items {
        let name = item.meta().name.clone().unwrap_or_default();
        if delete_if_there(&api, &name, &DeleteParams::default(), &kind).await? {
            n += 1;
        }
    }
    Ok(n)
}

/// Waits up to `wait` until operation `op` has no pods left in its
/// source's and destination's namespaces, each in its cluster (a receiver
/// writes its last checkpoint while it goes). `false` if some are still
/// there.
pub async fn wait_pods_gone(
    sides: &Sides,
    op: &str,
    (source_ns, destination_ns): (&str, &str),
    wait: Duration,
) -> Result<bool, DriverError> {
    let selector = names::operation_selector(op);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let mut left = 0;
        for (client, namespaces) in sides.scopes(source_ns, destination_ns) {
            for ns in namespaces {
                let api: Api<Pod> = Api::namespaced(client.clone(), ns);
                left += api
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(|e| DriverError::kube("list the operation's pods", e))?
                    .items
                    .len();
            }
        }
        if left == 0 {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The component label of a pod, as volmig set it.
pub fn component_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(names::COMPONENT_KEY))
        .map(String::as_str)
}

/// Whether `pod` is one of volmig's own (its movers mount the source too).
pub fn is_ours(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(names::MANAGED_BY_KEY))
        .is_some_and(|v| v == names::MANAGED_BY)
        && component_of(pod) != Some(Component::Destination.as_str())
}
