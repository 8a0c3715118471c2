use super::*;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-11-21 12:00 UTC);
const FIVE_MIN_AGO: &str = "2026-11-21T11:55:00Z";

/// The cells of the single row printed for `item`.
fn cells(plural: &str, item: Value) -> Vec<Value> {
    let table = to_table(plural, &[item], IncludeObject::None, json!({}), NOW);
    table["rows"][0]["cells"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The cells printed for `item`, joined by `|` (strings unquoted).
fn shown(plural: &str, item: Value) -> String {
    let cells = cells(plural, item);
    let text = cells
        .iter()
        .map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_owned));
    text.collect::<Vec<_>>().join("|")
}

fn meta(name: &str) -> Value {
    json!({"name": name, "namespace": "default", "creationTimestamp": FIVE_MIN_AGO})
}

fn pod(status: Value) -> Value {
    json!({"kind": "Pod", "apiVersion": "v1", "metadata": meta("web"),
           "spec": {"containers": [{"name": "app", "image": "busybox"}]}, "status": status})
}

#[test]
fn human_duration_matches_kubernetes() {
    let cases = [
        (-5, "<invalid>"),
        (-1, "0s"),
        (5, "5s"),
        (119, "119s"),
        (200, "3m20s"),
        (540, "9m"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600 + 300, "3h5m"),
        (10 * 3600, "10h"),
        (48 * 3600, "2d"),
        (51 * 3600, "2d3h"),
        (10 * 86_400, "10d"),
        (800 * 86_400, "2y70d"),
        (3000 * 86_400, "8y"),
    ];
    for (secs, want) in cases {
        assert_eq!(human_duration(Duration::seconds(secs)), want, "{secs}s");
    }
    assert_eq!(human_duration(Duration::milliseconds(-1500)), "0s");
}

#[test]
fn pending_pod_waiting_on_container_creation() {
    let status = json!({"phase": "Pending", "containerStatuses": [{"name": "app",
        "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]});
    let want = "web|0/1|ContainerCreating|0|5m|<none>|<none>|<none>|<none>";
    assert_eq!(shown("pods", pod(status)), want);
}

#[test]
fn running_pod_with_restarts_and_wide_cells() {
    let mut running = pod(json!({"phase": "Running", "podIP": "10.0.0.7",
        "containerStatuses": [{"name": "app", "ready": true, "restartCount": 2, "state": {"running": {}},
            "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-11-21T11:59:30Z"}}}]}));
    running["spec"]["nodeName"] = json!("node-1");
    let want = "web|1/1|Running|2 (30s ago)|5m|10.0.0.7|node-1|<none>|<none>";
    assert_eq!(shown("pods", running), want);
}

#[test]
fn pod_status_reasons() {
    let waiting = |reason| json!({"state": {"waiting": {"reason": reason}}});
    let ended =
        |reason, code| json!({"state": {"terminated": {"reason": reason, "exitCode": code}}});
    let cases = [
        (
            json!({"phase": "Running", "containerStatuses": [waiting("CrashLoopBackOff")]}),
            "CrashLoopBackOff",
        ),
        (
            json!({"phase": "Succeeded", "containerStatuses": [ended("Completed", 0)]}),
            "Completed",
        ),
        (
            json!({"phase": "Failed", "containerStatuses": [ended("Error", 1)]}),
            "Error",
        ),
        (
            json!({"phase": "Failed", "containerStatuses": [ended("", 137)]}),
            "ExitCode:137",
        ),
        (json!({"phase": "Failed", "reason": "Evicted"}), "Evicted"),
        (
            json!({"phase": "Pending", "initContainerStatuses": [waiting("PodInitializing")]}),
            "Init:0/1",
        ),
        (
            json!({"phase": "Pending", "initContainerStatuses": [waiting("ImagePullBackOff")]}),
            "Init:ImagePullBackOff",
        ),
        (
            json!({"phase": "Pending", "initContainerStatuses": [ended("", 2)]}),
            "Init:ExitCode:2",
        ),
        (json!({}), "Pending"),
    ];
    for (status, want) in cases {
        let mut p = pod(status.clone());
        p["spec"]["initContainers"] = json!([{"name": "init"}]);
        assert_eq!(cells("pods", p)[2], want, "{status}");
    }
    let mut deleted = pod(json!({"phase": "Running"}));
    deleted["metadata"]["deletionTimestamp"] = json!(FIVE_MIN_AGO);
    assert_eq!(cells("pods", deleted)[2], "Terminating");
}

#[test]
fn finished_pods_carry_a_completed_row_condition() {
    let done = [
        pod(json!({"phase": "Succeeded"})),
        pod(json!({"phase": "Running"})),
    ];
    let table = to_table("pods", &done, IncludeObject::None, json!({}), NOW);
    assert_eq!(table["rows"][0]["conditions"][0]["type"], "Completed");
    assert_eq!(table["rows"][0]["conditions"][0]["reason"], "Succeeded");
    assert_eq!(table["rows"][1].get("conditions"), None);
}

#[test]
fn persistent_volume_claims() {
    let bound = json!({"metadata": meta("data"),
        "spec": {"volumeName": "pvc-1", "storageClassName": "standard", "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound", "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"]}});
    let want = "data|Bound|pvc-1|10Gi|RWO|standard|<unset>|5m|Filesystem";
    assert_eq!(shown("persistentvolumeclaims", bound), want);
    let pending = json!({"metadata": meta("new"), "spec": {"storageClassName": "fast", "volumeMode": "Block"}});
    let want = "new|Pending||||fast|<unset>|5m|Block";
    assert_eq!(shown("persistentvolumeclaims", pending), want);
}

#[test]
fn persistent_volumes() {
    let pv = json!({"metadata": {"name": "pvc-1", "creationTimestamp": FIVE_MIN_AGO,
            "annotations": {"volume.beta.kubernetes.io/storage-class": "legacy"}},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "standard",
            "claimRef": {"namespace": "default", "name": "data"}},
        "status": {"phase": "Bound"}});
    let want = "pvc-1|10Gi|RWO,RWX|Delete|Bound|default/data|legacy|<unset>||5m|Filesystem";
    assert_eq!(shown("persistentvolumes", pv), want);
}

#[test]
fn storage_classes() {
    let default = json!({"metadata": {"name": "standard", "creationTimestamp": FIVE_MIN_AGO,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": true});
    let want = "standard (default)|rancher.io/local-path|Delete|WaitForFirstConsumer|true|5m";
    assert_eq!(shown("storageclasses", default), want);
    let plain = json!({"metadata": meta("slow"), "provisioner": "csi.example.com", "reclaimPolicy": "Retain"});
    assert_eq!(
        shown("storageclasses", plain),
        "slow|csi.example.com|Retain|Immediate|false|5m"
    );
}

#[test]
fn nodes() {
    let node = json!({"metadata": {"name": "node-1", "creationTimestamp": FIVE_MIN_AGO,
            "labels": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": "",
                "kubernetes.io/role": "infra"}},
        "spec": {"unschedulable": true},
        "status": {"conditions": [{"type": "Ready", "status": "False"}],
            "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}],
            "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian GNU/Linux 12 (bookworm)"}}});
    let want = "node-1|NotReady,SchedulingDisabled|control-plane,infra,worker|5m|v1.32.0|192.168.1.10|<none>|Debian GNU/Linux 12 (bookworm)|<unknown>|<unknown>";
    assert_eq!(shown("nodes", node), want);
    assert_eq!(
        cells("nodes", json!({"metadata": meta("bare")}))[1..3],
        ["Unknown", "<none>"]
    );
}

#[test]
fn services_and_endpoints() {
    let svc = json!({"metadata": meta("web"), "spec": {"clusterIP": "10.96.0.10",
        "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP", "nodePort": 30053}],
        "selector": {"tier": "front", "app": "web"}}});
    let want = "web|ClusterIP|10.96.0.10|<none>|80/TCP,53:30053/UDP|5m|app=web,tier=front";
    assert_eq!(shown("services", svc), want);
    let lb = json!({"metadata": meta("lb"),
        "spec": {"type": "LoadBalancer", "clusterIPs": ["10.96.0.11"], "ports": [{"port": 443}]}});
    assert_eq!(
        shown("services", lb),
        "lb|LoadBalancer|10.96.0.11|<pending>|443/TCP|5m|<none>"
    );
    let ep = json!({"metadata": meta("web"), "subsets": [{"ports": [{"port": 80}, {"port": 443}],
        "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "fd00::3"}]}]});
    let want = "web|10.0.0.1:80,10.0.0.2:80,[fd00::3]:80 + 3 more...|5m";
    assert_eq!(shown("endpoints", ep), want);
    assert_eq!(
        cells("endpoints", json!({"metadata": meta("none")}))[1],
        "<none>"
    );
}

#[test]
fn workloads() {
    let template = json!({"spec": {"containers": [{"name": "app", "image": "nginx:1"},
        {"name": "log", "image": "busybox"}]}});
    let selector = json!({"matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]}]});
    let deploy = json!({"metadata": meta("web"),
        "spec": {"replicas": 3, "template": template, "selector": selector},
        "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
    let want = "web|2/3|3|2|5m|app,log|nginx:1,busybox|app=web,env in (dev,prod)";
    assert_eq!(shown("deployments", deploy.clone()), want);
    assert_eq!(
        cells("deployments", deploy)[2],
        3,
        "UP-TO-DATE is an integer cell"
    );
    let rs = json!({"metadata": meta("web-1"), "spec": {"template": template}, "status": {"replicas": 1}});
    assert_eq!(
        shown("replicasets", rs),
        "web-1|1|1|0|5m|app,log|nginx:1,busybox|<none>"
    );
    let sts =
        json!({"metadata": meta("db"), "spec": {"replicas": 2}, "status": {"readyReplicas": 2}});
    assert_eq!(shown("statefulsets", sts), "db|2/2|5m||");
}

#[test]
fn config_objects_and_namespaces() {
    let secret = json!({"metadata": meta("tls"), "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}});
    assert_eq!(shown("secrets", secret), "tls|kubernetes.io/tls|2|5m");
    assert_eq!(
        shown("secrets", json!({"metadata": meta("plain")})),
        "plain|Opaque|0|5m"
    );
    let cm = json!({"metadata": meta("cfg"), "data": {"a": "1"}, "binaryData": {"b": ""}});
    assert_eq!(shown("configmaps", cm), "cfg|2|5m");
    assert_eq!(
        shown("serviceaccounts", json!({"metadata": meta("default")})),
        "default|0|5m"
    );
    let ns = json!({"metadata": meta("volmig"), "status": {"phase": "Terminating"}});
    assert_eq!(shown("namespaces", ns), "volmig|Terminating|5m");
}

#[test]
fn events() {
    let event = json!({"metadata": meta("web.1"), "type": "Warning", "reason": "FailedMount",
        "involvedObject": {"kind": "Pod", "name": "web", "fieldPath": "spec.containers{app}"},
        "source": {"component": "kubelet", "host": "node-1"}, "message": "MountVolume failed\n",
        "firstTimestamp": "2026-11-21T11:50:00Z", "lastTimestamp": "2026-11-21T11:59:50Z", "count": 4});
    let want = "10s|Warning|FailedMount|pod/web|spec.containers{app}|kubelet, node-1|MountVolume failed|10m|4|web.1";
    assert_eq!(shown("events", event), want);
    // events.k8s.io-style: eventTime only (59.88s ago, truncated as Go does), no count.
    let new_style = json!({"metadata": meta("web.2"), "type": "Normal", "reason": "Scheduled",
        "involvedObject": {"kind": "Pod", "name": "web"}, "reportingController": "default-scheduler",
        "eventTime": "2026-11-21T11:59:00.123456Z"});
    let want = "59s|Normal|Scheduled|pod/web||default-scheduler||59s|1|web.2";
    assert_eq!(shown("events", new_style), want);
}

#[test]
fn other_resources_use_the_generic_convertors() {
    let limits = json!({"apiVersion": "v1",
        "metadata": {"name": "limits", "creationTimestamp": "2026-11-21T11:55:00+02:00"}});
    let table = to_table(
        "limitranges",
        &[limits],
        IncludeObject::None,
        json!({}),
        NOW,
    );
    assert_eq!(table["columnDefinitions"][1]["name"], "Created At");
    assert_eq!(
        table["rows"][0]["cells"],
        json!(["limits", "2026-11-21T09:55:00Z"])
    );
    let snapshot = json!({"apiVersion": "snapshot.storage.k8s.io/v1", "metadata": meta("snap")});
    let table = to_table(
        "volumesnapshots",
        &[snapshot],
        IncludeObject::None,
        json!({}),
        NOW,
    );
    assert_eq!(table["columnDefinitions"][1]["type"], "date");
    assert_eq!(table["rows"][0]["cells"], json!(["snap", "5m"]));
}

#[test]
fn table_shape_and_include_modes() {
    let item = pod(json!({"phase": "Running"}));
    let items = std::slice::from_ref(&item);
    let list_meta = json!({"resourceVersion": "42", "continue": "", "selfLink": "/x"});
    let table = to_table("pods", items, IncludeObject::Metadata, list_meta, NOW);
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(table["metadata"], json!({"resourceVersion": "42"}));
    let columns = table["columnDefinitions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let wide = columns
        .iter()
        .filter(|c| c["priority"] == 1)
        .map(|c| &c["name"]);
    assert_eq!(
        Vec::from_iter(wide),
        ["IP", "Node", "Nominated Node", "Readiness Gates"]
    );
    assert_eq!(columns[0]["format"], "name");
    assert_eq!(
        columns[3],
        json!({"name": "Restarts", "type": "string", "format": "",
        "description": "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
        "priority": 0})
    );
    let partial = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": item["metadata"]});
    assert_eq!(table["rows"][0]["object"], partial);
    let full = to_table("pods", items, IncludeObject::Object, json!({}), NOW);
    assert_eq!(full["rows"][0]["object"], item);
    let none = to_table("pods", items, IncludeObject::None, Value::Null, NOW);
    assert_eq!(none["rows"][0].get("object"), None);
    assert_eq!(none["metadata"], json!({}));
    let empty = to_table("pods", &[], IncludeObject::None, json!({}), NOW);
    assert_eq!(empty["rows"], json!([]));
}

#[test]
fn include_object_from_query() {
    assert_eq!(IncludeObject::from_query(None), IncludeObject::Metadata);
    assert_eq!(
        IncludeObject::from_query(Some("Metadata")),
        IncludeObject::Metadata
    );
    assert_eq!(
        IncludeObject::from_query(Some("Object")),
        IncludeObject::Object
    );
    assert_eq!(IncludeObject::from_query(Some("None")), IncludeObject::None);
}

#[test]
fn every_printer_fills_every_column_even_for_odd_objects() {
    let plurals = [
        "pods",
        "persistentvolumeclaims",
        "persistentvolumes",
        "storageclasses",
        "nodes",
        "namespaces",
        "services",
        "endpoints",
        "deployments",
        "replicasets",
        "statefulsets",
        "secrets",
        "configmaps",
        "serviceaccounts",
        "events",
        "limitranges",
    ];
    let odd = [
        json!({}),
        Value::Null,
        json!({"metadata": 1, "spec": [], "status": "x"}),
    ];
    for plural in plurals {
        let table = to_table(plural, &odd, IncludeObject::Metadata, json!({}), NOW);
        let columns = table["columnDefinitions"].as_array().map_or(0, Vec::len);
        assert!(columns >= 2, "{plural}");
        for row in table["rows"].as_array().into_iter().flatten() {
            assert_eq!(
                row["cells"].as_array().map(Vec::len),
                Some(columns),
                "{plural}"
            );
        }
    }
}

#[test]
fn wants_table_negotiates_like_the_api_server() {
    let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    assert!(wants_table(kubectl));
    assert!(wants_table(
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
    ));
    assert!(wants_table(
        "text/html, application/json; as=Table; g=meta.k8s.io; v=v1"
    ));
    assert!(!wants_table("application/json"));
    assert!(!wants_table("*/*"));
    assert!(!wants_table(""));
    assert!(!wants_table(
        "application/json, application/json;as=Table;v=v1;g=meta.k8s.io"
    ));
    assert!(!wants_table(
        "application/json;as=Table;v=v1;g=meta.k8s.io;q=0"
    ));
    assert!(!wants_table("application/json;as=Table;v=v2;g=meta.k8s.io"));
    assert!(!wants_table(
        "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
    ));
}

#[test]
fn jobs() {
    let template = json!({"spec": {"containers": [{"name": "driver", "image": "volmig:1"}]}});
    let selector = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}});
    let running = json!({"metadata": meta("drive"),
        "spec": {"completions": 1, "parallelism": 1, "template": template, "selector": selector},
        "status": {"startTime": "2026-11-21T11:58:00Z", "active": 1}});
    assert_eq!(
        shown("jobs", running.clone()),
        "drive|Running|0/1|2m|5m|driver|volmig:1|batch.kubernetes.io/controller-uid=u-1"
    );
    let mut done = running.clone();
    done["status"] = json!({"startTime": "2026-11-21T11:58:00Z", "completionTime": "2026-11-21T11:58:30Z",
        "succeeded": 1, "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]});
    assert_eq!(&shown("jobs", done)[..30], "drive|Complete|1/1|30s|5m|driv");
    let mut failed = running;
    failed["status"]["conditions"] = json!([{"type": "FailureTarget", "status": "True"}]);
    assert_eq!(cells("jobs", failed.clone())[1], "FailureTarget");
    failed["status"]["conditions"] =
        json!([{"type": "FailureTarget", "status": "True"}, {"type": "Failed", "status": "True"}]);
    assert_eq!(cells("jobs", failed)[1], "Failed");
}
