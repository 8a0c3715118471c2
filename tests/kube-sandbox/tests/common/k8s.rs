//! Reading typed objects in assertions: phases, the first container's
//! status, where a claim's data lives.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Api;

use super::await_object;

pub fn pod_phase(p: Option<&Pod>) -> Option<&str> {
    p?.status.as_ref()?.phase.as_deref()
}

pub fn claim_phase(c: Option<&PersistentVolumeClaim>) -> Option<&str> {
    c?.status.as_ref()?.phase.as_deref()
}

pub fn pv_phase(v: Option<&PersistentVolume>) -> Option<&str> {
    v?.status.as_ref()?.phase.as_deref()
}

pub fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

/// The status of the pod's first container.
pub fn container(p: Option<&Pod>) -> Option<&ContainerStatus> {
    p?.status.as_ref()?.container_statuses.as_ref()?.first()
}

pub fn waiting_reason(p: Option<&Pod>) -> Option<&str> {
    container(p)?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .as_deref()
}

/// Phase Running with its first container running.
pub fn is_running(p: Option<&Pod>) -> bool {
    pod_phase(p) == Some("Running")
        && container(p)
            .and_then(|c| c.state.as_ref()?.running.as_ref())
            .is_some()
}

pub fn volume_name(c: &PersistentVolumeClaim) -> Option<String> {
    c.spec
        .as_ref()?
        .volume_name
        .clone()
        .filter(|v| !v.is_empty())
}

pub fn host_path(v: &PersistentVolume) -> PathBuf {
    let source = v.spec.as_ref().and_then(|s| s.host_path.as_ref());
    PathBuf::from(&source.expect("a hostPath volume").path)
}

/// Waits for the claim to be Bound; its volume's name and directory.
pub async fn bound_volume(
    claims: &Api<PersistentVolumeClaim>,
    volumes: &Api<PersistentVolume>,
    name: &str,
) -> (String, PathBuf) {
    await_object(claims, name, "Bound", |c| claim_phase(c) == Some("Bound")).await;
    let claim = claims.get(name).await.expect("claim");
    let pv = volume_name(&claim).expect("bound claims name their volume");
    let dir = host_path(&volumes.get(&pv).await.expect("pv"));
    (pv, dir)
}
