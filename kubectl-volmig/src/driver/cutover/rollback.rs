//! `RollingBack`: the claim goes back to its old volume, from whatever step
//! the cutover had reached. The app is stopped again if it may run; what
//! it wrote on the new volume is copied back first (unless
//! `--discard-new-writes`); the claim is bound to the old volume the way
//! the swap bound it to the new one; the owners get their recorded
//! replicas; the old volume gets its policy back. The new volume is kept
//! (labelled with the operation) unless `--delete-new`.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams};

use super::machine;
use super::{crash_point, Cutover, Flow};
use crate::cluster::Sides;
use crate::driver::group::gate::{Pos, Verdict};
use crate::driver::{gather, objects, DriverError, Outcome};
use crate::events::Severity;
use crate::names;
use crate::plan;
use crate::plan::security::Profile;
use crate::record::cutover::{ClaimCutover, ClaimShape, PassKind, Rollback, Step};
use crate::record::Phase;
use crate::spec::{ClaimRef, MigrationSpec, RunAs, SecurityMode};

impl Cutover {
    pub(super) async fn roll_back(&mut self) -> Result<Flow, DriverError> {
        let c = self.cutover();
        let rollback = c.rollback.clone().unwrap_or_else(|| Rollback {
            from: Step::PreCopy,
            reason: "rolling back".into(),
            ..Rollback::default()
        });
        if let Some(gate) = &self.gate {
            gate.roll_back_all(&rollback.reason);
        }
        // A pass it interrupted leaves no pod behind.
        let op = self.plan.operation.clone();
        let (source_ns, destination_ns) = (
            self.claim().namespace.clone(),
            self.plan.destination.namespace.clone(),
        );
        let namespaces = (source_ns.as_str(), destination_ns.as_str());
        let sync_back_running = c.pass.is_some_and(|p| p.kind == PassKind::SyncBack);
        if !sync_back_running {
            let reads = self.plan.source_method.method;
            let sides = Sides::one(self.client.clone());
            objects::cleanup(&sides, &op, namespaces, reads).await?;
            let wait = super::super::run::POD_GONE_WAIT;
            objects::wait_pods_gone(&sides, &op, namespaces, wait).await?;
            let r = rollback.clone();
            self.write(|vm| {
                let c = vm.status.cutover.get_or_insert_with(Default::default);
                c.pass = None;
                c.rollback = Some(r.clone());
            })
            .await?;
        }
        let swapped = machine::swap_may_have_started(rollback.from, &c);
        let claim = c.claim(&self.claim().name).cloned();
        if c.quiesced_at.is_some() {
            if !rollback.quiesced {
                self.write(|vm| {
                    if let Some(r) = vm.status.cutover.as_mut().and_then(|c| c.rollback.as_mut()) {
                        r.quiesced = true;
                    }
                })
                .await?;
            }
            self.stop_app("rollback").await?;
        }
        let back = names::sync_back_claim(&op);
        if let (true, false, Some(claim)) = (rollback.sync_back, rollback.synced_back, &claim) {
            if let Some(flow) = self.sync_back(claim, &back).await? {
                return Ok(flow);
            }
        }
        // In a set: every claim's writes copied back before any claim goes
        // back; one copy back that failed keeps the whole set on the new.
        match self.barrier(Pos::SyncedBack).await? {
            Verdict::StayNew(why) => {
                let why = format!("another claim's copy back failed ({why})");
                return self.stay_on_new(&why).await;
            }
            Verdict::Halt(why) => return Err(DriverError::Halted(why)),
            _ => {}
        }
        if let (true, Some(claim)) = (swapped, &claim) {
            let new_volume = claim.new_volume.clone().unwrap_or_default();
            let keep = [claim.source_volume.clone(), new_volume];
            self.rebind(
                &claim.original,
                &claim.original,
                &claim.source_volume,
                std::slice::from_ref(&back),
                &keep,
            )
            .await?;
        }
        // In a set: every claim on its old volume before a StatefulSet is
        // made again, and that done before the app starts.
        if let Verdict::Halt(why) = self.barrier(Pos::RolledBack).await? {
            return Err(DriverError::Halted(why));
        }
        self.update_owner(false).await?;
        if let Verdict::Halt(why) = self.barrier(Pos::OwnerRestored).await? {
            return Err(DriverError::Halted(why));
        }
        if c.quiesced_at.is_some() {
            self.scale_back().await?;
        }
        self.settle_volumes(&rollback, claim.as_ref(), swapped)
            .await?;
        let msg = format!(
            "rolled back: claim {} is bound to its old volume{} and the app runs on it ({})",
            self.claim(),
            claim
                .as_ref()
                .map(|c| format!(" {}", c.source_volume))
                .unwrap_or_default(),
            rollback.reason
        );
        self.write(|vm| {
            vm.status.phase = Phase::RolledBack;
            vm.status.message = Some(msg.clone());
            vm.status.completion_time = Some(Timestamp::now());
            let c = vm.status.cutover.get_or_insert_with(Default::default);
            c.step = Step::RolledBack;
        })
        .await?;
        self.post(Severity::Normal, "CutoverRolledBack", &msg).await;
        self.tidy().await?;
        self.release().await?;
        Ok(Flow::Stop(Outcome::Finished(Box::new(self.record.clone()))))
    }

    /// Copies the app's writes on the new volume back into the old one,
    /// through a claim bound to it. `Some` when the rollback cannot go on:
    /// then the app runs again on the new volume, where its data is whole.
    async fn sync_back(
        &mut self,
        claim: &ClaimCutover,
        back: &str,
    ) -> Result<Option<Flow>, DriverError> {
        let new_volume = claim.new_volume.clone().unwrap_or_default();
        let keep = [claim.source_volume.clone(), new_volume];
        let meta = ClaimShape {
            labels: [(
                names::OPERATION_KEY.to_string(),
                self.plan.operation.clone(),
            )]
            .into(),
            ..ClaimShape::default()
        };
        self.rebind_claim(
            back,
            &meta,
            &claim.original,
            &claim.source_volume,
            &[],
            &keep,
        )
        .await?;
        let msg = format!(
            "copying what the app wrote on {} back to the old volume {}",
            claim.new_volume.as_deref().unwrap_or("the new volume"),
            claim.source_volume
        );
        self.post(Severity::Normal, "CutoverSyncBack", &msg).await;
        let plan = self.sync_back_plan(back).await?;
        match self.run_pass(PassKind::SyncBack, plan).await? {
            Outcome::PassEnded { failure: None, .. } => {
                self.write(|vm| {
                    let c = vm.status.cutover.get_or_insert_with(Default::default);
                    c.pass = None;
                    if let Some(r) = c.rollback.as_mut() {
                        r.synced_back = true;
                    }
                })
                .await?;
                Ok(None)
            }
            Outcome::PassEnded {
                failure: Some(why), ..
            } => {
                // The old volume may hold half of the copy now: the app
                // goes back to the new one (the whole set's, in a set),
                // and the rollback can be asked for again.
                let why = format!("copying back failed ({why})");
                if let Some(gate) = &self.gate {
                    gate.stay_all(&format!("{}: {why}", self.claim()));
                }
                self.stay_on_new(&why).await.map(Some)
            }
            other => self.interrupted(other).map(Some),
        }
    }

    /// The rollback stops before any claim went back: the app runs on the
    /// new volume again, as after the cutover, for `why`.
    async fn stay_on_new(&mut self, why: &str) -> Result<Flow, DriverError> {
        self.scale_back().await?;
        let msg = format!(
            "the rollback stopped: {why}; the app runs on the new volume again. Run kubectl volmig rollback {} again, or with --discard-new-writes",
            self.user_operation()
        );
        self.write(|vm| {
            vm.status.phase = Phase::Succeeded;
            vm.status.message = Some(msg.clone());
            let c = vm.status.cutover.get_or_insert_with(Default::default);
            c.pass = None;
            c.rollback = None;
            c.step = Step::AwaitingCommit;
        })
        .await?;
        self.post(Severity::Warning, "CutoverRollbackFailed", &msg)
            .await;
        self.release().await?;
        Ok(Flow::Stop(Outcome::Finished(Box::new(self.record.clone()))))
    }

    /// The copy from the claim (now on the new volume) into `back`.
    async fn sync_back_plan(&self, back: &str) -> Result<plan::Plan, DriverError> {
        let claim = self.claim().clone();
        let mut spec = MigrationSpec::new(claim.clone(), ClaimRef::new(&claim.namespace, back));
        spec.destination.reuse = true;
        spec.destination.allow_shrink = true;
        spec.transfer.delete = true;
        spec.transfer.verify = true;
        spec.transfer.compress = self.plan.spec.transfer.compress;
        // The app is stopped: the new volume is read as it is.
        spec.transfer.copy_method = crate::spec::CopyMethod::Direct;
        spec.retry = self.plan.spec.retry.clone();
        spec.mover = self.plan.spec.mover.clone();
        // The movers' security as the cutover's: the app is stopped now,
        // and its pods can no longer say whom restricted movers run as.
        let security = &self.plan.security;
        spec.mover.security = match security.profile {
            Profile::Baseline => SecurityMode::Baseline,
            Profile::Restricted => SecurityMode::Restricted,
        };
        if let Some(id) = &security.identity {
            spec.mover.run_as = Some(RunAs {
                uid: id.uid,
                gid: id.gid,
            });
        }
        let inputs = gather::inputs(&self.client, &spec).await?;
        let mut plan = plan::plan(&spec, &self.plan.operation, &inputs).map_err(|r| {
            DriverError::Refused(format!("cannot plan the copy back to the old volume: {r}"))
        })?;
        plan.security = security.clone();
        Ok(plan)
    }

    /// The old volume gets its policy back; the new one is labelled and
    /// kept, or deleted with `--delete-new`.
    async fn settle_volumes(
        &mut self,
        rollback: &Rollback,
        claim: Option<&ClaimCutover>,
        swapped: bool,
    ) -> Result<(), DriverError> {
        if let (true, Some(c)) = (swapped, claim) {
            self.set_policy(&c.source_volume, &c.source_policy).await?;
        }
        let temporary = self.plan.destination.name.clone();
        let new_volume = claim.and_then(|c| c.new_volume.clone());
        if !rollback.delete_new {
            if let Some(v) = &new_volume {
                self.label_volume(v).await?;
            }
            return Ok(());
        }
        crash_point("rollback:DeleteNew");
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &self.plan.destination.namespace);
        objects::delete_if_there(&claims, &temporary, &DeleteParams::default(), "claim").await?;
        if let (Some(v), Some(c)) = (&new_volume, claim) {
            let policy = c.new_policy.as_deref().unwrap_or("Delete");
            self.discard_volume(v, policy).await?;
        }
        Ok(())
    }
}
