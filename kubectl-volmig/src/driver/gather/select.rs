//! Reading what selection needs ([`crate::plan::select`]): the claims (with
//! the label selector, so that the API server is the one parser of `-l`),
//! the volumes once, and the workloads of each namespace that has claims.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, ListParams};
use kube::Client;

use crate::driver::cutover::workload;
use crate::driver::DriverError;
use crate::plan::select::Found;

/// Namespaces whose workloads are read at once: `-A` over many namespaces
/// without a burst of requests the API server's fairness would queue.
const NAMESPACES_AT_ONCE: usize = 4;

/// What `select` reads: one [`Found`] per namespace that has claims (that
/// `label_selector` matches), by namespace name; for `namespace` (`None`:
/// all namespaces) always one, claims or not, so that an empty namespace
/// or a workload without claims is told as such.
pub async fn found(
    client: &Client,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<Found>, DriverError> {
    let mut params = ListParams::default();
    if let Some(selector) = label_selector {
        params = params.labels(selector);
    }
    let api: Api<PersistentVolumeClaim> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let claims = api.list(&params).await.map_err(|e| {
        let scope = namespace.map_or("every namespace".to_string(), |ns| {
            format!("namespace {ns}")
        });
        let selector = label_selector
            .map(|s| format!(" (-l {s})"))
            .unwrap_or_default();
        DriverError::kube(format!("list claims in {scope}{selector}"), e)
    })?;
    let mut by_namespace: BTreeMap<String, Vec<PersistentVolumeClaim>> = BTreeMap::new();
    if let Some(ns) = namespace {
        by_namespace.entry(ns.to_string()).or_default();
    }
    for claim in claims.items {
        let ns = claim.metadata.namespace.clone().unwrap_or_default();
        by_namespace.entry(ns).or_default().push(claim);
    }
    let mut volumes: BTreeMap<String, PersistentVolume> = BTreeMap::new();
    if by_namespace.values().any(|claims| !claims.is_empty()) {
        let all = Api::<PersistentVolume>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| DriverError::kube("list persistent volumes", e))?;
        volumes = (all.items.into_iter())
            .filter_map(|v| Some((v.metadata.name.clone()?, v)))
            .collect();
    }
    // Each namespace gets the volumes its claims are bound to.
    let groups: Vec<_> = by_namespace
        .into_iter()
        .map(|(ns, claims)| {
            let bound = (claims.iter())
                .filter_map(|c| c.spec.as_ref()?.volume_name.as_deref())
                .filter_map(|name| volumes.remove(name))
                .collect();
            (ns, claims, bound)
        })
        .collect();
    futures::stream::iter(groups)
        .map(|(namespace, claims, volumes)| async move {
            let workloads = workload::gather(client, &namespace).await?;
            Ok::<_, DriverError>(Found {
                namespace,
                claims,
                volumes,
                workloads,
            })
        })
        .buffered(NAMESPACES_AT_ONCE)
        .try_collect()
        .await
}
