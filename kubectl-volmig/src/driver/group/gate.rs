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

use crate::plan::quiesce::ScaleTarget;
use crate::record::cutover::Step;
use crate::spec::ClaimRef;

/// Where a claim's cutover stands, as far as the set is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pos {
    /// Pre-copying.
    Start,
    /// Pre-copy done: may plan the stop.
    Ready,
    /// The owners to stop, and their replicas, recorded: may stop the app.
    Planned,
    /// Final sync verified: may leave the old volume.
    Synced,
    /// Bound to the new volume.
    Swapped,
    /// Its StatefulSet, if it updates one, re-created.
    OwnerSet,
    /// The app runs again on the new volumes: the old ones may go
    /// (`--commit`).
    Restored,
    /// Rolling back: the app's writes copied back (or none to copy).
    SyncedBack,
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
            _ if rolling_back => Pos::OwnerSet,
            Step::PreCopy => Pos::Start,
            Step::Quiesce => Pos::Ready,
            Step::FinalSync => Pos::Planned,
            Step::Swap => Pos::Synced,
            Step::Restore => Pos::OwnerSet,
            Step::AwaitingCommit | Step::RollingBack => Pos::Done,
        }
    }

    /// Whether the set is on its way back at this position.
    fn backward(self) -> bool {
        self >= Pos::SyncedBack
    }
}

/// What a claim waiting at a barrier is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every claim is there: go on.
    Go,
    /// Roll back (why): another claim's failure, or a rollback asked for.
    RollBack(String),
    /// Another claim failed before the app was stopped: fail (why).
    Fail(String),
    /// Another claim's copy back failed: the whole set stays on its new
    /// volumes (why).
    StayNew(String),
    /// Another claim stopped where it was (an error, a takeover): stop
    /// too, where this one is; `resume` goes on from the records (why).
    Halt(String),
}

#[derive(Debug, Clone, Default)]
struct Board {
    pos: BTreeMap<u32, Pos>,
    rollback: Option<String>,
    failed: Option<String>,
    stay_new: Option<String>,
    halted: Option<String>,
    /// The owners the set stops, with the replicas they go back to, as the
    /// claims recorded them.
    stops: Vec<ScaleTarget>,
}

/// One claim's handle on the set's barriers.
#[derive(Clone)]
pub struct Gate {
    key: u32,
    /// Every claim's key and source claim.
    claims: Arc<Vec<(u32, ClaimRef)>>,
    board: Arc<watch::Sender<Board>>,
}

impl Gate {
    /// The gates of a set whose claims (key, source claim) start at `pos`,
    /// with the owners their records say they stop.
    pub fn set(claims: Vec<(u32, ClaimRef, Pos)>, stops: Vec<ScaleTarget>) -> Vec<Gate> {
        let board = Board {
            pos: claims.iter().map(|(k, _, p)| (*k, *p)).collect(),
            stops,
            ..Board::default()
        };
        let board = Arc::new(watch::Sender::new(board));
        let names: Arc<Vec<(u32, ClaimRef)>> =
            Arc::new(claims.iter().map(|(k, c, _)| (*k, c.clone())).collect());
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
    /// is at or past it, or the set must stop, fail, roll back or stay.
    pub async fn wait_at(&self, pos: Pos) -> Verdict {
        self.reach(pos);
        let mut rx = self.board.subscribe();
        let seen = rx
            .wait_for(|b| b.pos.values().all(|p| *p >= pos) || verdict(b, pos).is_some())
            .await
            .map(|b| b.clone());
        match seen {
            Ok(board) => verdict(&board, pos).unwrap_or(Verdict::Go),
            Err(_) => Verdict::Halt("the set's driver has gone".into()),
        }
    }

    /// Marks this claim at `pos` without waiting.
    pub fn reach(&self, pos: Pos) {
        let key = self.key;
        self.board.send_modify(|b| {
            let p = b.pos.entry(key).or_insert(pos);
            *p = (*p).max(pos);
        });
    }

    /// This claim has ended cleanly: nobody waits for it.
    pub fn done(&self) {
        self.reach(Pos::Done);
    }

    /// The whole set rolls back, for `why`.
    pub fn roll_back_all(&self, why: &str) {
        self.board
            .send_modify(|b| b.rollback = b.rollback.take().or(Some(why.to_string())));
    }

    /// The whole set fails (before the app stops) or rolls back (after),
    /// for `why`.
    pub fn fail_all(&self, why: &str) {
        self.board
            .send_modify(|b| b.failed = b.failed.take().or(Some(why.to_string())));
    }

    /// The whole set stays on its new volumes, for `why`.
    pub fn stay_all(&self, why: &str) {
        self.board
            .send_modify(|b| b.stay_new = b.stay_new.take().or(Some(why.to_string())));
    }

    /// Every claim stops where it is, for `why`.
    pub fn halt_all(&self, why: &str) {
        self.board
            .send_modify(|b| b.halted = b.halted.take().or(Some(why.to_string())));
    }

    /// Adds the owners this claim stops to the set's.
    pub fn note_stops(&self, targets: &[ScaleTarget]) {
        self.board.send_modify(|b| {
            for t in targets {
                let known = b.stops.iter().any(|s| s.kind == t.kind && s.name == t.name);
                if !known {
                    b.stops.push(t.clone());
                }
            }
        });
    }

    /// The owners the set stops, as recorded so far.
    pub fn stops(&self) -> Vec<ScaleTarget> {
        self.board.borrow().stops.clone()
    }

    /// Whether this claim is the one, among the set's claims that `made`
    /// accepts (those a StatefulSet's template made), that updates it:
    /// the lowest-keyed.
    pub fn leads(&self, made: impl Fn(&ClaimRef) -> bool) -> bool {
        let first = self.claims.iter().find(|(_, claim)| made(claim));
        first.is_none_or(|(key, _)| *key == self.key)
    }
}

/// What the set says to a claim at `pos`, if anything but "wait".
fn verdict(b: &Board, pos: Pos) -> Option<Verdict> {
    if let Some(why) = &b.halted {
        return Some(Verdict::Halt(why.clone()));
    }
    if pos.backward() {
        return match (&b.stay_new, pos) {
            (Some(why), Pos::SyncedBack) => Some(Verdict::StayNew(why.clone())),
            _ => None,
        };
    }
    if let Some(why) = &b.failed {
        // Once the app may have stopped, failing is no state to leave it
        // in: the set rolls back.
        return Some(match pos <= Pos::Ready {
            true => Verdict::Fail(why.clone()),
            false => Verdict::RollBack(why.clone()),
        });
    }
    b.rollback.clone().map(Verdict::RollBack)
}

/// Guards a claim's run: unless told it ended cleanly, its dropping (an
/// error, a panic, a cancelled task) halts the set where it stands.
pub struct RunGuard {
    gate: Gate,
    clean: bool,
}

impl RunGuard {
    pub fn new(gate: Gate) -> RunGuard {
        RunGuard { gate, clean: false }
    }

    /// The claim ended cleanly: nobody waits for it.
    pub fn clean(mut self) {
        self.clean = true;
        self.gate.done();
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if !self.clean {
            let claim = self.gate.claims.iter().find(|(k, _)| *k == self.gate.key);
            let name = claim.map_or(String::new(), |(_, c)| c.to_string());
            self.gate.halt_all(&format!("claim {name} stopped"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn three() -> Vec<Gate> {
        Gate::set(
            (0..3)
                .map(|k| {
                    (
                        k,
                        ClaimRef::new("prod", &format!("data-db-{k}")),
                        Pos::Start,
                    )
                })
                .collect(),
            Vec::new(),
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
    async fn a_claim_that_stops_halts_the_set_where_it_stands() {
        let gates = three();
        {
            let _running = RunGuard::new(gates[2].clone());
            // dropped without `clean`: an error, a panic, a cancelled task
        }
        let v = soon(gates[0].wait_at(Pos::Synced)).await;
        assert_eq!(
            v,
            Some(Verdict::Halt("claim prod/data-db-2 stopped".into()))
        );
        let v = soon(gates[1].wait_at(Pos::RolledBack)).await;
        assert!(matches!(v, Some(Verdict::Halt(_))), "{v:?}");
        let fine = three();
        RunGuard::new(fine[2].clone()).clean();
        fine[1].reach(Pos::Ready);
        assert_eq!(soon(fine[0].wait_at(Pos::Ready)).await, Some(Verdict::Go));
    }

    #[tokio::test]
    async fn a_failure_after_the_stop_rolls_back_and_a_failed_copy_back_keeps_the_new() {
        let gates = three();
        gates[1].fail_all("consumers appeared");
        let at_ready = soon(gates[0].wait_at(Pos::Ready)).await;
        assert_eq!(at_ready, Some(Verdict::Fail("consumers appeared".into())));
        let at_synced = soon(gates[0].wait_at(Pos::Synced)).await;
        assert_eq!(
            at_synced,
            Some(Verdict::RollBack("consumers appeared".into()))
        );
        gates[2].stay_all("copy back failed");
        let back = soon(gates[0].wait_at(Pos::SyncedBack)).await;
        assert_eq!(back, Some(Verdict::StayNew("copy back failed".into())));
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
        let of_db = |c: &ClaimRef| c.namespace == "prod" && c.name.starts_with("data-db-");
        assert!(gates[0].leads(of_db));
        assert!(!gates[1].leads(of_db));
        let of_two = |c: &ClaimRef| c.name == "data-db-2";
        assert!(gates[2].leads(of_two));
        assert!(!gates[0].leads(of_two));
        // Another namespace's StatefulSet of the same name has no claim here.
        let elsewhere = |c: &ClaimRef| c.namespace == "staging";
        assert!(gates[1].leads(elsewhere));
    }

    #[test]
    fn recorded_steps_say_where_a_resumed_claim_stands() {
        assert_eq!(Pos::of_step(Step::PreCopy, false), Pos::Start);
        assert_eq!(Pos::of_step(Step::Quiesce, false), Pos::Ready);
        assert_eq!(Pos::of_step(Step::FinalSync, false), Pos::Planned);
        assert_eq!(Pos::of_step(Step::Swap, false), Pos::Synced);
        assert_eq!(Pos::of_step(Step::Restore, false), Pos::OwnerSet);
        assert_eq!(Pos::of_step(Step::AwaitingCommit, false), Pos::Done);
        assert_eq!(Pos::of_step(Step::Swap, true), Pos::OwnerSet);
        assert_eq!(Pos::of_step(Step::AwaitingCommit, true), Pos::OwnerSet);
        assert_eq!(Pos::of_step(Step::RolledBack, true), Pos::Done);
    }
}
