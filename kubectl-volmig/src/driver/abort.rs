//! `abort`: an operation stopped where it is, by the CLI or the monitor.

use std::time::Duration;

use jiff::Timestamp;

use super::cutover::machine;
use super::cutover::request::{request_rollback, RollbackFlags};
use super::follow::look_at_attempt;
use super::{objects, DriverError};
use crate::cluster::Sides;
use crate::events::{Recorder, Severity};
use crate::record::figures::{self, Seen};
use crate::record::store::{RecordStore, StoreError};
use crate::record::{AttemptPhase, Phase, VolumeMigration};
use crate::spec::ClaimRef;

/// Aborts operation `op` of `namespace` as `who`: record Aborted (with
/// the running attempt closed as its pods and logs show it: bytes, rate,
/// nodes, time, last lines), its pods, Service and Secrets removed and
/// waited out, Events posted. The destination keeps its data. Prints
/// nothing (the monitor calls it too).
pub async fn abort(
    sides: &Sides,
    namespace: &str,
    op: &str,
    who: &str,
) -> Result<VolumeMigration, DriverError> {
    let client = &sides.destination;
    let store = RecordStore::new(client.clone(), namespace);
    let vm = store.get(op).await?;
    // Once the app has been touched, stopping half-way is no state to
    // leave it in: abort means rollback.
    let cutover = vm.status.cutover.as_ref();
    if cutover.is_some_and(machine::abort_means_rollback) && !vm.status.phase.is_final() {
        let flags = RollbackFlags::default();
        return request_rollback(client, namespace, op, who, flags).await;
    }
    if vm.status.phase.is_stopped() {
        return Err(DriverError::Refused(nothing_to_abort(op, vm.status.phase)));
    }
    // What the running attempt did, seen before its pods go: with no
    // driver (after --detach or Ctrl-C) nothing else recorded it.
    let seen = match vm.running_attempt() {
        Some(a) => Some((a.number, look_at_attempt(sides, &vm, a).await)),
        None => None,
    };
    let vm = store
        .update(op, |vm| {
            if vm.status.phase.is_stopped() {
                return Err(StoreError::Changed(format!(
                    "operation {op} ended ({}) meanwhile",
                    vm.status.phase.as_str()
                )));
            }
            vm.status.phase = Phase::Aborted;
            vm.status.message = Some(format!(
                "aborted by {who}; the destination keeps the data copied so far \
                 (kubectl volmig resume {op} continues from it)"
            ));
            vm.status.aborted_by = Some(who.to_string());
            vm.status.driver = None;
            let now = Timestamp::now();
            vm.status.completion_time = Some(now);
            let reason = Some(format!("aborted by {who}"));
            if let Some(a) = vm.status.attempts.last_mut().filter(|a| !a.phase.is_over()) {
                let seen = match &seen {
                    Some((n, seen)) if *n == a.number => seen.clone(),
                    _ => Seen::default(),
                };
                figures::close(a, AttemptPhase::Aborted, reason, None, &seen, now);
                if let Some(p) = &seen.progress {
                    let newest = figures::newest(vm.status.progress.as_ref(), Some(p));
                    vm.status.progress = newest.cloned();
                }
            }
            vm.status.elapsed_seconds = figures::recorded_elapsed(&vm.status.attempts);
            Ok(())
        })
        .await
        .map_err(|e| match e {
            StoreError::Changed(m) => DriverError::Refused(m),
            e => e.into(),
        })?;
    let namespaces = (
        vm.spec.source.namespace.as_str(),
        vm.spec.destination.namespace.as_str(),
    );
    objects::cleanup(sides, op, namespaces, vm.reads()).await?;
    // A resume right after must not meet a receiver still writing its
    // final checkpoint.
    let wait = Duration::from_secs(60);
    if !objects::wait_pods_gone(sides, op, namespaces, wait).await? {
        tracing::warn!("some of operation {op}'s pods are still terminating");
    }
    let destination = ClaimRef {
        namespace: vm.spec.destination.namespace.clone(),
        name: vm.spec.destination.name.clone(),
    };
    Recorder::new(client.clone(), op)
        .post(
            &[&vm.spec.source, &destination],
            Severity::Warning,
            "MigrationAborted",
            "aborted; the destination keeps the data copied so far",
        )
        .await;
    Ok(vm)
}

/// Why `abort` refuses an operation that has ended.
fn nothing_to_abort(op: &str, phase: Phase) -> String {
    format!(
        "operation {op} is {} already; nothing to abort",
        phase.as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn troubleshooting_quotes_the_refusal_abort_prints() {
        let doc = include_str!("../../../docs/troubleshooting.md");
        let message = nothing_to_abort("OP", Phase::Succeeded);
        assert!(doc.contains(&message), "{message:?} not quoted");
    }
}
