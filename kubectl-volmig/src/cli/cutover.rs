//! `commit` and `rollback`: the two ways a cutover ends.

use super::args::{OpArgs, Output, RollbackArgs};
use super::{control, exit, set, show, CliError};
use crate::cluster::Cluster;
use crate::driver::cutover::request::{request_rollback, RollbackFlags};
use crate::driver::{Cutover, DriverError, DriverOptions};
use crate::record::cutover::Step;
use crate::record::VolumeMigration;

/// Deletes the old volume of a cutover awaiting commit.
pub async fn commit(cluster: &Cluster, args: OpArgs, output: Output) -> Result<i32, CliError> {
    let op = &args.operation;
    let vm = match set::find(cluster, op).await? {
        set::Found::One(vm) => {
            set::refuse_member_of_cutover(&vm, "commit")?;
            *vm
        }
        set::Found::Set(group) => return set::commit(cluster, *group, output).await,
        set::Found::Rehome(r) => return Err(super::rehome::refuse(&r, "commit")),
    };
    let step = vm.status.cutover.as_ref().map(|c| c.step);
    match step {
        None => {
            return Err(CliError::Usage(format!(
                "operation {op} is a copy, not a cutover: there is nothing to commit"
            )))
        }
        Some(Step::Committed) => {
            say!("operation {op} is committed already");
            show::print_one(&vm, output)?;
            return Ok(exit::OK);
        }
        Some(Step::AwaitingCommit) => {}
        Some(other) => {
            return Err(CliError::Usage(format!(
                "operation {op} is at {}: only a cutover awaiting commit can be committed \
                 (kubectl volmig resume {op} finishes it first)",
                other.as_str()
            )))
        }
    }
    let vm = commit_one(cluster, vm).await?;
    say!(
        "operation {op}: {}",
        vm.status.message.as_deref().unwrap_or("committed")
    );
    show::print_one(&vm, output)?;
    Ok(exit::OK)
}

/// Deletes the old volume of one claim's cutover awaiting commit; its
/// record as then written.
pub(super) async fn commit_one(
    cluster: &Cluster,
    vm: VolumeMigration,
) -> Result<VolumeMigration, CliError> {
    let op = vm.metadata.name.clone();
    let plan = vm
        .plan()
        .ok_or_else(|| CliError::Usage(format!("operation {op} has no plan in its record")))?;
    let options = DriverOptions {
        start_timeout: std::time::Duration::from_secs(300),
        holder: crate::names::holder(),
    };
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let mut cutover = Cutover::new(cluster.client.clone(), plan, vm, options, tx);
    let result = cutover.commit().await;
    let released = cutover.release().await;
    result.map_err(refused_as_usage)?;
    released?;
    Ok(cutover.record().clone())
}

/// Records the rollback, then drives it (or follows the client that
/// drives the operation now).
pub async fn rollback(
    cluster: &Cluster,
    args: RollbackArgs,
    output: Output,
) -> Result<i32, CliError> {
    let who = crate::names::who(cluster.user.as_deref());
    let flags = RollbackFlags {
        discard_new_writes: args.discard_new_writes,
        delete_new: args.delete_new,
    };
    match set::find(cluster, &args.operation).await? {
        set::Found::Set(group) => {
            let start_timeout = crate::plan::start_timeout(args.start_timeout)?;
            return set::rollback(cluster, *group, flags, args.force, start_timeout, output).await;
        }
        set::Found::One(vm) => set::refuse_member_of_cutover(&vm, "rollback")?,
        set::Found::Rehome(r) => return super::rehome::rollback(cluster, *r, args.force).await,
    }
    let vm = request_rollback(
        &cluster.client,
        &cluster.namespace,
        &args.operation,
        &who,
        flags,
    )
    .await
    .map_err(refused_as_usage)?;
    let from = vm
        .status
        .cutover
        .as_ref()
        .and_then(|c| c.rollback.as_ref())
        .map_or(Step::PreCopy, |r| r.from);
    say!(
        "rolling operation {} back from {}",
        args.operation,
        from.as_str()
    );
    control::drive_rollback(
        cluster,
        &args.operation,
        args.force,
        args.start_timeout,
        output,
    )
    .await
}

fn refused_as_usage(e: DriverError) -> CliError {
    match e {
        DriverError::Refused(m) => CliError::Usage(m),
        e => e.into(),
    }
}
