//! The claim, the Secrets, the Service, and what --dry-run prints.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::names::MOVER_PORT;

#[test]
fn the_service_reaches_this_operations_receiver_only() {
    let plan = plan();
    let svc = service(&plan);
    assert_eq!(svc.metadata.name.as_deref(), Some("volmig-data-bcdfg"));
    assert_eq!(svc.metadata.namespace.as_deref(), Some("archive"));
    let spec = svc.spec.as_ref().expect("service spec");
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    let port = &spec.ports.as_ref().expect("ports")[0];
    assert_eq!(port.port, MOVER_PORT);
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(
        port.target_port,
        Some(IntOrString::String("mover".to_string()))
    );

    let selector = spec.selector.as_ref().expect("selector");
    let receiver = receiver_pod(&plan, 4);
    let sender = sender_pod(&plan, 4, &plan.placement.sender, "x:7000");
    let mut other = plan.clone();
    other.operation = "data-zzzzz".to_string();
    assert!(selects(selector, &labels(&receiver.metadata)));
    assert!(!selects(selector, &labels(&sender.metadata)));
    assert!(!selects(
        selector,
        &labels(&receiver_pod(&other, 1).metadata)
    ));
    // The receiver's named port is the one the Service targets.
    let ports = mover(&receiver).ports.as_ref().expect("ports");
    assert!(ports.iter().any(|p| p.name.as_deref() == Some("mover")));
}

#[test]
fn the_destination_claim_is_what_the_plan_says() {
    let claim = destination_claim(&plan());
    assert_eq!(claim.metadata.namespace.as_deref(), Some("archive"));
    assert_eq!(claim.metadata.name.as_deref(), Some("data-new"));
    assert_eq!(labels(&claim.metadata)[names::SOURCE_KEY], "app.data");
    let annotations = claim.metadata.annotations.as_ref().expect("annotations");
    assert_eq!(annotations[names::OPERATION_KEY], OP);
    assert_eq!(annotations[SOURCE_ANNOTATION], "app.data");
    let spec = claim.spec.as_ref().expect("claim spec");
    assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
    assert_eq!(spec.access_modes, Some(strings(&["ReadWriteOnce"])));
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    let requests = spec.resources.as_ref().and_then(|r| r.requests.as_ref());
    assert_eq!(requests.map(|r| r["storage"].0.as_str()), Some("10Gi"));

    // The cluster's default class: no class named at all.
    let mut default_class = plan();
    default_class.destination.storage_class = None;
    let spec = destination_claim(&default_class).spec.expect("claim spec");
    assert!(spec.storage_class_name.is_none());
}

#[test]
fn a_source_too_long_for_a_label_is_only_annotated() {
    let mut plan = plan();
    plan.spec.source.name = "a".repeat(70);
    let claim = destination_claim(&plan);
    assert!(!labels(&claim.metadata).contains_key(names::SOURCE_KEY));
    let annotations = claim.metadata.annotations.as_ref().expect("annotations");
    assert_eq!(
        annotations[SOURCE_ANNOTATION],
        format!("app.{}", "a".repeat(70))
    );
}

#[test]
fn label_values_are_checked_as_kubernetes_does() {
    assert!(is_label_value(""));
    assert!(is_label_value("app.data-1_x"));
    assert!(is_label_value(&"a".repeat(63)));
    assert!(!is_label_value(&"a".repeat(64)));
    assert!(!is_label_value("-data"));
    assert!(!is_label_value("data."));
    assert!(!is_label_value("a/b"));
}

#[test]
fn the_key_secret_holds_the_material_and_the_redacted_one_none() {
    let plan = plan();
    let files: [(&str, &[u8]); 2] = [("ca.crt", b"CERT"), ("receiver.key", b"KEY")];
    let secret = keys_secret(&plan, "app", &files);
    assert_eq!(
        secret.metadata.name.as_deref(),
        Some("volmig-data-bcdfg-keys")
    );
    assert_eq!(secret.metadata.namespace.as_deref(), Some("app"));
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    let data = secret.data.as_ref().expect("data");
    assert_eq!(data["ca.crt"].0, b"CERT");
    assert_eq!(data["receiver.key"].0, b"KEY");

    let redacted = redacted_keys_secret(&plan, "archive");
    assert_eq!(redacted.metadata.namespace.as_deref(), Some("archive"));
    // Placeholders in words (stringData), not base64 to decode by hand.
    assert_eq!(redacted.data, None);
    let data = redacted.string_data.as_ref().expect("stringData");
    let mut names: Vec<&str> = data.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "ca.crt",
            "operation-id",
            "receiver.crt",
            "receiver.key",
            "sender.crt",
            "sender.key"
        ]
    );
    assert!(data.values().all(|v| v == REDACTED));
}

fn kinds(objects: &[serde_json::Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{} {} {}/{}",
                o["apiVersion"].as_str().unwrap_or("-"),
                o["kind"].as_str().unwrap_or("-"),
                o["metadata"]["namespace"].as_str().unwrap_or("-"),
                o["metadata"]["name"].as_str().unwrap_or("-"),
            )
        })
        .collect()
}

#[test]
fn dry_run_lists_the_objects_in_creation_order() {
    let plan = plan();
    let objects = dry_run_objects(&plan, "<receiver address>").expect("objects");
    assert_eq!(
        kinds(&objects),
        strings(&[
            "v1 PersistentVolumeClaim archive/data-new",
            "v1 Secret archive/volmig-data-bcdfg-keys",
            "v1 Secret app/volmig-data-bcdfg-keys",
            "v1 Service archive/volmig-data-bcdfg",
            "v1 Pod archive/volmig-data-bcdfg-receiver-1",
            "v1 Pod app/volmig-data-bcdfg-sender-1",
        ])
    );
    assert_eq!(
        objects[5]["spec"]["containers"][0]["args"][2],
        "<receiver address>"
    );
    for printed in &objects[1..3] {
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(printed.clone()).expect("a secret");
        let data = secret.string_data.expect("stringData");
        assert_eq!(data.len(), 6);
        assert!(data.values().all(|v| v == REDACTED), "no key material");
        assert_eq!(
            printed["stringData"]["ca.crt"], REDACTED,
            "readable as printed"
        );
    }
}

#[test]
fn dry_run_of_a_reuse_in_one_namespace_creates_no_claim_and_one_secret() {
    let mut plan = plan();
    plan.destination.action = ClaimAction::Reuse;
    plan.destination.namespace = "app".to_string();
    let objects = dry_run_objects(&plan, "x:7000").expect("objects");
    assert_eq!(
        kinds(&objects),
        strings(&[
            "v1 Secret app/volmig-data-bcdfg-keys",
            "v1 Service app/volmig-data-bcdfg",
            "v1 Pod app/volmig-data-bcdfg-receiver-1",
            "v1 Pod app/volmig-data-bcdfg-sender-1",
        ])
    );
}
