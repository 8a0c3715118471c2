//! Rounds run on demand after the first copy (`kubectl volmig sync OP`,
//! issue 23): each copies what changed at the source since the last, and
//! the final one (`--final`), run once the app is stopped, verifies and
//! ends the operation.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::{MigrationStatus, Phase};

/// The rounds of `kubectl volmig sync` (`status.sync`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    /// Oldest first; the first copy is not one of them.
    #[serde(default)]
    pub rounds: Vec<SyncRound>,
    /// The final round succeeded: no round runs again.
    #[serde(default)]
    pub ended: bool,
}

/// One `sync` round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncRound {
    /// 1, 2, ...
    pub number: u32,
    /// `sync --final`.
    #[serde(default)]
    pub r#final: bool,
    /// The round's first attempt.
    pub first_attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    /// When it succeeded; none while it runs (or after it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Timestamp>,
}

/// Why a round cannot start now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyncRefusal {
    #[error(
        "operation {op} was ended by sync --final (round {round}): the destination is final; \
         migrate again to copy anew"
    )]
    Ended { op: String, round: u32 },
    #[error(
        "operation {op} is {phase}: a round starts once the copy before it has ended \
         (kubectl volmig status {op}; abort it first to start a round now)"
    )]
    Running { op: String, phase: &'static str },
    #[error("operation {op} was rolled back: there is nothing to sync")]
    RolledBack { op: String },
}

impl SyncRefusal {
    /// Never: the operation must change first.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

impl MigrationStatus {
    /// The round that runs now, if one does.
    pub fn open_round(&self) -> Option<&SyncRound> {
        let round = self.sync.as_ref()?.rounds.last()?;
        round.completion_time.is_none().then_some(round)
    }
}

/// Starts round `final_round`-or-not on `status` of operation `op`: the
/// operation runs again, with a fresh attempt budget from the next
/// attempt. A round still open (its client stopped) is run again, as
/// `final` if either says so.
pub fn start_round(
    status: &mut MigrationStatus,
    op: &str,
    final_round: bool,
    now: Timestamp,
) -> Result<u32, SyncRefusal> {
    match status.phase {
        Phase::Pending | Phase::Running => {
            return Err(SyncRefusal::Running {
                op: op.to_string(),
                phase: status.phase.as_str(),
            })
        }
        Phase::RolledBack => return Err(SyncRefusal::RolledBack { op: op.to_string() }),
        Phase::Succeeded | Phase::Failed | Phase::Aborted => {}
    }
    if let Some(sync) = status.sync.as_ref().filter(|s| s.ended) {
        let round = sync.rounds.last().map_or(0, |r| r.number);
        return Err(SyncRefusal::Ended {
            op: op.to_string(),
            round,
        });
    }
    let next_attempt = status.run_again();
    let sync = status.sync.get_or_insert_with(SyncStatus::default);
    let number = match sync.rounds.last_mut() {
        Some(open) if open.completion_time.is_none() => {
            open.r#final |= final_round;
            open.number
        }
        last => {
            let number = last.map_or(1, |r| r.number + 1);
            sync.rounds.push(SyncRound {
                number,
                r#final: final_round,
                first_attempt: next_attempt,
                start_time: Some(now),
                completion_time: None,
            });
            number
        }
    };
    Ok(number)
}

/// The operation succeeded: its open round, if any, is done, and a final
/// one ends it.
pub fn close_round(status: &mut MigrationStatus, now: Timestamp) {
    let Some(sync) = status.sync.as_mut() else {
        return;
    };
    let Some(round) = sync
        .rounds
        .last_mut()
        .filter(|r| r.completion_time.is_none())
    else {
        return;
    };
    round.completion_time = Some(now);
    if round.r#final {
        sync.ended = true;
        status.message = Some(format!(
            "ended by sync --final (round {}): the destination matched the source, verified",
            round.number
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Attempt;

    fn copied() -> MigrationStatus {
        MigrationStatus {
            phase: Phase::Succeeded,
            attempts: vec![Attempt {
                number: 1,
                ..Attempt::default()
            }],
            ..MigrationStatus::default()
        }
    }

    fn now() -> Timestamp {
        "2026-11-27T03:00:00Z".parse().unwrap()
    }

    #[test]
    fn rounds_follow_the_first_copy_with_a_fresh_budget() {
        let mut status = copied();
        assert_eq!(start_round(&mut status, "op", false, now()), Ok(1));
        assert_eq!(status.phase, Phase::Running);
        assert_eq!(status.budget_from, Some(2));
        assert_eq!(status.open_round().map(|r| r.first_attempt), Some(2));
        // While it runs, no other starts.
        assert!(matches!(
            start_round(&mut status, "op", false, now()),
            Err(SyncRefusal::Running { .. })
        ));
        status.phase = Phase::Succeeded;
        close_round(&mut status, now());
        assert!(status.open_round().is_none());
        assert!(!status.sync.as_ref().unwrap().ended);
        status.attempts.push(Attempt {
            number: 2,
            ..Attempt::default()
        });
        assert_eq!(start_round(&mut status, "op", true, now()), Ok(2));
        status.phase = Phase::Succeeded;
        close_round(&mut status, now());
        assert!(status.sync.as_ref().unwrap().ended);
        assert!(status.message.as_deref().unwrap().contains("sync --final"));
        assert_eq!(
            start_round(&mut status, "op", false, now()),
            Err(SyncRefusal::Ended {
                op: "op".into(),
                round: 2
            })
        );
    }

    #[test]
    fn a_round_left_open_is_run_again_final_if_either_says() {
        let mut status = copied();
        start_round(&mut status, "op", false, now()).unwrap();
        // Its client stopped, and someone aborted it.
        status.phase = Phase::Aborted;
        assert_eq!(start_round(&mut status, "op", true, now()), Ok(1));
        let sync = status.sync.as_ref().unwrap();
        assert_eq!(sync.rounds.len(), 1);
        assert!(sync.rounds[0].r#final);
        assert_eq!(sync.rounds[0].first_attempt, 2);
    }

    #[test]
    fn a_failed_operation_closes_no_round() {
        let mut status = copied();
        start_round(&mut status, "op", true, now()).unwrap();
        status.phase = Phase::Failed;
        // The driver closes rounds only on success.
        assert!(status.open_round().is_some());
    }
}
