//! Selection on `tests/fixtures/plan/many.yaml`: every kind of selection,
//! the order, the claims never taken, and the errors a user acts on.
//!
//! - [`workloads`]: `--workload`, and how its argument is read.

mod workloads;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::plan::tests::Cluster;

const MANY: &str = include_str!("../../../tests/fixtures/plan/many.yaml");

fn many() -> Cluster {
    Cluster::default().with(MANY)
}

fn in_namespace(meta: &ObjectMeta, namespace: &str) -> bool {
    meta.namespace.as_deref() == Some(namespace)
}

/// What `driver::gather::select::found` reads of `namespaces`, with the
/// claims `keep` lets through (the API server's `labelSelector`).
fn found_where(
    cluster: &Cluster,
    namespaces: &[&str],
    keep: impl Fn(&PersistentVolumeClaim) -> bool,
) -> Vec<Found> {
    namespaces
        .iter()
        .map(|ns| {
            let of = |meta: &ObjectMeta| in_namespace(meta, ns);
            let claims: Vec<_> = (cluster.claims.iter())
                .filter(|c| of(&c.metadata) && keep(c))
                .cloned()
                .collect();
            let volumes = (cluster.volumes.iter())
                .filter(|v| {
                    let bound = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
                    bound.is_some_and(|r| r.namespace.as_deref() == Some(ns))
                })
                .cloned()
                .collect();
            let workloads = Workloads {
                pods: cluster
                    .pods
                    .iter()
                    .filter(|p| of(&p.metadata))
                    .cloned()
                    .collect(),
                replica_sets: (cluster.replica_sets.iter())
                    .filter(|r| of(&r.metadata))
                    .cloned()
                    .collect(),
                deployments: (cluster.deployments.iter())
                    .filter(|d| of(&d.metadata))
                    .cloned()
                    .collect(),
                stateful_sets: (cluster.stateful_sets.iter())
                    .filter(|s| of(&s.metadata))
                    .cloned()
                    .collect(),
                ..Workloads::default()
            };
            Found {
                namespace: ns.to_string(),
                claims,
                volumes,
                workloads,
            }
        })
        .collect()
}

fn found(cluster: &Cluster, namespaces: &[&str]) -> Vec<Found> {
    found_where(cluster, namespaces, |_| true)
}

/// The chosen claims as `ns/name` and why.
fn chosen(selection: &Selection, found: &[Found]) -> Vec<(String, String)> {
    match select(selection, found) {
        Ok(chosen) => chosen
            .into_iter()
            .map(|c| (c.claim.to_string(), c.why))
            .collect(),
        Err(e) => panic!("{} selected nothing: {e}", selection.describe()),
    }
}

fn names(chosen: &[(String, String)]) -> Vec<&str> {
    chosen.iter().map(|(claim, _)| claim.as_str()).collect()
}

fn refused(selection: &Selection, found: &[Found]) -> SelectError {
    match select(selection, found) {
        Ok(chosen) => panic!("{} selected {chosen:?}", selection.describe()),
        Err(e) => {
            assert!(!e.is_retryable(), "{e}");
            e
        }
    }
}

#[track_caller]
fn assert_says(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{message:?} does not say {part:?}");
    }
}

fn claims(names: &[&str]) -> Selection {
    Selection::Claims {
        names: names.iter().map(|n| n.to_string()).collect(),
    }
}

fn workload(kind: WorkloadKind, name: &str) -> Selection {
    Selection::Workload {
        kind,
        name: name.to_string(),
    }
}

fn class(class: &str, all_namespaces: bool) -> Selection {
    Selection::StorageClass {
        class: class.to_string(),
        all_namespaces,
    }
}

/// `data-db-3` copied as `name` (another replica's claim, no pod).
fn with_replica_claim(mut cluster: Cluster, name: &str) -> Cluster {
    let mut claim = cluster.claim("data-db-3").clone();
    claim.metadata.name = Some(name.to_string());
    cluster.claims.push(claim);
    cluster
}

#[test]
fn named_claims_come_by_name_numbers_as_numbers_each_once() {
    let cluster = with_replica_claim(many(), "data-db-10");
    let got = chosen(
        &claims(&["web-data", "data-db-10", "data-db-2", "web-data"]),
        &found(&cluster, &["prod"]),
    );
    assert_eq!(
        got,
        [
            ("prod/data-db-2".into(), "named".into()),
            ("prod/data-db-10".into(), "named".into()),
            ("prod/web-data".into(), "named".into()),
        ]
    );
}

#[test]
fn every_missing_name_is_told_at_once() {
    let e = refused(
        &claims(&["web-data", "nope", "cache", "data-db-9"]),
        &found(&many(), &["prod"]),
    );
    assert_eq!(
        e,
        SelectError::Named {
            scope: "namespace prod".into(),
            missing: vec!["nope".into(), "cache".into(), "data-db-9".into()],
            excluded: Vec::new(),
        }
    );
    assert_says(
        &e.to_string(),
        &["no claims nope, cache, data-db-9 in namespace prod", "-n"],
    );
}

#[test]
fn a_named_claim_volmig_made_or_being_deleted_is_refused_with_why() {
    let e = refused(
        &claims(&["data-db-0-migrated", "old-logs", "data-db-0"]),
        &found(&many(), &["prod"]),
    );
    let SelectError::Named {
        missing, excluded, ..
    } = &e
    else {
        panic!("{e:?}");
    };
    assert!(missing.is_empty());
    assert_eq!(excluded.len(), 2, "{excluded:?}");
    assert_says(
        &e.to_string(),
        &[
            "data-db-0-migrated was created by volmig",
            "volmig.io/source",
            "old-logs is being deleted",
        ],
    );
}

#[test]
fn a_label_selection_takes_what_the_api_server_matched_but_volmigs_own() {
    let tier_db = |c: &PersistentVolumeClaim| {
        let labels = c.metadata.labels.as_ref();
        labels.and_then(|l| l.get("tier")).map(String::as_str) == Some("db")
    };
    let cluster = with_replica_claim(many(), "data-db-10");
    let selection = Selection::Labels {
        selector: "tier=db".into(),
        all_namespaces: false,
    };
    let got = chosen(&selection, &found_where(&cluster, &["prod"], tier_db));
    // data-db-0-migrated and old-logs carry tier=db too.
    assert_eq!(
        names(&got),
        [
            "prod/data-db-0",
            "prod/data-db-1",
            "prod/data-db-2",
            "prod/data-db-3",
            "prod/data-db-10"
        ]
    );
    assert!(got.iter().all(|(_, why)| why == "label selector tier=db"));

    let e = refused(&selection, &found_where(&cluster, &["staging"], tier_db));
    assert_eq!(
        e.to_string(),
        "no claim matches -l tier=db in namespace staging; add -A to look in every namespace"
    );
}

#[test]
fn all_takes_every_claim_of_the_namespace_but_volmigs_own_and_the_deleted() {
    let got = chosen(&Selection::All, &found(&many(), &["prod"]));
    assert_eq!(
        names(&got),
        [
            "prod/data-db-0",
            "prod/data-db-1",
            "prod/data-db-2",
            "prod/data-db-3",
            "prod/pending",
            "prod/scratch",
            "prod/web-cache",
            "prod/web-data",
        ]
    );
    assert!(got.iter().all(|(_, why)| why == "every claim"));
}

#[test]
fn a_storage_class_is_the_volumes_then_the_claims() {
    let got = chosen(
        &class("standard", true),
        &found(&many(), &["prod", "staging"]),
    );
    let volume = "storage class standard (from its volume)";
    assert_eq!(
        got,
        [
            ("prod/data-db-0".into(), volume.into()),
            ("prod/data-db-1".into(), volume.into()),
            ("prod/data-db-2".into(), volume.into()),
            ("prod/data-db-3".into(), volume.into()),
            // Unbound: its own class.
            (
                "prod/pending".into(),
                "storage class standard (from the claim)".into()
            ),
            // The class is on the volume only.
            ("prod/web-data".into(), volume.into()),
            ("staging/cache".into(), volume.into()),
            ("staging/uploads".into(), volume.into()),
        ]
    );

    let got = chosen(&class("local-path", false), &found(&many(), &["prod"]));
    assert_eq!(names(&got), ["prod/scratch"]);
}

#[test]
fn the_volumes_class_wins_and_an_unbound_claim_without_class_has_none() {
    let mut cluster = many();
    // Bound to a volume of another class than the claim says.
    if let Some(spec) = cluster.claim("data-db-1").spec.as_mut() {
        spec.volume_name = Some("pvc-7a1e0c42".into());
    }
    if let Some(spec) = cluster.claim("pending").spec.as_mut() {
        spec.storage_class_name = None;
    }
    let prod = found(&cluster, &["prod"]);
    let standard = chosen(&class("standard", false), &prod);
    assert_eq!(
        names(&standard),
        [
            "prod/data-db-0",
            "prod/data-db-2",
            "prod/data-db-3",
            "prod/web-data"
        ]
    );
    let fast = chosen(&class("fast", false), &prod);
    assert_eq!(names(&fast), ["prod/data-db-1", "prod/web-cache"]);
}

#[test]
fn nothing_selected_is_an_error_with_a_hint() {
    let prod = found(&many(), &["prod"]);
    let e = refused(&class("gold", false), &prod);
    assert_eq!(
        e.to_string(),
        "no claim of storage class gold in namespace prod; add -A to look in every namespace"
    );
    let e = refused(&class("gold", true), &found(&many(), &["prod", "staging"]));
    assert_says(
        &e.to_string(),
        &[
            "no claim of storage class gold in any namespace",
            "kubectl get pv",
        ],
    );
    assert!(!e.to_string().contains("-A"));

    // Only claims no selection takes: said so.
    let mut cluster = many();
    cluster.claims.retain(|c| {
        let n = c.metadata.name.as_deref();
        n == Some("old-logs") || n == Some("data-db-0-migrated")
    });
    let e = refused(&Selection::All, &found(&cluster, &["prod"]));
    assert_says(
        &e.to_string(),
        &["no claim to migrate in namespace prod (2 left out", "-n"],
    );
    let e = refused(&Selection::All, &[]);
    assert_says(&e.to_string(), &["no claim to migrate in any namespace"]);
}

#[test]
fn a_selection_is_recorded_and_described() {
    for (selection, json, described) in [
        (
            claims(&["a", "b"]),
            r#"{"by":"claims","names":["a","b"]}"#,
            "claims a, b",
        ),
        (
            workload(WorkloadKind::StatefulSet, "db"),
            r#"{"by":"workload","kind":"StatefulSet","name":"db"}"#,
            "statefulset/db",
        ),
        (
            Selection::Labels {
                selector: "tier=db".into(),
                all_namespaces: true,
            },
            r#"{"by":"labels","selector":"tier=db","allNamespaces":true}"#,
            "-l tier=db, all namespaces",
        ),
        (Selection::All, r#"{"by":"all"}"#, "every claim"),
        (
            class("standard", false),
            r#"{"by":"storageClass","class":"standard","allNamespaces":false}"#,
            "storage class standard",
        ),
    ] {
        assert_eq!(serde_json::to_string(&selection).expect("JSON"), json);
        let back: Selection = serde_json::from_str(json).expect("a selection");
        assert_eq!(back, selection);
        assert_eq!(selection.describe(), described);
    }
    assert_eq!(claims(&["a"]).describe(), "claim a");
}

#[test]
fn a_node_takes_the_claims_whose_volumes_are_pinned_to_it_alone() {
    let mut cluster = many();
    let pin = |hostnames: &[&str]| -> k8s_openapi::api::core::v1::VolumeNodeAffinity {
        serde_json::from_value(serde_json::json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                   "values": hostnames}]}]}}))
        .expect("affinity")
    };
    for (volume, hostnames) in [
        ("pvc-d0", &["host-1"][..]),
        ("pvc-d1", &["host-1"]),
        // Pinned to two nodes: not node-local to either.
        ("pvc-d2", &["host-1", "host-2"]),
        ("pvc-d3", &["host-2"]),
    ] {
        let v = (cluster.volumes.iter_mut())
            .find(|v| v.metadata.name.as_deref() == Some(volume))
            .expect("volume");
        v.spec.as_mut().expect("spec").node_affinity = Some(pin(hostnames));
    }
    let node = |hostname: &str| Selection::Node {
        node: "node-1".into(),
        hostname: hostname.into(),
    };
    let seen = found(&cluster, &["prod", "staging"]);
    let got = chosen(&node("host-1"), &seen);
    assert_eq!(names(&got), ["prod/data-db-0", "prod/data-db-1"]);
    assert_eq!(got[0].1, "its volume is pinned to node node-1");
    let none = refused(&node("host-9"), &seen).to_string();
    assert!(
        none.contains("has a volume pinned to node node-1"),
        "{none}"
    );
    assert!(node("host-1").all_namespaces());
}
