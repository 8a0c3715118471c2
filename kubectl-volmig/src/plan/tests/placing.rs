//! Where the sender and the receiver run, and the reasons given.

use k8s_openapi::api::core::v1::{EphemeralVolumeSource, Toleration, Volume};

use super::{assert_says, spec, time, Cluster};
use crate::plan::placement;

fn toleration(key: &str, value: &str, effect: &str) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Equal".into()),
        value: Some(value.into()),
        effect: Some(effect.into()),
        toleration_seconds: None,
    }
}

#[test]
fn a_read_write_once_source_in_use_puts_the_sender_by_the_running_app() {
    let mut cluster = Cluster::base();
    let sender = cluster.plan(&spec("data-new")).placement.sender;
    assert_eq!(sender.node.as_deref(), Some("node-2"));
    // The affinity matches the hostname label, which is not the node name.
    assert_eq!(sender.hostname.as_deref(), Some("db-host-2"));
    assert_eq!(sender.app_pod.as_deref(), Some("db-0"));
    let app_tolerations = cluster
        .pod("db-0")
        .spec
        .as_ref()
        .unwrap()
        .tolerations
        .clone();
    assert_eq!(Some(sender.tolerations), app_tolerations);
    assert_eq!(
        sender.reason,
        "ReadWriteOnce source in use by Running pod db-0 on node-2: the sender must run on the same node"
    );
}

#[test]
fn pending_beats_terminating_which_still_beats_nothing() {
    let mut cluster = Cluster::base();
    cluster.pod("db-0").metadata.deletion_timestamp = Some(time("2024-06-01T00:00:00Z"));
    let sender = cluster.plan(&spec("data-new")).placement.sender;
    assert_eq!(sender.app_pod.as_deref(), Some("db-backup-28611"));
    assert_eq!(
        (sender.node.as_deref(), sender.hostname.as_deref()),
        (Some("node-1"), Some("node-1"))
    );
    assert!(sender.tolerations.is_empty());
    assert_says(&sender.reason, &["Pending pod db-backup-28611 on node-1"]);

    cluster.remove_pod("db-backup-28611");
    let plan = cluster.plan(&spec("data-new"));
    assert_eq!(plan.placement.sender.app_pod.as_deref(), Some("db-0"));
    assert_says(
        &plan.placement.sender.reason,
        &["terminating pod db-0 on node-2"],
    );
    assert_eq!(plan.source.used_by, ["db-0"]);
}

#[test]
fn among_running_pods_the_oldest_then_the_first_by_name_wins() {
    let mut cluster = Cluster::base();
    let mut twin = cluster.pod("db-0").clone();
    twin.metadata.name = Some("db-1".into());
    twin.metadata.creation_timestamp = Some(time("2024-04-30T00:00:00Z"));
    twin.spec.as_mut().unwrap().node_name = Some("node-1".into());
    cluster.pods.push(twin);
    let chosen = |c: &Cluster| c.plan(&spec("data-new")).placement.sender.app_pod;
    assert_eq!(chosen(&cluster).as_deref(), Some("db-1"));

    let created = cluster.pod("db-0").metadata.creation_timestamp.clone();
    cluster.pod("db-1").metadata.creation_timestamp = created;
    assert_eq!(chosen(&cluster).as_deref(), Some("db-0"));
}

#[test]
fn a_shared_source_leaves_the_sender_to_the_scheduler() {
    for (mode, reason) in [
        (
            "ReadWriteMany",
            "the source is ReadWriteMany: any node can mount it",
        ),
        (
            "ReadOnlyMany",
            "the source is ReadOnlyMany: any node can mount it",
        ),
    ] {
        let mut cluster = Cluster::base();
        // The claim says nothing: its volume's modes count.
        cluster.source().0.spec.as_mut().unwrap().access_modes = None;
        cluster.source().1.spec.as_mut().unwrap().access_modes = Some(vec![mode.into()]);
        let sender = cluster.plan(&spec("data-new")).placement.sender;
        assert_eq!((sender.node, sender.app_pod), (None, None));
        assert!(sender.tolerations.is_empty());
        assert_eq!(sender.reason, reason);
    }
}

#[test]
fn an_unused_source_is_placed_by_the_scheduler_and_its_volume_s_affinity() {
    let mut cluster = Cluster::base();
    cluster.remove_pod("db-0");
    cluster.remove_pod("db-backup-28611");
    let sender = cluster.plan(&spec("data-new")).placement.sender;
    assert_eq!(sender.node, None);
    assert_says(
        &sender.reason,
        &["the source is not in use", "the scheduler chooses"],
    );

    // A node-local volume, pinned by hostname label: the reason names the node.
    let pinned = Cluster::with_destinations()
        .volume("pvc-77b1d0aa")
        .spec
        .clone()
        .unwrap();
    let mut affinity = pinned.node_affinity.unwrap();
    let term = &mut affinity.required.as_mut().unwrap().node_selector_terms[0];
    term.match_expressions.as_mut().unwrap()[0].values = Some(vec!["db-host-2".into()]);
    cluster.source().1.spec.as_mut().unwrap().node_affinity = Some(affinity);
    let sender = cluster.plan(&spec("data-new")).placement.sender;
    assert_eq!((sender.node, sender.hostname), (None, None));
    assert_says(
        &sender.reason,
        &["not in use", "pinned to node-2 by node affinity"],
    );
    // The volume's node is tainted: the sender must be allowed there.
    assert_eq!(
        sender.tolerations,
        [toleration("dedicated", "db", "NoSchedule")]
    );
}

#[test]
fn pods_not_yet_scheduled_do_not_pin_the_sender() {
    let mut cluster = Cluster::base();
    cluster.remove_pod("db-0");
    cluster
        .pod("db-backup-28611")
        .spec
        .as_mut()
        .unwrap()
        .node_name = None;
    let sender = cluster.plan(&spec("data-new")).placement.sender;
    assert_eq!(sender.node, None);
    assert_says(&sender.reason, &["db-backup-28611", "not scheduled yet"]);
}

#[test]
fn a_node_without_a_hostname_label_is_matched_by_name() {
    let mut cluster = Cluster::base();
    cluster.pod("db-0").spec.as_mut().unwrap().node_name = Some("node-3".into());
    let sender = cluster.plan(&spec("data-new")).placement.sender;
    assert_eq!(sender.hostname.as_deref(), Some("node-3"));

    // Nor does a node the lister did not return stop the placement.
    cluster.nodes.clear();
    let sender = cluster.plan(&spec("data-new")).placement.sender;
    assert_eq!(
        (sender.node.as_deref(), sender.hostname.as_deref()),
        (Some("node-3"), Some("node-3"))
    );
}

#[test]
fn to_node_pins_the_receiver_and_tolerates_the_node_s_own_taints() {
    let mut to = spec("data-new");
    to.destination.node = Some("node-2".into());
    let receiver = Cluster::base().plan(&to).placement.receiver;
    assert_eq!(receiver.node.as_deref(), Some("node-2"));
    assert_eq!(receiver.hostname.as_deref(), Some("db-host-2"));
    assert_eq!(
        receiver.tolerations,
        [toleration("dedicated", "db", "NoSchedule")]
    );
    assert_eq!(receiver.reason, "pinned to node-2 by --to-node");

    // Not a cordon: that says the node takes no new pods.
    to.destination.node = Some("node-3".into());
    let receiver = Cluster::base().plan(&to).placement.receiver;
    assert_eq!(
        receiver.tolerations,
        [toleration("dedicated", "batch", "NoExecute")]
    );
}

#[test]
fn the_receiver_otherwise_goes_where_the_scheduler_or_its_volume_says() {
    let receiver = Cluster::base().plan(&spec("data-new")).placement.receiver;
    assert_eq!((receiver.node, receiver.hostname), (None, None));
    assert_says(
        &receiver.reason,
        &["the scheduler chooses", "WaitForFirstConsumer"],
    );
}

#[test]
fn a_destination_volume_bound_to_a_node_takes_the_receiver_there() {
    let mut cluster = Cluster::with_destinations();
    let receiver = cluster.plan(&spec("data-local")).placement.receiver;
    // The scheduler honours the volume's affinity: no second pin.
    assert_eq!((receiver.node, receiver.hostname), (None, None));
    assert_eq!(
        receiver.reason,
        "destination volume pvc-77b1d0aa is bound to node-1 (node affinity): \
         the scheduler places the receiver there"
    );

    // Pinned by hostname label: the reason names the node, not the label.
    let affinity = cluster.volume("pvc-77b1d0aa").spec.as_mut().unwrap();
    let required = affinity.node_affinity.as_mut().unwrap().required.as_mut();
    required.unwrap().node_selector_terms[0]
        .match_expressions
        .as_mut()
        .unwrap()[0]
        .values = Some(vec!["db-host-2".into()]);
    let receiver = cluster.plan(&spec("data-local")).placement.receiver;
    assert_says(&receiver.reason, &["pvc-77b1d0aa is bound to node-2 "]);
}

#[test]
fn a_destination_claim_with_a_selected_node_takes_the_receiver_there() {
    let mut cluster = Cluster::with_destinations();
    let receiver = cluster.plan(&spec("data-wffc")).placement.receiver;
    assert_eq!((receiver.node, receiver.hostname), (None, None));
    assert_eq!(
        receiver.reason,
        "destination claim shop/data-wffc is bound to node-3 \
         (volume.kubernetes.io/selected-node): its volume is provisioned there, \
         and the scheduler places the receiver there"
    );

    // Bound to a volume any node mounts, a selected node ties nothing down.
    cluster
        .volume("pvc-77b1d0aa")
        .spec
        .as_mut()
        .unwrap()
        .node_affinity = None;
    let claim = cluster.claim("data-local");
    claim.metadata.annotations = Some(
        [(placement::SELECTED_NODE.to_string(), "node-1".to_string())]
            .into_iter()
            .collect(),
    );
    let receiver = cluster.plan(&spec("data-local")).placement.receiver;
    assert_eq!(
        receiver.reason,
        "destination volume pvc-77b1d0aa has no node affinity: the scheduler chooses"
    );
}

#[test]
fn a_generic_ephemeral_volume_mounts_its_pod_s_claim() {
    let mut cluster = Cluster::base();
    let pod = cluster.pod("web-6d9f");
    pod.spec.as_mut().unwrap().volumes = Some(vec![Volume {
        name: "cache".into(),
        ephemeral: Some(EphemeralVolumeSource::default()),
        ..Volume::default()
    }]);
    let users = |claim| {
        let users = placement::mounting_pods("shop", claim, &cluster.pods);
        users
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(users("web-6d9f-cache"), ["web-6d9f"]);
    assert!(users("web-6d9f").is_empty());
    assert!(users("cache").is_empty());
}
