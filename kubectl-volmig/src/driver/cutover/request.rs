//! Asking for a rollback (`rollback`, and `abort` after PreCopy): written
//! into the record, where the driver that holds the operation takes it up
//! at its next step, or the asking client drives it itself.

use jiff::Timestamp;
use kube::Client;

use super::machine;
use crate::driver::DriverError;
use crate::record::cutover::{Step, COMMIT};
use crate::record::store::{RecordStore, StoreError};
use crate::record::{Phase, VolumeMigration};

/// What the rollback is asked to do.
#[derive(Debug, Clone, Copy, Default)]
pub struct RollbackFlags {
    pub discard_new_writes: bool,
    pub delete_new: bool,
}

/// Records a rollback of cutover `op` as asked by `who`.
pub async fn request_rollback(
    client: &Client,
    namespace: &str,
    op: &str,
    who: &str,
    flags: RollbackFlags,
) -> Result<VolumeMigration, DriverError> {
    let store = RecordStore::new(client.clone(), namespace);
    let now = Timestamp::now();
    store
        .update(op, |vm| {
            let Some(c) = vm.status.cutover.as_mut() else {
                return Err(StoreError::Changed(format!(
                    "operation {op} is a copy, not a cutover: there is nothing to roll back \
                     (kubectl volmig abort stops a copy)"
                )));
            };
            let reason = format!("rollback asked for by {who}");
            let r = machine::rollback_request(
                c,
                flags.discard_new_writes,
                flags.delete_new,
                &reason,
                now,
            )
            .map_err(|why| StoreError::Changed(format!("operation {op}: {why}")))?;
            if c.claims.iter().any(|c| c.swap.as_deref() == Some(COMMIT)) {
                return Err(StoreError::Changed(format!(
                    "operation {op} is being committed: its old volume is going"
                )));
            }
            c.rollback = Some(r);
            c.step = Step::RollingBack;
            vm.status.phase = Phase::Running;
            vm.status.completion_time = None;
            vm.status.message = Some(format!("rolling back, as {who} asked"));
            Ok(())
        })
        .await
        .map_err(|e| match e {
            StoreError::Changed(m) => DriverError::Refused(m),
            e => e.into(),
        })
}
