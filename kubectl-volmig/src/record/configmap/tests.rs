use super::*;
use crate::plan::{ClaimAction, DestinationClaim, NodePlacement, Placement, SourceVolume};
use crate::record::Attempt;
use crate::spec::ClaimRef;

fn fixture(yaml: &str) -> VolumeMigration {
    serde_saphyr::from_str(yaml).expect("fixture parses")
}

fn succeeded() -> VolumeMigration {
    fixture(include_str!(
        "../../../tests/fixtures/record/succeeded.yaml"
    ))
}

fn data_size(cm: &ConfigMap) -> usize {
    cm.data
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum()
}

#[test]
fn a_record_survives_its_config_map() {
    let vm = succeeded();
    let cm = to_config_map(&vm).expect("encodes");
    assert_eq!(cm.metadata.name.as_deref(), Some("volmig-data-x7k2p"));
    assert_eq!(cm.metadata.namespace.as_deref(), Some("prod"));
    assert_eq!(cm.metadata.resource_version.as_deref(), Some("1234"));
    let labels = cm.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels[names::OPERATION_KEY], "data-x7k2p");
    assert_eq!(labels[names::COMPONENT_KEY], "record");
    assert_eq!(labels[names::MANAGED_BY_KEY], "kubectl-volmig");
    assert_eq!(labels[names::PHASE_KEY], "Succeeded");
    let data = cm.data.clone().unwrap_or_default();
    assert_eq!(data[FORMAT_KEY], "1");
    assert!(data[STATUS_KEY].contains("\n  \"phase\": \"Succeeded\""));
    assert_eq!(from_config_map(&cm).expect("decodes"), vm);
}

#[test]
fn config_maps_that_are_not_records_are_named_in_the_error() {
    let good = to_config_map(&succeeded()).expect("encodes");
    let mut foreign = good.clone();
    foreign.metadata.labels = None;
    let err = from_config_map(&foreign).unwrap_err().to_string();
    assert!(
        err.contains("prod/volmig-data-x7k2p is not a volmig operation record"),
        "{err}"
    );

    let mut no_status = good.clone();
    no_status.data.get_or_insert_default().remove(STATUS_KEY);
    let err = from_config_map(&no_status).unwrap_err().to_string();
    assert!(
        err.contains("prod/volmig-data-x7k2p") && err.contains("\"status\""),
        "{err}"
    );

    let mut bad_json = good.clone();
    bad_json
        .data
        .get_or_insert_default()
        .insert(SPEC_KEY.into(), "{not json".into());
    let err = from_config_map(&bad_json).unwrap_err();
    assert!(
        matches!(err, RecordError::Decode { key: "spec", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("prod/volmig-data-x7k2p"));

    let mut newer = good;
    newer
        .data
        .get_or_insert_default()
        .insert(FORMAT_KEY.into(), "2".into());
    let err = from_config_map(&newer).unwrap_err().to_string();
    assert!(
        err.contains("format \"2\"") && err.contains("format \"1\""),
        "{err}"
    );
}

#[test]
fn unknown_status_fields_from_newer_writers_are_ignored() {
    let vm = succeeded();
    let mut cm = to_config_map(&vm).expect("encodes");
    let data = cm.data.get_or_insert_default();
    let mut status: serde_json::Value = serde_json::from_str(&data[STATUS_KEY]).expect("json");
    status["liveMigration"] = serde_json::json!({"stage": "PreCopy"});
    status["attempts"][0]["checkpoint"] = serde_json::json!("v2");
    data.insert(STATUS_KEY.into(), status.to_string());
    assert_eq!(from_config_map(&cm).expect("decodes").status, vm.status);
}

#[test]
fn records_written_before_bytes_prior_still_read() {
    let vm = succeeded();
    let mut cm = to_config_map(&vm).expect("encodes");
    let data = cm.data.get_or_insert_default();
    let mut status: serde_json::Value = serde_json::from_str(&data[STATUS_KEY]).expect("json");
    for attempt in status["attempts"].as_array_mut().expect("attempts") {
        let prior = attempt["bytesPrior"].take();
        let fields = attempt.as_object_mut().expect("an attempt object");
        fields.remove("bytesPrior");
        fields.insert("bytesResumed".into(), prior);
    }
    data.insert(STATUS_KEY.into(), status.to_string());
    let read = from_config_map(&cm).expect("decodes");
    let prior: Vec<u64> = read.status.attempts.iter().map(|a| a.bytes_prior).collect();
    assert_eq!(prior, [0, 1_288_490_189, 2_147_483_648]);
    assert_eq!(read.status, vm.status);
}

#[test]
fn a_new_record_is_pending_in_the_destination_namespace() {
    let placement = NodePlacement {
        node: None,
        hostname: None,
        tolerations: Vec::new(),
        reason: "the scheduler chooses".into(),
        app_pod: None,
        avoid: Vec::new(),
    };
    let plan = Plan {
        security: Default::default(),
        source_method: Default::default(),
        warnings: Vec::new(),
        operation: "data-bbbbb".into(),
        spec: MigrationSpec::new(ClaimRef::new("a", "data"), ClaimRef::new("b", "data")),
        source: SourceVolume {
            volume: "pv-1".into(),
            storage_class: None,
            capacity: "1Gi".into(),
            capacity_bytes: 1 << 30,
            access_modes: vec!["ReadWriteOnce".into()],
            volume_mode: Default::default(),
            used_by: Vec::new(),
        },
        destination: DestinationClaim {
            namespace: "b".into(),
            name: "data".into(),
            storage_class: None,
            size: "1Gi".into(),
            size_bytes: 1 << 30,
            access_modes: vec!["ReadWriteOnce".into()],
            volume_mode: Default::default(),
            action: ClaimAction::Create,
        },
        placement: Placement {
            sender: placement.clone(),
            receiver: placement,
        },
    };
    let vm = new_record(&plan);
    assert_eq!(
        (vm.api_version.as_str(), vm.kind.as_str()),
        (API_VERSION, KIND)
    );
    assert_eq!(
        (vm.metadata.name.as_str(), vm.metadata.namespace.as_str()),
        ("data-bbbbb", "b")
    );
    assert_eq!(vm.status.phase, Phase::Pending);
    assert_eq!(vm.status.source, Some(plan.source.clone()));
    assert_eq!(vm.status.destination, Some(plan.destination.clone()));
    assert_eq!(vm.status.placement, Some(plan.placement.clone()));
    assert!(vm.status.attempts.is_empty());
    let cm = to_config_map(&vm).expect("encodes");
    assert_eq!(
        cm.metadata.resource_version, None,
        "a create carries no version"
    );
    assert_eq!(from_config_map(&cm).expect("decodes").spec, plan.spec);
}

fn attempt(number: u32, lines: usize) -> Attempt {
    Attempt {
        number,
        log_tail: (0..lines)
            .map(|i| format!("attempt {number} line {i}: {}", "x".repeat(100)))
            .collect(),
        ..Attempt::default()
    }
}

#[test]
fn oversized_records_lose_the_oldest_log_tails_first() {
    let mut vm = succeeded();
    // 20 attempts with ~120 KiB of log each: 2.4 MiB in all.
    vm.status.attempts = (1..=20).map(|n| attempt(n, 1000)).collect();
    let cm = to_config_map(&vm).expect("fits once trimmed");
    assert!(data_size(&cm) <= MAX_DATA_BYTES, "{}", data_size(&cm));
    let back = from_config_map(&cm).expect("decodes");
    assert_eq!(back.status.attempts.len(), 20);
    let trimmed: Vec<bool> = back
        .status
        .attempts
        .iter()
        .map(|a| a.log_tail == [TRIMMED_LOG])
        .collect();
    // A prefix of the oldest attempts is trimmed, the rest kept whole.
    let cut = trimmed.iter().take_while(|t| **t).count();
    assert!((13..20).contains(&cut), "{trimmed:?}");
    assert!(trimmed[cut..].iter().all(|t| !t));
    assert_eq!(back.status.attempts[cut..], vm.status.attempts[cut..]);
    assert_eq!(
        vm.status.attempts[0].log_tail.len(),
        1000,
        "the input is untouched"
    );
}

#[test]
fn a_huge_newest_log_tail_keeps_its_newest_lines() {
    let mut vm = succeeded();
    vm.status.attempts = vec![attempt(1, 10), attempt(2, 20_000)];
    let cm = to_config_map(&vm).expect("fits once trimmed");
    assert!(data_size(&cm) <= MAX_DATA_BYTES);
    let back = from_config_map(&cm).expect("decodes");
    assert_eq!(back.status.attempts[0].log_tail, [TRIMMED_LOG]);
    let tail = &back.status.attempts[1].log_tail;
    assert_eq!(tail[0], TRIMMED_LOG);
    assert!(tail.len() > 5000, "kept {} lines", tail.len());
    assert_eq!(tail.last(), vm.status.attempts[1].log_tail.last());
}

#[test]
fn a_record_too_large_without_logs_is_refused() {
    let mut vm = succeeded();
    vm.status.message = Some("m".repeat(MAX_DATA_BYTES));
    let err = to_config_map(&vm).unwrap_err();
    assert!(matches!(err, RecordError::TooLarge { .. }), "{err}");
    assert!(!err.is_retryable());
}
