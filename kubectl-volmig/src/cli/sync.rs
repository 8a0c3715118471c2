//! `kubectl volmig sync OP [--final]`: another round after the first copy,
//! on demand. Across clusters volmig cannot stop an app in one cluster
//! and start it in the other, so the user runs the rounds while the app
//! runs, stops it, and runs the final one, which verifies and ends the
//! operation. Any copy without `--cutover` takes rounds.

use super::args::{Output, SyncArgs};
use super::{control, set, CliError};
use crate::cluster::Cluster;
use crate::driver::incluster;
use crate::driver::DriverOptions;
use crate::record::store::{RecordStore, StoreError};
use crate::record::sync;

pub async fn run(cluster: &Cluster, args: SyncArgs, output: Output) -> Result<i32, CliError> {
    let start_timeout = crate::plan::start_timeout(args.start_timeout)?;
    let op = &args.operation;
    let vm = match set::find(cluster, op).await? {
        set::Found::One(vm) => *vm,
        set::Found::Set(_) | set::Found::Rehome(_) => {
            return Err(CliError::Usage(format!(
                "sync takes an operation of one claim; {op} is not one"
            )))
        }
    };
    let store = RecordStore::new(cluster.client.clone(), &cluster.namespace);
    if vm.spec.cutover.is_some() {
        return Err(CliError::Usage(format!(
            "operation {op} is a cutover, which runs its own rounds; sync is for copies"
        )));
    }
    let me = crate::names::holder();
    if let Some(d) = incluster::live_holder(&cluster.client, &vm, &me).await {
        return Err(CliError::Usage(format!(
            "operation {op} is being driven by {}; a round starts once it has ended",
            d.holder
        )));
    }
    // Written ahead: a client stopped during the round leaves it open, and
    // `resume` (or `sync` again) finishes it.
    let now = jiff::Timestamp::now();
    let mut round = 0;
    let vm = store
        .update(op, |vm| {
            round = sync::start_round(&mut vm.status, op, args.r#final, now)
                .map_err(|e| StoreError::Changed(e.to_string()))?;
            Ok(())
        })
        .await
        .map_err(super::declined_as_usage)?;
    if output == Output::Table {
        let what = match args.r#final {
            true => "the final round: it verifies, then ends the operation",
            false => "the changes since the last copy",
        };
        say!("operation {op}: sync round {round}, {what}");
    }
    let options = DriverOptions {
        start_timeout,
        holder: me,
    };
    control::take_up(cluster, vm, options, output).await
}
