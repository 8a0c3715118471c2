//! The TTL-after-finished controller
//! (pkg/controller/ttlafterfinished/ttlafterfinished_controller.go): a
//! finished Job with `spec.ttlSecondsAfterFinished` is deleted once that
//! many seconds have passed since its Complete or Failed condition's
//! `lastTransitionTime`, with a uid precondition so that a new Job of the
//! same name is never taken for it. Its pods then go with it through the
//! garbage collector. The real controller asks for Foreground propagation;
//! the sandbox's store does not hold an owner for its dependents, so the
//! Job goes first and its pods right after (background), which ends the
//! same: nothing of the Job is left.

use serde_json::Value;
use time::OffsetDateTime;

use super::jobs::finished_condition;
use super::{is_terminating, log_err, name_of, Ctx};
use crate::registry;
use crate::store::DeleteOptions;

pub fn reconcile(ctx: &Ctx) {
    let res = registry::get("jobs");
    let now = OffsetDateTime::now_utc();
    for job in ctx.store.list(res, None).0 {
        if is_terminating(&job) || !expired(&job, now) {
            continue;
        }
        let (ns, name) = name_of(&job);
        let opts = DeleteOptions {
            uid: job["metadata"]["uid"].as_str().map(str::to_string),
            ..DeleteOptions::default()
        };
        tracing::debug!("ttl-after-finished: deleting job {ns}/{name}");
        log_err(
            "delete finished job",
            ctx.store.delete(res, ns, name, &opts),
        );
    }
}

/// `needsCleanup` and `timeLeft`: finished, with a TTL, and past it.
fn expired(job: &Value, now: OffsetDateTime) -> bool {
    let Some(ttl) = job["spec"]["ttlSecondsAfterFinished"].as_i64() else {
        return false;
    };
    let finished_at = finished_condition(job)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(crate::time::parse);
    finished_at.is_some_and(|at| now >= at + time::Duration::seconds(ttl))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(ttl: Option<i64>, finished: Option<&str>) -> Value {
        let conditions: Vec<Value> = finished
            .map(|at| json!({"type": "Complete", "status": "True", "lastTransitionTime": at}))
            .into_iter()
            .collect();
        json!({"spec": {"ttlSecondsAfterFinished": ttl}, "status": {"conditions": conditions}})
    }

    #[test]
    fn a_finished_job_expires_its_ttl_after_it_finished() {
        let at = time::macros::datetime!(2026-01-01 0:00 UTC);
        let finished = Some("2026-01-01T00:00:00Z");
        assert!(!expired(
            &job(Some(60), finished),
            at + time::Duration::seconds(59)
        ));
        assert!(expired(
            &job(Some(60), finished),
            at + time::Duration::seconds(60)
        ));
        assert!(expired(&job(Some(0), finished), at));
        assert!(!expired(&job(None, finished), at + time::Duration::days(9)));
        assert!(!expired(&job(Some(0), None), at));
    }
}
