//! RBAC authorization for service-account identities, as kube-apiserver's
//! RBAC authorizer decides (plugin/pkg/auth/authorizer/rbac/rbac.go,
//! `RBACAuthorizer.Authorize`, with `VisitRulesFor` of
//! pkg/registry/rbac/validation/rule.go and the matchers of
//! pkg/apis/rbac/v1/evaluation_helpers.go): the ClusterRoleBindings and
//! then the RoleBindings of the request's namespace whose subjects name
//! the user or one of its groups are visited; their role's rules allow
//! the request when one matches its verb, API group, resource (with
//! `resource/subresource` and `*/subresource`) and name.
//!
//! The admin (`system:masters`) and anonymous requests are allowed
//! everything, so that nothing but service accounts is restricted; the
//! bootstrap `system:basic-user` grant (create SelfSubjectAccessReviews)
//! is built in, and discovery (`system:discovery`) is never asked.
//! Non-resource URLs are not authorized.

use serde_json::{json, Value};

use super::policy::PolicyRule;
use super::Identity;
use crate::registry;
use crate::store::Store;

pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// What is asked, as the request-info filter derives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    /// `""` for the core group.
    pub group: String,
    pub resource: String,
    /// `""` without one.
    pub subresource: String,
    /// `""` for cluster-scoped requests.
    pub namespace: String,
    /// `""` for lists and creates.
    pub name: String,
}

impl Attributes {
    /// `pods` or `pods/log`.
    pub fn combined_resource(&self) -> String {
        match self.subresource.as_str() {
            "" => self.resource.clone(),
            sub => format!("{}/{sub}", self.resource),
        }
    }
}

/// The answer, with the reason the authorizer gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// `RBAC: allowed by RoleBinding "b/ns" of Role "r" to ServiceAccount
    /// "sa/ns"`; on a denial empty, or the roles that could not be found.
    pub reason: String,
}

/// Decides whether `identity` may do what `attrs` asks.
pub fn authorize(store: &Store, identity: &Identity, attrs: &Attributes) -> Decision {
    if !identity.is_rbac_enforced() {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    if attrs.group == "authorization.k8s.io"
        && attrs.resource == crate::registry::SELF_SUBJECT_ACCESS_REVIEWS
        && attrs.verb == "create"
    {
        return Decision {
            allowed: true,
            reason: "RBAC: allowed by ClusterRoleBinding \"system:basic-user\" of ClusterRole \"system:basic-user\" to Group \"system:authenticated\"".into(),
        };
    }
    let mut found = None;
    let errors = visit_bindings(
        store,
        identity,
        &attrs.namespace,
        |binding, subject, namespace, rules| {
            if rules.iter().any(|r| rule_allows(r, attrs)) {
                found = Some(describe(binding, subject, namespace));
                return false;
            }
            true
        },
    );
    match found {
        Some(how) => Decision {
            allowed: true,
            reason: format!("RBAC: allowed by {how}"),
        },
        None => Decision {
            allowed: false,
            reason: match errors.as_slice() {
                [] => String::new(),
                [one] => format!("RBAC: {one}"),
                all => format!("RBAC: [{}]", all.join(", ")),
            },
        },
    }
}

/// `VisitRulesFor`: calls `visit` with each ClusterRoleBinding, then each
/// RoleBinding of `namespace` (when not empty), that names the identity,
/// the subject that does, the binding's namespace and its role's rules,
/// until `visit` returns false. Returns the roles that could not be found.
fn visit_bindings(
    store: &Store,
    identity: &Identity,
    namespace: &str,
    mut visit: impl FnMut(&Value, &Value, &str, &[Value]) -> bool,
) -> Vec<String> {
    let user = identity.username();
    let groups = identity.groups();
    let mut errors = Vec::new();
    let mut scopes = vec![("clusterrolebindings", "")];
    if !namespace.is_empty() {
        scopes.push(("rolebindings", namespace));
    }
    for (plural, ns) in scopes {
        let bindings = store
            .list(registry::get(plural), (!ns.is_empty()).then_some(ns))
            .0;
        for binding in &bindings {
            let subjects = binding["subjects"].as_array().into_iter().flatten();
            let Some(subject) = subjects
                .into_iter()
                .find(|s| applies_to(s, &user, &groups, ns))
            else {
                continue;
            };
            match role_rules(store, &binding["roleRef"], ns) {
                Ok(rules) => {
                    if !visit(binding, subject, ns, &rules) {
                        return errors;
                    }
                }
                Err(e) => errors.push(e),
            }
        }
    }
    errors
}

/// `RulesFor`: every rule the identity holds in `namespace` (cluster-wide
/// rules count; "" for cluster-wide ones only), the bootstrap grants to
/// authenticated users included, with the roles that could not be found.
pub fn rules_for(
    store: &Store,
    identity: &Identity,
    namespace: &str,
) -> (Vec<PolicyRule>, Vec<String>) {
    let mut rules: Vec<PolicyRule> = bootstrap_rules()
        .iter()
        .map(PolicyRule::from_json)
        .collect();
    let errors = visit_bindings(store, identity, namespace, |_, _, _, found| {
        rules.extend(found.iter().map(PolicyRule::from_json));
        true
    });
    (rules, errors)
}

/// What the bootstrap ClusterRoleBindings give `system:authenticated`:
/// `system:basic-user` (the self reviews), `system:discovery` and
/// `system:public-info-viewer` (the discovery and health URLs).
fn bootstrap_rules() -> [Value; 3] {
    [
        json!({"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]}),
        json!({"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}),
        json!({"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]}),
    ]
}

/// `appliesToUser`: a User by name, a Group by membership, a
/// ServiceAccount by its user name (its namespace defaulting to the
/// binding's).
fn applies_to(subject: &Value, user: &str, groups: &[String], namespace: &str) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str() {
        Some("User") => name == user,
        Some("Group") => groups.iter().any(|g| g == name),
        Some("ServiceAccount") => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(namespace);
            !ns.is_empty() && user == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

/// `GetRoleReferenceRules`: a Role in the binding's namespace, or a
/// ClusterRole; the message of the NotFound when it is missing.
pub fn role_rules(store: &Store, role_ref: &Value, namespace: &str) -> Result<Vec<Value>, String> {
    let name = role_ref["name"].as_str().unwrap_or_default();
    let (plural, ns, singular) = match role_ref["kind"].as_str() {
        Some("Role") => ("roles", namespace, "role"),
        Some("ClusterRole") => ("clusterroles", "", "clusterrole"),
        other => return Err(format!("unsupported role reference kind: {other:?}")),
    };
    let role = store
        .get(registry::get(plural), ns, name)
        .map_err(|_| format!("{singular}.{RBAC_GROUP} \"{name}\" not found"))?;
    Ok(role["rules"].as_array().cloned().unwrap_or_default())
}

/// `RuleAllows` for a resource request.
fn rule_allows(rule: &Value, attrs: &Attributes) -> bool {
    let list = |key: &str| -> Vec<&str> {
        rule[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect()
    };
    let verbs = list("verbs");
    let groups = list("apiGroups");
    let names = list("resourceNames");
    (verbs.contains(&"*") || verbs.contains(&attrs.verb.as_str()))
        && (groups.contains(&"*") || groups.contains(&attrs.group.as_str()))
        && resource_matches(
            &list("resources"),
            &attrs.combined_resource(),
            &attrs.subresource,
        )
        && (names.is_empty() || names.contains(&attrs.name.as_str()))
}

/// `ResourceMatches`: `*`, the exact `resource[/subresource]`, or
/// `*/subresource`.
fn resource_matches(resources: &[&str], combined: &str, subresource: &str) -> bool {
    resources.iter().any(|r| {
        *r == "*"
            || *r == combined
            || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
    })
}

/// How a binding allowed it, as `clusterRoleBindingDescriber` and
/// `roleBindingDescriber` print it.
fn describe(binding: &Value, subject: &Value, namespace: &str) -> String {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let name = text(&binding["metadata"]["name"]);
    let role = format!(
        "{} {:?}",
        text(&binding["roleRef"]["kind"]),
        text(&binding["roleRef"]["name"])
    );
    let kind = text(&subject["kind"]);
    let subject_name = match kind.as_str() {
        "ServiceAccount" => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(namespace);
            format!("{}/{ns}", text(&subject["name"]))
        }
        _ => text(&subject["name"]),
    };
    match namespace {
        "" => format!("ClusterRoleBinding {name:?} of {role} to {kind} {subject_name:?}"),
        ns => format!("RoleBinding \"{name}/{ns}\" of {role} to {kind} {subject_name:?}"),
    }
}

/// The message of the 403, as the apiserver's `forbiddenMessage` writes it.
pub fn forbidden_message(user: &str, attrs: &Attributes) -> String {
    let resource = attrs.combined_resource();
    let (verb, group) = (&attrs.verb, &attrs.group);
    match attrs.namespace.as_str() {
        "" => format!("User {user:?} cannot {verb} resource {resource:?} in API group {group:?} at the cluster scope"),
        ns => format!("User {user:?} cannot {verb} resource {resource:?} in API group {group:?} in the namespace {ns:?}"),
    }
}

#[cfg(test)]
#[path = "rbac_tests.rs"]
mod tests;
