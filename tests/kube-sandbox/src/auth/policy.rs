//! Policy rules compared with each other: whether the rules someone holds
//! cover the rules of a role they write or bind, as kube-apiserver's
//! escalation check decides it (`Covers` and `BreakdownRule` of
//! staging/src/k8s.io/component-helpers/auth/rbac/validation, the
//! message's `CompactRules` and `CompactString` of pkg/registry/rbac).
//!
//! A rule is split into one rule per (API group, resource, verb[,
//! resource name]) and per (non-resource URL, verb); each piece must be
//! covered by one rule held: `*` or the verb, `*` or the group, `*`, the
//! resource, or `*/subresource` for `resource/subresource`, no
//! `resourceNames` held or the piece's name among them (a piece without a
//! name needs a rule without names), and the URL itself or a held prefix
//! ending in `*`.

use serde_json::{json, Value};

/// An RBAC `PolicyRule`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

impl PolicyRule {
    /// A rule as stored (`apiGroups`, `resources`, ... string lists);
    /// missing lists are empty.
    pub fn from_json(rule: &Value) -> PolicyRule {
        let list = |key: &str| -> Vec<String> {
            rule[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        };
        PolicyRule {
            verbs: list("verbs"),
            api_groups: list("apiGroups"),
            resources: list("resources"),
            resource_names: list("resourceNames"),
            non_resource_urls: list("nonResourceURLs"),
        }
    }

    /// The rules of a Role or ClusterRole object.
    pub fn all_of(role: &Value) -> Vec<PolicyRule> {
        role["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(PolicyRule::from_json)
            .collect()
    }

    pub fn to_json(&self) -> Value {
        let mut rule = json!({"verbs": self.verbs});
        for (key, list) in [
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !list.is_empty() {
                rule[key] = json!(list);
            }
        }
        rule
    }

    /// The rule as the escalation message prints it:
    /// `{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}`, the
    /// lists quoted as Go's `%q` prints a string slice.
    pub fn compact_string(&self) -> String {
        let parts: Vec<String> = [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ]
        .into_iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(name, list)| format!("{name}:{}", quoted(list)))
        .collect();
        format!("{{{}}}", parts.join(", "))
    }

    /// One rule per (group, resource, verb[, name]) and per (URL, verb).
    fn breakdown(&self) -> Vec<PolicyRule> {
        let one = |s: &String| vec![s.clone()];
        let mut pieces = Vec::new();
        for group in &self.api_groups {
            for resource in &self.resources {
                for verb in &self.verbs {
                    let piece = PolicyRule {
                        verbs: one(verb),
                        api_groups: one(group),
                        resources: one(resource),
                        ..PolicyRule::default()
                    };
                    if self.resource_names.is_empty() {
                        pieces.push(piece);
                    } else {
                        pieces.extend(self.resource_names.iter().map(|name| PolicyRule {
                            resource_names: one(name),
                            ..piece.clone()
                        }));
                    }
                }
            }
        }
        for url in &self.non_resource_urls {
            pieces.extend(self.verbs.iter().map(|verb| PolicyRule {
                verbs: one(verb),
                non_resource_urls: one(url),
                ..PolicyRule::default()
            }));
        }
        pieces
    }

    /// Whether this (held) rule covers `piece`, one of [`Self::breakdown`]'s.
    fn covers_piece(&self, piece: &PolicyRule) -> bool {
        let all_or_each = |held: &[String], wanted: &[String], all: &str| {
            contains(held, all) || wanted.iter().all(|w| contains(held, w))
        };
        let names = if piece.resource_names.is_empty() {
            self.resource_names.is_empty()
        } else {
            self.resource_names.is_empty()
                || piece
                    .resource_names
                    .iter()
                    .all(|n| contains(&self.resource_names, n))
        };
        all_or_each(&self.verbs, &piece.verbs, "*")
            && all_or_each(&self.api_groups, &piece.api_groups, "*")
            && resources_cover(&self.resources, &piece.resources)
            && piece
                .non_resource_urls
                .iter()
                .all(|url| self.non_resource_urls.iter().any(|h| url_covers(h, url)))
            && names
    }

    /// A single group and resource with verbs and nothing else: such
    /// pieces are merged in the message.
    fn simple_resource(&self) -> Option<(&str, &str)> {
        match (self.api_groups.as_slice(), self.resources.as_slice()) {
            ([group], [resource])
                if self.resource_names.is_empty() && self.non_resource_urls.is_empty() =>
            {
                Some((group, resource))
            }
            _ => None,
        }
    }
}

fn contains(list: &[String], item: &str) -> bool {
    list.iter().any(|s| s == item)
}

/// `resourceCoversAll`: `*`, each resource itself, or `*/sub` for a
/// `resource/sub`.
fn resources_cover(held: &[String], wanted: &[String]) -> bool {
    if contains(held, "*") {
        return true;
    }
    wanted.iter().all(|r| {
        contains(held, r)
            || r.split_once('/')
                .is_some_and(|(_, sub)| contains(held, &format!("*/{sub}")))
    })
}

/// `nonResourceURLCovers`: the same URL, or a held `/prefix*`.
fn url_covers(held: &str, url: &str) -> bool {
    held == url
        || held
            .strip_suffix('*')
            .is_some_and(|prefix| url.starts_with(prefix.trim_end_matches('*')))
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn quoted(list: &[String]) -> String {
    let items: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(" "))
}

/// `Covers`: the pieces of `wanted` that no rule of `held` covers (none
/// when `held` covers it all).
pub fn uncovered(held: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    wanted
        .iter()
        .flat_map(PolicyRule::breakdown)
        .filter(|piece| !held.iter().any(|h| h.covers_piece(piece)))
        .collect()
}

/// `CompactRules`: pieces of one group and resource that differ only by
/// verb become one rule with the verbs in the order met; others stay.
pub fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut simple: Vec<PolicyRule> = Vec::new();
    let mut other = Vec::new();
    for rule in rules {
        let Some(key) = rule.simple_resource() else {
            other.push(rule);
            continue;
        };
        match simple.iter_mut().find(|s| s.simple_resource() == Some(key)) {
            Some(merged) => merged.verbs.extend(rule.verbs),
            None => simple.push(rule),
        }
    }
    other.extend(simple);
    other
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(value: Value) -> PolicyRule {
        PolicyRule::from_json(&value)
    }

    fn covered(held: Value, wanted: Value) -> bool {
        let held: Vec<PolicyRule> = held
            .as_array()
            .expect("list")
            .iter()
            .map(PolicyRule::from_json)
            .collect();
        uncovered(&held, &[rule(wanted)]).is_empty()
    }

    #[test]
    fn verbs_groups_and_resources_cover_with_wildcards() {
        let pods = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]});
        assert!(covered(
            json!([pods]),
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})
        ));
        assert!(!covered(
            json!([pods]),
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]})
        ));
        assert!(!covered(
            json!([pods]),
            json!({"apiGroups": ["apps"], "resources": ["pods"], "verbs": ["get"]})
        ));
        let all = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
        assert!(covered(
            all.clone(),
            json!({"apiGroups": ["apps", ""], "resources": ["deployments/scale", "x"], "verbs": ["patch", "escalate"], "resourceNames": ["a"]})
        ));
        // A wildcard asked for is covered only by a wildcard held.
        assert!(!covered(
            json!([pods]),
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]})
        ));
        assert!(!covered(
            json!([pods]),
            json!({"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]})
        ));
        // Verbs split across two held rules still cover.
        let split = json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        ]);
        assert!(covered(
            split,
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]})
        ));
    }

    #[test]
    fn subresources_are_their_own_resources_unless_held_by_star_slash() {
        let pods = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]);
        assert!(!covered(
            pods,
            json!({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]})
        ));
        let any_log = json!([{"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]}]);
        assert!(covered(
            any_log.clone(),
            json!({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]})
        ));
        assert!(!covered(
            any_log,
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})
        ));
    }

    #[test]
    fn resource_names_restrict_what_is_held() {
        let named = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["a", "b"]}]);
        assert!(covered(
            named.clone(),
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["b"]})
        ));
        assert!(!covered(
            named.clone(),
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["c"]})
        ));
        assert!(!covered(
            named,
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]})
        ));
        let unnamed = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]);
        assert!(covered(
            unnamed,
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["c"]})
        ));
    }

    #[test]
    fn non_resource_urls_cover_by_prefix() {
        let held = json!([{"nonResourceURLs": ["/api", "/apis/*"], "verbs": ["get"]}]);
        assert!(covered(
            held.clone(),
            json!({"nonResourceURLs": ["/api", "/apis/apps/v1"], "verbs": ["get"]})
        ));
        assert!(!covered(
            held.clone(),
            json!({"nonResourceURLs": ["/api/v1"], "verbs": ["get"]})
        ));
        assert!(!covered(
            held,
            json!({"nonResourceURLs": ["/api"], "verbs": ["post"]})
        ));
    }

    #[test]
    fn the_message_merges_verbs_of_one_resource_and_prints_as_go_does() {
        let held = [rule(
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}),
        )];
        let wanted = [
            rule(
                json!({"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "delete", "list"]}),
            ),
            rule(
                json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["x"]}),
            ),
        ];
        let mut lines: Vec<String> = compact(uncovered(&held, &wanted))
            .iter()
            .map(PolicyRule::compact_string)
            .collect();
        lines.sort();
        assert_eq!(
            lines,
            [
                r#"{APIGroups:[""], Resources:["configmaps"], ResourceNames:["x"], Verbs:["get"]}"#,
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete" "list"]}"#,
                r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get" "delete" "list"]}"#,
            ]
        );
    }
}
