//! The baseline checks: what every pod of a baseline or restricted
//! namespace must pass (unless a restricted check replaces it).

use std::collections::BTreeSet;

use serde_json::Value;

use super::*;

pub(super) fn app_armor_profile(meta: &Value, spec: &Value) -> Option<Violation> {
    const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
    let allowed_type = |t: &Value| t == "RuntimeDefault" || t == "Localhost";
    let mut values = BTreeSet::new();
    let pod_bad = set(&spec["securityContext"]["appArmorProfile"])
        .filter(|p| !allowed_type(&p["type"]))
        .map(|p| values.insert(text(&p["type"])))
        .is_some();
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(p) = set(&c["securityContext"]["appArmorProfile"]) {
            if !allowed_type(&p["type"]) {
                bad.push(name(c));
                values.insert(text(&p["type"]));
            }
        }
    }
    let mut who = setters(pod_bad, &bad);
    let mut annotations: Vec<String> = meta["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
        .map(|(k, v)| (k, v.as_str().unwrap_or_default()))
        .filter(|(_, v)| !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/")))
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    let mut list = sorted(values);
    if !annotations.is_empty() {
        annotations.sort();
        who.push(pluralize("annotation", "annotations", annotations.len()).to_string());
        list.extend(annotations);
    }
    if who.is_empty() {
        return None;
    }
    violation(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            list.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            who.join(" and "),
            join_quote(&list)
        ),
    )
}

/// The capabilities a baseline container may add: the default set of the
/// container runtimes.
pub(super) const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

pub(super) fn capabilities_baseline(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let extra: Vec<String> = added_capabilities(c)
            .filter(|cap| !BASELINE_CAPABILITIES.contains(&cap.as_str()))
            .collect();
        if !extra.is_empty() {
            bad.push(name(c));
            caps.extend(extra);
        }
    }
    if bad.is_empty() {
        return None;
    }
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(&sorted(caps))
        ),
    )
}

pub(super) fn host_namespaces(_: &Value, spec: &Value) -> Option<Violation> {
    let shared: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|field| spec[*field] == true)
        .map(|field| format!("{field}=true"))
        .collect();
    if shared.is_empty() {
        return None;
    }
    violation("host namespaces", shared.join(", "))
}

pub(super) fn host_path_volumes(_: &Value, spec: &Value) -> Option<Violation> {
    let names: Vec<String> = volumes(spec)
        .filter(|v| set(&v["hostPath"]).is_some())
        .map(name)
        .collect();
    if names.is_empty() {
        return None;
    }
    violation(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", names.len()),
            join_quote(&names)
        ),
    )
}

pub(super) fn host_ports(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let used: Vec<String> = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["hostPort"].as_i64())
            .filter(|port| *port != 0)
            .map(|port| port.to_string())
            .collect();
        if !used.is_empty() {
            bad.push(name(c));
            ports.extend(used);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let ports = sorted(ports);
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

pub(super) fn privileged(_: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<String> = containers(spec)
        .filter(|c| c["securityContext"]["privileged"] == true)
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    )
}

pub(super) fn proc_mount(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut kinds = BTreeSet::new();
    for c in containers(spec) {
        if let Some(kind) = set(&c["securityContext"]["procMount"]).filter(|k| *k != "Default") {
            bad.push(name(c));
            kinds.insert(text(kind));
        }
    }
    if bad.is_empty() {
        return None;
    }
    violation(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(&sorted(kinds))
        ),
    )
}

pub(super) fn se_linux_options(_: &Value, spec: &Value) -> Option<Violation> {
    const TYPES: [&str; 5] = [
        "",
        "container_t",
        "container_init_t",
        "container_kvm_t",
        "container_engine_t",
    ];
    let (mut types, mut user, mut role) = (BTreeSet::new(), false, false);
    let mut valid = |options: &Value| {
        let ty = text(&options["type"]);
        let mut ok = true;
        if !TYPES.contains(&ty.as_str()) {
            types.insert(ty);
            ok = false;
        }
        if !text(&options["user"]).is_empty() {
            (user, ok) = (true, false);
        }
        if !text(&options["role"]).is_empty() {
            (role, ok) = (true, false);
        }
        ok
    };
    let pod_bad = set(&spec["securityContext"]["seLinuxOptions"]).is_some_and(|o| !valid(o));
    let bad: Vec<String> = containers(spec)
        .filter(|c| set(&c["securityContext"]["seLinuxOptions"]).is_some_and(|o| !valid(o)))
        .map(name)
        .collect();
    let who = setters(pod_bad, &bad);
    if who.is_empty() {
        return None;
    }
    let mut what = Vec::new();
    if !types.is_empty() {
        let types = sorted(types);
        let label = pluralize("type", "types", types.len());
        what.push(format!("{label} {}", join_quote(&types)));
    }
    if user {
        what.push("user may not be set".to_string());
    }
    if role {
        what.push("role may not be set".to_string());
    }
    violation(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            who.join(" and "),
            what.join("; ")
        ),
    )
}

pub(super) fn valid_seccomp(profile: &Value) -> bool {
    profile["type"] == "RuntimeDefault" || profile["type"] == "Localhost"
}

/// Who set a seccomp profile other than RuntimeDefault or Localhost, with
/// the values; whether the pod set a valid one; the containers that set
/// none.
pub(super) struct Seccomp {
    pod_bad: bool,
    pub(super) pod_valid: bool,
    bad: Vec<String>,
    pub(super) unset: Vec<String>,
    values: BTreeSet<String>,
}

pub(super) fn seccomp(spec: &Value) -> Seccomp {
    let mut values = BTreeSet::new();
    let pod = set(&spec["securityContext"]["seccompProfile"]);
    let pod_bad = pod.is_some_and(|p| !valid_seccomp(p));
    if let Some(p) = pod.filter(|_| pod_bad) {
        values.insert(text(&p["type"]));
    }
    let (mut bad, mut unset) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match set(&c["securityContext"]["seccompProfile"]) {
            Some(p) if !valid_seccomp(p) => {
                bad.push(name(c));
                values.insert(text(&p["type"]));
            }
            Some(_) => {}
            None => unset.push(name(c)),
        }
    }
    Seccomp {
        pod_bad,
        pod_valid: pod.is_some() && !pod_bad,
        bad,
        unset,
        values,
    }
}

pub(super) fn seccomp_forbidden(found: Seccomp) -> Option<Violation> {
    let who = setters(found.pod_bad, &found.bad);
    if who.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            who.join(" and "),
            join_quote(&sorted(found.values))
        ),
    )
}

pub(super) fn seccomp_profile_baseline(_: &Value, spec: &Value) -> Option<Violation> {
    seccomp_forbidden(seccomp(spec))
}

pub(super) fn sysctls(_: &Value, spec: &Value) -> Option<Violation> {
    const SAFE: [&str; 12] = [
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    ];
    let forbidden: Vec<String> = spec["securityContext"]["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| text(&s["name"]))
        .filter(|n| !SAFE.contains(&n.as_str()))
        .collect();
    if forbidden.is_empty() {
        return None;
    }
    violation("forbidden sysctls", forbidden.join(", "))
}

pub(super) fn windows_host_process(_: &Value, spec: &Value) -> Option<Violation> {
    let host_process = |sc: &Value| sc["windowsOptions"]["hostProcess"] == true;
    let bad: Vec<String> = containers(spec)
        .filter(|c| host_process(&c["securityContext"]))
        .map(name)
        .collect();
    let who = setters(host_process(&spec["securityContext"]), &bad);
    if who.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            who.join(" and ")
        ),
    )
}
