//! The Job controller (pkg/controller/job/job_controller.go, v1.33) for
//! what `batch/v1` Jobs of one pod at a time need, as volmig's in-cluster
//! driver uses them:
//!
//! - pods from the template, named `JOBNAME-xxxxx`, controlled by the Job
//!   (`controller: true`), carrying the labels the job strategy put in the
//!   template (`batch.kubernetes.io/controller-uid`, `controller-uid`,
//!   `batch.kubernetes.io/job-name`, `job-name`) and the finalizer
//!   `batch.kubernetes.io/job-tracking`, as many as
//!   `min(parallelism, completions - succeeded)` wants;
//! - finished pods counted exactly once through
//!   `status.uncountedTerminatedPods` (`trackJobStatusAndRemoveFinalizers`):
//!   the pod's uid is written there first, its finalizer removed, then the
//!   count moved into `status.succeeded` or `status.failed`;
//! - a pod is failed when its phase is Failed or, under the default
//!   `podReplacementPolicy: TerminatingOrFailed` and without a
//!   `podFailurePolicy`, as soon as it is deleted before it succeeded
//!   (`isPodFailed`: "Count deleted Pods as failures to account for orphan
//!   Pods that never have a chance to reach the Failed phase"); a
//!   terminating pod is no longer active, so its replacement is made at
//!   once (subject to the backoff);
//! - a new pod after failures waits `10 s × 2^(failures−1)`, at most 6 min
//!   (`getRemainingTime`, `DefaultJobPodFailureBackOff`,
//!   `MaxJobPodFailureBackOff`); here 100 ms and 6.4 s: the same shape, a
//!   hundredth of the time;
//! - `failed > backoffLimit`: the active pods are deleted and the Job gets
//!   `FailureTarget`, then (no pod left running) `Failed`, both with reason
//!   `BackoffLimitExceeded`; `succeeded >= completions`: `SuccessCriteriaMet`
//!   then `Complete` (reason `CompletionsReached`) and `completionTime`;
//! - the finalizers of a finished or deleted Job's pods, and of pods whose
//!   Job is gone, are removed, so the garbage collector can take them.
//!
//! Not emulated: Indexed completion, `podFailurePolicy`, `successPolicy`,
//! `activeDeadlineSeconds`, `restartPolicy: OnFailure` restarts counted
//! against the limit, suspension's deletion of running pods.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::ownership::claim;
use super::pod_control::{create_pods, Controller};
use super::workloads::{is_active, is_ready, pod_from_template};
use super::{is_terminating, log_err, name_of, Ctx};
use crate::registry;
use crate::store::{controller_uid, DeleteOptions};

/// Keeps a Job's pod until the controller has counted it.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The first delay after a failure (the real controller's is 10 s).
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// The longest (the real one's is 6 min).
pub const MAX_BACKOFF: Duration = Duration::from_millis(6_400);

/// `backoffRecord` per Job uid: failures since the last success, and when
/// the last was counted.
#[derive(Default)]
pub(crate) struct Backoff(Mutex<HashMap<String, (u32, Instant)>>);

impl Backoff {
    /// Folds newly counted pods in: a success resets the streak.
    fn record(&self, job: &str, succeeded: usize, failed: usize, now: Instant) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry(job.to_string()).or_insert((0, now));
        if succeeded > 0 {
            *entry = (0, now);
        }
        if failed > 0 {
            *entry = (entry.0.saturating_add(failed as u32), now);
        }
    }

    /// How long before the Job may make a pod again.
    fn remaining(&self, job: &str, now: Instant) -> Duration {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(job) {
            Some(&(failures, at)) if failures > 0 => {
                delay(failures).saturating_sub(now.duration_since(at))
            }
            _ => Duration::ZERO,
        }
    }
}

/// The delay after `failures` consecutive failures.
pub fn delay(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32.checked_shl(failures - 1).unwrap_or(u32::MAX);
    INITIAL_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF)
}

pub fn reconcile(ctx: &Ctx) {
    let (jobs, _) = ctx.store.list(registry::get("jobs"), None);
    let (pods, _) = ctx.store.list(registry::get("pods"), None);
    for job in &jobs {
        sync(ctx, job, &pods);
    }
    release_orphans(ctx, &jobs, &pods);
}

/// A Job's Complete or Failed condition, when it has one.
pub fn finished_condition(job: &Value) -> Option<&Value> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
}

fn has_finalizer(pod: &Value) -> bool {
    pod["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == TRACKING_FINALIZER))
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

/// `isPodFailed` without a pod failure policy, replacing terminating pods.
fn is_failed(pod: &Value) -> bool {
    phase(pod) == "Failed" || (is_terminating(pod) && phase(pod) != "Succeeded")
}

fn uid(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap_or_default()
}

fn sync(ctx: &Ctx, job: &Value, pods: &[Value]) {
    let Some(owned) = claim(ctx, job, "pods", pods, &job["spec"]["selector"], |_| true) else {
        return;
    };
    if finished_condition(job).is_some() || is_terminating(job) {
        for pod in owned.iter().filter(|p| has_finalizer(p)) {
            remove_finalizer(ctx, pod);
        }
        return;
    }
    let mut status = match &job["status"] {
        Value::Object(_) => job["status"].clone(),
        _ => json!({}),
    };
    let Some(counted) = track_finished(ctx, job, &owned, &mut status) else {
        return;
    };
    ctx.job_backoff
        .record(uid(job), counted.0, counted.1, Instant::now());
    let active: Vec<&Value> = owned.iter().filter(|p| is_active(p)).collect();
    let terminating = owned
        .iter()
        .filter(|p| is_terminating(p) && !matches!(phase(p), "Succeeded" | "Failed"))
        .count();
    let created = manage(ctx, job, &mut status, &active, terminating);
    let now = crate::time::now();
    status["active"] = json!(active.len() + created);
    status["ready"] = json!(active.iter().filter(|p| is_ready(p)).count());
    status["terminating"] = json!(terminating);
    if status["startTime"].is_null() {
        status["startTime"] = json!(now);
    }
    write_status(ctx, job, status);
}

/// Counts newly finished pods (uid to `uncountedTerminatedPods`, finalizer
/// off, then into `succeeded`/`failed`); the numbers of pods counted now,
/// or None when the status could not be written.
fn track_finished(
    ctx: &Ctx,
    job: &Value,
    owned: &[Value],
    status: &mut Value,
) -> Option<(usize, usize)> {
    let uids = |key: &str| -> Vec<String> {
        status["uncountedTerminatedPods"][key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|u| u.as_str().map(str::to_string))
            .collect()
    };
    let (mut succeeded, mut failed) = (uids("succeeded"), uids("failed"));
    let before = (succeeded.len(), failed.len());
    for pod in owned.iter().filter(|p| has_finalizer(p)) {
        let id = uid(pod).to_string();
        if succeeded.contains(&id) || failed.contains(&id) {
            continue;
        }
        if phase(pod) == "Succeeded" {
            succeeded.push(id);
        } else if is_failed(pod) {
            failed.push(id);
        }
    }
    if (succeeded.len(), failed.len()) != before {
        status["uncountedTerminatedPods"] = json!({"succeeded": succeeded, "failed": failed});
        write_status(ctx, job, status.clone())?;
    }
    // Their finalizers off: a pod still holding one stays uncounted.
    let uncounted = |p: &&Value| {
        let id = uid(p);
        succeeded.iter().chain(&failed).any(|u| u == id)
    };
    let holding: HashSet<&str> = owned
        .iter()
        .filter(uncounted)
        .filter(|p| has_finalizer(p) && !remove_finalizer(ctx, p))
        .map(uid)
        .collect();
    let (done_s, left_s): (Vec<String>, Vec<String>) = succeeded
        .into_iter()
        .partition(|u| !holding.contains(u.as_str()));
    let (done_f, left_f): (Vec<String>, Vec<String>) = failed
        .into_iter()
        .partition(|u| !holding.contains(u.as_str()));
    let add = |v: &Value, n: usize| v.as_u64().unwrap_or(0) + n as u64;
    status["succeeded"] = json!(add(&status["succeeded"], done_s.len()));
    status["failed"] = json!(add(&status["failed"], done_f.len()));
    status["uncountedTerminatedPods"] = json!({"succeeded": left_s, "failed": left_f});
    Some((done_s.len(), done_f.len()))
}

/// Ends the Job or makes the pods it lacks; how many were made.
fn manage(
    ctx: &Ctx,
    job: &Value,
    status: &mut Value,
    active: &[&Value],
    terminating: usize,
) -> usize {
    let spec = &job["spec"];
    let count = |key: &str| status[key].as_i64().unwrap_or(0);
    let (succeeded, failed) = (count("succeeded"), count("failed"));
    let completions = spec["completions"].as_i64();
    let parallelism = spec["parallelism"].as_i64().unwrap_or(1).max(0);
    let backoff_limit = spec["backoffLimit"].as_i64().unwrap_or(6);
    let done = match completions {
        Some(c) => succeeded >= c,
        // Work-queue Jobs: done once one pod succeeded and none runs.
        None => succeeded > 0 && active.is_empty(),
    };
    let settled = terminating == 0 && active.is_empty();
    if failed > backoff_limit {
        let message = "Job has reached the specified backoff limit";
        let conditions = ["FailureTarget", "Failed"];
        end(
            ctx,
            status,
            active,
            settled,
            conditions,
            "BackoffLimitExceeded",
            message,
        );
        return 0;
    }
    if done {
        let message = "Reached expected number of succeeded pods";
        let conditions = ["SuccessCriteriaMet", "Complete"];
        end(
            ctx,
            status,
            active,
            settled,
            conditions,
            "CompletionsReached",
            message,
        );
        return 0;
    }
    let wanted = match completions {
        Some(c) => parallelism.min(c - succeeded),
        None if succeeded > 0 => 0,
        None => parallelism,
    };
    let missing = (wanted - active.len() as i64).max(0) as usize;
    if missing == 0
        || spec["suspend"] == json!(true)
        || !ctx
            .job_backoff
            .remaining(uid(job), Instant::now())
            .is_zero()
    {
        return 0;
    }
    let name = name_of(job).1;
    let template = &spec["template"];
    let labels = template["metadata"]["labels"].clone();
    let mut pod = pod_from_template(job, labels, template["spec"].clone());
    pod["metadata"]["generateName"] = json!(format!("{name}-"));
    pod["metadata"]["finalizers"] = json!([TRACKING_FINALIZER]);
    let pods = vec![pod; missing];
    create_pods(ctx, Controller::Generic("job-controller"), job, &pods).0
}

/// The end of a Job: its active pods deleted, the interim condition
/// (`FailureTarget`, `SuccessCriteriaMet`) set, and once no pod is left
/// (`settled`) the final one (`Failed`, `Complete`), with `completionTime`
/// when the Job is `Complete`.
fn end(
    ctx: &Ctx,
    status: &mut Value,
    active: &[&Value],
    settled: bool,
    [interim, last]: [&str; 2],
    reason: &str,
    message: &str,
) {
    delete_pods(ctx, active);
    set_condition(status, interim, reason, message);
    if settled {
        set_condition(status, last, reason, message);
        if last == "Complete" {
            status["completionTime"] = json!(crate::time::now());
        }
    }
}

/// Adds a Job condition (type, True) unless it is there.
fn set_condition(status: &mut Value, kind: &str, reason: &str, message: &str) {
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let Some(list) = status["conditions"].as_array_mut() else {
        return;
    };
    if list.iter().any(|c| c["type"] == kind) {
        return;
    }
    let now = crate::time::now();
    list.push(json!({
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }));
}

fn delete_pods(ctx: &Ctx, pods: &[&Value]) {
    for pod in pods {
        let (ns, name) = name_of(pod);
        log_err(
            "delete job pod",
            ctx.store
                .delete(registry::get("pods"), ns, name, &DeleteOptions::default()),
        );
    }
}

/// Takes the tracking finalizer off; false when the write failed.
fn remove_finalizer(ctx: &Ctx, pod: &Value) -> bool {
    let (ns, name) = name_of(pod);
    let written = ctx.store.modify(registry::get("pods"), ns, name, |p| {
        if let Some(list) = p["metadata"]["finalizers"].as_array_mut() {
            list.retain(|f| f != TRACKING_FINALIZER);
        }
        true
    });
    match written {
        Ok(_) | Err(crate::ApiError::NotFound { .. }) => true,
        Err(e) => {
            tracing::debug!("remove job-tracking finalizer of {ns}/{name}: {e}");
            false
        }
    }
}

/// Pods holding the finalizer whose controlling Job is gone (or that have
/// no controller): nothing will count them, so they are let go.
fn release_orphans(ctx: &Ctx, jobs: &[Value], pods: &[Value]) {
    let live: HashSet<&str> = jobs.iter().map(uid).collect();
    for pod in pods.iter().filter(|p| has_finalizer(p)) {
        let owner = controller_uid(pod).and_then(Value::as_str);
        if owner.is_none_or(|u| !live.contains(u)) {
            remove_finalizer(ctx, pod);
        }
    }
}

/// Writes the status (`workloads::write_status`: the zero counts Go's
/// `omitempty` drops left out); None when the write failed.
fn write_status(ctx: &Ctx, job: &Value, status: Value) -> Option<()> {
    super::workloads::write_status(ctx, "jobs", job, status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_a_failure_and_a_success_resets_it() {
        assert_eq!(delay(0), Duration::ZERO);
        assert_eq!(delay(1), INITIAL_BACKOFF);
        assert_eq!(delay(2), INITIAL_BACKOFF * 2);
        assert_eq!(delay(4), INITIAL_BACKOFF * 8);
        assert_eq!(delay(40), MAX_BACKOFF);
        let backoff = Backoff::default();
        let t0 = Instant::now();
        backoff.record("j", 0, 2, t0);
        assert_eq!(backoff.remaining("j", t0), INITIAL_BACKOFF * 2);
        assert_eq!(
            backoff.remaining("j", t0 + INITIAL_BACKOFF),
            INITIAL_BACKOFF
        );
        assert!(backoff
            .remaining("j", t0 + Duration::from_secs(1))
            .is_zero());
        backoff.record("j", 1, 0, t0);
        assert!(backoff.remaining("j", t0).is_zero());
        assert!(backoff.remaining("other", t0).is_zero());
    }

    #[test]
    fn a_pod_deleted_before_it_succeeded_is_failed() {
        let running = json!({"metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z"}, "status": {"phase": "Running"}});
        assert!(is_failed(&running));
        let succeeded = json!({"metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z"}, "status": {"phase": "Succeeded"}});
        assert!(!is_failed(&succeeded));
        assert!(is_failed(&json!({"status": {"phase": "Failed"}})));
        assert!(!is_failed(&json!({"status": {"phase": "Running"}})));
    }

    #[test]
    fn conditions_are_added_once() {
        let mut status = json!({});
        set_condition(&mut status, "Complete", "CompletionsReached", "m");
        set_condition(&mut status, "Complete", "CompletionsReached", "m");
        assert_eq!(status["conditions"].as_array().map(Vec::len), Some(1));
        let job = json!({"status": status});
        assert_eq!(
            finished_condition(&job).map(|c| &c["reason"]),
            Some(&json!("CompletionsReached"))
        );
    }
}
