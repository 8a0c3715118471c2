//! SelfSubjectAccessReview (authorization.k8s.io/v1, create only): "may I
//! do this?", asked for the requesting identity, as `kubectl auth can-i`
//! and the plugin's pre-flight checks ask it
//! (pkg/registry/authorization/selfsubjectaccessreview/rest.go). A
//! service account gets the RBAC authorizer's answer and reason
//! ([`crate::auth::rbac`]), the one its requests get; the admin
//! (`system:masters`) is allowed everything, as on any cluster; anonymous
//! requests too, with a `reason` saying the sandbox does not restrict
//! them. Of non-resource URLs a service account is allowed only `get` of
//! the discovery paths (`system:discovery`).

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::{error, json, Api, Authorization};
use crate::auth::rbac::{self, Attributes};
use crate::auth::Identity;
use crate::registry::SELF_SUBJECT_ACCESS_REVIEWS;
use crate::status::ApiError;

/// The review's path.
const PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

/// Why an anonymous request is allowed.
const NOT_AUTHORIZED_REASON: &str =
    "kube-sandbox authorizes service accounts only: this identity may do everything";

/// The audit record of a review: every authenticated user may ask
/// (`system:basic-user`).
pub fn audit_attributes() -> Authorization {
    Authorization {
        attributes: Attributes {
            verb: "create".into(),
            group: "authorization.k8s.io".into(),
            resource: SELF_SUBJECT_ACCESS_REVIEWS.into(),
            ..Attributes::default()
        },
        allowed: true,
    }
}

/// Answers a request to the review's path; None for other paths.
pub fn route(
    api: &Api,
    method: &Method,
    path: &str,
    identity: &Identity,
    body: &Bytes,
) -> Option<Response> {
    if path.trim_end_matches('/') != PATH {
        return None;
    }
    if method != Method::POST {
        return Some(error(&ApiError::MethodNotAllowed));
    }
    let decide = |spec: &Value| decide(api, identity, spec);
    Some(match review(identity, body, decide) {
        Ok(answer) => json(StatusCode::CREATED, &answer),
        Err(e) => error(&e),
    })
}

fn review(
    identity: &Identity,
    body: &Bytes,
    decide: impl Fn(&Value) -> Value,
) -> Result<Value, ApiError> {
    // `kubectl auth can-i` sends protobuf, and the sandbox has no schema for
    // this group: for the identities it does not restrict the answer does
    // not depend on the question, so it is answered with an empty spec.
    if body.starts_with(b"k8s\0") {
        if matches!(identity, Identity::ServiceAccount(_)) {
            return Err(ApiError::UnsupportedMediaType(format!(
                "application/json (kube-sandbox decodes no protobuf {SELF_SUBJECT_ACCESS_REVIEWS}: a service account must ask in JSON)"
            )));
        }
        return Ok(answer(json!({}), decide(&json!({}))));
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
    Ok(answer(spec.clone(), decide(spec)))
}

/// The review's status for `identity`.
fn decide(api: &Api, identity: &Identity, spec: &Value) -> Value {
    match identity {
        Identity::Admin => json!({"allowed": true}),
        Identity::Anonymous => json!({"allowed": true, "reason": NOT_AUTHORIZED_REASON}),
        Identity::ServiceAccount(_) => status_of(service_account_decision(api, identity, spec)),
    }
}

fn status_of(decision: rbac::Decision) -> Value {
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    status
}

fn service_account_decision(api: &Api, identity: &Identity, spec: &Value) -> rbac::Decision {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    if let Some(path) = spec["nonResourceAttributes"]["path"].as_str() {
        let discovery = ["/api", "/apis", "/version", "/healthz", "/livez", "/readyz"]
            .iter()
            .any(|p| path == *p || path.starts_with(&format!("{p}/")));
        let allowed = discovery && spec["nonResourceAttributes"]["verb"] == "get";
        return rbac::Decision {
            allowed,
            reason: if allowed {
                "RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole \"system:discovery\" to Group \"system:authenticated\"".into()
            } else {
                String::new()
            },
        };
    }
    let a = &spec["resourceAttributes"];
    let attributes = Attributes {
        verb: text(&a["verb"]),
        group: text(&a["group"]),
        resource: text(&a["resource"]),
        subresource: text(&a["subresource"]),
        namespace: text(&a["namespace"]),
        name: text(&a["name"]),
    };
    rbac::authorize(&api.store, identity, &attributes)
}

fn answer(spec: Value, status: Value) -> Value {
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
        let decide = |_: &Value| match identity {
            Identity::Admin => json!({"allowed": true}),
            _ => json!({"allowed": true, "reason": NOT_AUTHORIZED_REASON}),
        };
        review(
            identity,
            &Bytes::from(json!({"spec": spec}).to_string()),
            decide,
        )
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
