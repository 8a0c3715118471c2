//! Server-side printing: the `meta.k8s.io/v1` `Table` that `kubectl get` asks for.
//!
//! `kubectl get` does not format objects itself: it asks for a `Table` in its `Accept`
//! header and prints the cells the API server computed. This module computes them the way
//! kube-apiserver's printers do (`pkg/printers/internalversion`), so kubectl prints the
//! same text against the sandbox as against a real cluster.
//!
//! Like the real server, every row carries the `-o wide` cells too; their column
//! definitions have `priority: 1` and kubectl hides them unless asked. Fields a real API
//! server defaults on write (a pod's phase, a service's type, a deployment's replicas...)
//! print as that default when an object lacks them, and odd objects never panic.

use serde_json::{json, Map, Value};
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime, UtcOffset};

use crate::registry::Resource;

use self::core_v1::{
    config_map_cells, endpoints_cells, event_cells, namespace_cells, node_cells, secret_cells,
    service_account_cells, service_cells, CONFIG_MAP_COLUMNS, ENDPOINTS_COLUMNS, EVENT_COLUMNS,
    NAMESPACE_COLUMNS, NODE_COLUMNS, SECRET_COLUMNS, SERVICE_ACCOUNT_COLUMNS, SERVICE_COLUMNS,
};
use self::pods::{pod_cells, pod_conditions, POD_COLUMNS};
use self::storage::{
    pv_cells, pvc_cells, storage_class_cells, PVC_COLUMNS, PV_COLUMNS, STORAGE_CLASS_COLUMNS,
};
use self::workloads::{
    autoscaler_cells, daemon_set_cells, deployment_cells, replica_set_cells,
    replication_controller_cells, stateful_set_cells, AUTOSCALER_COLUMNS, DAEMON_SET_COLUMNS,
    DEPLOYMENT_COLUMNS, REPLICATION_CONTROLLER_COLUMNS, REPLICA_SET_COLUMNS, STATEFUL_SET_COLUMNS,
};

/// The `includeObject` query parameter: what each row's `object` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// No `object` in the rows.
    None,
    /// A `PartialObjectMetadata` with the item's metadata (the server's default).
    Metadata,
    /// The whole item.
    Object,
}

impl IncludeObject {
    /// Reads the `includeObject` query parameter; absent or unknown values mean `Metadata`.
    pub fn from_query(v: Option<&str>) -> Self {
        match v {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

/// A Table for `items` of the resource `plural` (e.g. "pods", "persistentvolumeclaims").
/// `now` is the time ages are measured against.
///
/// `list_metadata` is the list's metadata (resourceVersion, continue) to copy into the
/// Table's metadata; a single object's Table is [`one_row`].
/// Items of a group kube-apiserver does not serve itself print as custom resources
/// without printer columns do: NAME, AGE.
pub fn to_table(
    plural: &str,
    items: &[Value],
    include: IncludeObject,
    list_metadata: Value,
    now: OffsetDateTime,
) -> Value {
    let group = items
        .first()
        .map_or("", |item| group_of(text(item, "apiVersion")));
    let printer = match is_builtin_group(group) {
        true => printer_for(plural),
        false => CUSTOM,
    };
    let mut rows = Vec::with_capacity(items.len());
    for item in items {
        let conditions = if plural == "pods" {
            pod_conditions(item)
        } else {
            None
        };
        rows.push(row(item, (printer.cells)(item, now), conditions, include));
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": table_metadata(&list_metadata),
        "columnDefinitions": printer.columns.lines().filter_map(column).collect::<Vec<_>>(),
        "rows": rows,
    })
}

/// The Table of `items` of a served resource: a built-in kind's printer,
/// or a custom resource's printer columns ([`custom`]).
pub fn resource_table(
    res: &Resource,
    items: &[Value],
    include: IncludeObject,
    list_metadata: Value,
    now: OffsetDateTime,
) -> Value {
    match &res.custom {
        Some(definition) => custom::table(&definition.columns, items, include, &list_metadata, now),
        None => to_table(&res.plural, items, include, list_metadata, now),
    }
}

/// A one-row Table for a single object, its ages measured from now.
pub fn one_row(res: &Resource, obj: &Value, include: IncludeObject) -> Value {
    let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
    let now = OffsetDateTime::now_utc();
    resource_table(res, std::slice::from_ref(obj), include, meta, now)
}

/// Whether an Accept header asks for a Table (as=Table;g=meta.k8s.io with v=v1 or v1beta1).
///
/// As in the API server's negotiation, the first clause it can serve decides, so
/// `application/json` listed before a Table clause gets plain JSON; `q=0` clauses are
/// ignored.
pub fn wants_table(accept: &str) -> bool {
    const SERVED: [&str; 5] = [
        "application/json",
        "application/yaml",
        "application/vnd.kubernetes.protobuf",
        "application/*",
        "*/*",
    ];
    for clause in accept.split(',') {
        let mut parts = clause.split(';').map(str::trim);
        let essence = parts.next().unwrap_or_default().to_ascii_lowercase();
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k.trim() == key)
                .map(|(_, v)| v.trim())
        };
        let refused = param("q").and_then(|q| q.parse::<f32>().ok()) == Some(0.0);
        if refused || !SERVED.contains(&essence.as_str()) {
            continue;
        }
        let meta_v1 =
            param("g") == Some("meta.k8s.io") && matches!(param("v"), Some("v1" | "v1beta1"));
        match param("as") {
            None => return false,
            Some("Table") if meta_v1 => return true,
            Some(other) if meta_v1 && other.starts_with("PartialObjectMetadata") => return false,
            Some(_) => {}
        }
    }
    false
}

/// Renders a duration the way Kubernetes' `duration.HumanDuration` does: `5s`, `3m20s`,
/// `10m`, `2d3h`, `3y50d`, or `<invalid>` for more than a second into the future.
pub fn human_duration(d: Duration) -> String {
    let secs = d.whole_seconds();
    let (minutes, hours, days) = (secs / 60, secs / 3600, secs / 86_400);
    let pair = |big: i64, big_unit: &str, small: i64, small_unit: &str| match small {
        0 => format!("{big}{big_unit}"),
        _ => format!("{big}{big_unit}{small}{small_unit}"),
    };
    match secs {
        s if s < -1 => "<invalid>".to_owned(),
        s if s < 0 => "0s".to_owned(),
        s if s < 120 => format!("{s}s"),
        _ if minutes < 10 => pair(minutes, "m", secs % 60, "s"),
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 => pair(hours, "h", minutes % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => pair(days, "d", hours % 24, "h"),
        _ if hours < 24 * 365 * 2 => format!("{days}d"),
        _ if hours < 24 * 365 * 8 => pair(days / 365, "y", days % 365, "d"),
        _ => format!("{}y", days / 365),
    }
}

/// The Table's `ListMeta`: the list's resourceVersion, continue and remainingItemCount.
fn table_metadata(list_metadata: &Value) -> Value {
    let mut out = Map::new();
    for key in ["resourceVersion", "continue", "remainingItemCount"] {
        match &list_metadata[key] {
            Value::Null => {}
            Value::String(s) if s.is_empty() => {}
            value => {
                out.insert(key.to_owned(), value.clone());
            }
        }
    }
    Value::Object(out)
}

/// A `TableRow`: its cells, its conditions if any, and the object as `include` asks.
fn row(
    item: &Value,
    cells: Vec<Value>,
    conditions: Option<Value>,
    include: IncludeObject,
) -> Value {
    let mut row = Map::new();
    row.insert("cells".to_owned(), Value::Array(cells));
    if let Some(conditions) = conditions {
        row.insert("conditions".to_owned(), conditions);
    }
    let object = match include {
        IncludeObject::None => return Value::Object(row),
        IncludeObject::Object => item.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": item.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    };
    row.insert("object".to_owned(), object);
    Value::Object(row)
}

// ---------------------------------------------------------------------------------------
// Column definitions.
//
// Each printer lists its columns one per line as `name|type|description`. A leading `+`
// marks a wide column (priority 1); `Name` and `Age` alone are the standard metadata
// columns, and `{created}` stands for the creationTimestamp field description.

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATED_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// Parses one line of a column list into a `TableColumnDefinition`.
fn column(line: &str) -> Option<Value> {
    let line = line.trim();
    let (priority, line) = line.strip_prefix('+').map_or((0, line), |rest| (1, rest));
    let mut parts = line.splitn(3, '|');
    let name = parts.next().filter(|name| !name.is_empty())?;
    let (ty, format, description) = match (name, parts.next(), parts.next()) {
        ("Name", None, _) => ("string", "name", NAME_DOC),
        ("Age", None, _) => ("string", "", CREATED_DOC),
        (_, ty, Some("{created}")) => (ty.unwrap_or("string"), "", CREATED_DOC),
        (_, ty, description) => (ty.unwrap_or("string"), "", description.unwrap_or_default()),
    };
    Some(json!({
        "name": name,
        "type": ty,
        "format": format,
        "description": description,
        "priority": priority,
    }))
}

/// A resource's column list and the function computing a row's cells, wide ones included.
struct Printer {
    columns: &'static str,
    cells: CellsFn,
}

type CellsFn = fn(&Value, OffsetDateTime) -> Vec<Value>;

/// A row's cells, from values convertible into JSON.
macro_rules! cells {
    ($($cell:expr),* $(,)?) => { vec![$(Value::from($cell)),*] };
}

// The printers, one module per resource family, each with its column lists and one cell
// per column, in order. Declared after `cells!`, which they use.
mod core_v1;
mod custom;
mod jobs;
mod pods;
mod rbac;
mod storage;
mod workloads;

/// What the generic `rest.DefaultTableConvertor` prints for built-in kinds without a printer.
const DEFAULT: Printer = Printer {
    columns: "Name\nCreated At|date|{created}",
    cells: |o, _| cells![name(o), created_at(o)],
};

/// What a CustomResourceDefinition without printer columns prints (its defaulted `Age`).
const CUSTOM: Printer = Printer {
    columns: "Name
        Age|date|Custom resource definition column (in JSONPath format): .metadata.creationTimestamp",
    cells: |o, now| cells![name(o), age(o, now)],
};

fn printer_for(plural: &str) -> Printer {
    let (columns, cells): (&str, CellsFn) = match plural {
        "pods" => (POD_COLUMNS, pod_cells),
        "persistentvolumeclaims" => (PVC_COLUMNS, pvc_cells),
        "persistentvolumes" => (PV_COLUMNS, pv_cells),
        "storageclasses" => (STORAGE_CLASS_COLUMNS, storage_class_cells),
        "nodes" => (NODE_COLUMNS, node_cells),
        "namespaces" => (NAMESPACE_COLUMNS, namespace_cells),
        "services" => (SERVICE_COLUMNS, service_cells),
        "endpoints" => (ENDPOINTS_COLUMNS, endpoints_cells),
        "deployments" => (DEPLOYMENT_COLUMNS, deployment_cells),
        "replicasets" => (REPLICA_SET_COLUMNS, replica_set_cells),
        "statefulsets" => (STATEFUL_SET_COLUMNS, stateful_set_cells),
        "daemonsets" => (DAEMON_SET_COLUMNS, daemon_set_cells),
        "jobs" => (jobs::JOB_COLUMNS, jobs::job_cells),
        "horizontalpodautoscalers" => (AUTOSCALER_COLUMNS, autoscaler_cells),
        "replicationcontrollers" => (REPLICATION_CONTROLLER_COLUMNS, replication_controller_cells),
        "secrets" => (SECRET_COLUMNS, secret_cells),
        "configmaps" => (CONFIG_MAP_COLUMNS, config_map_cells),
        "serviceaccounts" => (SERVICE_ACCOUNT_COLUMNS, service_account_cells),
        "events" => (EVENT_COLUMNS, event_cells),
        "rolebindings" | "clusterrolebindings" => (rbac::BINDING_COLUMNS, rbac::binding_cells),
        _ => return DEFAULT,
    };
    Printer { columns, cells }
}

// ---------------------------------------------------------------------------------------
// Field helpers: paths are dot-separated keys; missing or mistyped fields read as empty.

fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, key| &v[key])
}

/// The string at `path`, or `""`.
fn text<'a>(v: &'a Value, path: &str) -> &'a str {
    at(v, path).as_str().unwrap_or_default()
}

/// The integer at `path`, or 0.
fn int(v: &Value, path: &str) -> i64 {
    at(v, path).as_i64().unwrap_or_default()
}

/// The array at `path`, or an empty slice.
fn list<'a>(v: &'a Value, path: &str) -> &'a [Value] {
    at(v, path).as_array().map_or(&[], Vec::as_slice)
}

/// The number of entries of the map at `path`.
fn entries(v: &Value, path: &str) -> usize {
    at(v, path).as_object().map_or(0, Map::len)
}

/// `value`, or `fallback` when `value` is empty.
fn or<'a>(value: &'a str, fallback: &'a str) -> &'a str {
    if value.is_empty() {
        fallback
    } else {
        value
    }
}

fn name(obj: &Value) -> &str {
    text(obj, "metadata.name")
}

fn is_true(condition: &Value) -> bool {
    text(condition, "status") == "True"
}

/// Whether the object has a condition of type `kind` that satisfies `test`.
fn has_condition(obj: &Value, kind: &str, test: fn(&Value) -> bool) -> bool {
    let conditions = list(obj, "status.conditions");
    conditions
        .iter()
        .any(|c| text(c, "type") == kind && test(c))
}

fn parse_time(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}

fn since(t: OffsetDateTime, now: OffsetDateTime) -> String {
    human_duration(now - t)
}

/// The object's age, `<unknown>` without a creation timestamp.
fn age(obj: &Value, now: OffsetDateTime) -> String {
    match parse_time(text(obj, "metadata.creationTimestamp")) {
        Some(created) => since(created, now),
        None => "<unknown>".to_owned(),
    }
}

/// The creation timestamp in UTC to the second; Go's zero time when missing.
fn created_at(obj: &Value) -> String {
    let zero = time::macros::datetime!(0001-01-01 0:00 UTC);
    let t = parse_time(text(obj, "metadata.creationTimestamp")).unwrap_or(zero);
    let t = t.to_offset(UtcOffset::UTC);
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_default()
}

/// The API group of an `apiVersion` (`""` for the core group).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// Whether kube-apiserver serves a group itself rather than through a CRD.
fn is_builtin_group(group: &str) -> bool {
    const PLAIN: &str = "apps batch autoscaling policy extensions";
    const K8S_IO: &str = "admissionregistration apiextensions apiregistration authentication authorization certificates coordination discovery events flowcontrol.apiserver internal.apiserver networking node rbac.authorization resource scheduling storage storagemigration";
    match group.strip_suffix(".k8s.io") {
        Some(prefix) => K8S_IO.split(' ').any(|g| g == prefix),
        None => group.is_empty() || PLAIN.split(' ').any(|g| g == group),
    }
}

#[cfg(test)]
mod tests;
