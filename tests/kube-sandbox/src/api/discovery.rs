//! Discovery: `/version`, `/api`, `/apis` and the resource lists of each
//! group version, in the legacy (unaggregated) form. kubectl asks for the
//! aggregated form first and falls back to this when the answer's
//! Content-Type says it is a plain list.
//!
//! Custom resources are listed once their definition is `Established`,
//! after the built-in groups, by group name (as the aggregator orders
//! APIServices of equal priority), each group's versions by Kubernetes'
//! version priority, the first of them preferred (the apiextensions
//! discovery controller's `sortGroupDiscoveryByKubeAwareVersion`).

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::{error, json, Api};
use crate::registry::custom::compare_versions;
use crate::registry::{Served, RESOURCES};
use crate::status::ApiError;

/// The Kubernetes version the sandbox answers `/version` with.
pub const MAJOR: &str = "1";
pub const MINOR: &str = "33";

/// Answers discovery paths; None for everything else.
pub fn route(api: &Api, method: &Method, path: &str) -> Option<Response> {
    if method != Method::GET {
        return None;
    }
    let listed = || listed(&|g| api.serves(g), &custom_listed(api));
    let body = match path.trim_end_matches('/') {
        "/version" => version(),
        "/api" => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": api.addr.to_string()}],
        }),
        "/apis" => groups(&listed()),
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
            let missing = || {
                Some(error(&ApiError::NoRoute(format!(
                    "the server could not find the requested resource ({p})"
                ))))
            };
            match segments.as_slice() {
                ["api", "v1"] => resource_list(&listed(), "", "v1")?,
                ["apis", group, version] => match resource_list(&listed(), group, version) {
                    Some(list) => list,
                    None if !api.serves(group) || is_custom_group(api, group) => return missing(),
                    None => return None,
                },
                ["apis", group] => match group_body(&listed(), group) {
                    Some(body) => body,
                    None if !api.serves(group) || is_custom_group(api, group) => return missing(),
                    None => return None,
                },
                _ => return None,
            }
        }
    };
    Some(json(StatusCode::OK, &body))
}

/// Whether a definition (established or not) names this group: its paths
/// are the apiextensions server's, which answers 404 for what it does not
/// list.
fn is_custom_group(api: &Api, group: &str) -> bool {
    let index = api.store.custom_resources();
    index.resources().iter().any(|r| r.group == group)
}

/// The custom resources discovery lists: those of established
/// definitions, by group, each group's versions by priority.
fn custom_listed(api: &Api) -> Vec<Served> {
    let index = api.store.custom_resources();
    let mut listed: Vec<Served> = index
        .resources()
        .iter()
        .filter(|r| r.custom.as_ref().is_some_and(|d| d.established))
        .filter(|r| {
            api.resolve(&r.group, &r.version, &r.plural)
                .is_some_and(|s| matches!(s, Served::Custom(_)))
        })
        .cloned()
        .map(Served::Custom)
        .collect();
    listed.sort_by(|a, b| {
        a.group
            .cmp(&b.group)
            .then(compare_versions(&b.version, &a.version))
    });
    listed
}

/// Every resource discovery lists: the built-in ones of the groups
/// `serves` admits, then `custom`.
fn listed(serves: &dyn Fn(&str) -> bool, custom: &[Served]) -> Vec<Served> {
    let mut all: Vec<Served> = RESOURCES
        .iter()
        .filter(|r| serves(&r.group))
        .map(Served::Builtin)
        .collect();
    all.extend(custom.iter().cloned());
    all
}

/// The group versions of `listed`, in discovery order ("" = core).
fn group_versions(listed: &[Served]) -> Vec<(&str, &str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in listed {
        if !out.contains(&(&*r.group, &*r.version)) {
            out.push((&r.group, &r.version));
        }
    }
    out
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

/// The groups of `listed`.
fn groups(listed: &[Served]) -> Value {
    let mut names: Vec<&str> = Vec::new();
    for (g, _) in group_versions(listed) {
        if !g.is_empty() && !names.contains(&g) {
            names.push(g);
        }
    }
    let groups: Vec<Value> = names
        .into_iter()
        .filter_map(|g| group_body(listed, g))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn group_body(listed: &[Served], group: &str) -> Option<Value> {
    let versions: Vec<Value> = group_versions(listed)
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first()?.clone();
    Some(
        json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions, "preferredVersion": preferred}),
    )
}

fn resource_list(listed: &[Served], group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in listed
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
        if let Some(definition) = &r.custom {
            entry["storageVersionHash"] = json!(definition.storage_version_hash);
        }
        resources.push(entry);
        for sub in &r.subresources {
            let (kind, verbs): (&str, &[&str]) = match &**sub {
                "log" => ("Pod", &["get"]),
                "portforward" => ("PodPortForwardOptions", &["create", "get"]),
                "scale" => ("Scale", &["get", "patch", "update"]),
                "token" => ("TokenRequest", &["create"]),
                _ => (&r.kind, &["get", "patch", "update"]),
            };
            let mut entry = json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": verbs,
            });
            match &**sub {
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
        let all = listed(&|_| true, &[]);
        let list = resource_list(&all, "", "v1").expect("core served");
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
        assert!(resource_list(&all, "apps", "v2").is_none());
    }

    #[test]
    fn groups_list_apps_batch_autoscaling_storage_rbac_authorization_and_snapshots() {
        let names = |serves: &dyn Fn(&str) -> bool| -> Vec<String> {
            groups(&listed(serves, &[]))["groups"]
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
            "apiextensions.k8s.io",
        ];
        let mut with = without.to_vec();
        with.push("snapshot.storage.k8s.io");
        assert_eq!(names(&|_| true), with);
        assert_eq!(names(&|g| g != crate::registry::SNAPSHOT_GROUP), without);
        let list = resource_list(&listed(&|_| true, &[]), "snapshot.storage.k8s.io", "v1")
            .expect("served");
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
