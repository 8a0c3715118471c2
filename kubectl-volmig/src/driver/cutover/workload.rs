//! The app's side of a cutover: reading the workloads that mount a claim,
//! scaling their owners through the `scale` subresource, and waiting until
//! no pod mounts the claim, or until the owners are Ready again.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::Client;
use serde_json::json;

use crate::driver::objects::is_ours;
use crate::driver::DriverError;
use crate::plan::quiesce::{self, ScalableKind, ScaleTarget, Workloads};

/// Everything the quiesce planner reads in `ns`. KEDA's ScaledObjects are
/// read when the CRD exists.
pub async fn gather(client: &Client, ns: &str) -> Result<Workloads, DriverError> {
    let pods = list::<Pod>(client, ns, "pods").await?;
    gather_with(client, ns, pods).await
}

/// [`gather`] around `pods`, the namespace's pods as already read.
pub async fn gather_with(
    client: &Client,
    ns: &str,
    pods: Vec<Pod>,
) -> Result<Workloads, DriverError> {
    let all = ListParams::default();
    let mut w = Workloads {
        pods,
        replica_sets: list::<ReplicaSet>(client, ns, "replicasets").await?,
        deployments: list::<Deployment>(client, ns, "deployments").await?,
        stateful_sets: list::<StatefulSet>(client, ns, "statefulsets").await?,
        replication_controllers: list::<ReplicationController>(
            client,
            ns,
            "replicationcontrollers",
        )
        .await?,
        autoscalers: list::<HorizontalPodAutoscaler>(client, ns, "horizontalpodautoscalers")
            .await?,
        scaled_objects: Vec::new(),
    };
    w.pods.retain(|p| !is_ours(p));
    let gvk = GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk));
    match api.list(&all).await {
        Ok(list) => {
            w.scaled_objects = list
                .items
                .into_iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .collect()
        }
        // No KEDA here.
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(DriverError::kube("list KEDA ScaledObjects", e)),
    }
    Ok(w)
}

async fn list<K>(client: &Client, ns: &str, what: &str) -> Result<Vec<K>, DriverError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        // A kind this API server does not serve has no objects.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Vec::new()),
        Err(e) => Err(DriverError::kube(format!("list {what} in {ns}"), e)),
    }
}

/// The pods (not volmig's own) that mount `claim` and have not finished;
/// a Terminating pod still holds its volume.
pub async fn consumers(client: &Client, ns: &str, claim: &str) -> Result<Vec<String>, DriverError> {
    let pods = list::<Pod>(client, ns, "pods").await?;
    Ok(pods
        .iter()
        .filter(|p| !is_ours(p) && quiesce::mounts(p, claim) && !quiesce::finished(p))
        .filter_map(|p| p.metadata.name.clone())
        .collect())
}

/// The API of `kind` in `ns`, untyped: scaling and readiness read the same
/// fields of every scalable kind.
fn api_for(client: &Client, ns: &str, kind: ScalableKind) -> Api<DynamicObject> {
    let resource = match kind {
        ScalableKind::Deployment => ApiResource::erase::<Deployment>(&()),
        ScalableKind::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
        ScalableKind::ReplicaSet => ApiResource::erase::<ReplicaSet>(&()),
        ScalableKind::ReplicationController => ApiResource::erase::<ReplicationController>(&()),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// Sets `target`'s replicas through its `scale` subresource (idempotent).
pub async fn scale(
    client: &Client,
    ns: &str,
    target: &ScaleTarget,
    replicas: i32,
) -> Result<(), DriverError> {
    let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
    api_for(client, ns, target.kind)
        .patch_scale(&target.name, &PatchParams::default(), &patch)
        .await
        .map(drop)
        .map_err(|e| {
            let what = format!("scale {:?} {ns}/{} to {replicas}", target.kind, target.name);
            DriverError::kube(what, e)
        })
}

/// Whether `target` runs `replicas` Ready pods (of its current template:
/// `updatedReplicas` where the kind has it). The API server leaves zero
/// counts out of a status.
pub async fn ready(
    client: &Client,
    ns: &str,
    target: &ScaleTarget,
    replicas: i32,
) -> Result<bool, DriverError> {
    if replicas == 0 {
        return Ok(true);
    }
    let object = api_for(client, ns, target.kind)
        .get(&target.name)
        .await
        .map_err(|e| {
            DriverError::kube(format!("read {:?} {ns}/{}", target.kind, target.name), e)
        })?;
    let status = &object.data["status"];
    let count = |field: &str| status[field].as_i64().unwrap_or(0);
    let current = match status.get("updatedReplicas") {
        Some(_) => count("updatedReplicas"),
        None => count("replicas"),
    };
    let want = i64::from(replicas);
    Ok(count("readyReplicas") >= want && current >= want)
}
