//! Reading typed objects in assertions: phases, the first container's
//! status, where a claim's data lives; the claim, volume and scale calls
//! several tests make.

use std::path::{Path, PathBuf};

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

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

pub async fn claim(claims: &Api<PersistentVolumeClaim>, name: &str) -> PersistentVolumeClaim {
    claims.get(name).await.expect("claim")
}

pub async fn volume(volumes: &Api<PersistentVolume>, name: &str) -> PersistentVolume {
    volumes.get(name).await.expect("volume")
}

/// The names of all volumes, sorted.
pub async fn volume_names(volumes: &Api<PersistentVolume>) -> Vec<String> {
    let list = volumes.list(&ListParams::default()).await;
    let mut names: Vec<String> = (list.expect("volumes").items.into_iter())
        .filter_map(|v| v.metadata.name)
        .collect();
    names.sort();
    names
}

pub async fn await_volume_phase(volumes: &Api<PersistentVolume>, name: &str, want: &'static str) {
    await_object(volumes, name, want, move |v| pv_phase(v) == Some(want)).await;
}

/// Merge-patches the volume.
pub async fn patch_volume(volumes: &Api<PersistentVolume>, name: &str, patch: Value) {
    volumes
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("patch volume");
}

pub async fn delete_claim(claims: &Api<PersistentVolumeClaim>, name: &str) {
    claims
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete claim");
}

/// Scales `name` through its scale subresource, as the cutover quiesces
/// and restores owners: the Scale the API returned.
pub async fn scale<K>(api: &Api<K>, name: &str, replicas: i32) -> Scale
where
    K: Clone + DeserializeOwned,
{
    let patch = json!({"spec": {"replicas": replicas}});
    api.patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("scale")
}

/// The file's text, once it has `count` lines.
pub async fn await_lines(path: &Path, count: usize) -> String {
    for _ in 0..600 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= count {
            return text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{} never had {count} lines", path.display());
}
