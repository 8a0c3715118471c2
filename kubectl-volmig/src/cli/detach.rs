//! `--detach`: handing an operation to the in-cluster driver, and `drive`,
//! what that driver's pod runs.

use std::time::Duration;

use super::args::{DriveArgs, Output};
use super::{exit, show, CliError};
use crate::cluster::Cluster;
use crate::driver::incluster::{self, Start};
use crate::driver::DriverOptions;
use crate::plan::Refusal;
use crate::record::store::RecordStore;
use crate::record::VolumeMigration;
use crate::resources::access::Need;

/// Refuses `--detach` before anything is created when the user may not
/// start the driver, naming each permission the API server denied.
pub async fn preflight(cluster: &Cluster, vm: &VolumeMigration) -> Result<(), CliError> {
    let namespaces = incluster::namespaces(vm);
    let denied = incluster::preflight(
        &cluster.client,
        &vm.metadata.name,
        &vm.metadata.namespace,
        &namespaces,
        vm.reads().reads_copy(),
    )
    .await?;
    if denied.is_empty() {
        return Ok(());
    }
    Err(Refusal::DetachForbidden {
        user: cluster
            .user
            .as_deref()
            .map_or("you".to_string(), |u| format!("user {u:?}")),
        lacks_grants: denied.iter().any(|c| c.need == Need::Grant),
        missing: denied.iter().map(ToString::to_string).collect(),
    }
    .into())
}

/// Hands `vm` to a driver in the cluster (recorded first, so that who
/// ends or cleans up the operation removes it), and waits until one of
/// its pods holds the operation.
pub async fn start(
    cluster: &Cluster,
    vm: VolumeMigration,
    image: &str,
    start_timeout: Duration,
    output: Output,
) -> Result<i32, CliError> {
    let op = vm.metadata.name.clone();
    let ns = vm.metadata.namespace.clone();
    let store = RecordStore::new(cluster.client.clone(), &ns);
    let who = crate::names::who(cluster.user.as_deref());
    let ic = incluster::in_cluster(&vm, image, &who);
    let vm = store
        .update(&op, |vm| {
            vm.status.in_cluster = Some(ic.clone());
            Ok(())
        })
        .await?;
    if let Err(e) = incluster::start(&cluster.client, &vm, &ic, start_timeout).await {
        say!(
            "the driver could not be started in the cluster; nothing drives operation {op}.\n\
             Drive it from here: kubectl volmig resume {op} -n {ns}\n\
             Or remove it: kubectl volmig cleanup {op} -n {ns}"
        );
        return Err(e.into());
    }
    match incluster::await_start(&cluster.client, &store, &op, start_timeout).await? {
        Start::Driving(pod) => {
            say!(
                "detached: pod {pod} (Job {job}) drives operation {op} in the cluster; this \
                 client may go.\n\
                 Watch it:   kubectl volmig status {op} -n {ns}   (or monitor)\n\
                 Its log:    kubectl volmig logs {op} -n {ns} --driver",
                job = ic.job
            );
            show::print_one(&store.get(&op).await?, output)?;
            Ok(exit::OK)
        }
        Start::Following { pod, holder } => {
            say!(
                "detached: pod {pod} (Job {job}) follows {holder}, which drives operation {op}, \
                 and takes over when it stops; this client may go.\n\
                 Its log:    kubectl volmig logs {op} -n {ns} --driver",
                job = ic.job
            );
            show::print_one(&store.get(&op).await?, output)?;
            Ok(exit::OK)
        }
        Start::Ended(_) => {
            let vm = store.get(&op).await?;
            show::print_one(&vm, output)?;
            Ok(super::exit_for(&vm))
        }
        Start::Stuck(why) => {
            say!(
                "the driver of operation {op} does not run: {why}.\n\
                 Its Job {job} keeps trying. To drive it from here instead (a driver pod \
                 that starts later follows this client):\n  kubectl volmig resume {op} -n {ns}",
                job = ic.job
            );
            Ok(exit::ERROR)
        }
    }
}

/// `kubectl-volmig drive OP`, as the driver Job's pod runs it: follows a
/// live driver until it goes, then takes the operation over; once the
/// operation has ended (however it ended), removes its own grants and
/// exits 0, so the Job completes instead of running it again. Any other
/// exit (an error, SIGTERM) makes the Job start a pod that goes on.
pub async fn drive(cluster: &Cluster, args: DriveArgs) -> Result<i32, CliError> {
    let start_timeout = crate::plan::start_timeout(args.start_timeout)?;
    let op = args.operation;
    let store = RecordStore::new(cluster.client.clone(), &cluster.namespace);
    let me = crate::names::holder();
    let vm = loop {
        let vm = store.get(&op).await?;
        if vm.status.phase.is_stopped() {
            break vm;
        }
        if let Some(lease) = incluster::live_holder(&cluster.client, &vm, &me).await {
            say!("operation {op} is driven by {}; following it", lease.holder);
            match super::control::observe(cluster, &store, &op, &me, Output::Table).await? {
                Some(exit::INTERRUPTED) => return Ok(exit::INTERRUPTED),
                _ => continue,
            }
        }
        let options = DriverOptions {
            start_timeout,
            holder: me.clone(),
        };
        let code = super::control::take_up(cluster, vm, options, Output::Table).await?;
        let vm = store.get(&op).await?;
        if !vm.status.phase.is_stopped() {
            return Ok(match code {
                exit::OK => exit::ERROR,
                code => code,
            });
        }
        break vm;
    };
    say!(
        "operation {op} is {}; the driver is done",
        vm.status.phase.as_str()
    );
    remove_own_grants(cluster, &vm).await;
    Ok(exit::OK)
}

/// The driver pod's last act; whatever it cannot remove (someone took
/// its grants already) is not its failure.
async fn remove_own_grants(cluster: &Cluster, vm: &VolumeMigration) {
    let Some(ic) = &vm.status.in_cluster else {
        return;
    };
    if let Err(e) = incluster::remove_grants(&cluster.client, &vm.metadata.name, ic).await {
        tracing::warn!("cannot remove the driver's grants: {e}");
    }
}

/// What a client that ends an operation once driven in the cluster
/// removes: the Job and its grants. (A driver pod removes only its grants,
/// at the end of [`drive`]: it may not delete its Job, which ends with it.)
pub async fn ended_here(cluster: &Cluster, vm: &VolumeMigration) {
    let me = crate::names::holder();
    if vm.status.in_cluster.is_none()
        || !vm.status.phase.is_stopped()
        || crate::names::holder_pod(&me).is_some()
    {
        return;
    }
    if let Err(e) = incluster::remove(&cluster.client, vm).await {
        say!(
            "cannot remove the in-cluster driver of {} ({e}); kubectl volmig cleanup {} removes it",
            vm.metadata.name,
            vm.metadata.name
        );
    }
}
