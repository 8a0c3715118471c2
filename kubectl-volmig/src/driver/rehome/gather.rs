//! What a rehome is planned from, read from the cluster: the volumes
//! chosen, their claims, the nodes, the workloads that mount the claims,
//! and each volume's driver object where its CRD is served.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, ListParams};
use kube::Client;

use super::io::driver_api;
use crate::driver::cutover::rebind_io::get_opt;
use crate::driver::cutover::workload;
use crate::driver::DriverError;
use crate::plan::quiesce::Workloads;
use crate::plan::rehome::check::{self, Candidate};
use crate::plan::rehome::drivers::{self, DriverObject};

/// Which volumes a rehome is of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chosen {
    /// A claim of `namespace`.
    Claim { namespace: String, name: String },
    /// `pv/NAME`.
    Volume(String),
    /// `--all-from-node`.
    FromNode(String),
}

/// Everything a rehome's plan reads.
pub struct Inputs {
    pub candidates: Vec<Candidate>,
    pub nodes: Vec<Node>,
    /// The workloads of every namespace a claim is in.
    pub workloads: BTreeMap<String, Workloads>,
}

/// Reads what the rehome of `chosen` is planned from.
pub async fn inputs(client: &Client, chosen: &Chosen) -> Result<Inputs, DriverError> {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    // `--all-from-node` leaves out, with a word, what it cannot rehome.
    let mut skippable = false;
    let nodes: Vec<Node> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| DriverError::kube("list nodes", e))?
        .items;
    let chosen_volumes = match chosen {
        Chosen::Claim { namespace, name } => {
            let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
            let claim = get_opt(&claims, name, "claim").await?.ok_or_else(|| {
                DriverError::Refused(format!("claim {namespace}/{name} not found"))
            })?;
            let bound = claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .filter(|v| !v.is_empty());
            let volume = bound.ok_or_else(|| {
                DriverError::Refused(format!(
                    "claim {namespace}/{name} is not bound to a volume: there is nothing to rehome"
                ))
            })?;
            vec![get_opt(&volumes, &volume, "volume").await?.ok_or_else(|| {
                DriverError::Refused(format!(
                    "persistentvolume {volume} of claim {namespace}/{name} not found"
                ))
            })?]
        }
        Chosen::Volume(name) => vec![get_opt(&volumes, name, "volume")
            .await?
            .ok_or_else(|| DriverError::Refused(format!("persistentvolume {name} not found")))?],
        Chosen::FromNode(node) => {
            let all = volumes
                .list(&ListParams::default())
                .await
                .map_err(|e| DriverError::kube("list persistentvolumes", e))?
                .items;
            let found = nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(node.as_str()));
            let mut pinned = check::pinned_to(&all, node, found);
            pinned.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            skippable = true;
            pinned
        }
    };
    let mut candidates = Vec::new();
    let mut workloads = BTreeMap::new();
    for volume in chosen_volumes {
        let claim = claim_of(client, &volume).await?;
        if let Some(c) = &claim {
            let ns = c.metadata.namespace.clone().unwrap_or_default();
            if !workloads.contains_key(&ns) {
                workloads.insert(ns.clone(), workload::gather(client, &ns).await?);
            }
        }
        let driver_object = driver_object(client, &volume).await?;
        candidates.push(Candidate {
            volume,
            claim,
            driver_object,
            skippable,
        });
    }
    Ok(Inputs {
        candidates,
        nodes,
        workloads,
    })
}

/// The claim `volume`'s `claimRef` names, if it exists and is that claim
/// (same uid, when the reference has one).
async fn claim_of(
    client: &Client,
    volume: &PersistentVolume,
) -> Result<Option<PersistentVolumeClaim>, DriverError> {
    let Some(r) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Ok(None);
    };
    let (Some(ns), Some(name)) = (&r.namespace, &r.name) else {
        return Ok(None);
    };
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let claim = get_opt(&claims, name, "claim").await?;
    Ok(claim.filter(|c| r.uid.is_none() || c.metadata.uid == r.uid))
}

/// `volume`'s driver object: `None` when its driver keeps none or its CRD
/// is not served here; `Some(None)` when it is served but the object is
/// missing.
async fn driver_object(
    client: &Client,
    volume: &PersistentVolume,
) -> Result<Option<Option<serde_json::Value>>, DriverError> {
    let driver = volume
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .map(|c| c.driver.as_str());
    let Some(kind) = driver.and_then(drivers::kind_of) else {
        return Ok(None);
    };
    let name = volume.metadata.name.clone().unwrap_or_default();
    // Listed in every namespace by name: the driver's namespace is the
    // installer's choice (openebs, kube-system, ...).
    let probe = DriverObject {
        api_version: kind.api_version(),
        kind: kind.kind.to_string(),
        plural: kind.plural.to_string(),
        namespace: None,
        name: name.clone(),
        fields: Vec::new(),
    };
    let api = driver_api(client, &probe);
    let params = ListParams::default().fields(&format!("metadata.name={name}"));
    match api.list(&params).await {
        Ok(list) if list.items.len() > 1 => {
            let at: Vec<String> = list
                .items
                .iter()
                .map(|o| o.metadata.namespace.clone().unwrap_or_default())
                .collect();
            Err(DriverError::Refused(format!(
                "{} objects named {name} exist, in namespaces {}: which one the driver uses is \
                 not known; remove the stale one",
                kind.kind,
                at.join(", ")
            )))
        }
        Ok(list) => Ok(Some(
            list.items
                .into_iter()
                .next()
                .and_then(|o| serde_json::to_value(o).ok()),
        )),
        // The CRD is not installed: nothing of this driver to rewrite.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(DriverError::kube(
            format!("list {} named {name}", kind.plural),
            e,
        )),
    }
}
