//! `kubectl volmig rehome`: pin node-local volumes to the node their disks
//! moved to. Plans (every refusal before anything changes), prints the
//! plan (`--dry-run`: each PV before and after, every object changed), or
//! writes the record and drives it; and `status`, `resume`, `rollback`,
//! `cleanup` of a rehome.

use jiff::Timestamp;

use super::args::{Output, RehomeArgs};
use super::{control, exit, set, CliError};
use crate::cluster::Cluster;
use crate::driver::cutover::rebind;
use crate::driver::rehome::gather::{self, Chosen};
use crate::driver::rehome::{request_rollback, Rehomer};
use crate::names;
use crate::plan::placement::SELECTED_NODE;
use crate::plan::quantity;
use crate::plan::rehome::check::{self, Want};
use crate::record::print::rehome as print;
use crate::record::rehome::{
    Rehome, RehomeSpec, RehomeStatus, RehomeTarget, Step, Stop, VolumeRehome,
};
use crate::record::store::Store;
use crate::record::{Metadata, Phase};
use crate::spec::ClaimRef;

/// The most a rehome's record may hold when it starts: two thirds of what a
/// ConfigMap may.
const MAX_RECORD_BYTES: usize = 600 * 1024;

pub async fn run(cluster: &Cluster, args: RehomeArgs, output: Output) -> Result<i32, CliError> {
    let chosen = match (&args.volume, &args.all_from_node) {
        (Some(v), None) => match v
            .strip_prefix("pv/")
            .or_else(|| v.strip_prefix("persistentvolume/"))
        {
            Some(pv) => Chosen::Volume(pv.to_string()),
            None => Chosen::Claim {
                namespace: cluster.namespace.clone(),
                name: v.clone(),
            },
        },
        (None, Some(node)) => Chosen::FromNode(node.clone()),
        _ => {
            return Err(CliError::Usage(
                "name a claim (or pv/NAME), or --all-from-node NODE".into(),
            ))
        }
    };
    let (want, target) = match (&args.to_node, &args.topology) {
        (Some(node), None) => (
            Want::Node(node.clone()),
            RehomeTarget::Node { node: node.clone() },
        ),
        (None, Some((key, value))) => (
            Want::Topology {
                key: key.clone(),
                value: value.clone(),
            },
            RehomeTarget::Topology {
                key: key.clone(),
                value: value.clone(),
            },
        ),
        _ => {
            return Err(CliError::Usage(
                "say where: --to-node NODE or --topology KEY=VALUE".into(),
            ))
        }
    };
    let inputs = gather::inputs(&cluster.client, &chosen).await?;
    if inputs.candidates.is_empty() {
        let node = args.all_from_node.clone().unwrap_or_default();
        return Err(CliError::Usage(
            check::Refusal::NothingOnNode(node).to_string(),
        ));
    }
    let plan = match check::plan(
        &inputs.candidates,
        &want,
        args.pool.as_deref(),
        &inputs.nodes,
        &inputs.workloads,
    ) {
        Ok(plan) => plan,
        Err(refusals) => {
            let list: Vec<String> = refusals.iter().map(|r| format!("  - {r}")).collect();
            return Err(CliError::Usage(format!(
                "cannot rehome:\n{}",
                list.join("\n")
            )));
        }
    };
    for w in &plan.warnings {
        say!("warning: {w}");
    }
    let base = match &chosen {
        Chosen::Claim { name, .. } => name.clone(),
        Chosen::Volume(pv) => pv.clone(),
        Chosen::FromNode(node) => format!("rehome-{node}"),
    };
    let record = record_of(
        &plan,
        target,
        args.pool.clone(),
        args.all_from_node.clone(),
        &names::generate_operation_id(&base),
        &cluster.namespace,
    );
    if args.dry_run {
        let text = match output {
            Output::Table => print::dry_run(&record),
            Output::Json => set::json_text(&print::dry_run_object(&record))?,
            Output::Yaml => set::yaml_text(&print::dry_run_object(&record))?,
        };
        super::out(&text);
        return Ok(exit::OK);
    }
    // Room left for what the steps add (stops planned again, messages, a
    // rollback): a record that could not be written midway would stop the
    // rehome where only the record knows a PV.
    let size = crate::record::rehome::encoded_size(&record)
        .map_err(crate::record::store::StoreError::from)?;
    if size > MAX_RECORD_BYTES {
        return Err(CliError::Usage(format!(
            "the record of these {} volumes would be {size} bytes, more than the {MAX_RECORD_BYTES} \
             a rehome starts with: rehome them in smaller groups (a claim, or pv/NAME, at a time)",
            record.spec.volumes.len()
        )));
    }
    let store: Store<Rehome> = Store::new(cluster.client.clone(), &cluster.namespace);
    let record = store.create(&record).await?;
    say!(
        "rehome {}: {} volume(s) to {}; see kubectl volmig status {} -n {}",
        record.metadata.name,
        record.spec.volumes.len(),
        record.spec.target,
        record.metadata.name,
        record.metadata.namespace
    );
    drive(cluster, record).await
}

/// The record of `plan`: every change to make, written before the first.
pub fn record_of(
    plan: &check::Plan,
    target: RehomeTarget,
    pool: Option<String>,
    from_node: Option<String>,
    op: &str,
    namespace: &str,
) -> Rehome {
    let volumes: Vec<VolumeRehome> = plan
        .volumes
        .iter()
        .map(|p| {
            let claim = p.claim.as_ref().map(|c| {
                ClaimRef::new(
                    c.metadata.namespace.as_deref().unwrap_or_default(),
                    c.metadata.name.as_deref().unwrap_or_default(),
                )
            });
            let selected = p
                .claim
                .as_ref()
                .and_then(|c| c.metadata.annotations.as_ref()?.get(SELECTED_NODE).cloned());
            let mut shape = p.claim.as_ref().map(rebind::shape_of);
            // A claim whose expansion failed asks for more than its volume
            // holds; made again so, it would never bind.
            if let (Some(shape), Some(capacity)) = (shape.as_mut(), capacity(&p.original)) {
                let bytes = |q: &str| quantity::parse(q).ok();
                if bytes(&shape.request) > bytes(&capacity) {
                    shape.request = capacity;
                }
            }
            let mut original = p.original.clone();
            // What the API server owns is not needed to make it again.
            original.metadata.managed_fields = None;
            original.status = None;
            VolumeRehome {
                name: p.original.metadata.name.clone().unwrap_or_default(),
                claim,
                claim_shape: shape,
                selected_node: selected,
                original,
                rehomed: p.rehomed.clone(),
                policy: rebind::policy(&p.original).to_string(),
                driver_objects: p.driver_objects.clone(),
                change: None,
            }
        })
        .collect();
    Rehome {
        metadata: Metadata {
            name: op.to_string(),
            namespace: namespace.to_string(),
            ..Metadata::default()
        },
        spec: RehomeSpec {
            target,
            pool,
            from_node,
            volumes: volumes.iter().map(|v| v.name.clone()).collect(),
        },
        status: RehomeStatus {
            phase: Phase::Pending,
            step: Step::Quiesce,
            volumes,
            stops: plan
                .stops
                .iter()
                .map(|(ns, t)| Stop {
                    namespace: ns.clone(),
                    target: t.clone(),
                })
                .collect(),
            ..RehomeStatus::default()
        },
    }
}

/// A volume's capacity, as a quantity.
fn capacity(pv: &k8s_openapi::api::core::v1::PersistentVolume) -> Option<String> {
    let capacity = pv.spec.as_ref()?.capacity.as_ref()?;
    capacity.get("storage").map(|q| q.0.clone())
}

/// Drives `record` in this process until it ends.
async fn drive(cluster: &Cluster, record: Rehome) -> Result<i32, CliError> {
    let rehomer = Rehomer::new(cluster.client.clone(), record, &names::holder(), say_line);
    let done = match rehomer.run().await {
        Ok(done) => done,
        // Stopped midway: the message says how to go on; the exit says it
        // did not finish, as a failed migration's does.
        Err(e) => {
            say!("error: {e}");
            return Ok(exit::FAILED);
        }
    };
    super::out(&format!(
        "{}\n",
        done.status.message.clone().unwrap_or_default()
    ));
    Ok(match done.status.phase {
        Phase::Succeeded => exit::OK,
        Phase::RolledBack => exit::ROLLED_BACK,
        _ => exit::FAILED,
    })
}

fn say_line(text: &str) {
    say!("{text}");
}

/// `status OP` of a rehome.
pub fn status(r: &Rehome, output: Output) -> Result<i32, CliError> {
    let text = match output {
        Output::Table => print::describe(r, Timestamp::now()),
        Output::Json => set::json_text(&print::object(r))?,
        Output::Yaml => set::yaml_text(&print::object(r))?,
    };
    super::out(&text);
    Ok(exit::OK)
}

/// Whose live heartbeat holds `r`, if anyone's.
fn driven_by(r: &Rehome) -> Option<String> {
    let lease = r.status.driver.as_ref()?;
    lease
        .is_alive(Timestamp::now())
        .then(|| lease.holder.clone())
}

/// `resume OP` of a rehome: finishes it (or its rollback).
pub async fn resume(cluster: &Cluster, r: Rehome, force: bool) -> Result<i32, CliError> {
    if matches!(r.status.step, Step::Done | Step::RolledBack) {
        say!(
            "rehome {} is {} already",
            r.metadata.name,
            r.status.step.as_str()
        );
        return Ok(exit::OK);
    }
    if let (Some(holder), false) = (driven_by(&r), force) {
        return Err(CliError::Usage(format!(
            "rehome {} is being driven by {holder}; wait for it, or pass --force",
            r.metadata.name
        )));
    }
    drive(cluster, r).await
}

/// `rollback OP` of a rehome: every volume back to its original PV.
pub async fn rollback(cluster: &Cluster, r: Rehome, force: bool) -> Result<i32, CliError> {
    let store: Store<Rehome> = Store::new(cluster.client.clone(), &r.metadata.namespace);
    let op = r.metadata.name.clone();
    if r.status.step == Step::RolledBack {
        say!("rehome {op} is rolled back already");
        return Ok(exit::OK);
    }
    let reason = format!("rollback asked by {}", names::holder());
    let mut r = request_rollback(&store, &op, &reason)
        .await
        .map_err(|e| CliError::Usage(e.to_string()))?;
    // Another client drives it: follow until it is rolled back, or take
    // it over once that client stops.
    while let (Some(holder), false) = (driven_by(&r), force) {
        if r.status.step == Step::RolledBack {
            say!("rehome {op} is rolled back (by {holder})");
            return Ok(exit::OK);
        }
        say!(
            "rollback asked; {holder} drives rehome {op}: waiting ({})",
            r.status.step.as_str()
        );
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        r = store.get(&op).await?;
    }
    if r.status.step == Step::RolledBack {
        say!("rehome {op} is rolled back");
        return Ok(exit::OK);
    }
    match drive(cluster, r).await? {
        exit::ROLLED_BACK => Ok(exit::OK),
        code => Ok(code),
    }
}

/// `cleanup OP` of a rehome: its record, once it has ended.
pub async fn cleanup(cluster: &Cluster, r: Rehome, force: bool) -> Result<i32, CliError> {
    let ended = matches!(r.status.step, Step::Done | Step::RolledBack);
    if !ended && !force {
        return Err(CliError::Usage(format!(
            "rehome {op} is midway ({}): its record is the only copy of the PVs it changes; \
             finish it (kubectl volmig resume {op}) or undo it (kubectl volmig rollback {op}) first",
            r.status.step.as_str(),
            op = r.metadata.name
        )));
    }
    if !ended {
        // Forced midway: never while a PV exists only in the record.
        let volumes: kube::Api<k8s_openapi::api::core::v1::PersistentVolume> =
            kube::Api::all(cluster.client.clone());
        for v in &r.status.volumes {
            let there = volumes
                .get_opt(&v.name)
                .await
                .map_err(|e| CliError::kube(format!("get volume {}", v.name), e))?;
            if there.is_none() {
                return Err(CliError::Usage(format!(
                    "persistentvolume {} exists only in the record of rehome {op} now; \
                     resume or rollback it first, even with --force",
                    v.name,
                    op = r.metadata.name
                )));
            }
        }
    }
    control::refuse_driven(&r.metadata.name, driven_by(&r).as_deref(), force)?;
    let store: Store<Rehome> = Store::new(cluster.client.clone(), &r.metadata.namespace);
    store.delete(&r.metadata.name).await?;
    say!("rehome {}: record removed", r.metadata.name);
    Ok(exit::OK)
}

/// Commands that have no meaning for a rehome.
pub fn refuse(r: &Rehome, command: &str) -> CliError {
    let what = match command {
        "abort" => "a rehome is undone with kubectl volmig rollback",
        "commit" => "a rehome has nothing to commit: it ends Done",
        "logs" => "a rehome runs no pods; kubectl volmig status shows each step",
        _ => "a rehome does not take this command",
    };
    CliError::Usage(format!("{} is a rehome: {what}", r.metadata.name))
}
