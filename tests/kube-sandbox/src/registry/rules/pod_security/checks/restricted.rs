//! The restricted checks, run in a restricted namespace after the
//! baseline checks they do not replace.

use std::collections::BTreeSet;

use serde_json::Value;

use super::baseline::{seccomp, seccomp_forbidden};
use super::*;

pub(super) fn allow_privilege_escalation(_: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    let bad: Vec<String> = containers(spec)
        .filter(|c| c["securityContext"]["allowPrivilegeEscalation"] != false)
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    )
}

pub(super) fn capabilities_restricted(_: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    let (mut no_drop, mut adding, mut caps) = (Vec::new(), Vec::new(), BTreeSet::new());
    for c in containers(spec) {
        let Some(capabilities) = set(&c["securityContext"]["capabilities"]) else {
            no_drop.push(name(c));
            continue;
        };
        let drops_all = capabilities["drop"]
            .as_array()
            .is_some_and(|d| d.iter().any(|cap| cap == "ALL"));
        if !drops_all {
            no_drop.push(name(c));
        }
        let extra: Vec<String> = added_capabilities(c)
            .filter(|cap| cap != "NET_BIND_SERVICE")
            .collect();
        if !extra.is_empty() {
            adding.push(name(c));
            caps.extend(extra);
        }
    }
    let mut details = Vec::new();
    if !no_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&no_drop)
        ));
    }
    if !adding.is_empty() {
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&sorted(caps))
        ));
    }
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

/// The volume sources the restricted profile allows, and the names of the
/// others as the check reports them.
pub(super) const ALLOWED_VOLUMES: [&str; 9] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

pub(super) const RESTRICTED_VOLUMES: [&str; 21] = [
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

pub(super) fn restricted_volumes(_: &Value, spec: &Value) -> Option<Violation> {
    let (mut bad, mut kinds) = (Vec::new(), BTreeSet::new());
    for v in volumes(spec) {
        if ALLOWED_VOLUMES.iter().any(|k| set(&v[*k]).is_some()) {
            continue;
        }
        bad.push(name(v));
        let kind = RESTRICTED_VOLUMES
            .iter()
            .find(|k| set(&v[**k]).is_some())
            .unwrap_or(&"unknown");
        kinds.insert(kind.to_string());
    }
    if bad.is_empty() {
        return None;
    }
    let kinds = sorted(kinds);
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                kinds.len()
            ),
            join_quote(&kinds)
        ),
    )
}

pub(super) fn run_as_non_root(_: &Value, spec: &Value) -> Option<Violation> {
    let pod = &spec["securityContext"]["runAsNonRoot"];
    let pod_true = *pod == true;
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match &c["securityContext"]["runAsNonRoot"] {
            Value::Bool(false) => explicit.push(name(c)),
            Value::Bool(true) => {}
            _ if !pod_true => implicit.push(name(c)),
            _ => {}
        }
    }
    let who = setters(*pod == false, &explicit);
    if !who.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                who.join(" and ")
            ),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "runAsNonRoot != true",
        format!(
            "pod or {} must set securityContext.runAsNonRoot=true",
            containers_phrase(&implicit)
        ),
    )
}

pub(super) fn run_as_user(_: &Value, spec: &Value) -> Option<Violation> {
    let root = |sc: &Value| sc["runAsUser"].as_i64() == Some(0);
    let bad: Vec<String> = containers(spec)
        .filter(|c| root(&c["securityContext"]))
        .map(name)
        .collect();
    let who = setters(root(&spec["securityContext"]), &bad);
    if who.is_empty() {
        return None;
    }
    violation(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", who.join(" and ")),
    )
}

pub(super) fn seccomp_profile_restricted(_: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    let found = seccomp(spec);
    let implicit = if found.pod_valid {
        Vec::new()
    } else {
        found.unset.clone()
    };
    if let Some(v) = seccomp_forbidden(found) {
        return Some(v);
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&implicit)
        ),
    )
}
