use super::*;
use crate::plan::select::Selection;
use crate::record::{configmap, MigrationStatus};
use crate::spec::{ClaimRef, MigrationSpec};

fn member(key: u32, ns: &str, name: &str) -> Member {
    Member {
        key,
        operation: format!("db-x7k2p-{key}"),
        source: ClaimRef::new(ns, name),
        destination: ClaimRef::new(ns, &format!("{name}-migrated")),
    }
}

fn head() -> MigrationGroup {
    MigrationGroup::new(
        "db-x7k2p",
        "prod",
        Selection::Claims {
            names: vec!["a".into(), "b".into()],
        },
        vec![member(0, "prod", "a"), member(1, "staging", "b")],
        Parallelism::default(),
    )
}

fn claim(key: u32, phase: Phase) -> VolumeMigration {
    let m = member(key, "prod", "x");
    VolumeMigration {
        api_version: crate::record::API_VERSION.into(),
        kind: crate::record::KIND.into(),
        metadata: Metadata {
            name: m.operation.clone(),
            namespace: "prod".into(),
            group: Some(GroupRef {
                name: "db-x7k2p".into(),
                namespace: "prod".into(),
                key,
            }),
            ..Metadata::default()
        },
        spec: MigrationSpec::new(m.source, m.destination),
        status: MigrationStatus {
            phase,
            ..MigrationStatus::default()
        },
    }
}

#[test]
fn a_head_round_trips_through_its_config_map_and_says_how_many_claims() {
    let mut g = head();
    g.status.phase = Phase::Running;
    let cm = to_config_map(&g).expect("encodes");
    let labels = cm.metadata.labels.clone().expect("labels");
    assert_eq!(labels["volmig.io/component"], "operation");
    assert_eq!(labels["volmig.io/claims"], "2");
    assert_eq!(labels["volmig.io/phase"], "Running");
    assert_eq!(cm.data.as_ref().expect("data")["format"], "2");
    assert_eq!(from_config_map(&cm).expect("decodes"), g);
    // Not a claim's record, and a claim's record is not a head.
    assert!(configmap::from_config_map(&cm).is_err());
    let one = configmap::to_config_map(&claim(0, Phase::Running)).expect("encodes");
    assert!(from_config_map(&one).is_err());
}

#[test]
fn a_claims_record_keeps_its_set_in_its_labels() {
    let vm = claim(1, Phase::Pending);
    let cm = configmap::to_config_map(&vm).expect("encodes");
    let labels = cm.metadata.labels.clone().expect("labels");
    assert_eq!(labels["volmig.io/group"], "db-x7k2p");
    assert_eq!(labels["volmig.io/claim"], "1");
    let back = configmap::from_config_map(&cm).expect("decodes");
    assert_eq!(back.metadata.group, vm.metadata.group);
    assert_eq!(
        crate::names::members_selector("db-x7k2p"),
        "app.kubernetes.io/managed-by=kubectl-volmig,volmig.io/component=record,volmig.io/group=db-x7k2p"
    );
}

#[test]
fn the_sets_phase_follows_its_claims() {
    let view = |head: Phase, claims: &[Option<Phase>]| GroupView {
        group: MigrationGroup {
            status: GroupStatus {
                phase: head,
                ..GroupStatus::default()
            },
            ..head_of(claims.len())
        },
        members: (0u32..)
            .zip(claims)
            .map(|(k, p)| p.map(|p| claim(k, p)))
            .collect(),
    };
    use Phase::*;
    let cases: [(Phase, &[Option<Phase>], Phase); 9] = [
        (Running, &[Some(RolledBack), Some(RolledBack)], RolledBack),
        (Running, &[Some(RolledBack), Some(Succeeded)], Failed),
        (Pending, &[Some(Pending)], Pending),
        (Running, &[Some(Succeeded), Some(Running)], Running),
        (Running, &[Some(Succeeded), Some(Succeeded)], Succeeded),
        (Running, &[Some(Succeeded), Some(Failed)], Failed),
        (Running, &[Some(Failed), Some(Aborted)], Aborted),
        (Running, &[Some(Succeeded), None], Failed),
        (Aborted, &[Some(Running)], Aborted),
    ];
    for (head, claims, want) in cases {
        assert_eq!(view(head, claims).phase(), want, "{head:?} {claims:?}");
    }
    let mixed = view(
        Running,
        &[Some(Succeeded), Some(Running), Some(Succeeded), None],
    );
    assert_eq!(mixed.phases_text(), "2 Succeeded, 1 Running, 1 Missing");
}

fn head_of(n: usize) -> MigrationGroup {
    let mut g = head();
    g.spec.claims = (0..n as u32).map(|k| member(k, "prod", "x")).collect();
    g
}

#[test]
fn the_set_reads_as_its_selection_and_finds_a_claim_by_either_name() {
    let g = head();
    assert_eq!(g.source_text(), "claims a, b (2 claims)");
    assert_eq!(g.member("b").map(|m| m.key), Some(1));
    assert_eq!(g.member("db-x7k2p-0").map(|m| m.key), Some(0));
    assert!(g.member("c").is_none());
}
