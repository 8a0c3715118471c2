//! Reading what the planner needs, with one request per kind.
//!
//! - [`select`]: what the selection of several claims reads (issue 18).

pub mod select;

use k8s_openapi::api::authorization::v1::ResourceAttributes;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroupList;
use kube::api::{Api, ListParams};
use kube::Client;

use super::objects::is_ours;
use super::DriverError;
use crate::cluster::Sides;
use crate::plan::security::OpenShift;
use crate::plan::{Inputs, Plan, RemoteInputs, SnapshotSupport};
use crate::snapshots::{self, VolumeSnapshotClass};
use crate::spec::{MigrationSpec, SecurityMode};

pub async fn inputs(client: &Client, spec: &MigrationSpec) -> Result<Inputs, DriverError> {
    inputs_on(&Sides::one(client.clone()), spec).await
}

/// What the planner reads, each side from its own cluster.
pub async fn inputs_on(sides: &Sides, spec: &MigrationSpec) -> Result<Inputs, DriverError> {
    let client = &sides.source;
    let src_ns = &spec.source.namespace;
    let dest = &spec.destination;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), src_ns);
    let source_claim = claims
        .get_opt(&spec.source.name)
        .await
        .map_err(|e| DriverError::kube(format!("get claim {}", spec.source), e))?;
    let source_volume = volume_of(client, source_claim.as_ref()).await?;
    let there = &sides.destination;
    let dest_claims: Api<PersistentVolumeClaim> = Api::namespaced(there.clone(), &dest.namespace);
    let destination_claim = dest_claims
        .get_opt(&dest.name)
        .await
        .map_err(|e| DriverError::kube(format!("get claim {}/{}", dest.namespace, dest.name), e))?;
    let destination_volume = volume_of(there, destination_claim.as_ref()).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), src_ns);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let destination_namespaces: Api<Namespace> = Api::all(there.clone());
    let all = ListParams::default();
    let groups = client
        .list_api_groups()
        .await
        .map_err(|e| DriverError::kube("list the API groups", e))?;
    let baseline = spec.mover.security == SecurityMode::Baseline;
    let remote = match sides.is_remote() {
        false => None,
        true => Some(remote_inputs(there, baseline).await?),
    };
    Ok(Inputs {
        source_claim,
        source_volume,
        storage_classes: storage_classes(client).await?,
        // volmig's own movers mount the source too; they are not the app.
        pods: pods
            .list(&all)
            .await
            .map_err(|e| DriverError::kube("list pods", e))?
            .items
            .into_iter()
            .filter(|p| !is_ours(p))
            .collect(),
        destination_namespace: destination_namespaces
            .get_opt(&dest.namespace)
            .await
            .map_err(|e| DriverError::kube("get namespace", e))?,
        destination_claim,
        destination_volume,
        nodes: nodes(client).await?,
        source_namespace: namespaces
            .get_opt(src_ns)
            .await
            .map_err(|e| DriverError::kube("get namespace", e))?,
        openshift: openshift(client, &groups, baseline).await?,
        snapshots: snapshot_support(client, &groups).await,
        remote,
    })
}

/// The destination's cluster, when it is another one.
async fn remote_inputs(client: &Client, baseline: bool) -> Result<RemoteInputs, DriverError> {
    let groups = client
        .list_api_groups()
        .await
        .map_err(|e| DriverError::kube("list the destination cluster's API groups", e))?;
    Ok(RemoteInputs {
        storage_classes: storage_classes(client).await?,
        nodes: nodes(client).await?,
        openshift: openshift(client, &groups, baseline).await?,
    })
}

async fn storage_classes(client: &Client) -> Result<Vec<StorageClass>, DriverError> {
    let classes: Api<StorageClass> = Api::all(client.clone());
    Ok(classes
        .list(&ListParams::default())
        .await
        .map_err(|e| DriverError::kube("list storage classes", e))?
        .items)
}

/// Every node of `client`'s cluster.
pub(super) async fn nodes(client: &Client) -> Result<Vec<Node>, DriverError> {
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(nodes
        .list(&ListParams::default())
        .await
        .map_err(|e| DriverError::kube("list nodes", e))?
        .items)
}

/// The VolumeSnapshot API, if served, and its classes. Classes that cannot
/// be listed (a user without cluster-wide reads) are told in the plan's
/// refusal, if one needs them, instead of failing a copy that does not.
async fn snapshot_support(client: &Client, groups: &APIGroupList) -> SnapshotSupport {
    let served = groups.groups.iter().any(|g| {
        g.name == snapshots::GROUP && g.versions.iter().any(|v| v.version == snapshots::VERSION)
    });
    if !served {
        return SnapshotSupport::default();
    }
    let classes: Api<VolumeSnapshotClass> = Api::all(client.clone());
    match classes.list(&ListParams::default()).await {
        Ok(list) => SnapshotSupport {
            api: true,
            classes: list.items,
            classes_error: None,
        },
        Err(e) => SnapshotSupport {
            api: true,
            classes: Vec::new(),
            classes_error: Some(DriverError::kube("list volumesnapshotclasses", e).to_string()),
        },
    }
}

/// OpenShift's SCC API group, through which it is told apart.
const OPENSHIFT_SECURITY: &str = "security.openshift.io";

/// Whether the cluster is OpenShift, and (when `baseline` movers are
/// asked for) whether the user may use the SCC that admits them.
async fn openshift(
    client: &Client,
    groups: &APIGroupList,
    baseline: bool,
) -> Result<Option<OpenShift>, DriverError> {
    if !groups.groups.iter().any(|g| g.name == OPENSHIFT_SECURITY) {
        return Ok(None);
    }
    let privileged_scc = match baseline {
        false => None,
        true => may_use_privileged_scc(client).await,
    };
    Ok(Some(OpenShift { privileged_scc }))
}

/// A SelfSubjectAccessReview of `use` on the `privileged` SCC; `None` when
/// it cannot be asked.
async fn may_use_privileged_scc(client: &Client) -> Option<bool> {
    let scc = ResourceAttributes {
        group: Some(OPENSHIFT_SECURITY.to_string()),
        resource: Some("securitycontextconstraints".to_string()),
        verb: Some("use".to_string()),
        name: Some("privileged".to_string()),
        ..ResourceAttributes::default()
    };
    match crate::cluster::can_i(client, scc).await {
        Ok(allowed) => Some(allowed),
        Err(e) => {
            tracing::warn!("cannot ask whether you may use the privileged SCC: {e}");
            None
        }
    }
}

async fn volume_of(
    client: &Client,
    claim: Option<&PersistentVolumeClaim>,
) -> Result<Option<PersistentVolume>, DriverError> {
    let Some(name) = claim
        .and_then(|c| c.spec.as_ref())
        .and_then(|s| s.volume_name.as_deref())
        .filter(|n| !n.is_empty())
    else {
        return Ok(None);
    };
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    volumes
        .get_opt(name)
        .await
        .map_err(|e| DriverError::kube(format!("get volume {name}"), e))
}

/// `plan` with the destination claim's size as it is now: a claim
/// expanded after its data did not fit gets a receiver that knows it.
pub async fn with_current_destination(client: &Client, plan: Plan) -> Plan {
    let dest = &plan.destination;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &dest.namespace);
    match claims.get_opt(&dest.name).await {
        Ok(Some(claim)) => plan.with_grown_destination(&claim),
        Ok(None) => plan,
        Err(e) => {
            tracing::debug!("cannot read the destination claim: {e}");
            plan
        }
    }
}
