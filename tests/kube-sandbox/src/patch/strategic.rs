//! Strategic merge patch, as `k8s.io/apimachinery/pkg/util/strategicpatch` applies it.

use std::borrow::Borrow;
use std::fmt;

use serde_json::Value;

use super::{object, Object, PatchError, Result};

pub(super) fn strategic_merge(
    kind: &str,
    target: &Value,
    patch: &Value,
    name: &'static str,
) -> Result<Value> {
    let patch = object(patch, name)?;
    let live = target.as_object().cloned().unwrap_or_default();
    merge_map(live, patch, Schema::root(kind), &Path::Root).map(Value::Object)
}

/// The Go type behind a JSON map, as far as strategic merge patch cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schema {
    /// No field below has a merge strategy.
    Opaque,
    /// The top level of an object whose `spec` and `status` have these types.
    Root(&'static (Schema, Schema)),
    ObjectMeta,
    PodTemplateSpec,
    PodSpec,
    /// `Container`, and `EphemeralContainer` which has the same tags.
    Container,
    PodStatus,
    /// The spec of a workload: Deployment, StatefulSet, Job, CronJob, ...
    WorkloadSpec,
    /// CronJob's `spec.jobTemplate`.
    JobTemplateSpec,
    ServiceSpec,
    NodeSpec,
    NodeStatus,
    /// A status whose only merging list is `conditions`.
    ConditionedStatus,
}

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    /// No `patchStrategy`: the patch's list replaces the live one.
    Replace,
    /// `patchStrategy:"merge"` on a list of primitives: the lists' union.
    Union,
    /// `patchStrategy:"merge"` with a `patchMergeKey`: element-wise by key.
    Keyed(&'static str),
}

/// A field's merge strategy, and the schema of its value (or elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field(Strategy, Schema);

impl Schema {
    fn root(kind: &str) -> Self {
        use Schema::*;
        Root(match kind {
            "Pod" => &(PodSpec, PodStatus),
            "Deployment"
            | "ReplicaSet"
            | "StatefulSet"
            | "DaemonSet"
            | "Job"
            | "CronJob"
            | "ReplicationController" => &(WorkloadSpec, ConditionedStatus),
            "Service" => &(ServiceSpec, ConditionedStatus),
            "Node" => &(NodeSpec, NodeStatus),
            "PersistentVolumeClaim" | "Namespace" => &(Opaque, ConditionedStatus),
            _ => &(Opaque, Opaque),
        })
    }

    /// Field `name`'s strategy, from the struct tags of `k8s.io/api`. Lists
    /// Kubernetes gives no strategy (pod `tolerations` and `readinessGates`,
    /// container `args`, `command` and `envFrom`, PVC `accessModes`, node
    /// `taints`, container statuses, ...) are replaced, as in Kubernetes.
    fn field(self, name: &str) -> Field {
        use Schema::*;
        use Strategy::{Keyed, Replace, Union};
        match (self, name) {
            (Root(_) | PodTemplateSpec | JobTemplateSpec, "metadata") => Field(Replace, ObjectMeta),
            (Root(_) | WorkloadSpec, "template") => Field(Replace, PodTemplateSpec),
            (Root(&(spec, _)), "spec") => Field(Replace, spec),
            (Root(&(_, status)), "status") => Field(Replace, status),
            (WorkloadSpec, "jobTemplate") => Field(Replace, JobTemplateSpec),
            (PodTemplateSpec, "spec") => Field(Replace, PodSpec),
            (JobTemplateSpec, "spec") => Field(Replace, WorkloadSpec),
            (ObjectMeta, "finalizers") | (NodeSpec, "podCIDRs") => Field(Union, Opaque),
            (ObjectMeta, "ownerReferences") => Field(Keyed("uid"), Opaque),
            (PodSpec, "containers" | "initContainers" | "ephemeralContainers") => {
                Field(Keyed("name"), Container)
            }
            (PodSpec, "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates")
            | (Container, "env")
            | (PodStatus, "resourceClaimStatuses") => Field(Keyed("name"), Opaque),
            (PodSpec, "hostAliases") | (PodStatus, "podIPs" | "hostIPs") => {
                Field(Keyed("ip"), Opaque)
            }
            (PodSpec, "topologySpreadConstraints") => Field(Keyed("topologyKey"), Opaque),
            (Container, "ports") => Field(Keyed("containerPort"), Opaque),
            (Container, "volumeMounts") => Field(Keyed("mountPath"), Opaque),
            (Container, "volumeDevices") => Field(Keyed("devicePath"), Opaque),
            (ServiceSpec, "ports") => Field(Keyed("port"), Opaque),
            (PodStatus | NodeStatus | ConditionedStatus, "conditions")
            | (NodeStatus, "addresses") => Field(Keyed("type"), Opaque),
            _ => Field(Replace, Opaque),
        }
    }
}

/// Where a strategic merge is, for error messages: built on the stack as
/// the merge descends, rendered only on error.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Field(&'a Path<'a>, &'a str),
    Item(&'a Path<'a>, usize),
}

impl Path<'_> {
    fn malformed(&self, reason: impl Into<String>) -> PatchError {
        let (path, reason) = (self.to_string(), reason.into());
        PatchError::MalformedStrategicPatch { path, reason }
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => f.write_str("the top level"),
            Path::Field(Path::Root, name) => f.write_str(name),
            Path::Field(parent, name) => write!(f, "{parent}.{name}"),
            Path::Item(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_LIST: &str = "$deleteFromPrimitiveList/";

/// A `$patch` directive, in a map or a list element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Directive {
    Replace,
    Delete,
    Merge,
}

fn directive(patch: &Object, path: &Path) -> Result<Option<Directive>> {
    let Some(value) = patch.get(PATCH) else {
        return Ok(None);
    };
    match value.as_str() {
        Some("replace") => Ok(Some(Directive::Replace)),
        Some("delete") => Ok(Some(Directive::Delete)),
        Some("merge") => Ok(Some(Directive::Merge)),
        _ => Err(path.malformed(format!("unknown $patch directive {value}"))),
    }
}

/// Merges a patch map into a live one. `$patch: replace` puts the patch in
/// place of the live map and `$patch: delete` empties it; Kubernetes
/// rejects `$patch: merge`, which is taken here as the default it names.
fn merge_map(live: Object, patch: &Object, schema: Schema, path: &Path) -> Result<Object> {
    match directive(patch, path)? {
        None | Some(Directive::Merge) => merge_fields(live, patch, schema, path),
        Some(Directive::Replace) => merge_fields(Object::new(), patch, schema, path),
        Some(Directive::Delete) => Ok(Object::new()),
    }
}

/// Merges a patch map's fields into a live map (`$patch` is the caller's):
/// `$retainKeys` first, then each `$setElementOrder` with the list it
/// orders, then the other fields, and `$deleteFromPrimitiveList` last.
fn merge_fields(mut live: Object, patch: &Object, schema: Schema, path: &Path) -> Result<Object> {
    let (mut orders, mut deletions) = (Vec::new(), Vec::new());
    for (key, value) in patch.iter().filter(|(key, _)| key.starts_with('$')) {
        let suffix = |prefix| {
            key.strip_prefix(prefix)
                .filter(|name: &&str| !name.is_empty())
        };
        if let Some(name) = suffix(SET_ELEMENT_ORDER) {
            orders.push((name, value));
        } else if let Some(name) = suffix(DELETE_FROM_LIST) {
            deletions.push((name, value));
        } else if key == RETAIN_KEYS {
            retain_keys(&mut live, value, patch, path)?;
        } else if key != PATCH {
            return Err(path.malformed(format!("unknown directive {key:?}")));
        }
    }
    for &(name, order) in &orders {
        let current = match live.get_mut(name) {
            Some(Value::Array(list)) => Some(std::mem::take(list)),
            _ => None,
        };
        let path = Path::Field(path, name);
        let field = schema.field(name);
        if let Some(list) = ordered_list(current, patch.get(name), order, field, &path)? {
            live.insert(name.to_owned(), list.into());
        }
    }
    for (name, value) in patch.iter().filter(|(key, _)| !key.starts_with('$')) {
        if value.is_null() {
            live.remove(name);
        } else if orders.iter().all(|&(ordered, _)| ordered != name) {
            let old = live.remove(name).unwrap_or_default();
            let merged = merge_value(old, value, schema.field(name), &Path::Field(path, name))?;
            live.insert(name.clone(), merged);
        }
    }
    for (name, values) in deletions {
        let Value::Array(values) = values else {
            return Err(path.malformed(format!("{DELETE_FROM_LIST}{name} must be a list")));
        };
        if let Some(Value::Array(list)) = live.get_mut(name) {
            list.retain(|element| !values.contains(element));
        }
    }
    Ok(live)
}

/// Merges two values of a field: maps and lists by the field's strategy;
/// anything else (a scalar, a change of type) is replaced. Values new to
/// the object are merged into nothing, which drops their `null`s and
/// directives: neither may reach the stored object.
fn merge_value(live: Value, patch: &Value, field: Field, path: &Path) -> Result<Value> {
    let schema = field.1;
    match (live, patch) {
        (Value::Object(live), Value::Object(patch)) => {
            merge_map(live, patch, schema, path).map(Value::from)
        }
        (_, Value::Object(patch)) => merge_map(Object::new(), patch, schema, path).map(Value::from),
        (Value::Array(live), Value::Array(patch)) => {
            merge_list(live, patch, field, path).map(Value::from)
        }
        (_, Value::Array(patch)) => merge_list(Vec::new(), patch, field, path).map(Value::from),
        (_, scalar) => Ok(scalar.clone()),
    }
}

fn merge_list(live: Vec<Value>, patch: &[Value], field: Field, path: &Path) -> Result<Vec<Value>> {
    let Field(strategy, schema) = field;
    if strategy == Strategy::Replace {
        return replace_list(patch, schema, path);
    }
    // Like Kubernetes, the elements decide between union and keyed merge.
    match (all_objects(&live, patch, path)?, strategy) {
        (None, _) => Ok(live),
        (Some(false), _) => Ok(union(live, patch)),
        (Some(true), Strategy::Keyed(key)) => merge_keyed(live, patch, key, schema, path),
        (Some(true), _) => Err(path.malformed("a list of objects needs a merge key to merge")),
    }
}

/// Whether the elements of a merging list are objects rather than scalars:
/// they must all be of one type (`None` if there are none).
fn all_objects(live: &[Value], patch: &[Value], path: &Path) -> Result<Option<bool>> {
    let mut elements = live.iter().chain(patch);
    let Some(first) = elements.next() else {
        return Ok(None);
    };
    for element in std::iter::once(first).chain(elements) {
        if element.is_array() {
            return Err(PatchError::ListOfLists(path.to_string()));
        }
        if std::mem::discriminant(element) != std::mem::discriminant(first) {
            return Err(path.malformed("the list's elements are not all of one type"));
        }
    }
    Ok(Some(first.is_object()))
}

/// A list without a merge strategy is the patch's; its `$patch` elements
/// have nothing to act on and are dropped.
fn replace_list(patch: &[Value], schema: Schema, path: &Path) -> Result<Vec<Value>> {
    let mut list = Vec::with_capacity(patch.len());
    for (index, element) in patch.iter().enumerate() {
        let path = Path::Item(path, index);
        let Value::Object(element) = element else {
            list.push(element.clone());
            continue;
        };
        if !is_marker(element)
            && matches!(directive(element, &path)?, None | Some(Directive::Merge))
        {
            list.push(merge_fields(Object::new(), element, schema, &path)?.into());
        }
    }
    Ok(list)
}

fn is_marker(element: &Object) -> bool {
    element.len() == 1 && element.contains_key(PATCH)
}

/// Merges lists of objects by `key`: a patch element merges into the live
/// element with its key, or is added. `$patch: delete` in an element
/// deletes the live elements with its key; `$patch: replace` makes the
/// patch's elements the whole list.
fn merge_keyed(
    mut live: Vec<Value>,
    patch: &[Value],
    key: &str,
    schema: Schema,
    path: &Path,
) -> Result<Vec<Value>> {
    let live_order: Vec<Value> = live.iter().filter_map(|e| e.get(key).cloned()).collect();
    let mut wanted = Vec::with_capacity(patch.len());
    for (index, element) in patch.iter().enumerate() {
        let path = Path::Item(path, index);
        let element = element
            .as_object()
            .ok_or_else(|| path.malformed("expected an object"))?;
        match directive(element, &path)? {
            Some(Directive::Delete) => {
                let id = merge_key(element, key, &path)?;
                live.retain(|e| e.get(key) != Some(id));
            }
            Some(Directive::Replace) => live.clear(),
            Some(Directive::Merge) if is_marker(element) => {}
            None | Some(Directive::Merge) => wanted.push((path, element)),
        }
    }
    let mut patch_order = Vec::with_capacity(wanted.len());
    for (path, element) in wanted {
        let id = merge_key(element, key, &path)?;
        match live.iter_mut().find(|e| e.get(key) == Some(id)) {
            Some(slot) => {
                let old = match std::mem::take(slot) {
                    Value::Object(old) => old,
                    _ => Object::new(),
                };
                *slot = merge_fields(old, element, schema, &path)?.into();
            }
            None => live.push(merge_fields(Object::new(), element, schema, &path)?.into()),
        }
        patch_order.push(id);
    }
    Ok(order(live, &patch_order, &live_order, Some(key)))
}

fn merge_key<'e>(element: &'e Object, key: &str, path: &Path) -> Result<&'e Value> {
    let missing = || path.malformed(format!("the element has no merge key {key:?}"));
    element.get(key).ok_or_else(missing)
}

/// The union of two lists of primitives, without duplicates.
fn union(live: Vec<Value>, patch: &[Value]) -> Vec<Value> {
    let mut merged: Vec<Value> = Vec::with_capacity(live.len() + patch.len());
    for element in live.iter().chain(patch) {
        if !merged.contains(element) {
            merged.push(element.clone());
        }
    }
    order(merged, patch, &live, None)
}

/// What identifies a list element: its merge key's value, or itself.
fn identity<'v>(element: &'v Value, key: Option<&str>) -> Option<&'v Value> {
    key.map_or(Some(element), |key| element.get(key))
}

fn position<V: Borrow<Value>>(element: &Value, among: &[V], key: Option<&str>) -> Option<usize> {
    let id = identity(element, key)?;
    among.iter().position(|other| other.borrow() == id)
}

/// Orders a merged list as Kubernetes does: the elements the patch names in
/// the patch's order, the others in their live order, and one of the others
/// goes before a patch element only if the live list had it before that
/// element. So an element new to the list goes before the live-only
/// elements that are not ordered before it.
fn order<P, L>(
    merged: Vec<Value>,
    patch_order: &[P],
    live_order: &[L],
    key: Option<&str>,
) -> Vec<Value>
where
    P: Borrow<Value>,
    L: Borrow<Value>,
{
    let (mut named, mut others) = (Vec::new(), Vec::new());
    for element in merged {
        let in_live = position(&element, live_order, key);
        match position(&element, patch_order, key) {
            Some(in_patch) => named.push((in_patch, in_live, element)),
            None => others.push((in_live, element)),
        }
    }
    named.sort_by_key(|&(in_patch, _, _)| in_patch);
    others.sort_by_key(|&(in_live, _)| in_live.unwrap_or(usize::MAX));
    let mut others = others.into_iter().peekable();
    let mut list = Vec::with_capacity(named.len() + others.len());
    for (_, in_live, element) in named {
        let before =
            |&(other, _): &(Option<usize>, Value)| other.zip(in_live).is_some_and(|(o, n)| o < n);
        list.extend(std::iter::from_fn(|| {
            others.next_if(before).map(|(_, other)| other)
        }));
        list.push(element);
    }
    list.extend(others.map(|(_, other)| other));
    list
}

/// `$setElementOrder/<field>`, sent by kubectl with the list it orders:
/// the field's list merged with the patch's, if any, in the directive's
/// order, live-only elements keeping their live order. `None` when there is
/// no list at all.
fn ordered_list(
    current: Option<Vec<Value>>,
    patch: Option<&Value>,
    order_list: &Value,
    field: Field,
    path: &Path,
) -> Result<Option<Vec<Value>>> {
    let key = match field.0 {
        Strategy::Keyed(key) => Some(key),
        Strategy::Replace | Strategy::Union => None,
    };
    let order_list = order_list
        .as_array()
        .ok_or_else(|| path.malformed("$setElementOrder must be a list"))?;
    let wanted = order_list.iter().map(|e| identity(e, key));
    let wanted: Vec<&Value> = wanted
        .collect::<Option<_>>()
        .ok_or_else(|| path.malformed("$setElementOrder needs merge keys"))?;
    let patch = match patch {
        None => None,
        Some(Value::Array(list)) => {
            check_order(list, &wanted, key, path)?;
            Some(list)
        }
        Some(_) => return Err(path.malformed("$setElementOrder orders a field that is not a list")),
    };
    let live_order: Vec<Value> = current
        .iter()
        .flatten()
        .filter_map(|e| identity(e, key).cloned())
        .collect();
    let merged = match (current, patch) {
        (None, None) => return Ok(None),
        (Some(current), None) => current,
        (current, Some(list)) => merge_list(current.unwrap_or_default(), list, field, path)?,
    };
    Ok(Some(order(merged, &wanted, &live_order, key)))
}

/// The patch's elements must come in `$setElementOrder` in the same order.
fn check_order(list: &[Value], wanted: &[&Value], key: Option<&str>, path: &Path) -> Result<()> {
    let mut rest = wanted.iter();
    for element in list.iter().filter(|e| e.get(PATCH).is_none()) {
        let id =
            identity(element, key).ok_or_else(|| path.malformed("an element has no merge key"))?;
        if !wanted.is_empty() && !rest.any(|w| *w == id) {
            return Err(path.malformed("the list is not in the order of its $setElementOrder"));
        }
    }
    Ok(())
}

/// `$retainKeys`: live fields not in the list are cleared, and the patch
/// may not set any other.
fn retain_keys(live: &mut Object, keep: &Value, patch: &Object, path: &Path) -> Result<()> {
    let keep: Option<Vec<&str>> = keep
        .as_array()
        .and_then(|keep| keep.iter().map(Value::as_str).collect());
    let keep = keep.ok_or_else(|| path.malformed("$retainKeys must be a list of field names"))?;
    let kept = |name: &str| keep.contains(&name);
    let set = |(name, value): &(&String, &Value)| !name.starts_with('$') && !value.is_null();
    if let Some((name, _)) = patch.iter().filter(set).find(|(name, _)| !kept(name)) {
        return Err(path.malformed(format!("{name:?} is set but not in $retainKeys")));
    }
    live.retain(|name, _| kept(name));
    Ok(())
}
