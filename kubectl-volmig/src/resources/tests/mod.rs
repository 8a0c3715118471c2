//! The builders, on a plan made by hand: `app/data` to `archive/data-new`.

mod objects;
mod pods;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Volume};

use super::*;
use crate::plan::{DestinationClaim, NodePlacement, Placement, SourceVolume};
use crate::spec::{ClaimRef, MigrationSpec, TransferOptions};

const OP: &str = "data-bcdfg";

fn placement(node: Option<&str>, hostname: Option<&str>, reason: &str) -> NodePlacement {
    NodePlacement {
        node: node.map(str::to_string),
        hostname: hostname.map(str::to_string),
        tolerations: vec![],
        reason: reason.to_string(),
        app_pod: None,
        avoid: vec![],
    }
}

/// `app/data` (RWO, 10Gi) to `archive/data-new` on class `fast`.
fn plan() -> Plan {
    Plan {
        security: Default::default(),
        source_method: Default::default(),
        warnings: Vec::new(),
        operation: OP.to_string(),
        spec: {
            let mut spec = MigrationSpec::new(
                ClaimRef::new("app", "data"),
                ClaimRef::new("archive", "data-new"),
            );
            spec.destination.storage_class = Some("fast".to_string());
            spec.transfer.verify = false;
            spec.mover.image = "registry.example/mover:1.2.3".to_string();
            spec
        },
        source: SourceVolume {
            volume: "pv-1".to_string(),
            storage_class: Some("slow".to_string()),
            capacity: "10Gi".to_string(),
            capacity_bytes: 10 << 30,
            access_modes: vec!["ReadWriteOnce".to_string()],
            volume_mode: Default::default(),
            used_by: vec!["web-0".to_string()],
        },
        destination: DestinationClaim {
            namespace: "archive".to_string(),
            name: "data-new".to_string(),
            storage_class: Some("fast".to_string()),
            size: "10Gi".to_string(),
            size_bytes: 10 << 30,
            access_modes: vec!["ReadWriteOnce".to_string()],
            volume_mode: Default::default(),
            action: ClaimAction::Create,
        },
        placement: Placement {
            sender: placement(
                Some("node-a"),
                Some("host-a"),
                "the source is mounted by web-0 on node-a",
            ),
            receiver: placement(None, None, "the scheduler chooses"),
        },
    }
}

fn spec(pod: &Pod) -> &PodSpec {
    pod.spec.as_ref().expect("pod spec")
}

fn mover(pod: &Pod) -> &Container {
    &spec(pod).containers[0]
}

fn volume<'a>(pod: &'a Pod, name: &str) -> &'a Volume {
    spec(pod)
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no volume {name}"))
}

/// Whether the mount of volume `name` is read-only, and where it is.
fn mount(pod: &Pod, name: &str) -> (String, bool) {
    let m = mover(pod)
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no mount {name}"));
    (m.mount_path.clone(), m.read_only == Some(true))
}

fn labels(meta: &ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

fn secret_items(pod: &Pod) -> Vec<String> {
    let secret = volume(pod, "tls").secret.as_ref().expect("secret volume");
    assert_eq!(secret.default_mode, Some(0o400));
    assert_eq!(
        secret.secret_name.as_deref(),
        Some("volmig-data-bcdfg-keys")
    );
    let mut keys: Vec<String> = secret
        .items
        .iter()
        .flatten()
        .map(|i| i.key.clone())
        .collect();
    keys.sort();
    keys
}

fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn args(pod: &Pod) -> Vec<String> {
    mover(pod).args.clone().unwrap_or_default()
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

#[test]
fn every_object_is_labelled_with_its_operation_and_component() {
    let plan = plan();
    let receiver = receiver_pod(&plan, 3);
    let sender = sender_pod(&plan, 3, &plan.placement.sender, "volmig-x:7000");
    let cases = [
        (labels(&destination_claim(&plan).metadata), "destination"),
        (labels(&keys_secret(&plan, "app", &[]).metadata), "keys"),
        (labels(&service(&plan).metadata), "transport"),
        (labels(&receiver.metadata), "receiver"),
        (labels(&sender.metadata), "sender"),
    ];
    for (labels, component) in cases {
        assert_eq!(labels[names::MANAGED_BY_KEY], "kubectl-volmig");
        assert_eq!(labels[names::OPERATION_KEY], OP);
        assert_eq!(labels[names::COMPONENT_KEY], component);
    }
    for pod in [&receiver, &sender] {
        assert_eq!(labels(&pod.metadata)[names::ATTEMPT_KEY], "3");
    }
    assert_eq!(
        receiver.metadata.name.as_deref(),
        Some("volmig-data-bcdfg-receiver-3")
    );
    assert_eq!(
        sender.metadata.name.as_deref(),
        Some("volmig-data-bcdfg-sender-3")
    );
}
