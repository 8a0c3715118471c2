//! PATCH request bodies, applied the way the Kubernetes API server applies them.
//!
//! The patch format comes from the request's `Content-Type`
//! ([`PatchType::from_content_type`]); [`apply_patch`] computes the patched
//! object. Metadata checks on the result (name, `resourceVersion`, `uid`) are
//! the caller's, as in the API server's update path.
//!
//! Strategic merge patch follows `k8s.io/apimachinery/pkg/util/strategicpatch`
//! as the API server runs it, with the `patchStrategy` and `patchMergeKey`
//! struct tags of `k8s.io/api` for the kinds the sandbox serves.

use serde::Deserialize;
use serde_json::{Map, Value};

use self::strategic::strategic_merge;

mod strategic;

type Object = Map<String, Value>;
type Result<T, E = PatchError> = std::result::Result<T, E>;

/// The patch formats of the API, one per `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`: a list of RFC 6902 operations.
    Json,
    /// `application/merge-patch+json`: an RFC 7386 JSON merge patch.
    Merge,
    /// `application/strategic-merge-patch+json`: Kubernetes' strategic merge patch.
    StrategicMerge,
    /// `application/apply-patch+yaml`: server-side apply, simplified (see [`apply_patch`]).
    Apply,
}

const MEDIA_TYPES: [(&str, PatchType); 5] = [
    ("application/json-patch+json", PatchType::Json),
    ("application/merge-patch+json", PatchType::Merge),
    (
        "application/strategic-merge-patch+json",
        PatchType::StrategicMerge,
    ),
    ("application/apply-patch+yaml", PatchType::Apply),
    ("application/apply-patch+json", PatchType::Apply),
];

impl PatchType {
    /// The patch type a request's `Content-Type` names, ignoring parameters
    /// such as `; charset=utf-8` and case; `None` for other media types,
    /// which the API server answers with 415.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let essence = ct.split_once(';').map_or(ct, |(essence, _)| essence).trim();
        let known = MEDIA_TYPES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(essence));
        known.map(|&(_, ty)| ty)
    }

    /// The media types a PATCH accepts, for a 415 Unsupported Media Type message.
    pub fn accepted() -> &'static str {
        "application/json-patch+json, application/merge-patch+json, \
         application/strategic-merge-patch+json, application/apply-patch+yaml, \
         application/apply-patch+json"
    }
}

/// Why a patch could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The body of a JSON patch is not a list of RFC 6902 operations.
    #[error("the JSON patch is malformed: {0}")]
    MalformedJsonPatch(String),
    /// A JSON patch operation failed: a `test` that did not match, or a path
    /// missing from the object.
    #[error("the JSON patch cannot be applied: {0}")]
    JsonPatchFailed(String),
    /// A merge, strategic merge or apply patch that is not a JSON object.
    #[error("a {patch} patch must be a JSON object, not {found}")]
    NotAnObject {
        patch: &'static str,
        found: &'static str,
    },
    /// A strategic merge patch that breaks its own rules: an unknown
    /// directive, a list element without its merge key, and the like.
    #[error("the strategic merge patch is malformed at {path}: {reason}")]
    MalformedStrategicPatch { path: String, reason: String },
    /// A list of lists, which strategic merge patch cannot merge.
    #[error("the strategic merge patch cannot merge the list of lists at {0}")]
    ListOfLists(String),
    /// The patch turned the object into something that is not a JSON object.
    #[error("the patched object is {0}, not a JSON object")]
    ResultNotAnObject(&'static str),
}

impl PatchError {
    /// Whether the API server answers 422 Unprocessable Entity (the patch is
    /// well-formed but a JSON patch operation failed, or the result cannot
    /// be an object) rather than 400 Bad Request (the patch is malformed).
    pub fn is_invalid(&self) -> bool {
        matches!(
            self,
            Self::JsonPatchFailed(_) | Self::ListOfLists(_) | Self::ResultNotAnObject(_)
        )
    }
}

/// Applies `patch` (the parsed request body) to `target` (the live object)
/// for an object of `kind` ("Pod", "Service", "Deployment", ...).
///
/// - [`PatchType::Json`]: RFC 6902 operations. A failing operation fails
///   the whole patch, with 422 as in Kubernetes.
/// - [`PatchType::Merge`]: RFC 7386; maps merge, `null` deletes, lists are
///   replaced.
/// - [`PatchType::StrategicMerge`]: maps merge, `null` deletes, and lists
///   are replaced unless `k8s.io/api` gives the field a merge strategy.
///   Kinds with no known schema (custom resources, for which Kubernetes
///   refuses strategic merge patches) only get the `metadata` strategies.
/// - [`PatchType::Apply`], simplified: if `target` is `Null` (no such object)
///   the result is the applied configuration itself, for the caller to
///   create; otherwise it is strategically merged over the live object, so
///   fields set by others are kept. Field ownership, conflicts, and removing
///   fields a manager applied before but no longer applies are not emulated.
///
/// `metadata.resourceVersion` and `uid` are merged like any field; checking
/// them is the caller's.
pub fn apply_patch(
    kind: &str,
    target: &Value,
    patch: &Value,
    ty: PatchType,
) -> Result<Value, PatchError> {
    let patched = match ty {
        PatchType::Json => json_patch(target, patch)?,
        PatchType::Merge => merge_patch(target, patch)?,
        PatchType::StrategicMerge => strategic_merge(kind, target, patch, "strategic merge")?,
        PatchType::Apply if target.is_null() => object(patch, "apply")?.clone().into(),
        PatchType::Apply => strategic_merge(kind, target, patch, "apply")?,
    };
    match patched {
        Value::Object(_) => Ok(patched),
        other => Err(PatchError::ResultNotAnObject(json_type(&other))),
    }
}

fn json_patch(target: &Value, patch: &Value) -> Result<Value> {
    let ops = json_patch::Patch::deserialize(patch)
        .map_err(|e| PatchError::MalformedJsonPatch(e.to_string()))?;
    let mut doc = target.clone();
    // `patch` would roll back the applied operations on failure, but `doc`
    // is a copy that is dropped then: `patch_unsafe` is enough.
    json_patch::patch_unsafe(&mut doc, &ops)
        .map_err(|e| PatchError::JsonPatchFailed(e.to_string()))?;
    Ok(doc)
}

fn merge_patch(target: &Value, patch: &Value) -> Result<Value> {
    object(patch, "merge")?;
    let mut doc = target.clone();
    json_patch::merge(&mut doc, patch);
    Ok(doc)
}

fn object<'v>(patch: &'v Value, name: &'static str) -> Result<&'v Object> {
    let found = json_type(patch);
    patch
        .as_object()
        .ok_or(PatchError::NotAnObject { patch: name, found })
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
