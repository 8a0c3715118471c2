//! The control loops of kube-controller-manager and the scheduler that
//! volmig depends on. Each is level-triggered: it looks at the whole store
//! and fixes what differs from what should be, and runs again after every
//! write (and on a slow tick, for anything time-based). With the handful of
//! objects a test makes, that is cheap and cannot miss an event.

pub mod autoscaler;
pub mod cloud;
pub mod crds;
pub mod daemonsets;
pub mod endpoints;
pub mod gc;
pub mod jobs;
pub mod namespaces;
pub mod ownership;
pub mod placement;
pub mod pod_control;
pub mod root_ca;
pub mod scheduler;
pub mod snapshots;
pub mod tree_copy;
pub mod ttl;
pub mod volumes;
pub mod workloads;
mod workloads_sts;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::auth::Authority;
use crate::kubelet::Freezer;
use crate::store::Store;
use crate::task::Owned;

/// What the controllers share.
pub struct Ctx {
    pub store: Arc<Store>,
    /// The cluster CA, which the root CA publisher copies into namespaces.
    pub authority: Arc<Authority>,
    /// Provisioned volumes are directories under `<data_dir>/volumes`.
    pub data_dir: PathBuf,
    /// The scheduler's pods waiting for their claims (PreBind).
    pub(crate) assumed: scheduler::Assumptions,
    /// When the DaemonSet controller may next delete a failed pod.
    pub(crate) daemon_backoff: daemonsets::Backoff,
    /// When the Job controller may next make a pod for a Job.
    pub(crate) job_backoff: jobs::Backoff,
    /// When an owner whose pod was refused may next create one.
    pub(crate) pod_creates: pod_control::Backoff,
    /// Whether the sandbox's CSI driver reports CLONE_VOLUME.
    pub csi_clone: bool,
    /// Whether the snapshot CRDs are installed (the snapshot controller
    /// and the CSI driver's snapshotter run only then).
    pub snapshots: bool,
    /// The kubelets' container processes, which the CSI driver stops
    /// while it copies a volume (see `kubelet::freeze`).
    pub freezer: Arc<Freezer>,
    /// The kubelets' loop devices, detached when their PV is deleted.
    pub devices: Arc<crate::kubelet::Devices>,
    /// Whether the cloud provisions load balancers for LoadBalancer
    /// Services (see [`cloud`]).
    pub load_balancers: Arc<AtomicBool>,
}

impl Ctx {
    pub fn new(store: Arc<Store>, data_dir: PathBuf, authority: Arc<Authority>) -> Ctx {
        Ctx {
            store,
            authority,
            data_dir,
            assumed: Default::default(),
            daemon_backoff: Default::default(),
            job_backoff: Default::default(),
            pod_creates: Default::default(),
            csi_clone: true,
            snapshots: true,
            freezer: Arc::default(),
            devices: Arc::default(),
            load_balancers: Arc::new(AtomicBool::new(true)),
        }
    }
}

/// A control loop: one pass over the store.
pub type Reconcile = fn(&Ctx);

/// Runs `reconcile` after every change to the store (changes that arrive
/// while it runs are folded into the next pass) and at least every second.
pub fn spawn(name: &'static str, ctx: Arc<Ctx>, reconcile: Reconcile) -> Owned {
    Owned::spawn(async move {
        let mut version = ctx.store.subscribe_version();
        loop {
            let pass = {
                let ctx = ctx.clone();
                tokio::task::spawn_blocking(move || reconcile(&ctx))
            };
            if let Err(e) = pass.await {
                tracing::error!("controller {name} panicked: {e}");
            }
            tokio::select! {
                changed = version.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            // Let a burst of writes settle into one pass.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

/// Starts every controller.
pub fn spawn_all(ctx: Arc<Ctx>) -> Vec<Owned> {
    vec![
        spawn("namespaces", ctx.clone(), namespaces::reconcile),
        spawn("root-ca-cert-publisher", ctx.clone(), root_ca::reconcile),
        spawn("garbage-collector", ctx.clone(), gc::reconcile),
        spawn("apiextensions-controllers", ctx.clone(), crds::reconcile),
        spawn("persistentvolume-binder", ctx.clone(), volumes::reconcile),
        spawn("snapshot-controller", ctx.clone(), snapshots::reconcile),
        spawn("scheduler", ctx.clone(), scheduler::reconcile),
        spawn("workloads", ctx.clone(), workloads::reconcile),
        spawn("daemonset-controller", ctx.clone(), daemonsets::reconcile),
        spawn("job-controller", ctx.clone(), jobs::reconcile),
        spawn("ttl-after-finished-controller", ctx.clone(), ttl::reconcile),
        spawn(
            "horizontal-pod-autoscaler",
            ctx.clone(),
            autoscaler::reconcile,
        ),
        spawn("service-controller", ctx.clone(), cloud::reconcile),
        spawn("endpoints", ctx, endpoints::reconcile),
    ]
}

/// `metadata.namespace` and `metadata.name` of an object.
pub fn name_of(obj: &Value) -> (&str, &str) {
    (
        obj["metadata"]["namespace"].as_str().unwrap_or_default(),
        obj["metadata"]["name"].as_str().unwrap_or_default(),
    )
}

pub fn is_terminating(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}

/// Sets a pod condition by type; true when something changed. The
/// transition time moves only when the status does.
pub fn set_condition(pod: &mut Value, mut condition: Value) -> bool {
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let Some(list) = pod["status"]["conditions"].as_array_mut() else {
        return false;
    };
    let existing = list.iter_mut().find(|c| c["type"] == condition["type"]);
    condition["lastTransitionTime"] = match &existing {
        Some(e) if e["status"] == condition["status"] => e["lastTransitionTime"].clone(),
        _ => json!(crate::time::now()),
    };
    condition["lastProbeTime"] = Value::Null;
    match existing {
        Some(e) if *e == condition => return false,
        Some(e) => *e = condition,
        None => list.push(condition),
    }
    true
}

/// Logs a controller write that failed; the next pass tries again.
pub fn log_err<T>(what: &str, result: Result<T, crate::ApiError>) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(crate::ApiError::NotFound { .. }) => None,
        Err(e) => {
            tracing::debug!("{what}: {e}");
            None
        }
    }
}
