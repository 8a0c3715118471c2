//! Who drives a detached operation now, and whether its Job still runs
//! pods: what `resume`, `drive` and `--detach` decide on.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::POLL;
use crate::driver::judge::{PodView, DRIVER_ROLE};
use crate::driver::DriverError;
use crate::names;
use crate::record::store::RecordStore;
use crate::record::{Driver as Lease, Phase, VolumeMigration};
use crate::resources::access::driver_rbac_name;
use crate::resources::driver::{DRIVER_CONTAINER, DRIVER_OF_KEY};

/// Whether a Job may still run a pod: not deleted, not Complete, not
/// Failed.
pub(super) fn is_active(job: &Job) -> bool {
    let ended = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| matches!(c.type_.as_str(), "Complete" | "Failed") && c.status == "True");
    job.metadata.deletion_timestamp.is_none() && !ended
}

/// The driver that holds `vm` now, other than `me`, if it is alive: its
/// heartbeat is recent, it is not a process of this machine that has
/// gone, and, for a pod, the pod still runs. A dead pod of a Job that
/// will replace it is alive for a client (which follows the
/// replacement) but not for the replacement itself (which takes over).
pub async fn live_holder(client: &Client, vm: &VolumeMigration, me: &str) -> Option<Lease> {
    let lease = vm.status.driver.as_ref()?;
    if lease.holder == me || !lease.is_alive(Timestamp::now()) {
        return None;
    }
    let Some(pod) = names::holder_pod(&lease.holder) else {
        return Some(lease.clone());
    };
    let ns = &vm.metadata.namespace;
    if !pod_gone(client, ns, pod).await {
        return Some(lease.clone());
    }
    let replaced = names::holder_pod(me).is_none() && job_active(client, vm).await;
    replaced.then(|| lease.clone())
}

/// Whether the pod `name` has stopped for good: deleted, or its
/// container ended (a driver pod never restarts). A pod being deleted
/// still runs: it lets its lease go itself.
async fn pod_gone(client: &Client, ns: &str, name: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    match pods.get_opt(name).await {
        Ok(None) => true,
        Ok(Some(pod)) => pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| matches!(p, "Succeeded" | "Failed")),
        // Unknown: as alive, until the heartbeat goes stale.
        Err(_) => false,
    }
}

/// Whether `vm`'s driver Job may still run a pod.
pub async fn job_active(client: &Client, vm: &VolumeMigration) -> bool {
    let Some(ic) = &vm.status.in_cluster else {
        return false;
    };
    let jobs: Api<Job> = Api::namespaced(client.clone(), &vm.metadata.namespace);
    matches!(jobs.get_opt(&ic.job).await, Ok(Some(job)) if is_active(&job))
}

/// `op`'s driver pods in `ns`, oldest first.
pub async fn driver_pods(client: &Client, ns: &str, op: &str) -> Result<Vec<Pod>, DriverError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("{DRIVER_OF_KEY}={op}");
    let mut list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| DriverError::kube(format!("list the driver pods of {op}"), e))?
        .items;
    list.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
    Ok(list)
}

/// How a freshly started driver is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// This pod holds the operation.
    Driving(String),
    /// This pod runs and follows the client that holds the operation,
    /// to take over when it stops.
    Following { pod: String, holder: String },
    /// The operation ended before a pod was seen to drive it.
    Ended(Phase),
    /// Why no pod drives it (yet): an image that cannot be pulled, a
    /// Job that gave up, or no pod within the time given.
    Stuck(String),
}

/// Waits until a pod of `vm`'s Job holds the operation, or says why none
/// does within `timeout`.
pub async fn await_start(
    client: &Client,
    store: &RecordStore,
    op: &str,
    timeout: Duration,
) -> Result<Start, DriverError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let vm = store.get(op).await?;
        let holder = vm.status.driver.as_ref().map(|d| d.holder.as_str());
        if let Some(pod) = holder.and_then(names::holder_pod) {
            return Ok(Start::Driving(pod.to_string()));
        }
        if vm.status.phase.is_stopped() {
            return Ok(Start::Ended(vm.status.phase));
        }
        let pods = driver_pods(client, &vm.metadata.namespace, op).await?;
        let client_holds = vm
            .status
            .driver
            .as_ref()
            .filter(|d| d.is_alive(Timestamp::now()));
        let running = pods.iter().rev().find(|p| view(p).running);
        if let (Some(lease), Some(pod)) = (client_holds, running) {
            return Ok(Start::Following {
                pod: pod.name_any(),
                holder: lease.holder.clone(),
            });
        }
        if let Some(why) = pods.iter().rev().find_map(|p| view(p).stuck()) {
            return Ok(Start::Stuck(why));
        }
        if !job_active(client, &vm).await && !pods.is_empty() {
            // Its pod may have ended the operation since it was read.
            let vm = store.get(op).await?;
            if vm.status.phase.is_stopped() {
                return Ok(Start::Ended(vm.status.phase));
            }
            return Ok(Start::Stuck(format!(
                "its Job {} has given up (kubectl describe job {} -n {})",
                driver_rbac_name(op),
                driver_rbac_name(op),
                vm.metadata.namespace
            )));
        }
        if tokio::time::Instant::now() >= deadline {
            let state = match pods.last().map(view) {
                Some(p) => format!(
                    "pod {} is {}",
                    p.name,
                    p.phase.as_deref().unwrap_or("Pending")
                ),
                None => "no pod was created".to_string(),
            };
            return Ok(Start::Stuck(format!(
                "no driver pod took it up within {}s ({state})",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A driver pod as the judge of attempts sees a mover pod.
fn view(pod: &Pod) -> PodView {
    PodView::of_container(DRIVER_ROLE, &pod.name_any(), Some(pod), DRIVER_CONTAINER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};

    fn job(conditions: &[(&str, &str)]) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s)| JobCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            ..JobCondition::default()
                        })
                        .collect(),
                ),
                ..JobStatus::default()
            }),
            ..Job::default()
        }
    }

    #[test]
    fn a_job_runs_pods_until_it_is_complete_or_has_failed() {
        assert!(is_active(&job(&[])));
        assert!(is_active(&job(&[
            ("Suspended", "True"),
            ("Complete", "False")
        ])));
        assert!(!is_active(&job(&[("Complete", "True")])));
        assert!(!is_active(&job(&[
            ("FailureTarget", "True"),
            ("Failed", "True")
        ])));
    }
}
