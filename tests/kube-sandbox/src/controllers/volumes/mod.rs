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

mod binding;
mod claims;
mod csi;
pub use csi::CLONE_FINALIZER;
mod provision;
mod reclaim;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde_json::Value;

use super::{is_terminating, log_err, name_of, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry;
use claims::{protect_claim, sync_claim};
use reclaim::sync_volume;

/// Provisioner of volumes any node can mount (a shared filesystem).
pub const SHARED: &str = "sandbox.volmig.io/shared";
/// Provisioner of node-local volumes (PV node affinity to one node).
pub const LOCAL: &str = "sandbox.volmig.io/local";
/// The sandbox's CSI driver, and its external-provisioner: volumes any
/// node can mount (`spec.csi`), snapshots (with the snapshot CRDs) and
/// clones (unless `SandboxConfig::csi_clone` is off).
pub const CSI: &str = "csi.sandbox.volmig.io";
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

/// Records an event about `obj` as the persistent volume controller.
fn event(ctx: &Ctx, obj: &Value, kind: EventType, reason: &str, message: &str) {
    let source = Source::new("persistentvolume-controller");
    events::record(&ctx.store, &source, obj, kind, reason, message);
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
        if let Some(claim) = view.claim(ns, name).cloned() {
            csi::protect_clone_source(ctx, &mut view, &claim);
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
