//! TokenRequest (authentication.k8s.io/v1), the `token` subresource of a
//! ServiceAccount that `kubectl create token NAME` and the kubelet ask:
//! `POST /api/v1/namespaces/NS/serviceaccounts/NAME/token` answers a
//! token that authenticates as `system:serviceaccount:NS:NAME`, as
//! kube-apiserver's `TokenREST.Create` does
//! (pkg/registry/core/serviceaccount/storage/token.go):
//!
//! - a name or namespace in the body must be the URL's (422);
//! - the ServiceAccount must exist (404);
//! - `expirationSeconds` defaults to an hour, and may be neither under
//!   ten minutes nor over 2^32 seconds (422);
//! - `audiences` default to the API server's; a token for others does not
//!   authenticate to it;
//! - `boundObjectRef` may name a Pod of this ServiceAccount (400 for
//!   another's, 409 when its uid is not the pod's): the token then names
//!   the pod and its node and stops working when the pod is gone, and one
//!   asked for 3607 s is extended to a year, as for the kubelet. Tokens
//!   bound to Secrets and Nodes are not issued here (400).
//!
//! A token that is not bound to a pod lives until it expires or its
//! ServiceAccount is deleted.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::json;
use super::objects::Request;
use crate::auth::token::{ISSUER, REQUESTED_SECONDS};
use crate::auth::{Subject, Validity};
use crate::registry;
use crate::status::ApiError;

/// The qualified kind its errors name.
const KIND: &str = "TokenRequest.authentication.k8s.io";
/// `SetDefaults_TokenRequestSpec`: an hour.
pub const DEFAULT_SECONDS: u64 = 3600;
const MIN_SECONDS: i64 = 600;
const MAX_SECONDS: i64 = 1 << 32;

/// Answers a POST of the `token` subresource.
pub fn create(req: &Request) -> Result<Response, ApiError> {
    let name = req.name()?.to_string();
    let namespace = req.namespace().to_string();
    let body = req.body_json()?;
    for (field, want, what) in [
        ("name", &name, "name"),
        ("namespace", &namespace, "namespace"),
    ] {
        let given = body["metadata"][field].as_str().unwrap_or_default();
        if !given.is_empty() && given != want {
            return Err(ApiError::invalid(
                KIND,
                &name,
                format!("metadata.{field}: Invalid value: {given:?}: must match the service account {what} if specified"),
            ));
        }
    }
    let account = req
        .api
        .store
        .get(registry::get("serviceaccounts"), &namespace, &name)?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut subject = Subject {
        namespace: namespace.clone(),
        service_account: name.clone(),
        service_account_uid: text(&account["metadata"]["uid"]),
        pod: String::new(),
        pod_uid: String::new(),
        node: String::new(),
    };
    let spec = &body["spec"];
    if let Some(reference) = spec["boundObjectRef"].as_object() {
        bind(req, &mut subject, &Value::Object(reference.clone()))?;
    }
    let seconds = match &spec["expirationSeconds"] {
        Value::Null => DEFAULT_SECONDS,
        v => expiration(&name, v)?,
    };
    let audiences: Vec<String> = spec["audiences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    let audiences = if audiences.is_empty() {
        vec![ISSUER.to_string()]
    } else {
        audiences
    };
    let extended = subject.is_pod_bound() && seconds == REQUESTED_SECONDS && audiences == [ISSUER];
    let validity = if extended {
        Validity::projected()
    } else {
        Validity {
            audiences: audiences.clone(),
            seconds,
            warn_after_seconds: None,
        }
    };
    let (token, expires) = req
        .api
        .authority
        .issue(&subject, &validity)
        .map_err(|e| ApiError::Internal(format!("failed to generate token: {e}")))?;
    let expires = i64::try_from(expires)
        .ok()
        .and_then(|t| time::OffsetDateTime::from_unix_timestamp(t).ok())
        .map(crate::time::format)
        .ok_or_else(|| ApiError::Internal("the token's expiry is out of range".into()))?;
    let answer = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": crate::time::now()},
        "spec": {
            "audiences": audiences,
            "expirationSeconds": seconds,
            "boundObjectRef": spec["boundObjectRef"],
        },
        "status": {"token": token, "expirationTimestamp": expires},
    });
    Ok(json(StatusCode::CREATED, &answer))
}

/// `spec.expirationSeconds`, validated as `ValidateTokenRequest` does.
fn expiration(name: &str, value: &Value) -> Result<u64, ApiError> {
    let seconds = value.as_i64().ok_or_else(|| {
        ApiError::BadRequest(format!(
            "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: spec.expirationSeconds: {value} is not an integer"
        ))
    })?;
    let invalid = |why: &str| {
        ApiError::invalid(
            KIND,
            name,
            format!("spec.expirationSeconds: Invalid value: {seconds}: {why}"),
        )
    };
    if seconds < MIN_SECONDS {
        return Err(invalid("may not specify a duration less than 10 minutes"));
    }
    if seconds > MAX_SECONDS {
        return Err(invalid(
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    u64::try_from(seconds).map_err(|_| invalid("out of range"))
}

/// Binds the token to the Pod `reference` names.
fn bind(req: &Request, subject: &mut Subject, reference: &Value) -> Result<(), ApiError> {
    let api_version = reference["apiVersion"].as_str().unwrap_or_default();
    let kind = reference["kind"].as_str().unwrap_or_default();
    let name = reference["name"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    if !(group.is_empty() && kind == "Pod") {
        return Err(ApiError::BadRequest(format!(
            "cannot bind token to object of type {group}/{version}, Kind={kind} (kube-sandbox binds tokens to pods only)"
        )));
    }
    let pod = req
        .api
        .store
        .get(registry::get("pods"), &subject.namespace, name)?;
    let account = pod["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or_default();
    if account != subject.service_account {
        return Err(ApiError::BadRequest(format!(
            "cannot bind token for serviceaccount {:?} to pod running with serviceaccount {account:?}",
            subject.service_account
        )));
    }
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let wanted = reference["uid"].as_str().unwrap_or_default();
    if !wanted.is_empty() && wanted != uid {
        return Err(ApiError::Conflict(format!(
            "Operation cannot be fulfilled on Pod {name:?}: the UID in the bound object reference ({wanted}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        )));
    }
    subject.pod = name.to_string();
    subject.pod_uid = uid.to_string();
    subject.node = pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Ok(())
}
