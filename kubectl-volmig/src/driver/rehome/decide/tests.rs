//! The walk on a small model of the API server and the PV controller: a
//! volume walked forward ends rehomed with its claim bound and its policy
//! back; walked back from any point on the way, it ends as it was.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use serde_json::{json, Value};

use super::*;
use crate::driver::cutover::rebind::shape_of;
use crate::plan::rehome::drivers::{self, DriverObject};
use crate::plan::rehome::{rehomed, Target};
use crate::spec::ClaimRef;

fn original() -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": "pvc-1", "uid": "pv-uid-0"},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "zfs",
            "csi": {"driver": "zfs.csi.openebs.io", "volumeHandle": "pvc-1"},
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "prod", "name": "data", "uid": "claim-uid-0"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "openebs.io/nodeid", "operator": "In", "values": ["node-1"]}]}]}},
        },
        "status": {"phase": "Bound"},
    }))
    .expect("pv")
}

fn claim() -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "prod", "uid": "claim-uid-0", "labels": {"app": "db"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pvc-1", "storageClassName": "zfs",
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound"},
    }))
    .expect("claim")
}

fn zfs_volume() -> Value {
    json!({"apiVersion": "zfs.openebs.io/v1", "kind": "ZFSVolume",
           "metadata": {"name": "pvc-1", "namespace": "openebs", "resourceVersion": "1"},
           "spec": {"ownerNodeID": "node-1", "poolName": "tank"}})
}

fn rehome() -> VolumeRehome {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node-2",
        "labels": {"openebs.io/nodeid": "node-2"}}}))
    .expect("node");
    let target = Target::Node(&node);
    let pv = original();
    let kind = drivers::kind_of("zfs.csi.openebs.io").expect("zfs");
    let object: DriverObject =
        drivers::rewrite(kind, &zfs_volume(), "node-2", Some("tank2")).expect("rewrite");
    VolumeRehome {
        name: "pvc-1".into(),
        claim: Some(ClaimRef::new("prod", "data")),
        claim_shape: Some(shape_of(&claim())),
        selected_node: None,
        rehomed: rehomed(&pv, &target).expect("rehomed"),
        original: pv,
        policy: "Delete".into(),
        driver_objects: vec![object],
        change: None,
    }
}

/// The cluster as far as one volume's walk sees it, with the PV
/// controller's binding done at once.
#[derive(Debug, Clone)]
struct World {
    seen: Seen,
    uids: u32,
}

impl World {
    fn start() -> World {
        World {
            seen: Seen {
                volume: Some(original()),
                claim: Some(claim()),
                driver_objects: vec![Some(zfs_volume())],
            },
            uids: 0,
        }
    }

    fn uid(&mut self, what: &str) -> String {
        self.uids += 1;
        format!("{what}-uid-{}", self.uids)
    }

    fn apply(&mut self, v: &VolumeRehome, toward: Toward, action: &Action) {
        match action {
            Action::Retain | Action::RestorePolicy => {
                let policy = if *action == Action::Retain {
                    "Retain"
                } else {
                    v.policy.as_str()
                };
                let pv = self.seen.volume.as_mut().expect("pv");
                pv.spec
                    .as_mut()
                    .expect("spec")
                    .persistent_volume_reclaim_policy = Some(policy.into());
            }
            Action::DeleteClaim { uid } => {
                assert_eq!(
                    Some(uid),
                    self.seen
                        .claim
                        .as_ref()
                        .and_then(|c| c.metadata.uid.as_ref())
                );
                self.seen.claim = None;
                if let Some(pv) = self.seen.volume.as_mut() {
                    pv.status =
                        Some(serde_json::from_value(json!({"phase": "Released"})).expect("status"));
                }
            }
            Action::DeleteVolume { uid } => {
                assert_eq!(
                    Some(uid),
                    self.seen
                        .volume
                        .as_ref()
                        .and_then(|p| p.metadata.uid.as_ref())
                );
                assert!(self.seen.claim.is_none(), "a PV deleted under its claim");
                assert_eq!(
                    rebind::policy(self.seen.volume.as_ref().expect("pv")),
                    "Retain",
                    "a PV deleted while Delete"
                );
                self.seen.volume = None;
            }
            Action::CreateVolume => {
                // As the API server stores it: empty lists dropped.
                let mut json = serde_json::to_value(wanted(v, toward)).expect("json");
                drop_empty_lists(&mut json);
                let mut pv: PersistentVolume = serde_json::from_value(json).expect("pv");
                pv.metadata.uid = Some(self.uid("pv"));
                self.seen.volume = Some(pv);
            }
            Action::RewriteDriver(n) => {
                let patch = drivers::patch(&v.driver_objects[*n], toward == Toward::Old, None);
                let object = self.seen.driver_objects[*n].as_mut().expect("object");
                json_patch_merge(object, &patch);
            }
            Action::Bind(rebind::Action::CreateClaim) => {
                let uid = self.uid("claim");
                let mut c = claim();
                c.metadata.uid = Some(uid.clone());
                self.seen.claim = Some(c);
                let pv = self.seen.volume.as_mut().expect("pv");
                pv.spec
                    .as_mut()
                    .expect("spec")
                    .claim_ref
                    .as_mut()
                    .expect("claimRef")
                    .uid = Some(uid);
            }
            Action::Bind(rebind::Action::FreeVolume(_)) => {
                let pv = self.seen.volume.as_mut().expect("pv");
                pv.spec
                    .as_mut()
                    .expect("spec")
                    .claim_ref
                    .as_mut()
                    .expect("claimRef")
                    .uid = None;
            }
            other => panic!("the model does not expect {other:?}"),
        }
    }
}

fn drop_empty_lists(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|_, x| !matches!(x, Value::Array(a) if a.is_empty()));
            map.values_mut().for_each(drop_empty_lists);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_empty_lists),
        _ => {}
    }
}

fn json_patch_merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    json_patch_merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// Walks until Done; the kinds of the changes made, in order.
fn walk(world: &mut World, v: &VolumeRehome, toward: Toward) -> Vec<&'static str> {
    let mut kinds = Vec::new();
    for _ in 0..20 {
        let action = next(v, toward, &world.seen).expect("not blocked");
        if action == Action::Done {
            return kinds;
        }
        kinds.push(action.kind());
        world.apply(v, toward, &action);
    }
    panic!("no end after 20 changes: {kinds:?}");
}

fn assert_at(world: &World, v: &VolumeRehome, toward: Toward, owner: &str, pool: &str) {
    let pv = world.seen.volume.as_ref().expect("a PV");
    assert!(same_affinity(pv, &wanted(v, toward)));
    assert_eq!(rebind::policy(pv), "Delete", "the policy is put back");
    let claim = world.seen.claim.as_ref().expect("the claim");
    let bound_uid = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|r| r.uid.clone());
    assert_eq!(claim.metadata.uid, bound_uid, "the claim is the one bound");
    let object = world.seen.driver_objects[0].as_ref().expect("object");
    assert_eq!(drivers::read(object, &["spec", "ownerNodeID"]), Some(owner));
    assert_eq!(drivers::read(object, &["spec", "poolName"]), Some(pool));
}

#[test]
fn a_volume_walked_forward_is_rehomed_in_an_order_that_loses_nothing() {
    let v = rehome();
    let mut world = World::start();
    let kinds = walk(&mut world, &v, Toward::New);
    assert_eq!(
        kinds,
        [
            "Retain",
            "DeleteClaim",
            "DeleteVolume",
            "CreateVolume",
            "RewriteDriver",
            "CreateClaim",
            "RestorePolicy"
        ]
    );
    assert_at(&world, &v, Toward::New, "node-2", "tank2");
    // Walking again changes nothing.
    assert_eq!(next(&v, Toward::New, &world.seen), Ok(Action::Done));
}

#[test]
fn a_walk_stopped_anywhere_goes_back_to_the_original() {
    let v = rehome();
    for stop_after in 0..7 {
        let mut world = World::start();
        for _ in 0..stop_after {
            let action = next(&v, Toward::New, &world.seen).expect("not blocked");
            world.apply(&v, Toward::New, &action);
        }
        walk(&mut world, &v, Toward::Old);
        assert_at(&world, &v, Toward::Old, "node-1", "tank");
        // And forward again from there, as a second try would.
        walk(&mut world, &v, Toward::New);
        assert_at(&world, &v, Toward::New, "node-2", "tank2");
    }
}

#[test]
fn waits_are_named_and_strangers_stop_the_walk() {
    let v = rehome();
    let mut world = World::start();
    world.apply(&v, Toward::New, &Action::Retain);
    let claim = world.seen.claim.as_mut().expect("claim");
    claim.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::now(),
    ));
    assert_eq!(
        next(&v, Toward::New, &world.seen),
        Ok(Action::AwaitClaimGone)
    );

    // A claim of the name bound elsewhere is not deleted.
    let mut other = World::start();
    other.apply(&v, Toward::New, &Action::Retain);
    other
        .seen
        .claim
        .as_mut()
        .and_then(|c| c.spec.as_mut())
        .expect("spec")
        .volume_name = Some("pvc-9".into());
    assert!(matches!(
        next(&v, Toward::New, &other.seen),
        Err(Blocked::StrangerClaim { .. })
    ));

    // A PV pinned to neither end is someone else's.
    let mut stranger = World::start();
    let pv = stranger.seen.volume.as_mut().expect("pv");
    let terms = &mut pv
        .spec
        .as_mut()
        .and_then(|s| s.node_affinity.as_mut())
        .and_then(|a| a.required.as_mut())
        .expect("required")
        .node_selector_terms;
    terms[0].match_expressions.as_mut().expect("expressions")[0].values =
        Some(vec!["node-7".into()]);
    assert_eq!(
        next(&v, Toward::New, &stranger.seen),
        Err(Blocked::StrangerVolume("pvc-1".into()))
    );

    // A driver object that went away stops the walk once the PV is made.
    let mut gone = World::start();
    for _ in 0..4 {
        let action = next(&v, Toward::New, &gone.seen).expect("not blocked");
        gone.apply(&v, Toward::New, &action);
    }
    gone.seen.driver_objects[0] = None;
    assert!(matches!(
        next(&v, Toward::New, &gone.seen),
        Err(Blocked::DriverObjectGone(_))
    ));
}

#[test]
fn a_volume_pinned_by_topology_alone_is_recognised_once_stored() {
    // Rehomed to a label, the hostname requirement is dropped; a term of
    // only that requirement would be left empty, and the API server drops
    // empty lists: the walk must still know its own volume.
    let mut v = rehome();
    let terms = json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]);
    let spec = v.original.spec.as_mut().expect("spec");
    spec.node_affinity = Some(
        serde_json::from_value(json!({"required": {"nodeSelectorTerms": terms}}))
            .expect("affinity"),
    );
    let target = Target::Topology {
        key: "openebs.io/nodeid",
        value: "pool-a",
    };
    v.rehomed = rehomed(&v.original, &target).expect("rehomed");
    let term = &crate::plan::rehome::affinity(&v.rehomed)
        .expect("pinned")
        .node_selector_terms[0];
    assert_eq!(term.match_fields, None, "no empty list is sent");
    v.driver_objects.clear();
    let mut world = World::start();
    world.seen.volume = Some(v.original.clone());
    walk(&mut world, &v, Toward::New);
    walk(&mut world, &v, Toward::Old);
    assert!(same_affinity(
        world.seen.volume.as_ref().expect("pv"),
        &v.original
    ));
}

#[test]
fn a_claim_of_the_name_bound_elsewhere_is_never_deleted() {
    let v = rehome();
    let mut world = World::start();
    for _ in 0..4 {
        let action = next(&v, Toward::New, &world.seen).expect("not blocked");
        world.apply(&v, Toward::New, &action);
    }
    // The PV is made again; meanwhile someone made a claim of the name on
    // a volume of its own.
    let mut stranger = claim();
    stranger.metadata.uid = Some("someone".into());
    stranger.spec.as_mut().expect("spec").volume_name = Some("pvc-other".into());
    world.seen.driver_objects[0] =
        Some(json!({"spec": {"ownerNodeID": "node-2", "poolName": "tank2"}}));
    world.seen.claim = Some(stranger);
    assert!(matches!(
        next(&v, Toward::New, &world.seen),
        Err(Blocked::StrangerClaim { .. })
    ));
    assert!(matches!(
        next(&v, Toward::Old, &world.seen),
        Err(Blocked::StrangerClaim { .. })
    ));
}

#[test]
fn a_claimless_volume_bound_meanwhile_is_not_deleted() {
    let mut v = rehome();
    v.claim = None;
    let mut world = World::start();
    world.seen.claim = None;
    world.apply(&v, Toward::New, &Action::Retain);
    assert_eq!(
        next(&v, Toward::New, &world.seen),
        Err(Blocked::BoundMeanwhile("pvc-1".into()))
    );
}
