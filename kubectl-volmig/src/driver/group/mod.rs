//! The driver of a set of claims: an explicit state machine over the set
//! that runs each claim's own attempt driver ([`Driver`]) on that claim's
//! record, up to `--parallel` at once and `--per-node` movers a node.
//!
//! `Setup` takes the set's lease → `Copy` (admit, run, record each end;
//! a failed claim retries on its own budget inside its driver, the others
//! go on) → `Finish` (the set's phase from its claims') → `Done`. The
//! set's head holds only what they share; each claim's driver writes its
//! own record with the same holder, so any client can take any claim up.
//!
//! - [`admit`]: which queued claims start now (pure).

pub mod admit;
pub mod gate;
mod load;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use jiff::Timestamp;
use kube::Client;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::cutover::request::{request_rollback, RollbackFlags};
use super::lease::LeaseHolder;
use super::run::API_OUTAGE;
use super::{release_lease, Cutover, Driver, DriverError, DriverOptions, Outcome, Update};
use crate::cluster::Sides;
use crate::record::cutover::Step;
use crate::record::group::{GroupView, Member, MigrationGroup};
use crate::record::store::{group_view, GroupStore, RecordStore};
use crate::record::{Phase, VolumeMigration};
use admit::{Admission, Candidate, Limits};
use gate::{Gate, Pos, RunGuard};
use load::NodeLoad;

/// The most copy passes in one run (see [`GroupDriver::passes`]).
const MAX_PASSES: u32 = 5;

/// How often the set's heartbeat is written and the nodes' load looked at.
const TICK: Duration = Duration::from_secs(5);

/// What the set's driver tells its user interface.
#[derive(Debug, Clone)]
pub enum GroupUpdate {
    /// Claim `key` (source claim `claim`) said `update`.
    Claim {
        key: u32,
        claim: String,
        update: Update,
    },
    /// Claim `key` started copying (with `avoid`: nodes full of movers).
    Started { key: u32, claim: String },
    /// Claim `key` ended (this run) in `phase`.
    Ended {
        key: u32,
        claim: String,
        phase: Phase,
        message: Option<String>,
    },
}

/// Where a set is.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// The lease taken, the head Running.
    Setup,
    /// Claims copying, each on its own budget.
    Copy,
    /// The head's final phase, the lease given back.
    Finish {
        phase: Phase,
        message: Option<String>,
    },
    Done,
}

/// Drives one set of claims.
pub struct GroupDriver {
    client: Client,
    store: GroupStore,
    group: MigrationGroup,
    options: DriverOptions,
    updates: UnboundedSender<GroupUpdate>,
    holds_lease: bool,
    /// Claims that ran here: their leases go when this driver stops.
    ran: Vec<u32>,
    outcome: Option<GroupView>,
    /// Copy passes made in this run: a claim restarted meanwhile (a
    /// rollback asked for after it ended) takes another, a few at most.
    passes: u32,
}

type Joined = (u32, Result<Outcome, DriverError>);

impl GroupDriver {
    pub fn new(
        client: Client,
        group: MigrationGroup,
        options: DriverOptions,
        updates: UnboundedSender<GroupUpdate>,
    ) -> GroupDriver {
        GroupDriver {
            store: GroupStore::new(client.clone(), &group.metadata.namespace),
            client,
            group,
            options,
            updates,
            holds_lease: false,
            ran: Vec::new(),
            outcome: None,
            passes: 0,
        }
    }

    /// Runs until every claim has ended, or the set is aborted; the set
    /// as it then stands.
    pub async fn run(mut self) -> Result<GroupView, DriverError> {
        let mut state = State::Setup;
        let mut failing: Option<Instant> = None;
        loop {
            tracing::debug!(?state, "set step");
            state = match self.step(state.clone()).await {
                Ok(State::Done) => break,
                Ok(next) => {
                    failing = None;
                    next
                }
                Err(e)
                    if e.is_retryable()
                        && failing.get_or_insert_with(Instant::now).elapsed() < API_OUTAGE =>
                {
                    tracing::warn!("{e}; trying again");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    state
                }
                Err(e) => {
                    self.release_claims().await;
                    return Err(e);
                }
            };
        }
        self.outcome.take().ok_or_else(|| {
            DriverError::Conflict("the set's driver stopped without an outcome".into())
        })
    }

    async fn step(&mut self, state: State) -> Result<State, DriverError> {
        match state {
            State::Setup => {
                self.write(|g| {
                    if !g.status.phase.is_stopped() {
                        g.status.phase = Phase::Running;
                        g.status.start_time.get_or_insert_with(Timestamp::now);
                    }
                })
                .await?;
                Ok(State::Copy)
            }
            State::Copy => self.copy().await,
            State::Finish { phase, message } => {
                let ended = |g: &mut MigrationGroup| {
                    g.status.phase = phase;
                    g.status.message = message.clone();
                    g.status.completion_time = Some(Timestamp::now());
                };
                if phase == Phase::Aborted {
                    // The lease refuses to write an aborted head: the end
                    // is written as is (the lease goes with `release`).
                    let op = self.group.metadata.name.clone();
                    self.group = self
                        .store
                        .update(&op, |g| {
                            ended(g);
                            Ok(())
                        })
                        .await?;
                } else {
                    self.write(ended).await?;
                }
                let view = group_view(&self.client, self.group.clone()).await?;
                self.release().await?;
                self.outcome = Some(view);
                Ok(State::Done)
            }
            State::Done => Ok(State::Done),
        }
    }

    /// The scheduler: claims start as the limits allow, each one's end is
    /// noted; the head's heartbeat every tick.
    async fn copy(&mut self) -> Result<State, DriverError> {
        let mut view = group_view(&self.client, self.group.clone()).await?;
        if self.align_rollbacks(&view).await? {
            view = group_view(&self.client, self.group.clone()).await?;
        }
        let mut queue: VecDeque<u32> = VecDeque::new();
        for (m, vm) in self.group.spec.claims.iter().zip(&view.members) {
            match vm {
                Some(vm) if !vm.status.phase.is_stopped() => queue.push_back(m.key),
                Some(_) => {}
                None => {
                    return Ok(State::Finish {
                        phase: Phase::Failed,
                        message: Some(format!(
                        "the record of claim {} ({}) is gone; clean the set up and migrate again",
                        m.source, m.operation
                    )),
                    })
                }
            }
        }
        let mut plans = BTreeMap::new();
        for key in &queue {
            let vm = member_record(&view, *key)?;
            let plan = vm.plan().ok_or_else(|| {
                DriverError::Refused(format!(
                    "claim {} of operation {} has no plan in its record",
                    vm.spec.source, self.group.metadata.name
                ))
            })?;
            plans.insert(*key, (plan, vm.clone()));
        }
        let limits = Limits {
            claims: self.group.spec.parallelism.claims,
            per_node: self.group.spec.parallelism.per_node,
        };
        // A cutover moves the set together: every claim runs at once,
        // held at the set's barriers.
        let mut gates: BTreeMap<u32, Gate> = BTreeMap::new();
        if plans.values().any(|(p, _)| p.spec.cutover.is_some()) {
            let mut stops = Vec::new();
            let claims = self.group.spec.claims.iter().zip(&view.members);
            let claims = claims
                .map(|(m, vm)| {
                    let c = vm.as_ref().and_then(|vm| vm.status.cutover.clone());
                    stops.extend(c.iter().flat_map(|c| c.quiesce.clone()));
                    let pos = match c {
                        Some(c) if queue.contains(&m.key) => {
                            Pos::of_step(c.step, c.rollback.is_some())
                        }
                        None if queue.contains(&m.key) => Pos::Start,
                        _ => Pos::Done,
                    };
                    (m.key, m.source.clone(), pos)
                })
                .collect();
            gates = Gate::set(claims, stops)
                .into_iter()
                .map(|g| (g.key(), g))
                .collect();
        }
        let mut running: JoinSet<Joined> = JoinSet::new();
        let mut active: BTreeSet<u32> = BTreeSet::new();
        let mut stopping: Option<DriverError> = None;
        let mut aborted = false;
        let mut next_tick = Instant::now();
        loop {
            if !gates.is_empty() {
                for key in std::mem::take(&mut queue) {
                    if let Some((plan, vm)) = plans.get(&key).cloned() {
                        active.insert(key);
                        self.start_claim(&mut running, key, plan, vm, gates.get(&key).cloned());
                    }
                }
            }
            if stopping.is_none() && !aborted && !queue.is_empty() {
                let now_running: Vec<(&Member, &crate::plan::Plan)> = self
                    .group
                    .spec
                    .claims
                    .iter()
                    .filter(|m| active.contains(&m.key))
                    .filter_map(|m| plans.get(&m.key).map(|(p, _)| (m, p)))
                    .collect();
                // A moment of API trouble must not drop the copies that
                // run: admission waits for the next tick.
                let load = match load::now(&self.client, &now_running).await {
                    Ok(load) => load,
                    Err(e) => {
                        tracing::warn!("cannot read the nodes' load: {e}; admitting later");
                        NodeLoad::default()
                    }
                };
                let candidates: Vec<Candidate> = queue
                    .iter()
                    .filter_map(|k| plans.get(k).map(|(p, _)| load::candidate(*k, p)))
                    .collect();
                let admitted = match load.known {
                    true => admit::admit(&candidates, &load.load, limits),
                    false => Vec::new(),
                };
                for Admission { key, avoid } in admitted {
                    queue.retain(|k| *k != key);
                    let Some((plan, vm)) = plans.get(&key).cloned() else {
                        continue;
                    };
                    let plan = load::avoiding(plan, &avoid, &load.hostnames);
                    active.insert(key);
                    self.start_claim(&mut running, key, plan, vm, None);
                }
            }
            if running.is_empty() && (queue.is_empty() || stopping.is_some() || aborted) {
                break;
            }
            tokio::select! {
                Some(joined) = running.join_next() => {
                    if let Ok((key, _)) = &joined {
                        active.remove(key);
                    }
                    match joined {
                        Ok((key, Ok(outcome))) => self.claim_ended(key, outcome),
                        // abort reached the claim first: it has ended.
                        Ok((_, Err(DriverError::Aborted))) => {}
                        Ok((key, Err(e))) => {
                            tracing::warn!("claim {key}: {e}");
                            stopping.get_or_insert(e);
                        }
                        Err(e) => {
                            stopping.get_or_insert(DriverError::Conflict(format!(
                                "a claim's driver stopped: {e}"
                            )));
                        }
                    }
                }
                () = tokio::time::sleep_until(next_tick) => {
                    next_tick = Instant::now() + TICK;
                    match self.write(|_| {}).await {
                        Ok(()) => {}
                        // abort marks every claim too: their drivers stop
                        // by themselves; nothing new starts.
                        Err(DriverError::Aborted) => {
                            aborted = true;
                            if let Some(gate) = gates.values().next() {
                                gate.fail_all("the set was aborted");
                            }
                        }
                        Err(e @ DriverError::TakenOver(_)) => {
                            running.abort_all();
                            return Err(e);
                        }
                        Err(e) if e.is_retryable() => tracing::warn!("{e}"),
                        Err(e) => stopping = Some(e),
                    }
                }
            }
        }
        if let Some(e) = stopping {
            return Err(e);
        }
        let view = group_view(&self.client, self.group.clone()).await?;
        let restarted = view
            .members
            .iter()
            .flatten()
            .any(|vm| !vm.status.phase.is_stopped());
        self.passes += 1;
        if restarted && !aborted && self.passes < MAX_PASSES {
            return Ok(State::Copy);
        }
        let phase = if aborted {
            Phase::Aborted
        } else {
            view.phase()
        };
        let message = match phase {
            Phase::Succeeded => None,
            _ => Some(format!("claims: {}", view.phases_text())),
        };
        Ok(State::Finish { phase, message })
    }

    /// A cutover set moves all or nothing: once one claim is rolling back
    /// or rolled back, every claim not on its way back is asked to go
    /// back too (a set left so by a crash, or a claim's own rollback).
    /// Whether anything was asked.
    async fn align_rollbacks(&self, view: &GroupView) -> Result<bool, DriverError> {
        let cutovers: Vec<(&Member, &VolumeMigration)> = self
            .group
            .spec
            .claims
            .iter()
            .zip(&view.members)
            .filter_map(|(m, vm)| vm.as_ref().map(|vm| (m, vm)))
            .filter(|(_, vm)| vm.status.cutover.is_some())
            .collect();
        let back = |vm: &VolumeMigration| {
            let c = vm.status.cutover.as_ref();
            c.is_some_and(|c| c.rollback.is_some() || c.step == Step::RolledBack)
        };
        let Some((_, first)) = cutovers.iter().find(|(_, vm)| back(vm)) else {
            return Ok(false);
        };
        let why = format!("the set (claim {} went back)", first.spec.source);
        let mut asked = false;
        for (m, vm) in cutovers.iter().filter(|(_, vm)| !back(vm)) {
            let step = vm.status.cutover.as_ref().map(|c| c.step);
            if step == Some(Step::Committed) {
                continue;
            }
            let flags = RollbackFlags::default();
            match request_rollback(&self.client, m.namespace(), &m.operation, &why, flags).await {
                Ok(_) => asked = true,
                Err(DriverError::Refused(r)) => tracing::warn!("{}: {r}", m.source),
                Err(e) => return Err(e),
            }
        }
        Ok(asked)
    }

    /// Starts claim `key`'s driver: its attempts, or (with a `gate`) its
    /// cutover held at the set's barriers.
    fn start_claim(
        &mut self,
        running: &mut JoinSet<Joined>,
        key: u32,
        plan: crate::plan::Plan,
        vm: VolumeMigration,
        gate: Option<Gate>,
    ) {
        let claim = plan.spec.source.name.clone();
        let _ = self.updates.send(GroupUpdate::Started {
            key,
            claim: claim.clone(),
        });
        self.ran.push(key);
        let client = self.client.clone();
        let options = self.options.clone();
        let out = self.updates.clone();
        running.spawn(async move {
            let plan = super::gather::with_current_destination(&client, plan).await;
            let (tx, mut rx) = unbounded_channel();
            let forward = async {
                while let Some(update) = rx.recv().await {
                    let claim = claim.clone();
                    let _ = out.send(GroupUpdate::Claim { key, claim, update });
                }
            };
            let run = async {
                match gate {
                    Some(gate) => {
                        // Unless this claim's cutover ends cleanly, the
                        // set stops where it stands (also on a panic).
                        let guard = RunGuard::new(gate.clone());
                        let cutover = Cutover::new(client, plan, vm, options, tx);
                        let result = cutover.in_set(gate).run().await;
                        if ended_cleanly(&result) {
                            guard.clean();
                        }
                        result
                    }
                    None => {
                        Driver::new(Sides::one(client), plan, vm, options, tx)
                            .run()
                            .await
                    }
                }
            };
            let (result, ()) = tokio::join!(run, forward);
            (key, result)
        });
    }

    fn claim_ended(&mut self, key: u32, outcome: Outcome) {
        let (Outcome::Finished(vm) | Outcome::PassEnded { record: vm, .. }) = outcome;
        let _ = self.updates.send(GroupUpdate::Ended {
            key,
            claim: vm.spec.source.name.clone(),
            phase: vm.status.phase,
            message: vm.status.message.clone(),
        });
    }

    /// Changes the head (re-read on conflict), with the heartbeat; stops
    /// with [`DriverError::Aborted`] once the set is aborted,
    /// [`DriverError::TakenOver`] once another client drives it.
    async fn write(&mut self, change: impl FnMut(&mut MigrationGroup)) -> Result<(), DriverError> {
        let lease = LeaseHolder {
            store: &self.store,
            operation: &self.group.metadata.name,
            holder: &self.options.holder,
            claiming: !self.holds_lease,
            stop_on_rollback: false,
        };
        self.group = lease.write(change).await?;
        self.holds_lease = true;
        Ok(())
    }

    /// Gives up the head's lease and every claim's this driver ran.
    async fn release(&mut self) -> Result<(), DriverError> {
        let op = self.group.metadata.name.clone();
        self.group = release_lease(&self.store, &op, &self.options.holder).await?;
        self.holds_lease = false;
        self.release_claims().await;
        Ok(())
    }

    async fn release_claims(&mut self) {
        for key in std::mem::take(&mut self.ran) {
            if let Some(m) = self.group.spec.claims.iter().find(|m| m.key == key) {
                release_claim(&self.client, m, &self.options.holder).await;
            }
        }
    }
}

/// Whether a claim's cutover run ended where the set may go on without
/// it: moved, rolled back, or failed or aborted before the app stopped.
fn ended_cleanly(result: &Result<Outcome, DriverError>) -> bool {
    match result {
        Ok(Outcome::Finished(vm)) => {
            let step = vm.status.cutover.as_ref().map(|c| c.step);
            let untouched = matches!(step, None | Some(Step::PreCopy | Step::Quiesce));
            matches!(
                step,
                Some(Step::AwaitingCommit | Step::Committed | Step::RolledBack)
            ) || (untouched && matches!(vm.status.phase, Phase::Failed | Phase::Aborted))
        }
        Err(DriverError::Aborted) => true,
        _ => false,
    }
}

/// Releases `holder`'s lease on claim `m`'s record, if it holds it.
pub async fn release_claim(client: &Client, m: &Member, holder: &str) {
    let store = RecordStore::new(client.clone(), m.namespace());
    if let Err(e) = release_lease(&store, &m.operation, holder).await {
        tracing::debug!("cannot release claim {}: {e}", m.operation);
    }
}

/// Every lease of set `group` that `holder` holds, given back (after
/// Ctrl-C): the head's and its claims'.
pub async fn release_all(client: &Client, group: &MigrationGroup, holder: &str) {
    let store = GroupStore::new(client.clone(), &group.metadata.namespace);
    if let Err(e) = release_lease(&store, &group.metadata.name, holder).await {
        tracing::debug!("cannot release operation {}: {e}", group.metadata.name);
    }
    for m in &group.spec.claims {
        release_claim(client, m, holder).await;
    }
}

fn member_record(view: &GroupView, key: u32) -> Result<&VolumeMigration, DriverError> {
    view.group
        .spec
        .claims
        .iter()
        .position(|m| m.key == key)
        .and_then(|i| view.members.get(i))
        .and_then(Option::as_ref)
        .ok_or_else(|| DriverError::Conflict(format!("claim {key} has no record")))
}
