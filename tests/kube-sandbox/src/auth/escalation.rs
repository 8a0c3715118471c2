//! RBAC escalation prevention: the checks kube-apiserver's RBAC storages
//! make on writes of roles and bindings (pkg/registry/rbac/role,
//! clusterrole, rolebinding and clusterrolebinding `policybased`, with
//! `EscalationAllowed`, `RoleEscalationAuthorized`, `BindingAuthorized`
//! and `ConfirmNoEscalation`), so that nobody grants what they do not
//! hold.
//!
//! - Writing a Role or ClusterRole: allowed when the writer holds every
//!   rule it has ([`rbac::rules_for`] in the request's namespace, which
//!   for a ClusterRole is cluster-wide only), or may `escalate` roles
//!   (clusterroles) in that namespace (with the object's name on an
//!   update; a create has none, as the request info has none).
//! - Writing a RoleBinding or ClusterRoleBinding: allowed when the writer
//!   may `bind` the referenced role (`roles` or `clusterroles`, its name,
//!   in the binding's namespace, "" for a ClusterRoleBinding), or holds
//!   every rule of that role; a role that does not exist is then a 404.
//! - An update that changes only `ownerReferences` and `finalizers`, what
//!   the garbage collector writes, is never checked.
//!
//! Only RBAC-enforced identities are checked: the admin is in
//! `system:masters`, which may always escalate, and anonymous requests
//! are not restricted by the sandbox at all.

use serde_json::Value;

use super::policy::{self, PolicyRule};
use super::rbac::{self, Attributes, RBAC_GROUP};
use super::Identity;
use crate::registry::Resource;
use crate::status::ApiError;
use crate::store::Store;

/// A write of `object` (the new state; `old` the stored one on an update)
/// to `resource` in `namespace` ("" for cluster-scoped kinds) by
/// `identity`: Ok when it grants nothing the writer lacks; otherwise the
/// 403 (or the 404 of a missing role) the API server answers.
pub fn check(
    store: &Store,
    identity: &Identity,
    resource: &Resource,
    namespace: &str,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if !identity.is_rbac_enforced() || resource.group != RBAC_GROUP {
        return Ok(());
    }
    if old.is_some_and(|old| only_gc_fields_change(object, old)) {
        return Ok(());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    match &*resource.plural {
        "roles" | "clusterroles" => {
            // The request's own name: none on a create.
            let requested = if old.is_some() { name } else { "" };
            if allowed(
                store,
                identity,
                "escalate",
                &resource.plural,
                namespace,
                requested,
            ) {
                return Ok(());
            }
            confirm_no_escalation(store, identity, namespace, &PolicyRule::all_of(object))
                .map_err(|message| forbidden(resource, name, message))
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = &object["roleRef"];
            let role = role_ref["name"].as_str().unwrap_or_default();
            let plural = match role_ref["kind"].as_str() {
                Some("Role") => "roles",
                Some("ClusterRole") => "clusterroles",
                // Validation refuses any other kind.
                _ => return Ok(()),
            };
            if allowed(store, identity, "bind", plural, namespace, role) {
                return Ok(());
            }
            let rules = rbac::role_rules(store, role_ref, namespace)
                .map_err(|_| ApiError::not_found(&format!("{plural}.{RBAC_GROUP}"), role))?;
            let rules: Vec<PolicyRule> = rules.iter().map(PolicyRule::from_json).collect();
            confirm_no_escalation(store, identity, namespace, &rules)
                .map_err(|message| forbidden(resource, name, message))
        }
        _ => Ok(()),
    }
}

/// Whether the authorizer allows `verb` on the RBAC `resource` named
/// `name` in `namespace`, as `RoleEscalationAuthorized` and
/// `BindingAuthorized` ask it.
fn allowed(
    store: &Store,
    identity: &Identity,
    verb: &str,
    resource: &str,
    namespace: &str,
    name: &str,
) -> bool {
    let attributes = Attributes {
        verb: verb.into(),
        group: RBAC_GROUP.into(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: namespace.into(),
        name: name.into(),
    };
    rbac::authorize(store, identity, &attributes).allowed
}

/// `ConfirmNoEscalation`: Ok when the rules `identity` holds in
/// `namespace` cover `rules`; otherwise the message naming what is
/// missing, one compacted rule a line, sorted.
fn confirm_no_escalation(
    store: &Store,
    identity: &Identity,
    namespace: &str,
    rules: &[PolicyRule],
) -> Result<(), String> {
    let (held, errors) = rbac::rules_for(store, identity, namespace);
    let missing = policy::uncovered(&held, rules);
    if missing.is_empty() {
        return Ok(());
    }
    let mut lines: Vec<String> = policy::compact(missing)
        .iter()
        .map(PolicyRule::compact_string)
        .collect();
    lines.sort();
    lines.dedup();
    let groups: Vec<String> = identity.groups().iter().map(|g| format!("{g:?}")).collect();
    let mut message = format!(
        "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
        identity.username(),
        groups.join(" "),
        lines.join("\n")
    );
    if !errors.is_empty() {
        message.push_str(&format!("; resolution errors: [{}]", errors.join(", ")));
    }
    Err(message)
}

fn forbidden(resource: &Resource, name: &str, message: String) -> ApiError {
    ApiError::Denied {
        group: resource.group.to_string(),
        resource: resource.plural.to_string(),
        name: name.to_string(),
        message,
    }
}

/// `IsOnlyMutatingGCFields`: the new object is the old one but for
/// `ownerReferences`, `finalizers` and `managedFields` (and a
/// `resourceVersion` left out).
fn only_gc_fields_change(new: &Value, old: &Value) -> bool {
    let mut copy = new.clone();
    for field in ["ownerReferences", "finalizers", "managedFields"] {
        copy["metadata"][field] = old["metadata"][field].clone();
    }
    if copy["metadata"]["resourceVersion"].is_null() {
        copy["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    }
    without_nulls(&copy) == without_nulls(old)
}

/// The value without `null` members: JSON's absent and null are one.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
#[path = "escalation_tests.rs"]
mod tests;
