//! The objects of a fresh cluster: namespaces with their default
//! ServiceAccounts, the `kubernetes` Service, the nodes, the storage
//! classes (and the snapshot class).

use std::net::{IpAddr, Ipv4Addr};

use serde_json::{json, Value};

use super::{
    node_name, SandboxConfig, CLASS_CSI, CLASS_LOCAL, CLASS_STANDARD, CLASS_WAIT, SNAPSHOT_CLASS,
};
use crate::controllers::{self, volumes};
use crate::kubelet;
use crate::registry;
use crate::store::Store;

/// The objects of a fresh cluster; returns the `kubernetes` Service's
/// ClusterIP.
pub(super) fn bootstrap(
    store: &Store,
    config: &SandboxConfig,
    block: u8,
    api_port: u16,
) -> Result<IpAddr, crate::ApiError> {
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        store.create(
            registry::get("namespaces"),
            "",
            json!({"metadata": {"name": ns}}),
        )?;
        // A cluster handed to its user already has these (the
        // serviceaccounts controller's first pass): without one, the
        // ServiceAccount admission plugin refuses every pod of the
        // namespace. Namespaces made later get theirs from the controller.
        store.create(
            registry::get("serviceaccounts"),
            ns,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}),
        )?;
    }
    let service_ip = master_service(store, api_port)?;
    for i in 0..config.nodes {
        let name = node_name(i);
        let taints: Vec<Value> = config
            .taints
            .iter()
            .filter(|t| t.node == name)
            .map(|t| json!({"key": t.key, "value": t.value, "effect": t.effect}))
            .collect();
        store.create(
            registry::get("nodes"),
            "",
            node_object(&name, i, kubelet::node_ip(block, i), taints),
        )?;
    }
    let class = |name: &str, provisioner: &str, mode: &str, default: bool| {
        let mut c = json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": provisioner,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": mode,
            "allowVolumeExpansion": true,
        });
        if default {
            c["metadata"]["annotations"] =
                json!({"storageclass.kubernetes.io/is-default-class": "true"});
        }
        c
    };
    for c in [
        class(CLASS_STANDARD, volumes::SHARED, "Immediate", true),
        class(CLASS_WAIT, volumes::SHARED, "WaitForFirstConsumer", false),
        class(CLASS_LOCAL, volumes::LOCAL, "WaitForFirstConsumer", false),
        class(CLASS_CSI, volumes::CSI, "Immediate", false),
    ] {
        store.create(registry::get("storageclasses"), "", c)?;
    }
    if config.snapshots {
        store.create(
            registry::get("volumesnapshotclasses"),
            "",
            json!({
                "apiVersion": "snapshot.storage.k8s.io/v1",
                "kind": "VolumeSnapshotClass",
                "metadata": {"name": SNAPSHOT_CLASS, "annotations": {
                    controllers::snapshots::DEFAULT_CLASS_ANNOTATION: "true",
                }},
                "driver": volumes::CSI,
                "deletionPolicy": "Delete",
            }),
        )?;
    }
    Ok(service_ip)
}

/// The `kubernetes` Service in `default` and its Endpoints, the API
/// server's address, as kube-apiserver's controlplane controllers
/// reconcile them (pkg/controlplane/controller/kubernetesservice and the
/// master endpoint reconciler): port 443 named `https`, no selector. It is
/// the first Service, so it gets the block's first Service address, as a
/// real one gets the first address of the service CIDR.
fn master_service(store: &Store, api_port: u16) -> Result<IpAddr, crate::ApiError> {
    let labels = json!({"component": "apiserver", "provider": "kubernetes"});
    let service = store.create(
        registry::get("services"),
        "default",
        json!({
            "metadata": {"name": "kubernetes", "labels": labels},
            "spec": {"type": "ClusterIP", "sessionAffinity": "None", "ports": [
                {"name": "https", "port": 443, "protocol": "TCP", "targetPort": api_port},
            ]},
        }),
    )?;
    store.create(
        registry::get("endpoints"),
        "default",
        json!({
            "metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{
                "addresses": [{"ip": "127.0.0.1"}],
                "ports": [{"name": "https", "port": api_port, "protocol": "TCP"}],
            }],
        }),
    )?;
    service["spec"]["clusterIP"]
        .as_str()
        .and_then(|ip| ip.parse().ok())
        .ok_or_else(|| crate::ApiError::Internal("the kubernetes Service got no ClusterIP".into()))
}

fn node_object(name: &str, index: usize, ip: Ipv4Addr, taints: Vec<Value>) -> Value {
    let ip = ip.to_string();
    let now = crate::time::now();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/zone": format!("zone-{}", index % 2 + 1),
        }},
        "spec": {"taints": taints},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "nodeInfo": {
                "kubeletVersion": format!("v{}.{}.0", crate::api::MAJOR, crate::api::MINOR),
                "kubeProxyVersion": "",
                "osImage": "kube-sandbox",
                "kernelVersion": "",
                "containerRuntimeVersion": "sandbox://0.1.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "machineID": "", "systemUUID": "", "bootID": "",
            },
        },
    })
}
