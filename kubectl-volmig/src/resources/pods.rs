//! The mover pods of one attempt: the receiver on the destination claim,
//! the sender on the source claim.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectFieldSelector,
    PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, ResourceRequirements,
    SeccompProfile, SecretVolumeSource, SecurityContext, Toleration, Volume, VolumeDevice,
    VolumeMount,
};
use mover::tls::Role;

use super::keys::items_for;
use super::service::PORT_NAME;
use super::{metadata, string_map};
use crate::names::{self, Component};
use crate::plan::security::{MoverSecurity, Profile};
use crate::plan::{self, NodePlacement, Placement, Plan};

/// On a mover pod: why it runs where it runs, in words.
pub const PLACEMENT_REASON_ANNOTATION: &str = "volmig.io/placement-reason";

/// The node label the placement's required affinity matches.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Seconds the sender keeps trying to reach the receiver's Service.
const CONNECT_RETRY: &str = "30";

/// The mover container's name in both pods.
pub const CONTAINER: &str = "mover";
const DATA_DIR: &str = "/data";
/// Where a Block claim's device is mapped in both mover pods.
pub const DEVICE_PATH: &str = "/dev/volmig-data";
/// Where a block receiver keeps its checkpoint: in the pod's `tmp`
/// emptyDir (writable under a read-only root file system).
const BLOCK_STATE_DIR: &str = "/tmp/volmig-state";
/// Where the inspector mounts the source, when it can.
const SOURCE_DIR: &str = "/source";
const TLS_DIR: &str = "/tls";
/// Key files are readable by their owner (root) only.
const TLS_MODE: i32 = 0o400;
/// Time for the receiver to write its final checkpoint after SIGTERM.
const GRACE_SECONDS: i64 = 30;

/// The receiver may recreate any owner, mode, time and special file.
const RECEIVER_CAPABILITIES: &[&str] = &["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD"];
/// The sender must read every file and directory whatever its mode.
/// DAC_OVERRIDE and not DAC_READ_SEARCH: on the read-only mount it grants
/// the same reads, it is allowed by the Pod Security "baseline" profile
/// (DAC_READ_SEARCH is not), and it does not open `open_by_handle_at`, the
/// classic way out of a container.
const SENDER_CAPABILITIES: &[&str] = &["DAC_OVERRIDE"];

/// The receiver pod of `attempt`, in the destination namespace, on the
/// destination claim (read-write), where `plan.placement.receiver` says. It
/// listens on [`names::MOVER_PORT`] of its pod IP.
/// Makes `receiver` empty its destination before it serves (`mover
/// receive --wipe`): an attempt after `--reuse-limit` failures on the
/// destination's data. A block receiver compares every block anyway: it
/// starts over without its checkpoint seed, and wipes nothing.
pub fn wipe_first(receiver: &mut Pod) {
    let containers = receiver.spec.as_mut().map(|s| &mut s.containers);
    for c in containers
        .into_iter()
        .flatten()
        .filter(|c| c.name == CONTAINER)
    {
        let args = c.args.get_or_insert_with(Vec::new);
        if !args.iter().any(|a| a == "--block") {
            args.push("--wipe".to_string());
        }
    }
}

/// Gives a Block receiver the checkpoint an earlier receiver told
/// (`--checkpoint-seed`): its state directory went with its pod.
pub fn seed_checkpoint(receiver: &mut Pod, data: &str) {
    let containers = receiver.spec.as_mut().map(|s| &mut s.containers);
    for c in containers
        .into_iter()
        .flatten()
        .filter(|c| c.name == CONTAINER)
    {
        let args = c.args.get_or_insert_with(Vec::new);
        if args.iter().any(|a| a == "--block") {
            args.extend(["--checkpoint-seed".to_string(), data.to_string()]);
        }
    }
}

/// A pod that runs `mover inspect` on the destination claim (read-only)
/// and exits: what a reused destination holds, before the first attempt.
/// Where [`source_beside`] allows, it mounts the source too (read-only,
/// at `/source`) and quick-checks the destination against it. Placed as
/// the receiver, or as the sender when it reads the source; labelled as a
/// receiver of no attempt (0), so that the driver's sweeps remove it with
/// the rest.
pub fn inspect_pod(plan: &Plan) -> Pod {
    let beside = source_beside(plan);
    let mut pod = receiver_pod(plan, 0);
    pod.metadata.name = Some(names::inspect_pod_name(&plan.operation));
    let block = plan.source.volume_mode.is_block();
    let root = if block { DEVICE_PATH } else { DATA_DIR };
    let mut args = ["inspect", "--root", root].map(String::from).to_vec();
    if block {
        args.extend(["--state-dir", BLOCK_STATE_DIR].map(String::from));
        // The device is only read: the claim says so.
        let volumes = pod.spec.as_mut().and_then(|s| s.volumes.as_mut());
        for v in volumes.into_iter().flatten().filter(|v| v.name == "data") {
            if let Some(claim) = v.persistent_volume_claim.as_mut() {
                claim.read_only = Some(true);
            }
        }
    }
    if beside.is_ok() {
        args.extend(["--against", SOURCE_DIR].map(String::from));
    }
    for c in pod.spec.iter_mut().flat_map(|s| s.containers.iter_mut()) {
        c.args = Some(args.clone());
        c.ports = None;
        c.env = None;
        for m in c.volume_mounts.iter_mut().flatten() {
            if m.mount_path == DATA_DIR {
                m.read_only = Some(true);
            }
        }
        if beside.is_ok() {
            c.volume_mounts
                .get_or_insert_with(Vec::new)
                .push(VolumeMount {
                    name: "source".to_string(),
                    mount_path: SOURCE_DIR.to_string(),
                    read_only: Some(true),
                    ..VolumeMount::default()
                });
        }
    }
    if let (Ok(placement), Some(spec)) = (beside, pod.spec.as_mut()) {
        spec.volumes.get_or_insert_with(Vec::new).push(Volume {
            name: "source".to_string(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: plan.spec.source.name.clone(),
                read_only: Some(true),
            }),
            ..Volume::default()
        });
        spec.affinity = affinity(placement);
        spec.tolerations = merged_tolerations(plan);
        if let Some(annotations) = pod.metadata.annotations.as_mut() {
            annotations.insert(
                PLACEMENT_REASON_ANNOTATION.to_string(),
                placement.reason.clone(),
            );
        }
    }
    pod
}

/// Where one pod can read the source beside the destination, or why no
/// pod can: a pod mounts claims of its own namespace only, a snapshot or
/// clone to read does not exist yet, and a source and a destination
/// pinned to two nodes cannot meet.
pub fn source_beside(plan: &Plan) -> Result<&NodePlacement, &'static str> {
    if plan.source.volume_mode.is_block() {
        return Err("a device's blocks are compared as they are copied");
    }
    if plan.spec.source.namespace != plan.destination.namespace {
        return Err("they are in two namespaces");
    }
    if plan.source_method.method.reads_copy() {
        return Err("the source is read from a copy made at the first attempt");
    }
    let Placement { sender, receiver } = &plan.placement;
    match (&sender.node, &receiver.node) {
        (Some(a), Some(b)) if a != b => Err("they are pinned to two nodes"),
        (Some(_), _) => Ok(sender),
        (None, _) => Ok(receiver),
    }
}

/// Both sides' tolerations, once each: the inspector runs where either
/// might have to.
fn merged_tolerations(plan: &Plan) -> Option<Vec<Toleration>> {
    let mut all = plan.placement.receiver.tolerations.clone();
    for t in &plan.placement.sender.tolerations {
        if !all.contains(t) {
            all.push(t.clone());
        }
    }
    (!all.is_empty()).then_some(all)
}

pub fn receiver_pod(plan: &Plan, attempt: u32) -> Pod {
    let listen = format!("$(POD_IP):{}", names::MOVER_PORT);
    let mut container = container(
        plan,
        Role::Receiver,
        attempt,
        ["receive", "--listen", &listen],
    );
    // A destination smaller than the source's capacity (--allow-shrink):
    // the receiver stops as soon as the files listed do not fit, rather
    // than when the disk is full.
    if plan.destination.size_bytes < plan.source.capacity_bytes {
        let args = container.args.get_or_insert_with(Vec::new);
        args.extend([
            "--capacity".to_string(),
            plan.destination.size_bytes.to_string(),
        ]);
    }
    listens_on(&mut container, names::MOVER_PORT);
    pod(
        plan,
        Role::Receiver,
        attempt,
        &plan.destination.namespace,
        &plan.destination.name,
        &plan.placement.receiver,
        container,
    )
}

/// The sender pod of `attempt`, in the source namespace, on the source
/// claim (read-only, at the volume and at the mount), placed by
/// `placement` (the driver re-places it when the app moves), sending to
/// `receiver_address` (`HOST:PORT`).
pub fn sender_pod(
    plan: &Plan,
    attempt: u32,
    placement: &NodePlacement,
    receiver_address: &str,
) -> Pod {
    let container = container(
        plan,
        Role::Sender,
        attempt,
        // The receiver listens before the sender is created, but a Service
        // endpoint may take a moment to follow.
        [
            "send",
            "--to",
            receiver_address,
            "--connect-retry",
            CONNECT_RETRY,
        ],
    );
    sender_with(plan, attempt, placement, container)
}

/// The sender pod of `attempt` for the tunnel (issue 23): it listens on
/// its pod IP at [`names::SENDER_PORT`], where the plugin's port forward
/// brings the receiver's connection.
pub fn listening_sender_pod(plan: &Plan, attempt: u32, placement: &NodePlacement) -> Pod {
    let listen = format!("$(POD_IP):{}", names::SENDER_PORT);
    let mut container = container(plan, Role::Sender, attempt, ["send", "--listen", &listen]);
    listens_on(&mut container, names::SENDER_PORT);
    sender_with(plan, attempt, placement, container)
}

/// A mover that listens on its pod IP (the downward API's `POD_IP`) at
/// `port`, named [`PORT_NAME`].
fn listens_on(container: &mut Container, port: i32) {
    container.env = Some(vec![EnvVar {
        name: "POD_IP".to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "status.podIP".to_string(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
        value: None,
    }]);
    container.ports = Some(vec![ContainerPort {
        name: Some(PORT_NAME.to_string()),
        container_port: port,
        protocol: Some("TCP".to_string()),
        ..ContainerPort::default()
    }]);
}

/// The sender pod around `container`: the transfer's flags, the source.
fn sender_with(
    plan: &Plan,
    attempt: u32,
    placement: &NodePlacement,
    mut container: Container,
) -> Pod {
    let transfer = &plan.spec.transfer;
    let args = container.args.get_or_insert_with(Vec::new);
    let tree = plan.source.volume_mode.is_filesystem();
    for (on, flag) in [
        (transfer.verify, "--verify"),
        // A device has no entries to delete: every byte is copied.
        (transfer.delete && tree, "--delete"),
        (transfer.compress, "-z"),
    ] {
        if on {
            args.push(flag.to_string());
        }
    }
    if let Some(rate) = &transfer.bwlimit {
        args.extend(["--bwlimit".to_string(), rate.clone()]);
    }
    pod(
        plan,
        Role::Sender,
        attempt,
        &plan.spec.source.namespace,
        &plan.sender_claim(attempt),
        placement,
        container,
    )
}

fn component(role: Role) -> Component {
    match role {
        Role::Receiver => Component::Receiver,
        Role::Sender => Component::Sender,
    }
}

/// The mover container of `role`: `head` then the arguments both sides
/// take; the image's entrypoint is the mover.
fn container<const N: usize>(plan: &Plan, role: Role, attempt: u32, head: [&str; N]) -> Container {
    let attempt = attempt.to_string();
    let block = plan.source.volume_mode.is_block();
    // A Block claim is the device at its path, not a mounted tree.
    let root = if block { DEVICE_PATH } else { DATA_DIR };
    let tail = [
        "--root",
        root,
        "--tls-dir",
        TLS_DIR,
        "--attempt",
        &attempt,
        "--progress",
        "json",
    ];
    let mut args: Vec<String> = head.iter().chain(&tail).map(|a| a.to_string()).collect();
    if block {
        args.push("--block".to_string());
        if role == Role::Receiver {
            args.extend(["--state-dir", BLOCK_STATE_DIR].map(String::from));
        }
    }
    let mover = &plan.spec.mover;
    let (read_only_data, capabilities) = match role {
        // A device is read and written as its owner (root) with no
        // capability: the ones below are for trees' owners and modes.
        _ if block => (role == Role::Sender, &[][..]),
        Role::Receiver => (false, RECEIVER_CAPABILITIES),
        Role::Sender => (true, SENDER_CAPABILITIES),
    };
    let mount = |name: &str, path: &str, read_only: bool| VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    };
    // The planner refused values the API server would; a record written by
    // an older plugin may still hold one, and then the API server says so.
    let resources =
        plan::mover_resources(mover).unwrap_or_else(|_| plan::MoverResources::as_given(mover));
    Container {
        name: CONTAINER.to_string(),
        image: Some(mover.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_string()),
        args: Some(args),
        volume_mounts: Some(
            [
                (!block).then(|| mount("data", DATA_DIR, read_only_data)),
                Some(mount("tls", TLS_DIR, true)),
                Some(mount("tmp", "/tmp", false)),
            ]
            .into_iter()
            .flatten()
            .collect(),
        ),
        // The claim's device; read-only for the sender through the claim
        // itself (`persistentVolumeClaim.readOnly`), as a device has no
        // read-only mapping of its own.
        volume_devices: block.then(|| {
            vec![VolumeDevice {
                name: "data".to_string(),
                device_path: DEVICE_PATH.to_string(),
            }]
        }),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), resources.cpu_request),
                ("memory".to_string(), resources.memory_request),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_string(),
                resources.memory_limit,
            )])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(container_security(&plan.security, capabilities)),
        ..Container::default()
    }
}

/// Baseline: root, for numeric owners kept as they are, with only the
/// capabilities its side needs. Restricted: the app's user and group, no
/// capability at all.
fn container_security(security: &MoverSecurity, capabilities: &[&str]) -> SecurityContext {
    let restricted = security.restricted_identity();
    let (user, group, add) = match restricted {
        Some(id) => (id.uid, id.gid, None),
        None => (
            0,
            None,
            Some(capabilities.iter().map(|c| c.to_string()).collect()),
        ),
    };
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_user: Some(user),
        run_as_group: group,
        run_as_non_root: Some(restricted.is_some()),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            add,
        }),
        ..SecurityContext::default()
    }
}

/// The pod's security context: the runtime's seccomp profile, and for
/// restricted movers the app's groups. The sender gets the app's own
/// fsGroup only (any other would make the kubelet re-own the source's
/// files); the receiver gets that, else the app's group, so that it may
/// write the new volume's root, which the kubelet gives that group.
fn pod_security(security: &MoverSecurity, role: Role) -> PodSecurityContext {
    let mut context = runtime_default_seccomp();
    let Some(id) = security.restricted_identity() else {
        return context;
    };
    let fs_group = match role {
        Role::Sender => id.fs_group,
        Role::Receiver => id.fs_group.or(id.gid),
    };
    context.fs_group = fs_group;
    // Only the volume's root is looked at when it has the group already.
    context.fs_group_change_policy = fs_group.map(|_| "OnRootMismatch".to_string());
    context.supplemental_groups =
        (!id.supplemental_groups.is_empty()).then(|| id.supplemental_groups.clone());
    context
}

/// The key files' mode: root's alone for baseline movers; for restricted
/// ones, group-readable where the kubelet gives the files the pod's
/// fsGroup, else readable by the pod's one user whoever it is (nothing
/// else runs in the pod).
fn tls_mode(security: &MoverSecurity, fs_group: Option<i64>) -> i32 {
    match (security.profile, fs_group) {
        (Profile::Baseline, _) => TLS_MODE,
        (Profile::Restricted, Some(_)) => 0o440,
        (Profile::Restricted, None) => 0o444,
    }
}

/// A mover pod around `container`, mounting `claim`.
fn pod(
    plan: &Plan,
    role: Role,
    attempt: u32,
    namespace: &str,
    claim: &str,
    placement: &NodePlacement,
    container: Container,
) -> Pod {
    let op = plan.operation.as_str();
    let component = component(role);
    let mut meta = metadata(
        op,
        component,
        namespace,
        names::pod_name(op, component, attempt),
    );
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(names::ATTEMPT_KEY.to_string(), attempt.to_string());
    // Service meshes would add a proxy the mover does not need, and which
    // would keep the pod running after the mover exits.
    meta.annotations = Some(string_map([
        (PLACEMENT_REASON_ANNOTATION, placement.reason.as_str()),
        ("sidecar.istio.io/inject", "false"),
        ("linkerd.io/inject", "disabled"),
    ]));

    let read_only = role == Role::Sender;
    let security = pod_security(&plan.security, role);
    let tls_mode = tls_mode(&plan.security, security.fs_group);
    Pod {
        metadata: meta,
        spec: Some(PodSpec {
            containers: vec![container],
            volumes: Some(vec![
                Volume {
                    name: "data".to_string(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: claim.to_string(),
                        read_only: read_only.then_some(true),
                    }),
                    ..Volume::default()
                },
                Volume {
                    name: "tls".to_string(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(names::keys_name(op)),
                        items: Some(items_for(role)),
                        default_mode: Some(tls_mode),
                        optional: Some(false),
                    }),
                    ..Volume::default()
                },
                Volume {
                    name: "tmp".to_string(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Volume::default()
                },
            ]),
            affinity: affinity(placement),
            tolerations: (!placement.tolerations.is_empty()).then(|| placement.tolerations.clone()),
            restart_policy: Some("Never".to_string()),
            termination_grace_period_seconds: Some(GRACE_SECONDS),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            // No fsGroup but the app's own: the kubelet would re-own every
            // file of the volume.
            security_context: Some(security),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// Required affinity to the placement's node, by its hostname label (never
/// `nodeName`, which would skip the scheduler and so the binding of
/// WaitForFirstConsumer claims); or, when the scheduler chooses, away from
/// the nodes a set of claims has filled (`--per-node`). `None` when the
/// scheduler chooses freely.
fn affinity(placement: &NodePlacement) -> Option<Affinity> {
    let (operator, values) = match &placement.node {
        Some(node) => (
            "In",
            vec![placement.hostname.as_ref().unwrap_or(node).clone()],
        ),
        None if !placement.avoid.is_empty() => ("NotIn", placement.avoid.clone()),
        None => return None,
    };
    Some(Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: HOSTNAME_LABEL.to_string(),
                        operator: operator.to_string(),
                        values: Some(values),
                    }]),
                    match_fields: None,
                }],
            }),
            ..NodeAffinity::default()
        }),
        ..Affinity::default()
    })
}

/// A pod security context with the container runtime's default seccomp
/// profile and nothing else.
pub(super) fn runtime_default_seccomp() -> PodSecurityContext {
    PodSecurityContext {
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            localhost_profile: None,
        }),
        ..PodSecurityContext::default()
    }
}
