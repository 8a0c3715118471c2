//! What `migrate` and `resume` say on stderr when they take an operation
//! up or let it go: a resumed operation as it is now, Ctrl-C, an abort
//! from elsewhere (pure).

use crate::record::cutover::Step;
use crate::record::figures::Budget;
use crate::record::{Phase, VolumeMigration};

/// What runs in the cluster when the user interrupts a driving client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftBehind {
    /// Attempt N's sender exists and has not finished: it copies on.
    Copying(u32),
    /// No sender runs: nothing copies until `resume`.
    Idle,
    /// The cluster could not be asked.
    Unknown,
}

/// After Ctrl-C: what goes on without a driver, and how to continue.
pub fn interrupted(op: &str, ns: &str, left: LeftBehind) -> String {
    let what = match left {
        LeftBehind::Copying(n) => format!(
            "operation {op} keeps running in the cluster: attempt {n} copies without a driver"
        ),
        LeftBehind::Idle => {
            format!("operation {op} is recorded; nothing is copying (no sender is running)")
        }
        LeftBehind::Unknown => {
            format!("operation {op} is recorded; whether a sender still copies could not be read")
        }
    };
    let how = match left {
        LeftBehind::Copying(_) => "Reattach with",
        LeftBehind::Idle | LeftBehind::Unknown => "Continue it with",
    };
    format!("interrupted: {what}.\n{how}: kubectl volmig resume {op} -n {ns}")
}

/// A cutover left with the app possibly stopped: the two ways on.
pub fn cutover_interrupted(op: &str, ns: &str, step: Step) -> String {
    format!(
        "the cutover stopped at {}: the app may be down. Finish the move with \
         kubectl volmig resume {op} -n {ns}, or undo it with kubectl volmig rollback {op} -n {ns}",
        step.as_str()
    )
}

/// An operation aborted while this client drove or followed it: by whom,
/// and that its data stays.
pub fn aborted(vm: &VolumeMigration) -> String {
    let op = &vm.metadata.name;
    let by = vm.status.aborted_by.as_deref().unwrap_or("another client");
    format!(
        "operation {op} was aborted by {by}; the destination keeps the data copied so far \
         (kubectl volmig resume {op} -n {} continues from it)",
        vm.metadata.namespace
    )
}

/// What `resume` is about to do with `vm` (as read, before it is marked
/// Running again when `restart`): no plan, which may be stale; each new
/// attempt says where its sender goes.
pub fn resuming(vm: &VolumeMigration, restart: bool) -> String {
    let op = &vm.metadata.name;
    let spec = &vm.spec;
    let route = format!(
        "operation {op}: {} to {}/{}",
        spec.source, spec.destination.namespace, spec.destination.name
    );
    let attempts = vm.status.attempts.len();
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    let what = match vm.status.attempts.last() {
        _ if restart => {
            let allowed = Budget::of(vm).allowed;
            format!(
                "{} after {attempts} attempt{}; running it again with a fresh budget of \
                 {allowed} attempt{}, from what the destination holds",
                vm.status.phase.as_str(),
                plural(attempts as u64),
                plural(allowed)
            )
        }
        None => "no attempt has run yet; starting".to_string(),
        Some(a) if !a.phase.is_over() && vm.status.phase != Phase::Succeeded => format!(
            "attempt {} was left {}; taking it over",
            a.number,
            a.phase.as_str().to_lowercase()
        ),
        Some(a) => format!("picking it up after attempt {}", a.number),
    };
    format!("{route}\n  {what}\n{}", reuses(vm))
}

/// What the next attempt reuses of the destination (issue 20): the bytes
/// the last attempt on it had done, which its checkpoint holds at most;
/// and, while its node is away, that it is waited for.
fn reuses(vm: &VolumeMigration) -> String {
    let status = &vm.status;
    let first = status
        .abandoned_destinations
        .last()
        .map_or(0, |a| a.replaced_before_attempt);
    let mut on_it = status.attempts.iter().filter(|a| a.number >= first);
    let mut out = String::new();
    if let Some(a) = on_it.rfind(|a| a.bytes_done > 0) {
        let human = |b: u64| mover::stats::human_bytes(b as f64);
        let of = match a.bytes_total {
            0 => String::new(),
            total => format!(" of {}", human(total)),
        };
        out += &format!(
            "  the destination holds up to {}{of} from attempt {}: the next attempt resumes from \
             its checkpoint and sends only the rest\n",
            human(a.bytes_done),
            a.number
        );
    }
    if let Some(waiting) = &status.destination_unavailable {
        out += &format!("  {waiting}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Attempt, AttemptPhase, Metadata, MigrationStatus, API_VERSION, KIND};
    use crate::spec::{ClaimRef, MigrationSpec};

    fn record(phase: Phase, attempts: &[AttemptPhase]) -> VolumeMigration {
        let mut spec = MigrationSpec::new(
            ClaimRef::new("default", "data"),
            ClaimRef::new("default", "data-fast"),
        );
        spec.retry.backoff_limit = 2;
        VolumeMigration {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            metadata: Metadata {
                name: "data-x7k2p".into(),
                namespace: "default".into(),
                ..Metadata::default()
            },
            spec,
            status: MigrationStatus {
                phase,
                attempts: attempts
                    .iter()
                    .zip(1..)
                    .map(|(phase, number)| Attempt {
                        number,
                        phase: *phase,
                        ..Attempt::default()
                    })
                    .collect(),
                ..MigrationStatus::default()
            },
        }
    }

    #[test]
    fn ctrl_c_says_whether_anything_copies_on() {
        let copying = interrupted("data-x7k2p", "default", LeftBehind::Copying(2));
        assert_eq!(
            copying,
            "interrupted: operation data-x7k2p keeps running in the cluster: attempt 2 copies \
             without a driver.\nReattach with: kubectl volmig resume data-x7k2p -n default"
        );
        let idle = interrupted("data-x7k2p", "default", LeftBehind::Idle);
        assert!(!idle.contains("keeps running"), "{idle}");
        assert!(idle.contains("is recorded; nothing is copying"), "{idle}");
        assert!(
            idle.ends_with("Continue it with: kubectl volmig resume data-x7k2p -n default"),
            "{idle}"
        );
        let unknown = interrupted("data-x7k2p", "default", LeftBehind::Unknown);
        assert!(!unknown.contains("keeps running"), "{unknown}");
    }

    #[test]
    fn an_abort_from_elsewhere_says_who() {
        let mut vm = record(Phase::Aborted, &[AttemptPhase::Aborted]);
        vm.status.aborted_by = Some("ops-box/311 (user admin)".into());
        assert_eq!(
            aborted(&vm),
            "operation data-x7k2p was aborted by ops-box/311 (user admin); the destination \
             keeps the data copied so far (kubectl volmig resume data-x7k2p -n default \
             continues from it)"
        );
    }

    #[test]
    fn resume_says_what_it_does_not_the_stale_plan() {
        let failed = record(
            Phase::Failed,
            &[
                AttemptPhase::Failed,
                AttemptPhase::Failed,
                AttemptPhase::Failed,
            ],
        );
        let text = resuming(&failed, true);
        assert_eq!(
            text,
            "operation data-x7k2p: default/data to default/data-fast\n  Failed after 3 \
             attempts; running it again with a fresh budget of 3 attempts, from what the \
             destination holds\n"
        );
        assert!(!text.contains("new claim") && !text.contains("in use by"));
        let left = record(Phase::Running, &[AttemptPhase::Running]);
        assert!(resuming(&left, false).ends_with("  attempt 1 was left running; taking it over\n"));
        let fresh = record(Phase::Pending, &[]);
        assert!(resuming(&fresh, false).ends_with("  no attempt has run yet; starting\n"));
    }

    #[test]
    fn resume_says_what_the_destination_holds_to_reuse() {
        let mut vm = record(Phase::Failed, &[AttemptPhase::Failed]);
        vm.status.attempts[0].bytes_done = 50 << 20;
        vm.status.attempts[0].bytes_total = 100 << 20;
        let text = resuming(&vm, true);
        assert!(
            text.ends_with(
                "  the destination holds up to 50.0 MiB of 100.0 MiB from attempt 1: the next \
                 attempt resumes from its checkpoint and sends only the rest\n"
            ),
            "{text}"
        );
        // A destination given up before attempt 2 holds nothing of attempt 1.
        vm.status
            .abandoned_destinations
            .push(crate::record::AbandonedDestination {
                name: "data-fast".into(),
                reason: "gone".into(),
                replaced_before_attempt: 2,
                at: None,
            });
        assert!(!resuming(&vm, true).contains("holds up to"));
    }
}
