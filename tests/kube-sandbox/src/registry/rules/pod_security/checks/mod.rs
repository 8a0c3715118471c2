//! The checks of the Pod Security Standards, as the policy package of
//! k8s.io/pod-security-admission v0.33 (what a v1.33 API server runs)
//! words its refusals: each check looks at the pod's metadata and spec
//! and either allows it or names a reason ("host namespaces") with an
//! optional detail ("hostNetwork=true"). Checks that moved between policy
//! versions are written at their latest version, for every version.

use std::collections::BTreeSet;

use serde_json::Value;

use super::Level;
use baseline::{
    app_armor_profile, capabilities_baseline, host_namespaces, host_path_volumes, host_ports,
    privileged, proc_mount, se_linux_options, seccomp_profile_baseline, sysctls,
    windows_host_process,
};
use restricted::{
    allow_privilege_escalation, capabilities_restricted, restricted_volumes, run_as_non_root,
    run_as_user, seccomp_profile_restricted,
};

mod baseline;
mod restricted;

/// What one check refused: its reason, and the detail shown in
/// parentheses after it when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

type Check = fn(&Value, &Value) -> Option<Violation>;

/// The baseline checks by ID, in the order the evaluator runs them: IDs
/// sorted.
const BASELINE: [(&str, Check); 11] = [
    ("appArmorProfile", app_armor_profile),
    ("capabilities_baseline", capabilities_baseline),
    ("hostNamespaces", host_namespaces),
    ("hostPathVolumes", host_path_volumes),
    ("hostPorts", host_ports),
    ("privileged", privileged),
    ("procMount", proc_mount),
    ("seLinuxOptions", se_linux_options),
    ("seccompProfile_baseline", seccomp_profile_baseline),
    ("sysctls", sysctls),
    ("windowsHostProcess", windows_host_process),
];

/// The restricted checks, sorted by ID, run after the baseline checks they
/// do not replace (the third field).
const RESTRICTED: [(&str, Check, &[&str]); 6] = [
    ("allowPrivilegeEscalation", allow_privilege_escalation, &[]),
    (
        "capabilities_restricted",
        capabilities_restricted,
        &["capabilities_baseline"],
    ),
    (
        "restrictedVolumes",
        restricted_volumes,
        &["hostPathVolumes"],
    ),
    ("runAsNonRoot", run_as_non_root, &[]),
    ("runAsUser", run_as_user, &[]),
    (
        "seccompProfile_restricted",
        seccomp_profile_restricted,
        &["seccompProfile_baseline"],
    ),
];

/// Every violation of `level` by a pod with this metadata and spec, in
/// the evaluator's order; empty when the pod is allowed.
pub fn evaluate(level: Level, meta: &Value, spec: &Value) -> Vec<Violation> {
    let restricted: &[(&str, Check, &[&str])] = match level {
        Level::Privileged => return Vec::new(),
        Level::Baseline => &[],
        Level::Restricted => &RESTRICTED,
    };
    let replaced = |id: &str| restricted.iter().any(|(_, _, over)| over.contains(&id));
    let baseline = BASELINE
        .iter()
        .filter(|(id, _)| !replaced(id))
        .map(|(_, check)| check);
    baseline
        .chain(restricted.iter().map(|(_, check, _)| check))
        .filter_map(|check| check(meta, spec))
        .collect()
}

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation {
        reason: reason.into(),
        detail: detail.into(),
    })
}

/// Init containers, containers, then ephemeral containers.
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |list| spec[list].as_array().into_iter().flatten())
}

fn name(container: &Value) -> String {
    container["name"].as_str().unwrap_or_default().to_string()
}

/// A field that is set: neither absent nor null.
fn set(value: &Value) -> Option<&Value> {
    (!value.is_null()).then_some(value)
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

fn is_windows(spec: &Value) -> bool {
    spec["os"]["name"] == "windows"
}

/// `"a", "b"`, as the checks quote lists (no escaping).
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let joined: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("\"{}\"", joined.join("\", \""))
}

fn pluralize<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 {
        singular
    } else {
        plural
    }
}

/// `container "a"` or `containers "a", "b"`.
fn containers_phrase(names: &[String]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

/// `pod and containers "a", "b"`: who set a forbidden value.
fn setters(pod: bool, containers: &[String]) -> Vec<String> {
    let mut who = Vec::new();
    if pod {
        who.push("pod".to_string());
    }
    if !containers.is_empty() {
        who.push(containers_phrase(containers));
    }
    who
}

fn sorted(set: BTreeSet<String>) -> Vec<String> {
    set.into_iter().collect()
}

fn added_capabilities(c: &Value) -> impl Iterator<Item = String> + '_ {
    c["securityContext"]["capabilities"]["add"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
}

fn volumes(spec: &Value) -> impl Iterator<Item = &Value> {
    spec["volumes"].as_array().into_iter().flatten()
}
