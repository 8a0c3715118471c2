//! Printers for RoleBindings and ClusterRoleBindings, as
//! pkg/printers/internalversion/printers.go prints them (Roles and
//! ClusterRoles get the default Name and Created At).

use serde_json::Value;
use time::OffsetDateTime;

use super::{age, list, name, text};

pub(super) const BINDING_COLUMNS: &str = "Name
    Role|string|RoleRef can only reference the current namespace or a ClusterRole.
    Age
    +Users|string|Users in the roleBinding
    +Groups|string|Groups in the roleBinding
    +ServiceAccounts|string|ServiceAccounts in the roleBinding";

/// `printRoleBinding`: the role as `Kind/name`, then the subjects by kind
/// (service accounts as `namespace/name`).
pub(super) fn binding_cells(binding: &Value, now: OffsetDateTime) -> Vec<Value> {
    let role = format!(
        "{}/{}",
        text(binding, "roleRef.kind"),
        text(binding, "roleRef.name")
    );
    let subjects = |kind: &str| -> String {
        list(binding, "subjects")
            .iter()
            .filter(|s| s["kind"] == kind)
            .map(|s| match kind {
                "ServiceAccount" => format!("{}/{}", text(s, "namespace"), text(s, "name")),
                _ => text(s, "name").to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    cells![
        name(binding),
        role,
        age(binding, now),
        subjects("User"),
        subjects("Group"),
        subjects("ServiceAccount")
    ]
}
