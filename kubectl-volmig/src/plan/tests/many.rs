//! The plan of a set: each claim planned on its own, the set checked as a
//! whole.

use super::{assert_says, spec, Cluster};
use crate::plan::many::{ClaimPlanned, ManyPlan};
use crate::plan::select::Selection;
use crate::plan::{plan, Refusal};
use crate::spec::ClaimRef;

/// Each of `names` (claims of `shop`) planned as `migrate` plans a
/// claim of a set: `<name>-migrated`, operation `set-<key>`.
fn planned(cluster: &Cluster, names: &[&str]) -> Vec<ClaimPlanned> {
    (0u32..)
        .zip(names)
        .map(|(key, name)| {
            let mut spec = spec(&format!("{name}-migrated"));
            spec.source = ClaimRef::new("shop", name);
            ClaimPlanned {
                key,
                source: spec.source.clone(),
                why: "named".into(),
                outcome: plan(&spec, &format!("set-{key}"), &cluster.inputs(&spec)),
            }
        })
        .collect()
}

fn selection(names: &[&str]) -> Selection {
    Selection::Claims {
        names: names.iter().map(|n| n.to_string()).collect(),
    }
}

#[test]
fn a_refused_claim_among_accepted_ones_refuses_the_set_unless_skipped() {
    let cluster = Cluster::base();
    let names = ["data", "gone"];
    let many = ManyPlan::new("set", selection(&names), planned(&cluster, &names));
    let accepted: Vec<&str> = many
        .accepted()
        .map(|(c, _)| c.source.name.as_str())
        .collect();
    assert_eq!(accepted, ["data"]);
    assert_eq!(
        many.verdict(false),
        Err(Refusal::ClaimsRefused {
            refused: 1,
            total: 2
        })
    );
    assert_eq!(many.verdict(true), Ok(()));
    let text = many.text(2, 4);
    assert_says(
        &text,
        &[
            "operation set: claims data, gone (2 claims); 2 at once, at most 4 movers on a node",
            "shop/data  ",
            "-> shop/data-migrated",
            "shop/gone  REFUSED: ",
        ],
    );
    let refused = Refusal::ClaimsRefused {
        refused: 1,
        total: 2,
    };
    assert_says(
        &refused.to_string(),
        &["--skip-refused to move the other 1"],
    );
}

#[test]
fn nothing_left_to_move_is_refused_even_with_skip() {
    let cluster = Cluster::base();
    let names = ["gone", "also-gone"];
    let many = ManyPlan::new("set", selection(&names), planned(&cluster, &names));
    assert_eq!(many.verdict(true), Err(Refusal::NothingToMove { total: 2 }));
}

#[test]
fn two_claims_onto_one_destination_refuse_all_but_the_first() {
    let cluster = Cluster::base();
    let mut claims = planned(&cluster, &["data"]);
    let mut twin = claims[0].clone();
    twin.key = 1;
    twin.source = ClaimRef::new("other", "data");
    claims.push(twin);
    let many = ManyPlan::new("set", selection(&["data"]), claims);
    assert!(many.claims[0].outcome.is_ok());
    match &many.claims[1].outcome {
        Err(r @ Refusal::DuplicateDestination { sources, .. }) => {
            assert_eq!(sources, &["shop/data", "other/data"]);
            assert_says(
                &r.to_string(),
                &["\"data-migrated\"", "drop --to-namespace"],
            );
        }
        other => panic!("expected DuplicateDestination, got {other:?}"),
    }
}

/// `prod` of `many.yaml` as `select` reads it: StatefulSet `db` of three
/// replicas and its claims `data-db-0..3`.
fn prod() -> Vec<crate::plan::select::Found> {
    let cluster = Cluster::default().with(include_str!("../../../tests/fixtures/plan/many.yaml"));
    let here = |ns: Option<&str>| ns == Some("prod");
    vec![crate::plan::select::Found {
        namespace: "prod".into(),
        claims: (cluster.claims.iter())
            .filter(|c| here(c.metadata.namespace.as_deref()))
            .cloned()
            .collect(),
        volumes: Vec::new(),
        workloads: crate::plan::quiesce::Workloads {
            stateful_sets: (cluster.stateful_sets.iter())
                .filter(|s| here(s.metadata.namespace.as_deref()))
                .cloned()
                .collect(),
            ..Default::default()
        },
    }]
}

#[test]
fn a_cutover_of_some_replicas_of_a_statefulset_is_refused_naming_the_others() {
    use crate::plan::quiesce::{ScalableKind, ScaleTarget};
    let cluster = Cluster::base();
    let base = planned(&cluster, &["data"]).remove(0);
    let claim = |key: u32, name: &str| ClaimPlanned {
        key,
        source: ClaimRef::new("prod", name),
        why: "named".into(),
        outcome: base.outcome.clone().map(|mut p| {
            p.destination.name = format!("{name}-migrated");
            p
        }),
    };
    let stopped = |keys: &[u32]| {
        keys.iter()
            .map(|k| {
                let target = ScaleTarget {
                    kind: ScalableKind::StatefulSet,
                    name: "db".into(),
                    replicas: 3,
                    pods: vec![format!("db-{k}")],
                    autoscaler: None,
                };
                (*k, vec![target])
            })
            .collect()
    };
    let mut some = ManyPlan::new(
        "set",
        selection(&["data-db-0"]),
        vec![claim(0, "data-db-0")],
    );
    some.refuse_partial_statefulsets(&prod(), &stopped(&[0]));
    match &some.claims[0].outcome {
        Err(r @ Refusal::PartialStatefulSet { missing, .. }) => {
            // data-db-3 has no replica (ordinal 3 >= replicas 3): not needed.
            assert_eq!(missing, &["data-db-1", "data-db-2"]);
            assert_says(&r.to_string(), &["--workload statefulset/db"]);
        }
        other => panic!("expected PartialStatefulSet, got {other:?}"),
    }
    let names = ["data-db-0", "data-db-1", "data-db-2"];
    let all: Vec<ClaimPlanned> = (0u32..).zip(names).map(|(k, n)| claim(k, n)).collect();
    let mut whole = ManyPlan::new("set", selection(&names), all);
    whole.refuse_partial_statefulsets(&prod(), &stopped(&[0, 1, 2]));
    assert_eq!(whole.refused(), 0);
}
