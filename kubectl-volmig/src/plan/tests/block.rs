//! Block claims (`volumeMode: Block`): planned like Filesystem ones, into
//! a claim of the same mode, never converted, never shrunk.

use super::{spec, Cluster};
use crate::plan::{Refusal, VolumeMode};

/// The base cluster with the source claim and its volume in Block mode.
fn block_cluster() -> Cluster {
    let mut cluster = Cluster::with_destinations();
    let (claim, volume) = cluster.source();
    claim.spec.as_mut().expect("spec").volume_mode = Some("Block".into());
    volume.spec.as_mut().expect("spec").volume_mode = Some("Block".into());
    cluster
}

#[test]
fn a_block_claim_is_planned_into_a_new_block_claim() {
    let plan = block_cluster().plan(&spec("data-new"));
    assert_eq!(plan.source.volume_mode, VolumeMode::Block);
    assert_eq!(plan.destination.volume_mode, VolumeMode::Block);
    let claim = crate::resources::destination_claim(&plan);
    let mode = claim.spec.and_then(|s| s.volume_mode);
    assert_eq!(mode.as_deref(), Some("Block"));
    // The record keeps the mode; one written before it says nothing and
    // reads back as Filesystem.
    let yaml = serde_saphyr::to_string(&plan).expect("serialize");
    assert!(yaml.contains("volumeMode: Block"), "{yaml}");
    let back: crate::plan::Plan = serde_saphyr::from_str(&yaml).expect("deserialize");
    assert_eq!(back, plan);
    let old = Cluster::with_destinations().plan(&spec("data-new"));
    let yaml = serde_saphyr::to_string(&old).expect("serialize");
    assert!(!yaml.contains("volumeMode"), "{yaml}");
}

#[test]
fn a_block_claim_is_never_moved_into_a_filesystem_one_nor_the_reverse() {
    let mut to = spec("scratch");
    to.destination.reuse = true;
    let refusal = block_cluster().refuse(&to);
    assert!(
        matches!(refusal, Refusal::VolumeModeConversion { .. }),
        "{refusal:?}"
    );
    super::assert_says(
        &refusal.to_string(),
        &[
            "cannot move a Block claim into a Filesystem one",
            "shop/data is volumeMode Block",
            "persistentvolumeclaim \"scratch\" in namespace \"shop\" is Filesystem",
            "migrate into a new claim",
        ],
    );
    // The reverse: a Block claim to reuse for a Filesystem source.
    let mut cluster = Cluster::with_destinations();
    cluster
        .claim("scratch")
        .spec
        .as_mut()
        .expect("spec")
        .volume_mode = Some("Block".into());
    let refusal = cluster.refuse(&to);
    assert!(
        refusal
            .to_string()
            .starts_with("cannot move a Filesystem claim into a Block one"),
        "{refusal}"
    );
}

#[test]
fn a_block_claim_cannot_shrink_even_when_allowed() {
    let mut to = spec("data-new");
    to.destination.size = Some("5Gi".into());
    to.destination.allow_shrink = true;
    let refusal = block_cluster().refuse(&to);
    assert!(
        matches!(refusal, Refusal::BlockShrink { .. }),
        "{refusal:?}"
    );
    super::assert_says(
        &refusal.to_string(),
        &["a Block claim cannot shrink", "10Gi", "5Gi"],
    );
    // Growing is fine: the tail past the source is kept, or zeroed.
    to.destination.size = Some("20Gi".into());
    assert_eq!(block_cluster().plan(&to).destination.size, "20Gi");
}
