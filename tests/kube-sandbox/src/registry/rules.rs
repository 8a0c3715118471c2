//! What the API server does to an object on write, per kind: defaulting
//! (the fields a real server fills so that clients reading them back see
//! what they would see), validation on create, and the immutability rules
//! that volmig can trip over on update.

use base64::prelude::{Engine as _, BASE64_STANDARD};
use serde_json::{json, Map, Value};

use super::Resource;
use crate::status::ApiError;

/// What admission plugins add to a new object: the storage-object-in-use
/// protection finalizers on claims and volumes.
pub fn admit(res: &Resource, obj: &mut Value) {
    let finalizer = match res.kind {
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
    match res.kind {
        "Pod" => default_pod_spec(&mut obj["spec"]),
        "PersistentVolumeClaim" => {
            set_default(&mut obj["spec"], "volumeMode", json!("Filesystem"));
            if let Some(class) = default_class {
                if obj["spec"].get("storageClassName").is_none() {
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
        _ => {}
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

/// Checks a new object as a real server's validation would, for the rules
/// tests and volmig can meet: names, and the fields without which the
/// controllers here could not act.
pub fn validate_create(res: &Resource, obj: &Value) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let invalid = |cause: String| Err(ApiError::invalid(res.kind, name, cause));
    if let Some(problem) = name_problem(name) {
        return invalid(format!("metadata.name: Invalid value: {name:?}: {problem}"));
    }
    match res.kind {
        "Pod" => validate_pod_spec(&obj["spec"]).map_or(Ok(()), invalid),
        "PersistentVolumeClaim" => {
            if obj["spec"]["accessModes"]
                .as_array()
                .is_none_or(Vec::is_empty)
            {
                return invalid(
                    "spec.accessModes: Required value: at least 1 access mode is required".into(),
                );
            }
            if obj["spec"]["resources"]["requests"]["storage"].is_null()
                && obj["spec"]["volumeName"].is_null()
            {
                return invalid("spec.resources[storage]: Required value".into());
            }
            Ok(())
        }
        "PersistentVolume" => {
            if obj["spec"]["capacity"]["storage"].is_null() {
                return invalid("spec.capacity: Required value".into());
            }
            if obj["spec"]["accessModes"]
                .as_array()
                .is_none_or(Vec::is_empty)
            {
                return invalid("spec.accessModes: Required value".into());
            }
            Ok(())
        }
        "Deployment" | "ReplicaSet" | "StatefulSet" => {
            validate_workload(&obj["spec"]).map_or(Ok(()), invalid)
        }
        _ => Ok(()),
    }
}

/// Kubernetes' DNS-1123 subdomain rule for object names.
fn name_problem(name: &str) -> Option<&'static str> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if name.is_empty() {
        Some("name or generateName is required")
    } else if name.len() > 253 {
        Some("must be no more than 253 characters")
    } else if !name.chars().all(ok_char)
        || !alnum(name.chars().next())
        || !alnum(name.chars().last())
    {
        Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")
    } else {
        None
    }
}

fn validate_pod_spec(spec: &Value) -> Option<String> {
    let containers = spec["containers"].as_array().filter(|c| !c.is_empty());
    let Some(containers) = containers else {
        return Some("spec.containers: Required value".into());
    };
    let volumes: Vec<&str> = spec["volumes"]
        .as_array()
        .map(|v| v.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default();
    for (i, c) in containers.iter().enumerate() {
        if c["name"].as_str().is_none_or(str::is_empty) {
            return Some(format!("spec.containers[{i}].name: Required value"));
        }
        if c["image"].as_str().is_none_or(str::is_empty) {
            return Some(format!("spec.containers[{i}].image: Required value"));
        }
        for (j, m) in c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let name = m["name"].as_str().unwrap_or_default();
            if !volumes.contains(&name) {
                return Some(format!(
                    "spec.containers[{i}].volumeMounts[{j}].name: Not found: {name:?}"
                ));
            }
        }
    }
    None
}

fn validate_workload(spec: &Value) -> Option<String> {
    let selector = &spec["selector"];
    if selector.is_null() {
        return Some("spec.selector: Required value".into());
    }
    let labels = &spec["template"]["metadata"]["labels"];
    if let Some(wanted) = selector["matchLabels"].as_object() {
        if wanted.iter().any(|(k, v)| &labels[k] != v) {
            return Some("spec.template.metadata.labels: Invalid value: `selector` does not match template `labels`".into());
        }
    }
    // A StatefulSet's claim templates are volumes its pods mount too.
    let mut pod_spec = spec["template"]["spec"].clone();
    for t in spec["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if !pod_spec["volumes"].is_array() {
            pod_spec["volumes"] = json!([]);
        }
        if let Some(volumes) = pod_spec["volumes"].as_array_mut() {
            volumes.push(json!({"name": t["metadata"]["name"]}));
        }
    }
    validate_pod_spec(&pod_spec).map(|m| format!("spec.template.{m}"))
}

/// Checks an update against the fields Kubernetes forbids changing.
pub fn validate_update(res: &Resource, old: &Value, new: &Value) -> Result<(), ApiError> {
    let name = old["metadata"]["name"].as_str().unwrap_or_default();
    let forbid = |cause: String| Err(ApiError::invalid(res.kind, name, cause));
    let problem = match res.kind {
        "Pod" => pod_update_problem(&old["spec"], &new["spec"]),
        "PersistentVolumeClaim" => claim_update_problem(&old["spec"], &new["spec"]),
        "PersistentVolume" => volume_update_problem(&old["spec"], &new["spec"]),
        "StatefulSet" => changed_except(
            &old["spec"],
            &new["spec"],
            &["replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy", "minReadySeconds"],
        )
        .then(|| "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".to_string()),
        "Deployment" | "ReplicaSet" => (old["spec"]["selector"] != new["spec"]["selector"])
            .then(|| "spec.selector: Invalid value: field is immutable".to_string()),
        "StorageClass" => ["provisioner", "parameters", "reclaimPolicy", "volumeBindingMode"]
            .into_iter()
            .find(|f| old[f] != new[f])
            .map(|f| format!("{f}: Forbidden: updates to {f} are forbidden.")),
        "Service" => (old["spec"]["clusterIP"] != new["spec"]["clusterIP"])
            .then(|| "spec.clusterIPs[0]: Invalid value: field is immutable".to_string()),
        "Secret" | "ConfigMap" => (old["immutable"] == json!(true)
            && (old["data"] != new["data"] || old["binaryData"] != new["binaryData"]))
        .then(|| "data: Forbidden: field is immutable when `immutable` is set".to_string()),
        _ => None,
    };
    problem.map_or(Ok(()), forbid)
}

/// Whether any field of `old`/`new` other than `allowed` differs.
fn changed_except(old: &Value, new: &Value, allowed: &[&str]) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        m.retain(|k, v| !allowed.contains(&k.as_str()) && !v.is_null());
        m
    };
    strip(old) != strip(new)
}

fn pod_update_problem(old: &Value, new: &Value) -> Option<String> {
    let mut old = old.clone();
    let mut new = new.clone();
    for spec in [&mut old, &mut new] {
        for list in ["containers", "initContainers"] {
            for c in spec[list].as_array_mut().into_iter().flatten() {
                c["image"] = Value::Null;
            }
        }
        spec["activeDeadlineSeconds"] = Value::Null;
    }
    // Tolerations may only be added to.
    let old_tol = old["tolerations"].as_array().cloned().unwrap_or_default();
    let new_tol = new["tolerations"].as_array().cloned().unwrap_or_default();
    let only_added = old_tol.iter().all(|t| new_tol.contains(t));
    if only_added {
        old["tolerations"] = Value::Null;
        new["tolerations"] = Value::Null;
    }
    (old != new).then(|| {
        "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".to_string()
    })
}

fn claim_update_problem(old: &Value, new: &Value) -> Option<String> {
    let mut old_rest = old.clone();
    let mut new_rest = new.clone();
    // The binder sets volumeName once; a class may be set once too.
    for field in ["volumeName", "storageClassName"] {
        if old[field].is_null() {
            new_rest[field] = Value::Null;
        }
    }
    let bound = !old["volumeName"].is_null();
    if bound {
        let parse = |v: &Value| v.as_str().and_then(parse_quantity);
        let (before, after) = (
            parse(&old["resources"]["requests"]["storage"]),
            parse(&new["resources"]["requests"]["storage"]),
        );
        if let (Some(before), Some(after)) = (before, after) {
            if after < before {
                return Some("spec.resources.requests.storage: Forbidden: field can not be less than status.capacity".into());
            }
        }
        old_rest["resources"] = Value::Null;
        new_rest["resources"] = Value::Null;
    }
    old_rest["volumeAttributesClassName"] = Value::Null;
    new_rest["volumeAttributesClassName"] = Value::Null;
    (changed_except(&old_rest, &new_rest, &[])).then(|| {
        "spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims".to_string()
    })
}

fn volume_update_problem(old: &Value, new: &Value) -> Option<String> {
    if !old["nodeAffinity"].is_null() && old["nodeAffinity"] != new["nodeAffinity"] {
        return Some("spec.nodeAffinity: Invalid value: field is immutable".into());
    }
    if old["volumeMode"] != new["volumeMode"] {
        return Some("spec.volumeMode: Invalid value: field is immutable".into());
    }
    let claim = &new["claimRef"];
    if !claim.is_null() && (claim["name"].as_str().is_none_or(str::is_empty)) {
        return Some("spec.claimRef.name: Required value".into());
    }
    let source = |v: &Value| -> Map<String, Value> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        m.retain(|k, _| ["hostPath", "local", "csi", "nfs"].contains(&k.as_str()));
        m
    };
    (source(old) != source(new))
        .then(|| "spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation".to_string())
}

/// A resource quantity in bytes (`10Gi`, `500M`, `1024`); None when it is
/// not one.
pub fn parse_quantity(q: &str) -> Option<u128> {
    let q = q.trim();
    let split = q
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let factor: u128 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    Some((value * factor as f64) as u128)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::get;

    #[test]
    fn pods_get_the_defaults_a_server_fills() {
        let mut pod = json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        default_object(get("pods"), &mut pod, None);
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
    }

    #[test]
    fn claims_get_the_default_class_and_secrets_fold_string_data() {
        let mut pvc =
            json!({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"]}});
        default_object(get("persistentvolumeclaims"), &mut pvc, Some("standard"));
        assert_eq!(pvc["spec"]["storageClassName"], "standard");
        assert_eq!(pvc["status"]["phase"], "Pending");
        let mut secret =
            json!({"metadata": {"name": "s"}, "stringData": {"a": "hello", "b": "hi"}});
        default_object(get("secrets"), &mut secret, None);
        assert_eq!(secret["data"], json!({"a": "aGVsbG8=", "b": "aGk="}));
        assert!(secret.get("stringData").is_none());
    }

    #[test]
    fn names_follow_dns_1123() {
        let pod = |name: &str| json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        assert!(validate_create(get("pods"), &pod("app-0")).is_ok());
        for bad in ["", "App", "-a", "a_b", "a-"] {
            let err = validate_create(get("pods"), &pod(bad)).expect_err(bad);
            assert_eq!(err.code(), 422, "{bad}");
        }
    }

    #[test]
    fn bound_claims_only_grow() {
        let old = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv-1", "storageClassName": "standard"});
        let mut grown = old.clone();
        grown["resources"]["requests"]["storage"] = json!("2Gi");
        assert!(claim_update_problem(&old, &grown).is_none());
        let mut shrunk = old.clone();
        shrunk["resources"]["requests"]["storage"] = json!("512Mi");
        assert!(claim_update_problem(&old, &shrunk).is_some());
        let mut reclassed = old.clone();
        reclassed["storageClassName"] = json!("fast");
        assert!(claim_update_problem(&old, &reclassed).is_some());
        let unbound = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
        let mut binding = unbound.clone();
        binding["volumeName"] = json!("pv-1");
        assert!(claim_update_problem(&unbound, &binding).is_none());
    }

    #[test]
    fn pod_specs_allow_image_and_added_tolerations_only() {
        let old = json!({"containers": [{"name": "c", "image": "a"}], "tolerations": [{"key": "k", "operator": "Exists"}]});
        let mut new = old.clone();
        new["containers"][0]["image"] = json!("b");
        new["tolerations"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "x", "operator": "Exists"}));
        assert!(pod_update_problem(&old, &new).is_none());
        new["tolerations"] = json!([]);
        assert!(pod_update_problem(&old, &new).is_some());
        let mut renamed = old.clone();
        renamed["containers"][0]["args"] = json!(["x"]);
        assert!(pod_update_problem(&old, &renamed).is_some());
    }

    #[test]
    fn statefulset_templates_are_immutable_but_replicas_are_not() {
        let old = json!({"replicas": 1, "serviceName": "s", "volumeClaimTemplates": [{"spec": {"storageClassName": "a"}}]});
        let mut scaled = old.clone();
        scaled["replicas"] = json!(3);
        assert!(validate_update(
            get("statefulsets"),
            &json!({"spec": old}),
            &json!({"spec": scaled})
        )
        .is_ok());
        let mut reclassed = old.clone();
        reclassed["volumeClaimTemplates"][0]["spec"]["storageClassName"] = json!("b");
        let err = validate_update(
            get("statefulsets"),
            &json!({"spec": old}),
            &json!({"spec": reclassed}),
        );
        assert_eq!(err.map_err(|e| e.reason()), Err("Invalid"));
    }

    #[test]
    fn volume_node_affinity_and_source_are_fixed() {
        let old = json!({"hostPath": {"path": "/a"}, "nodeAffinity": {"required": {}}, "volumeMode": "Filesystem"});
        let mut released = old.clone();
        released["claimRef"] = Value::Null;
        assert!(volume_update_problem(&old, &released).is_none());
        let mut moved = old.clone();
        moved["nodeAffinity"] = json!({"required": {"x": 1}});
        assert!(volume_update_problem(&old, &moved).is_some());
        let mut resourced = old.clone();
        resourced["hostPath"]["path"] = json!("/b");
        assert!(volume_update_problem(&old, &resourced).is_some());
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("1Gi"), Some(1 << 30));
        assert_eq!(parse_quantity("500M"), Some(500_000_000));
        assert_eq!(parse_quantity("1.5Ki"), Some(1536));
        assert_eq!(parse_quantity("12"), Some(12));
        assert_eq!(parse_quantity("1X"), None);
    }
}
