//! Commands on a set of claims (`status`, `resume`, `abort`, `cleanup`
//! of an operation made by `migrate a b`, `--workload`, ...): each acts on
//! the whole set, claim by claim through each claim's own record.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{json, Value};

use super::args::Output;
use super::{exit, CliError};
use crate::cluster::{Cluster, Sides};
use crate::driver::cutover::machine;
use crate::driver::cutover::request::{request_rollback, RollbackFlags};
use crate::driver::{objects, DriverError, DriverOptions};
use crate::plan::many::ManyPlan;
use crate::plan::Method;
use crate::record::cutover::{Step, COMMIT};
use crate::record::group::{GroupView, MigrationGroup};
use crate::record::print::group::{describe_set, set_object};
use crate::record::store::{get_any, group_view, GroupStore, RecordStore, StoreError};
use crate::record::{configmap, Phase, VolumeMigration};

pub use crate::record::store::AnyRecord as Found;

/// Operation `op` in -n's namespace: one claim's record, or a set's head.
pub async fn find(cluster: &Cluster, op: &str) -> Result<Found, CliError> {
    Ok(get_any(&cluster.client, &cluster.namespace, op).await?)
}

/// A claim of a set's cutover moves with its set: `command` on it alone is
/// refused, naming the set.
pub fn refuse_member_of_cutover(vm: &VolumeMigration, command: &str) -> Result<(), CliError> {
    match (&vm.metadata.group, &vm.status.cutover) {
        (Some(g), Some(_)) => Err(CliError::Usage(format!(
            "operation {} is claim {} of the cutover {}, which moves as one: \
             kubectl volmig {command} {} -n {}",
            vm.metadata.name, vm.spec.source, g.name, g.name, g.namespace
        ))),
        _ => Ok(()),
    }
}

/// Prints a set as `-o` says (`table`: the detailed view).
pub fn print_set(view: &GroupView, output: Output) -> Result<(), CliError> {
    let text = match output {
        Output::Table => describe_set(view, Timestamp::now()),
        Output::Json => json_text(&set_object(view))?,
        Output::Yaml => yaml_text(&set_object(view))?,
    };
    super::out(&text);
    Ok(())
}

pub(super) fn json_text(v: &Value) -> Result<String, CliError> {
    serde_json::to_string_pretty(v)
        .map(|t| t + "\n")
        .map_err(|e| CliError::Print(e.to_string()))
}

pub(super) fn yaml_text(v: &Value) -> Result<String, CliError> {
    serde_saphyr::to_string(v).map_err(|e| CliError::Print(e.to_string()))
}

/// `migrate ... --dry-run` of a set: the plan, and the head and claims'
/// records it would create (each claim's pods as its own dry run shows);
/// with `-o json|yaml`, one `VolumeMigrationPlan` whose `objects` list them.
pub fn print_dry_run_set(
    many: &ManyPlan,
    group: &MigrationGroup,
    members: &[VolumeMigration],
    output: Output,
) -> Result<(), CliError> {
    let print_err = |e: &dyn std::fmt::Display| CliError::Print(e.to_string());
    let mut items = Vec::new();
    let mut head = serde_json::to_value(
        crate::record::group::to_config_map(group).map_err(|e| print_err(&e))?,
    )
    .map_err(|e| print_err(&e))?;
    head["apiVersion"] = json!("v1");
    head["kind"] = json!("ConfigMap");
    items.push(head);
    for (vm, (_, plan)) in members.iter().zip(many.accepted()) {
        let mut record =
            serde_json::to_value(configmap::to_config_map(vm).map_err(|e| print_err(&e))?)
                .map_err(|e| print_err(&e))?;
        record["apiVersion"] = json!("v1");
        record["kind"] = json!("ConfigMap");
        items.push(record);
        let objects = crate::resources::dry_run_objects(plan, "<receiver Service IP>:7000")
            .map_err(|e| print_err(&e))?;
        items.extend(objects);
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}});
    let p = group.spec.parallelism;
    let namespace = &group.metadata.namespace;
    match output {
        Output::Json => {
            let plan = many.to_object(namespace, p.claims, p.per_node, list);
            super::out(&json_text(&plan)?);
        }
        Output::Yaml => {
            let plan = many.to_object(namespace, p.claims, p.per_node, list);
            super::out(&yaml_text(&plan)?);
        }
        Output::Table => {
            super::out(&many.text(p.claims, p.per_node));
            super::out("would create (nothing was created; -o yaml shows the objects):\n");
            for item in &items {
                super::out(&format!("  {}\n", super::migrate::describe_object(item)));
            }
        }
    }
    Ok(())
}

/// `resume` of a set: every claim that did not succeed runs again (a
/// Failed or Aborted one with a fresh budget); the others stay done.
pub async fn resume(
    cluster: &Cluster,
    group: MigrationGroup,
    force: bool,
    start_timeout: Duration,
    output: Output,
) -> Result<i32, CliError> {
    let op = group.metadata.name.clone();
    let me = crate::names::holder();
    let driven = group
        .status
        .driver
        .as_ref()
        .filter(|d| d.holder != me && d.is_alive(Timestamp::now()));
    if let (Some(d), false) = (driven, force) {
        return Err(CliError::Usage(format!(
            "operation {op} is driven by {}; watch it with kubectl volmig status {op}, \
             or take it over with --force",
            d.holder
        )));
    }
    let view = group_view(&cluster.client, group).await?;
    // A claim someone drives alone (resume of that claim) is theirs too.
    let now = Timestamp::now();
    let alone = view.members.iter().flatten().find_map(|vm| {
        let d = vm.status.driver.as_ref()?;
        (d.holder != me && d.is_alive(now)).then(|| (vm.metadata.name.clone(), d.holder.clone()))
    });
    if let (Some((claim, holder)), false) = (alone, force) {
        return Err(CliError::Usage(format!(
            "claim {claim} of operation {op} is driven by {holder}; let it finish, or take the \
             set over with --force"
        )));
    }
    if view.phase() == Phase::Succeeded {
        say!("operation {op}: every claim has succeeded already");
        print_set(&view, output)?;
        return Ok(exit::OK);
    }
    if view.phase() == Phase::RolledBack {
        say!("operation {op} was rolled back; the app runs on its old volumes");
        print_set(&view, output)?;
        return Ok(exit::OK);
    }
    for (m, vm) in view.group.spec.claims.iter().zip(&view.members) {
        let Some(vm) = vm else { continue };
        if matches!(vm.status.phase, Phase::Failed | Phase::Aborted) {
            let store = RecordStore::new(cluster.client.clone(), m.namespace());
            super::control::restart_record(&store, &m.operation).await?;
        }
    }
    let store = GroupStore::new(cluster.client.clone(), &view.group.metadata.namespace);
    let group = store
        .update(&op, |g| {
            g.status.phase = Phase::Running;
            g.status.message = None;
            g.status.aborted_by = None;
            g.status.completion_time = None;
            Ok(())
        })
        .await?;
    if output == Output::Table {
        say!(
            "resuming operation {op}: {} claims ({})",
            group.spec.claims.len(),
            view.phases_text()
        );
    }
    let options = DriverOptions {
        start_timeout,
        holder: me,
    };
    super::many::drive(cluster, group, options, output).await
}

/// `rollback` of a set: every claim's rollback recorded (those with
/// nothing to undo are passed over), then the set driven back as one.
pub async fn rollback(
    cluster: &Cluster,
    group: MigrationGroup,
    flags: RollbackFlags,
    force: bool,
    start_timeout: Duration,
    output: Output,
) -> Result<i32, CliError> {
    let who = crate::names::who(cluster.user.as_deref());
    let op = group.metadata.name.clone();
    // All or nothing: a set part of which is committed cannot go back.
    let view = group_view(&cluster.client, group).await?;
    let committed = view.members.iter().flatten().find(|vm| {
        let c = vm.status.cutover.as_ref();
        c.is_some_and(|c| {
            c.step == Step::Committed || c.claims.iter().any(|k| k.swap.as_deref() == Some(COMMIT))
        })
    });
    if let Some(vm) = committed {
        return Err(CliError::Usage(format!(
            "operation {op}: claim {} is committed (its old volume is gone), so the set cannot \
             go back; finish with kubectl volmig commit {op}",
            vm.spec.source
        )));
    }
    let group = view.group;
    let mut asked = 0;
    for m in &group.spec.claims {
        let asking = request_rollback(&cluster.client, m.namespace(), &m.operation, &who, flags);
        match asking.await {
            Ok(_) => asked += 1,
            Err(DriverError::Refused(why)) => say!("{}: {why}", m.source),
            Err(e) => return Err(e.into()),
        }
    }
    if asked == 0 {
        return Err(CliError::Usage(format!(
            "operation {}: none of its claims can be rolled back",
            group.metadata.name
        )));
    }
    say!(
        "rolling operation {op} back: {asked} of {} claims",
        group.spec.claims.len()
    );
    // A client that drives the set takes the rollback up (it restarts the
    // claims that had ended).
    let driven = group
        .status
        .driver
        .as_ref()
        .filter(|d| d.holder != crate::names::holder() && d.is_alive(Timestamp::now()));
    if let (Some(d), false) = (driven, force) {
        say!(
            "operation {op} is driven by {}, which rolls it back; watch it with kubectl volmig status {op}",
            d.holder
        );
        return Ok(exit::OK);
    }
    match resume(cluster, group, force, start_timeout, output).await? {
        exit::ROLLED_BACK => Ok(exit::OK),
        code => Ok(code),
    }
}

/// `commit` of a set: once every claim awaits it, each claim's old volume
/// is deleted.
pub async fn commit(
    cluster: &Cluster,
    group: MigrationGroup,
    output: Output,
) -> Result<i32, CliError> {
    let op = group.metadata.name.clone();
    let view = group_view(&cluster.client, group).await?;
    let step = |vm: &VolumeMigration| vm.status.cutover.as_ref().map(|c| c.step);
    let waiting: Vec<&VolumeMigration> = view.members.iter().flatten().collect();
    if let Some(vm) = waiting
        .iter()
        .find(|vm| !matches!(step(vm), Some(Step::AwaitingCommit | Step::Committed)))
    {
        return Err(CliError::Usage(format!(
            "operation {op}: claim {} is at {}; only a set whose every claim awaits commit can be committed",
            vm.spec.source,
            step(vm).map_or("a copy", Step::as_str)
        )));
    }
    for vm in waiting
        .into_iter()
        .filter(|vm| step(vm) == Some(Step::AwaitingCommit))
    {
        super::cutover::commit_one(cluster, vm.clone()).await?;
    }
    let view = group_view(&cluster.client, view.group).await?;
    say!("operation {op}: committed; every old volume is deleted");
    print_set(&view, output)?;
    Ok(exit::OK)
}

/// `abort` of a set: the head says Aborted (nothing new starts), then
/// every claim that runs is aborted as one claim would be; once a cutover
/// has stopped the app, the whole set rolls back instead.
pub async fn abort(
    cluster: &Cluster,
    group: MigrationGroup,
    output: Output,
) -> Result<i32, CliError> {
    let op = group.metadata.name.clone();
    let view = group_view(&cluster.client, group).await?;
    let touched = view.members.iter().flatten().any(|vm| {
        let c = vm.status.cutover.as_ref();
        c.is_some_and(|c| machine::abort_means_rollback(c) && c.step != Step::RolledBack)
    });
    if touched {
        // Once the app has been stopped, half a set is no state to leave
        // it in: abort means rolling the whole set back.
        say!("operation {op} has stopped the app: aborting means rolling the set back");
        let timeout = Duration::from_secs(300);
        return rollback(
            cluster,
            view.group,
            RollbackFlags::default(),
            false,
            timeout,
            output,
        )
        .await;
    }
    let group = view.group;
    let who = crate::names::who(cluster.user.as_deref());
    let store = GroupStore::new(cluster.client.clone(), &group.metadata.namespace);
    store
        .update(&op, |g| {
            if g.status.phase.is_final() {
                return Err(StoreError::Changed(format!(
                    "operation {op} has ended ({}): nothing to abort",
                    g.status.phase.as_str()
                )));
            }
            g.status.phase = Phase::Aborted;
            g.status.aborted_by = Some(who.clone());
            Ok(())
        })
        .await
        .map_err(super::declined_as_usage)?;
    for m in &group.spec.claims {
        match crate::driver::abort::abort(
            &Sides::one(cluster.client.clone()),
            m.namespace(),
            &m.operation,
            &who,
        )
        .await
        {
            Ok(_) | Err(DriverError::Refused(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let view = group_view(&cluster.client, group).await?;
    say!(
        "operation {op} aborted; resume it with: kubectl volmig resume {op} -n {}",
        view.group.metadata.namespace
    );
    print_set(&view, output)?;
    Ok(exit::OK)
}

/// `cleanup` of a set: every claim's pods, Service, Secrets and record,
/// then the head; the destination claims stay.
pub async fn cleanup(
    cluster: &Cluster,
    group: MigrationGroup,
    force: bool,
) -> Result<i32, CliError> {
    let op = group.metadata.name.clone();
    let live = group
        .status
        .driver
        .as_ref()
        .filter(|d| d.is_alive(Timestamp::now()));
    super::control::refuse_driven(&op, live.map(|d| d.holder.as_str()), force)?;
    // Between the first stop and the end of a cutover, each claim's record
    // is the way back to its old volume.
    let view = group_view(&cluster.client, group).await?;
    let midway = view.members.iter().flatten().find_map(|vm| {
        let step = vm.status.cutover.as_ref()?.step;
        let ended = matches!(step, Step::PreCopy | Step::Committed | Step::RolledBack);
        (!ended).then_some((vm.spec.source.clone(), step))
    });
    if let Some((claim, step)) = midway {
        return Err(CliError::Usage(format!(
            "operation {op} is a cutover with claim {claim} at {}: its record is the only way \
             back to the old volume; end it first (kubectl volmig resume {op}, or kubectl volmig \
             rollback {op})",
            step.as_str()
        )));
    }
    let group = view.group;
    let mut pods = 0;
    for (m, record) in group.spec.claims.iter().zip(&view.members) {
        let namespaces = (m.source.namespace.as_str(), m.namespace());
        // A record gone by hand says nothing of copies: none are looked for.
        let reads = record.as_ref().map_or(Method::Direct, |vm| vm.reads());
        let sides = Sides::one(cluster.client.clone());
        let removed = objects::cleanup(&sides, &m.operation, namespaces, reads).await?;
        pods += removed.pods;
        let store = RecordStore::new(cluster.client.clone(), m.namespace());
        match store.delete(&m.operation).await {
            Ok(()) | Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    GroupStore::new(cluster.client.clone(), &group.metadata.namespace)
        .delete(&op)
        .await?;
    super::out(&format!(
        "removed operation {op}: {} claims' records, {pods} pods and the set's record; \
         kept the destination claims\n",
        group.spec.claims.len()
    ));
    Ok(exit::OK)
}

/// Every set in -n's namespace (or all), each with its claims' records.
pub async fn list_sets(
    cluster: &Cluster,
    all_namespaces: bool,
) -> Result<Vec<GroupView>, CliError> {
    let client = cluster.client.clone();
    let heads = match all_namespaces {
        true => GroupStore::list_all(client.clone()).await?,
        false => {
            GroupStore::new(client.clone(), &cluster.namespace)
                .list()
                .await?
        }
    };
    let mut views = Vec::new();
    for g in heads {
        views.push(group_view(&client, g).await?);
    }
    Ok(views)
}
