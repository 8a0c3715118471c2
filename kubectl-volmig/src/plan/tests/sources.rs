//! Where the sender reads: `--copy-method` and what `auto` resolves to,
//! with every refusal before anything is created (issue 24).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::HostPathVolumeSource;

use super::{assert_says, spec, Cluster};
use crate::plan::{Method, Refusal};
use crate::spec::{CopyMethod, MigrationSpec};

const SNAPSHOTS: &str = include_str!("../../../tests/fixtures/plan/snapshots.yaml");

/// `cluster.yaml` with the snapshot API and `snapshots.yaml`'s classes.
fn with_snapshots() -> Cluster {
    Cluster::base().with(SNAPSHOTS)
}

/// The source `shop/data` made ReadWriteOncePod (db-0 mounts it).
fn read_write_once_pod(mut cluster: Cluster) -> Cluster {
    cluster.source().0.spec.as_mut().unwrap().access_modes = Some(vec!["ReadWriteOncePod".into()]);
    cluster
}

fn copy(method: CopyMethod) -> MigrationSpec {
    let mut s = spec("data-fast");
    s.transfer.copy_method = method;
    s
}

/// The source's volume as a hostPath one, as kind's local-path makes.
fn host_path(mut cluster: Cluster) -> Cluster {
    let volume = cluster.source().1.spec.as_mut().unwrap();
    volume.csi = None;
    volume.host_path = Some(HostPathVolumeSource {
        path: "/var/local-path/pvc-3f2a9c1e".into(),
        type_: None,
    });
    cluster
}

#[test]
fn a_source_the_sender_may_mount_is_read_directly_by_default() {
    let plan = with_snapshots().plan(&spec("data-fast"));
    assert_eq!(plan.source_method.method, Method::Direct);
    // ... beside the app that holds the ReadWriteOnce volume.
    assert_eq!(plan.placement.sender.node.as_deref(), Some("node-2"));
    assert_eq!(plan.sender_claim(1), "data");
}

#[test]
fn a_read_write_once_pod_source_in_use_is_read_through_a_snapshot_of_its_drivers_default_class() {
    let plan = read_write_once_pod(with_snapshots()).plan(&spec("data-fast"));
    let m = &plan.source_method;
    assert_eq!(m.method, Method::Snapshot);
    assert_eq!(m.snapshot_class.as_deref(), Some("pd-snap"));
    assert_eq!(m.read_class.as_deref(), Some("standard"));
    assert_says(
        &m.reason,
        &["in use by pod db-0", "VolumeSnapshot (class pd-snap)"],
    );
    // The sender mounts the attempt's own claim, where the scheduler likes.
    assert_eq!(plan.sender_claim(3), "volmig-data-x7k2q-read-3");
    assert_eq!(plan.placement.sender.node, None);
    assert_says(&plan.placement.sender.reason, &["snapshot or clone"]);
}

#[test]
fn without_the_snapshot_api_a_read_write_once_pod_source_in_use_is_cloned() {
    let plan = read_write_once_pod(Cluster::base()).plan(&spec("data-fast"));
    assert_eq!(plan.source_method.method, Method::Clone);
    assert_eq!(plan.source_method.snapshot_class, None);
    assert_says(
        &plan.source_method.reason,
        &["pd.csi.storage.gke.io must support cloning"],
    );
}

#[test]
fn a_read_write_once_pod_source_in_use_that_no_copy_can_read_is_refused_with_each_reason() {
    let cluster = host_path(read_write_once_pod(with_snapshots()));
    let refusal = cluster.refuse(&spec("data-fast"));
    assert!(
        matches!(&refusal, Refusal::SourceInUseReadWriteOncePod { pod, no_copy: Some(_), .. } if pod == "db-0")
    );
    assert_says(
        &refusal.to_string(),
        &[
            r#"pod "db-0""#,
            "a hostPath volume, not a CSI one",
            "only CSI drivers snapshot volumes",
            "only CSI drivers clone volumes",
            "scale its workload to 0",
        ],
    );
}

#[test]
fn direct_on_a_read_write_once_pod_source_in_use_names_the_other_methods() {
    let refusal = read_write_once_pod(with_snapshots()).refuse(&copy(CopyMethod::Direct));
    assert!(matches!(
        &refusal,
        Refusal::SourceInUseReadWriteOncePod { no_copy: None, .. }
    ));
    assert_says(
        &refusal.to_string(),
        &["--copy-method snapshot or clone", "scale its workload to 0"],
    );
}

#[test]
fn a_snapshot_needs_the_snapshot_api() {
    let refusal = Cluster::base().refuse(&copy(CopyMethod::Snapshot));
    assert_eq!(refusal, Refusal::NoSnapshotApi);
    assert_says(
        &refusal.to_string(),
        &[
            "snapshot.storage.k8s.io/v1",
            "external-snapshotter",
            "--copy-method clone",
        ],
    );
}

#[test]
fn a_snapshot_is_asked_of_a_class_of_the_source_volumes_driver() {
    let cluster = with_snapshots();
    let mut asked = copy(CopyMethod::Snapshot);
    asked.transfer.snapshot_class = Some("pd-snap-archive".into());
    let plan = cluster.plan(&asked);
    assert_eq!(plan.source_method.method, Method::Snapshot);
    assert_eq!(
        plan.source_method.snapshot_class.as_deref(),
        Some("pd-snap-archive")
    );

    asked.transfer.snapshot_class = Some("ebs-snap".into());
    let refusal = cluster.refuse(&asked);
    assert!(matches!(refusal, Refusal::SnapshotClassDriver { .. }));
    assert_says(
        &refusal.to_string(),
        &[
            r#""ebs.csi.aws.com""#,
            r#""pd.csi.storage.gke.io""#,
            "pd-snap, pd-snap-archive",
        ],
    );

    asked.transfer.snapshot_class = Some("nope".into());
    let refusal = cluster.refuse(&asked);
    assert!(matches!(refusal, Refusal::SnapshotClassNotFound { .. }));
    assert_says(
        &refusal.to_string(),
        &[r#""nope" not found"#, "pd-snap, pd-snap-archive"],
    );
}

#[test]
fn without_one_default_class_for_the_driver_the_refusal_names_the_fix() {
    let mut none = with_snapshots();
    none.snapshots
        .classes
        .retain(|c| !c.name().starts_with("pd-snap") || c.name() == "pd-snap-archive");
    let refusal = none.refuse(&copy(CopyMethod::Snapshot));
    assert!(matches!(&refusal, Refusal::NoSnapshotClass { defaults, .. } if defaults.is_empty()));
    assert_says(
        &refusal.to_string(),
        &[
            "no VolumeSnapshotClass is the default",
            "pd-snap-archive",
            "--snapshot-class NAME",
            "snapshot.storage.kubernetes.io/is-default-class=true",
        ],
    );

    let mut two = with_snapshots();
    for class in &mut two.snapshots.classes {
        class.metadata.annotations = Some(BTreeMap::from([(
            crate::snapshots::DEFAULT_CLASS_ANNOTATION.to_string(),
            "true".to_string(),
        )]));
    }
    let refusal = two.refuse(&copy(CopyMethod::Snapshot));
    assert_says(
        &refusal.to_string(),
        &["2 VolumeSnapshotClasses are the default (pd-snap, pd-snap-archive)"],
    );

    // Classes that could not be listed are said to be so.
    let mut hidden = Cluster::base();
    hidden.snapshots.api = true;
    hidden.snapshots.classes_error = Some("forbidden".into());
    let refusal = hidden.refuse(&copy(CopyMethod::Snapshot));
    assert_says(&refusal.to_string(), &["could not be listed: forbidden"]);
}

#[test]
fn only_csi_volumes_are_snapshotted_or_cloned() {
    for (method, word) in [
        (CopyMethod::Snapshot, "snapshot"),
        (CopyMethod::Clone, "clone"),
    ] {
        let refusal = host_path(with_snapshots()).refuse(&copy(method));
        assert!(matches!(&refusal, Refusal::NotCsi { kind, .. } if kind == "hostPath"));
        assert_says(
            &refusal.to_string(),
            &[
                &format!("only CSI drivers {word} volumes"),
                "--copy-method direct",
            ],
        );
    }
}

#[test]
fn the_temporary_claim_takes_a_class_of_the_source_volumes_driver() {
    // A static volume without a class: the driver's class is found.
    let mut cluster = with_snapshots();
    cluster.source().0.spec.as_mut().unwrap().storage_class_name = Some(String::new());
    cluster.source().1.spec.as_mut().unwrap().storage_class_name = None;
    let plan = cluster.plan(&copy(CopyMethod::Clone));
    assert_eq!(plan.source_method.read_class.as_deref(), Some("standard"));

    // No class of that driver at all: refused, naming the driver.
    cluster.class("standard").provisioner = "example.com/other".into();
    let refusal = cluster.refuse(&copy(CopyMethod::Clone));
    assert!(matches!(refusal, Refusal::NoClassForDriver { .. }));
    assert_says(
        &refusal.to_string(),
        &[r#"provisioner "pd.csi.storage.gke.io""#],
    );
}

#[test]
fn a_snapshot_class_without_a_snapshot_is_refused_before_the_cluster_is_read() {
    for method in [CopyMethod::Direct, CopyMethod::Clone] {
        let mut asked = copy(method);
        asked.transfer.snapshot_class = Some("pd-snap".into());
        let refusal = crate::plan::check_values(&asked).unwrap_err();
        assert!(matches!(refusal, Refusal::SnapshotClassUnused { .. }));
    }
}

#[test]
fn dry_run_shows_the_snapshot_and_the_claim_restored_from_it() {
    let plan = read_write_once_pod(with_snapshots()).plan(&spec("data-fast"));
    let objects = crate::resources::dry_run_objects(&plan, "<receiver>").unwrap();
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "PersistentVolumeClaim",
            "Secret",
            "Service",
            "VolumeSnapshot",
            "PersistentVolumeClaim",
            "Pod",
            "Pod"
        ]
    );
    let snapshot = &objects[3];
    assert_eq!(snapshot["metadata"]["name"], "volmig-data-x7k2q-snap-1");
    assert_eq!(
        snapshot["spec"]["source"]["persistentVolumeClaimName"],
        "data"
    );
    assert_eq!(snapshot["spec"]["volumeSnapshotClassName"], "pd-snap");
    let claim = &objects[4];
    assert_eq!(claim["metadata"]["name"], "volmig-data-x7k2q-read-1");
    assert_eq!(claim["spec"]["dataSource"]["kind"], "VolumeSnapshot");
    assert_eq!(
        claim["spec"]["dataSource"]["apiGroup"],
        "snapshot.storage.k8s.io"
    );
    assert_eq!(claim["spec"]["accessModes"][0], "ReadWriteOnce");
    assert_eq!(
        claim["metadata"]["labels"]["volmig.io/component"],
        "source-copy"
    );
    let sender = &objects[6];
    let volumes = sender["spec"]["volumes"].as_array().unwrap();
    assert!(
        volumes
            .iter()
            .any(|v| v["persistentVolumeClaim"]["claimName"] == "volmig-data-x7k2q-read-1"),
        "{volumes:?}"
    );
}

#[test]
fn a_restore_bigger_than_the_source_asks_for_the_bigger_size() {
    let plan = read_write_once_pod(with_snapshots()).plan(&spec("data-fast"));
    let claim = crate::resources::read_claim(&plan, 1, Some("12Gi"));
    let size = |c: &k8s_openapi::api::core::v1::PersistentVolumeClaim| {
        c.spec
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"]
            .0
            .clone()
    };
    assert_eq!(size(&claim), "12Gi");
    assert_eq!(
        size(&crate::resources::read_claim(&plan, 1, Some("1Gi"))),
        "10Gi"
    );
}
