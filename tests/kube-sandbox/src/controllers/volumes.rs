//! The persistent volume controller of kube-controller-manager, with a
//! provisioner built in, plus the pvc- and pv-protection controllers.
//!
//! Binding follows `pv_controller.go`: an unbound claim (no
//! `pv.kubernetes.io/bind-completed` annotation) takes the volume it names in
//! `spec.volumeName`, or else the best match `FindMatchingVolume` finds (a
//! volume pre-bound to it by `spec.claimRef` first, whatever its phase or
//! class), or else a volume provisioned for it; a bound claim only checks
//! that its volume still points back at it. Volumes go Available, Bound,
//! Released and are reclaimed by policy as `syncVolume` and `reclaimVolume`
//! decide. `WaitForFirstConsumer` claims wait for the scheduler's
//! selected-node annotation; with it they may also take a static volume
//! whose node affinity admits that node (a shortcut for what the scheduler's
//! VolumeBinding plugin does), else a volume is provisioned there.
//!
//! Provisioned volumes are directories under the data dir; the provisioner
//! behaves as an external one (sig-storage-lib-external-provisioner).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolume;
use serde_json::{json, Value};

use super::{is_terminating, log_err, name_of, placement, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry::{self, rules::parse_quantity};
use crate::selector::LabelSelector;

/// Provisioner of volumes any node can mount (a shared filesystem).
pub const SHARED: &str = "sandbox.volmig.io/shared";
/// Provisioner of node-local volumes (PV node affinity to one node).
pub const LOCAL: &str = "sandbox.volmig.io/local";
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

const CLAIMS: &str = "persistentvolumeclaims";
const VOLUMES: &str = "persistentvolumes";

type Labels = BTreeMap<String, String>;

fn source() -> Source {
    Source::new("persistentvolume-controller")
}

/// What one pass works from: the store as listed when the pass began,
/// updated with the pass's own writes (as the controller's informer cache
/// is), so that two claims never take the same volume in one pass.
struct View {
    claims: Vec<Value>,
    volumes: Vec<Value>,
    classes: Vec<Value>,
    pods: Vec<Value>,
    nodes: Vec<Value>,
}

impl View {
    fn claim(&self, ns: &str, name: &str) -> Option<&Value> {
        self.claims.iter().find(|c| name_of(c) == (ns, name))
    }

    fn volume(&self, name: &str) -> Option<&Value> {
        self.volumes.iter().find(|v| name_of(v).1 == name)
    }

    /// Records an object as this pass wrote it (gone when a write removed
    /// its last finalizer).
    fn put(&mut self, plural: &str, obj: Value) {
        let list = match plural {
            CLAIMS => &mut self.claims,
            _ => &mut self.volumes,
        };
        let key = {
            let (ns, name) = name_of(&obj);
            (ns.to_string(), name.to_string())
        };
        let at = list
            .iter()
            .position(|o| name_of(o) == (key.0.as_str(), key.1.as_str()));
        match (at, is_gone(&obj)) {
            (Some(i), true) => {
                list.remove(i);
            }
            (Some(i), false) => list[i] = obj,
            (None, false) => list.push(obj),
            (None, true) => {}
        }
    }

    fn node_labels(&self, node: &str) -> Option<Labels> {
        let node = self.nodes.iter().find(|n| name_of(n).1 == node)?;
        Some(serde_json::from_value(node["metadata"]["labels"].clone()).unwrap_or_default())
    }
}

pub fn reconcile(ctx: &Ctx) {
    let list = |p: &str| ctx.store.list(registry::get(p), None).0;
    let mut view = View {
        claims: list(CLAIMS),
        volumes: list(VOLUMES),
        classes: list("storageclasses"),
        pods: list("pods"),
        nodes: list("nodes"),
    };
    let claims: Vec<(String, String)> = view
        .claims
        .iter()
        .map(|c| (name_of(c).0.to_string(), name_of(c).1.to_string()))
        .collect();
    for (ns, name) in &claims {
        if let Some(claim) = view.claim(ns, name).cloned() {
            if is_terminating(&claim) {
                protect_claim(ctx, &mut view, &claim);
            }
        }
        if let Some(claim) = view.claim(ns, name).cloned() {
            sync_claim(ctx, &mut view, &claim);
        }
    }
    let volumes: Vec<String> = view
        .volumes
        .iter()
        .map(|v| name_of(v).1.to_string())
        .collect();
    for name in &volumes {
        if let Some(volume) = view.volume(name).cloned() {
            sync_volume(ctx, &mut view, volume);
        }
    }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_str()
        .unwrap_or_default()
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key].as_str()
}

fn phase(obj: &Value) -> &str {
    str_at(obj, &["status", "phase"])
}

/// A terminating object whose last finalizer went: the store removed it.
fn is_gone(obj: &Value) -> bool {
    is_terminating(obj)
        && obj["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty)
}

/// A write to `seen` as this pass last saw it. When someone else wrote the
/// object since, nothing is written and the answer is None, as an Update
/// with a stale resourceVersion gets a conflict; the next pass (which the
/// other write triggers) decides again.
fn update(
    ctx: &Ctx,
    view: &mut View,
    plural: &'static str,
    seen: &Value,
    edit: impl FnOnce(&mut Value),
) -> Option<Value> {
    let (ns, name) = name_of(seen);
    let version = seen["metadata"]["resourceVersion"].clone();
    let mut stale = false;
    let written = ctx.store.modify(registry::get(plural), ns, name, |obj| {
        if obj["metadata"]["resourceVersion"] != version {
            stale = true;
            return false;
        }
        edit(obj);
        true
    });
    let written = log_err(plural, written).filter(|_| !stale)?;
    view.put(plural, written.clone());
    Some(written)
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

fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|l| l.iter().any(|f| f == finalizer))
}

// ---------------------------------------------------------------------------
// pvc-protection

/// The pvc-protection controller: a terminating claim loses its finalizer
/// once no pod uses it.
fn protect_claim(ctx: &Ctx, view: &mut View, claim: &Value) {
    if !has_finalizer(claim, PVC_PROTECTION) || claim_in_use(view, claim) {
        return;
    }
    update(ctx, view, CLAIMS, claim, |c| {
        remove_finalizer(c, PVC_PROTECTION);
    });
}

/// `podUsesPVC` over every pod: a pod scheduled to a node (whatever its
/// phase: a finished pod holds its claims until it is deleted) that mounts
/// the claim, or owns it as a generic ephemeral volume and has not shut
/// down. Pods not yet scheduled never hold a claim.
fn claim_in_use(view: &View, claim: &Value) -> bool {
    let (ns, name) = name_of(claim);
    view.pods
        .iter()
        .filter(|p| name_of(p).0 == ns && !str_at(p, &["spec", "nodeName"]).is_empty())
        .any(|pod| {
            let mut volumes = pod["spec"]["volumes"].as_array().into_iter().flatten();
            volumes.any(|v| {
                v["persistentVolumeClaim"]["claimName"] == json!(name)
                    || (!pod_is_shut_down(pod)
                        && v["ephemeral"].is_object()
                        && format!("{}-{}", name_of(pod).1, str_at(v, &["name"])) == name
                        && controlled_by(claim, pod))
            })
        })
}

/// Done with by its kubelet or force-deleted: deleted with no grace left.
fn pod_is_shut_down(pod: &Value) -> bool {
    is_terminating(pod) && pod["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(0)
}

fn controlled_by(obj: &Value, owner: &Value) -> bool {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["controller"] == json!(true) && r["uid"] == owner["metadata"]["uid"])
}

// ---------------------------------------------------------------------------
// Claims

fn sync_claim(ctx: &Ctx, view: &mut View, claim: &Value) {
    if annotation(claim, BIND_COMPLETED).is_some() {
        sync_bound_claim(ctx, view, claim);
    } else {
        sync_unbound_claim(ctx, view, claim);
    }
}

fn sync_unbound_claim(ctx: &Ctx, view: &mut View, claim: &Value) {
    let wanted = str_at(claim, &["spec", "volumeName"]);
    if wanted.is_empty() {
        let delay = delay_binding(claim, &view.classes);
        let found = match find_best_match(claim, &view.volumes, None, delay) {
            Ok(found) => found,
            Err(e) => {
                let (ns, name) = name_of(claim);
                tracing::debug!("error finding PV for claim \"{ns}/{name}\": {e}");
                return;
            }
        };
        // With the scheduler's choice of node, a static volume that node
        // can reach may serve the claim (VolumeBinding's static binding).
        let node = annotation(claim, SELECTED_NODE).unwrap_or_default();
        let found = found.or_else(|| {
            let labels = view.node_labels(node).filter(|_| delay)?;
            find_best_match(claim, &view.volumes, Some(&labels), delay)
                .ok()
                .flatten()
        });
        if let Some(volume) = found.cloned() {
            bind(ctx, view, &volume, claim);
            return;
        }
        if delay && node.is_empty() {
            wait_for_consumer(ctx, view, claim);
        } else if !claim_class(claim).is_empty() {
            provision_claim(ctx, view, claim);
        } else {
            events::record(
                &ctx.store,
                &source(),
                claim,
                EventType::Normal,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set",
            );
        }
        claim_pending(ctx, view, claim);
        return;
    }
    let Some(volume) = view.volume(wanted).cloned() else {
        // Not there (yet): wait for it.
        claim_pending(ctx, view, claim);
        return;
    };
    if volume["spec"]["claimRef"].is_null() {
        match check_volume_satisfies_claim(&volume, claim) {
            Ok(()) => bind(ctx, view, &volume, claim),
            Err(reason) => {
                events::record(
                    &ctx.store,
                    &source(),
                    claim,
                    EventType::Warning,
                    "VolumeMismatch",
                    &format!("Cannot bind to requested volume \"{wanted}\": {reason}"),
                );
                claim_pending(ctx, view, claim);
            }
        }
    } else if is_volume_bound_to_claim(&volume, claim) {
        bind(ctx, view, &volume, claim);
    } else {
        events::record(
            &ctx.store,
            &source(),
            claim,
            EventType::Warning,
            "FailedBinding",
            &format!("volume \"{wanted}\" already bound to a different claim."),
        );
        if annotation(claim, BOUND_BY_CONTROLLER).is_none() {
            claim_pending(ctx, view, claim);
        }
    }
}

fn sync_bound_claim(ctx: &Ctx, view: &mut View, claim: &Value) {
    let wanted = str_at(claim, &["spec", "volumeName"]);
    if wanted.is_empty() {
        let message =
            "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!";
        return claim_lost(ctx, view, claim, "ClaimLost", message);
    }
    let Some(volume) = view.volume(wanted).cloned() else {
        let message = "Bound claim has lost its PersistentVolume. Data on the volume is lost!";
        return claim_lost(ctx, view, claim, "ClaimLost", message);
    };
    let reference = &volume["spec"]["claimRef"];
    if reference.is_null() || reference["uid"] == claim["metadata"]["uid"] {
        bind(ctx, view, &volume, claim);
    } else {
        let message = "Two claims are bound to the same volume, this one is bound incorrectly";
        claim_lost(ctx, view, claim, "ClaimMisbound", message);
    }
}

/// `updateClaimStatus(Pending, nil)`.
fn claim_pending(ctx: &Ctx, view: &mut View, claim: &Value) {
    let status = &claim["status"];
    if phase(claim) == "Pending" && status["accessModes"].is_null() && status["capacity"].is_null()
    {
        return;
    }
    update(ctx, view, CLAIMS, claim, |c| set_claim_status(c, "Pending"));
}

/// `updateClaimStatusWithEvent(Lost, nil, Warning, ...)`: the event only
/// when the phase changes.
fn claim_lost(ctx: &Ctx, view: &mut View, claim: &Value, reason: &str, message: &str) {
    if phase(claim) == "Lost" {
        return;
    }
    if let Some(lost) = update(ctx, view, CLAIMS, claim, |c| set_claim_status(c, "Lost")) {
        events::record(
            &ctx.store,
            &source(),
            &lost,
            EventType::Warning,
            reason,
            message,
        );
    }
}

/// A claim phase without a volume: access modes and capacity reset.
fn set_claim_status(claim: &mut Value, phase: &str) {
    claim["status"]["phase"] = json!(phase);
    if let Some(status) = claim["status"].as_object_mut() {
        status.remove("accessModes");
        status.remove("capacity");
    }
}

/// `emitEventForUnboundDelayBindingClaim`.
fn wait_for_consumer(ctx: &Ctx, view: &View, claim: &Value) {
    let (ns, name) = name_of(claim);
    let waiting: Vec<&str> = view
        .pods
        .iter()
        .filter(|p| name_of(p).0 == ns && !is_finished(p))
        .filter(|p| str_at(p, &["spec", "nodeName"]).is_empty())
        .filter(|p| {
            p["spec"]["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["persistentVolumeClaim"]["claimName"] == json!(name))
        })
        .map(|p| name_of(p).1)
        .collect();
    let (reason, message) = match waiting.as_slice() {
        [] => (
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding".to_string(),
        ),
        [pod] => (
            "WaitForPodScheduled",
            format!("waiting for pod {pod} to be scheduled"),
        ),
        pods => (
            "WaitForPodScheduled",
            format!("waiting for pods {} to be scheduled", pods.join(",")),
        ),
    };
    events::record(
        &ctx.store,
        &source(),
        claim,
        EventType::Normal,
        reason,
        &message,
    );
}

fn is_finished(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// `GetPersistentVolumeClaimClass`: the beta annotation, then the field.
fn claim_class(claim: &Value) -> &str {
    annotation(claim, BETA_CLASS).unwrap_or_else(|| str_at(claim, &["spec", "storageClassName"]))
}

/// `GetPersistentVolumeClass`.
fn volume_class(volume: &Value) -> &str {
    annotation(volume, BETA_CLASS).unwrap_or_else(|| str_at(volume, &["spec", "storageClassName"]))
}

/// `IsDelayBindingMode`: the claim's class exists and binds
/// WaitForFirstConsumer.
fn delay_binding(claim: &Value, classes: &[Value]) -> bool {
    let class = claim_class(claim);
    !class.is_empty()
        && classes.iter().any(|c| {
            name_of(c).1 == class && str_at(c, &["volumeBindingMode"]) == "WaitForFirstConsumer"
        })
}

fn capacity(volume: &Value) -> u128 {
    parse_quantity(str_at(volume, &["spec", "capacity", "storage"])).unwrap_or(0)
}

fn requested(claim: &Value) -> u128 {
    parse_quantity(str_at(claim, &["spec", "resources", "requests", "storage"])).unwrap_or(0)
}

fn access_modes(obj: &Value) -> Vec<String> {
    let modes = obj["spec"]["accessModes"].as_array().into_iter().flatten();
    modes
        .filter_map(|m| m.as_str().map(str::to_string))
        .collect()
}

/// `CheckAccessModes`: the volume offers every mode the claim asks for.
fn access_modes_match(claim: &Value, volume: &Value) -> bool {
    let offered = access_modes(volume);
    access_modes(claim).iter().all(|m| offered.contains(m))
}

/// `CheckVolumeModeMismatches`; an unset mode is Filesystem.
fn volume_mode_mismatch(claim: &Value, volume: &Value) -> bool {
    let mode = |obj: &Value| match str_at(obj, &["spec", "volumeMode"]) {
        "" => "Filesystem".to_string(),
        m => m.to_string(),
    };
    mode(claim) != mode(volume)
}

/// `IsVolumeBoundToClaim`: the volume's claimRef names the claim, with its
/// uid or none.
fn is_volume_bound_to_claim(volume: &Value, claim: &Value) -> bool {
    let (ns, name) = name_of(claim);
    let reference = &volume["spec"]["claimRef"];
    let uid = str_at(reference, &["uid"]);
    !reference.is_null()
        && str_at(reference, &["namespace"]) == ns
        && str_at(reference, &["name"]) == name
        && (uid.is_empty() || uid == str_at(claim, &["metadata", "uid"]))
}

/// `checkVolumeSatisfyClaim`, for a volume a claim asks for by name.
fn check_volume_satisfies_claim(volume: &Value, claim: &Value) -> Result<(), String> {
    if is_terminating(volume) {
        return Err(format!(
            "the volume is marked for deletion \"{}\"",
            name_of(volume).1
        ));
    }
    if capacity(volume) < requested(claim) {
        return Err("requested PV is too small".into());
    }
    if volume_class(volume) != claim_class(claim) {
        return Err("storageClassName does not match".into());
    }
    if volume_mode_mismatch(claim, volume) {
        return Err("incompatible volumeMode".into());
    }
    if !access_modes_match(claim, volume) {
        return Err("incompatible accessMode".into());
    }
    Ok(())
}

/// `findByClaim`: volumes are grouped by their set of access modes, and the
/// groups that offer all the claim's modes searched with the fewest modes
/// first; the first group with a match decides.
fn find_best_match<'a>(
    claim: &Value,
    volumes: &'a [Value],
    node: Option<&Labels>,
    delay: bool,
) -> Result<Option<&'a Value>, String> {
    let wanted = access_modes(claim);
    let mut groups: BTreeMap<Vec<String>, Vec<&'a Value>> = BTreeMap::new();
    for volume in volumes {
        let mut modes = access_modes(volume);
        modes.sort();
        modes.dedup();
        groups.entry(modes).or_default().push(volume);
    }
    let mut groups: Vec<(Vec<String>, Vec<&'a Value>)> = groups
        .into_iter()
        .filter(|(modes, _)| wanted.iter().all(|m| modes.contains(m)))
        .collect();
    groups.sort_by_key(|(modes, _)| modes.len());
    for (_, group) in groups {
        if let Some(found) = find_matching_volume(claim, &group, node, delay)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// `FindMatchingVolume`: a volume pre-bound to the claim wins at once (its
/// phase, class and selector do not matter); otherwise the smallest
/// Available volume of the claim's class that its selector selects. With
/// delayed binding the PV controller (no node) takes only pre-bound
/// volumes; with a node, the volume's node affinity must admit it.
fn find_matching_volume<'a>(
    claim: &Value,
    volumes: &[&'a Value],
    node: Option<&Labels>,
    delay: bool,
) -> Result<Option<&'a Value>, String> {
    let selector = match &claim["spec"]["selector"] {
        Value::Null => None,
        s => Some(LabelSelector::from_object(s).map_err(|e| e.to_string())?),
    };
    let (wanted, class) = (requested(claim), claim_class(claim));
    let mut smallest: Option<(&'a Value, u128)> = None;
    for &volume in volumes {
        let bound_to_claim = is_volume_bound_to_claim(volume, claim);
        if !volume["spec"]["claimRef"].is_null() && !bound_to_claim {
            continue;
        }
        let size = capacity(volume);
        if size < wanted || volume_mode_mismatch(claim, volume) || is_terminating(volume) {
            continue;
        }
        let reachable = node.is_none_or(|labels| admits(volume, labels));
        if bound_to_claim {
            return Ok(reachable.then_some(volume));
        }
        if node.is_none() && delay {
            continue;
        }
        if phase(volume) != "Available"
            || selector
                .as_ref()
                .is_some_and(|s| !s.matches(&volume["metadata"]["labels"]))
            || volume_class(volume) != class
            || !reachable
            || (node.is_some() && !access_modes_match(claim, volume))
        {
            continue;
        }
        if smallest.is_none_or(|(_, s)| s > size) {
            smallest = Some((volume, size));
        }
    }
    Ok(smallest.map(|(v, _)| v))
}

/// Whether a volume's node affinity admits a node with these labels.
fn admits(volume: &Value, labels: &Labels) -> bool {
    serde_json::from_value::<PersistentVolume>(volume.clone())
        .map_or(true, |pv| placement::volume_admits(&pv, labels))
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

/// `bind`: the volume first (claimRef with the claim's uid, Bound), then
/// the claim (volumeName and the binding annotations, Bound with the
/// volume's capacity and access modes).
fn bind(ctx: &Ctx, view: &mut View, volume: &Value, claim: &Value) {
    let reference = &volume["spec"]["claimRef"];
    let exact = !reference.is_null()
        && is_volume_bound_to_claim(volume, claim)
        && reference["uid"] == claim["metadata"]["uid"];
    let by_controller = !is_volume_bound_to_claim(volume, claim)
        && annotation(volume, BOUND_BY_CONTROLLER).is_none();
    let mut volume = volume.clone();
    if !exact || by_controller || phase(&volume) != "Bound" {
        let edit = |v: &mut Value| {
            if !exact {
                v["spec"]["claimRef"] = claim_ref(claim);
            }
            if by_controller {
                v["metadata"]["annotations"][BOUND_BY_CONTROLLER] = json!("yes");
            }
            set_volume_phase(v, "Bound", "");
        };
        match update(ctx, view, VOLUMES, &volume, edit) {
            Some(written) => volume = written,
            None => return,
        }
    }
    let pv = name_of(&volume).1.to_string();
    let capacity = volume["spec"]["capacity"].clone();
    let modes = volume["spec"]["accessModes"].clone();
    update(ctx, view, CLAIMS, claim, |c| {
        if c["spec"]["volumeName"] != json!(pv) {
            c["spec"]["volumeName"] = json!(pv);
            if annotation(c, BOUND_BY_CONTROLLER).is_none() {
                c["metadata"]["annotations"][BOUND_BY_CONTROLLER] = json!("yes");
            }
        }
        if annotation(c, BIND_COMPLETED).is_none() {
            c["metadata"]["annotations"][BIND_COMPLETED] = json!("yes");
        }
        c["status"]["accessModes"] = modes;
        if phase(c) != "Bound" {
            // The capacity is set as the claim becomes Bound, not after.
            c["status"]["capacity"] = capacity;
            c["status"]["phase"] = json!("Bound");
        }
    });
}

/// `updateVolumePhase`: phase, message and the transition time, when the
/// phase changes.
fn set_volume_phase(volume: &mut Value, phase: &str, message: &str) -> bool {
    if volume["status"]["phase"] == json!(phase) {
        return false;
    }
    volume["status"]["phase"] = json!(phase);
    volume["status"]["lastPhaseTransitionTime"] = json!(crate::time::now());
    match volume["status"].as_object_mut() {
        Some(status) if message.is_empty() => {
            status.remove("message");
        }
        _ => volume["status"]["message"] = json!(message),
    }
    true
}

// ---------------------------------------------------------------------------
// Provisioning

/// `provisionClaim` for a claim that names a class; the sandbox's own
/// provisioners act as external ones do.
fn provision_claim(ctx: &Ctx, view: &View, claim: &Value) {
    let class_name = claim_class(claim);
    let Some(class) = view.classes.iter().find(|c| name_of(c).1 == class_name) else {
        events::record(
            &ctx.store,
            &source(),
            claim,
            EventType::Warning,
            "ProvisioningFailed",
            &format!("storageclass.storage.k8s.io \"{class_name}\" not found"),
        );
        return;
    };
    let provisioner = str_at(class, &["provisioner"]);
    if (provisioner != SHARED && provisioner != LOCAL) || is_terminating(claim) {
        return;
    }
    if !claim["spec"]["selector"].is_null() {
        events::record(
            &ctx.store,
            &Source::new(provisioner_component(provisioner)),
            claim,
            EventType::Warning,
            "ProvisioningFailed",
            &format!(
                "failed to provision volume with StorageClass \"{class_name}\": claim Selector is not supported"
            ),
        );
        return;
    }
    let node = annotation(claim, SELECTED_NODE).unwrap_or_default();
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
        "metadata": {"name": pv_name, "annotations": {PROVISIONED_BY: provisioner}},
        "spec": spec,
    });
    match ctx.store.create(registry::get(VOLUMES), "", pv) {
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

fn provisioned_here(volume: &Value) -> bool {
    matches!(annotation(volume, PROVISIONED_BY), Some(SHARED | LOCAL))
}

// ---------------------------------------------------------------------------
// Volumes

fn sync_volume(ctx: &Ctx, view: &mut View, volume: Value) {
    let Some(volume) = protect_volume(ctx, view, volume) else {
        return;
    };
    let name = name_of(&volume).1.to_string();
    let reference = &volume["spec"]["claimRef"];
    if reference.is_null() || str_at(reference, &["uid"]).is_empty() {
        // Unused, or reserved for a claim that has not bound yet.
        set_phase(ctx, view, &volume, "Available");
        return;
    }
    let claim = view
        .claim(
            str_at(reference, &["namespace"]),
            str_at(reference, &["name"]),
        )
        .filter(|c| c["metadata"]["uid"] == reference["uid"])
        .cloned();
    let Some(claim) = claim else {
        release(ctx, view, &volume);
        return;
    };
    let claimed = str_at(&claim, &["spec", "volumeName"]);
    if claimed.is_empty() {
        // The claim's sync completes the binding; the phase stays.
        if volume_mode_mismatch(&claim, &volume) {
            let volume_message = format!("Cannot bind PersistentVolume to requested PersistentVolumeClaim \"{}\" due to incompatible volumeMode.", name_of(&claim).1);
            events::record(
                &ctx.store,
                &source(),
                &volume,
                EventType::Warning,
                "VolumeMismatch",
                &volume_message,
            );
            let claim_message = format!("Cannot bind PersistentVolume \"{name}\" to requested PersistentVolumeClaim due to incompatible volumeMode.");
            events::record(
                &ctx.store,
                &source(),
                &claim,
                EventType::Warning,
                "VolumeMismatch",
                &claim_message,
            );
        }
    } else if claimed == name {
        set_phase(ctx, view, &volume, "Bound");
    } else if annotation(&volume, PROVISIONED_BY).is_some() && policy(&volume) == "Delete" {
        // Provisioned for a claim that went to another volume: not needed.
        release(ctx, view, &volume);
    } else {
        unbind_volume(ctx, view, &volume);
    }
}

fn policy(volume: &Value) -> &str {
    str_at(volume, &["spec", "persistentVolumeReclaimPolicy"])
}

fn set_phase(ctx: &Ctx, view: &mut View, volume: &Value, phase: &str) {
    if self::phase(volume) != phase {
        update(ctx, view, VOLUMES, volume, |v| {
            set_volume_phase(v, phase, "");
        });
    }
}

/// The volume's claim is gone: Released first (for the user, and for
/// external deleters to see), and the reclaim policy on a later pass.
fn release(ctx: &Ctx, view: &mut View, volume: &Value) {
    if !matches!(phase(volume), "Released" | "Failed") {
        set_phase(ctx, view, volume, "Released");
        return;
    }
    match policy(volume) {
        "Retain" => {}
        "Delete" => delete_volume(ctx, view, volume),
        "Recycle" => {
            // The recyclers of hostPath and NFS volumes are not emulated:
            // such a volume stays Released.
            let recyclable =
                !volume["spec"]["hostPath"].is_null() || !volume["spec"]["nfs"].is_null();
            if !recyclable {
                failed(
                    ctx,
                    view,
                    volume,
                    "VolumeFailedRecycle",
                    "No recycler plugin found for the volume!",
                );
            }
        }
        _ => failed(
            ctx,
            view,
            volume,
            "VolumeUnknownReclaimPolicy",
            "Volume has unrecognized PersistentVolumeReclaimPolicy",
        ),
    }
}

/// `deleteVolumeOperation`. The sandbox's provisioners delete their own
/// volumes (directory, then object); another external provisioner's are
/// left to it; the rest go to the in-tree deleters, of which only
/// hostPath's exists, and only for paths under `/tmp/` (it deletes in the
/// controller manager's own filesystem, so the node's data stays).
fn delete_volume(ctx: &Ctx, view: &mut View, volume: &Value) {
    let name = name_of(volume).1.to_string();
    let provisioner = annotation(volume, PROVISIONED_BY).unwrap_or_default();
    if provisioned_here(volume) {
        if phase(volume) == "Released" && !is_terminating(volume) {
            remove_provisioned_dir(ctx, volume);
            delete_object(ctx, view, &name);
        }
        return;
    }
    if !provisioner.is_empty() && !provisioner.starts_with("kubernetes.io/") {
        return;
    }
    let host_path = volume["spec"]["hostPath"]["path"].as_str();
    let outcome = match host_path {
        Some(path) if under_tmp(path) => Ok(()),
        Some(path) => Err(format!(
            "host_path deleter only supports /tmp/.+ but received provided {path}"
        )),
        None => Err(format!(
            "error getting deleter volume plugin for volume \"{name}\": no deletable volume plugin matched"
        )),
    };
    match outcome {
        Ok(()) if !is_terminating(volume) => delete_object(ctx, view, &name),
        Ok(()) => {}
        Err(message) => failed(ctx, view, volume, "VolumeFailedDelete", &message),
    }
}

/// The hostPath deleter's `/tmp/.+` (unanchored).
fn under_tmp(path: &str) -> bool {
    path.match_indices("/tmp/")
        .any(|(at, _)| path[at + 5..].chars().next().is_some_and(|c| c != '\n'))
}

fn delete_object(ctx: &Ctx, view: &mut View, name: &str) {
    let deleted = ctx
        .store
        .delete(registry::get(VOLUMES), "", name, &Default::default());
    match log_err("reclaim", deleted) {
        Some(crate::store::Deleted::Gone(obj)) => {
            view.volumes.retain(|v| name_of(v).1 != name_of(&obj).1);
        }
        Some(crate::store::Deleted::Terminating(obj)) => view.put(VOLUMES, obj),
        None => {}
    }
}

/// `updateVolumePhaseWithEvent(Failed, Warning, ...)`.
fn failed(ctx: &Ctx, view: &mut View, volume: &Value, reason: &str, message: &str) {
    if phase(volume) == "Failed" {
        return;
    }
    let written = update(ctx, view, VOLUMES, volume, |v| {
        set_volume_phase(v, "Failed", message);
    });
    if let Some(written) = written {
        events::record(
            &ctx.store,
            &source(),
            &written,
            EventType::Warning,
            reason,
            message,
        );
    }
}

/// `unbindVolume`: a volume the controller bound forgets the claim; one
/// pre-bound by its creator keeps the claim's name and loses its uid.
fn unbind_volume(ctx: &Ctx, view: &mut View, volume: &Value) {
    update(ctx, view, VOLUMES, volume, |v| {
        if annotation(v, BOUND_BY_CONTROLLER).is_some() {
            if let Some(spec) = v["spec"].as_object_mut() {
                spec.remove("claimRef");
            }
            let emptied = v["metadata"]["annotations"]
                .as_object_mut()
                .is_some_and(|map| {
                    map.remove(BOUND_BY_CONTROLLER);
                    map.is_empty()
                });
            if let Some(meta) = v["metadata"].as_object_mut().filter(|_| emptied) {
                meta.remove("annotations");
            }
        } else if let Some(reference) = v["spec"]["claimRef"].as_object_mut() {
            reference.remove("uid");
        }
        set_volume_phase(v, "Available", "");
    });
}

/// The pv-protection controller: a terminating volume loses its finalizer
/// once it is not Bound. A volume the sandbox provisioned with the Delete
/// policy takes its directory with it, as an external provisioner honouring
/// the reclaim policy does. None when the volume is gone.
fn protect_volume(ctx: &Ctx, view: &mut View, volume: Value) -> Option<Value> {
    if !is_terminating(&volume)
        || !has_finalizer(&volume, PV_PROTECTION)
        || phase(&volume) == "Bound"
    {
        return Some(volume);
    }
    if provisioned_here(&volume) && policy(&volume) == "Delete" {
        remove_provisioned_dir(ctx, &volume);
    }
    let written = update(ctx, view, VOLUMES, &volume, |v| {
        remove_finalizer(v, PV_PROTECTION);
    })?;
    (!is_gone(&written)).then_some(written)
}

/// Deletes the directory of a volume this sandbox provisioned (and only
/// under its own data dir).
fn remove_provisioned_dir(ctx: &Ctx, volume: &Value) {
    if !provisioned_here(volume) || policy(volume) != "Delete" {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(extra: Value) -> Value {
        let mut c = json!({"metadata": {"namespace": "ns", "name": "data", "uid": "u1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                "resources": {"requests": {"storage": "1Gi"}}}});
        for (k, v) in extra.as_object().into_iter().flatten() {
            c["spec"][k] = v.clone();
        }
        c
    }

    fn volume(name: &str, size: &str, modes: Value, extra: Value) -> Value {
        let mut v = json!({"metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": modes, "storageClassName": "fast"},
            "status": {"phase": "Available"}});
        for (k, val) in extra.as_object().into_iter().flatten() {
            v["spec"][k] = val.clone();
        }
        v
    }

    fn best(claim: &Value, volumes: &[Value], delay: bool) -> Option<String> {
        find_best_match(claim, volumes, None, delay)
            .expect("match")
            .map(|v| name_of(v).1.to_string())
    }

    #[test]
    fn the_smallest_volume_of_the_fewest_access_modes_wins() {
        let rwo = json!(["ReadWriteOnce"]);
        let both = json!(["ReadWriteOnce", "ReadWriteMany"]);
        let volumes = [
            volume("big-rwo", "5Gi", rwo.clone(), json!({})),
            volume("small-both", "1Gi", both, json!({})),
            volume("mid-rwo", "2Gi", rwo.clone(), json!({})),
            volume("tiny-rwo", "500Mi", rwo, json!({})),
        ];
        assert_eq!(
            best(&claim(json!({})), &volumes, false).as_deref(),
            Some("mid-rwo")
        );
        let many = claim(json!({"accessModes": ["ReadWriteMany"]}));
        assert_eq!(best(&many, &volumes, false).as_deref(), Some("small-both"));
    }

    #[test]
    fn a_pre_bound_volume_wins_whatever_its_class_phase_or_delay() {
        let mut pre = volume(
            "pre",
            "5Gi",
            json!(["ReadWriteOnce"]),
            json!({"storageClassName": "other", "claimRef": {"namespace": "ns", "name": "data"}}),
        );
        pre["status"]["phase"] = json!("Released");
        let volumes = [
            volume("free", "1Gi", json!(["ReadWriteOnce"]), json!({})),
            pre,
        ];
        assert_eq!(
            best(&claim(json!({})), &volumes, false).as_deref(),
            Some("pre")
        );
        assert_eq!(
            best(&claim(json!({})), &volumes, true).as_deref(),
            Some("pre")
        );
        // Another claim's reservation is no match, nor another uid.
        let other = claim(json!({}));
        let mut taken = volumes.clone();
        taken[1]["spec"]["claimRef"]["uid"] = json!("u2");
        assert_eq!(best(&other, &taken, false).as_deref(), Some("free"));
        assert_eq!(best(&other, &taken, true), None);
    }

    #[test]
    fn selectors_and_node_affinity_filter_unbound_volumes() {
        let mut gold = volume("gold", "2Gi", json!(["ReadWriteOnce"]), json!({}));
        gold["metadata"]["labels"] = json!({"tier": "gold"});
        let pinned = volume(
            "pinned",
            "1Gi",
            json!(["ReadWriteOnce"]),
            json!({"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}}),
        );
        let volumes = [gold, pinned];
        let picky = claim(json!({"selector": {"matchLabels": {"tier": "gold"}}}));
        assert_eq!(best(&picky, &volumes, false).as_deref(), Some("gold"));
        let node = |n: &str| Labels::from([("kubernetes.io/hostname".into(), n.into())]);
        let on = |n: &str| {
            find_best_match(&claim(json!({})), &volumes, Some(&node(n)), true)
                .expect("match")
                .map(|v| name_of(v).1.to_string())
        };
        assert_eq!(on("node-1").as_deref(), Some("pinned"));
        assert_eq!(on("node-2").as_deref(), Some("gold"));
    }

    #[test]
    fn requested_volumes_are_checked_as_kubernetes_does() {
        let small = volume("small", "1Gi", json!(["ReadWriteOnce"]), json!({}));
        let check = |c: &Value, v: &Value| check_volume_satisfies_claim(v, c).err();
        assert_eq!(check(&claim(json!({})), &small), None);
        let big = claim(json!({"resources": {"requests": {"storage": "2Gi"}}}));
        assert_eq!(
            check(&big, &small).as_deref(),
            Some("requested PV is too small")
        );
        let block = claim(json!({"volumeMode": "Block"}));
        assert_eq!(
            check(&block, &small).as_deref(),
            Some("incompatible volumeMode")
        );
        let many = claim(json!({"accessModes": ["ReadWriteMany"]}));
        assert_eq!(
            check(&many, &small).as_deref(),
            Some("incompatible accessMode")
        );
        let classless = claim(json!({"storageClassName": ""}));
        assert_eq!(
            check(&classless, &small).as_deref(),
            Some("storageClassName does not match")
        );
        let mut doomed = small.clone();
        doomed["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        assert_eq!(
            check(&claim(json!({})), &doomed).as_deref(),
            Some("the volume is marked for deletion \"small\"")
        );
    }

    #[test]
    fn the_host_path_deleter_takes_paths_under_tmp() {
        assert!(under_tmp("/tmp/x"));
        assert!(under_tmp("/var/tmp/x"));
        assert!(!under_tmp("/tmp/"));
        assert!(!under_tmp("/tmpfoo/x"));
        assert!(!under_tmp("/data/x"));
    }
}
