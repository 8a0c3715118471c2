//! The pods: what they mount, run and may do, and where.

use k8s_openapi::api::core::v1::Toleration;

use super::*;

#[test]
fn the_sender_reads_the_source_and_the_receiver_writes_the_destination() {
    let plan = plan();
    let sender = sender_pod(&plan, 1, &plan.placement.sender, "volmig-x:7000");
    let claim = volume(&sender, "data")
        .persistent_volume_claim
        .as_ref()
        .expect("claim");
    assert_eq!(sender.metadata.namespace.as_deref(), Some("app"));
    assert_eq!(claim.claim_name, "data");
    assert_eq!(claim.read_only, Some(true));
    assert_eq!(mount(&sender, "data"), ("/data".to_string(), true));

    let receiver = receiver_pod(&plan, 1);
    let claim = volume(&receiver, "data")
        .persistent_volume_claim
        .as_ref()
        .expect("claim");
    assert_eq!(receiver.metadata.namespace.as_deref(), Some("archive"));
    assert_eq!(claim.claim_name, "data-new");
    assert_ne!(claim.read_only, Some(true));
    assert_eq!(mount(&receiver, "data"), ("/data".to_string(), false));

    for pod in [&sender, &receiver] {
        assert_eq!(mount(pod, "tls"), ("/tls".to_string(), true));
        assert_eq!(mount(pod, "tmp"), ("/tmp".to_string(), false));
        assert!(volume(pod, "tmp").empty_dir.is_some());
    }
}

#[test]
fn a_shrinking_receiver_stops_once_the_source_does_not_fit() {
    let mut plan = plan();
    assert!(!args(&receiver_pod(&plan, 1)).contains(&"--capacity".to_string()));
    // --allow-shrink: 10Gi of source capacity into a 100Mi claim.
    plan.destination.size = "100Mi".to_string();
    plan.destination.size_bytes = 100 << 20;
    let args = args(&receiver_pod(&plan, 1));
    let at = args
        .iter()
        .position(|a| a == "--capacity")
        .expect("--capacity");
    assert_eq!(args[at + 1], (100u64 << 20).to_string());
}

#[test]
fn mover_resources_are_the_requested_quantities() {
    let mut plan = plan();
    plan.spec.mover.cpu_request = "250m".to_string();
    plan.spec.mover.memory_limit = "1Gi".to_string();
    let resources = mover(&receiver_pod(&plan, 1))
        .resources
        .clone()
        .expect("resources");
    let requests = resources.requests.expect("requests");
    assert_eq!(requests["cpu"].0, "250m");
    assert_eq!(requests["memory"].0, "64Mi");
    assert_eq!(resources.limits.expect("limits")["memory"].0, "1Gi");
}

#[test]
fn receiver_arguments_listen_on_the_pod_ip() {
    let receiver = receiver_pod(&plan(), 2);
    let container = mover(&receiver);
    assert_eq!(
        args(&receiver),
        strings(&[
            "receive",
            "--listen",
            "$(POD_IP):7000",
            "--root",
            "/data",
            "--tls-dir",
            "/tls",
            "--attempt",
            "2",
            "--progress",
            "json",
        ])
    );
    assert!(
        container.command.is_none(),
        "the image's entrypoint is the mover"
    );
    let env = &container.env.as_ref().expect("env")[0];
    assert_eq!(env.name, "POD_IP");
    let field = env.value_from.as_ref().and_then(|f| f.field_ref.as_ref());
    assert_eq!(field.map(|f| f.field_path.as_str()), Some("status.podIP"));
    let port = &container.ports.as_ref().expect("ports")[0];
    assert_eq!(
        (port.container_port, port.name.as_deref()),
        (7000, Some("mover"))
    );
}

#[test]
fn sender_arguments_follow_the_transfer_options() {
    let mut plan = plan();
    let base = strings(&[
        "send",
        "--to",
        "10.0.0.7:7000",
        "--connect-retry",
        "30",
        "--root",
        "/data",
        "--tls-dir",
        "/tls",
        "--attempt",
        "1",
        "--progress",
        "json",
    ]);
    let sender = |plan: &Plan| {
        args(&sender_pod(
            plan,
            1,
            &plan.placement.sender,
            "10.0.0.7:7000",
        ))
    };
    assert_eq!(sender(&plan), base);

    plan.spec.transfer = TransferOptions {
        delete: true,
        compress: true,
        verify: true,
        bwlimit: Some("20M".to_string()),
        ..TransferOptions::default()
    };
    let mut all = base.clone();
    all.extend(strings(&["--verify", "--delete", "-z", "--bwlimit", "20M"]));
    assert_eq!(sender(&plan), all);

    plan.spec.transfer.delete = false;
    plan.spec.transfer.bwlimit = None;
    let mut some = base;
    some.extend(strings(&["--verify", "-z"]));
    assert_eq!(sender(&plan), some);
}

#[test]
fn each_pod_mounts_only_its_own_key() {
    let plan = plan();
    let sender = sender_pod(&plan, 1, &plan.placement.sender, "x:7000");
    let receiver = receiver_pod(&plan, 1);
    assert_eq!(
        secret_items(&sender),
        strings(&["ca.crt", "operation-id", "sender.crt", "sender.key"])
    );
    assert_eq!(
        secret_items(&receiver),
        strings(&["ca.crt", "operation-id", "receiver.crt", "receiver.key"])
    );
}

#[test]
fn placement_is_a_required_hostname_affinity_never_node_name() {
    let mut plan = plan();
    plan.placement.sender.tolerations = vec![Toleration {
        key: Some("dedicated".to_string()),
        operator: Some("Equal".to_string()),
        value: Some("db".to_string()),
        effect: Some("NoSchedule".to_string()),
        toleration_seconds: None,
    }];
    let sender = sender_pod(&plan, 1, &plan.placement.sender, "x:7000");
    let term = &spec(&sender)
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .expect("required node affinity")
        .node_selector_terms[0];
    let req = &term.match_expressions.as_ref().expect("expressions")[0];
    assert_eq!(req.key, "kubernetes.io/hostname");
    assert_eq!(req.operator, "In");
    assert_eq!(req.values, Some(strings(&["host-a"])));
    assert!(spec(&sender).node_name.is_none());
    assert!(spec(&sender).node_selector.is_none());
    assert_eq!(
        spec(&sender).tolerations,
        Some(plan.placement.sender.tolerations.clone())
    );
    assert_eq!(
        sender.metadata.annotations.as_ref().expect("annotations")[PLACEMENT_REASON_ANNOTATION],
        "the source is mounted by web-0 on node-a"
    );

    // Without a known hostname label, the node's name is the best guess.
    let moved = placement(Some("node-b"), None, "the app moved");
    let sender = sender_pod(&plan, 2, &moved, "x:7000");
    let values = spec(&sender)
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .and_then(|s| s.node_selector_terms[0].match_expressions.as_ref())
        .map(|e| e[0].values.clone());
    assert_eq!(values, Some(Some(strings(&["node-b"]))));
    assert!(spec(&sender).tolerations.is_none());

    let receiver = receiver_pod(&plan, 1);
    assert!(spec(&receiver).affinity.is_none());
    assert!(spec(&receiver).node_name.is_none());
}

#[test]
fn pods_are_locked_down_to_their_sides_capabilities() {
    let plan = plan();
    let sender = sender_pod(&plan, 1, &plan.placement.sender, "x:7000");
    let receiver = receiver_pod(&plan, 1);
    for (pod, add) in [
        (&sender, strings(&["DAC_OVERRIDE"])),
        (
            &receiver,
            strings(&["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD"]),
        ),
    ] {
        let spec = spec(pod);
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.enable_service_links, Some(false));
        let pod_security = spec
            .security_context
            .as_ref()
            .expect("pod security context");
        assert_eq!(
            pod_security
                .seccomp_profile
                .as_ref()
                .map(|p| p.type_.as_str()),
            Some("RuntimeDefault")
        );
        assert!(
            pod_security.fs_group.is_none(),
            "fsGroup would re-own the volume"
        );

        let container = mover(pod);
        assert_eq!(
            container.image.as_deref(),
            Some("registry.example/mover:1.2.3")
        );
        assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
        let security = container
            .security_context
            .as_ref()
            .expect("security context");
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(security.read_only_root_filesystem, Some(true));
        assert_eq!(security.run_as_user, Some(0));
        assert_eq!(security.run_as_non_root, Some(false));
        assert_ne!(security.privileged, Some(true));
        let caps = security.capabilities.as_ref().expect("capabilities");
        assert_eq!(caps.drop, Some(strings(&["ALL"])));
        assert_eq!(caps.add, Some(add));

        let resources = container.resources.as_ref().expect("resources");
        let requests = resources.requests.as_ref().expect("requests");
        assert_eq!(requests["cpu"].0, "100m");
        assert_eq!(requests["memory"].0, "64Mi");
        assert_eq!(
            resources.limits.as_ref().expect("limits")["memory"].0,
            "512Mi"
        );
    }
}

#[test]
fn restricted_movers_run_as_the_app_with_no_capability_and_only_its_own_fs_group() {
    use crate::plan::security::{Identity, MoverSecurity, Profile};
    let mut plan = plan();
    plan.security = MoverSecurity {
        profile: Profile::Restricted,
        reason: "namespace app enforces it".into(),
        identity: Some(Identity {
            uid: 1000,
            gid: Some(2000),
            fs_group: None,
            supplemental_groups: vec![3000],
            from: "--run-as".into(),
        }),
    };
    let sender = sender_pod(&plan, 1, &plan.placement.sender, "x:7000");
    let receiver = receiver_pod(&plan, 1);
    for (pod, fs_group, tls) in [(&sender, None, 0o444), (&receiver, Some(2000), 0o440)] {
        let spec = spec(pod);
        let ps = spec
            .security_context
            .as_ref()
            .expect("pod security context");
        // The sender may not re-own the source: no fsGroup the app has not.
        assert_eq!(ps.fs_group, fs_group);
        assert_eq!(ps.supplemental_groups, Some(vec![3000]));
        assert_eq!(
            ps.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
            Some("RuntimeDefault")
        );
        let c = mover(pod)
            .security_context
            .as_ref()
            .expect("security context");
        assert_eq!((c.run_as_user, c.run_as_group), (Some(1000), Some(2000)));
        assert_eq!(c.run_as_non_root, Some(true));
        assert_eq!(c.allow_privilege_escalation, Some(false));
        let caps = c.capabilities.as_ref().expect("capabilities");
        assert_eq!(caps.drop, Some(strings(&["ALL"])));
        assert_eq!(caps.add, None);
        let tls_volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "tls")
            .and_then(|v| v.secret.as_ref())
            .expect("tls");
        assert_eq!(tls_volume.default_mode, Some(tls));
    }
    // With the app's own fsGroup, both sides have it, cheaply.
    if let Some(id) = plan.security.identity.as_mut() {
        id.fs_group = Some(4000);
    }
    let sender = sender_pod(&plan, 1, &plan.placement.sender, "x:7000");
    let ps = spec(&sender)
        .security_context
        .clone()
        .expect("pod security context");
    assert_eq!(ps.fs_group, Some(4000));
    assert_eq!(ps.fs_group_change_policy.as_deref(), Some("OnRootMismatch"));
}

#[test]
fn a_wiping_receiver_and_the_inspector_run_what_they_say() {
    let plan = plan();
    let mut receiver = receiver_pod(&plan, 4);
    wipe_first(&mut receiver);
    assert!(args(&receiver).iter().any(|a| a == "--wipe"));
    assert!(!args(&receiver_pod(&plan, 4)).iter().any(|a| a == "--wipe"));

    let inspector = inspect_pod(&plan);
    assert_eq!(
        inspector.metadata.name.as_deref(),
        Some(crate::names::inspect_pod_name(&plan.operation).as_str())
    );
    assert_eq!(args(&inspector), ["inspect", "--root", "/data"]);
    // It reads the destination, never writes it.
    assert_eq!(mount(&inspector, "data"), ("/data".to_string(), true));
    let claim = volume(&inspector, "data")
        .persistent_volume_claim
        .as_ref()
        .expect("claim");
    assert_eq!(claim.claim_name, "data-new");
}

#[test]
fn the_inspector_reads_the_source_beside_the_destination_where_one_pod_can() {
    // The fixture's claims are in two namespaces: no pod mounts both.
    let apart = plan();
    assert_eq!(source_beside(&apart), Err("they are in two namespaces"));
    assert!(!args(&inspect_pod(&apart)).iter().any(|a| a == "--against"));

    let mut plan = plan();
    plan.destination.namespace = plan.spec.source.namespace.clone();
    plan.placement.sender.tolerations = vec![Toleration {
        key: Some("dedicated".to_string()),
        operator: Some("Exists".to_string()),
        ..Toleration::default()
    }];
    let inspector = inspect_pod(&plan);
    assert_eq!(
        args(&inspector),
        ["inspect", "--root", "/data", "--against", "/source"]
    );
    assert_eq!(mount(&inspector, "data"), ("/data".to_string(), true));
    assert_eq!(mount(&inspector, "source"), ("/source".to_string(), true));
    let source = volume(&inspector, "source")
        .persistent_volume_claim
        .as_ref()
        .expect("claim");
    assert_eq!(
        (source.claim_name.as_str(), source.read_only),
        ("data", Some(true))
    );
    // Where the sender would run (next to the app that holds the source),
    // with what it tolerates there.
    let pinned = spec(&inspector)
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    let term = &pinned
        .expect("affinity")
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .expect("required")
        .node_selector_terms[0];
    let values = term.match_expressions.as_ref().expect("expressions")[0]
        .values
        .clone();
    assert_eq!(values, Some(vec!["host-a".to_string()]));
    assert_eq!(spec(&inspector).tolerations.as_ref().map(Vec::len), Some(1));

    // Pinned to two nodes, or reading a snapshot made later: apart.
    let mut two = plan.clone();
    two.placement.receiver.node = Some("node-b".to_string());
    assert_eq!(source_beside(&two), Err("they are pinned to two nodes"));
    let mut snap = plan.clone();
    snap.source_method.method = crate::plan::Method::Snapshot;
    assert!(source_beside(&snap).is_err());
    assert!(!args(&inspect_pod(&snap)).iter().any(|a| a == "--against"));
}

#[test]
fn block_movers_map_the_device_and_add_no_capability() {
    let mut plan = plan();
    plan.source.volume_mode = crate::plan::VolumeMode::Block;
    plan.destination.volume_mode = crate::plan::VolumeMode::Block;
    plan.spec.transfer.delete = true;
    plan.spec.transfer.verify = true;
    let sender = sender_pod(&plan, 2, &plan.placement.sender, "volmig-x:7000");
    let receiver = receiver_pod(&plan, 2);
    for (pod, side) in [(&sender, "sender"), (&receiver, "receiver")] {
        let c = mover(pod);
        let devices = c.volume_devices.as_ref().expect("volumeDevices");
        assert_eq!(
            (devices[0].name.as_str(), devices[0].device_path.as_str()),
            ("data", DEVICE_PATH),
            "{side}"
        );
        // No mount of the claim: the kubelet refuses a Block claim in volumeMounts.
        assert!(
            !c.volume_mounts.iter().flatten().any(|m| m.name == "data"),
            "{side}"
        );
        let a = args(pod);
        let root = a.iter().position(|x| x == "--root").expect("--root");
        assert_eq!(a[root + 1], DEVICE_PATH, "{side}");
        assert!(a.iter().any(|x| x == "--block"), "{side}: {a:?}");
        let caps = c
            .security_context
            .as_ref()
            .and_then(|s| s.capabilities.as_ref());
        let added = caps.and_then(|c| c.add.clone()).unwrap_or_default();
        assert!(added.is_empty(), "{side} adds {added:?}");
    }
    // The sender reads through a read-only claim, and deletes nothing.
    let claim = volume(&sender, "data")
        .persistent_volume_claim
        .as_ref()
        .expect("claim");
    assert_eq!(claim.read_only, Some(true));
    assert!(!args(&sender).iter().any(|a| a == "--delete"));
    assert!(args(&sender).iter().any(|a| a == "--verify"));
    // The receiver keeps its checkpoint in its tmp emptyDir.
    let r = args(&receiver);
    let at = r
        .iter()
        .position(|x| x == "--state-dir")
        .expect("--state-dir");
    assert!(r[at + 1].starts_with("/tmp/"), "{r:?}");
    // The inspector reads the device through a read-only claim.
    let inspector = inspect_pod(&plan);
    assert_eq!(
        args(&inspector)[..3],
        ["inspect".to_string(), "--root".into(), DEVICE_PATH.into()]
    );
    let claim = volume(&inspector, "data")
        .persistent_volume_claim
        .as_ref()
        .expect("claim");
    assert_eq!(claim.read_only, Some(true));
    assert!(source_beside(&plan).is_err());
}

#[test]
fn a_block_receiver_takes_a_seed_and_is_never_wiped() {
    let mut plan = plan();
    plan.source.volume_mode = crate::plan::VolumeMode::Block;
    let mut receiver = receiver_pod(&plan, 3);
    seed_checkpoint(&mut receiver, "Vk9MTUlH");
    wipe_first(&mut receiver);
    let a = args(&receiver);
    let at = a
        .iter()
        .position(|x| x == "--checkpoint-seed")
        .expect("seed");
    assert_eq!(a[at + 1], "Vk9MTUlH");
    assert!(!a.iter().any(|x| x == "--wipe"));
    // A tree receiver has no use for a seed.
    let mut tree = receiver_pod(&super::plan(), 3);
    seed_checkpoint(&mut tree, "Vk9MTUlH");
    assert!(!args(&tree).iter().any(|x| x == "--checkpoint-seed"));
}
