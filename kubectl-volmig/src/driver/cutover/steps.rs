//! The forward steps: pre-copy rounds, quiesce, final sync, swap, restore,
//! and commit.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;

use super::machine;
use super::rebind;
use super::workload;
use super::{crash_point, Cutover, Flow, READY_LIMIT};
use crate::cluster::Sides;
use crate::driver::group::gate::{Pos, Verdict};
use crate::driver::{objects, DriverError, Outcome};
use crate::events::Severity;
use crate::plan::quiesce;
use crate::record::cutover::{ClaimCutover, PassKind, Rollback, Step, COMMIT};
use crate::record::Phase;

/// How long the pods of a scaled-down owner may take to go.
const GONE_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

impl Cutover {
    pub(super) async fn pre_copy(&mut self) -> Result<Flow, DriverError> {
        let c = self.cutover();
        let spec = self.plan.spec.cutover.clone().unwrap_or_default();
        let in_flight = c.pass.is_some_and(|p| p.kind == PassKind::PreCopy);
        if c.rollback.is_some() {
            self.advance(Step::RollingBack, |_| {}).await?;
            return Ok(Flow::Next);
        }
        if !in_flight && machine::precopy_done(&c.rounds, &spec) {
            if let Some(flow) = self.at_barrier(Pos::Ready, Step::PreCopy).await? {
                return Ok(flow);
            }
            let last = c.rounds.last().map_or(0.0, |r| r.seconds);
            let msg = format!(
                "pre-copy done after {} round(s); the last took {last:.1}s (--max-downtime {}s): stopping the app",
                c.rounds.len(),
                spec.max_downtime_seconds
            );
            self.post(Severity::Normal, "CutoverQuiesce", &msg).await;
            self.advance(Step::Quiesce, |_| {}).await?;
            return Ok(Flow::Next);
        }
        let number = c.rounds.len() as u32 + 1;
        if !in_flight {
            let msg = format!("pre-copy round {number} (the app runs)");
            self.post(Severity::Normal, "CutoverPreCopy", &msg).await;
        }
        let plan = machine::pass_plan(&self.plan, PassKind::PreCopy);
        match self.run_pass(PassKind::PreCopy, plan).await? {
            Outcome::PassEnded { failure: None, .. } => {
                let first = self.cutover().pass.map_or(1, |p| p.first_attempt);
                let status = &self.record.status;
                let round =
                    machine::round_of(number, first, &status.attempts, status.summary.as_ref());
                let msg = format!(
                    "pre-copy round {number} took {:.1}s and sent {} file(s)",
                    round.seconds, round.files_transferred
                );
                self.write(|vm| {
                    let c = vm.status.cutover.get_or_insert_with(Default::default);
                    if c.rounds.iter().all(|r| r.number != round.number) {
                        c.rounds.push(round.clone());
                    }
                    c.pass = None;
                })
                .await?;
                self.post(Severity::Normal, "CutoverPreCopy", &msg).await;
                Ok(Flow::Next)
            }
            Outcome::PassEnded {
                failure: Some(why), ..
            } => {
                // Nothing of the app has changed: the operation fails as a
                // copy does, and resume runs new rounds.
                let msg = format!("pre-copy round {number} failed: {why}");
                self.fail_untouched("CutoverFailed", &msg).await
            }
            other => self.interrupted(other),
        }
    }

    /// In a set, waits at `pos` until every claim is there; `Some` when
    /// another claim's failure means this one fails too (nothing touched
    /// yet) or rolls back from `from`.
    pub(super) async fn at_barrier(
        &mut self,
        pos: Pos,
        from: Step,
    ) -> Result<Option<Flow>, DriverError> {
        match self.barrier(pos).await? {
            Verdict::Go => Ok(None),
            // Nothing of the app was touched by this claim's run, unless a
            // run before it stopped the app: then the set goes back.
            Verdict::Fail(why) if self.cutover().quiesced_at.is_none() => {
                let msg = format!("another claim of the set failed, so this one stops: {why}");
                self.fail_untouched("CutoverFailed", &msg).await.map(Some)
            }
            Verdict::Fail(why) | Verdict::RollBack(why) => {
                let reason = format!("the set rolls back: {why}");
                self.start_rollback(from, &reason).await?;
                Ok(Some(Flow::Next))
            }
            Verdict::Halt(why) | Verdict::StayNew(why) => Err(DriverError::Halted(why)),
        }
    }

    /// Starts a rollback from `from` by itself, for `reason` (unless one
    /// was asked for already: that one stands).
    async fn start_rollback(&mut self, from: Step, reason: &str) -> Result<(), DriverError> {
        self.post(Severity::Warning, "CutoverRollingBack", reason)
            .await;
        let now = Timestamp::now();
        self.advance(Step::RollingBack, |c| {
            c.pass = None;
            c.rollback.get_or_insert_with(|| Rollback {
                from,
                reason: reason.to_string(),
                started: Some(now),
                ..Rollback::default()
            });
        })
        .await
    }

    /// A pass stopped by `abort` (the operation stops) or by a rollback
    /// request (the loop takes the rollback up).
    pub(super) fn interrupted(&mut self, outcome: Outcome) -> Result<Flow, DriverError> {
        let rolling_back = self.cutover().rollback.is_some();
        match outcome {
            Outcome::Finished(vm) if rolling_back && vm.status.phase != Phase::Aborted => {
                Ok(Flow::Next)
            }
            other => Ok(Flow::Stop(other)),
        }
    }

    pub(super) async fn quiesce(&mut self) -> Result<Flow, DriverError> {
        let ns = self.claim().namespace.clone();
        let name = self.claim().name.clone();
        if self.cutover().quiesced_at.is_none() {
            let workloads = workload::gather(&self.client, &ns).await?;
            let mut plan = match quiesce::plan(&name, &workloads) {
                Ok(plan) => plan,
                Err(unstoppable) => return self.unstoppable(&unstoppable).await,
            };
            // In a set, an owner another claim has stopped already reads 0
            // replicas: it goes back to what that claim recorded.
            if let Some(gate) = &self.gate {
                let stops = gate.stops();
                for t in &mut plan.targets {
                    let known = stops.iter().find(|s| s.kind == t.kind && s.name == t.name);
                    if let Some(known) = known.filter(|_| t.replicas == 0) {
                        t.replicas = known.replicas;
                    }
                }
            }
            let now = Timestamp::now();
            self.write(|vm| {
                let c = vm.status.cutover.get_or_insert_with(Default::default);
                c.quiesce = plan.targets.clone();
                c.quiesced_at = Some(now);
            })
            .await?;
        }
        let targets = self.cutover().quiesce;
        // In a set: every claim's stops recorded before any owner stops.
        if let Some(gate) = &self.gate {
            gate.note_stops(&targets);
        }
        if let Some(flow) = self.at_barrier(Pos::Planned, Step::Quiesce).await? {
            return Ok(flow);
        }
        let names: Vec<String> = targets
            .iter()
            .map(|t| format!("{:?} {}", t.kind, t.name))
            .collect();
        let msg = match names.is_empty() {
            true => format!("no pod mounts {name}: nothing to stop"),
            false => format!("scaling {} to 0", names.join(", ")),
        };
        self.post(Severity::Normal, "CutoverQuiesce", &msg).await;
        self.stop_app("quiesce").await?;
        self.advance(Step::FinalSync, |_| {}).await?;
        Ok(Flow::Next)
    }

    /// Consumers appeared that scaling cannot stop: nothing has changed
    /// yet, so the operation fails with what to do, and resume tries again.
    async fn unstoppable(
        &mut self,
        unstoppable: &[quiesce::Unstoppable],
    ) -> Result<Flow, DriverError> {
        let list: Vec<String> = unstoppable.iter().map(|u| u.to_string()).collect();
        let msg = format!(
            "cannot stop every consumer of {}: {}",
            self.claim(),
            list.join("; ")
        );
        self.fail_untouched("CutoverRefused", &msg).await
    }

    /// Ends the operation Failed before the app was touched: nothing to
    /// undo, and `resume` tries again from the step it stopped at.
    async fn fail_untouched(&mut self, reason: &str, msg: &str) -> Result<Flow, DriverError> {
        if let Some(gate) = &self.gate {
            gate.fail_all(msg);
        }
        self.write(|vm| {
            vm.status.phase = Phase::Failed;
            vm.status.message = Some(msg.to_string());
            vm.status.completion_time = Some(Timestamp::now());
            if let Some(c) = vm.status.cutover.as_mut() {
                c.pass = None;
            }
        })
        .await?;
        self.post(Severity::Warning, reason, msg).await;
        self.tidy().await?;
        self.release().await?;
        Ok(Flow::Stop(Outcome::Finished(Box::new(self.record.clone()))))
    }

    /// Once the cutover has ended: the Service and the key Secrets its
    /// passes shared go (their pods went with each pass).
    pub(super) async fn tidy(&self) -> Result<(), DriverError> {
        let namespaces = (
            self.plan.spec.source.namespace.as_str(),
            self.plan.destination.namespace.as_str(),
        );
        let reads = self.plan.source_method.method;
        let sides = Sides::one(self.client.clone());
        objects::cleanup(&sides, &self.plan.operation, namespaces, reads)
            .await
            .map(|_| ())
    }

    /// Scales every recorded owner to zero and waits until no pod (but
    /// volmig's) mounts the claim; `side` names the crash point.
    pub(super) async fn stop_app(&mut self, side: &str) -> Result<(), DriverError> {
        let ns = self.claim().namespace.clone();
        let claim = self.claim().name.clone();
        crash_point(&format!("{side}:ScaleDown"));
        for t in &self.cutover().quiesce {
            workload::scale(&self.client, &ns, t, 0).await?;
        }
        let client = self.client.clone();
        let what = format!("pods still mount {ns}/{claim}");
        let (ns, claim) = (&ns, &claim);
        self.wait_until(GONE_LIMIT, &what, || {
            let client = client.clone();
            async move { Ok(workload::consumers(&client, ns, claim).await?.is_empty()) }
        })
        .await
    }

    pub(super) async fn final_sync(&mut self) -> Result<Flow, DriverError> {
        if self.cutover().rollback.is_some() {
            self.advance(Step::RollingBack, |_| {}).await?;
            return Ok(Flow::Next);
        }
        if self.cutover().pass.is_none() {
            let msg = "final sync: the app is down; verified, with --delete";
            self.post(Severity::Normal, "CutoverFinalSync", msg).await;
        }
        let plan = machine::pass_plan(&self.plan, PassKind::FinalSync);
        match self.run_pass(PassKind::FinalSync, plan).await? {
            Outcome::PassEnded { failure: None, .. } => {
                if let Some(flow) = self.at_barrier(Pos::Synced, Step::FinalSync).await? {
                    return Ok(flow);
                }
                let first = self.cutover().pass.map_or(1, |p| p.first_attempt);
                let round = machine::round_of(0, first, &self.record.status.attempts, None);
                let facts = self.swap_facts().await?;
                self.advance(Step::Swap, |c| {
                    c.pass = None;
                    c.final_sync_seconds = Some(round.seconds);
                    if c.claim(&facts.name).is_none() {
                        c.claims.push(facts.clone());
                    }
                })
                .await?;
                Ok(Flow::Next)
            }
            Outcome::PassEnded {
                failure: Some(why), ..
            } => {
                let reason = format!("the final sync of {} failed: {why}", self.claim());
                if let Some(gate) = &self.gate {
                    gate.roll_back_all(&reason);
                }
                self.start_rollback(Step::FinalSync, &reason).await?;
                Ok(Flow::Next)
            }
            other => self.interrupted(other),
        }
    }

    /// What the swap needs, read before it changes anything: the claim as
    /// it is, both volumes and their policies.
    async fn swap_facts(&self) -> Result<ClaimCutover, DriverError> {
        let claim = self.claim().clone();
        let temporary = self.plan.destination.name.clone();
        let source = self.bound_claim(&claim.name).await?;
        let target = self.bound_claim(&temporary).await?;
        let (source_volume, source_policy) = self.volume_policy(&source.1).await?;
        let (new_volume, new_policy) = self.volume_policy(&target.1).await?;
        Ok(ClaimCutover {
            namespace: claim.namespace,
            name: claim.name,
            original: rebind::shape_of(&source.0),
            source_volume,
            source_policy,
            new_volume: Some(new_volume),
            new_policy: Some(new_policy),
            temporary_claim: temporary,
            new_shape: Some(rebind::shape_of(&target.0)),
            swap: None,
        })
    }

    async fn bound_claim(
        &self,
        name: &str,
    ) -> Result<(PersistentVolumeClaim, String), DriverError> {
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &self.claim().namespace);
        let claim = api
            .get(name)
            .await
            .map_err(|e| DriverError::kube(format!("get claim {name}"), e))?;
        let volume = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                DriverError::Refused(format!("claim {name} is not bound to a volume"))
            })?;
        Ok((claim, volume))
    }

    async fn volume_policy(&self, name: &str) -> Result<(String, String), DriverError> {
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        let v = api
            .get(name)
            .await
            .map_err(|e| DriverError::kube(format!("get volume {name}"), e))?;
        Ok((name.to_string(), rebind::policy(&v).to_string()))
    }

    pub(super) async fn swap(&mut self) -> Result<Flow, DriverError> {
        let c = self.cutover();
        let Some(claim) = c.claim(&self.claim().name).cloned() else {
            return Err(DriverError::Refused(
                "the record has no swap facts for the claim".into(),
            ));
        };
        let new_volume = claim.new_volume.clone().unwrap_or_default();
        let keep = [claim.source_volume.clone(), new_volume.clone()];
        let spec = claim
            .new_shape
            .clone()
            .unwrap_or_else(|| claim.original.clone());
        let remove = [claim.temporary_claim.clone()];
        self.rebind(&claim.original, &spec, &new_volume, &remove, &keep)
            .await?;
        if let Some(flow) = self.at_barrier(Pos::Swapped, Step::Swap).await? {
            return Ok(flow);
        }
        self.record_owner(&new_volume).await?;
        self.update_owner(true).await?;
        if let Some(flow) = self.at_barrier(Pos::OwnerSet, Step::Swap).await? {
            return Ok(flow);
        }
        let msg = format!(
            "swapped: claim {} is bound to volume {new_volume} (was {})",
            self.claim(),
            claim.source_volume
        );
        self.post(Severity::Normal, "CutoverSwapped", &msg).await;
        self.advance(Step::Restore, |_| {}).await?;
        Ok(Flow::Next)
    }

    pub(super) async fn restore(&mut self) -> Result<Flow, DriverError> {
        self.scale_back().await?;
        let c = self.cutover();
        if let Some(claim) = c.claim(&self.claim().name) {
            let policy = claim.new_policy.clone().unwrap_or_else(|| "Delete".into());
            let new_volume = claim.new_volume.clone().unwrap_or_default();
            self.set_policy(&new_volume, &policy).await?;
            let old = claim.source_volume.clone();
            self.label_volume(&old).await?;
        }
        // In a set: the app Ready on every claim before any claim ends (and
        // `--commit` deletes an old volume).
        if let Some(flow) = self.at_barrier(Pos::Restored, Step::Restore).await? {
            return Ok(flow);
        }
        let now = Timestamp::now();
        self.advance(Step::AwaitingCommit, |c| {
            c.restored_at = Some(now);
            c.downtime_seconds = c.downtime(now);
        })
        .await?;
        Ok(Flow::Next)
    }

    /// Scales every recorded owner back to its replicas; waits for Ready.
    pub(super) async fn scale_back(&mut self) -> Result<(), DriverError> {
        let ns = self.claim().namespace.clone();
        let targets = self.cutover().quiesce;
        for t in &targets {
            workload::scale(&self.client, &ns, t, t.replicas).await?;
        }
        let client = self.client.clone();
        let what = "the app is not Ready again";
        let (targets_ref, ns_ref) = (&targets, &ns);
        self.wait_until(READY_LIMIT, what, || {
            let client = client.clone();
            async move {
                for t in targets_ref {
                    if !workload::ready(&client, ns_ref, t, t.replicas).await? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        })
        .await
    }

    /// The move is done: the operation Succeeded (again, if a crash came
    /// between), and with `--commit` the old volume goes at once.
    pub(super) async fn settle(&mut self) -> Result<Flow, DriverError> {
        if self.record.status.phase != Phase::Succeeded {
            let c = self.cutover();
            let claim = c.claim(&self.claim().name).cloned().unwrap_or_default();
            let downtime = c.downtime_seconds.unwrap_or_default();
            self.write(|vm| {
                vm.status.phase = Phase::Succeeded;
                vm.status.message = None;
                vm.status.completion_time = Some(Timestamp::now());
            })
            .await?;
            let msg = format!(
                "cut over: claim {} is bound to volume {} and the app runs again; it was down {downtime:.1}s. The old volume {} is kept: kubectl volmig commit {op} deletes it, kubectl volmig rollback {op} goes back to it",
                self.claim(),
                claim.new_volume.unwrap_or_default(),
                claim.source_volume,
                op = self.user_operation()
            );
            self.post(Severity::Normal, "CutoverSucceeded", &msg).await;
        }
        if self.plan.spec.cutover.as_ref().is_some_and(|c| c.commit) {
            self.commit().await?;
        }
        self.tidy().await?;
        self.release().await?;
        Ok(Flow::Stop(Outcome::Finished(Box::new(self.record.clone()))))
    }

    /// Deletes the old volume: with its data if its policy was Delete (the
    /// volume's own reclaim does it), else the object only.
    pub async fn commit(&mut self) -> Result<(), DriverError> {
        let c = self.cutover();
        if c.step != Step::AwaitingCommit {
            return Err(DriverError::Refused(format!(
                "only a cutover awaiting commit can be committed; this one is {}",
                c.step.as_str()
            )));
        }
        let claim = c.claim(&self.claim().name).cloned().unwrap_or_default();
        self.note_change(COMMIT).await?;
        crash_point("commit");
        let old = &claim.source_volume;
        let data = self.discard_volume(old, &claim.source_policy).await?;
        self.advance(Step::Committed, |_| {}).await?;
        let msg = format!("committed: the old volume {old} is deleted, {data}");
        self.write(|vm| vm.status.message = Some(msg.clone()))
            .await?;
        self.post(Severity::Normal, "CutoverCommitted", &msg).await;
        Ok(())
    }
}
