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
