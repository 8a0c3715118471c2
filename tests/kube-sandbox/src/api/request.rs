//! Request URLs: which resource, namespace, object and subresource a path
//! names, and the query parameters the API understands.

use std::collections::HashMap;

use crate::registry::Served;
use crate::status::ApiError;

/// A resource path, parsed.
#[derive(Debug, Clone)]
pub struct Path {
    pub resource: Served,
    /// The namespace from the URL, when it has one.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl Path {
    /// `/api/v1[/namespaces/NS]/RESOURCE[/NAME[/SUB]]` or the same under
    /// `/apis/GROUP/VERSION`, of a built-in resource.
    #[cfg(test)]
    pub fn parse(path: &str) -> Result<Path, ApiError> {
        Path::resolve(path, |g, v, p| {
            crate::registry::find(g, v, p).map(Served::Builtin)
        })
    }

    /// A path, its resource found by `lookup(group, version, plural)`.
    pub fn resolve(
        path: &str,
        lookup: impl FnOnce(&str, &str, &str) -> Option<Served>,
    ) -> Result<Path, ApiError> {
        let not_found = || {
            ApiError::NoRoute(format!(
                "the server could not find the requested resource ({path})"
            ))
        };
        let segments: Vec<String> = path
            .trim_matches('/')
            .split('/')
            .map(|s| percent_decode(s).unwrap_or_else(|| s.to_string()))
            .collect();
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let (group, version, rest) = match segments.as_slice() {
            ["api", version, rest @ ..] => ("", *version, rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return Err(not_found()),
        };
        let (namespace, rest) = match rest {
            // A namespace's own subresources: /api/v1/namespaces/NS/status.
            ["namespaces", _, "status" | "finalize"] => (None, rest.to_vec()),
            ["namespaces", ns, plural, tail @ ..] => (Some(ns.to_string()), prepend(plural, tail)),
            _ => (None, rest.to_vec()),
        };
        let (plural, name, sub) = match rest.as_slice() {
            [plural] => (*plural, None, None),
            [plural, name] => (*plural, Some(name.to_string()), None),
            [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
            _ => return Err(not_found()),
        };
        let resource = lookup(group, version, plural).ok_or_else(not_found)?;
        if namespace.is_some() && !resource.namespaced {
            return Err(not_found());
        }
        if let Some(sub) = &sub {
            let namespace_finalize = resource.builtin_kind() == "Namespace" && sub == "finalize";
            if !(resource.has_subresource(sub) || namespace_finalize) {
                return Err(not_found());
            }
        }
        Ok(Path {
            resource,
            namespace,
            name,
            subresource: sub,
        })
    }

    /// The namespace writes go to ("" for cluster-scoped resources).
    pub fn namespace_or_default(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }
}

fn prepend<'a>(first: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![first];
    v.extend_from_slice(rest);
    v
}

/// Query parameters (the last value wins when one repeats).
#[derive(Debug, Clone, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(query: &str) -> Query {
        Query(
            query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    let decode = |s: &str| {
                        percent_decode(&s.replace('+', " ")).unwrap_or_else(|| s.to_string())
                    };
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// A boolean parameter: `watch=true`, `watch=1`.
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }

    pub fn number(&self, key: &str) -> Result<Option<i64>, ApiError> {
        self.get(key)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse()
                    .map_err(|_| ApiError::BadRequest(format!("invalid value for {key}: {v:?}")))
            })
            .transpose()
    }
}

/// `%2F` → `/`; None on a malformed escape or invalid UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_resource_namespace_and_subresource() {
        let p = Path::parse("/api/v1/namespaces/default/pods/app-0/log").expect("parses");
        assert_eq!(
            (
                &*p.resource.plural,
                p.namespace.as_deref(),
                p.name.as_deref(),
                p.subresource.as_deref()
            ),
            ("pods", Some("default"), Some("app-0"), Some("log"))
        );
        let p = Path::parse("/apis/apps/v1/statefulsets").expect("parses");
        assert_eq!((&*p.resource.kind, p.namespace), ("StatefulSet", None));
        let p = Path::parse("/api/v1/namespaces/team-a").expect("parses");
        assert_eq!(
            (&*p.resource.plural, p.name.as_deref()),
            ("namespaces", Some("team-a"))
        );
        let p = Path::parse("/api/v1/namespaces/team-a/finalize").expect("parses");
        assert_eq!(p.subresource.as_deref(), Some("finalize"));
        let p = Path::parse("/apis/storage.k8s.io/v1/storageclasses/fast").expect("parses");
        assert_eq!(p.name.as_deref(), Some("fast"));
    }

    #[test]
    fn unknown_paths_are_not_found() {
        for bad in [
            "/api/v1/widgets",
            "/api/v1/namespaces/a/nodes/n",
            "/api/v1/pods/a/b/c/d",
            "/healthz",
            "/api/v1/namespaces/a/pods/p/exec",
        ] {
            let err = Path::parse(bad).expect_err(bad);
            assert_eq!(err.code(), 404, "{bad}");
        }
    }

    #[test]
    fn queries_decode() {
        let q = Query::parse("labelSelector=app%3Ddb%2Ctier+in+%28a%29&watch=1&limit=500");
        assert_eq!(q.get("labelSelector"), Some("app=db,tier in (a)"));
        assert!(q.flag("watch"));
        assert_eq!(q.number("limit").ok().flatten(), Some(500));
        assert!(q.number("labelSelector").is_err());
    }
}
