//! Records for people and for tools: `kubectl get`-style tables, a
//! `kubectl describe`-style view, and `-o json|yaml` (one object, or a
//! `List` as kubectl prints several). Pure: every function returns a
//! `String`.
//!
//! Sizes use binary units (`1.2 GiB`; `1.2GiB` in table cells), ages read as
//! kubectl's AGE column (`45s`, `5m12s`, `3h`, `2d`).

mod describe;
pub(crate) mod format;
pub mod group;
pub mod rehome;
#[cfg(test)]
mod tests;

pub use describe::describe;

use jiff::Timestamp;
use serde::Serialize;

use super::cutover::CutoverStatus;
use super::group::GroupView;
use super::VolumeMigration;
use format::{age, attempts_cell, claim, columns, progress_cell};

/// A record that could not be serialized (not expected to happen).
#[derive(Debug, thiserror::Error)]
pub enum PrintError {
    /// serde_json refused a value.
    #[error("cannot print as JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The YAML serializer refused a value.
    #[error("cannot print as YAML: {0}")]
    Yaml(#[from] serde_saphyr::SerializeError),
}

impl PrintError {
    /// Printing the same records again fails the same way.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// Operations as `kubectl get` prints them: NAMESPACE (only with
/// `wide_namespace`, for `-A`), NAME, SOURCE, DESTINATION, PHASE, PROGRESS,
/// ATTEMPTS (counted against the budget / allowed), AGE. Claims in the
/// record's own namespace are shown by name, others as `namespace/name`.
/// `ops` empty gives the header alone: say [`empty_message`] instead.
pub fn table(ops: &[VolumeMigration], now: Timestamp, wide_namespace: bool) -> String {
    table_with_sets(ops, &[], now, wide_namespace)
}

/// [`table`] with a row for each set of claims first (each claim of a set
/// has its own row too, named `<set>-<key>`).
pub fn table_with_sets(
    ops: &[VolumeMigration],
    sets: &[GroupView],
    now: Timestamp,
    wide_namespace: bool,
) -> String {
    let mut header = vec![
        "NAME",
        "SOURCE",
        "DESTINATION",
        "PHASE",
        "PROGRESS",
        "ATTEMPTS",
        "AGE",
    ];
    if wide_namespace {
        header.insert(0, "NAMESPACE");
    }
    let mut rows = vec![header.into_iter().map(String::from).collect()];
    for view in sets {
        let mut row = group::row(view, now);
        if wide_namespace {
            row.insert(0, view.group.metadata.namespace.clone());
        }
        rows.push(row);
    }
    for vm in ops {
        let here = &vm.metadata.namespace;
        let spec = &vm.spec;
        let mut row = vec![
            vm.metadata.name.clone(),
            claim(&spec.source.namespace, &spec.source.name, here),
            claim(&spec.destination.namespace, &spec.destination.name, here),
            phase_cell(vm),
            progress_cell(vm.status.progress.as_ref()),
            attempts_cell(vm),
            age(vm.metadata.creation_timestamp, now),
        ];
        if wide_namespace {
            row.insert(0, here.clone());
        }
        rows.push(row);
    }
    columns(&rows)
}

/// The phase, with a cutover's step: `Running (FinalSync)`.
fn phase_cell(vm: &VolumeMigration) -> String {
    let phase = vm.status.phase.as_str();
    match &vm.status.cutover {
        Some(c) => format!("{phase} ({})", c.step.as_str()),
        None => phase.to_string(),
    }
}

/// A cutover in one line: step, rounds, downtime (the monitor's
/// "Phases" line and `status`).
pub fn cutover_line(c: &CutoverStatus, now: Timestamp) -> String {
    let mut parts = vec![format!("step {}", c.step.as_str())];
    if let Some(last) = c.rounds.last() {
        parts.push(format!(
            "{} pre-copy round(s), the last {:.1}s",
            c.rounds.len(),
            last.seconds
        ));
    }
    if let Some(s) = c.final_sync_seconds {
        parts.push(format!("final sync {s:.1}s"));
    }
    match (c.downtime(now), c.restored_at) {
        (Some(d), Some(_)) => parts.push(format!("downtime {d:.1}s")),
        (Some(d), None) => parts.push(format!("down for {d:.0}s so far")),
        _ => {}
    }
    if let Some(r) = &c.rollback {
        parts.push(format!("rollback from {}", r.from.as_str()));
    }
    parts.join(", ")
}

/// What to say instead of an empty table: in `namespace`, or in all of
/// them (`None`, for `-A`).
pub fn empty_message(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("No operations found in namespace {ns}."),
        None => "No operations found.".to_string(),
    }
}

/// `kubectl get -o json`'s shape for several objects.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct List<'a> {
    api_version: &'static str,
    items: &'a [VolumeMigration],
    kind: &'static str,
    metadata: ListMeta,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    resource_version: &'static str,
}

/// `ops` as kubectl would print them: the object itself when `single` and
/// there is exactly one, else a `v1` `List` of them.
fn shape(ops: &[VolumeMigration], single: bool) -> Shape<'_> {
    match ops {
        [one] if single => Shape::One(one),
        _ => Shape::List(List {
            api_version: "v1",
            items: ops,
            kind: "List",
            metadata: ListMeta {
                resource_version: "",
            },
        }),
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum Shape<'a> {
    One(&'a VolumeMigration),
    List(List<'a>),
}

/// `-o json`: indented by four spaces and newline-terminated, as kubectl.
/// One object when `single` and `ops` has exactly one, else a `List`.
pub fn to_json(ops: &[VolumeMigration], single: bool) -> Result<String, PrintError> {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    shape(ops, single).serialize(&mut ser)?;
    out.push(b'\n');
    // serde_json writes only UTF-8.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `-o yaml`, newline-terminated: one object when `single` and `ops` has
/// exactly one, else a `v1` `List`.
pub fn to_yaml(ops: &[VolumeMigration], single: bool) -> Result<String, PrintError> {
    let mut yaml = serde_saphyr::to_string(&shape(ops, single))?;
    if !yaml.ends_with('\n') {
        yaml.push('\n');
    }
    Ok(yaml)
}
