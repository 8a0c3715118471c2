//! The barriers that make the cutovers of a set's claims one cutover.
//!
//! Each claim runs its own cutover state machine on its own record; the
//! gate holds them at the points where the set must move together:
//!
//! - [`Pos::Ready`]: every claim's pre-copy is done before any stops the
//!   app (one stop: the owners are scaled once, whoever scales first);
//! - [`Pos::Synced`]: every final sync has verified before any claim
//!   leaves its old volume, so rolling the whole set back stays possible;
//! - [`Pos::Swapped`], [`Pos::OwnerSet`]: every claim is on its new volume,
//!   and each StatefulSet re-created once (by its lowest-keyed claim),
//!   before the app starts again;
//! - [`Pos::RolledBack`], [`Pos::OwnerRestored`]: the same on the way back.
//!
//! A claim whose final sync fails asks the whole set to roll back; one
//! whose pre-copy fails (nothing touched yet) fails the whole set. The
//! positions at start come from each claim's recorded step, so a set
//! resumed after a crash waits only for the claims that are behind.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use crate::record::cutover::Step;

/// Where a claim's cutover stands, as far as the set is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pos {
    /// Pre-copying.
    Start,
    /// Pre-copy done: may stop the app.
    Ready,
    /// Final sync verified: may leave the old volume.
    Synced,
    /// Bound to the new volume.
    Swapped,
    /// Its StatefulSet, if it updates one, re-created.
    OwnerSet,
    /// Rolling back: bound to the old volume again.
    RolledBack,
    /// Rolling back: its StatefulSet, if it updates one, re-created as it was.
    OwnerRestored,
    /// Its cutover has ended (or will not move again in this run).
    Done,
}

impl Pos {
    /// The position a recorded step means at start.
    pub fn of_step(step: Step, rolling_back: bool) -> Pos {
        match step {
            Step::AwaitingCommit if !rolling_back => Pos::Done,
            Step::Committed | Step::RolledBack => Pos::Done,
            _ if rolling_back => Pos::Synced,
            Step::PreCopy => Pos::Start,
            Step::Quiesce | Step::FinalSync => Pos::Ready,
            Step::Swap => Pos::Synced,
            Step::Restore => Pos::OwnerSet,
            Step::AwaitingCommit | Step::RollingBack => Pos::Done,
        }
    }
}

/// What a claim waiting at a barrier is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every claim is there: go on.
    Go,
    /// Another claim's failure: roll back (why).
    RollBack(String),
    /// Another claim failed before the app was touched: fail (why).
    Fail(String),
}

#[derive(Debug, Clone, Default)]
struct Board {
    pos: BTreeMap<u32, Pos>,
    rollback: Option<String>,
    failed: Option<String>,
}

/// One claim's handle on the set's barriers.
#[derive(Clone)]
pub struct Gate {
    key: u32,
    /// Every claim's key and source claim name.
    claims: Arc<Vec<(u32, String)>>,
    board: Arc<watch::Sender<Board>>,
}

impl Gate {
    /// The gates of a set whose claims (key, source claim) start at `pos`.
    pub fn set(claims: Vec<(u32, String, Pos)>) -> Vec<Gate> {
        let board = Board {
            pos: claims.iter().map(|(k, _, p)| (*k, *p)).collect(),
            ..Board::default()
        };
        let board = Arc::new(watch::Sender::new(board));
        let names: Arc<Vec<(u32, String)>> =
            Arc::new(claims.iter().map(|(k, n, _)| (*k, n.clone())).collect());
        claims
            .iter()
            .map(|(key, _, _)| Gate {
                key: *key,
                claims: names.clone(),
                board: board.clone(),
            })
            .collect()
    }

    pub fn key(&self) -> u32 {
        self.key
    }

    /// Marks this claim at `pos` (never back) and waits until every claim
    /// is at or past it, or the set must roll back or fail.
    pub async fn wait_at(&self, pos: Pos) -> Verdict {
        self.reach(pos);
        let mut rx = self.board.subscribe();
        let seen = rx
            .wait_for(|b| {
                let past = b.pos.values().all(|p| *p >= pos);
                let stop = pos < Pos::RolledBack && (b.rollback.is_some() || b.failed.is_some());
                past || stop
            })
            .await
            .map(|b| b.clone());
        let Ok(board) = seen else {
            return Verdict::Go;
        };
        if pos < Pos::RolledBack {
            if let Some(why) = board.failed {
                return Verdict::Fail(why);
            }
            if let Some(why) = board.rollback {
                return Verdict::RollBack(why);
            }
        }
        Verdict::Go
    }

    /// Marks this claim at `pos` without waiting.
    pub fn reach(&self, pos: Pos) {
        let key = self.key;
        self.board.send_modify(|b| {
            let p = b.pos.entry(key).or_insert(pos);
            *p = (*p).max(pos);
        });
    }

    /// This claim will not move again in this run: nobody waits for it.
    pub fn done(&self) {
        self.reach(Pos::Done);
    }

    /// The whole set rolls back, for `why`.
    pub fn roll_back_all(&self, why: &str) {
        self.board
            .send_modify(|b| b.rollback = b.rollback.take().or(Some(why.to_string())));
    }

    /// The whole set fails before the app was touched, for `why`.
    pub fn fail_all(&self, why: &str) {
        self.board
            .send_modify(|b| b.failed = b.failed.take().or(Some(why.to_string())));
    }

    /// Whether this claim is the one, among the set's claims that `made`
    /// accepts (those a StatefulSet's template made), that updates it:
    /// the lowest-keyed.
    pub fn leads(&self, made: impl Fn(&str) -> bool) -> bool {
        let first = self.claims.iter().find(|(_, name)| made(name));
        first.is_none_or(|(key, _)| *key == self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn three() -> Vec<Gate> {
        Gate::set(
            (0..3)
                .map(|k| (k, format!("data-db-{k}"), Pos::Start))
                .collect(),
        )
    }

    async fn soon<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::time::timeout(Duration::from_millis(200), f)
            .await
            .ok()
    }

    #[tokio::test]
    async fn nobody_passes_a_barrier_until_everyone_is_there() {
        let gates = three();
        assert_eq!(soon(gates[0].wait_at(Pos::Ready)).await, None);
        gates[1].reach(Pos::Synced);
        assert_eq!(soon(gates[0].wait_at(Pos::Ready)).await, None);
        gates[2].done();
        assert_eq!(soon(gates[0].wait_at(Pos::Ready)).await, Some(Verdict::Go));
    }

    #[tokio::test]
    async fn one_failure_releases_every_waiter_with_what_to_do() {
        let gates = three();
        gates[2].roll_back_all("the final sync of data-db-2 failed");
        let v = soon(gates[0].wait_at(Pos::Synced)).await;
        assert_eq!(
            v,
            Some(Verdict::RollBack(
                "the final sync of data-db-2 failed".into()
            ))
        );
        // On the way back, a rollback request is no reason to go on.
        assert_eq!(soon(gates[0].wait_at(Pos::RolledBack)).await, None);
        gates[1].reach(Pos::RolledBack);
        gates[2].done();
        assert_eq!(
            soon(gates[0].wait_at(Pos::RolledBack)).await,
            Some(Verdict::Go)
        );
        let fresh = three();
        fresh[1].fail_all("pre-copy of data-db-1 failed");
        fresh[1].roll_back_all("later");
        let v = soon(fresh[0].wait_at(Pos::Ready)).await;
        assert_eq!(
            v,
            Some(Verdict::Fail("pre-copy of data-db-1 failed".into()))
        );
    }

    #[test]
    fn the_lowest_keyed_claim_of_a_statefulset_updates_it() {
        let gates = three();
        let of_db = |name: &str| name.starts_with("data-db-");
        assert!(gates[0].leads(of_db));
        assert!(!gates[1].leads(of_db));
        let of_two = |name: &str| name == "data-db-2";
        assert!(gates[2].leads(of_two));
        assert!(!gates[0].leads(of_two));
    }

    #[test]
    fn recorded_steps_say_where_a_resumed_claim_stands() {
        assert_eq!(Pos::of_step(Step::PreCopy, false), Pos::Start);
        assert_eq!(Pos::of_step(Step::FinalSync, false), Pos::Ready);
        assert_eq!(Pos::of_step(Step::Swap, false), Pos::Synced);
        assert_eq!(Pos::of_step(Step::Restore, false), Pos::OwnerSet);
        assert_eq!(Pos::of_step(Step::AwaitingCommit, false), Pos::Done);
        assert_eq!(Pos::of_step(Step::Swap, true), Pos::Synced);
        assert_eq!(Pos::of_step(Step::AwaitingCommit, true), Pos::Synced);
        assert_eq!(Pos::of_step(Step::RolledBack, true), Pos::Done);
    }
}
