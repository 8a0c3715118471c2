//! Label and field selectors from a request's query, as one predicate over
//! objects, with the fields each kind can be selected by.

use serde_json::{json, Value};

use super::request::Query;
use crate::registry::{Resource, Served};
use crate::selector::{FieldSelector, LabelSelector, SelectorError};
use crate::status::ApiError;

/// Label and field selectors from the query, as one predicate.
pub struct Filter {
    resource: Served,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    /// The selectors of a list, watch or deletecollection of `resource`. A
    /// field the resource cannot be selected by is a 400, worded as the
    /// API server's field label conversion words it.
    pub fn from_query(resource: Served, query: &Query) -> Result<Filter, ApiError> {
        let bad = |e: SelectorError| ApiError::BadRequest(e.to_string());
        let fields =
            FieldSelector::parse(query.get("fieldSelector").unwrap_or_default()).map_err(bad)?;
        for path in fields.paths() {
            check_field(&resource, path)?;
        }
        Ok(Filter {
            resource,
            labels: LabelSelector::parse(query.get("labelSelector").unwrap_or_default())
                .map_err(bad)?,
            fields,
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(&obj["metadata"]["labels"])
            && (self.fields.is_empty()
                || self.fields.matches(&selectable_fields(&self.resource, obj)))
    }
}

/// Field paths read as they stand in the object, and those derived.
type KindFields = (&'static [&'static str], &'static [&'static str]);

/// The fields a kind registers a field label conversion for, besides
/// `metadata.name` and (for a namespaced kind) `metadata.namespace`: those
/// read as they stand in the object, then those [`selectable_fields`]
/// derives. None for the kinds that take apimachinery's default, the two
/// metadata fields alone.
fn kind_fields(kind: &str) -> Option<KindFields> {
    Some(match kind {
        "Pod" => (
            &[
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "status.phase",
                "status.nominatedNodeName",
            ],
            // `spec.host` is what old v1 clients send for spec.nodeName;
            // `status.podIPs` is accepted but never set (it reads as "").
            &[
                "spec.nodeName",
                "spec.host",
                "spec.hostNetwork",
                "status.podIP",
                "status.podIPs",
            ],
        ),
        "Node" => (&[], &["spec.unschedulable"]),
        "Event" => (
            &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "type",
            ],
            &["source"],
        ),
        "Namespace" => (&["status.phase"], &[]),
        "Secret" => (&["type"], &[]),
        "Service" => (&["spec.clusterIP", "spec.type"], &[]),
        _ => return None,
    })
}

fn check_field(resource: &Resource, path: &str) -> Result<(), ApiError> {
    match kind_fields(resource.builtin_kind()) {
        Some((plain, derived)) => {
            let known = path == "metadata.name"
                || (resource.namespaced && path == "metadata.namespace")
                || plain.contains(&path)
                || derived.contains(&path);
            if known {
                Ok(())
            } else {
                Err(ApiError::BadRequest(format!(
                    "field label not supported: {path}"
                )))
            }
        }
        None if ["metadata.name", "metadata.namespace"].contains(&path) => Ok(()),
        None => Err(ApiError::BadRequest(format!(
            "{path:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        ))),
    }
}

/// The field set a selector is matched against, as each kind's
/// `ToSelectableFields` builds it: values as strings, defaults filled
/// (`spec.hostNetwork` is "false" when unset), `metadata.namespace` only
/// for namespaced kinds, and fields with no value there reading as "".
fn selectable_fields(resource: &Resource, obj: &Value) -> Value {
    let text = |path: &str| -> String {
        match obj.pointer(&format!("/{}", path.replace('.', "/"))) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        }
    };
    let mut fields: Vec<(&str, String)> = vec![("metadata.name", text("metadata.name"))];
    if resource.namespaced {
        fields.push(("metadata.namespace", text("metadata.namespace")));
    }
    let plain = kind_fields(resource.builtin_kind()).map_or(&[][..], |(plain, _)| plain);
    fields.extend(plain.iter().map(|f| (*f, text(f))));
    match resource.builtin_kind() {
        "Pod" => {
            let node = text("spec.nodeName");
            fields.push(("spec.host", node.clone()));
            fields.push(("spec.nodeName", node));
            let host_network = obj["spec"]["hostNetwork"] == json!(true);
            fields.push(("spec.hostNetwork", host_network.to_string()));
            let ip = obj["status"]["podIPs"][0]["ip"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| text("status.podIP"));
            fields.push(("status.podIP", ip));
        }
        "Node" => {
            let unschedulable = obj["spec"]["unschedulable"] == json!(true);
            fields.push(("spec.unschedulable", unschedulable.to_string()));
        }
        "Event" => {
            let mut source = text("source.component");
            if source.is_empty() {
                source = text("reportingComponent");
            }
            fields.push(("source", source));
        }
        _ => {}
    }
    let mut view = json!({});
    for (path, value) in fields {
        let mut slot = &mut view;
        for segment in path.split('.') {
            slot = &mut slot[segment];
        }
        *slot = json!(value);
    }
    view
}
