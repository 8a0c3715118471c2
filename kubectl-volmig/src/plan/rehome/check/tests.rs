//! Planning a rehome on fixtures: what is refused, and why, before
//! anything changes; which volumes `--all-from-node` finds.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::{json, Value};

use super::*;
use crate::plan::quiesce::Workloads;

fn node(name: &str, extra: Value) -> Node {
    let mut n = json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                       "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    merge(&mut n, &extra);
    serde_json::from_value(n).expect("node")
}

fn merge(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b.clone(),
    }
}

fn local_pv(name: &str, on: &str, claim: Option<&str>) -> PersistentVolume {
    let mut pv = json!({
        "metadata": {"name": name, "uid": format!("{name}-uid")},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "local",
                 "local": {"path": format!("/disks/{name}")},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": [on]}]}]}}},
    });
    if let Some(c) = claim {
        pv["spec"]["claimRef"] = json!({"namespace": "prod", "name": c, "uid": format!("{c}-uid")});
    }
    serde_json::from_value(pv).expect("pv")
}

fn bound_claim(name: &str, volume: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "prod", "uid": format!("{name}-uid")},
        "spec": {"volumeName": volume, "accessModes": ["ReadWriteOnce"]},
        "status": {"phase": "Bound"},
    }))
    .expect("claim")
}

fn app_pod(claim: &str, extra: Value) -> Pod {
    let mut p = json!({
        "metadata": {"name": "app-0", "namespace": "prod"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]},
        "status": {"phase": "Running"},
    });
    merge(&mut p, &extra);
    serde_json::from_value(p).expect("pod")
}

fn candidate(pv: PersistentVolume, claim: Option<PersistentVolumeClaim>) -> Candidate {
    Candidate {
        volume: pv,
        claim,
        driver_object: None,
        skippable: false,
    }
}

fn nodes() -> Vec<Node> {
    vec![
        node("node-1", json!({})),
        node("node-2", json!({})),
        node("node-3", json!({"spec": {"unschedulable": true}})),
        node(
            "node-4",
            json!({"spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}),
        ),
    ]
}

fn workloads(pods: Vec<Pod>) -> BTreeMap<String, Workloads> {
    BTreeMap::from([(
        "prod".to_string(),
        Workloads {
            pods,
            ..Workloads::default()
        },
    )])
}

fn refused(c: &[Candidate], want: Want, w: &BTreeMap<String, Workloads>) -> Vec<String> {
    plan(c, &want, None, &nodes(), w)
        .expect_err("refused")
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_missing_cordoned_or_unfit_node_is_refused_by_name() {
    let c = [candidate(
        local_pv("pv-a", "node-1", Some("data")),
        Some(bound_claim("data", "pv-a")),
    )];
    let none = BTreeMap::new();
    assert_eq!(
        refused(&c, Want::Node("node-9".into()), &none),
        ["node \"node-9\" does not exist"]
    );
    let cordoned = refused(&c, Want::Node("node-3".into()), &none);
    assert!(cordoned[0].contains("is cordoned"), "{cordoned:?}");
    let w = workloads(vec![app_pod("data", json!({}))]);
    let tainted = refused(&c, Want::Node("node-4".into()), &w);
    assert!(
        tainted
            .iter()
            .any(|r| r.contains("pod prod/app-0") && r.contains("gpu")),
        "{tainted:?}"
    );
    let same = refused(&c, Want::Node("node-1".into()), &none);
    assert_eq!(same, ["persistentvolume \"pv-a\" is pinned there already"]);
}

#[test]
fn a_bare_pod_and_an_unbound_claim_are_refused_before_anything_changes() {
    let w = workloads(vec![app_pod("data", json!({}))]);
    let c = [candidate(
        local_pv("pv-a", "node-1", Some("data")),
        Some(bound_claim("data", "pv-a")),
    )];
    let bare = refused(&c, Want::Node("node-2".into()), &w);
    assert!(
        bare.iter()
            .any(|r| r.starts_with("cannot stop every consumer of prod/data")),
        "{bare:?}"
    );

    let mut pending = bound_claim("data", "pv-a");
    pending.status = None;
    let c = [candidate(
        local_pv("pv-a", "node-1", Some("data")),
        Some(pending),
    )];
    let r = refused(&c, Want::Node("node-2".into()), &BTreeMap::new());
    assert!(r[0].contains("is Pending"), "{r:?}");
}

#[test]
fn a_deployment_is_stopped_and_the_volume_made_again_on_the_new_node() {
    let owner = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "name": "app-5d", "uid": "rs", "controller": true}]}});
    let rs: k8s_openapi::api::apps::v1::ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "app-5d", "namespace": "prod", "uid": "rs", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "app", "uid": "d", "controller": true}]},
        "spec": {"replicas": 1, "selector": {}},
    }))
    .expect("rs");
    let deployment: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": "app", "namespace": "prod", "uid": "d"},
        "spec": {"replicas": 1, "selector": {}, "template": {}},
    }))
    .expect("deployment");
    let mut w = workloads(vec![app_pod("data", owner)]);
    let prod = w.get_mut("prod").expect("prod");
    prod.replica_sets.push(rs);
    prod.deployments.push(deployment);
    let c = [candidate(
        local_pv("pv-a", "node-1", Some("data")),
        Some(bound_claim("data", "pv-a")),
    )];
    let p = plan(&c, &Want::Node("node-2".into()), None, &nodes(), &w).expect("planned");
    assert_eq!(p.stops.len(), 1);
    assert_eq!(
        (p.stops[0].0.as_str(), p.stops[0].1.name.as_str()),
        ("prod", "app")
    );
    assert_eq!(
        crate::record::print::rehome::pinned(&p.volumes[0].rehomed),
        "node-2"
    );
}

#[test]
fn driver_objects_are_rewritten_and_a_missing_one_is_refused() {
    let mut pv = local_pv("pv-z", "node-1", None);
    let spec = pv.spec.as_mut().expect("spec");
    spec.local = None;
    spec.csi = Some(
        serde_json::from_value(json!({"driver": "zfs.csi.openebs.io", "volumeHandle": "pv-z"}))
            .expect("csi"),
    );
    let object = json!({"metadata": {"name": "pv-z", "namespace": "openebs"},
                        "spec": {"ownerNodeID": "node-1", "poolName": "tank"}});
    let c = [Candidate {
        volume: pv.clone(),
        claim: None,
        driver_object: Some(Some(object)),
        skippable: false,
    }];
    let p = plan(
        &c,
        &Want::Node("node-2".into()),
        Some("tank2"),
        &nodes(),
        &BTreeMap::new(),
    )
    .expect("planned");
    let fields: Vec<(String, Option<String>, String)> = p.volumes[0].driver_objects[0]
        .fields
        .iter()
        .map(|f| (f.dotted(), f.old.clone(), f.new.clone()))
        .collect();
    assert_eq!(
        fields,
        [
            (
                "spec.ownerNodeID".into(),
                Some("node-1".into()),
                "node-2".into()
            ),
            ("spec.poolName".into(), Some("tank".into()), "tank2".into())
        ]
    );
    let missing = [Candidate {
        volume: pv.clone(),
        claim: None,
        driver_object: Some(None),
        skippable: false,
    }];
    let r = refused(&missing, Want::Node("node-2".into()), &BTreeMap::new());
    assert!(r[0].starts_with("ZFSVolume pv-z was not found"), "{r:?}");
    // --topology with another key than the driver's: the owner is unknown.
    let object = json!({"metadata": {"name": "pv-z"}, "spec": {"ownerNodeID": "node-1"}});
    let c = [Candidate {
        volume: pv,
        claim: None,
        driver_object: Some(Some(object)),
        skippable: false,
    }];
    let r = refused(
        &c,
        Want::Topology {
            key: "pool".into(),
            value: "a".into(),
        },
        &BTreeMap::new(),
    );
    assert!(
        r.iter()
            .any(|r| r.contains("use --to-node, or --topology openebs.io/nodeid=NODE-ID")),
        "{r:?}"
    );
}

#[test]
fn all_from_node_finds_the_volumes_pinned_there_even_when_the_node_is_gone() {
    let volumes = [
        local_pv("pv-a", "node-1", None),
        local_pv("pv-b", "node-2", None),
        local_pv("pv-c", "node-1", None),
    ];
    let names = |found: Vec<PersistentVolume>| -> Vec<String> {
        found.into_iter().filter_map(|v| v.metadata.name).collect()
    };
    assert_eq!(names(pinned_to(&volumes, "node-1", None)), ["pv-a", "pv-c"]);
    // A node whose hostname label differs from its name.
    let renamed = node(
        "node-1",
        json!({"metadata": {"labels": {"kubernetes.io/hostname": "host-1"}}}),
    );
    assert!(pinned_to(&volumes, "node-1", Some(&renamed)).is_empty());
}

#[test]
fn a_volume_whose_claim_is_gone_is_refused_or_left_out_by_all_from_node() {
    let released = local_pv("pv-r", "node-1", Some("gone"));
    let explicit = [candidate(released.clone(), None)];
    let r = refused(&explicit, Want::Node("node-2".into()), &BTreeMap::new());
    assert!(r[0].contains("its claim prod/gone is gone"), "{r:?}");
    let mut found = candidate(released, None);
    found.skippable = true;
    let kept = candidate(local_pv("pv-a", "node-1", None), None);
    let p = plan(
        &[found, kept],
        &Want::Node("node-2".into()),
        None,
        &nodes(),
        &BTreeMap::new(),
    )
    .expect("the rest planned");
    assert_eq!(p.volumes.len(), 1);
    assert!(
        p.warnings[0].starts_with("left out: persistentvolume \"pv-r\""),
        "{:?}",
        p.warnings
    );
}

#[test]
fn a_topology_label_no_node_carries_is_refused() {
    let c = [candidate(local_pv("pv-a", "node-1", None), None)];
    let want = Want::Topology {
        key: "pool".into(),
        value: "tank".into(),
    };
    let r = refused(&c, want, &BTreeMap::new());
    assert_eq!(
        r,
        ["no schedulable node has the label pool=tank: the app's pods could not run anywhere"]
    );
}

#[test]
fn a_zonal_volume_is_not_pinned_to_a_node() {
    let zonal: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pv-zone"},
        "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["node-1"]}]}]}}},
    }))
    .expect("pv");
    assert!(pinned_to(&[zonal], "node-1", None).is_empty());
}
