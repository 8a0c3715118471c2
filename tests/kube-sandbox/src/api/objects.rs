//! GET, LIST, POST, PUT, PATCH and DELETE of objects and their `status` and
//! `scale` subresources.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::request::{Path, Query};
use super::table::{self, IncludeObject};
use super::{json, Api};
use crate::patch::{self, PatchType};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{self, ApiError};
use crate::store::{DeleteOptions, Deleted, Part};

pub struct Request<'a> {
    pub api: &'a Api,
    pub path: Path,
    pub query: Query,
    pub accept: String,
    pub content_type: String,
    pub body: Bytes,
}

impl Request<'_> {
    fn name(&self) -> Result<&str, ApiError> {
        self.path.name.as_deref().ok_or(ApiError::MethodNotAllowed)
    }

    fn namespace(&self) -> &str {
        self.path.namespace_or_default()
    }

    fn body_json(&self) -> Result<Value, ApiError> {
        serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::BadRequest(format!("the request body is not valid JSON: {e}")))
    }

    fn part(&self) -> Result<Part, ApiError> {
        match self.path.subresource.as_deref() {
            None | Some("finalize") => Ok(Part::Main),
            Some("status") => Ok(Part::Status),
            Some(_) => Err(ApiError::MethodNotAllowed),
        }
    }

    fn reject_dry_run(&self) -> Result<(), ApiError> {
        match self.query.get("dryRun") {
            Some(v) if !v.is_empty() => Err(ApiError::BadRequest(
                "dryRun is not supported by kube-sandbox".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Answers with the object, or as a one-row Table when kubectl asked.
    fn respond(&self, code: StatusCode, obj: &Value) -> Response {
        if table::wants_table(&self.accept) {
            let include = IncludeObject::from_query(self.query.get("includeObject"));
            let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
            let t = table::to_table(
                self.path.resource.plural,
                std::slice::from_ref(obj),
                include,
                meta,
                now(),
            );
            return json(code, &t);
        }
        json(code, obj)
    }
}

pub fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

/// Label and field selectors from the query, as one predicate.
pub struct Filter {
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    pub fn from_query(query: &Query) -> Result<Filter, ApiError> {
        let bad = |e: crate::selector::SelectorError| ApiError::BadRequest(e.to_string());
        Ok(Filter {
            labels: LabelSelector::parse(query.get("labelSelector").unwrap_or_default())
                .map_err(bad)?,
            fields: FieldSelector::parse(query.get("fieldSelector").unwrap_or_default())
                .map_err(bad)?,
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(&obj["metadata"]["labels"]) && self.fields.matches(obj)
    }
}

pub fn get(req: &Request) -> Result<Response, ApiError> {
    let res = req.path.resource;
    let Some(name) = &req.path.name else {
        return list(req);
    };
    let obj = req.api.store.get(res, req.namespace(), name)?;
    match req.path.subresource.as_deref() {
        Some("scale") => Ok(json(StatusCode::OK, &scale_of(&obj))),
        _ => Ok(req.respond(StatusCode::OK, &obj)),
    }
}

fn list(req: &Request) -> Result<Response, ApiError> {
    let res = req.path.resource;
    let filter = Filter::from_query(&req.query)?;
    let (items, rv) = req.api.store.list(res, req.path.namespace.as_deref());
    let items: Vec<Value> = items.into_iter().filter(|o| filter.matches(o)).collect();
    let meta = json!({"resourceVersion": rv.to_string()});
    if table::wants_table(&req.accept) {
        let include = IncludeObject::from_query(req.query.get("includeObject"));
        return Ok(json(
            StatusCode::OK,
            &table::to_table(res.plural, &items, include, meta, now()),
        ));
    }
    let body = json!({
        "kind": format!("{}List", res.kind),
        "apiVersion": res.api_version(),
        "metadata": meta,
        "items": items,
    });
    Ok(json(StatusCode::OK, &body))
}

pub fn create(req: &Request) -> Result<Response, ApiError> {
    req.reject_dry_run()?;
    if req.path.name.is_some() || (req.path.resource.namespaced && req.path.namespace.is_none()) {
        return Err(ApiError::MethodNotAllowed);
    }
    let obj = req.body_json()?;
    let created = req
        .api
        .store
        .create(req.path.resource, req.namespace(), obj)?;
    Ok(json(StatusCode::CREATED, &created))
}

pub fn update(req: &Request) -> Result<Response, ApiError> {
    req.reject_dry_run()?;
    let name = req.name()?;
    let res = req.path.resource;
    let body = req.body_json()?;
    if req.path.subresource.as_deref() == Some("scale") {
        return scale(req, |_| Ok(body["spec"]["replicas"].clone()));
    }
    let updated = req
        .api
        .store
        .update(res, req.namespace(), name, body, req.part()?)?;
    Ok(json(StatusCode::OK, &updated))
}

pub fn patch(req: &Request) -> Result<Response, ApiError> {
    req.reject_dry_run()?;
    let name = req.name()?.to_string();
    let res = req.path.resource;
    let ty = PatchType::from_content_type(&req.content_type)
        .ok_or_else(|| ApiError::UnsupportedMediaType(PatchType::accepted().to_string()))?;
    let patch = req.body_json()?;
    if req.path.subresource.as_deref() == Some("scale") {
        return scale(req, |current| {
            let patched = patch::apply_patch("Scale", &current, &patch, ty).map_err(patch_error)?;
            Ok(patched["spec"]["replicas"].clone())
        });
    }
    let part = req.part()?;
    let pinned = !patch["metadata"]["resourceVersion"].is_null();
    for _ in 0..8 {
        let current = match req.api.store.get(res, req.namespace(), &name) {
            Err(ApiError::NotFound { .. }) if ty == PatchType::Apply => {
                let mut obj = patch.clone();
                obj["metadata"]["name"] = json!(name);
                let created = req.api.store.create(res, req.namespace(), obj)?;
                return Ok(json(StatusCode::CREATED, &created));
            }
            other => other?,
        };
        let mut new = patch::apply_patch(res.kind, &current, &patch, ty).map_err(patch_error)?;
        if !pinned {
            new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        }
        match req.api.store.update(res, req.namespace(), &name, new, part) {
            Err(ApiError::Conflict(_)) if !pinned => continue,
            result => return Ok(json(StatusCode::OK, &result?)),
        }
    }
    Err(ApiError::Conflict(format!(
        "Operation cannot be fulfilled on {} \"{name}\": the object kept changing while the patch was applied",
        res.plural
    )))
}

fn patch_error(e: patch::PatchError) -> ApiError {
    if e.is_invalid() {
        ApiError::invalid("", "", e.to_string())
    } else {
        ApiError::BadRequest(e.to_string())
    }
}

/// The `scale` subresource: reads and writes `spec.replicas` through an
/// `autoscaling/v1` Scale.
fn scale(
    req: &Request,
    replicas: impl FnOnce(Value) -> Result<Value, ApiError>,
) -> Result<Response, ApiError> {
    let name = req.name()?;
    let res = req.path.resource;
    let current = req.api.store.get(res, req.namespace(), name)?;
    let wanted = replicas(scale_of(&current))?;
    let Some(wanted) = wanted.as_i64().filter(|n| *n >= 0) else {
        return Err(ApiError::invalid(
            "Scale",
            name,
            "spec.replicas: Invalid value: must be a non-negative integer",
        ));
    };
    let updated = req.api.store.modify(res, req.namespace(), name, |obj| {
        obj["spec"]["replicas"] = json!(wanted);
        true
    })?;
    Ok(json(StatusCode::OK, &scale_of(&updated)))
}

fn scale_of(obj: &Value) -> Value {
    let selector = LabelSelector::from_object(&obj["spec"]["selector"])
        .map(|_| selector_string(&obj["spec"]["selector"]["matchLabels"]))
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": obj["metadata"]["name"],
            "namespace": obj["metadata"]["namespace"],
            "uid": obj["metadata"]["uid"],
            "resourceVersion": obj["metadata"]["resourceVersion"],
            "creationTimestamp": obj["metadata"]["creationTimestamp"],
        },
        "spec": {"replicas": obj["spec"]["replicas"]},
        "status": {"replicas": obj["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector},
    })
}

fn selector_string(labels: &Value) -> String {
    labels
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

pub fn delete(req: &Request) -> Result<Response, ApiError> {
    req.reject_dry_run()?;
    let opts = delete_options(req)?;
    let res = req.path.resource;
    let Some(name) = &req.path.name else {
        return delete_collection(req, &opts);
    };
    match req.api.store.delete(res, req.namespace(), name, &opts)? {
        Deleted::Gone(obj) | Deleted::Terminating(obj) => Ok(json(StatusCode::OK, &obj)),
    }
}

fn delete_collection(req: &Request, opts: &DeleteOptions) -> Result<Response, ApiError> {
    let res = req.path.resource;
    let filter = Filter::from_query(&req.query)?;
    let (items, _) = req.api.store.list(res, req.path.namespace.as_deref());
    let mut deleted = Vec::new();
    for obj in items.into_iter().filter(|o| filter.matches(o)) {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        match req.api.store.delete(res, ns, name, opts) {
            Ok(Deleted::Gone(o) | Deleted::Terminating(o)) => deleted.push(o),
            Err(ApiError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    if deleted.is_empty() {
        return Ok(json(StatusCode::OK, &status::success()));
    }
    let body = json!({"kind": format!("{}List", res.kind), "apiVersion": res.api_version(), "metadata": {}, "items": deleted});
    Ok(json(StatusCode::OK, &body))
}

/// DeleteOptions from the body (kubectl, kube-rs) or the query.
fn delete_options(req: &Request) -> Result<DeleteOptions, ApiError> {
    let body: Value = if req.body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        req.body_json()?
    };
    let grace = match body["gracePeriodSeconds"].as_i64() {
        Some(g) => Some(g),
        None => req.query.number("gracePeriodSeconds")?,
    };
    let propagation = body["propagationPolicy"]
        .as_str()
        .or_else(|| req.query.get("propagationPolicy"))
        .unwrap_or("Background");
    if !["Background", "Foreground", "Orphan"].contains(&propagation) {
        return Err(ApiError::BadRequest(format!(
            "unknown propagationPolicy {propagation:?}"
        )));
    }
    let orphan = propagation == "Orphan" || body["orphanDependents"] == json!(true);
    Ok(DeleteOptions {
        grace_seconds: grace,
        orphan,
        uid: body["preconditions"]["uid"].as_str().map(str::to_string),
        resource_version: body["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
    })
}
