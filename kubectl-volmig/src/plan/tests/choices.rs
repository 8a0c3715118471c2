//! What the planner decides when the spec leaves it open: the
//! destination's class, size and access modes, and when an existing claim
//! is reused.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{spec, time, Cluster};
use crate::plan::{ClaimAction, DestinationClaim, SourceVolume};

const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

fn storage(quantity: &str) -> Option<BTreeMap<String, Quantity>> {
    Some(BTreeMap::from([(
        "storage".into(),
        Quantity(quantity.into()),
    )]))
}

#[test]
fn a_plain_migration_copies_the_source_shape_into_the_default_class() {
    let plan = Cluster::base().plan(&spec("data-new"));
    assert_eq!(plan.operation, "data-x7k2q");
    assert_eq!(plan.spec, spec("data-new"));
    assert_eq!(
        plan.source,
        SourceVolume {
            volume: "pvc-3f2a9c1e".into(),
            storage_class: Some("standard".into()),
            capacity: "10Gi".into(),
            capacity_bytes: 10 << 30,
            access_modes: vec!["ReadWriteOnce".into()],
            volume_mode: Default::default(),
            // Not the Succeeded job, not the other claim's pod, not the
            // other namespace's `data`.
            used_by: vec!["db-0".into(), "db-backup-28611".into()],
        }
    );
    // The volume's 10Gi, not the claim's 8Gi request: the data may fill it.
    assert_eq!(
        plan.destination,
        DestinationClaim {
            namespace: "shop".into(),
            name: "data-new".into(),
            storage_class: Some("standard".into()),
            size: "10Gi".into(),
            size_bytes: 10 << 30,
            access_modes: vec!["ReadWriteOnce".into()],
            volume_mode: Default::default(),
            action: ClaimAction::Create,
        }
    );
}

#[test]
fn the_spec_choices_win() {
    let mut to = spec("data-local");
    to.destination.storage_class = Some("local-path".into());
    to.destination.size = Some("1.5Ti".into());
    to.destination.access_modes = vec!["ReadWriteOncePod".into()];
    let destination = Cluster::base().plan(&to).destination;
    assert_eq!(destination.storage_class.as_deref(), Some("local-path"));
    assert_eq!(
        (destination.size.as_str(), destination.size_bytes),
        ("1.5Ti", 1536 << 30)
    );
    assert_eq!(destination.access_modes, ["ReadWriteOncePod"]);
}

#[test]
fn the_class_is_the_default_then_the_source_then_none() {
    let mut cluster = Cluster::base();
    // The newest of two defaults is the default, as the API server has it.
    let local = cluster.class("local-path");
    local.metadata.annotations = Some(BTreeMap::from([(DEFAULT_CLASS.into(), "true".into())]));
    local.metadata.creation_timestamp = Some(time("2024-02-01T00:00:00Z"));
    cluster.class("standard").metadata.creation_timestamp = Some(time("2023-01-01T00:00:00Z"));
    let class = |c: &Cluster| c.plan(&spec("data-new")).destination.storage_class;
    assert_eq!(class(&cluster).as_deref(), Some("local-path"));

    for name in ["standard", "local-path"] {
        cluster.class(name).metadata.annotations = None;
    }
    let (claim, volume) = cluster.source();
    claim.spec.as_mut().unwrap().storage_class_name = Some("manual".into());
    volume.spec.as_mut().unwrap().storage_class_name = Some("manual".into());
    assert_eq!(class(&cluster).as_deref(), Some("manual"));

    let (claim, volume) = cluster.source();
    claim.spec.as_mut().unwrap().storage_class_name = Some(String::new());
    volume.spec.as_mut().unwrap().storage_class_name = None;
    assert_eq!(class(&cluster), None);
}

#[test]
fn the_size_is_the_volume_then_the_claim_status_then_its_request() {
    let mut cluster = Cluster::base();
    let size = |c: &Cluster| {
        let d = c.plan(&spec("data-new")).destination;
        (d.size, d.size_bytes)
    };
    let (claim, volume) = cluster.source();
    volume.spec.as_mut().unwrap().capacity = storage("not-a-size");
    claim.status.as_mut().unwrap().capacity = storage("11Gi");
    assert_eq!(size(&cluster), ("11Gi".into(), 11 << 30));

    cluster.source().0.status.as_mut().unwrap().capacity = None;
    assert_eq!(size(&cluster), ("8Gi".into(), 8 << 30));
}

#[test]
fn the_access_modes_are_the_claim_s_not_all_its_volume_offers() {
    let mut cluster = Cluster::base();
    let volume = cluster.source().1;
    volume.spec.as_mut().unwrap().access_modes =
        Some(vec!["ReadWriteOnce".into(), "ReadOnlyMany".into()]);
    let plan = cluster.plan(&spec("data-new"));
    assert_eq!(plan.destination.access_modes, ["ReadWriteOnce"]);
    assert_eq!(plan.source.access_modes, ["ReadWriteOnce", "ReadOnlyMany"]);
}

#[test]
fn a_claim_an_earlier_run_made_from_this_source_is_reused_as_it_is() {
    let mut to = spec("data-local");
    to.destination.size = Some("50Gi".into());
    let plan = Cluster::with_destinations().plan(&to);
    assert_eq!(
        plan.destination,
        DestinationClaim {
            namespace: "shop".into(),
            name: "data-local".into(),
            storage_class: Some("local-path".into()),
            size: "10Gi".into(),
            size_bytes: 10 << 30,
            access_modes: vec!["ReadWriteOnce".into()],
            volume_mode: Default::default(),
            action: ClaimAction::Reuse,
        }
    );
}

#[test]
fn reuse_takes_a_users_claim_even_unbound() {
    let mut to = spec("scratch");
    to.destination.reuse = true;
    let destination = Cluster::with_destinations().plan(&to).destination;
    assert_eq!(destination.action, ClaimAction::Reuse);
    // Pending (WaitForFirstConsumer): no capacity yet, its request counts.
    assert_eq!(
        (destination.size.as_str(), destination.size_bytes),
        ("20Gi", 20 << 30)
    );
}

#[test]
fn a_claim_of_the_same_name_in_another_namespace_is_another_claim() {
    let mut cluster = Cluster::base();
    let mut archive = cluster.namespaces[0].clone();
    archive.metadata.name = Some("archive".into());
    cluster.namespaces.push(archive);
    let mut to = spec("data");
    to.destination.namespace = "archive".into();
    let destination = cluster.plan(&to).destination;
    assert_eq!(
        (destination.namespace.as_str(), destination.name.as_str()),
        ("archive", "data")
    );
}

#[test]
fn a_plan_survives_the_record_yaml() {
    let plan = Cluster::with_destinations().plan(&spec("data-local"));
    let yaml = serde_saphyr::to_string(&plan).expect("serialize");
    let back: crate::plan::Plan = serde_saphyr::from_str(&yaml).expect("deserialize");
    assert_eq!(back, plan);
}

#[test]
fn a_destination_expanded_after_the_plan_is_used_at_its_new_size() {
    let mut cluster = Cluster::with_destinations();
    let mut shrink = spec("data-local");
    shrink.destination.allow_shrink = true;
    cluster
        .claim("data-local")
        .status
        .as_mut()
        .unwrap()
        .capacity = storage("5Gi");
    let plan = cluster.plan(&shrink);
    assert_eq!(plan.destination.size_bytes, 5 << 30);

    // Expanded to 20Gi after its data did not fit: `resume` plans with it.
    let claim = cluster.claim("data-local");
    claim.status.as_mut().unwrap().capacity = storage("20Gi");
    let grown = plan.clone().with_grown_destination(claim);
    assert_eq!(
        (
            grown.destination.size.as_str(),
            grown.destination.size_bytes
        ),
        ("20Gi", 20 << 30)
    );
    // Never smaller than planned (a claim whose status lags its request).
    claim.status.as_mut().unwrap().capacity = None;
    assert_eq!(plan.clone().with_grown_destination(claim), plan);
}
