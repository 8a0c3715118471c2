//! SelfSubjectAccessReview (authorization.k8s.io/v1, create only): "may I
//! do this?", asked for the requesting identity, as `kubectl auth can-i`
//! and the plugin's pre-flight checks ask it
//! (pkg/registry/authorization/selfsubjectaccessreview/rest.go). The
//! sandbox does not enforce RBAC, so everything is allowed: for the admin
//! (`system:masters`) that is the truth on any cluster; for anyone else
//! the `reason` says the sandbox does not authorize.

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::{error, json};
use crate::auth::Identity;
use crate::registry::SELF_SUBJECT_ACCESS_REVIEWS;
use crate::status::ApiError;

/// The review's path.
pub const PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

/// Why a request that is not the admin's is allowed.
pub const NOT_AUTHORIZED_REASON: &str =
    "kube-sandbox does not authorize requests: every identity may do everything";

/// Answers a request to the review's path; None for other paths.
pub fn route(method: &Method, path: &str, identity: &Identity, body: &Bytes) -> Option<Response> {
    if path.trim_end_matches('/') != PATH {
        return None;
    }
    if method != Method::POST {
        return Some(error(&ApiError::MethodNotAllowed));
    }
    Some(match review(identity, body) {
        Ok(answer) => json(StatusCode::CREATED, &answer),
        Err(e) => error(&e),
    })
}

fn review(identity: &Identity, body: &Bytes) -> Result<Value, ApiError> {
    // `kubectl auth can-i` sends protobuf, and the sandbox has no schema for
    // this group: as nothing is enforced the answer does not depend on the
    // question, so it is answered with an empty spec.
    if body.starts_with(b"k8s\0") {
        return Ok(answer(identity, json!({})));
    }
    let request: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::BadRequest(format!(
            "the {SELF_SUBJECT_ACCESS_REVIEWS} body must be JSON (kube-sandbox decodes no protobuf for this group): {e}"
        ))
    })?;
    let spec = &request["spec"];
    let resource = spec["resourceAttributes"].is_object();
    let non_resource = spec["nonResourceAttributes"].is_object();
    if resource == non_resource {
        // The strategy's validation (ValidateSelfSubjectAccessReviewSpec).
        return Err(ApiError::invalid(
            "SelfSubjectAccessReview.authorization.k8s.io",
            "",
            "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    }
    Ok(answer(identity, spec.clone()))
}

fn answer(identity: &Identity, spec: Value) -> Value {
    let status = match identity {
        Identity::Admin => json!({"allowed": true}),
        _ => json!({"allowed": true, "reason": NOT_AUTHORIZED_REASON}),
    };
    json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(identity: &Identity, spec: Value) -> Result<Value, ApiError> {
        review(identity, &Bytes::from(json!({"spec": spec}).to_string()))
    }

    #[test]
    fn the_admin_is_allowed_and_others_are_told_nothing_is_authorized() {
        let spec = json!({"resourceAttributes": {"verb": "create", "group": "rbac.authorization.k8s.io", "resource": "roles", "namespace": "ns"}});
        let admin = ask(&Identity::Admin, spec.clone()).expect("review");
        assert_eq!(admin["status"], json!({"allowed": true}));
        assert_eq!(admin["spec"], spec);
        let anonymous = ask(&Identity::Anonymous, spec).expect("review");
        assert_eq!(anonymous["status"]["allowed"], true);
        assert_eq!(anonymous["status"]["reason"], NOT_AUTHORIZED_REASON);
    }

    #[test]
    fn a_review_names_a_resource_or_a_path_not_both() {
        let err = ask(&Identity::Admin, json!({})).expect_err("invalid");
        assert_eq!(err.code(), 422);
        let both = json!({"resourceAttributes": {}, "nonResourceAttributes": {"path": "/healthz", "verb": "get"}});
        assert_eq!(
            ask(&Identity::Admin, both).expect_err("invalid").code(),
            422
        );
    }
}
