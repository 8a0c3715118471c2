//! Pod creation by the workload controllers, as `RealPodControl`
//! (pkg/controller/controller_utils.go) and the StatefulSet's pod control
//! do it: a create the API server refuses (Pod Security admission, a
//! missing ServiceAccount) records a `FailedCreate` warning on the owner,
//! and the owner's creations back off, as its work queue would requeue it
//! rate-limited: 1 s, doubling up to 10 s here (the real limiter starts at
//! 5 ms and reaches 1000 s). A create that succeeds ends the back-off.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{name_of, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry;
use crate::status::ApiError;

const FIRST_DELAY: Duration = Duration::from_secs(1);
const MAX_DELAY: Duration = Duration::from_secs(10);

/// Per owner uid: when its last create failed and how long to wait.
#[derive(Default)]
pub(crate) struct Backoff(Mutex<HashMap<String, (Instant, Duration)>>);

impl Backoff {
    fn waiting(&self, owner: &str, now: Instant) -> bool {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(owner)
            .is_some_and(|(at, delay)| now.duration_since(*at) < *delay)
    }

    fn failed(&self, owner: &str, now: Instant) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let delay = map
            .get(owner)
            .map_or(FIRST_DELAY, |(_, d)| (*d * 2).min(MAX_DELAY));
        map.insert(owner.to_string(), (now, delay));
    }

    fn succeeded(&self, owner: &str) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(owner);
    }
}

/// How an owner's creations went in one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every pod asked for was created (or none was asked for).
    Created,
    /// The owner is backing off from an earlier failure: nothing tried.
    BackingOff,
    /// A create was refused with this error; the rest were not tried.
    Failed(String),
}

/// Who records the event, and how its message reads.
#[derive(Debug, Clone, Copy)]
pub enum Controller {
    /// `replicaset-controller`, `job-controller`, ...: "Error creating: ERR".
    Generic(&'static str),
    /// "create Pod NAME in StatefulSet SET failed error: ERR".
    StatefulSet,
}

/// Creates `pods` for `owner` in its namespace, in order, stopping at the
/// first refusal (the slow-start batches of the real controllers stop at a
/// failed batch, and the first batch is one pod). How many were created,
/// and how it went.
pub fn create_pods(
    ctx: &Ctx,
    controller: Controller,
    owner: &Value,
    pods: &[Value],
) -> (usize, Outcome) {
    if pods.is_empty() {
        return (0, Outcome::Created);
    }
    let uid = owner["metadata"]["uid"].as_str().unwrap_or_default();
    let now = Instant::now();
    if ctx.pod_creates.waiting(uid, now) {
        return (0, Outcome::BackingOff);
    }
    let (ns, _) = name_of(owner);
    for (created, pod) in pods.iter().enumerate() {
        if let Err(e) = ctx.store.create(registry::get("pods"), ns, pod.clone()) {
            ctx.pod_creates.failed(uid, now);
            let message = e.to_string();
            if !terminating_namespace(&e) {
                record(ctx, controller, owner, pod, &message);
            }
            tracing::debug!("creating a pod of {}: {message}", name_of(owner).1);
            return (created, Outcome::Failed(message));
        }
    }
    ctx.pod_creates.succeeded(uid);
    (pods.len(), Outcome::Created)
}

/// The refusal of a namespace being deleted, for which the real pod
/// control records no event.
fn terminating_namespace(e: &ApiError) -> bool {
    matches!(e, ApiError::Forbidden(m) if m.contains("because it is being terminated"))
}

fn record(ctx: &Ctx, controller: Controller, owner: &Value, pod: &Value, error: &str) {
    let (component, message) = match controller {
        Controller::Generic(component) => (component, format!("Error creating: {error}")),
        Controller::StatefulSet => (
            "statefulset-controller",
            format!(
                "create Pod {} in StatefulSet {} failed error: {error}",
                pod["metadata"]["name"].as_str().unwrap_or_default(),
                name_of(owner).1
            ),
        ),
    };
    events::record(
        &ctx.store,
        &Source::new(component),
        owner,
        EventType::Warning,
        "FailedCreate",
        &message,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_backs_off_doubling_and_a_success_ends_it() {
        let backoff = Backoff::default();
        let t0 = Instant::now();
        assert!(!backoff.waiting("o", t0));
        backoff.failed("o", t0);
        assert!(backoff.waiting("o", t0 + Duration::from_millis(900)));
        assert!(!backoff.waiting("o", t0 + FIRST_DELAY));
        let t1 = t0 + FIRST_DELAY;
        backoff.failed("o", t1);
        assert!(backoff.waiting("o", t1 + Duration::from_millis(1900)));
        assert!(!backoff.waiting("o", t1 + 2 * FIRST_DELAY));
        for _ in 0..10 {
            backoff.failed("o", t1);
        }
        assert!(!backoff.waiting("o", t1 + MAX_DELAY));
        backoff.succeeded("o");
        assert!(!backoff.waiting("o", t1));
        assert!(!backoff.waiting("other", t1));
    }
}
