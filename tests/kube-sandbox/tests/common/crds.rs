//! Custom resources for the tests: the CRD fixtures of
//! `tests/fixtures/crds`, installed and established through kube-rs, and
//! ZFSVolumes to create.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::Discovery;
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{json, Value};

pub const GROUP: &str = "zfs.openebs.io";
pub const CRD: &str = "zfsvolumes.zfs.openebs.io";

/// The Status of a request that must fail.
pub fn api_error<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A definition of `tests/fixtures/crds`.
pub fn fixture(file: &str) -> CustomResourceDefinition {
    let path = format!("{}/../fixtures/crds/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("fixture readable");
    serde_saphyr::from_str(&text).expect("fixture is a CustomResourceDefinition")
}

/// Creates a definition and waits until it is established.
pub async fn install(
    client: &kube::Client,
    crd: &CustomResourceDefinition,
) -> CustomResourceDefinition {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().expect("named");
    crds.create(&PostParams::default(), crd)
        .await
        .expect("definition created");
    let established = await_condition(crds, &name, conditions::is_crd_established());
    tokio::time::timeout(Duration::from_secs(30), established)
        .await
        .expect("established within 30 s")
        .expect("watch")
        .expect("definition exists")
}

pub async fn namespace(client: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
}

/// The ZFSVolume fixture installed, namespace `openebs`, and the v1
/// resource as discovery finds it.
pub async fn zfs(client: &kube::Client) -> ApiResource {
    install(client, &fixture("zfsvolume.yaml")).await;
    namespace(client, "openebs").await;
    let discovery = Discovery::new(client.clone())
        .filter(&[GROUP])
        .run()
        .await
        .expect("discovery");
    let gvk = GroupVersionKind::gvk(GROUP, "v1", "ZFSVolume");
    discovery.resolve_gvk(&gvk).expect("ZFSVolume discovered").0
}

pub fn volume(name: &str, node: &str, extra: Value) -> DynamicObject {
    let mut obj = json!({
        "apiVersion": "zfs.openebs.io/v1", "kind": "ZFSVolume",
        "metadata": {"name": name},
        "spec": {"ownerNodeID": node, "poolName": "tank", "capacity": "1073741824",
                 "volumeType": "DATASET", "fsType": "zfs"},
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        obj[k] = v.clone();
    }
    serde_json::from_value(obj).expect("ZFSVolume")
}

pub fn names(list: &kube::core::ObjectList<DynamicObject>) -> Vec<String> {
    list.items
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect()
}

/// A raw request; its status code and body (a Status's message on error).
pub async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, String) {
    let mut request = axum::http::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    match client
        .request_text(request.body(body).expect("request"))
        .await
    {
        Ok(text) => (200, text),
        Err(kube::Error::Api(status)) => (status.code, status.message),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}
