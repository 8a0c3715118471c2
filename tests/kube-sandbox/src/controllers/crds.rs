//! The apiextensions server's controllers of CustomResourceDefinitions,
//! in one level-triggered pass:
//!
//! - naming (`NamingConditionController`): a definition's names are
//!   accepted unless another definition of its group holds one of them
//!   (`NamesAccepted`, with `status.acceptedNames`);
//! - establishing (`EstablishingController`): accepted names make it
//!   `Established`. A real server goes through `Established=False,
//!   Installing` for a moment (and waits 5 s in HA clusters); here both
//!   conditions come in one status write, right after the create, so a
//!   client waiting for `Established` sees it within milliseconds;
//! - finalizing (`CRDFinalizer`): a definition being deleted loses its
//!   custom resources, then its cleanup finalizer, and then it is gone
//!   (the store removes it), and so are its resources' endpoints.

use serde_json::{Map, Value};

use super::{is_terminating, log_err, name_of, Ctx};
use crate::registry::custom::{condition_true, CLEANUP_FINALIZER, CRD_PLURAL};
use crate::registry::rules::set_condition;
use crate::registry::{self};
use crate::store::DeleteOptions;

pub fn reconcile(ctx: &Ctx) {
    let (definitions, _) = ctx.store.list(registry::get(CRD_PLURAL), None);
    for crd in &definitions {
        if is_terminating(crd) {
            finalize(ctx, crd);
        } else {
            accept(ctx, &definitions, crd);
        }
    }
}

/// The names of the group's other definitions: resource names (plural,
/// singular, short names) and kinds (kind, list kind) they hold.
fn names_held(definitions: &[Value], crd: &Value) -> (Vec<String>, Vec<String>) {
    let (mut resources, mut kinds) = (Vec::new(), Vec::new());
    let group = &crd["spec"]["group"];
    let others = definitions.iter().filter(|d| {
        d["spec"]["group"] == *group && d["metadata"]["name"] != crd["metadata"]["name"]
    });
    for other in others {
        let accepted = &other["status"]["acceptedNames"];
        for field in ["plural", "singular"] {
            resources.extend(accepted[field].as_str().map(str::to_string));
        }
        let short = accepted["shortNames"].as_array().into_iter().flatten();
        resources.extend(short.filter_map(Value::as_str).map(str::to_string));
        for field in ["kind", "listKind"] {
            kinds.extend(accepted[field].as_str().map(str::to_string));
        }
    }
    resources.retain(|n| !n.is_empty());
    kinds.retain(|n| !n.is_empty());
    (resources, kinds)
}

/// `calculateNamesAndConditions`: the names that can be accepted, and
/// why not all of them when they cannot (the condition's reason and
/// message).
fn accepted_names(definitions: &[Value], crd: &Value) -> (Value, Option<(String, String)>) {
    let (resources, kinds) = names_held(definitions, crd);
    let requested = &crd["spec"]["names"];
    let current = &crd["status"]["acceptedNames"];
    let mut names: Map<String, Value> = current.as_object().cloned().unwrap_or_default();
    let mut conflict = None;
    let fresh = |field: &str, held: &[String]| {
        let want = requested[field].as_str().unwrap_or_default();
        want == current[field].as_str().unwrap_or_default() || !held.iter().any(|h| h == want)
    };
    for (field, held, reason) in [
        ("plural", &resources, "PluralConflict"),
        ("singular", &resources, "SingularConflict"),
        ("kind", &kinds, "KindConflict"),
        ("listKind", &kinds, "ListKindConflict"),
    ] {
        if fresh(field, held) {
            names.insert(field.into(), requested[field].clone());
        } else {
            let want = requested[field].as_str().unwrap_or_default();
            conflict = Some((reason.to_string(), format!("{want:?} is already in use")));
        }
    }
    let short: Vec<&str> = requested["shortNames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let taken: Vec<String> = short
        .iter()
        .filter(|s| resources.iter().any(|r| r == *s))
        .map(|s| format!("{s:?} is already in use"))
        .collect();
    match taken.as_slice() {
        [] => {
            names.insert("shortNames".into(), requested["shortNames"].clone());
        }
        [one] => conflict = Some(("ShortNamesConflict".into(), one.clone())),
        all => conflict = Some(("ShortNamesConflict".into(), format!("[{}]", all.join(", ")))),
    }
    names.insert("categories".into(), requested["categories"].clone());
    names.retain(|_, v| !v.is_null());
    (Value::Object(names), conflict)
}

/// Accepts a definition's names and establishes it.
fn accept(ctx: &Ctx, definitions: &[Value], crd: &Value) {
    let (names, conflict) = accepted_names(definitions, crd);
    let settled = names == crd["status"]["acceptedNames"]
        && condition_true(crd, "NamesAccepted")
        && condition_true(crd, "Established");
    if settled {
        return;
    }
    let (_, name) = name_of(crd);
    let written = ctx
        .store
        .modify(registry::get(CRD_PLURAL), "", name, |obj| {
            obj["status"]["acceptedNames"] = names;
            let mut changed = match &conflict {
                None => set_condition(
                    obj,
                    "NamesAccepted",
                    "True",
                    "NoConflicts",
                    "no conflicts found",
                ),
                Some((reason, message)) => {
                    set_condition(obj, "NamesAccepted", "False", reason, message)
                }
            };
            if conflict.is_none() {
                changed |= set_condition(
                    obj,
                    "Established",
                    "True",
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                );
            } else if !condition_true(obj, "Established") {
                changed |= set_condition(
                    obj,
                    "Established",
                    "False",
                    "NotAccepted",
                    "not all names are accepted",
                );
            }
            changed || obj["status"]["acceptedNames"] != crd["status"]["acceptedNames"]
        });
    log_err("custom resource definition names", written);
}

/// Deletes a terminating definition's custom resources; once none is
/// left, lets the definition go.
fn finalize(ctx: &Ctx, crd: &Value) {
    let holds = crd["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == CLEANUP_FINALIZER));
    if !holds {
        return;
    }
    let (_, name) = name_of(crd);
    let definitions = registry::get(CRD_PLURAL);
    let condition = match ctx.store.resource_for_key(name) {
        Some(res) => {
            let (items, _) = ctx.store.list(&res, None);
            for item in items.iter().filter(|i| !is_terminating(i)) {
                let (ns, item_name) = name_of(item);
                let deleted = ctx
                    .store
                    .delete(&res, ns, item_name, &DeleteOptions::default());
                match deleted {
                    Err(crate::ApiError::NotFound { .. }) => {}
                    other => {
                        log_err("custom resource cleanup", other);
                    }
                }
            }
            if !ctx.store.list(&res, None).0.is_empty() {
                // Finalizers of its own hold a custom resource: wait.
                let waiting = ctx.store.modify(definitions, "", name, |obj| {
                    set_condition(
                        obj,
                        "Terminating",
                        "True",
                        "InstanceDeletionInProgress",
                        "CustomResource deletion is in progress",
                    )
                });
                log_err("custom resource definition cleanup", waiting);
                return;
            }
            ("InstanceDeletionCompleted", "removed all instances")
        }
        None => ("NeverEstablished", "resource was never established"),
    };
    let done = ctx.store.modify(definitions, "", name, |obj| {
        set_condition(obj, "Terminating", "False", condition.0, condition.1);
        if let Some(list) = obj["metadata"]["finalizers"].as_array_mut() {
            list.retain(|f| f != CLEANUP_FINALIZER);
        }
        true
    });
    log_err("custom resource definition finalizer", done);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn definition(name: &str, plural: &str, kind: &str, short: &[&str]) -> Value {
        json!({
            "metadata": {"name": name},
            "spec": {"group": "example.com", "names": {
                "plural": plural, "singular": plural.trim_end_matches('s'),
                "kind": kind, "listKind": format!("{kind}List"), "shortNames": short,
            }},
            "status": {"acceptedNames": {"plural": "", "kind": ""}},
        })
    }

    #[test]
    fn names_held_by_another_definition_of_the_group_conflict() {
        let mut first = definition("widgets.example.com", "widgets", "Widget", &["wd"]);
        first["status"]["acceptedNames"] = first["spec"]["names"].clone();
        let second = definition("gadgets.example.com", "gadgets", "Widget", &["wd", "gd"]);
        let all = [first.clone(), second.clone()];
        let (names, conflict) = accepted_names(&all, &second);
        assert_eq!(names["plural"], "gadgets");
        assert!(names.get("kind").is_some_and(|k| k == ""));
        assert_eq!(
            conflict,
            Some((
                "ShortNamesConflict".into(),
                "\"wd\" is already in use".into()
            ))
        );
        let (names, conflict) = accepted_names(&all, &first);
        assert_eq!((names, conflict), (first["spec"]["names"].clone(), None));
    }
}
