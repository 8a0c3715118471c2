//! `kubectl volmig migrate` of several claims (`a b c`, `--workload`, `-l`,
//! `--all`, `--from-storage-class`): select, plan each claim, check the
//! set, create the head and every claim's record, drive the set.

use std::collections::BTreeMap;

use tokio::sync::mpsc::unbounded_channel;

use super::args::{MigrateArgs, Output};
use super::migrate::{busy_destination, check_cutover_flags, quiesce_check, spec_of};
use super::{exit, report, CliError};
use crate::cluster::Cluster;
use crate::driver::gather::{self, select::found};
use crate::driver::group::{release_all, GroupDriver};
use crate::driver::DriverOptions;
use crate::names;
use crate::plan::many::{ClaimPlanned, ManyPlan};
use crate::plan::quiesce::{Quiesce, ScaleTarget};
use crate::plan::select::{self, Found, Selection};
use crate::plan::{self, Refusal};
use crate::record::cutover::Step;
use crate::record::group::{GroupRef, Member, MigrationGroup, Parallelism};
use crate::record::store::{GroupStore, RecordStore};
use crate::record::{configmap, VolumeMigration};
use crate::spec::ClaimRef;

pub async fn run(cluster: &Cluster, args: MigrateArgs, output: Output) -> Result<i32, CliError> {
    let selection = with_hostname(cluster, selection_of(&args)?).await?;
    refuse_single_claim_flags(&args)?;
    let start_timeout = plan::start_timeout(args.start_timeout)?;
    // Values the API server or the mover would reject are refused before
    // the cluster is read (any claim shows them: the flags are shared).
    let probe = spec_of(&args, &ClaimRef::new(&cluster.namespace, "x"), None);
    plan::check_values(&probe)?;
    let scope = match selection.all_namespaces() {
        true => None,
        false => Some(cluster.namespace.as_str()),
    };
    let labels = match &selection {
        Selection::Labels { selector, .. } => Some(selector.as_str()),
        _ => None,
    };
    let seen = found(&cluster.client, scope, labels).await?;
    let chosen = select::select(&selection, &seen).map_err(|e| CliError::Usage(e.to_string()))?;
    let operation = names::generate_group_id(&stem(&selection, &cluster.namespace));
    let mut claims = Vec::new();
    let mut stops: Vec<ScaleTarget> = Vec::new();
    let mut stopped = BTreeMap::new();
    // Each destination namespace's records, read once for every claim.
    let mut records: BTreeMap<String, Vec<VolumeMigration>> = BTreeMap::new();
    for (key, c) in (0u32..).zip(chosen) {
        let spec = spec_of(&args, &c.claim, None);
        let member = names::member_operation(&operation, key);
        let dest_ns = &spec.destination.namespace;
        if !records.contains_key(dest_ns) {
            let listed = RecordStore::new(cluster.client.clone(), dest_ns)
                .list()
                .await?;
            records.insert(dest_ns.clone(), listed);
        }
        let busy = records
            .get(dest_ns)
            .and_then(|r| busy_destination(&spec, r));
        let outcome = match busy {
            Some(busy) => Err(Refusal::DestinationBusy(busy)),
            None => {
                let inputs = gather::inputs(&cluster.client, &spec).await?;
                plan::plan(&spec, &member, &inputs).and_then(|p| {
                    if spec.cutover.is_none() {
                        return Ok(p);
                    }
                    let q = cutover_check(&spec, &seen)?;
                    stopped.insert(key, q.targets.clone());
                    stops.extend(q.targets);
                    Ok(p)
                })
            }
        };
        claims.push(ClaimPlanned {
            key,
            source: c.claim,
            why: c.why,
            outcome,
        });
    }
    let mut many = ManyPlan::new(&operation, selection, claims);
    many.refuse_partial_statefulsets(&seen, &stopped);
    stops.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    stops.dedup_by(|a, b| a.kind == b.kind && a.name == b.name);
    many.stops = stops
        .iter()
        .map(|t| {
            format!(
                "{:?} {} ({} -> 0 -> {})",
                t.kind, t.name, t.replicas, t.replicas
            )
        })
        .collect();
    let parallelism = Parallelism {
        claims: args.parallel,
        per_node: args.per_node,
    };
    let home = args
        .to_namespace
        .clone()
        .unwrap_or_else(|| cluster.namespace.clone());
    let group = group_of(&many, &home, parallelism);
    let members = member_records(&many, &group);
    if args.dry_run {
        super::set::print_dry_run_set(&many, &group, &members, output)?;
        many.verdict(args.skip_refused)?;
        return Ok(exit::OK);
    }
    if output == Output::Table {
        super::err(&many.text(parallelism.claims, parallelism.per_node));
    }
    many.verdict(args.skip_refused)?;
    let group = GroupStore::new(cluster.client.clone(), &home)
        .create(&group)
        .await?;
    for vm in &members {
        RecordStore::new(cluster.client.clone(), &vm.metadata.namespace)
            .create(vm)
            .await?;
    }
    let options = DriverOptions {
        start_timeout,
        holder: names::holder(),
    };
    drive(cluster, group, options, output).await
}

/// Runs the set's driver with progress shown as `output` allows, until
/// every claim has ended, or Ctrl-C (which leaves the claims copying).
pub async fn drive(
    cluster: &Cluster,
    group: MigrationGroup,
    options: DriverOptions,
    output: Output,
) -> Result<i32, CliError> {
    let (tx, rx) = unbounded_channel();
    let mode = report::Mode::choose(output != Output::Table);
    let reporter = tokio::spawn(report::show_set(mode, rx));
    let holder = options.holder.clone();
    let run = GroupDriver::new(cluster.client.clone(), group.clone(), options, tx).run();
    let result = tokio::select! {
        r = run => Some(r),
        () = crate::signals::interrupted() => None,
    };
    let _ = reporter.await;
    match result {
        None => {
            release_all(&cluster.client, &group, &holder).await;
            say!(
                "interrupted: the claims copying go on without a driver; pick the set up with: \
                 kubectl volmig resume {} -n {}",
                group.metadata.name,
                group.metadata.namespace
            );
            app_down(cluster, &group).await;
            Ok(exit::INTERRUPTED)
        }
        Some(Err(e)) => {
            release_all(&cluster.client, &group, &holder).await;
            app_down(cluster, &group).await;
            Err(e.into())
        }
        Some(Ok(view)) => {
            super::set::print_set(&view, output)?;
            Ok(super::exit_for_phase(view.phase()))
        }
    }
}

/// Says so when a stopped driver left a set's app down (a cutover between
/// its stop and its start again).
async fn app_down(cluster: &Cluster, group: &MigrationGroup) {
    let Ok(view) = crate::record::store::group_view(&cluster.client, group.clone()).await else {
        return;
    };
    let step = view.members.iter().flatten().find_map(|vm| {
        let step = vm.status.cutover.as_ref()?.step;
        let down = matches!(
            step,
            Step::Quiesce | Step::FinalSync | Step::Swap | Step::Restore | Step::RollingBack
        );
        down.then_some(step)
    });
    if let Some(step) = step {
        let (op, ns) = (&group.metadata.name, &group.metadata.namespace);
        say!("{}", super::notes::cutover_interrupted(op, ns, step));
    }
}

/// The selection the flags ask for (clap has made sure there is one).
fn selection_of(args: &MigrateArgs) -> Result<Selection, CliError> {
    let args = &args.claims;
    let all_namespaces = args.all_namespaces;
    let selection = if let Some(w) = &args.workload {
        let (kind, name) = select::parse_workload(w).map_err(|e| CliError::Usage(e.to_string()))?;
        Selection::Workload { kind, name }
    } else if let Some(selector) = &args.selector {
        Selection::Labels {
            selector: selector.clone(),
            all_namespaces,
        }
    } else if args.all {
        Selection::All
    } else if let Some(class) = &args.from_storage_class {
        Selection::StorageClass {
            class: class.clone(),
            all_namespaces,
        }
    } else if let Some(node) = &args.from_node {
        // The hostname is read from the node ([`with_hostname`]).
        Selection::Node {
            node: node.clone(),
            hostname: String::new(),
        }
    } else {
        Selection::Claims {
            names: args.source.clone(),
        }
    };
    let spans = matches!(
        selection,
        Selection::Labels { .. } | Selection::StorageClass { .. }
    );
    if all_namespaces && !spans {
        return Err(CliError::Usage(
            "-A/--all-namespaces goes with -l or --from-storage-class".into(),
        ));
    }
    Ok(selection)
}

/// A node selection with the node's `kubernetes.io/hostname` label (what
/// a node-local volume's affinity names), read from the node, which must
/// exist.
async fn with_hostname(cluster: &Cluster, selection: Selection) -> Result<Selection, CliError> {
    let Selection::Node { node, .. } = selection else {
        return Ok(selection);
    };
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(cluster.client.clone());
    let found = nodes
        .get_opt(&node)
        .await
        .map_err(|e| crate::driver::DriverError::kube(format!("get node {node}"), e))?
        .ok_or_else(|| {
            CliError::Usage(format!(
                "node {node:?} not found: `kubectl get nodes` lists them"
            ))
        })?;
    let labels = found.metadata.labels.unwrap_or_default();
    let hostname = labels
        .get(crate::plan::placement::HOSTNAME_LABEL)
        .cloned()
        .unwrap_or_else(|| node.clone());
    Ok(Selection::Node { node, hostname })
}

/// Flags that name one destination, or that this version does for one
/// claim only.
fn refuse_single_claim_flags(args: &MigrateArgs) -> Result<(), CliError> {
    let one_claim = [
        ("--to", args.to.is_some()),
        ("--to-size", args.to_size.is_some()),
        ("--detach", args.detach),
    ];
    match one_claim.iter().find(|(_, set)| *set) {
        Some((flag, _)) => Err(CliError::Usage(format!(
            "{flag} takes one claim: run one migrate per claim, or leave {flag} out \
             (destinations are <claim>-migrated, or the claim's name with --to-namespace)"
        ))),
        None => Ok(()),
    }
}

/// A claim's cutover checks, as for one claim: in its own namespace, its
/// consumers stoppable, its StatefulSet's template there for
/// `--update-owner`; on the workloads the selection read already.
fn cutover_check(spec: &crate::spec::MigrationSpec, seen: &[Found]) -> Result<Quiesce, Refusal> {
    check_cutover_flags(spec, None)?;
    let ns = &spec.source.namespace;
    let workloads = seen
        .iter()
        .find(|f| &f.namespace == ns)
        .map(|f| &f.workloads);
    quiesce_check(spec, workloads.unwrap_or(&Default::default()))
}

/// What the set's operation id is named after.
fn stem(selection: &Selection, namespace: &str) -> String {
    match selection {
        Selection::Claims { names } => names.first().cloned().unwrap_or_default(),
        Selection::Workload { name, .. } => name.clone(),
        Selection::Labels { .. } => "selected".to_string(),
        Selection::All => namespace.to_string(),
        Selection::StorageClass { class, .. } => class.clone(),
        Selection::Node { node, .. } => node.clone(),
    }
}

/// The head of the set: its accepted claims, with the keys they were
/// planned under.
pub fn group_of(many: &ManyPlan, home: &str, parallelism: Parallelism) -> MigrationGroup {
    let claims = many
        .accepted()
        .map(|(c, p)| Member {
            key: c.key,
            operation: p.operation.clone(),
            source: p.spec.source.clone(),
            destination: ClaimRef::new(&p.destination.namespace, &p.destination.name),
        })
        .collect();
    MigrationGroup::new(
        &many.operation,
        home,
        many.selection.clone(),
        claims,
        parallelism,
    )
}

/// Each accepted claim's record, labelled with the head.
pub fn member_records(
    many: &ManyPlan,
    group: &MigrationGroup,
) -> Vec<crate::record::VolumeMigration> {
    many.accepted()
        .map(|(c, p)| {
            let mut vm = configmap::new_record(p);
            vm.metadata.group = Some(GroupRef {
                name: group.metadata.name.clone(),
                namespace: group.metadata.namespace.clone(),
                key: c.key,
            });
            vm
        })
        .collect()
}
