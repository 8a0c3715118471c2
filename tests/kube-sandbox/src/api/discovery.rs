//! Discovery: `/version`, `/api`, `/apis` and the resource lists of each
//! group version, in the legacy (unaggregated) form. kubectl asks for the
//! aggregated form first and falls back to this when the answer's
//! Content-Type says it is a plain list.

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::{error, json, Api};
use crate::registry::{group_versions, RESOURCES};
use crate::status::ApiError;

/// The Kubernetes version the sandbox answers `/version` with.
pub const MAJOR: &str = "1";
pub const MINOR: &str = "33";

/// Answers discovery paths; None for everything else.
pub fn route(api: &Api, method: &Method, path: &str) -> Option<Response> {
    if method != Method::GET {
        return None;
    }
    let body = match path.trim_end_matches('/') {
        "/version" => version(),
        "/api" => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": api.addr.to_string()}],
        }),
        "/apis" => groups(&|g| api.serves(g)),
        "/healthz" | "/readyz" | "/livez" => {
            return Some(
                Response::builder()
                    .header("content-type", "text/plain")
                    .body("ok".into())
                    .unwrap_or_default(),
            )
        }
        p if p.starts_with("/openapi") => {
            return Some(error(&ApiError::NoRoute(
                "the OpenAPI document is not served by kube-sandbox".into(),
            )))
        }
        p => {
            let segments: Vec<&str> = p.trim_matches('/').split('/').collect();
            match segments.as_slice() {
                ["api", "v1"] => resource_list("", "v1")?,
                ["apis", group, _] | ["apis", group] if !api.serves(group) => {
                    return Some(error(&ApiError::NoRoute(format!(
                        "the server could not find the requested resource ({p})"
                    ))))
                }
                ["apis", group, version] => resource_list(group, version)?,
                ["apis", group] => group_body(group)?,
                _ => return None,
            }
        }
    };
    Some(json(StatusCode::OK, &body))
}

fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": format!("v{MAJOR}.{MINOR}.0"),
        "gitCommit": "kube-sandbox",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// The groups that `serves` admits.
fn groups(serves: &dyn Fn(&str) -> bool) -> Value {
    let groups: Vec<Value> = group_versions()
        .into_iter()
        .filter(|(g, _)| !g.is_empty() && serves(g))
        .filter_map(|(g, _)| group_body(g))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn group_body(group: &str) -> Option<Value> {
    let versions: Vec<Value> = group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first()?.clone();
    Some(
        json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions, "preferredVersion": preferred}),
    )
}

fn resource_list(group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        resources.push(entry);
        for sub in r.subresources {
            let (kind, verbs): (&str, &[&str]) = match *sub {
                "log" => ("Pod", &["get"]),
                "scale" => ("Scale", &["get", "patch", "update"]),
                "token" => ("TokenRequest", &["create"]),
                _ => (r.kind, &["get", "patch", "update"]),
            };
            let mut entry = json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": verbs,
            });
            match *sub {
                "scale" => {
                    entry["group"] = json!("autoscaling");
                    entry["version"] = json!("v1");
                }
                "token" => {
                    entry["group"] = json!("authentication.k8s.io");
                    entry["version"] = json!("v1");
                }
                _ => {}
            }
            resources.push(entry);
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_list_has_pods_with_their_subresources() {
        let list = resource_list("", "v1").expect("core served");
        let names: Vec<&str> = list["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .collect();
        for want in [
            "pods",
            "pods/log",
            "pods/status",
            "persistentvolumeclaims",
            "nodes",
            "events",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        assert!(resource_list("apps", "v2").is_none());
    }

    #[test]
    fn groups_list_apps_batch_autoscaling_storage_rbac_authorization_and_snapshots() {
        let names = |serves: &dyn Fn(&str) -> bool| -> Vec<String> {
            groups(serves)["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g["name"].as_str().map(str::to_string))
                .collect()
        };
        let without = [
            "apps",
            "batch",
            "autoscaling",
            "storage.k8s.io",
            "rbac.authorization.k8s.io",
            "authorization.k8s.io",
        ];
        let mut with = without.to_vec();
        with.push("snapshot.storage.k8s.io");
        assert_eq!(names(&|_| true), with);
        assert_eq!(names(&|g| g != crate::registry::SNAPSHOT_GROUP), without);
        let list = resource_list("snapshot.storage.k8s.io", "v1").expect("served");
        let names: Vec<&str> = list["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "volumesnapshots",
                "volumesnapshots/status",
                "volumesnapshotcontents",
                "volumesnapshotcontents/status",
                "volumesnapshotclasses"
            ]
        );
    }
}
