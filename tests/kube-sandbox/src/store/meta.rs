//! Object metadata the server owns: names, uids, versions, generations,
//! deletion timestamps, preconditions.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{json, Value};

use super::{qualified, stale, DeleteOptions, Part};
use crate::registry::Resource;
use crate::status::ApiError;

fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    RandomState::new().hash_one(COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A random RFC 4122 version 4 uid.
pub fn new_uid() -> String {
    let (a, b) = (random_u64(), random_u64());
    let hex = format!("{a:016x}{b:016x}");
    format!(
        "{}-{}-4{}-{}{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        ["8", "9", "a", "b"][(b & 3) as usize],
        &hex[17..20],
        &hex[20..32]
    )
}

/// The five characters apimachinery appends to a `generateName`, from its
/// alphabet without vowels and look-alikes.
pub fn generate_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// Fills what the server owns on create.
pub fn prepare_create(res: &Resource, namespace: &str, obj: &mut Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::BadRequest(
            "the body of the request is not a JSON object".into(),
        ));
    }
    check_type(res, obj)?;
    obj["apiVersion"] = json!(res.api_version());
    obj["kind"] = json!(res.kind);
    let meta = &mut obj["metadata"];
    if !meta.is_object() {
        *meta = json!({});
    }
    if res.namespaced {
        match meta["namespace"].as_str() {
            Some(ns) if !ns.is_empty() && ns != namespace => {
                return Err(ApiError::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ))
            }
            _ => meta["namespace"] = json!(namespace),
        }
    } else if let Some(m) = meta.as_object_mut() {
        m.remove("namespace");
    }
    if meta["resourceVersion"]
        .as_str()
        .is_some_and(|v| !v.is_empty())
    {
        return Err(ApiError::BadRequest(
            "resourceVersion should not be set on objects to be created".into(),
        ));
    }
    if meta["name"].as_str().is_none_or(str::is_empty) {
        if let Some(prefix) = meta["generateName"].as_str().filter(|p| !p.is_empty()) {
            meta["name"] = json!(format!("{prefix}{}", generate_suffix()));
        }
    }
    meta["uid"] = json!(new_uid());
    meta["creationTimestamp"] = json!(crate::time::now());
    meta["generation"] = json!(1);
    if let Some(m) = meta.as_object_mut() {
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("managedFields");
        m.retain(|_, v| !v.is_null());
    }
    Ok(())
}

/// An object's apiVersion/kind, when given, must be this resource's.
fn check_type(res: &Resource, obj: &Value) -> Result<(), ApiError> {
    let kind = obj["kind"].as_str().unwrap_or(&res.kind);
    let api_version = obj["apiVersion"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| res.api_version());
    if kind != res.kind || api_version != res.api_version() {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            res.api_version()
        )));
    }
    Ok(())
}

/// The object a PUT stores: the client's, with the server-owned metadata of
/// the stored one, and the stored status (Main) or only the new status
/// (Status).
pub fn prepare_update(
    res: &Resource,
    old: &Value,
    mut obj: Value,
    part: Part,
) -> Result<Value, ApiError> {
    if !obj.is_object() {
        return Err(ApiError::BadRequest(
            "the body of the request is not a JSON object".into(),
        ));
    }
    check_type(res, &obj)?;
    let name = old["metadata"]["name"].as_str().unwrap_or_default();
    if obj["metadata"]["name"].as_str().is_some_and(|n| n != name) {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            obj["metadata"]["name"].as_str().unwrap_or_default()
        )));
    }
    let rv = obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    if !rv.is_empty() && obj["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"] {
        return Err(stale(res, name));
    }
    let mut new = match part {
        Part::Status => {
            let mut new = old.clone();
            new["status"] = obj["status"].take();
            // A custom resource's status strategy keeps no `status: null`.
            if res.custom.is_some() && new["status"].is_null() {
                if let Some(map) = new.as_object_mut() {
                    map.remove("status");
                }
            }
            new
        }
        Part::Main => {
            if res.has_subresource("status") {
                obj["status"] = old["status"].clone();
            }
            obj
        }
    };
    new["apiVersion"] = json!(res.api_version());
    new["kind"] = json!(res.kind);
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        new["metadata"][field] = old["metadata"][field].clone();
    }
    if let Some(m) = new["metadata"].as_object_mut() {
        m.retain(|_, v| !v.is_null());
    }
    if !old["metadata"]["deletionTimestamp"].is_null() {
        let before: Vec<&Value> = finalizers(old).collect();
        if finalizers(&new).any(|f| !before.contains(&f)) {
            return Err(ApiError::Forbidden(
                "no new finalizers can be added if the object is being deleted".into(),
            ));
        }
    }
    if res.builtin_kind() == "Service" {
        keep_allocated(old, &mut new);
    }
    // A custom resource without the status subresource counts changes of
    // its status too (the custom resource strategy's `PrepareForUpdate`).
    if res.custom.is_some() && !res.has_subresource("status") {
        bump_generation_with(old, &mut new, &["metadata"]);
    } else {
        bump_generation(old, &mut new);
    }
    Ok(new)
}

/// A Service written back without its allocated address keeps it, as the
/// API server's `patchAllocatedValues` does (so `kubectl replace` works).
fn keep_allocated(old: &Value, new: &mut Value) {
    let unset = |v: &Value| v.as_str().is_none_or(str::is_empty);
    if unset(&new["spec"]["clusterIP"]) && !unset(&old["spec"]["clusterIP"]) {
        new["spec"]["clusterIP"] = old["spec"]["clusterIP"].clone();
        new["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
    }
}

fn finalizers(obj: &Value) -> impl Iterator<Item = &Value> {
    obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
}

/// `metadata.generation` counts changes to everything but metadata and
/// status, as controllers' `observedGeneration` expects.
pub fn bump_generation(old: &Value, new: &mut Value) {
    bump_generation_with(old, new, &["metadata", "status"]);
}

/// [`bump_generation`] ignoring the top-level fields `ignored`.
fn bump_generation_with(old: &Value, new: &mut Value, ignored: &[&str]) {
    let strip = |v: &Value| {
        let mut m = v.as_object().cloned().unwrap_or_default();
        for field in ignored {
            m.remove(*field);
        }
        m
    };
    if strip(old) != strip(new) {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
        new["metadata"]["generation"] = json!(generation);
    }
}

pub fn check_preconditions(
    res: &Resource,
    obj: &Value,
    opts: &DeleteOptions,
) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    // `Preconditions.Check`'s words.
    let failed = |field: &str, want: &str, have: &Value| {
        ApiError::Conflict(format!(
            "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: {field} in precondition: {want}, {field} in object meta: {}",
            qualified(res),
            have.as_str().unwrap_or_default()
        ))
    };
    if let Some(uid) = &opts.uid {
        if obj["metadata"]["uid"] != json!(uid) {
            return Err(failed("UID", uid, &obj["metadata"]["uid"]));
        }
    }
    if let Some(rv) = &opts.resource_version {
        if obj["metadata"]["resourceVersion"] != json!(rv) {
            return Err(failed(
                "ResourceVersion",
                rv,
                &obj["metadata"]["resourceVersion"],
            ));
        }
    }
    Ok(())
}

pub enum Deletion {
    Now,
    Held,
}

/// Decides a DELETE: gone now, or marked terminating (deletionTimestamp)
/// while finalizers or a running pod's grace period hold it.
pub fn deletion(res: &Resource, obj: &mut Value, opts: &DeleteOptions) -> Deletion {
    let grace = match res.builtin_kind() {
        "Pod" => pod_grace(obj, opts),
        _ => 0,
    };
    let meta = &obj["metadata"];
    let already = !meta["deletionTimestamp"].is_null();
    let current = meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(0);
    // A second DELETE may shorten a pod's grace period, never lengthen it.
    if !already || (res.builtin_kind() == "Pod" && grace < current) {
        let when = time::OffsetDateTime::now_utc() + time::Duration::seconds(grace);
        obj["metadata"]["deletionTimestamp"] = json!(crate::time::format(when));
        obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
    }
    if !already && res.builtin_kind() == "Namespace" {
        obj["status"]["phase"] = json!("Terminating");
    }
    if !already && res.builtin_kind() == "CustomResourceDefinition" {
        crate::registry::rules::mark_terminating(obj);
    }
    if still_held(&res.store_key(), obj) {
        Deletion::Held
    } else {
        Deletion::Now
    }
}

/// A pod's grace period: 0 when it never ran on a node or has finished
/// (as the pod strategy decides), else the request's or the spec's.
fn pod_grace(pod: &Value, opts: &DeleteOptions) -> i64 {
    let phase = pod["status"]["phase"].as_str().unwrap_or_default();
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty)
        || phase == "Succeeded"
        || phase == "Failed"
    {
        return 0;
    }
    let spec = pod["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(30);
    // A negative grace period means "as short as possible but not forced".
    match opts.grace_seconds.unwrap_or(spec) {
        g if g < 0 => 1,
        g => g,
    }
}

/// Whether a terminating object must stay: finalizers, a namespace's
/// `spec.finalizers`, or a pod whose kubelet has not confirmed the kill.
pub fn still_held(resource: &str, obj: &Value) -> bool {
    let has = |v: &Value| v.as_array().is_some_and(|a| !a.is_empty());
    has(&obj["metadata"]["finalizers"])
        || (resource == "namespaces" && has(&obj["spec"]["finalizers"]))
        || (resource == "pods"
            && obj["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(0)
                > 0)
}

/// The uids an object's ownerReferences name.
pub fn owner_uids(obj: &Value) -> impl Iterator<Item = &Value> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| &r["uid"])
}

/// The uid of the object's controller (its first ownerReference with
/// `controller: true`, as `metav1.GetControllerOf`), if it has one.
pub fn controller_uid(obj: &Value) -> Option<&Value> {
    let refs = obj["metadata"]["ownerReferences"].as_array()?;
    refs.iter()
        .find(|r| r["controller"] == json!(true))
        .map(|r| &r["uid"])
}

/// Drops the ownerReferences to `uid`, and the list once it is empty (Go's
/// JSON omits an empty `ownerReferences`).
pub fn remove_owner(obj: &mut Value, uid: &Value) {
    let Some(meta) = obj["metadata"].as_object_mut() else {
        return;
    };
    if let Some(refs) = meta
        .get_mut("ownerReferences")
        .and_then(Value::as_array_mut)
    {
        refs.retain(|r| r["uid"] != *uid);
        if refs.is_empty() {
            meta.remove("ownerReferences");
        }
    }
}
