//! What the apiextensions server's handler (`crdHandler`) does
//! differently for custom resources: JSON only (a request that accepts
//! nothing but protobuf is a 406; a protobuf body does not decode into an
//! unstructured object, a 400), no strategic merge patch (415), 404 for a
//! namespaced resource asked for without a namespace (but for list and
//! watch), and no creates while the definition is being deleted. Objects
//! go out in the version asked for (conversion `None`: only the
//! apiVersion changes).

use serde_json::{json, Value};

use super::protobuf::{self, ProtobufError};
use crate::patch::PatchType;
use crate::registry::Resource;
use crate::status::ApiError;

/// The patch types a custom resource takes, as the 415 lists them.
const PATCH_TYPES: &str =
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";

/// The media types the handler's serializer names in a 406 (protobuf is
/// among them, though it cannot encode a custom resource).
const MEDIA_TYPES: &str = "application/json, application/yaml, application/vnd.kubernetes.protobuf";

/// The checks before a custom resource request is served: `verb` is the
/// authorizer's, `has_namespace` whether the URL named a namespace.
pub fn admit(
    res: &Resource,
    verb: &str,
    has_namespace: bool,
    accept: &str,
    path: &str,
) -> Result<(), ApiError> {
    let Some(definition) = &res.custom else {
        return Ok(());
    };
    if res.namespaced && !has_namespace && !matches!(verb, "list" | "watch") {
        return Err(ApiError::NoRoute(format!(
            "the server could not find the requested resource ({path})"
        )));
    }
    if !accepts_json(accept) {
        return Err(ApiError::NotAcceptable(MEDIA_TYPES.into()));
    }
    if verb == "create" && definition.terminating {
        return Err(ApiError::NotAllowed(
            "create not allowed while custom resource definition is terminating".into(),
        ));
    }
    Ok(())
}

/// Whether an Accept header lets the answer be JSON (tables were
/// handled before): empty, or a clause for JSON, YAML or any type that
/// is not refused with `q=0`.
fn accepts_json(accept: &str) -> bool {
    if accept.trim().is_empty() {
        return true;
    }
    accept.split(',').any(|clause| {
        let mut parts = clause.split(';').map(str::trim);
        let essence = parts.next().unwrap_or_default().to_ascii_lowercase();
        let refused = parts
            .filter_map(|p| p.split_once('='))
            .any(|(k, v)| k.trim() == "q" && v.trim().parse::<f32>().ok() == Some(0.0));
        !refused
            && matches!(
                essence.as_str(),
                "application/json" | "application/yaml" | "application/*" | "*/*"
            )
    })
}

/// The patch type of a PATCH of a custom resource; strategic merge (or
/// anything unknown) is a 415.
pub fn patch_type(content_type: &str) -> Result<PatchType, ApiError> {
    match PatchType::from_content_type(content_type) {
        Some(PatchType::StrategicMerge) | None => {
            Err(ApiError::UnsupportedMediaType(PATCH_TYPES.into()))
        }
        Some(ty) => Ok(ty),
    }
}

/// A protobuf body sent for a custom resource: the server's protobuf
/// decoder cannot fill an unstructured object, and the create and update
/// handlers answer its error as a 400 (`transformDecodeError`).
pub fn protobuf_body(res: &Resource, body: &[u8]) -> ApiError {
    match protobuf::type_meta(body) {
        Ok((api_version, kind)) => {
            let kind = if kind.is_empty() {
                res.kind.to_string()
            } else {
                kind
            };
            let version = match api_version.rsplit_once('/') {
                Some((_, v)) => v.to_string(),
                None if api_version.is_empty() => res.version.to_string(),
                None => api_version,
            };
            ApiError::BadRequest(format!(
                "{kind} in version {version:?} cannot be handled as a {}: Object 'Kind' is missing in 'object has no kind field '",
                res.kind
            ))
        }
        Err(ProtobufError::Malformed(why) | ProtobufError::UnsupportedKind { kind: why, .. }) => {
            ApiError::BadRequest(format!(
                "the object provided is unrecognized (must be of type {}): {why}",
                res.kind
            ))
        }
    }
}

/// An object as the version asked for shows it.
pub fn present(res: &Resource, mut obj: Value) -> Value {
    if res.custom.is_some() && obj.get("apiVersion").is_some() {
        obj["apiVersion"] = json!(res.api_version());
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_negotiated_unless_only_protobuf_is_accepted() {
        assert!(accepts_json(""));
        assert!(accepts_json("application/json"));
        assert!(accepts_json(
            "application/vnd.kubernetes.protobuf, application/json"
        ));
        assert!(accepts_json("application/vnd.kubernetes.protobuf, */*"));
        assert!(!accepts_json("application/vnd.kubernetes.protobuf"));
        assert!(!accepts_json(
            "application/vnd.kubernetes.protobuf, application/json;q=0"
        ));
    }

    #[test]
    fn strategic_merge_is_refused() {
        let refused = patch_type("application/strategic-merge-patch+json").expect_err("415");
        assert_eq!(
            (refused.code(), refused.to_string()),
            (415, format!("the body of the request was in an unknown format - accepted media types include: {PATCH_TYPES}"))
        );
        assert_eq!(
            patch_type("application/merge-patch+json; charset=utf-8").ok(),
            Some(PatchType::Merge)
        );
    }
}
