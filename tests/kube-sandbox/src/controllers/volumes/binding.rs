//! Matching claims to volumes (`findByClaim`, `checkVolumeSatisfyClaim`)
//! and binding them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolume;
use serde_json::{json, Value};

use super::{
    annotation, phase, str_at, update, Labels, View, BETA_CLASS, BIND_COMPLETED,
    BOUND_BY_CONTROLLER, CLAIMS, VOLUMES,
};
use crate::controllers::{is_terminating, name_of, placement, Ctx};
use crate::registry::rules::parse_quantity;
use crate::selector::LabelSelector;

/// `GetPersistentVolumeClaimClass` and `GetPersistentVolumeClass`, which
/// read alike: the beta annotation, then the field.
pub(super) fn class_of(obj: &Value) -> &str {
    annotation(obj, BETA_CLASS).unwrap_or_else(|| str_at(obj, &["spec", "storageClassName"]))
}

/// `IsDelayBindingMode`: the claim's class exists and binds
/// WaitForFirstConsumer.
pub(super) fn delay_binding(claim: &Value, classes: &[Value]) -> bool {
    let class = class_of(claim);
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
pub(super) fn volume_mode_mismatch(claim: &Value, volume: &Value) -> bool {
    let mode = |obj: &Value| match str_at(obj, &["spec", "volumeMode"]) {
        "" => "Filesystem".to_string(),
        m => m.to_string(),
    };
    mode(claim) != mode(volume)
}

/// `IsVolumeBoundToClaim`: the volume's claimRef names the claim, with its
/// uid or none.
pub(super) fn is_volume_bound_to_claim(volume: &Value, claim: &Value) -> bool {
    let (ns, name) = name_of(claim);
    let reference = &volume["spec"]["claimRef"];
    let uid = str_at(reference, &["uid"]);
    !reference.is_null()
        && str_at(reference, &["namespace"]) == ns
        && str_at(reference, &["name"]) == name
        && (uid.is_empty() || uid == str_at(claim, &["metadata", "uid"]))
}

/// `checkVolumeSatisfyClaim`, for a volume a claim asks for by name.
pub(super) fn check_volume_satisfies_claim(volume: &Value, claim: &Value) -> Result<(), String> {
    if is_terminating(volume) {
        return Err(format!(
            "the volume is marked for deletion \"{}\"",
            name_of(volume).1
        ));
    }
    if capacity(volume) < requested(claim) {
        return Err("requested PV is too small".into());
    }
    if class_of(volume) != class_of(claim) {
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
pub(super) fn find_best_match<'a>(
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
    let (wanted, class) = (requested(claim), class_of(claim));
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
            || class_of(volume) != class
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

pub(super) fn claim_ref(claim: &Value) -> Value {
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
pub(super) fn bind(ctx: &Ctx, view: &mut View, volume: &Value, claim: &Value) {
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
pub(super) fn set_volume_phase(volume: &mut Value, phase: &str, message: &str) -> bool {
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
