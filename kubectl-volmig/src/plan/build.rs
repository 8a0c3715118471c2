//! [`plan`]: the checks, then the destination claim's shape.
//!
//! The checks run in the order a user fixes things: the command's own
//! values first (they need no cluster: [`super::values`]), then the source (without it there
//! is nothing to migrate), then the destination. The first failure is the
//! [`Refusal`]; a migration that passes every check gets a [`Plan`] with
//! every choice the spec left open made and explained.

mod destination;

use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

use super::values::{check_values, requested_size};
use super::{
    fit, placement, quantity, security, source, Inputs, MoverSecurity, Placement, Plan, Refusal,
    SourceVolume, VolumeMode,
};
use crate::spec::MigrationSpec;

/// Plans `spec` as operation `operation` against what the cluster holds.
///
/// Choices the spec leaves open: the destination's storage class is
/// `--to-storage-class`, else the cluster's default class, else the
/// source's; its size is `--to-size`, else the source volume's capacity;
/// its access modes are the source claim's. An existing destination claim
/// is reused (as it is) when `--reuse` says so or an earlier volmig run
/// from this source made it.
pub fn plan(spec: &MigrationSpec, operation: &str, inputs: &Inputs) -> Result<Plan, Refusal> {
    check_values(spec)?;
    let requested_size = requested_size(spec)?;
    let (src, dst) = (&spec.source, &spec.destination);
    // In another cluster, the claim may keep its name and namespace.
    if src.namespace == dst.namespace && src.name == dst.name && inputs.remote.is_none() {
        return Err(Refusal::SameClaim {
            namespace: src.namespace.clone(),
            name: src.name.clone(),
        });
    }

    let claim = bound_source(spec, inputs)?;
    let volume = source_volume(spec, claim, inputs)?;
    let source = describe_source(spec, claim, volume, inputs)?;
    let reading = source::Source {
        claim,
        volume,
        storage_class: source.storage_class.as_deref(),
        pods: &inputs.pods,
    };
    let source_method =
        source::source_method(spec, &reading, &inputs.snapshots, &inputs.storage_classes)?;

    if inputs.destination_namespace.is_none() {
        return Err(Refusal::DestinationNamespaceNotFound {
            namespace: dst.namespace.clone(),
        });
    }
    if let Some(node) = &dst.node {
        let found = inputs
            .destination_nodes()
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(node.as_str()));
        if let Some(found) = found {
            check_target_node(spec, found, inputs)?;
        } else {
            let mut available: Vec<String> = inputs
                .destination_nodes()
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            available.sort();
            return Err(Refusal::NodeNotFound {
                name: node.clone(),
                available,
            });
        }
    }

    let (destination, destination_volume) = match &inputs.destination_claim {
        Some(existing) => (
            destination::reuse(spec, existing, &source, inputs)?,
            inputs.destination_volume.as_ref(),
        ),
        None if dst.reuse => {
            return Err(Refusal::ReuseMissing {
                namespace: dst.namespace.clone(),
                name: dst.name.clone(),
            })
        }
        None => (
            destination::create(spec, requested_size, claim, &source, inputs)?,
            None,
        ),
    };
    let destination_claim = inputs.destination_claim.as_ref();
    let security = movers_security(spec, inputs)?;
    let warnings = source_node_down(volume, &inputs.nodes)
        .into_iter()
        .filter(|_| !source_method.method.reads_copy())
        .collect();

    Ok(Plan {
        operation: operation.to_string(),
        spec: spec.clone(),
        placement: Placement {
            sender: match source_method.method.reads_copy() {
                true => placement::copy_reader(),
                false => placement::sender(claim, Some(volume), &inputs.pods, &inputs.nodes),
            },
            receiver: placement::receiver(
                dst,
                destination_claim,
                destination_volume,
                inputs.destination_nodes(),
            ),
        },
        source,
        destination,
        security,
        source_method,
        warnings,
    })
}

/// `--to-node` must take new pods, and, with `--cutover`, the app's pods:
/// after the swap they follow the new volume there.
fn check_target_node(spec: &MigrationSpec, node: &Node, inputs: &Inputs) -> Result<(), Refusal> {
    let name = node.metadata.name.clone().unwrap_or_default();
    if fit::cordoned(node) {
        return Err(Refusal::NodeCordoned { name });
    }
    if spec.cutover.is_none() {
        return Ok(());
    }
    let source = &spec.source;
    for pod in placement::mounting_pods(&source.namespace, &source.name, &inputs.pods) {
        if let Some(misfit) = fit::misfit(pod, node) {
            return Err(Refusal::NodeMisfit {
                node: name,
                pod: pod.metadata.name.clone().unwrap_or_default(),
                why: misfit.to_string(),
            });
        }
    }
    Ok(())
}

/// A warning when the source volume is pinned to nodes none of which is
/// Ready: the sender must run there, and cannot until one is.
fn source_node_down(volume: &PersistentVolume, nodes: &[Node]) -> Option<String> {
    let pinned = placement::required_affinity(volume)?.nodes(nodes);
    let known: Vec<&Node> = nodes
        .iter()
        .filter(|n| pinned.iter().any(|p| n.metadata.name.as_ref() == Some(p)))
        .collect();
    if known.is_empty() || known.iter().any(|n| fit::ready(n)) {
        return None;
    }
    Some(format!(
        "the source volume is pinned to {} by node affinity, and it is not Ready: the sender \
         cannot run until it is (the attempt fails after --start-timeout and is retried)",
        pinned.join(", ")
    ))
}

/// The movers' profile and identity (their namespaces were found by now).
fn movers_security(spec: &MigrationSpec, inputs: &Inputs) -> Result<MoverSecurity, Refusal> {
    let fallback = Namespace::default();
    let source_ns = inputs.source_namespace.as_ref().unwrap_or(&fallback);
    let destination_ns = inputs.destination_namespace.as_ref().unwrap_or(&fallback);
    security::plan(
        spec.mover.security,
        &spec.source.name,
        source_ns,
        destination_ns,
        &inputs.pods,
        inputs.openshift(),
        spec.mover.run_as,
    )
}

/// The source claim, which must exist and be Bound.
fn bound_source<'a>(
    spec: &MigrationSpec,
    inputs: &'a Inputs,
) -> Result<&'a PersistentVolumeClaim, Refusal> {
    let src = &spec.source;
    let claim = inputs
        .source_claim
        .as_ref()
        .ok_or_else(|| Refusal::SourceNotFound {
            namespace: src.namespace.clone(),
            name: src.name.clone(),
        })?;
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    // A claim the API has not given a status yet is as good as Pending.
    let phase = phase.unwrap_or("Pending");
    if phase != "Bound" {
        return Err(Refusal::SourceNotBound {
            namespace: src.namespace.clone(),
            name: src.name.clone(),
            phase: phase.to_string(),
        });
    }
    Ok(claim)
}

/// The volume the source claim is bound to, which must exist.
fn source_volume<'a>(
    spec: &MigrationSpec,
    claim: &PersistentVolumeClaim,
    inputs: &'a Inputs,
) -> Result<&'a PersistentVolume, Refusal> {
    let bound_to = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    inputs
        .source_volume
        .as_ref()
        .filter(|v| bound_to.is_empty() || v.metadata.name.as_deref() == Some(bound_to.as_str()))
        .ok_or_else(|| Refusal::SourceVolumeMissing {
            namespace: spec.source.namespace.clone(),
            name: spec.source.name.clone(),
            volume: bound_to,
        })
}

/// The source as found: its volume's name, class, capacity, access modes,
/// and the pods that still hold it.
fn describe_source(
    spec: &MigrationSpec,
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
    inputs: &Inputs,
) -> Result<SourceVolume, Refusal> {
    let volume_name = volume.metadata.name.clone().unwrap_or_default();
    let pv_spec = volume.spec.as_ref();
    let claim_spec = claim.spec.as_ref();
    let requests = claim_spec.and_then(|s| s.resources.as_ref()?.requests.as_ref());
    let (capacity, capacity_bytes) = [
        pv_spec.and_then(|s| s.capacity.as_ref()),
        claim.status.as_ref().and_then(|s| s.capacity.as_ref()),
        requests,
    ]
    .into_iter()
    .find_map(storage)
    .ok_or_else(|| Refusal::SourceCapacityUnknown {
        volume: volume_name.clone(),
    })?;
    let storage_class = non_empty(pv_spec.and_then(|s| s.storage_class_name.as_deref()))
        .or_else(|| non_empty(claim_spec.and_then(|s| s.storage_class_name.as_deref())));
    let access_modes = pv_spec
        .and_then(|s| s.access_modes.clone())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| placement::access_modes(claim, None));
    let volume_mode = VolumeMode::of(
        pv_spec
            .and_then(|s| s.volume_mode.as_deref())
            .or_else(|| claim_spec.and_then(|s| s.volume_mode.as_deref())),
    );
    let mut used_by: Vec<String> =
        placement::mounting_pods(&spec.source.namespace, &spec.source.name, &inputs.pods)
            .into_iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
    used_by.sort();
    Ok(SourceVolume {
        volume: volume_name,
        storage_class,
        capacity,
        capacity_bytes,
        access_modes,
        volume_mode,
        used_by,
    })
}

/// The `storage` entry of a capacity or request map, as `(quantity, bytes)`,
/// if it is a valid quantity.
fn storage(resources: Option<&BTreeMap<String, Quantity>>) -> Option<(String, u64)> {
    let q = resources?.get("storage")?;
    let bytes = quantity::parse(&q.0).ok()?;
    Some((q.0.clone(), bytes))
}

/// `""` is Kubernetes' way to say "no class".
fn non_empty(class: Option<&str>) -> Option<String> {
    class.filter(|c| !c.is_empty()).map(str::to_string)
}
