//! `kubectl volmig migrate`: plan, then drive the operation.

use serde_json::{json, Value};

use super::args::{MigrateArgs, Output};
use super::{exit, CliError};
use crate::cluster::{Cluster, Sides};
use crate::driver::cutover::{owner, workload};
use crate::driver::gather;
use crate::driver::DriverOptions;
use crate::names;
use crate::plan::quiesce::{self, Quiesce, ScalableKind, Workloads};
use crate::plan::Refusal;
use crate::plan::{self, ClaimAction, Inputs, MoverSecurity, NodePlacement, Plan};
use crate::record::{configmap, store::RecordStore, VolumeMigration};
use crate::resources;
use crate::spec::{
    self, ClaimRef, CutoverSpec, DestinationSpec, MigrationSpec, MoverOptions, RetryPolicy,
    TransferOptions,
};

pub async fn run(cluster: &Cluster, args: MigrateArgs, output: Output) -> Result<i32, CliError> {
    if let Some(flag) = args.cutover_flags_without_cutover() {
        return Err(CliError::Usage(format!("{flag} goes with --cutover")));
    }
    let one = match args.claims.source.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    };
    let Some(source) = one else {
        if args.to_context.is_some() {
            return Err(CliError::Usage(
                "--to-context takes one claim in this version: migrate each claim on its own"
                    .into(),
            ));
        }
        return super::many::run(cluster, args, output).await;
    };
    let mut spec = spec_of(
        &args,
        &ClaimRef::new(&cluster.namespace, &source),
        args.to.as_deref(),
    );
    // Values the API server or the mover would reject are refused before
    // the cluster is read, and so before anything is created.
    plan::check_values(&spec)?;
    let start_timeout = plan::start_timeout(args.start_timeout)?;
    let operation = names::generate_operation_id(&spec.source.name);
    check_cutover_flags(&spec, args.to_context.as_deref())?;
    if args.detach && args.to_context.is_some() {
        return Err(super::clusters::no_detach());
    }
    // Into another cluster: the record and the destination live there.
    let there = super::clusters::destination(cluster, &args, &spec.destination.namespace).await?;
    let sides = match &there {
        Some(there) => {
            spec.clusters = Some(super::clusters::clusters(cluster, there, &args)?);
            Sides::two(cluster.client.clone(), there.client.clone())
        }
        None => Sides::one(cluster.client.clone()),
    };
    let home = there.as_ref().unwrap_or(cluster);
    let inputs = gather::inputs_on(&sides, &spec).await?;
    refuse_busy_destination(home, &spec).await?;
    let plan = plan::plan(&spec, &operation, &inputs)?;
    let baseline = plan.security.profile == plan::security::Profile::Baseline;
    if args.detach && baseline && inputs.openshift.is_some() {
        return Err(Refusal::DetachedBaselineOnOpenShift.into());
    }
    let quiesce = match &spec.cutover {
        Some(_) => Some(quiesce_plan(cluster, &spec, &inputs).await?),
        None => None,
    };
    if args.dry_run {
        let detach = args
            .detach
            .then_some((args.driver_image.as_str(), start_timeout));
        print_dry_run(&plan, quiesce.as_ref(), detach, output)?;
        return Ok(exit::OK);
    }
    if output == Output::Table {
        super::err(&plan_text(&plan, quiesce.as_ref()));
    }
    let new = configmap::new_record(&plan);
    if args.detach {
        super::detach::preflight(cluster, &new).await?;
    }
    let store = RecordStore::new(home.client.clone(), &plan.destination.namespace);
    let record = store.create(&new).await?;
    if args.detach {
        return super::detach::start(cluster, record, &args.driver_image, start_timeout, output)
            .await;
    }
    let options = DriverOptions {
        start_timeout,
        holder: crate::names::holder(),
    };
    super::control::drive(home, plan, record, options, output).await
}

/// A cutover stays in the claim's namespace, and its cluster.
pub(super) fn check_cutover_flags(
    spec: &MigrationSpec,
    to_context: Option<&str>,
) -> Result<(), Refusal> {
    if spec.cutover.is_none() {
        return Ok(());
    }
    if let Some(context) = to_context {
        return Err(Refusal::CutoverAcrossClusters {
            context: context.to_string(),
        });
    }
    if spec.destination.namespace != spec.source.namespace {
        return Err(Refusal::CutoverAcrossNamespaces {
            namespace: spec.source.namespace.clone(),
            to: spec.destination.namespace.clone(),
        });
    }
    Ok(())
}

/// Who must stop for the cutover and how, or every consumer that scaling
/// cannot stop (refused before anything is created).
async fn quiesce_plan(
    cluster: &Cluster,
    spec: &MigrationSpec,
    inputs: &Inputs,
) -> Result<Quiesce, CliError> {
    // The source namespace's pods are read already, for the plan.
    let ns = &spec.source.namespace;
    let workloads = workload::gather_with(&cluster.client, ns, inputs.pods.clone()).await?;
    Ok(quiesce_check(spec, &workloads)?)
}

/// [`quiesce_plan`] on the source namespace's `workloads` as read.
pub(super) fn quiesce_check(
    spec: &MigrationSpec,
    workloads: &Workloads,
) -> Result<Quiesce, Refusal> {
    let claim = &spec.source;
    let plan =
        quiesce::plan(&claim.name, workloads).map_err(|unstoppable| Refusal::Unquiescable {
            namespace: claim.namespace.clone(),
            claim: claim.name.clone(),
            consumers: unstoppable.iter().map(|u| u.to_string()).collect(),
        })?;
    let update_owner = spec.cutover.as_ref().is_some_and(|c| c.update_owner);
    let made_by_template =
        owner::template_owner(&claim.name, &plan.targets, &workloads.stateful_sets).is_some();
    if update_owner && !made_by_template {
        return Err(Refusal::NoOwnerTemplate {
            namespace: claim.namespace.clone(),
            claim: claim.name.clone(),
        });
    }
    Ok(plan)
}

/// Refuses a destination another operation has not finished with: two
/// receivers would write one tree, each discarding the other's checkpoint.
async fn refuse_busy_destination(cluster: &Cluster, spec: &MigrationSpec) -> Result<(), CliError> {
    let records = RecordStore::new(cluster.client.clone(), &spec.destination.namespace)
        .list()
        .await?;
    match busy_destination(spec, &records) {
        Some(busy) => Err(CliError::Usage(busy)),
        None => Ok(()),
    }
}

/// Why `spec`'s destination is busy, if one of `records` (its namespace's)
/// has not finished copying into it.
pub(super) fn busy_destination(
    spec: &MigrationSpec,
    records: &[VolumeMigration],
) -> Option<String> {
    let dest = &spec.destination;
    let busy = records.iter().find(|r| {
        r.spec.destination.namespace == dest.namespace
            && r.spec.destination.name == dest.name
            && !r.status.phase.is_final()
    })?;
    Some(format!(
        "operation {op} ({phase}) copies into {ns}/{name} already: resume it \
         (kubectl volmig resume {op} -n {ns}), or remove it first \
         (kubectl volmig abort {op} -n {ns}; kubectl volmig cleanup {op} -n {ns})",
        op = busy.metadata.name,
        phase = busy.status.phase.as_str(),
        ns = dest.namespace,
        name = dest.name
    ))
}

/// The spec of copying `source` as the flags say, into `to` (default:
/// `<source>-migrated`, or the source's name in another namespace).
pub fn spec_of(args: &MigrateArgs, source: &ClaimRef, to: Option<&str>) -> MigrationSpec {
    let dest_ns = args
        .to_namespace
        .clone()
        .unwrap_or_else(|| source.namespace.clone());
    let dest_name = to.map(str::to_string).unwrap_or_else(|| {
        if dest_ns == source.namespace && args.to_context.is_none() {
            format!("{}-migrated", source.name)
        } else {
            source.name.clone()
        }
    });
    MigrationSpec {
        source: source.clone(),
        destination: DestinationSpec {
            namespace: dest_ns,
            name: dest_name,
            storage_class: args.to_storage_class.clone(),
            size: args.to_size.clone(),
            access_modes: args.to_access_mode.clone(),
            node: args.to_node.clone(),
            reuse: args.reuse,
            allow_shrink: args.allow_shrink,
        },
        transfer: TransferOptions {
            delete: args.delete,
            compress: args.compress,
            verify: !args.no_verify,
            bwlimit: args.bwlimit.clone(),
            copy_method: args.copy_method,
            snapshot_class: args.snapshot_class.clone(),
        },
        retry: RetryPolicy {
            backoff_limit: args.backoff_limit,
            backoff_seconds: args.backoff,
            reuse_wait_seconds: args.reuse_wait.as_secs(),
            reuse_limit: args.reuse_limit,
        },
        mover: MoverOptions {
            image: args.mover_image.clone(),
            cpu_request: args.mover_cpu.clone(),
            memory_request: args.mover_memory.clone(),
            memory_limit: args.mover_memory_limit.clone(),
            security: args.security,
            run_as: args.run_as,
        },
        cutover: args.cutover.then_some(CutoverSpec {
            max_downtime_seconds: args
                .max_downtime
                .map_or(spec::DEFAULT_MAX_DOWNTIME_SECONDS, |d| d.as_secs()),
            precopy_rounds: args.precopy_rounds.unwrap_or(spec::DEFAULT_PRECOPY_ROUNDS),
            commit: args.commit,
            update_owner: args.update_owner,
        }),
        // Set once the destination's cluster is reached.
        clusters: None,
    }
}

/// The plan in words, as printed before anything is created.
pub fn plan_text(plan: &Plan, quiesce: Option<&Quiesce>) -> String {
    let s = &plan.source;
    let d = &plan.destination;
    let mut out = format!("operation {}\n", plan.operation);
    out += &format!(
        "  from  {} ({}, {}, {})\n",
        plan.spec.source,
        s.capacity,
        s.storage_class.as_deref().unwrap_or("no class"),
        s.access_modes.join(",")
    );
    out += &format!(
        "  to    {}/{} ({}, {}, {}){}\n",
        d.namespace,
        d.name,
        d.size,
        d.storage_class.as_deref().unwrap_or("default class"),
        d.access_modes.join(","),
        match d.action {
            ClaimAction::Create => ", new claim",
            ClaimAction::Reuse => ", existing claim: only differences are sent",
        }
    );
    if let Some(c) = &plan.spec.clusters {
        out += &format!(
            "  across  from {} into {}, network {}\n",
            c.source,
            c.destination,
            c.network.as_str()
        );
    }
    out += &reads_line(plan);
    for w in &plan.warnings {
        out += &format!("  warning  {w}\n");
    }
    out += &placement_line("sender", &plan.placement.sender);
    out += &placement_line("receiver", &plan.placement.receiver);
    out += &security_line(&plan.security);
    if let (Some(c), Some(q)) = (&plan.spec.cutover, quiesce) {
        out += &cutover_text(plan, c, q);
    }
    out
}

/// The cutover's part of the plan: the rounds, who stops and how, what
/// changes, what is kept.
fn cutover_text(plan: &Plan, c: &CutoverSpec, q: &Quiesce) -> String {
    let claim = &plan.spec.source;
    let mut out = format!(
        "  cutover  pre-copy rounds while the app runs, until one takes {}s or less (at most {})\n",
        c.max_downtime_seconds, c.precopy_rounds
    );
    if q.targets.is_empty() {
        out += "  stop     no pod mounts the claim: nothing to stop\n";
    }
    for t in &q.targets {
        out += &format!(
            "  stop     {:?} {} (scale {} -> 0, back to {} after the swap; pods {}){}\n",
            t.kind,
            t.name,
            t.replicas,
            t.replicas,
            t.pods.join(", "),
            t.autoscaler
                .as_ref()
                .map(|h| format!("; HPA {h} does not scale a target at 0"))
                .unwrap_or_default()
        );
        if t.kind == ScalableKind::StatefulSet {
            out += &format!(
                "  note     StatefulSet {}: scaling stops all its replicas\n",
                t.name
            );
            out += &match c.update_owner {
                true => format!(
                    "  owner    StatefulSet {} re-created with the new class in its claim template (deleted orphaning its pods and claims, created again; nothing restarts)\n",
                    t.name
                ),
                false => format!(
                    "  note     StatefulSet {}: its volumeClaimTemplates still name the old class, so new replicas get that (--update-owner changes it)\n",
                    t.name
                ),
            };
        }
    }
    // A node move: the new volume is made where the receiver is pinned,
    // and the app's pods follow its node affinity there.
    let made_on = match (&plan.spec.destination.node, &plan.placement.receiver.node) {
        (Some(_), Some(node)) => format!(", made on node {node}, where the app's pods follow it"),
        _ => String::new(),
    };
    out += &format!(
        "  swap     {claim} re-created under its name on the new volume ({}{made_on}); labels and annotations kept\n",
        plan.destination.storage_class.as_deref().unwrap_or("default class")
    );
    out += &format!(
        "  keep     the old volume {} (Retain) until {}\n",
        plan.source.volume,
        if c.commit {
            "the app runs again (--commit)".to_string()
        } else {
            format!("kubectl volmig commit {}", plan.operation)
        }
    );
    out
}

/// `  reads    snapshot: ...`, when the sender does not read the source
/// itself (nothing for a direct copy, as before issue 24).
fn reads_line(plan: &Plan) -> String {
    let m = &plan.source_method;
    if !m.method.reads_copy() {
        return String::new();
    }
    let final_sync = match plan.spec.cutover {
        Some(_) => "; the final sync, with the app stopped, reads the source itself",
        None => "",
    };
    format!(
        "  reads    {}: {}; the copy is deleted after each attempt{final_sync}\n",
        m.method.as_str(),
        m.reason
    )
}

/// `  security restricted: namespace prod enforces it (...); as uid 1000, ...`
fn security_line(s: &MoverSecurity) -> String {
    match &s.identity {
        None => format!("  security {}: {}\n", s.profile.as_str(), s.reason),
        Some(id) => format!(
            "  security {}: {}; the movers run as {}; owners are not kept: new files get that identity\n",
            s.profile.as_str(),
            s.reason,
            id.describe()
        ),
    }
}

pub(super) fn placement_line(role: &str, p: &NodePlacement) -> String {
    format!(
        "  {role:<8} {}: {}\n",
        p.node.as_deref().unwrap_or("any node"),
        p.reason
    )
}

/// The plan and the objects it would create; with `detach` (the driver
/// image, the mover pods' start timeout), the in-cluster driver's too.
fn print_dry_run(
    plan: &Plan,
    quiesce: Option<&Quiesce>,
    detach: Option<(&str, std::time::Duration)>,
    output: Output,
) -> Result<(), CliError> {
    let mut items = resources::dry_run_objects(plan, "<receiver Service IP>:7000")
        .map_err(|e| CliError::Print(e.to_string()))?;
    let new = configmap::new_record(plan);
    if let Some((image, start_timeout)) = detach {
        let namespaces = crate::driver::incluster::namespaces(&new);
        let driver = resources::dry_run_driver(
            &plan.operation,
            &new.metadata.namespace,
            &namespaces,
            image,
            start_timeout.as_secs(),
            plan.source_method.method.reads_copy(),
        )
        .map_err(|e| CliError::Print(e.to_string()))?;
        items.extend(driver);
    }
    let record = configmap::to_config_map(&new).map_err(|e| CliError::Print(e.to_string()))?;
    let mut record = serde_json::to_value(record).map_err(|e| CliError::Print(e.to_string()))?;
    record["apiVersion"] = json!("v1");
    record["kind"] = json!("ConfigMap");
    items.insert(0, record);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}});
    match output {
        Output::Json => {
            let text =
                serde_json::to_string_pretty(&list).map_err(|e| CliError::Print(e.to_string()))?;
            super::out(&format!(
                "{text}
"
            ));
        }
        Output::Yaml => {
            let text =
                serde_saphyr::to_string(&list).map_err(|e| CliError::Print(e.to_string()))?;
            super::out(&text);
        }
        Output::Table => {
            super::out(&plan_text(plan, quiesce));
            super::out("would create (nothing was created; -o yaml shows the objects):\n");
            for item in list["items"].as_array().into_iter().flatten() {
                super::out(&format!("  {}\n", describe_object(item)));
            }
        }
    }
    Ok(())
}

pub(super) fn describe_object(o: &Value) -> String {
    format!(
        "{} {}/{}",
        o["kind"].as_str().unwrap_or("?"),
        o["metadata"]["namespace"].as_str().unwrap_or(""),
        o["metadata"]["name"].as_str().unwrap_or("?")
    )
}
