use super::*;
use serde_json::{from_value, json, Value};

fn obj<T: serde::de::DeserializeOwned>(value: Value) -> T {
    from_value(value).unwrap()
}

fn node(name: &str, zone: &str, spec: Value) -> Node {
    let labels = json!({"kubernetes.io/hostname": name, "zone": zone});
    obj(json!({"metadata": {"name": name, "labels": labels}, "spec": spec}))
}

fn pod(name: &str, mut spec: Value) -> Pod {
    spec["containers"] = json!([]);
    obj(json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec}))
}

/// A pod mounting claim `data`, on `node` if given, in `phase`.
fn user(name: &str, node: Option<&str>, phase: &str) -> Pod {
    let volumes = json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]);
    let mut pod = pod(name, json!({"nodeName": node, "volumes": volumes}));
    pod.status = obj(json!({"phase": phase}));
    pod
}

fn claim(spec: Value, phase: &str) -> PersistentVolumeClaim {
    let meta = json!({"name": "data", "namespace": "ns"});
    obj(json!({"metadata": meta, "spec": spec, "status": {"phase": phase}}))
}

fn volume(modes: &[&str], host: Option<&str>) -> PersistentVolume {
    let on_host = json!({"key": "kubernetes.io/hostname", "operator": "In", "values": [host]});
    let affinity =
        host.map(|_| json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [on_host]}]}}));
    let spec = json!({"accessModes": modes, "nodeAffinity": affinity});
    obj(json!({"metadata": {"name": "pvc-1"}, "spec": spec}))
}

fn class(name: &str, mode: &str, topologies: Value) -> StorageClass {
    let binding = json!({"provisioner": "sandbox", "volumeBindingMode": mode, "allowedTopologies": topologies});
    let mut class: StorageClass = obj(binding);
    class.metadata.name = Some(name.to_owned());
    class
}

/// Nodes n1 and n2 in zone a and n3 in zone b, plus whatever a test adds.
struct World {
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    claims: Vec<PersistentVolumeClaim>,
    volumes: Vec<PersistentVolume>,
    classes: Vec<StorageClass>,
}

impl World {
    fn new() -> Self {
        let nodes =
            ["n1", "n2", "n3"].map(|n| node(n, if n == "n3" { "b" } else { "a" }, json!({})));
        let (pods, claims, volumes, classes) = (vec![], vec![], vec![], vec![]);
        World {
            nodes: nodes.into(),
            pods,
            claims,
            volumes,
            classes,
        }
    }

    fn cluster(&self) -> Cluster<'_> {
        let (nodes, pods, claims, volumes) = (
            &self.nodes[..],
            &self.pods[..],
            &self.claims[..],
            &self.volumes[..],
        );
        Cluster {
            nodes,
            pods,
            claims,
            volumes,
            classes: &self.classes,
        }
    }

    #[track_caller]
    fn binds(&self, pod: &Pod, node: &str, claims: &[&str]) {
        let select_for_claims = claims.iter().map(|c| c.to_string()).collect();
        let want = Decision::Bind {
            node: node.to_owned(),
            select_for_claims,
        };
        assert_eq!(schedule(pod, &self.cluster()), want);
    }

    #[track_caller]
    fn refuses(&self, pod: &Pod, message: &str) {
        let want = Decision::Unschedulable {
            message: message.to_owned(),
        };
        assert_eq!(schedule(pod, &self.cluster()), want);
    }

    #[track_caller]
    fn refuses_everywhere(&self, pod: &Pod, reason: &str) {
        let n = self.nodes.len();
        let preemption = format!(
            "preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling."
        );
        self.refuses(
            pod,
            &format!("0/{n} nodes are available: {reason}. {preemption}"),
        );
    }

    fn attach(&self, pod: &Pod, node: &str) -> Option<String> {
        multi_attach_conflict(pod, node, &self.cluster())
    }
}

#[test]
fn node_selector_and_required_affinity() {
    let mut world = World::new();
    world.binds(&pod("p", json!({"nodeSelector": {"zone": "b"}})), "n3", &[]);
    let nowhere = pod("p", json!({"nodeSelector": {"zone": "c"}}));
    world.refuses_everywhere(
        &nowhere,
        "3 node(s) didn't match Pod's node affinity/selector",
    );

    let in_b = json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]});
    let is_n2 =
        json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]});
    let terms = json!({"nodeSelectorTerms": [in_b, is_n2]});
    let either = pod(
        "p",
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}}),
    );
    world.binds(&either, "n2", &[]);
    world.pods.push(user("busy", Some("n2"), "Running"));
    world.binds(&either, "n3", &[]);
}

#[test]
fn label_requirement_operators() {
    let labels: Labels = [("zone", "a"), ("cpus", "8")]
        .map(|(k, v)| (k.into(), v.into()))
        .into();
    let cases = [
        (
            json!({"key": "zone", "operator": "In", "values": ["a", "b"]}),
            true,
        ),
        (
            json!({"key": "zone", "operator": "In", "values": ["b"]}),
            false,
        ),
        (
            json!({"key": "zone", "operator": "NotIn", "values": ["b"]}),
            true,
        ),
        (
            json!({"key": "gone", "operator": "NotIn", "values": ["b"]}),
            true,
        ),
        (
            json!({"key": "zone", "operator": "NotIn", "values": ["a"]}),
            false,
        ),
        (json!({"key": "zone", "operator": "Exists"}), true),
        (json!({"key": "gone", "operator": "Exists"}), false),
        (json!({"key": "gone", "operator": "DoesNotExist"}), true),
        (
            json!({"key": "cpus", "operator": "Gt", "values": ["4"]}),
            true,
        ),
        (
            json!({"key": "cpus", "operator": "Gt", "values": ["8"]}),
            false,
        ),
        (
            json!({"key": "cpus", "operator": "Lt", "values": ["16"]}),
            true,
        ),
        (
            json!({"key": "zone", "operator": "Gt", "values": ["1"]}),
            false,
        ),
        (
            json!({"key": "cpus", "operator": "Gt", "values": ["1", "2"]}),
            false,
        ),
        (
            json!({"key": "zone", "operator": "Bogus", "values": ["a"]}),
            false,
        ),
    ];
    for (requirement, want) in cases {
        let term: NodeSelectorTerm = obj(json!({"matchExpressions": [requirement.clone()]}));
        assert_eq!(
            terms_match(&[term], &labels, Some("n1")),
            want,
            "{requirement}"
        );
    }
    let by_name =
        json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]});
    let by_name: NodeSelectorTerm = obj(by_name);
    assert!(terms_match(
        std::slice::from_ref(&by_name),
        &labels,
        Some("n1")
    ));
    assert!(
        !terms_match(&[by_name], &labels, None),
        "volume affinity has no fields"
    );
    assert!(!terms_match(
        &[NodeSelectorTerm::default()],
        &labels,
        Some("n1")
    ));
}

#[test]
fn tolerations_and_taints() {
    let taint: Taint = obj(json!({"key": "k", "value": "v", "effect": "NoSchedule"}));
    let cases = [
        (
            json!({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}),
            true,
        ),
        (json!({"key": "k", "value": "v"}), true),
        (json!({"key": "k", "value": "other"}), false),
        (json!({"key": "k", "operator": "Exists"}), true),
        (
            json!({"key": "k", "operator": "Exists", "effect": "NoExecute"}),
            false,
        ),
        (json!({"operator": "Exists"}), true),
        (json!({"key": "other", "operator": "Exists"}), false),
    ];
    for (toleration, want) in cases {
        assert_eq!(
            tolerates(&obj(toleration.clone()), &taint),
            want,
            "{toleration}"
        );
    }
    let soft: Taint = obj(json!({"key": "k", "effect": "PreferNoSchedule"}));
    assert_eq!(
        untolerated_taint(std::slice::from_ref(&soft), &[]),
        None,
        "scoring only"
    );
    assert_eq!(untolerated_taint(&[soft, taint.clone()], &[]), Some(&taint));
}

#[test]
fn failure_message_counts_reasons_like_the_scheduler() {
    let mut world = World::new();
    let not_ready =
        json!({"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]});
    world.nodes[0] = node("n1", "c", not_ready);
    let in_c = pod("p", json!({"nodeSelector": {"zone": "c"}}));
    world.refuses(
        &in_c,
        "0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, \
         2 node(s) didn't match Pod's node affinity/selector. \
         preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
    );
    let tolerant = pod(
        "p",
        json!({"nodeSelector": {"zone": "c"}, "tolerations": [{"operator": "Exists"}]}),
    );
    world.binds(&tolerant, "n1", &[]);
    assert_eq!(
        histogram(["a"; 10].into_iter().chain(["b"; 2])),
        "10 a, 2 b",
        "Go's sort.Strings"
    );
    world.nodes.clear();
    world.refuses(&tolerant, "no nodes available to schedule pods");
}

#[test]
fn cordoned_nodes_take_only_pods_tolerating_the_cordon() {
    let mut world = World::new();
    world.nodes = vec![node("n1", "a", json!({"unschedulable": true}))];
    world.refuses_everywhere(&pod("p", json!({})), "1 node(s) were unschedulable");
    let cordon = json!([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]);
    world.binds(&pod("p", json!({"tolerations": cordon})), "n1", &[]);
}

#[test]
fn spreads_by_running_pods_then_name() {
    let mut world = World::new();
    world.binds(&pod("p", json!({})), "n1", &[]);
    let (n1, n2, n3) = (Some("n1"), Some("n2"), Some("n3"));
    world.pods = vec![
        user("a", n1, "Running"),
        user("b", n2, "Pending"),
        user("c", n3, "Succeeded"),
    ];
    world.binds(&pod("p", json!({})), "n3", &[]);
}

#[test]
fn bound_volume_affinity_forces_the_node() {
    let mut world = World::new();
    let app = user("app", None, "Pending");
    world.claims = vec![claim(json!({"volumeName": "pvc-1"}), "Bound")];
    world.volumes = vec![volume(&["ReadWriteOnce"], Some("n2"))];
    world.binds(&app, "n2", &[]);
    world.volumes = vec![volume(&["ReadWriteOnce"], Some("gone"))];
    world.refuses_everywhere(
        &app,
        "3 node(s) didn't match PersistentVolume's node affinity",
    );
    world.volumes.clear();
    let missing = "3 node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
    world.refuses_everywhere(&app, missing);
}

#[test]
fn wait_for_first_consumer_claims_follow_the_pod() {
    const WFFC: &str = "WaitForFirstConsumer";
    let mut world = World::new();
    let zone_b = json!([{"matchLabelExpressions": [{"key": "zone", "values": ["b"]}]}]);
    world.classes = vec![
        class("late", WFFC, json!(null)),
        class("zonal", WFFC, zone_b),
    ];
    let app = user("app", None, "Pending");
    world.claims = vec![claim(json!({"storageClassName": "late"}), "Pending")];
    world.binds(&app, "n1", &["data"]);
    world.claims[0].metadata.annotations = Some([(SELECTED_NODE.into(), "n2".into())].into());
    world.binds(&app, "n2", &["data"]);

    world.claims = vec![claim(json!({"storageClassName": "zonal"}), "Pending")];
    world.binds(&app, "n3", &["data"]);
    world.nodes.pop();
    world.refuses_everywhere(
        &app,
        "2 node(s) didn't find available persistent volumes to bind",
    );
}

#[test]
fn unbound_immediate_claims_hold_the_pod() {
    let mut world = World::new();
    world.classes = vec![class("fast", "Immediate", json!(null))];
    let app = user("app", None, "Pending");
    let classes = [
        json!({"storageClassName": "fast"}),
        json!({"storageClassName": "unknown"}),
        json!({}),
    ];
    for spec in classes.into_iter().chain([json!({"volumeName": "pvc-1"})]) {
        world.claims = vec![claim(spec, "Pending")];
        world.refuses_everywhere(&app, "pod has unbound immediate PersistentVolumeClaims");
    }
}

#[test]
fn missing_deleted_or_lost_claims_hold_the_pod() {
    let mut world = World::new();
    let app = user("app", None, "Pending");
    world.refuses_everywhere(&app, "persistentvolumeclaim \"data\" not found");
    world.claims = vec![claim(json!({"volumeName": "pvc-1"}), "Lost")];
    let lost = "persistentvolumeclaim \"data\" bound to non-existent persistentvolume \"pvc-1\"";
    world.refuses_everywhere(&app, lost);
    world.claims = vec![claim(json!({"volumeName": "pvc-1"}), "Bound")];
    world.claims[0].metadata.deletion_timestamp = obj(json!("2025-01-01T00:00:00Z"));
    world.refuses_everywhere(&app, "persistentvolumeclaim \"data\" is being deleted");
}

#[test]
fn read_write_once_pod_claims_admit_one_pod() {
    let mut world = World::new();
    world.nodes.truncate(1);
    world.claims = vec![claim(
        json!({"accessModes": ["ReadWriteOncePod"], "volumeName": "pvc-1"}),
        "Bound",
    )];
    world.volumes = vec![volume(&["ReadWriteOncePod"], None)];
    world.pods = vec![user("first", Some("n1"), "Running")];
    let second = user("second", None, "Pending");
    world.refuses(
        &second,
        "0/1 nodes are available: 1 node has pod using PersistentVolumeClaim with the same name and \
         ReadWriteOncePod access mode. preemption: 0/1 nodes are available: 1 No preemption victims \
         found for incoming pod.",
    );
    world.pods = vec![user("first", Some("n1"), "Succeeded")];
    world.binds(&second, "n1", &[]);
}

#[test]
fn read_write_once_volumes_attach_to_one_node() {
    let mut world = World::new();
    world.claims = vec![claim(json!({"volumeName": "pvc-1"}), "Bound")];
    world.volumes = vec![volume(&["ReadWriteOnce"], None)];
    world.pods = vec![user("app-0", Some("n1"), "Running")];
    world.binds(&user("mover", None, "Pending"), "n2", &[]);
    let mover = user("mover", Some("n2"), "Pending");
    let conflict = "Multi-Attach error for volume \"pvc-1\" Volume is already used by pod(s) app-0";
    assert_eq!(world.attach(&mover, "n2").as_deref(), Some(conflict));
    assert_eq!(world.attach(&mover, "n1"), None, "same node");

    let mut stranger = mover.clone();
    stranger.metadata.namespace = Some("other".into());
    let mut theirs = world.claims[0].clone();
    theirs.metadata.namespace = Some("other".into());
    world.claims.push(theirs);
    let counted = "Multi-Attach error for volume \"pvc-1\" Volume is already used by 1 pod(s) in different namespaces";
    assert_eq!(world.attach(&stranger, "n2").as_deref(), Some(counted));

    world.volumes = vec![volume(&["ReadWriteMany"], None)];
    assert_eq!(world.attach(&mover, "n2"), None, "multi-node access mode");
    world.volumes = vec![volume(&["ReadWriteOnce"], None)];
    world.pods = vec![user("app-0", Some("n1"), "Failed")];
    assert_eq!(world.attach(&mover, "n2"), None, "terminated user");

    let created = |mut pod: Pod, at: &str| {
        pod.metadata.creation_timestamp = obj(json!(format!("2025-01-01T00:00:0{at}Z")));
        pod
    };
    let (app, mover) = (
        created(user("app-0", Some("n1"), "Pending"), "1"),
        created(mover, "2"),
    );
    world.pods = vec![app.clone(), mover.clone()];
    assert_eq!(
        world.attach(&mover, "n2").as_deref(),
        Some(conflict),
        "the older pod goes first"
    );
    assert_eq!(world.attach(&app, "n1"), None);
}
