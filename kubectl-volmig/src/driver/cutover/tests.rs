//! The cutover's pure parts: the rebind's next change from what the
//! cluster shows, walked through the swap as the PV controller answers,
//! and the step machine's decisions.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use serde_json::json;

use super::machine::{self, precopy_done};
use super::owner::{self, OwnerAction};
use super::rebind::{self, Action, Blocked, Observed};
use crate::record::cutover::{CutoverStatus, OwnerUpdate, PassKind, Round, Step};
use crate::spec::CutoverSpec;

fn claim(name: &str, uid: &str, volume: Option<&str>, phase: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid,
                     "labels": {"team": "db"},
                     "annotations": {"pv.kubernetes.io/bind-completed": "yes", "note": "kept"},
                     "finalizers": ["kubernetes.io/pvc-protection"]},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": volume,
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": phase},
    }))
    .expect("claim")
}

fn volume(
    name: &str,
    policy: &str,
    phase: &str,
    claim_ref: Option<(&str, Option<&str>)>,
) -> PersistentVolume {
    let claim_ref = claim_ref.map(|(n, uid)| json!({"namespace": "ns", "name": n, "uid": uid}));
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"persistentVolumeReclaimPolicy": policy, "storageClassName": "local",
                 "claimRef": claim_ref, "capacity": {"storage": "1Gi"}},
        "status": {"phase": phase},
    }))
    .expect("volume")
}

/// The cluster as the swap sees it: claim `data` (uid a) on `old`, the
/// temporary claim `tmp` (uid t) on `new`, both volumes Delete.
fn before_swap() -> Observed {
    Observed {
        claim: Some(claim("data", "a", Some("old"), "Bound")),
        remove: vec![("tmp".into(), Some(claim("tmp", "t", Some("new"), "Bound")))],
        target_name: "new".into(),
        target: Some(volume("new", "Delete", "Bound", Some(("tmp", Some("t"))))),
        keep: vec![
            (
                "old".into(),
                Some(volume("old", "Delete", "Bound", Some(("data", Some("a"))))),
            ),
            (
                "new".into(),
                Some(volume("new", "Delete", "Bound", Some(("tmp", Some("t"))))),
            ),
        ],
    }
}

/// What the cluster does with `action` (the API server and the PV
/// controller, as cutover-notes.md has them): the next observation.
fn answer(seen: &mut Observed, action: &Action) {
    let set_policy = |v: &mut Option<PersistentVolume>| {
        if let Some(spec) = v.as_mut().and_then(|v| v.spec.as_mut()) {
            spec.persistent_volume_reclaim_policy = Some("Retain".into());
        }
    };
    match action {
        Action::Retain(name) => {
            for (n, v) in seen.keep.iter_mut() {
                if n == name {
                    set_policy(v);
                }
            }
            if seen.target_name == *name {
                set_policy(&mut seen.target);
            }
        }
        Action::DeleteClaim { name, .. } => {
            // Deleted at once (no pod uses it); its volume goes Released,
            // keeping the old uid in claimRef.
            if seen.claim.as_ref().and_then(|c| c.metadata.name.as_deref()) == Some(name) {
                seen.claim = None;
            }
            for (n, c) in seen.remove.iter_mut() {
                if n == name {
                    *c = None;
                }
            }
            if let Some(status) = seen.target.as_mut().and_then(|v| v.status.as_mut()) {
                status.phase = Some("Released".into());
            }
        }
        Action::FreeVolume(_) => {
            let spec = seen
                .target
                .as_mut()
                .and_then(|v| v.spec.as_mut())
                .expect("spec");
            let r = spec.claim_ref.as_mut().expect("claimRef");
            r.name = Some("data".into());
            r.uid = None;
            seen.target
                .as_mut()
                .and_then(|v| v.status.as_mut())
                .expect("status")
                .phase = Some("Available".into());
        }
        Action::CreateClaim => {
            seen.claim = Some(claim("data", "b", Some("new"), "Pending"));
        }
        Action::AwaitBound => {
            seen.claim = Some(claim("data", "b", Some("new"), "Bound"));
            let spec = seen
                .target
                .as_mut()
                .and_then(|v| v.spec.as_mut())
                .expect("spec");
            spec.claim_ref.as_mut().expect("claimRef").uid = Some("b".into());
        }
        Action::AwaitClaimGone(_) | Action::Done => {}
    }
}

#[test]
fn the_swap_keeps_both_volumes_before_any_claim_goes_and_ends_bound() {
    let mut seen = before_swap();
    let mut done = Vec::new();
    for _ in 0..20 {
        let action = rebind::next("ns", "data", &seen).expect("no block");
        done.push(action.label());
        if action == Action::Done {
            break;
        }
        answer(&mut seen, &action);
    }
    assert_eq!(
        done,
        [
            "Retain old",
            "Retain new",
            "DeleteClaim tmp",
            "DeleteClaim data",
            "FreeVolume new",
            "CreateClaim",
            "AwaitBound",
            "Done"
        ]
    );
}

#[test]
fn every_point_of_the_swap_goes_on_from_what_the_cluster_shows() {
    // Replaying from each intermediate observation (a client that died
    // after any change) reaches the same end, and never deletes a claim
    // before both volumes are Retain.
    let mut seen = before_swap();
    let mut states = vec![seen.clone()];
    loop {
        let action = rebind::next("ns", "data", &seen).expect("no block");
        if action == Action::Done {
            break;
        }
        answer(&mut seen, &action);
        states.push(seen.clone());
    }
    for start in states {
        let mut seen = start;
        let mut retained = 0;
        for _ in 0..20 {
            let action = rebind::next("ns", "data", &seen).expect("no block");
            match &action {
                Action::Retain(_) => retained += 1,
                Action::DeleteClaim { .. } => assert!(
                    seen.keep
                        .iter()
                        .all(|(_, v)| v.as_ref().is_none_or(|v| rebind::policy(v) == "Retain")),
                    "a claim deleted before both volumes were Retain"
                ),
                Action::Done => break,
                _ => {}
            }
            answer(&mut seen, &action);
        }
        assert!(retained <= 2);
        let claim = seen.claim.as_ref().expect("claim");
        assert_eq!(
            claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
            Some("new")
        );
    }
}

#[test]
fn a_claim_terminating_is_waited_for_and_a_stranger_claim_blocks() {
    let mut seen = before_swap();
    for (_, v) in seen.keep.iter_mut() {
        v.as_mut()
            .and_then(|v| v.spec.as_mut())
            .expect("spec")
            .persistent_volume_reclaim_policy = Some("Retain".into());
    }
    seen.remove.clear();
    let mut terminating = claim("data", "a", Some("old"), "Bound");
    terminating.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
    );
    seen.claim = Some(terminating);
    assert_eq!(
        rebind::next("ns", "data", &seen),
        Ok(Action::AwaitClaimGone("data".into()))
    );
    seen.claim = Some(claim("data", "z", None, "Pending"));
    assert!(matches!(
        rebind::next("ns", "data", &seen),
        Err(Blocked::StrangerClaim { .. })
    ));
    // The target bound to some other claim that is not ours to remove.
    seen.claim = None;
    seen.target = Some(volume("new", "Retain", "Bound", Some(("other", Some("o")))));
    assert!(matches!(
        rebind::next("ns", "data", &seen),
        Err(Blocked::TargetTaken { .. })
    ));
    seen.target = None;
    assert_eq!(
        rebind::next("ns", "data", &seen),
        Err(Blocked::TargetGone("new".into()))
    );
}

#[test]
fn the_recreated_claim_keeps_the_users_metadata_but_not_the_binding() {
    let old = claim("data", "a", Some("old"), "Bound");
    let shape = rebind::shape_of(&old);
    assert_eq!(shape.labels.get("team").map(String::as_str), Some("db"));
    assert_eq!(
        shape.annotations.get("note").map(String::as_str),
        Some("kept")
    );
    assert!(!shape
        .annotations
        .contains_key("pv.kubernetes.io/bind-completed"));
    assert!(
        shape.finalizers.is_empty(),
        "pvc-protection is the admission plugin's"
    );
    let target = volume("new", "Retain", "Available", Some(("data", None)));
    let made = rebind::claim_for("ns", "data", &shape, &shape, &target);
    let spec = made.spec.expect("spec");
    assert_eq!(spec.volume_name.as_deref(), Some("new"));
    assert_eq!(
        spec.storage_class_name.as_deref(),
        Some("local"),
        "the volume's class"
    );
    assert!(made.metadata.uid.is_none() && made.metadata.resource_version.is_none());
    // A Block claim comes back a Block claim: the app's volumeDevices map
    // the new device at the same path.
    let mut block = old.clone();
    block.spec.as_mut().expect("spec").volume_mode = Some("Block".into());
    let shape = rebind::shape_of(&block);
    let made = rebind::claim_for("ns", "data", &shape, &shape, &target);
    let mode = made.spec.and_then(|s| s.volume_mode);
    assert_eq!(mode.as_deref(), Some("Block"));
}

fn round(seconds: f64) -> Round {
    Round {
        seconds,
        ..Round::default()
    }
}

#[test]
fn pre_copy_stops_when_a_round_fits_the_downtime_or_rounds_run_out() {
    let spec = CutoverSpec {
        max_downtime_seconds: 30,
        precopy_rounds: 3,
        commit: false,
        update_owner: false,
    };
    assert!(!precopy_done(&[], &spec), "at least one round");
    assert!(!precopy_done(&[round(600.0)], &spec));
    assert!(precopy_done(&[round(600.0), round(12.0)], &spec));
    assert!(precopy_done(
        &[round(600.0), round(300.0), round(200.0)],
        &spec
    ));
    let zero = CutoverSpec {
        max_downtime_seconds: 0,
        precopy_rounds: 2,
        commit: false,
        update_owner: false,
    };
    assert!(!precopy_done(&[round(0.5)], &zero));
    assert!(precopy_done(&[round(0.5), round(0.4)], &zero));
}

#[test]
fn rounds_copy_unverified_and_the_final_sync_verifies_with_delete() {
    let plan: crate::plan::Plan = serde_json::from_value(json!({
        "operation": "data-x7k2p",
        "spec": crate::spec::MigrationSpec::new(
            crate::spec::ClaimRef::new("ns", "data"),
            crate::spec::ClaimRef::new("ns", "data-migrated"),
        ),
        "source": {"volume": "old", "capacity": "1Gi", "capacityBytes": 1_u64 << 30,
                   "accessModes": ["ReadWriteOnce"]},
        "destination": {"namespace": "ns", "name": "data-migrated", "size": "1Gi",
                        "sizeBytes": 1_u64 << 30, "accessModes": ["ReadWriteOnce"], "action": "Create"},
        "placement": {"sender": {"reason": "any"}, "receiver": {"reason": "any"}},
    }))
    .expect("plan");
    let round = machine::pass_plan(&plan, PassKind::PreCopy);
    assert!(round.spec.transfer.delete && !round.spec.transfer.verify);
    let mut no_verify = plan.clone();
    no_verify.spec.transfer.verify = false;
    let last = machine::pass_plan(&no_verify, PassKind::FinalSync);
    assert!(last.spec.transfer.delete && last.spec.transfer.verify);

    // Rounds read a snapshot when the plan says so; the final sync and the
    // sync back read the volumes themselves.
    let mut snapshot = plan.clone();
    snapshot.source_method.method = crate::plan::Method::Snapshot;
    let round = machine::pass_plan(&snapshot, PassKind::PreCopy);
    assert_eq!(round.sender_claim(2), "volmig-data-x7k2p-read-2");
    for kind in [PassKind::FinalSync, PassKind::SyncBack] {
        let pass = machine::pass_plan(&snapshot, kind);
        assert_eq!(pass.sender_claim(7), "data", "{kind:?}");
    }
}

#[test]
fn rollback_syncs_back_only_after_the_app_ran_on_the_new_volume() {
    let now = Timestamp::now();
    let at = |step| CutoverStatus {
        step,
        ..CutoverStatus::default()
    };
    for step in [Step::PreCopy, Step::Quiesce, Step::FinalSync, Step::Swap] {
        let r = machine::rollback_request(&at(step), false, false, "asked", now).expect("allowed");
        assert!(!r.sync_back, "{step:?}");
        assert_eq!(r.from, step);
    }
    for step in [Step::Restore, Step::AwaitingCommit] {
        let r = machine::rollback_request(&at(step), false, false, "asked", now).expect("allowed");
        assert!(r.sync_back, "{step:?}");
        let r = machine::rollback_request(&at(step), true, false, "asked", now).expect("allowed");
        assert!(!r.sync_back, "--discard-new-writes");
    }
    assert!(machine::rollback_request(&at(Step::Committed), false, false, "x", now).is_err());
    assert!(machine::rollback_request(&at(Step::RolledBack), false, false, "x", now).is_err());
    // Asked again: the first request stands, --delete-new may be added.
    let mut c = at(Step::AwaitingCommit);
    c.rollback = machine::rollback_request(&c, false, false, "first", now).ok();
    let again = machine::rollback_request(&c, true, true, "second", now).expect("again");
    assert!(again.sync_back && again.delete_new);
    assert_eq!(again.reason, "first");
}

#[test]
fn abort_means_rollback_once_the_app_was_touched() {
    let mut c = CutoverStatus::default();
    assert!(!machine::abort_means_rollback(&c));
    c.step = Step::Quiesce;
    assert!(machine::abort_means_rollback(&c));
}

fn stateful_set(uid: &str, class: Option<&str>) -> k8s_openapi::api::apps::v1::StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "ns", "uid": uid, "labels": {"app": "db"},
                     "resourceVersion": "42"},
        "spec": {
            "replicas": 0, "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": []}},
            "volumeClaimTemplates": [
                {"metadata": {"name": "logs"}, "spec": {"storageClassName": "standard"}},
                {"metadata": {"name": "data"}, "spec": {"storageClassName": class}},
            ],
        },
        "status": {"replicas": 0},
    }))
    .expect("statefulset")
}

#[test]
fn the_template_that_made_a_claim_is_found_by_its_name() {
    let sts = stateful_set("u1", Some("standard"));
    assert_eq!(
        owner::template_of("data-db-0", &sts).as_deref(),
        Some("data")
    );
    assert_eq!(
        owner::template_of("logs-db-12", &sts).as_deref(),
        Some("logs")
    );
    assert_eq!(owner::template_of("data-db-", &sts), None);
    assert_eq!(owner::template_of("data-db-x", &sts), None);
    assert_eq!(owner::template_of("data-dbz-0", &sts), None);
    assert_eq!(
        owner::template_class(&sts, "data").as_deref(),
        Some("standard")
    );
}

#[test]
fn the_owner_is_deleted_orphaning_then_made_again_with_the_class_wanted() {
    let before = stateful_set("u1", Some("standard"));
    let update = OwnerUpdate {
        name: "db".into(),
        template: "data".into(),
        from_class: Some("standard".into()),
        to_class: Some("local".into()),
        original: owner::original_of(&before),
    };
    assert_eq!(
        owner::next(&update, Some("local"), Some(&before)),
        OwnerAction::Delete { uid: "u1".into() }
    );
    let mut going = before.clone();
    going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Timestamp::now(),
    ));
    assert_eq!(
        owner::next(&update, Some("local"), Some(&going)),
        OwnerAction::AwaitGone
    );
    let OwnerAction::Create(made) = owner::next(&update, Some("local"), None) else {
        panic!("created again");
    };
    assert_eq!(
        owner::template_class(&made, "data").as_deref(),
        Some("local")
    );
    assert_eq!(
        owner::template_class(&made, "logs").as_deref(),
        Some("standard")
    );
    assert!(made.metadata.uid.is_none() && made.metadata.resource_version.is_none());
    assert!(made.status.is_none());
    assert_eq!(
        made.spec.as_ref().map(|s| &s.selector),
        before.spec.as_ref().map(|s| &s.selector)
    );
    let after = stateful_set("u2", Some("local"));
    assert_eq!(
        owner::next(&update, Some("local"), Some(&after)),
        OwnerAction::Done
    );
    // Back: the new one goes, the old class comes back.
    assert_eq!(
        owner::next(&update, Some("standard"), Some(&after)),
        OwnerAction::Delete { uid: "u2".into() }
    );
}
