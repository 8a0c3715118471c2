//! Every reason a migration cannot work: the variant, and a message that
//! names the object at fault and says what to do.

use super::{assert_says, spec, time, Cluster};
use crate::plan::quantity::QuantityError;
use crate::plan::Refusal;

#[test]
fn a_missing_source_claim_is_named_with_its_namespace() {
    let mut cluster = Cluster::base();
    cluster.claims.clear();
    let refusal = cluster.refuse(&spec("data-fast"));
    assert_eq!(
        refusal,
        Refusal::SourceNotFound {
            namespace: "shop".into(),
            name: "data".into()
        }
    );
    assert_says(
        &refusal.to_string(),
        &[r#""data""#, r#""shop""#, "kubectl get pvc -n shop"],
    );
    assert!(!refusal.is_retryable());
}

#[test]
fn a_pending_source_is_worth_waiting_for_a_lost_one_is_not() {
    let mut cluster = Cluster::base();
    cluster.source().0.status.as_mut().unwrap().phase = Some("Pending".into());
    let pending = cluster.refuse(&spec("data-fast"));
    assert!(matches!(&pending, Refusal::SourceNotBound { phase, .. } if phase == "Pending"));
    assert_says(
        &pending.to_string(),
        &[r#""data""#, "is Pending", "wait until it is Bound"],
    );
    assert!(pending.is_retryable());

    cluster.source().0.status.as_mut().unwrap().phase = Some("Lost".into());
    let lost = cluster.refuse(&spec("data-fast"));
    assert!(matches!(&lost, Refusal::SourceNotBound { phase, .. } if phase == "Lost"));
    assert_says(
        &lost.to_string(),
        &["is Lost", "restore the persistentvolume"],
    );
    assert!(!lost.is_retryable());
}

#[test]
fn a_source_bound_to_a_deleted_volume_names_the_volume() {
    let mut cluster = Cluster::base();
    cluster.volumes.clear();
    let refusal = cluster.refuse(&spec("data-fast"));
    assert_eq!(
        refusal,
        Refusal::SourceVolumeMissing {
            namespace: "shop".into(),
            name: "data".into(),
            volume: "pvc-3f2a9c1e".into()
        }
    );
    assert_says(&refusal.to_string(), &["kubectl get pv pvc-3f2a9c1e"]);
}

#[test]
fn a_source_of_unknown_size_is_refused() {
    let mut cluster = Cluster::base();
    let (claim, volume) = cluster.source();
    claim.status.as_mut().unwrap().capacity = None;
    claim.spec.as_mut().unwrap().resources = None;
    volume.spec.as_mut().unwrap().capacity = None;
    let refusal = cluster.refuse(&spec("data-fast"));
    assert!(
        matches!(refusal, Refusal::SourceCapacityUnknown { ref volume } if volume == "pvc-3f2a9c1e")
    );
    assert_says(&refusal.to_string(), &["spec.capacity.storage"]);
}

#[test]
fn a_read_write_once_pod_source_in_use_names_the_pod_and_the_ways_out() {
    let mut cluster = Cluster::base();
    cluster.source().0.spec.as_mut().unwrap().access_modes = Some(vec!["ReadWriteOncePod".into()]);
    let mut direct = spec("data-fast");
    direct.transfer.copy_method = crate::spec::CopyMethod::Direct;
    let refusal = cluster.refuse(&direct);
    // db-0 (Running) holds it, not the Pending backup pod.
    assert!(matches!(&refusal, Refusal::SourceInUseReadWriteOncePod { pod, .. } if pod == "db-0"));
    assert_says(
        &refusal.to_string(),
        &[
            r#"pod "db-0""#,
            "scale its workload to 0",
            "--copy-method snapshot or clone",
        ],
    );

    // Stopped, it migrates.
    cluster.remove_pod("db-0");
    cluster.remove_pod("db-backup-28611");
    assert!(cluster.plan(&spec("data-fast")).source.used_by.is_empty());
}

#[test]
fn a_missing_destination_namespace_says_how_to_create_it() {
    let mut to = spec("data");
    to.destination.namespace = "archive".into();
    let refusal = Cluster::base().refuse(&to);
    assert_eq!(
        refusal,
        Refusal::DestinationNamespaceNotFound {
            namespace: "archive".into()
        }
    );
    assert_says(&refusal.to_string(), &["kubectl create namespace archive"]);
}

#[test]
fn an_unknown_storage_class_lists_the_classes_and_the_default() {
    let mut to = spec("data-fast");
    to.destination.storage_class = Some("fast-ssd".into());
    let refusal = Cluster::base().refuse(&to);
    assert_eq!(
        refusal,
        Refusal::StorageClassNotFound {
            name: "fast-ssd".into(),
            available: vec!["local-path".into(), "standard".into()],
            default: Some("standard".into()),
        }
    );
    assert_says(
        &refusal.to_string(),
        &[
            r#""fast-ssd""#,
            "local-path, standard (default)",
            "--to-storage-class",
        ],
    );
}

#[test]
fn an_existing_claim_is_not_written_to_without_reuse() {
    let refusal = Cluster::with_destinations().refuse(&spec("scratch"));
    assert_eq!(
        refusal,
        Refusal::DestinationExists {
            namespace: "shop".into(),
            name: "scratch".into()
        }
    );
    assert_says(
        &refusal.to_string(),
        &[
            r#""scratch""#,
            "--reuse",
            "only the differences are sent",
            "another --to",
        ],
    );
}

#[test]
fn reuse_of_a_claim_that_does_not_exist_is_refused_not_created() {
    let mut to = spec("nosuchclaim");
    to.destination.reuse = true;
    let refusal = Cluster::base().refuse(&to);
    assert_eq!(
        refusal,
        Refusal::ReuseMissing {
            namespace: "shop".into(),
            name: "nosuchclaim".into()
        }
    );
    assert_says(
        &refusal.to_string(),
        &[
            r#""nosuchclaim" not found in namespace "shop""#,
            "--reuse copies into an existing claim",
            "leave out --reuse",
        ],
    );
    assert!(!refusal.is_retryable());
}

#[test]
fn a_claim_made_from_another_source_needs_reuse() {
    let mut cluster = Cluster::with_destinations();
    let labels = cluster
        .claim("data-local")
        .metadata
        .labels
        .as_mut()
        .unwrap();
    labels.insert("volmig.io/source".into(), "shop.other".into());
    let refusal = cluster.refuse(&spec("data-local"));
    assert!(matches!(refusal, Refusal::DestinationExists { .. }));
}

#[test]
fn a_reused_claim_smaller_than_the_source_needs_expanding_or_allow_shrink() {
    let mut cluster = Cluster::with_destinations();
    let claim = cluster.claim("data-local");
    claim
        .status
        .as_mut()
        .unwrap()
        .capacity
        .as_mut()
        .unwrap()
        .insert(
            "storage".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("5Gi".into()),
        );
    let refusal = cluster.refuse(&spec("data-local"));
    assert_eq!(
        refusal,
        Refusal::DestinationTooSmall {
            namespace: "shop".into(),
            name: "data-local".into(),
            capacity: "5Gi".into(),
            needed: "10Gi".into(),
        }
    );
    assert_says(
        &refusal.to_string(),
        &["holds 5Gi", "at least 10Gi", "--allow-shrink"],
    );

    let mut shrink = spec("data-local");
    shrink.destination.allow_shrink = true;
    assert_eq!(cluster.plan(&shrink).destination.size, "5Gi");
}

#[test]
fn a_to_size_below_the_source_needs_allow_shrink() {
    let mut to = spec("data-fast");
    to.destination.size = Some("5Gi".into());
    let refusal = Cluster::base().refuse(&to);
    assert_eq!(
        refusal,
        Refusal::ShrinkNotAllowed {
            requested: "5Gi".into(),
            source_capacity: "10Gi".into(),
        }
    );
    assert_says(
        &refusal.to_string(),
        &[
            "--to-size of at least 10Gi",
            "--allow-shrink if the data fits",
            "the copy then stops, as on a full disk, as soon as the source's files add up to more than 5Gi",
        ],
    );

    to.destination.allow_shrink = true;
    let plan = Cluster::base().plan(&to);
    assert_eq!(
        (plan.destination.size.as_str(), plan.destination.size_bytes),
        ("5Gi", 5 << 30)
    );
}

#[test]
fn the_source_cannot_be_its_own_destination() {
    let refusal = Cluster::base().refuse(&spec("data"));
    assert!(matches!(refusal, Refusal::SameClaim { .. }));
    assert_says(
        &refusal.to_string(),
        &[r#""data""#, r#""shop""#, "choose another --to"],
    );
}

#[test]
fn an_unknown_to_node_lists_the_nodes() {
    let mut to = spec("data-fast");
    to.destination.node = Some("node-9".into());
    let refusal = Cluster::base().refuse(&to);
    assert!(matches!(&refusal, Refusal::NodeNotFound { name, .. } if name == "node-9"));
    assert_says(
        &refusal.to_string(),
        &[r#""node-9""#, "node-1, node-2, node-3", "--to-node"],
    );
}

#[test]
fn an_invalid_to_size_says_what_a_quantity_looks_like() {
    let mut to = spec("data-fast");
    to.destination.size = Some("10GB".into());
    let refusal = Cluster::base().refuse(&to);
    assert!(matches!(
        &refusal,
        Refusal::InvalidSize { error: QuantityError::UnknownSuffix { suffix, .. }, .. } if suffix == "GB"
    ));
    assert_says(
        &refusal.to_string(),
        &["--to-size", r#""10GB""#, "Gi", "G (powers of 1000)"],
    );
}

#[test]
fn an_invalid_access_mode_lists_the_valid_ones() {
    let mut to = spec("data-fast");
    to.destination.access_modes = vec!["RWX".into()];
    let refusal = Cluster::base().refuse(&to);
    assert_eq!(
        refusal,
        Refusal::InvalidAccessMode {
            value: "RWX".into()
        }
    );
    assert_says(
        &refusal.to_string(),
        &[
            "(did you mean ReadWriteMany?)",
            "ReadWriteOnce, ReadOnlyMany, ReadWriteMany or ReadWriteOncePod",
        ],
    );
}

#[test]
fn a_lost_or_deleted_destination_is_not_reused() {
    let mut cluster = Cluster::with_destinations();
    cluster.claim("data-local").status.as_mut().unwrap().phase = Some("Lost".into());
    let lost = cluster.refuse(&spec("data-local"));
    assert!(matches!(&lost, Refusal::DestinationUnusable { state, .. } if state == "Lost"));
    assert_says(
        &lost.to_string(),
        &["kubectl delete pvc data-local -n shop", "another --to"],
    );

    let mut cluster = Cluster::with_destinations();
    cluster.claim("data-local").metadata.deletion_timestamp = Some(time("2024-06-01T12:00:00Z"));
    let going = cluster.refuse(&spec("data-local"));
    assert!(
        matches!(&going, Refusal::DestinationUnusable { state, .. } if state == "being deleted")
    );
    assert_says(
        &going.to_string(),
        &["being deleted", "wait until it is gone"],
    );
}

#[test]
fn a_reused_claim_of_another_class_or_mode_than_asked_is_refused() {
    let cluster = Cluster::with_destinations();
    let mut class = spec("data-local");
    class.destination.storage_class = Some("standard".into());
    let refusal = cluster.refuse(&class);
    assert!(
        matches!(&refusal, Refusal::DestinationDiffers { what, .. } if what == "storage class")
    );
    assert_says(
        &refusal.to_string(),
        &[r#""local-path""#, r#"requested "standard""#],
    );

    let mut modes = spec("data-local");
    modes.destination.access_modes = vec!["ReadWriteMany".into()];
    let refusal = cluster.refuse(&modes);
    assert!(matches!(&refusal, Refusal::DestinationDiffers { what, .. } if what == "access modes"));
}

#[test]
fn to_node_must_be_where_a_reused_local_volume_lives() {
    let mut to = spec("data-local");
    to.destination.node = Some("node-2".into());
    let refusal = Cluster::with_destinations().refuse(&to);
    assert_eq!(
        refusal,
        Refusal::DestinationPinnedElsewhere {
            namespace: "shop".into(),
            name: "data-local".into(),
            pinned_to: vec!["node-1".into()],
            node: "node-2".into(),
        }
    );
    assert_says(
        &refusal.to_string(),
        &[
            "on node-1",
            r#"not on --to-node "node-2""#,
            "drop --to-node",
        ],
    );

    to.destination.node = Some("node-1".into());
    let plan = Cluster::with_destinations().plan(&to);
    assert_eq!(plan.placement.receiver.node.as_deref(), Some("node-1"));
}

#[test]
fn detaching_without_the_rights_names_them_and_says_what_to_do() {
    let only_create = Refusal::DetachForbidden {
        user: "user \"dev\"".into(),
        missing: vec!["create clusterroles.rbac.authorization.k8s.io (cluster-wide)".into()],
        lacks_grants: false,
    };
    let text = only_create.to_string();
    assert!(
        text.starts_with(
            "--detach: user \"dev\" may not start the in-cluster driver; the API server answered no to:\n  create clusterroles.rbac.authorization.k8s.io (cluster-wide)\n"
        ),
        "{text}"
    );
    assert!(text.contains("Run it without --detach"), "{text}");
    let grants = Refusal::DetachForbidden {
        user: "you".into(),
        missing: vec!["patch persistentvolumes (cluster-wide)".into()],
        lacks_grants: true,
    };
    assert!(grants
        .to_string()
        .contains("can only grant what its creator holds"));
    assert!(!grants.is_retryable());
}
