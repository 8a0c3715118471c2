//! The persistent volume controller, with a provisioner built in: binds
//! claims to volumes (static, pre-bound by `spec.volumeName`, or freshly
//! provisioned as directories under the data dir), honours
//! `WaitForFirstConsumer` through the scheduler's selected-node annotation,
//! marks volumes Released when their claim goes and reclaims them by policy,
//! and keeps the pvc-/pv-protection finalizers honest.

use serde_json::{json, Value};

use super::{is_terminating, log_err, name_of, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry::{self, rules::parse_quantity};

/// Provisioner of volumes any node can mount (a shared filesystem).
pub const SHARED: &str = "sandbox.volmig.io/shared";
/// Provisioner of node-local volumes (PV node affinity to one node).
pub const LOCAL: &str = "sandbox.volmig.io/local";
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

fn source() -> Source {
    Source::new("persistentvolume-controller")
}

struct View {
    claims: Vec<Value>,
    volumes: Vec<Value>,
    classes: Vec<Value>,
    pods: Vec<Value>,
}

pub fn reconcile(ctx: &Ctx) {
    let list = |p: &str| ctx.store.list(registry::get(p), None).0;
    let view = View {
        claims: list("persistentvolumeclaims"),
        volumes: list("persistentvolumes"),
        classes: list("storageclasses"),
        pods: list("pods"),
    };
    for claim in &view.claims {
        if is_terminating(claim) {
            release_claim_protection(ctx, &view, claim);
        } else {
            sync_claim(ctx, &view, claim);
        }
    }
    for volume in &view.volumes {
        sync_volume(ctx, &view, volume);
    }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_str()
        .unwrap_or_default()
}

/// Whether a non-terminated pod mounts the claim.
fn in_use(view: &View, namespace: &str, claim: &str) -> bool {
    view.pods.iter().any(|p| {
        let phase = str_at(p, &["status", "phase"]);
        p["metadata"]["namespace"] == json!(namespace)
            && phase != "Succeeded"
            && phase != "Failed"
            && p["spec"]["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["persistentVolumeClaim"]["claimName"] == json!(claim))
    })
}

fn release_claim_protection(ctx: &Ctx, view: &View, claim: &Value) {
    let (ns, name) = name_of(claim);
    if in_use(view, ns, name) {
        return;
    }
    log_err(
        "pvc protection",
        ctx.store
            .modify(registry::get("persistentvolumeclaims"), ns, name, |c| {
                remove_finalizer(c, PVC_PROTECTION)
            }),
    );
}

fn remove_finalizer(obj: &mut Value, finalizer: &str) -> bool {
    match obj["metadata"]["finalizers"].as_array_mut() {
        Some(list) => {
            let before = list.len();
            list.retain(|f| f != finalizer);
            before != list.len()
        }
        None => false,
    }
}

fn claim_ref_names(volume: &Value, claim: &Value) -> bool {
    let (ns, name) = name_of(claim);
    let r = &volume["spec"]["claimRef"];
    r["namespace"] == json!(ns) && r["name"] == json!(name)
}

fn sync_claim(ctx: &Ctx, view: &View, claim: &Value) {
    let (ns, name) = name_of(claim);
    let claims = registry::get("persistentvolumeclaims");
    let wanted = str_at(claim, &["spec", "volumeName"]);
    if !wanted.is_empty() {
        let Some(volume) = view.volumes.iter().find(|v| name_of(v).1 == wanted) else {
            if str_at(claim, &["status", "phase"]) == "Bound" {
                log_err(
                    "claim lost",
                    ctx.store.modify(claims, ns, name, |c| set_phase(c, "Lost")),
                );
                events::record(&ctx.store, &source(), claim, EventType::Warning, "ClaimLost", "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!");
            }
            return;
        };
        let r = &volume["spec"]["claimRef"];
        let uid = &claim["metadata"]["uid"];
        if claim_ref_names(volume, claim) && (r["uid"].is_null() || r["uid"] == *uid) {
            complete_binding(ctx, claim, volume);
        } else if r.is_null() && compatible(claim, volume) {
            bind_volume(ctx, volume, claim);
        } else if !r.is_null() {
            events::record(
                &ctx.store,
                &source(),
                claim,
                EventType::Warning,
                "FailedBinding",
                &format!("volume \"{wanted}\" already bound to a different claim."),
            );
        }
        return;
    }
    if let Some(volume) = view.volumes.iter().find(|v| {
        claim_ref_names(v, claim) && v["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"]
    }) {
        let pv = name_of(volume).1.to_string();
        log_err(
            "claim binding",
            ctx.store.modify(claims, ns, name, |c| {
                c["spec"]["volumeName"] = json!(pv);
                true
            }),
        );
        return;
    }
    let best = view
        .volumes
        .iter()
        .filter(|v| v["spec"]["claimRef"].is_null() && !is_terminating(v) && compatible(claim, v))
        .min_by_key(|v| capacity(v));
    if let Some(volume) = best {
        bind_volume(ctx, volume, claim);
        return;
    }
    provision_if_ours(ctx, view, claim);
}

fn capacity(volume: &Value) -> u128 {
    parse_quantity(str_at(volume, &["spec", "capacity", "storage"])).unwrap_or(0)
}

/// Whether `volume` can serve `claim`: class, size, access modes, mode.
fn compatible(claim: &Value, volume: &Value) -> bool {
    let phase = str_at(volume, &["status", "phase"]);
    let requested =
        parse_quantity(str_at(claim, &["spec", "resources", "requests", "storage"])).unwrap_or(0);
    let modes = |v: &Value| -> Vec<Value> {
        v["spec"]["accessModes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let offered = modes(volume);
    (phase == "Available" || phase == "Pending" || phase.is_empty())
        && str_at(claim, &["spec", "storageClassName"])
            == str_at(volume, &["spec", "storageClassName"])
        && capacity(volume) >= requested
        && modes(claim).iter().all(|m| offered.contains(m))
        && str_at(claim, &["spec", "volumeMode"]) == str_at(volume, &["spec", "volumeMode"])
}

fn claim_ref(claim: &Value) -> Value {
    json!({
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "namespace": claim["metadata"]["namespace"],
        "name": claim["metadata"]["name"],
        "uid": claim["metadata"]["uid"],
        "resourceVersion": claim["metadata"]["resourceVersion"],
    })
}

fn bind_volume(ctx: &Ctx, volume: &Value, claim: &Value) {
    let reference = claim_ref(claim);
    log_err(
        "volume binding",
        ctx.store.modify(
            registry::get("persistentvolumes"),
            "",
            name_of(volume).1,
            |v| {
                v["spec"]["claimRef"] = reference;
                true
            },
        ),
    );
}

/// Both halves agree: the volume Bound, the claim Bound with its capacity.
fn complete_binding(ctx: &Ctx, claim: &Value, volume: &Value) {
    let (ns, name) = name_of(claim);
    let uid = claim["metadata"]["uid"].clone();
    log_err(
        "volume bound",
        ctx.store.modify(
            registry::get("persistentvolumes"),
            "",
            name_of(volume).1,
            |v| {
                let fresh_uid = v["spec"]["claimRef"]["uid"] != uid;
                v["spec"]["claimRef"]["uid"] = uid.clone();
                set_phase(v, "Bound") | fresh_uid
            },
        ),
    );
    let capacity = volume["spec"]["capacity"].clone();
    let modes = volume["spec"]["accessModes"].clone();
    log_err(
        "claim bound",
        ctx.store
            .modify(registry::get("persistentvolumeclaims"), ns, name, |c| {
                let was = c["status"].clone();
                c["status"]["phase"] = json!("Bound");
                c["status"]["capacity"] = capacity;
                c["status"]["accessModes"] = modes;
                c["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = json!("yes");
                c["status"] != was
            }),
    );
}

fn set_phase(obj: &mut Value, phase: &str) -> bool {
    if obj["status"]["phase"] == json!(phase) {
        return false;
    }
    obj["status"]["phase"] = json!(phase);
    true
}

fn provision_if_ours(ctx: &Ctx, view: &View, claim: &Value) {
    let class_name = str_at(claim, &["spec", "storageClassName"]);
    let Some(class) = view.classes.iter().find(|c| name_of(c).1 == class_name) else {
        let message = if class_name.is_empty() {
            "no persistent volumes available for this claim and no storage class is set".to_string()
        } else {
            format!("storageclass.storage.k8s.io \"{class_name}\" not found")
        };
        events::record(
            &ctx.store,
            &source(),
            claim,
            EventType::Warning,
            "ProvisioningFailed",
            &message,
        );
        return;
    };
    let provisioner = str_at(class, &["provisioner"]);
    if provisioner != SHARED && provisioner != LOCAL {
        return;
    }
    let node = str_at(claim, &["metadata", "annotations", SELECTED_NODE]);
    if str_at(class, &["volumeBindingMode"]) == "WaitForFirstConsumer" && node.is_empty() {
        events::record(
            &ctx.store,
            &source(),
            claim,
            EventType::Normal,
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding",
        );
        return;
    }
    if provisioner == LOCAL && node.is_empty() {
        events::record(
            &ctx.store,
            &source(),
            claim,
            EventType::Warning,
            "ProvisioningFailed",
            "node-local volumes need volumeBindingMode WaitForFirstConsumer",
        );
        return;
    }
    provision(ctx, claim, class, provisioner, node);
}

fn provision(ctx: &Ctx, claim: &Value, class: &Value, provisioner: &str, node: &str) {
    let uid = str_at(claim, &["metadata", "uid"]);
    let pv_name = format!("pvc-{uid}");
    let dir = ctx.data_dir.join("volumes").join(&pv_name);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        events::record(
            &ctx.store,
            &source(),
            claim,
            EventType::Warning,
            "ProvisioningFailed",
            &format!("creating {}: {e}", dir.display()),
        );
        return;
    }
    let path = dir.to_string_lossy().to_string();
    let mut spec = json!({
        "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
        "accessModes": claim["spec"]["accessModes"],
        "persistentVolumeReclaimPolicy": class["reclaimPolicy"].as_str().unwrap_or("Delete"),
        "storageClassName": name_of(class).1,
        "volumeMode": claim["spec"]["volumeMode"],
        "claimRef": claim_ref(claim),
    });
    if provisioner == LOCAL {
        spec["local"] = json!({"path": path});
        spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
        ]}]}});
    } else {
        spec["hostPath"] = json!({"path": path, "type": ""});
    }
    let pv = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "annotations": {"pv.kubernetes.io/provisioned-by": provisioner}},
        "spec": spec,
    });
    match ctx.store.create(registry::get("persistentvolumes"), "", pv) {
        Ok(_) => events::record(
            &ctx.store,
            &Source::new(provisioner_component(provisioner)),
            claim,
            EventType::Normal,
            "ProvisioningSucceeded",
            &format!("Successfully provisioned volume {pv_name}"),
        ),
        Err(crate::ApiError::AlreadyExists { .. }) => {}
        Err(e) => events::record(
            &ctx.store,
            &source(),
            claim,
            EventType::Warning,
            "ProvisioningFailed",
            &e.to_string(),
        ),
    }
}

fn provisioner_component(provisioner: &str) -> &'static str {
    if provisioner == LOCAL {
        LOCAL
    } else {
        SHARED
    }
}

fn sync_volume(ctx: &Ctx, view: &View, volume: &Value) {
    let name = name_of(volume).1;
    let volumes = registry::get("persistentvolumes");
    let r = &volume["spec"]["claimRef"];
    let claim = view.claims.iter().find(|c| claim_ref_names(volume, c));
    let claim_gone = !r.is_null()
        && !r["uid"].is_null()
        && claim.is_none_or(|c| c["metadata"]["uid"] != r["uid"]);
    if is_terminating(volume) {
        let bound = !r.is_null() && !claim_gone;
        if !bound {
            remove_provisioned_dir(ctx, volume);
            log_err(
                "pv protection",
                ctx.store
                    .modify(volumes, "", name, |v| remove_finalizer(v, PV_PROTECTION)),
            );
        }
        return;
    }
    if r.is_null() {
        log_err(
            "volume available",
            ctx.store
                .modify(volumes, "", name, |v| set_phase(v, "Available")),
        );
    } else if claim_gone {
        if str_at(volume, &["spec", "persistentVolumeReclaimPolicy"]) == "Delete" {
            log_err(
                "reclaim",
                ctx.store.delete(volumes, "", name, &Default::default()),
            );
        } else {
            log_err(
                "volume released",
                ctx.store
                    .modify(volumes, "", name, |v| set_phase(v, "Released")),
            );
        }
    } else if claim.is_some_and(|c| str_at(c, &["spec", "volumeName"]) == name) {
        log_err(
            "volume bound",
            ctx.store
                .modify(volumes, "", name, |v| set_phase(v, "Bound")),
        );
    } else {
        log_err(
            "volume available",
            ctx.store
                .modify(volumes, "", name, |v| set_phase(v, "Available")),
        );
    }
}

/// Deletes the directory of a volume this sandbox provisioned (and only
/// under its own data dir).
fn remove_provisioned_dir(ctx: &Ctx, volume: &Value) {
    if volume["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"].is_null()
        || str_at(volume, &["spec", "persistentVolumeReclaimPolicy"]) != "Delete"
    {
        return;
    }
    let path = [
        str_at(volume, &["spec", "hostPath", "path"]),
        str_at(volume, &["spec", "local", "path"]),
    ]
    .into_iter()
    .find(|p| !p.is_empty())
    .map(std::path::PathBuf::from);
    let root = ctx.data_dir.join("volumes");
    if let Some(path) = path.filter(|p| p.starts_with(&root) && p != &root) {
        if let Err(e) = std::fs::remove_dir_all(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("reclaiming {}: {e}", path.display());
            }
        }
    }
}
