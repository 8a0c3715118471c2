//! GET, LIST, POST, PUT, PATCH and DELETE of objects and their `status` and
//! `scale` subresources.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use time::OffsetDateTime;

use super::filter::Filter;
use super::protobuf::{self, ProtobufError};
use super::request::{Path, Query};
use super::table::{self, IncludeObject};
use super::{custom, json, Api};
use crate::auth::escalation;
use crate::auth::rbac::RBAC_GROUP;
use crate::auth::Identity;
use crate::patch::{self, PatchType};
use crate::registry::{rules, Resource};
use crate::selector::LabelSelector;
use crate::status::ApiError;
use crate::store::{stale, DeleteOptions, Deleted, Part};

pub struct Request<'a> {
    pub api: &'a Api,
    /// Who asks: writes of roles and bindings are checked for escalation.
    pub identity: &'a Identity,
    pub path: Path,
    pub query: Query,
    pub accept: String,
    pub content_type: String,
    pub body: Bytes,
}

impl Request<'_> {
    pub(super) fn name(&self) -> Result<&str, ApiError> {
        self.path.name.as_deref().ok_or(ApiError::MethodNotAllowed)
    }

    pub(super) fn namespace(&self) -> &str {
        self.path.namespace_or_default()
    }

    /// The body as JSON; a protobuf body (kubectl's generators send them)
    /// is decoded into the same JSON. A protobuf body of a kind without a
    /// schema is refused with 415: client-go does not retry it in JSON, so
    /// the message says what to do instead.
    pub(super) fn body_json(&self) -> Result<Value, ApiError> {
        if self.content_type.contains("protobuf") && self.path.resource.custom.is_some() {
            return Err(custom::protobuf_body(&self.path.resource, &self.body));
        }
        if self.content_type.contains("protobuf") {
            return protobuf::decode(&self.body).map_err(|e| match e {
                ProtobufError::Malformed(why) => ApiError::BadRequest(why),
                ProtobufError::UnsupportedKind { .. } => ApiError::UnsupportedMediaType(format!(
                    "application/json, and {} for {} (kube-sandbox has no protobuf schema for {e}: pipe `kubectl create ... --dry-run=client -o yaml` to `kubectl create --validate=false -f -` instead)",
                    protobuf::MEDIA_TYPE,
                    protobuf::supported_kinds().join(", ")
                )),
            });
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::BadRequest(format!("the request body is not valid JSON: {e}")))
    }

    /// The body of a POST or PUT, refused with 400 as the API server's
    /// decoder refuses what does not decode into the kind (Secret data that
    /// is not base64, a label that is not a string, ...).
    fn body_object(&self) -> Result<Value, ApiError> {
        let obj = self.body_json()?;
        let res = &self.path.resource;
        match rules::decode_problem(res, &obj) {
            Some(problem) => Err(ApiError::BadRequest(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: {problem}",
                kind = res.kind,
                version = res.version,
            ))),
            None => Ok(obj),
        }
    }

    fn part(&self) -> Result<Part, ApiError> {
        match self.path.subresource.as_deref() {
            None | Some("finalize") => Ok(Part::Main),
            Some("status") => Ok(Part::Status),
            Some(_) => Err(ApiError::MethodNotAllowed),
        }
    }

    /// The escalation check of a write of roles and bindings
    /// ([`escalation::check`]); `old` is the stored object on an update.
    fn confirm_no_escalation(&self, object: &Value, old: Option<&Value>) -> Result<(), ApiError> {
        let store = &self.api.store;
        escalation::check(
            store,
            self.identity,
            &self.path.resource,
            self.namespace(),
            object,
            old,
        )
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
            return json(code, &table::one_row(&self.path.resource, obj, include));
        }
        json(code, obj)
    }

    /// An object from the store as the request's version shows it.
    fn out(&self, obj: Value) -> Value {
        custom::present(&self.path.resource, obj)
    }
}

pub fn get(req: &Request) -> Result<Response, ApiError> {
    let res = &req.path.resource;
    let Some(name) = &req.path.name else {
        return list(req);
    };
    let obj = req.out(req.api.store.get(res, req.namespace(), name)?);
    match req.path.subresource.as_deref() {
        Some("scale") => Ok(json(StatusCode::OK, &scale_of(&obj))),
        _ => Ok(req.respond(StatusCode::OK, &obj)),
    }
}

fn list(req: &Request) -> Result<Response, ApiError> {
    let res = &req.path.resource;
    let (items, rv) = selected(req)?;
    if table::wants_table(&req.accept) {
        let include = IncludeObject::from_query(req.query.get("includeObject"));
        let meta = json!({"resourceVersion": rv.to_string()});
        let now = OffsetDateTime::now_utc();
        let table = table::resource_table(res, &items, include, meta, now);
        return Ok(json(StatusCode::OK, &table));
    }
    Ok(json(StatusCode::OK, &list_of(res, rv, items)))
}

/// The objects the request's path and selectors name, with the version
/// the list is consistent at.
fn selected(req: &Request) -> Result<(Vec<Value>, u64), ApiError> {
    let res = &req.path.resource;
    let filter = Filter::from_query(res.clone(), &req.query)?;
    let (items, rv) = req.api.store.list(res, req.path.namespace.as_deref());
    Ok((
        items
            .into_iter()
            .filter(|o| filter.matches(o))
            .map(|o| req.out(o))
            .collect(),
        rv,
    ))
}

/// A `<Kind>List` of `items` at version `rv`.
fn list_of(res: &Resource, rv: u64, items: Vec<Value>) -> Value {
    json!({
        "kind": res.list_kind(),
        "apiVersion": res.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items,
    })
}

pub fn create(req: &Request) -> Result<Response, ApiError> {
    req.reject_dry_run()?;
    if req.path.name.is_some() || (req.path.resource.namespaced && req.path.namespace.is_none()) {
        return Err(ApiError::MethodNotAllowed);
    }
    let obj = req.body_object()?;
    req.confirm_no_escalation(&obj, None)?;
    let created = req
        .api
        .store
        .create(&req.path.resource, req.namespace(), obj)?;
    Ok(json(StatusCode::CREATED, &req.out(created)))
}

pub fn update(req: &Request) -> Result<Response, ApiError> {
    req.reject_dry_run()?;
    let name = req.name()?;
    let res = &req.path.resource;
    if req.path.subresource.as_deref() == Some("scale") {
        let body = req.body_json()?;
        // A PUT carries the version it read: a stale one is a conflict.
        let pinned = body["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty());
        return scale(req, body, pinned);
    }
    let body = req.body_object()?;
    if res.group == RBAC_GROUP {
        let old = req.api.store.get(res, req.namespace(), name)?;
        req.confirm_no_escalation(&body, Some(&old))?;
    }
    let updated = req
        .api
        .store
        .update(res, req.namespace(), name, body, req.part()?)?;
    Ok(json(StatusCode::OK, &req.out(updated)))
}

pub fn patch(req: &Request) -> Result<Response, ApiError> {
    req.reject_dry_run()?;
    let name = req.name()?.to_string();
    let res = &req.path.resource;
    let ty = match res.custom {
        Some(_) => custom::patch_type(&req.content_type)?,
        None => PatchType::from_content_type(&req.content_type)
            .ok_or_else(|| ApiError::UnsupportedMediaType(PatchType::accepted().to_string()))?,
    };
    let patch = req.body_json()?;
    let pinned = !patch["metadata"]["resourceVersion"].is_null();
    if req.path.subresource.as_deref() == Some("scale") {
        let current = req.api.store.get(res, req.namespace(), &name)?;
        let patched =
            patch::apply_patch("Scale", &scale_of(&current), &patch, ty).map_err(patch_error)?;
        return scale(req, patched, pinned);
    }
    let part = req.part()?;
    for _ in 0..8 {
        let current = match req.api.store.get(res, req.namespace(), &name) {
            Err(ApiError::NotFound { .. }) if ty == PatchType::Apply => {
                let mut obj = patch.clone();
                obj["metadata"]["name"] = json!(name);
                undecodable_patch(res, &obj, &patch)?;
                req.confirm_no_escalation(&obj, None)?;
                let created = req.api.store.create(res, req.namespace(), obj)?;
                return Ok(json(StatusCode::CREATED, &req.out(created)));
            }
            other => other?,
        };
        let mut new =
            patch::apply_patch(res.builtin_kind(), &current, &patch, ty).map_err(patch_error)?;
        undecodable_patch(res, &new, &patch)?;
        req.confirm_no_escalation(&new, Some(&current))?;
        if !pinned {
            new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        }
        match req.api.store.update(res, req.namespace(), &name, new, part) {
            Err(ApiError::Conflict(_)) if !pinned => continue,
            result => return Ok(json(StatusCode::OK, &req.out(result?))),
        }
    }
    Err(ApiError::Conflict(format!(
        "Operation cannot be fulfilled on {} \"{name}\": the object kept changing while the patch was applied",
        res.plural
    )))
}

/// A patch whose result does not decode into the kind: the patch handler
/// answers 422 with the patch as the invalid value (where a POST or PUT of
/// the same object gets a 400).
fn undecodable_patch(res: &Resource, patched: &Value, patch: &Value) -> Result<(), ApiError> {
    match rules::decode_problem(res, patched) {
        Some(problem) => Err(ApiError::invalid(
            "",
            "",
            format!("patch: Invalid value: {:?}: {problem}", patch.to_string()),
        )),
        None => Ok(()),
    }
}

fn patch_error(e: patch::PatchError) -> ApiError {
    if e.is_invalid() {
        ApiError::invalid("", "", e.to_string())
    } else {
        ApiError::BadRequest(e.to_string())
    }
}

/// The `scale` subresource: writes `spec.replicas` from an
/// `autoscaling/v1` Scale. A `metadata.resourceVersion` in the Scale (when
/// `pinned`) must be the object's, and a `metadata.uid` its uid, or the
/// write is a 409, as the scale storage moves both onto the object.
fn scale(req: &Request, wanted: Value, pinned: bool) -> Result<Response, ApiError> {
    let name = req.name()?;
    let res = &req.path.resource;
    let replicas = match &wanted["spec"]["replicas"] {
        Value::Null => 0,
        Value::Number(n) => match n.as_i64() {
            Some(n) if n < 0 => {
                return Err(ApiError::invalid(
                    "Scale.autoscaling",
                    name,
                    format!(
                        "spec.replicas: Invalid value: {n}: must be greater than or equal to 0"
                    ),
                ))
            }
            Some(n) if n <= i64::from(i32::MAX) => n,
            _ => return Err(scale_type_error(&wanted["spec"]["replicas"])),
        },
        other => return Err(scale_type_error(other)),
    };
    let rv = wanted["metadata"]["resourceVersion"]
        .as_str()
        .filter(|v| pinned && !v.is_empty());
    let uid = wanted["metadata"]["uid"].as_str().filter(|u| !u.is_empty());
    let mut refused = None;
    let updated = req.api.store.modify(res, req.namespace(), name, |obj| {
        let meta = &obj["metadata"];
        if let Some(uid) = uid.filter(|u| meta["uid"] != json!(u)) {
            let resource = match &*res.group {
                "" => format!("{}/scale", res.plural),
                group => format!("{}/scale.{group}", res.plural),
            };
            refused = Some(ApiError::Conflict(format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta["uid"].as_str().unwrap_or_default()
            )));
            return false;
        }
        if rv.is_some_and(|rv| meta["resourceVersion"] != json!(rv)) {
            refused = Some(stale(res, name));
            return false;
        }
        obj["spec"]["replicas"] = json!(replicas);
        true
    })?;
    if let Some(e) = refused {
        return Err(e);
    }
    Ok(json(StatusCode::OK, &scale_of(&updated)))
}

fn scale_type_error(found: &Value) -> ApiError {
    let what = match found {
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        _ => "number",
    };
    ApiError::BadRequest(format!(
        "Scale in version \"v1\" cannot be handled as a Scale: json: cannot unmarshal {what} into Go struct field ScaleSpec.spec.replicas of type int32"
    ))
}

fn scale_of(obj: &Value) -> Value {
    // The whole selector, matchExpressions too, in label-selector syntax; a
    // ReplicationController's is a plain map (`SelectorFromSet`).
    let selector = match obj["kind"].as_str() {
        Some("ReplicationController") => json!({"matchLabels": obj["spec"]["selector"]}),
        _ => obj["spec"]["selector"].clone(),
    };
    let selector = LabelSelector::from_object(&selector)
        .map(|s| s.to_string())
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

pub fn delete(req: &Request) -> Result<Response, ApiError> {
    req.reject_dry_run()?;
    let opts = delete_options(req)?;
    let res = &req.path.resource;
    let Some(name) = &req.path.name else {
        return delete_collection(req, &opts);
    };
    match req
        .api
        .store
        .delete(res, req.namespace(), name, &opts.store)?
    {
        Deleted::Gone(obj) if !returns_deleted_object(res) => {
            Ok(json(StatusCode::OK, &deleted_status(res, &obj)))
        }
        Deleted::Gone(obj) => Ok(json(StatusCode::OK, &req.out(obj))),
        // 202 when the client asked for dependents to be deleted first (the
        // deprecated `orphanDependents: false`) and the object stays.
        Deleted::Terminating(obj) if opts.orphan_dependents == Some(false) => {
            Ok(json(StatusCode::ACCEPTED, &req.out(obj)))
        }
        Deleted::Terminating(obj) => Ok(json(StatusCode::OK, &req.out(obj))),
    }
}

/// The kinds whose registry sets `ReturnDeletedObject`: a DELETE that
/// removes one at once answers with the object; the others answer with a
/// Success Status naming what went.
fn returns_deleted_object(res: &Resource) -> bool {
    res.custom.is_none()
        && matches!(
            &*res.plural,
            "pods"
                | "services"
                | "persistentvolumeclaims"
                | "persistentvolumes"
                | "namespaces"
                | "serviceaccounts"
                | "storageclasses"
        )
}

/// The registry's `finalizeDelete` Status: `details.kind` is the resource
/// (plural), as Kubernetes sets it.
fn deleted_status(res: &Resource, obj: &Value) -> Value {
    let mut details = json!({
        "name": obj["metadata"]["name"],
        "kind": res.plural,
        "uid": obj["metadata"]["uid"],
    });
    if !res.group.is_empty() {
        details["group"] = json!(res.group);
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

/// DELETE of a collection: the objects selected (as listed, before their
/// deletion), as a list.
fn delete_collection(req: &Request, opts: &Deletion) -> Result<Response, ApiError> {
    let res = &req.path.resource;
    let (items, rv) = selected(req)?;
    let mut deleted = Vec::new();
    for obj in items {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        match req.api.store.delete(res, ns, name, &opts.store) {
            Ok(_) | Err(ApiError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        deleted.push(obj);
    }
    Ok(json(StatusCode::OK, &list_of(res, rv, deleted)))
}

/// What a DELETE asks: the store's options, and how it asked about
/// dependents.
struct Deletion {
    store: DeleteOptions,
    orphan_dependents: Option<bool>,
}

/// DeleteOptions from the body (kubectl, kube-rs) or the query.
fn delete_options(req: &Request) -> Result<Deletion, ApiError> {
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
    let orphan_dependents = body["orphanDependents"]
        .as_bool()
        .or_else(|| req.query.get("orphanDependents")?.parse().ok());
    let orphan = propagation == "Orphan" || orphan_dependents == Some(true);
    Ok(Deletion {
        store: DeleteOptions {
            grace_seconds: grace,
            orphan,
            uid: body["preconditions"]["uid"].as_str().map(str::to_string),
            resource_version: body["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_string),
        },
        orphan_dependents,
    })
}
