//! Admission and defaulting: what the API server adds to an object on
//! write before validating it.

use base64::prelude::{Engine as _, BASE64_STANDARD};
use serde_json::{json, Map, Value};

use crate::registry::{custom, Resource};

/// What admission plugins add to a new object: the storage-object-in-use
/// protection finalizers on claims and volumes.
pub fn admit(res: &Resource, obj: &mut Value) {
    let finalizer = match res.builtin_kind() {
        "PersistentVolumeClaim" => "kubernetes.io/pvc-protection",
        "PersistentVolume" => "kubernetes.io/pv-protection",
        _ => return,
    };
    let list = &mut obj["metadata"]["finalizers"];
    if !list.is_array() {
        *list = json!([]);
    }
    if let Some(list) = list.as_array_mut() {
        if !list.iter().any(|f| f == finalizer) {
            list.push(json!(finalizer));
        }
    }
}

/// Fills the defaults a real API server fills on create (and on update, for
/// fields a client cleared). `default_class` is the default StorageClass's
/// name, which the admission plugin writes into claims that name none.
pub fn default_object(res: &Resource, obj: &mut Value, default_class: Option<&str>) {
    match res.builtin_kind() {
        "Pod" => default_pod_spec(&mut obj["spec"]),
        "PersistentVolumeClaim" => {
            set_default(&mut obj["spec"], "volumeMode", json!("Filesystem"));
            super::snapshots::normalize_data_sources(&mut obj["spec"]);
            // The DefaultStorageClass admission plugin: a claim that names
            // no class (absent or null; "" asks for none) gets the default.
            if let Some(class) = default_class {
                if obj["spec"]["storageClassName"].is_null() {
                    obj["spec"]["storageClassName"] = json!(class);
                }
            }
            set_default(&mut obj["status"], "phase", json!("Pending"));
        }
        "PersistentVolume" => {
            set_default(&mut obj["spec"], "volumeMode", json!("Filesystem"));
            set_default(
                &mut obj["spec"],
                "persistentVolumeReclaimPolicy",
                json!("Retain"),
            );
            set_default(&mut obj["status"], "phase", json!("Pending"));
        }
        "Service" => default_service(obj),
        "Namespace" => {
            set_default(&mut obj["spec"], "finalizers", json!(["kubernetes"]));
            set_default(&mut obj["status"], "phase", json!("Active"));
        }
        "StorageClass" => {
            set_default(obj, "reclaimPolicy", json!("Delete"));
            set_default(obj, "volumeBindingMode", json!("Immediate"));
        }
        "Secret" => default_secret(obj),
        "Deployment" => {
            set_default(&mut obj["spec"], "replicas", json!(1));
            set_default(&mut obj["spec"], "revisionHistoryLimit", json!(10));
            set_default(&mut obj["spec"], "progressDeadlineSeconds", json!(600));
            set_default(
                &mut obj["spec"],
                "strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
            );
            default_pod_spec(&mut obj["spec"]["template"]["spec"]);
        }
        "StatefulSet" => {
            set_default(&mut obj["spec"], "replicas", json!(1));
            set_default(
                &mut obj["spec"],
                "podManagementPolicy",
                json!("OrderedReady"),
            );
            set_default(&mut obj["spec"], "revisionHistoryLimit", json!(10));
            set_default(
                &mut obj["spec"],
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            set_default(
                &mut obj["spec"],
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
            if let Some(templates) = obj["spec"]["volumeClaimTemplates"].as_array_mut() {
                for t in templates {
                    set_default(&mut t["spec"], "volumeMode", json!("Filesystem"));
                }
            }
            default_pod_spec(&mut obj["spec"]["template"]["spec"]);
        }
        "ReplicaSet" => {
            set_default(&mut obj["spec"], "replicas", json!(1));
            default_pod_spec(&mut obj["spec"]["template"]["spec"]);
        }
        "ReplicationController" => default_replication_controller(obj),
        "Job" => {
            super::jobs::default_job(obj);
            default_pod_spec(&mut obj["spec"]["template"]["spec"]);
        }
        "DaemonSet" => default_daemon_set(&mut obj["spec"]),
        "HorizontalPodAutoscaler" => default_autoscaler(&mut obj["spec"]),
        "CustomResourceDefinition" => super::crds::defaults(obj),
        _ => {}
    }
    if let Some(definition) = &res.custom {
        // What the apiextensions server's decoder does to a custom
        // resource: structural pruning (unless the definition preserves
        // unknown fields), then the schema's defaults.
        if !definition.preserve_unknown_fields {
            custom::prune(&definition.schema, obj);
        }
        custom::default_fields(&definition.schema, obj);
    }
}

/// What a kind's strategy (`PrepareForCreate`) resets on a new object: a
/// CustomResourceDefinition's status, and a custom resource's status
/// when it has the status subresource (status is written there).
pub fn prepare_create(res: &Resource, obj: &mut Value) {
    if res.builtin_kind() == "CustomResourceDefinition" {
        super::crds::reset_status(obj);
    }
    if res.custom.is_some() && res.has_subresource("status") {
        if let Some(map) = obj.as_object_mut() {
            map.remove("status");
        }
    }
}

/// `SetDefaults_ReplicationController`: the template's labels are the
/// selector and the object's labels when those are empty.
fn default_replication_controller(obj: &mut Value) {
    let labels = obj["spec"]["template"]["metadata"]["labels"].clone();
    let empty = |v: &Value| v.as_object().is_none_or(Map::is_empty);
    if labels.is_object() {
        if empty(&obj["spec"]["selector"]) {
            obj["spec"]["selector"] = labels.clone();
        }
        if empty(&obj["metadata"]["labels"]) {
            obj["metadata"]["labels"] = labels;
        }
    }
    set_default(&mut obj["spec"], "replicas", json!(1));
    if obj["spec"]["template"].is_object() {
        default_pod_spec(&mut obj["spec"]["template"]["spec"]);
    }
}

/// `SetDefaults_DaemonSet`: RollingUpdate, one pod unavailable at a time,
/// no surge.
fn default_daemon_set(spec: &mut Value) {
    set_default(spec, "updateStrategy", json!({}));
    let strategy = &mut spec["updateStrategy"];
    set_default(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == json!("RollingUpdate") {
        set_default(strategy, "rollingUpdate", json!({}));
        set_default(&mut strategy["rollingUpdate"], "maxUnavailable", json!(1));
        set_default(&mut strategy["rollingUpdate"], "maxSurge", json!(0));
    }
    set_default(spec, "revisionHistoryLimit", json!(10));
    default_pod_spec(&mut spec["template"]["spec"]);
}

/// `SetDefaults_HorizontalPodAutoscaler` (autoscaling/v2): one replica at
/// least, and CPU at 80% when no metric is given.
fn default_autoscaler(spec: &mut Value) {
    set_default(spec, "minReplicas", json!(1));
    if spec["metrics"].as_array().is_none_or(Vec::is_empty) {
        spec["metrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}}]);
    }
}

fn set_default(obj: &mut Value, key: &str, value: Value) {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    if obj.get(key).is_none_or(Value::is_null) {
        obj[key] = value;
    }
}

fn default_pod_spec(spec: &mut Value) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "serviceAccountName", json!("default"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "enableServiceLinks", json!(true));
    set_default(spec, "priority", json!(0));
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec[list].as_array_mut() {
            for c in containers {
                let latest = c["image"].as_str().is_some_and(|i| {
                    !i.rsplit('/').next().unwrap_or(i).contains(':') || i.ends_with(":latest")
                });
                let policy = if latest { "Always" } else { "IfNotPresent" };
                set_default(c, "imagePullPolicy", json!(policy));
                set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
                set_default(c, "terminationMessagePolicy", json!("File"));
                set_default(c, "resources", json!({}));
                if let Some(ports) = c["ports"].as_array_mut() {
                    for p in ports {
                        set_default(p, "protocol", json!("TCP"));
                    }
                }
            }
        }
    }
}

fn default_service(obj: &mut Value) {
    let spec = &mut obj["spec"];
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    // SetDefaults_Service: the fields of the types with node ports.
    let kind = spec["type"].as_str().unwrap_or_default().to_string();
    if kind == "NodePort" || kind == "LoadBalancer" {
        set_default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
        for ingress in obj["status"]["loadBalancer"]["ingress"]
            .as_array_mut()
            .into_iter()
            .flatten()
            .filter(|i| i["ip"].is_string())
        {
            set_default(ingress, "ipMode", json!("VIP"));
        }
    }
    let spec = &mut obj["spec"];
    if let Some(ports) = spec["ports"].as_array_mut() {
        for p in ports {
            set_default(p, "protocol", json!("TCP"));
            let port = p["port"].clone();
            set_default(p, "targetPort", port);
        }
    }
}

/// `stringData` is write-only: the server folds it into `data` (base64).
fn default_secret(obj: &mut Value) {
    set_default(obj, "type", json!("Opaque"));
    let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    set_default(obj, "data", json!({}));
    for (k, v) in strings {
        let text = v.as_str().unwrap_or_default();
        obj["data"][k] = json!(BASE64_STANDARD.encode(text.as_bytes()));
    }
}
