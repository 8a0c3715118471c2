//! The driver's writes to the record (with its heartbeat, so other clients
//! know it is alive) and its Events.

use jiff::Timestamp;
use tokio::time::Instant;

use super::run::Driver;
use super::DriverError;
use crate::events::Severity;
use crate::record::cutover::PassKind;
use crate::record::group::MigrationGroup;
use crate::record::store::{Store, StoreError, Stored};
use crate::record::{Driver as Lease, Phase, VolumeMigration};

impl Driver {
    /// Writes the latest progress and the driver's heartbeat.
    pub(super) async fn heartbeat(&mut self) -> Result<(), DriverError> {
        let progress = self.progress();
        let prior = self.prior();
        let number = self.live.as_ref().map(|l| l.number);
        // Where the pods run, as soon as they are scheduled.
        let nodes = self
            .view()
            .map(|(r, s, _, _)| (r.node, s.and_then(|s| s.node)));
        self.write(|vm| {
            let Some(a) = vm
                .status
                .attempts
                .iter_mut()
                .find(|a| Some(a.number) == number)
            else {
                return;
            };
            if let Some((receiver, sender)) = &nodes {
                a.receiver.node = a.receiver.node.take().or(receiver.clone());
                a.sender.node = a.sender.node.take().or(sender.clone());
            }
            if let Some(prior) = prior {
                a.bytes_prior = prior;
            }
            if let Some(p) = &progress {
                vm.status.progress = Some(p.clone());
                a.bytes_done = p.bytes_done;
                a.bytes_total = p.bytes_total;
                a.rate = p.rate;
            }
        })
        .await
    }

    /// Changes the record (re-read on conflict), with the heartbeat; stops
    /// with [`DriverError::Aborted`] once someone has aborted the operation.
    pub(super) async fn write(
        &mut self,
        change: impl FnMut(&mut VolumeMigration),
    ) -> Result<(), DriverError> {
        let lease = LeaseHolder {
            store: &self.store,
            operation: &self.plan.operation,
            holder: &self.options.holder,
            claiming: !self.holds_lease,
            // A copy toward a cutover stops once a rollback is asked for;
            // a rollback's own sync back goes on.
            stop_on_rollback: self
                .record
                .status
                .cutover
                .as_ref()
                .and_then(|c| c.pass)
                .is_some_and(|p| p.kind != PassKind::SyncBack),
        };
        self.record = lease.write(change).await?;
        self.written = Instant::now();
        self.holds_lease = true;
        Ok(())
    }

    /// Gives up the lease: another client may drive now.
    pub(super) async fn release(&mut self) -> Result<(), DriverError> {
        self.record =
            release_lease(&self.store, &self.plan.operation, &self.options.holder).await?;
        self.holds_lease = false;
        Ok(())
    }

    pub(super) async fn post(&self, severity: Severity, reason: &str, message: &str) {
        let destination = crate::spec::ClaimRef {
            namespace: self.plan.destination.namespace.clone(),
            name: self.plan.destination.name.clone(),
        };
        // Each claim's Events in its own cluster.
        let source = &self.plan.spec.source;
        self.source_events
            .post(&[source], severity, reason, message)
            .await;
        self.events
            .post(&[&destination], severity, reason, message)
            .await;
    }
}

/// What a lease is held on: a claim's record, or a set's head.
pub trait Leased: Stored {
    fn phase(&self) -> Phase;
    fn lease(&self) -> Option<&Lease>;
    fn lease_mut(&mut self) -> &mut Option<Lease>;
    /// Whether a cutover rollback has been asked for.
    fn rolling_back(&self) -> bool {
        false
    }
}

impl Leased for VolumeMigration {
    fn phase(&self) -> Phase {
        self.status.phase
    }
    fn lease(&self) -> Option<&Lease> {
        self.status.driver.as_ref()
    }
    fn lease_mut(&mut self) -> &mut Option<Lease> {
        &mut self.status.driver
    }
    fn rolling_back(&self) -> bool {
        VolumeMigration::rolling_back(self)
    }
}

impl Leased for MigrationGroup {
    fn phase(&self) -> Phase {
        self.status.phase
    }
    fn lease(&self) -> Option<&Lease> {
        self.status.driver.as_ref()
    }
    fn lease_mut(&mut self) -> &mut Option<Lease> {
        &mut self.status.driver
    }
}

/// A driver's hold on an operation: every write carries its heartbeat.
pub(crate) struct LeaseHolder<'a, T> {
    pub store: &'a Store<T>,
    pub operation: &'a str,
    pub holder: &'a str,
    /// The first write claims the lease (resume has checked that no one
    /// holds it, or was told to --force); later ones keep it, and stop
    /// once another client has taken it over.
    pub claiming: bool,
    /// Stop (as [`DriverError::Aborted`]) once a rollback is asked for.
    pub stop_on_rollback: bool,
}

impl<T: Leased> LeaseHolder<'_, T> {
    /// Changes the record (re-read on conflict), with the heartbeat; stops
    /// with [`DriverError::Aborted`] once someone has aborted the
    /// operation, [`DriverError::TakenOver`] once another client drives it.
    pub async fn write(&self, mut change: impl FnMut(&mut T)) -> Result<T, DriverError> {
        let now = Timestamp::now();
        let lease = Lease {
            holder: self.holder.to_string(),
            heartbeat: now,
        };
        let mut taken_by = None;
        let result = self
            .store
            .update(self.operation, |vm| {
                if vm.phase() == Phase::Aborted {
                    return Err(StoreError::Changed("the operation was aborted".into()));
                }
                if self.stop_on_rollback && vm.rolling_back() {
                    return Err(StoreError::Changed("a rollback was asked for".into()));
                }
                if let Some(other) = vm
                    .lease()
                    .filter(|d| !self.claiming && d.holder != lease.holder && d.is_alive(now))
                {
                    taken_by = Some(other.holder.clone());
                    return Err(StoreError::Changed(format!(
                        "taken over by {}",
                        other.holder
                    )));
                }
                change(vm);
                *vm.lease_mut() = Some(lease.clone());
                Ok(())
            })
            .await;
        match result {
            Ok(vm) => Ok(vm),
            Err(StoreError::Changed(_)) => match taken_by {
                Some(holder) => Err(DriverError::TakenOver(holder)),
                None => Err(DriverError::Aborted),
            },
            Err(e) => Err(e.into()),
        }
    }
}

/// Releases `holder`'s lease on `op` (after Ctrl-C), if it still holds it;
/// the record as written.
pub async fn release_lease<T: Leased>(
    store: &Store<T>,
    op: &str,
    holder: &str,
) -> Result<T, StoreError> {
    store
        .update(op, |vm| {
            if vm.lease().is_some_and(|d| d.holder == holder) {
                *vm.lease_mut() = None;
            }
            Ok(())
        })
        .await
}
