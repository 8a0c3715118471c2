//! Driving an operation (`migrate`, `resume`), and stopping or removing it
//! (`abort`, `cleanup`).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};
use tokio::sync::mpsc::unbounded_channel;

use super::args::{CleanupArgs, OpArgs, Output, ResumeArgs};
use super::notes::{self, LeftBehind};
use super::report::{self, Mode};
use super::{exit, exit_for, set, show, CliError};
use crate::cluster::{Cluster, Sides};
use crate::driver::follow::attempt_logs;
use crate::driver::judge::PodView;
use crate::driver::logs::LogDigest;
use crate::driver::{
    incluster, objects, progress_of, release_lease, Cutover, Driver, DriverError, DriverOptions,
    Outcome,
};
use crate::plan::Plan;
use crate::record::cutover::Step;
use crate::record::figures::{self, Budget};
use crate::record::store::{RecordStore, StoreError};
use crate::record::{Attempt, Phase, Progress, VolumeMigration};

/// Runs the driver with progress shown as `output` allows, until the
/// operation ends, or Ctrl-C (which leaves it running).
pub async fn drive(
    cluster: &Cluster,
    plan: Plan,
    record: VolumeMigration,
    options: DriverOptions,
    output: Output,
) -> Result<i32, CliError> {
    let (tx, rx) = unbounded_channel();
    let mode = Mode::choose(output != Output::Table);
    let reporter = tokio::spawn(report::show(mode, Budget::of(&record), rx));
    let op = plan.operation.clone();
    let ns = plan.destination.namespace.clone();
    let holder = options.holder.clone();
    let client = cluster.client.clone();
    let sides = super::clusters::sides(cluster, &plan.spec).await?;
    let run: Pin<Box<dyn Future<Output = Result<Outcome, DriverError>> + Send>> =
        match plan.spec.cutover {
            Some(_) => Box::pin(Cutover::new(client, plan, record, options, tx).run()),
            None => Box::pin(Driver::new(sides.clone(), plan, record, options, tx).run()),
        };
    let result = tokio::select! {
        r = run => Some(r),
        () = crate::signals::interrupted() => None,
    };
    let _ = reporter.await;
    let store = RecordStore::new(cluster.client.clone(), &ns);
    match result {
        None => {
            if let Err(e) = release_lease(&store, &op, &holder).await {
                tracing::warn!("cannot release the operation: {e}");
            }
            let left = left_behind(&sides, &store, &op).await;
            say!("{}", notes::interrupted(&op, &ns, left));
            if let Some(step) = app_stopped(&store, &op).await {
                say!("{}", notes::cutover_interrupted(&op, &ns, step));
            }
            Ok(exit::INTERRUPTED)
        }
        Some(Err(e)) => {
            // Let the next `resume` start at once instead of waiting for
            // this lease to go stale.
            if let Err(e) = release_lease(&store, &op, &holder).await {
                tracing::debug!("cannot release the operation: {e}");
            }
            if let Some(step) = app_stopped(&store, &op).await {
                say!("{}", notes::cutover_interrupted(&op, &ns, step));
            }
            Err(e.into())
        }
        Some(Ok(Outcome::Finished(vm) | Outcome::PassEnded { record: vm, .. })) => {
            if vm.status.phase == Phase::Aborted {
                say!("{}", notes::aborted(&vm));
            }
            super::detach::ended_here(cluster, &vm).await;
            show::print_one(&vm, output)?;
            Ok(exit_for(&vm))
        }
    }
}

/// The cutover step a stopped driver left the app in, if the app may be
/// down there.
async fn app_stopped(store: &RecordStore, op: &str) -> Option<Step> {
    let vm = store.get(op).await.ok()?;
    let step = vm.status.cutover?.step;
    matches!(
        step,
        Step::Quiesce | Step::FinalSync | Step::Swap | Step::Restore | Step::RollingBack
    )
    .then_some(step)
}

/// What runs without a driver once this one stops: the running attempt's
/// sender, if it exists and has not finished.
async fn left_behind(sides: &Sides, store: &RecordStore, op: &str) -> LeftBehind {
    let Ok(vm) = store.get(op).await else {
        return LeftBehind::Unknown;
    };
    let Some(attempt) = vm.running_attempt() else {
        return LeftBehind::Idle;
    };
    let pods: Api<Pod> = Api::namespaced(sides.source.clone(), &vm.spec.source.namespace);
    match pods.get_opt(&attempt.sender.name).await {
        Ok(Some(pod)) => {
            let view = PodView::new("sender", &attempt.sender.name, Some(&pod));
            match view.exit_code {
                None => LeftBehind::Copying(attempt.number),
                Some(_) => LeftBehind::Idle,
            }
        }
        Ok(None) => LeftBehind::Idle,
        Err(_) => LeftBehind::Unknown,
    }
}

pub async fn resume(cluster: &Cluster, args: ResumeArgs, output: Output) -> Result<i32, CliError> {
    let start_timeout = crate::plan::start_timeout(args.start_timeout)?;
    let store = RecordStore::new(cluster.client.clone(), &cluster.namespace);
    let op = &args.operation;
    match set::find(cluster, op).await? {
        set::Found::Set(_) if args.detach => {
            return Err(CliError::Usage(
                "--detach takes an operation of one claim in this version".into(),
            ))
        }
        set::Found::Set(_) if args.to_node.is_some() || args.to_storage_class.is_some() => {
            return Err(CliError::Usage(
                "--to-node and --to-storage-class take an operation of one claim".into(),
            ))
        }
        set::Found::Set(group) => {
            return set::resume(cluster, *group, args.force, start_timeout, output).await
        }
        set::Found::One(vm) => set::refuse_member_of_cutover(&vm, "resume")?,
        set::Found::Rehome(r) if args.detach => {
            return Err(super::rehome::refuse(&r, "resume --detach"))
        }
        set::Found::Rehome(r) => return super::rehome::resume(cluster, *r, args.force).await,
    }
    let me = crate::names::holder();
    loop {
        let vm = store.get(op).await?;
        if vm.status.phase == Phase::Succeeded {
            say!("operation {op} has already succeeded");
            show::print_one(&vm, output)?;
            return Ok(exit::OK);
        }
        if vm.status.phase == Phase::RolledBack {
            say!("operation {op} was rolled back; the app runs on its old volume");
            show::print_one(&vm, output)?;
            return Ok(exit::OK);
        }
        let driven = incluster::live_holder(&cluster.client, &vm, &me).await;
        let in_cluster = driven
            .as_ref()
            .is_some_and(|d| crate::names::holder_pod(&d.holder).is_some());
        if let (Some(d), true) = (&driven, args.detach && in_cluster) {
            say!(
                "operation {op} is driven in the cluster already, by {}",
                d.holder
            );
            show::print_one(&vm, output)?;
            return Ok(exit::OK);
        }
        if let (Some(d), false, false) = (&driven, args.force, args.detach) {
            // Someone drives it: follow until it ends or they go.
            say!(
                "operation {op} is driven by {}; following it (--force takes over)",
                d.holder
            );
            if let Some(code) = observe(cluster, &store, op, &me, output).await? {
                return Ok(code);
            }
            continue;
        }
        // Asked once, then driven from the record as it now is.
        let vm = match (args.to_node.as_deref(), args.to_storage_class.as_deref()) {
            (None, None) => vm,
            (node, class) => {
                super::redirect::new_destination(cluster, &store, &vm, node, class).await?;
                store.get(op).await?
            }
        };
        if args.detach && vm.spec.clusters.is_some() {
            return Err(super::clusters::no_detach());
        }
        if args.detach {
            super::detach::preflight(cluster, &vm).await?;
        }
        // An ended operation runs again: Running, with a fresh budget.
        let restart = matches!(vm.status.phase, Phase::Failed | Phase::Aborted);
        if output == Output::Table {
            super::err(&notes::resuming(&vm, restart));
        }
        let vm = if restart {
            restart_record(&store, op).await?
        } else {
            vm
        };
        if args.detach {
            if let Some(d) = &driven {
                say!(
                    "{} drives it now; the driver pod follows it and takes over when it stops",
                    d.holder
                );
            }
            return super::detach::start(cluster, vm, &args.driver_image, start_timeout, output)
                .await;
        }
        let options = DriverOptions {
            start_timeout,
            holder: me,
        };
        return take_up(cluster, vm, options, output).await;
    }
}

/// Drives `vm` from where its record stands.
pub async fn take_up(
    cluster: &Cluster,
    vm: VolumeMigration,
    options: DriverOptions,
    output: Output,
) -> Result<i32, CliError> {
    let plan = vm.plan().ok_or_else(|| {
        CliError::Usage(format!(
            "operation {} has no plan in its record: it never started; migrate again",
            vm.metadata.name
        ))
    })?;
    let plan = crate::driver::gather::with_current_destination(&cluster.client, plan).await;
    drive(cluster, plan, vm, options, output).await
}

/// Marks a Failed or Aborted operation Running again, with a fresh
/// budget: attempts count against the backoff limit from the next one.
pub(super) async fn restart_record(
    store: &RecordStore,
    op: &str,
) -> Result<VolumeMigration, CliError> {
    let vm = store
        .update(op, |vm| {
            if !matches!(vm.status.phase, Phase::Failed | Phase::Aborted) {
                return Err(StoreError::Changed(format!(
                    "operation {op} changed meanwhile: it is {} now; run resume again",
                    vm.status.phase.as_str()
                )));
            }
            vm.status.run_again();
            // Network paths that had all been given up are tried afresh.
            if let Some(net) = vm.status.network.as_mut().filter(|n| n.path.is_none()) {
                net.tried.clear();
            }
            Ok(())
        })
        .await
        .map_err(super::declined_as_usage)?;
    Ok(vm)
}

/// Follows another client's driving through the record, and the running
/// attempt's receiver log where it can be read: progress lines start from
/// the newest either holds, and never go back. `None` once that client
/// has gone (its heartbeat stopped, its pod ended): then the caller
/// takes over.
pub(super) async fn observe(
    cluster: &Cluster,
    store: &RecordStore,
    op: &str,
    me: &str,
    output: Output,
) -> Result<Option<i32>, CliError> {
    let mut last: Option<(u32, Progress)> = None;
    loop {
        let vm = store.get(op).await?;
        if vm.status.phase.is_stopped() {
            if vm.status.phase == Phase::Aborted {
                say!("{}", notes::aborted(&vm));
            }
            show::print_one(&vm, output)?;
            return Ok(Some(exit_for(&vm)));
        }
        if incluster::live_holder(&cluster.client, &vm, me)
            .await
            .is_none()
        {
            return Ok(None);
        }
        if let (Some(a), Output::Table) = (vm.running_attempt(), output) {
            let logged = logged_progress(&cluster.client, &vm, a).await;
            let newest = figures::newest(vm.status.progress.as_ref(), logged.as_ref());
            let known = last.as_ref().filter(|(n, _)| *n == a.number);
            if let Some(p) = newest.filter(|p| known.is_none_or(|(_, k)| figures::ahead(p, k))) {
                say!("{}", report::line(a.number, p));
                last = Some((a.number, p.clone()));
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
            () = crate::signals::interrupted() => return Ok(Some(exit::INTERRUPTED)),
        }
    }
}

/// The newest progress in the last lines of `attempt`'s receiver log, if
/// it can be read.
async fn logged_progress(
    client: &Client,
    vm: &VolumeMigration,
    attempt: &Attempt,
) -> Option<Progress> {
    let [(_, receiver), _] = attempt_logs(&Sides::one(client.clone()), vm, attempt, 50).await;
    let digest = LogDigest::from_text(receiver.as_deref()?);
    digest.progress.as_ref().map(progress_of)
}

pub async fn abort(cluster: &Cluster, args: OpArgs, output: Output) -> Result<i32, CliError> {
    let op = &args.operation;
    let record = match set::find(cluster, op).await? {
        set::Found::Set(group) => return set::abort(cluster, *group, output).await,
        set::Found::One(vm) => *vm,
        set::Found::Rehome(r) => return Err(super::rehome::refuse(&r, "abort")),
    };
    set::refuse_member_of_cutover(&record, "abort")?;
    let who = crate::names::who(cluster.user.as_deref());
    let sides = super::clusters::sides(cluster, &record.spec).await?;
    let vm = crate::driver::abort::abort(&sides, &cluster.namespace, op, &who)
        .await
        .map_err(|e| match e {
            DriverError::Refused(m) => CliError::Usage(m),
            e => e.into(),
        })?;
    if vm.rolling_back() {
        // Past PreCopy the app has been touched: abort is a rollback,
        // driven here unless the client that drives the cutover takes it.
        say!("operation {op} has stopped the app: aborting means rolling back");
        return drive_rollback(cluster, op, false, 300, output).await;
    }
    // A driver pod that runs stops by itself, and removes its grants;
    // one that never ran (or gave up) leaves them to be removed here.
    let undriven = incluster::live_holder(&cluster.client, &vm, "")
        .await
        .is_none();
    if undriven {
        incluster::remove(&cluster.client, &vm).await?;
    }
    say!(
        "operation {op} aborted; resume it with: kubectl volmig resume {op} -n {}",
        cluster.namespace
    );
    show::print_one(&vm, output)?;
    Ok(exit::OK)
}

/// Drives a rollback already asked for (or follows the client that
/// drives it) as `resume` does; rolled back is what was asked, so exit 0.
pub async fn drive_rollback(
    cluster: &Cluster,
    op: &str,
    force: bool,
    start_timeout: u64,
    output: Output,
) -> Result<i32, CliError> {
    let args = ResumeArgs {
        operation: op.to_string(),
        detach: false,
        driver_image: String::new(),
        force,
        start_timeout,
        to_node: None,
        to_storage_class: None,
    };
    match resume(cluster, args, output).await? {
        exit::ROLLED_BACK => Ok(exit::OK),
        code => Ok(code),
    }
}

/// `cleanup` of an operation that someone drives is refused, unless
/// `force`d.
pub(super) fn refuse_driven(op: &str, holder: Option<&str>, force: bool) -> Result<(), CliError> {
    match (holder, force) {
        (Some(holder), false) => Err(CliError::Usage(format!(
            "operation {op} is being driven by {holder}; abort it first (kubectl volmig abort {op}), \
             or pass --force"
        ))),
        _ => Ok(()),
    }
}

pub async fn cleanup(cluster: &Cluster, args: CleanupArgs) -> Result<i32, CliError> {
    let store = RecordStore::new(cluster.client.clone(), &cluster.namespace);
    let op = &args.operation;
    match set::find(cluster, op).await? {
        set::Found::Set(group) => return set::cleanup(cluster, *group, args.force).await,
        set::Found::One(vm) => set::refuse_member_of_cutover(&vm, "cleanup")?,
        set::Found::Rehome(r) => return super::rehome::cleanup(cluster, *r, args.force).await,
    }
    let vm = store.get(op).await?;
    let live = incluster::live_holder(&cluster.client, &vm, "").await;
    refuse_driven(op, live.map(|d| d.holder).as_deref(), args.force)?;
    // Between the first stop and the end, the record is the way back.
    let step = vm.status.cutover.as_ref().map(|c| c.step);
    if step.is_some_and(|s| !matches!(s, Step::PreCopy | Step::Committed | Step::RolledBack)) {
        return Err(CliError::Usage(format!(
            "operation {op} is a cutover at {}: its record is the only way back to the old \
             volume; end it first (kubectl volmig commit {op}, or kubectl volmig rollback {op})",
            step.map_or("", Step::as_str)
        )));
    }
    let namespaces = (
        vm.spec.source.namespace.as_str(),
        vm.spec.destination.namespace.as_str(),
    );
    let sides = super::clusters::sides(cluster, &vm.spec).await?;
    let removed = objects::cleanup(&sides, op, namespaces, vm.reads()).await?;
    let abandoned = objects::remove_abandoned(&cluster.client, &vm).await?;
    incluster::remove(&cluster.client, &vm).await?;
    // The source's way to the record goes just before it.
    objects::remove_pointer(&sides, op, &vm.spec.source.namespace).await?;
    store.delete(op).await?;
    // The command's result, on stdout like `kubectl delete`'s.
    super::out(&format!(
        "removed operation {op}: {} pods, {} services, {} secrets{}{} and the record; \
         kept the destination claim {}/{}\n",
        removed.pods,
        removed.services,
        removed.secrets,
        match removed.copies {
            0 => String::new(),
            n => format!(", {n} snapshots and claims of the source"),
        },
        match abandoned.as_slice() {
            [] => String::new(),
            names => format!(", the given-up destination claim(s) {}", names.join(", ")),
        },
        vm.spec.destination.namespace,
        vm.status
            .destination
            .as_ref()
            .map_or(vm.spec.destination.name.as_str(), |d| d.name.as_str())
    ));
    Ok(exit::OK)
}
