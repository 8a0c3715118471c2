//! `resume OP --to-node NODE | --to-storage-class CLASS` (issue 20): the
//! destination given up for a fresh one where the user says, at once,
//! without waiting for the old one's node. Written in the record; the
//! driver's next attempt makes the new claim and copies in full.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Api;

use super::CliError;
use crate::cluster::Cluster;
use crate::plan::{fit, ClaimAction, NodePlacement};
use crate::record::cutover::Step;
use crate::record::store::{RecordStore, StoreError};
use crate::record::VolumeMigration;

/// Records a new destination for `vm`: on `node`, of `class`.
pub async fn new_destination(
    cluster: &Cluster,
    store: &RecordStore,
    vm: &VolumeMigration,
    node: Option<&str>,
    class: Option<&str>,
) -> Result<(), CliError> {
    let op = &vm.metadata.name;
    let reused = vm.status.destination.as_ref().map(|d| d.action) == Some(ClaimAction::Reuse);
    if reused {
        return Err(CliError::Usage(format!(
            "operation {op} copies into your claim (--reuse): volmig makes no other in its place"
        )));
    }
    let step = vm.status.cutover.as_ref().map(|c| c.step);
    if step.is_some_and(|s| s != Step::PreCopy) {
        return Err(CliError::Usage(format!(
            "operation {op} is a cutover past its pre-copy: its destination is the app's now"
        )));
    }
    let mut how = Vec::new();
    let mut placement: Option<NodePlacement> = None;
    if let Some(name) = node {
        let nodes: Api<Node> = Api::all(cluster.client.clone());
        let found = nodes
            .get_opt(name)
            .await
            .map_err(|e| CliError::kube(format!("get node {name}"), e))?
            .ok_or_else(|| CliError::Usage(format!("node {name:?} does not exist")))?;
        if fit::cordoned(&found) {
            return Err(CliError::Usage(format!("node {name:?} is cordoned")));
        }
        if !fit::ready(&found) {
            return Err(CliError::Usage(format!("node {name:?} is not Ready")));
        }
        let hostname = found
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::plan::placement::HOSTNAME_LABEL).cloned());
        placement = Some(NodePlacement {
            node: Some(name.to_string()),
            hostname,
            tolerations: Vec::new(),
            reason: format!("--to-node {name}, asked by resume"),
            app_pod: None,
            avoid: Vec::new(),
        });
        how.push(format!("--to-node {name}"));
    }
    if let Some(class) = class {
        let classes: Api<StorageClass> = Api::all(cluster.client.clone());
        classes
            .get_opt(class)
            .await
            .map_err(|e| CliError::kube(format!("get storage class {class}"), e))?
            .ok_or_else(|| CliError::Usage(format!("storage class {class:?} does not exist")))?;
        how.push(format!("--to-storage-class {class}"));
    }
    let why = format!("asked by resume: {}", how.join(" "));
    store
        .update(op, |vm| {
            if vm.status.phase == crate::record::Phase::Succeeded {
                return Err(StoreError::Changed(format!(
                    "operation {op} has succeeded: its destination is complete"
                )));
            }
            if let Some(p) = &placement {
                vm.spec.destination.node = p.node.clone();
                if let Some(recorded) = vm.status.placement.as_mut() {
                    recorded.receiver = p.clone();
                }
            }
            if let (Some(class), Some(d)) = (class, vm.status.destination.as_mut()) {
                d.storage_class = Some(class.to_string());
            }
            vm.status.destination_change = Some(why.clone());
            Ok(())
        })
        .await
        .map_err(super::declined_as_usage)?;
    say!("operation {op}: the next attempt copies in full into a fresh destination ({why})");
    Ok(())
}
