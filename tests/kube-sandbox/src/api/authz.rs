//! The request attributes the authorizer decides on, as the apiserver's
//! request-info filter derives them (`RequestInfoFactory.NewRequestInfo`,
//! staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go):
//! the verb from the method (GET of a name `get`, of a collection `list`,
//! or `watch` with `?watch=true`; POST `create`; PUT `update`; PATCH
//! `patch`; DELETE of a name `delete`, of a collection
//! `deletecollection`), a `metadata.name=` field selector naming the
//! object of a list or watch, and a namespace's own name as the namespace
//! of a request on it.

use axum::http::Method;

use super::request::{Path, Query};
use crate::auth::rbac::Attributes;
use crate::status::ApiError;

/// The attributes of a resource request.
pub fn attributes(method: &Method, path: &Path, query: &Query) -> Attributes {
    let mut name = path.name.clone().unwrap_or_default();
    let verb = match *method {
        Method::GET | Method::HEAD if name.is_empty() => {
            if let Some(exact) = field_selector_name(query) {
                name = exact;
            }
            if query.flag("watch") {
                "watch"
            } else {
                "list"
            }
        }
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if name.is_empty() => "deletecollection",
        Method::DELETE => "delete",
        _ => "",
    };
    let mut namespace = path.namespace.clone().unwrap_or_default();
    if path.resource.builtin_kind() == "Namespace" && namespace.is_empty() {
        namespace = path.name.clone().unwrap_or_default();
    }
    Attributes {
        verb: verb.to_string(),
        group: path.resource.group.to_string(),
        resource: path.resource.plural.to_string(),
        subresource: path.subresource.clone().unwrap_or_default(),
        namespace,
        name,
    }
}

/// `fieldSelector=metadata.name=NAME` (or `==`), alone among its terms.
fn field_selector_name(query: &Query) -> Option<String> {
    let selector = query.get("fieldSelector")?;
    let value = selector
        .strip_prefix("metadata.name==")
        .or_else(|| selector.strip_prefix("metadata.name="))?;
    (!value.contains(',') && !value.is_empty()).then(|| value.to_string())
}

/// The 403 for a denied request.
pub fn denied(user: &str, attrs: &Attributes, reason: &str) -> ApiError {
    let mut message = crate::auth::rbac::forbidden_message(user, attrs);
    if !reason.is_empty() {
        message = format!("{message}: {reason}");
    }
    ApiError::Denied {
        group: attrs.group.clone(),
        resource: attrs.resource.clone(),
        name: attrs.name.clone(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: Method, url: &str) -> Attributes {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        attributes(
            &method,
            &Path::parse(path).expect("path"),
            &Query::parse(query),
        )
    }

    #[test]
    fn verbs_come_from_the_method_and_the_collection() {
        let verb = |m: Method, url: &str| of(m, url).verb;
        assert_eq!(verb(Method::GET, "/api/v1/namespaces/a/pods"), "list");
        assert_eq!(
            verb(Method::GET, "/api/v1/namespaces/a/pods?watch=true"),
            "watch"
        );
        assert_eq!(verb(Method::GET, "/api/v1/namespaces/a/pods/p"), "get");
        assert_eq!(verb(Method::POST, "/api/v1/namespaces/a/pods"), "create");
        assert_eq!(
            verb(Method::PUT, "/api/v1/namespaces/a/configmaps/c"),
            "update"
        );
        assert_eq!(
            verb(Method::DELETE, "/api/v1/namespaces/a/pods"),
            "deletecollection"
        );
        assert_eq!(
            verb(Method::DELETE, "/api/v1/namespaces/a/pods/p"),
            "delete"
        );
        let scale = of(
            Method::PATCH,
            "/apis/apps/v1/namespaces/a/deployments/web/scale",
        );
        assert_eq!(
            (
                scale.verb.as_str(),
                scale.group.as_str(),
                scale.combined_resource(),
                scale.name.as_str()
            ),
            ("patch", "apps", "deployments/scale".to_string(), "web")
        );
        let log = of(Method::GET, "/api/v1/namespaces/a/pods/p/log?follow=true");
        assert_eq!(
            (log.verb.as_str(), log.combined_resource()),
            ("get", "pods/log".to_string())
        );
    }

    #[test]
    fn names_and_namespaces_as_the_request_info_has_them() {
        let watch = of(
            Method::GET,
            "/api/v1/namespaces/a/pods?watch=1&fieldSelector=metadata.name%3Dp",
        );
        assert_eq!((watch.verb.as_str(), watch.name.as_str()), ("watch", "p"));
        let ns = of(Method::GET, "/api/v1/namespaces/a");
        assert_eq!((ns.namespace.as_str(), ns.name.as_str()), ("a", "a"));
        let pv = of(Method::GET, "/api/v1/persistentvolumes/pv-1");
        assert_eq!(pv.namespace, "");
    }
}
