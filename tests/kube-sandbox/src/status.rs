//! API errors and the `Status` objects the server answers them with.

use serde_json::{json, Value};

/// What a request can fail with; each maps to the HTTP code and `reason`
/// a real API server uses, so clients branch on them the same way.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    #[error("{kind} \"{name}\" not found")]
    NotFound { kind: String, name: String },
    /// A path that names no resource (404 NotFound, no details).
    #[error("{0}")]
    NoRoute(String),
    #[error("{kind} \"{name}\" already exists")]
    AlreadyExists { kind: String, name: String },
    #[error("{0}")]
    Conflict(String),
    /// 422 Unprocessable Entity, as `NewInvalid` makes it: `kind` is the
    /// qualified kind it prints (`StatefulSet.apps`, `Pod`), each cause a
    /// `field.Error` as it prints (`spec: Forbidden: ...`).
    #[error("{kind} \"{name}\" is invalid: {}", aggregate(causes))]
    Invalid {
        kind: String,
        name: String,
        causes: Vec<String>,
    },
    #[error("{0}")]
    Forbidden(String),
    /// 403 from the authorizer, as `apierrors.NewForbidden` makes it:
    /// `pods "x" is forbidden: User "..." cannot get resource ...`, with
    /// the resource in the details' `kind`.
    #[error("{} is forbidden: {message}", forbidden_subject(resource, group, name))]
    Denied {
        group: String,
        resource: String,
        name: String,
        message: String,
    },
    /// 401: credentials the server does not accept (kube-apiserver says
    /// only "Unauthorized"; the log says why).
    #[error("Unauthorized")]
    Unauthorized,
    #[error("{0}")]
    BadRequest(String),
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// 405 in the server's own words (`NewMethodNotSupported` with its
    /// message replaced, as for a create while a CRD is terminating).
    #[error("{0}")]
    NotAllowed(String),
    /// 406: nothing the client accepts can be served (a custom resource
    /// asked for in protobuf only).
    #[error("only the following media types are accepted: {0}")]
    NotAcceptable(String),
    #[error("{0}")]
    Gone(String),
    #[error(
        "the body of the request was in an unknown format - accepted media types include: {0}"
    )]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// Whether a client that retries (after re-reading the object, or
    /// relisting) can expect to succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ApiError::Conflict(_) | ApiError::Gone(_) | ApiError::Internal(_)
        )
    }

    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound { .. } | ApiError::NoRoute(_) => 404,
            ApiError::AlreadyExists { .. } | ApiError::Conflict(_) => 409,
            ApiError::Invalid { .. } => 422,
            ApiError::Forbidden(_) | ApiError::Denied { .. } => 403,
            ApiError::Unauthorized => 401,
            ApiError::BadRequest(_) => 400,
            ApiError::MethodNotAllowed | ApiError::NotAllowed(_) => 405,
            ApiError::NotAcceptable(_) => 406,
            ApiError::Gone(_) => 410,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::Internal(_) => 500,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. } | ApiError::NoRoute(_) => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict(_) => "Conflict",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::Forbidden(_) | ApiError::Denied { .. } => "Forbidden",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::MethodNotAllowed | ApiError::NotAllowed(_) => "MethodNotAllowed",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::Gone(_) => "Expired",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::Internal(_) => "InternalError",
        }
    }

    pub fn invalid(kind: &str, name: &str, cause: impl Into<String>) -> Self {
        ApiError::Invalid {
            kind: kind.to_string(),
            name: name.to_string(),
            causes: vec![cause.into()],
        }
    }

    pub fn not_found(kind: &str, name: &str) -> Self {
        ApiError::NotFound {
            kind: kind.to_string(),
            name: name.to_string(),
        }
    }

    /// The `Status` object (kind `Status`, apiVersion `v1`) for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        let details = match self {
            ApiError::NotFound { kind, name } | ApiError::AlreadyExists { kind, name } => {
                Some(json!({ "name": name, "kind": kind }))
            }
            ApiError::Invalid { kind, name, causes } => {
                let (kind, group) = kind.split_once('.').unwrap_or((kind, ""));
                let mut details = json!({
                    "name": name,
                    "kind": kind,
                    "causes": causes.iter().map(|c| status_cause(c)).collect::<Vec<_>>(),
                });
                if !group.is_empty() {
                    details["group"] = json!(group);
                }
                Some(details)
            }
            ApiError::Denied {
                group,
                resource,
                name,
                ..
            } => {
                let mut details = json!({"kind": resource});
                if !name.is_empty() {
                    details["name"] = json!(name);
                }
                if !group.is_empty() {
                    details["group"] = json!(group);
                }
                Some(details)
            }
            _ => None,
        };
        if let Some(details) = details {
            status["details"] = details;
        }
        status
    }
}

/// `pods "x"`, `deployments.apps`: the qualified resource, with the name
/// when the request has one.
fn forbidden_subject(resource: &str, group: &str, name: &str) -> String {
    let qualified = match group {
        "" => resource.to_string(),
        group => format!("{resource}.{group}"),
    };
    match name {
        "" => qualified,
        name => format!("{qualified} \"{name}\""),
    }
}

/// `utilerrors.NewAggregate(...).Error()`: one message as it is, several
/// (duplicates dropped) comma-joined in brackets.
fn aggregate(causes: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for cause in causes {
        if !seen.contains(&cause.as_str()) {
            seen.push(cause);
        }
    }
    match seen.as_slice() {
        [one] => one.to_string(),
        all => format!("[{}]", all.join(", ")),
    }
}

/// A `StatusCause` from a `field.Error` as it prints (`FIELD: BODY`): the
/// field, the body as the message, and the type its body starts with.
fn status_cause(cause: &str) -> Value {
    const TYPES: [(&str, &str); 9] = [
        ("Required value", "FieldValueRequired"),
        ("Forbidden", "FieldValueForbidden"),
        ("Invalid value", "FieldValueInvalid"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Not found", "FieldValueNotFound"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
        ("Internal error", "InternalError"),
    ];
    let Some((field, body)) = cause.split_once(": ") else {
        return json!({"reason": "FieldValueInvalid", "message": cause});
    };
    let reason = TYPES
        .iter()
        .find(|(text, _)| body.starts_with(text))
        .map_or("FieldValueInvalid", |(_, reason)| reason);
    json!({"reason": reason, "message": body, "field": field})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_reads_as_new_invalid_writes_it() {
        let one = ApiError::Invalid {
            kind: "StatefulSet.apps".into(),
            name: "db".into(),
            causes: vec!["spec: Forbidden: updates to statefulset spec are forbidden".into()],
        };
        assert_eq!(
            one.to_string(),
            "StatefulSet.apps \"db\" is invalid: spec: Forbidden: updates to statefulset spec are forbidden"
        );
        let status = one.to_status();
        assert_eq!(
            status["details"],
            json!({"name": "db", "kind": "StatefulSet", "group": "apps", "causes": [{
                "reason": "FieldValueForbidden", "field": "spec",
                "message": "Forbidden: updates to statefulset spec are forbidden"}]})
        );
        let two = ApiError::Invalid {
            kind: "Pod".into(),
            name: "p".into(),
            causes: vec![
                "spec.containers: Required value".into(),
                "metadata.name: Invalid value: \"P\": bad".into(),
                "spec.containers: Required value".into(),
            ],
        };
        assert_eq!(
            two.to_string(),
            "Pod \"p\" is invalid: [spec.containers: Required value, metadata.name: Invalid value: \"P\": bad]"
        );
        let status = two.to_status();
        assert!(status["details"].get("group").is_none());
        let reasons: Vec<&str> = (status["details"]["causes"].as_array().into_iter().flatten())
            .filter_map(|c| c["reason"].as_str())
            .collect();
        assert_eq!(
            reasons,
            [
                "FieldValueRequired",
                "FieldValueInvalid",
                "FieldValueRequired"
            ]
        );
    }
}
