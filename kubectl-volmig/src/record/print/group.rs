//! A set of claims for people and tools: its row in `status`, its
//! `describe` view with a row per claim, and `-o json|yaml` as one
//! `VolumeMigration` (`volmig.io/v1alpha2`) with a list of claims. Pure.

use std::fmt::Write as _;

use jiff::Timestamp;
use serde_json::{json, Value};

use super::format::{age, attempts_cell, claim, columns, progress_cell};
use crate::record::figures::Budget;
use crate::record::group::{GroupView, API_VERSION};
use crate::record::{Progress, VolumeMigration, KIND};

/// The set's progress: bytes and files summed over its claims, the rate
/// of those copying; the totals are final when every claim's are.
pub fn total_progress(view: &GroupView) -> Option<Progress> {
    let claims = view.members.iter().flatten();
    sum_progress(claims.map(|vm| (vm.status.progress.as_ref(), vm.running_attempt().is_some())))
}

/// Claims' progress summed: each claim's (`None` before any) and whether
/// it copies now (only those count for the rate). `None` when no claim
/// has any; the totals are final when every claim's are.
pub fn sum_progress<'a>(
    claims: impl IntoIterator<Item = (Option<&'a Progress>, bool)>,
) -> Option<Progress> {
    let mut total = Progress {
        listing_done: true,
        ..Progress::default()
    };
    let mut known = false;
    for (p, copying) in claims {
        let Some(p) = p else {
            total.listing_done = false;
            continue;
        };
        known = true;
        total.bytes_done += p.bytes_done;
        total.bytes_total += p.bytes_total;
        total.files_done += p.files_done;
        total.files_total += p.files_total;
        total.listing_done &= p.listing_done;
        if copying {
            total.rate += p.rate;
        }
    }
    let left = total.bytes_total.saturating_sub(total.bytes_done);
    total.eta_seconds = (total.listing_done && total.rate > 0).then(|| left.div_ceil(total.rate));
    known.then_some(total)
}

/// The set's row in `status`: SOURCE is the selection and how many
/// claims, DESTINATION where they go, ATTEMPTS summed (and how many
/// claims failed).
pub fn row(view: &GroupView, now: Timestamp) -> Vec<String> {
    let g = &view.group;
    let claims: Vec<&VolumeMigration> = view.members.iter().flatten().collect();
    let attempts: usize = claims.iter().map(|vm| Budget::of(vm).all).sum();
    let failed = claims
        .iter()
        .filter(|vm| {
            vm.status.phase != crate::record::Phase::Succeeded && vm.status.phase.is_stopped()
        })
        .count();
    let attempts = match failed {
        0 => attempts.to_string(),
        n => format!(
            "{attempts} ({n} claim{} failed)",
            if n == 1 { "" } else { "s" }
        ),
    };
    let classes: Vec<String> = {
        let mut c: Vec<String> = claims
            .iter()
            .filter_map(|vm| vm.status.destination.as_ref())
            .map(|d| {
                d.storage_class
                    .clone()
                    .unwrap_or_else(|| "default class".into())
            })
            .collect();
        c.sort();
        c.dedup();
        c
    };
    vec![
        g.metadata.name.clone(),
        g.source_text(),
        format!("{} ({} claims)", classes.join(","), g.spec.claims.len()),
        view.phase().as_str().to_string(),
        progress_cell(total_progress(view).as_ref()),
        attempts,
        age(g.metadata.creation_timestamp, now),
    ]
}

/// The set in full: its phase and lease, then a row per claim, then each
/// claim that did not succeed with why.
pub fn describe_set(view: &GroupView, now: Timestamp) -> String {
    let g = &view.group;
    let mut out = String::new();
    let mut field = |key: &str, value: String| {
        let _ = writeln!(out, "{:<15}{value}", format!("{key}:"));
    };
    field("Name", g.metadata.name.clone());
    field("Namespace", g.metadata.namespace.clone());
    if let Some(created) = g.metadata.creation_timestamp {
        field(
            "Created",
            format!("{created} ({} ago)", age(Some(created), now)),
        );
    }
    field("Phase", view.phase().as_str().to_string());
    if let Some(m) = &g.status.message {
        field("Message", m.clone());
    }
    field(
        "Claims",
        format!(
            "{}: {}; --parallel {}, --per-node {}",
            g.source_text(),
            view.phases_text(),
            g.spec.parallelism.claims,
            g.spec.parallelism.per_node
        ),
    );
    if let Some(p) = total_progress(view) {
        field("Progress", progress_cell(Some(&p)));
    }
    if let Some(d) = &g.status.driver {
        field(
            "Driver",
            format!(
                "{} (heartbeat {} ago)",
                d.holder,
                age(Some(d.heartbeat), now)
            ),
        );
    }
    if let Some(by) = &g.status.aborted_by {
        field("Aborted by", by.clone());
    }
    let mut rows = vec![[
        "CLAIM", "RECORD", "PHASE", "PROGRESS", "ATTEMPTS", "SENDER", "RECEIVER", "CLASS",
    ]
    .map(String::from)
    .to_vec()];
    let mut troubles = Vec::new();
    for (m, vm) in g.spec.claims.iter().zip(&view.members) {
        let source = claim(&m.source.namespace, &m.source.name, &g.metadata.namespace);
        let record = claim(m.namespace(), &m.operation, &g.metadata.namespace);
        let Some(vm) = vm else {
            rows.push(vec![
                source,
                record,
                "Missing".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
            continue;
        };
        let last = vm.status.attempts.last();
        let node = |n: Option<&String>| n.cloned().unwrap_or_else(|| "-".into());
        let class = |c: Option<&String>| c.cloned().unwrap_or_else(|| "default".into());
        rows.push(vec![
            source.clone(),
            record,
            vm.status.phase.as_str().to_string(),
            progress_cell(vm.status.progress.as_ref()),
            attempts_cell(vm),
            node(last.and_then(|a| a.sender.node.as_ref())),
            node(last.and_then(|a| a.receiver.node.as_ref())),
            format!(
                "{} -> {}",
                class(
                    vm.status
                        .source
                        .as_ref()
                        .and_then(|s| s.storage_class.as_ref())
                ),
                class(
                    vm.status
                        .destination
                        .as_ref()
                        .and_then(|d| d.storage_class.as_ref())
                )
            ),
        ]);
        if vm.status.phase.is_stopped() && vm.status.phase != crate::record::Phase::Succeeded {
            let why = vm.status.message.clone().unwrap_or_default();
            troubles.push(format!("  {source}: {} {why}", vm.status.phase.as_str()));
        }
    }
    out += "\n";
    for line in columns(&rows).lines() {
        let _ = writeln!(out, "  {line}");
    }
    if !troubles.is_empty() {
        out += "\nClaims that did not succeed:\n";
        for t in troubles {
            let _ = writeln!(out, "{t}");
        }
    }
    if let Some(m) = g.spec.claims.first() {
        let _ = writeln!(
            out,
            "\nOne claim in full: kubectl volmig status {} -n {}",
            m.operation,
            m.namespace()
        );
    }
    out
}

/// The set as one `VolumeMigration` (`volmig.io/v1alpha2`): the head's
/// spec and status, with each claim's spec and status listed under
/// `spec.claims` and `status.claims`, and the summed `status.progress`.
pub fn set_object(view: &GroupView) -> Value {
    let g = &view.group;
    let claims_spec: Vec<Value> = g
        .spec
        .claims
        .iter()
        .zip(&view.members)
        .map(|(m, vm)| {
            let mut v = json!({"key": m.key, "operation": m.operation, "source": m.source, "destination": m.destination});
            if let Some(vm) = vm {
                v["spec"] = json!(vm.spec);
            }
            v
        })
        .collect();
    let claims_status: Vec<Value> = g
        .spec
        .claims
        .iter()
        .zip(&view.members)
        .map(|(m, vm)| match vm {
            Some(vm) => {
                let mut v = json!(vm.status);
                v["key"] = json!(m.key);
                v["operation"] = json!(m.operation);
                v
            }
            None => json!({"key": m.key, "operation": m.operation, "phase": "Missing"}),
        })
        .collect();
    let mut status = json!(g.status);
    status["phase"] = json!(view.phase());
    if let Some(p) = total_progress(view) {
        status["progress"] = json!(p);
    }
    status["claims"] = Value::Array(claims_status);
    json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": g.metadata,
        "spec": {
            "selection": g.spec.selection,
            "parallelism": g.spec.parallelism,
            "claims": claims_spec,
        },
        "status": status,
    })
}
