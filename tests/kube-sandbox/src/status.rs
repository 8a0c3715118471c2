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
    #[error("{kind} \"{name}\" is invalid: {}", causes.join(", "))]
    Invalid {
        kind: String,
        name: String,
        causes: Vec<String>,
    },
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
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
            ApiError::Forbidden(_) => 403,
            ApiError::BadRequest(_) => 400,
            ApiError::MethodNotAllowed => 405,
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
            ApiError::Forbidden(_) => "Forbidden",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::MethodNotAllowed => "MethodNotAllowed",
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
            ApiError::Invalid { kind, name, causes } => Some(json!({
                "name": name,
                "kind": kind,
                "causes": causes.iter().map(|c| json!({ "reason": "FieldValueInvalid", "message": c })).collect::<Vec<_>>(),
            })),
            _ => None,
        };
        if let Some(details) = details {
            status["details"] = details;
        }
        status
    }
}
