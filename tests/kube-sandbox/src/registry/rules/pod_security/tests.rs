use serde_json::{json, Value};

use super::*;

fn restricted_ns() -> Value {
    json!({"metadata": {"name": "locked", "labels": {ENFORCE: "restricted"}}})
}

fn only(level: Level, spec: Value) -> (String, String) {
    only_with(level, json!({}), spec)
}

fn only_with(level: Level, meta: Value, spec: Value) -> (String, String) {
    let found = evaluate(level, &meta, &spec);
    assert_eq!(found.len(), 1, "one violation expected: {found:#?}");
    (found[0].reason.clone(), found[0].detail.clone())
}

/// A pod the restricted level allows; `edit` then breaks it.
fn compliant() -> Value {
    json!({
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "busybox", "securityContext": {
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
    })
}

#[test]
fn a_root_pod_with_capabilities_reads_as_the_admission_plugin_words_it() {
    let pod = json!({
        "metadata": {"name": "mover-1", "namespace": "locked"},
        "spec": {"containers": [{"name": "mover", "image": "m",
            "securityContext": {"runAsUser": 0, "capabilities": {"add": ["CHOWN", "DAC_OVERRIDE"]}}}]},
    });
    let err = admit_pod(&restricted_ns(), &pod).expect_err("refused");
    assert_eq!(err.code(), 403);
    assert_eq!(
        err.to_string(),
        "pods \"mover-1\" is forbidden: violates PodSecurity \"restricted:latest\": \
         allowPrivilegeEscalation != false (container \"mover\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"mover\" must set securityContext.capabilities.drop=[\"ALL\"]; \
         container \"mover\" must not include \"CHOWN\", \"DAC_OVERRIDE\" in securityContext.capabilities.add), \
         runAsNonRoot != true (pod or container \"mover\" must set securityContext.runAsNonRoot=true), \
         runAsUser=0 (container \"mover\" must not set runAsUser=0), \
         seccompProfile (pod or container \"mover\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    assert_eq!(
        err.to_status()["details"],
        json!({"name": "mover-1", "kind": "pods"})
    );
}

#[test]
fn levels_and_versions_come_from_the_labels_and_fail_closed() {
    let labels = |l: Value| enforced(&l).to_string();
    assert_eq!(labels(json!({})), "privileged:latest");
    assert_eq!(labels(json!({ENFORCE: "baseline"})), "baseline:latest");
    assert_eq!(
        labels(json!({ENFORCE: "restricted", ENFORCE_VERSION: "v1.29"})),
        "restricted:v1.29"
    );
    assert_eq!(labels(json!({ENFORCE: "strict"})), "restricted:latest");
    assert_eq!(
        labels(json!({ENFORCE: "baseline", ENFORCE_VERSION: "1.29"})),
        "baseline:latest"
    );
    assert!(admit_pod(
        &json!({"metadata": {}}),
        &json!({"spec": {"hostPID": true}})
    )
    .is_ok());
}

#[test]
fn invalid_labels_refuse_a_namespace_and_unchanged_ones_do_not() {
    let ns = |labels: Value| json!({"metadata": {"name": "n", "labels": labels}});
    let bad = ns(json!({ENFORCE: "strict", "pod-security.kubernetes.io/warn-version": "v2.0"}));
    let err = validate_namespace(&bad, None).expect_err("invalid");
    assert_eq!(err.code(), 422);
    assert_eq!(
        err.to_string(),
        "Namespace \"n\" is invalid: [metadata.labels[pod-security.kubernetes.io/enforce]: \
         Invalid value: \"strict\": must be one of privileged, baseline, restricted, \
         metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: \"v2.0\": \
         must be \"latest\" or \"v1.x\"]"
    );
    let relabelled = ns(
        json!({ENFORCE: "strict", "pod-security.kubernetes.io/warn-version": "v2.0", "team": "a"}),
    );
    assert!(validate_namespace(&relabelled, Some(&bad)).is_ok());
    assert!(validate_namespace(&bad, Some(&ns(json!({})))).is_err());
    assert!(validate_namespace(&ns(json!({ENFORCE: "baseline"})), None).is_ok());
}

#[test]
fn baseline_allows_the_runtime_default_capabilities_and_not_others() {
    let spec = json!({"containers": [
        {"name": "a", "securityContext": {"capabilities": {"add": ["CHOWN", "DAC_OVERRIDE"]}}},
        {"name": "b", "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "NET_RAW", "CHOWN"]}}},
    ]});
    assert_eq!(
        only(Level::Baseline, spec),
        (
            "non-default capabilities".into(),
            "container \"b\" must not include \"NET_RAW\", \"SYS_ADMIN\" in securityContext.capabilities.add".into()
        )
    );
}

#[test]
fn restricted_capabilities_name_both_failures() {
    let spec = json!({"containers": [
        {"name": "a", "securityContext": {"capabilities": {"add": ["FOO", "BAR"]}}},
        {"name": "b", "securityContext": {"capabilities": {"add": ["BAR", "BAZ"]}}},
        {"name": "c", "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL", "FOO"]}}},
    ]});
    let found = evaluate(Level::Restricted, &json!({}), &spec);
    let caps = found
        .iter()
        .find(|v| v.reason == "unrestricted capabilities")
        .expect("capabilities");
    assert_eq!(
        caps.detail,
        "containers \"a\", \"b\" must set securityContext.capabilities.drop=[\"ALL\"]; containers \"a\", \"b\", \"c\" must not include \"BAR\", \"BAZ\", \"CHOWN\", \"FOO\" in securityContext.capabilities.add"
    );
    assert!(
        !found.iter().any(|v| v.reason == "non-default capabilities"),
        "the restricted check replaces the baseline one"
    );
}

#[test]
fn host_namespaces_ports_paths_and_privileged() {
    let spec = json!({
        "hostNetwork": true, "hostIPC": true,
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "e", "emptyDir": {}}],
        "containers": [
            {"name": "a", "ports": [{"containerPort": 80}]},
            {"name": "b", "ports": [{"containerPort": 8080, "hostPort": 30}, {"containerPort": 1, "hostPort": 10}]},
            {"name": "c", "ports": [{"containerPort": 2, "hostPort": 20}], "securityContext": {"privileged": true}},
        ],
    });
    let found = evaluate(Level::Baseline, &json!({}), &spec);
    let shown: Vec<(&str, &str)> = found
        .iter()
        .map(|v| (v.reason.as_str(), v.detail.as_str()))
        .collect();
    assert_eq!(
        shown,
        [
            ("host namespaces", "hostNetwork=true, hostIPC=true"),
            ("hostPath volumes", "volume \"h\""),
            (
                "hostPort",
                "containers \"b\", \"c\" use hostPorts 10, 20, 30"
            ),
            (
                "privileged",
                "container \"c\" must not set securityContext.privileged=true"
            ),
        ]
    );
    let restricted = evaluate(Level::Restricted, &json!({}), &spec);
    let volumes = restricted
        .iter()
        .find(|v| v.reason == "restricted volume types")
        .expect("volumes");
    assert_eq!(
        volumes.detail,
        "volume \"h\" uses restricted volume type \"hostPath\""
    );
    assert!(!restricted.iter().any(|v| v.reason == "hostPath volumes"));
}

#[test]
fn restricted_volume_types_are_listed_sorted_unknown_included() {
    let spec = json!({"volumes": [
        {"name": "ok", "persistentVolumeClaim": {"claimName": "c"}},
        {"name": "b1", "nfs": {"server": "s", "path": "/"}},
        {"name": "b2", "awsElasticBlockStore": {}},
        {"name": "c1"},
    ]});
    assert_eq!(
        only(Level::Restricted, json!({"volumes": spec["volumes"], "containers": []})),
        (
            "restricted volume types".into(),
            "volumes \"b1\", \"b2\", \"c1\" use restricted volume types \"awsElasticBlockStore\", \"nfs\", \"unknown\"".into()
        )
    );
}

#[test]
fn se_linux_options_as_the_check_lists_them() {
    let spec = json!({
        "securityContext": {"seLinuxOptions": {"type": "foo", "user": "bar", "role": "baz"}},
        "containers": [
            {"name": "a", "securityContext": {"seLinuxOptions": {"type": "container_t"}}},
            {"name": "d", "securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}},
            {"name": "e", "securityContext": {"seLinuxOptions": {"type": "bar"}}},
            {"name": "f", "securityContext": {"seLinuxOptions": {"user": "bar"}}},
            {"name": "g", "securityContext": {"seLinuxOptions": {"role": "baz"}}},
        ],
    });
    assert_eq!(
        only(Level::Baseline, spec),
        (
            "seLinuxOptions".into(),
            "pod and containers \"e\", \"f\", \"g\" set forbidden securityContext.seLinuxOptions: types \"bar\", \"foo\"; user may not be set; role may not be set".into()
        )
    );
}

#[test]
fn app_armor_seccomp_proc_mount_sysctls_and_host_process() {
    let meta = json!({"annotations": {
        "container.apparmor.security.beta.kubernetes.io/c": "unconfined",
        "container.apparmor.security.beta.kubernetes.io/d": "localhost/p",
    }});
    assert_eq!(
        only_with(Level::Baseline, meta, json!({"containers": [{"name": "c"}]})),
        (
            "forbidden AppArmor profile".into(),
            "annotation must not set AppArmor profile type to \"container.apparmor.security.beta.kubernetes.io/c=\"unconfined\"\"".into()
        )
    );
    let spec = json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}});
    assert_eq!(
        only(Level::Baseline, spec).1,
        "pod must not set AppArmor profile type to \"Unconfined\""
    );
    let spec = json!({"containers": [
        {"name": "c", "securityContext": {"seccompProfile": {"type": "Unconfined"}}},
        {"name": "d", "securityContext": {"seccompProfile": {"type": "Unconfined"}}},
    ]});
    assert_eq!(
        only(Level::Baseline, spec).1,
        "containers \"c\", \"d\" must not set securityContext.seccompProfile.type to \"Unconfined\""
    );
    let spec = json!({"containers": [{"name": "c", "securityContext": {"procMount": "Unmasked"}}]});
    assert_eq!(
        only(Level::Baseline, spec).1,
        "container \"c\" must not set securityContext.procMount to \"Unmasked\""
    );
    let spec = json!({"securityContext": {"sysctls": [
        {"name": "net.ipv4.tcp_rmem", "value": "1"}, {"name": "kernel.msgmax", "value": "1"},
        {"name": "a.b", "value": "1"}]}});
    assert_eq!(
        only(Level::Baseline, spec),
        ("forbidden sysctls".into(), "kernel.msgmax, a.b".into())
    );
    let spec = json!({"securityContext": {"windowsOptions": {"hostProcess": true}},
        "containers": [{"name": "w", "securityContext": {"windowsOptions": {"hostProcess": true}}}]});
    assert_eq!(
        only(Level::Baseline, spec),
        (
            "hostProcess".into(),
            "pod and container \"w\" must not set securityContext.windowsOptions.hostProcess=true"
                .into()
        )
    );
}

#[test]
fn restricted_identity_and_seccomp_settings_at_pod_or_container_level() {
    assert!(evaluate(Level::Restricted, &json!({}), &compliant()).is_empty());
    // Every container may say it instead of the pod.
    let mut spec = compliant();
    spec["securityContext"] = json!({});
    spec["containers"][0]["securityContext"]["runAsNonRoot"] = json!(true);
    spec["containers"][0]["securityContext"]["seccompProfile"] = json!({"type": "Localhost"});
    assert!(evaluate(Level::Restricted, &json!({}), &spec).is_empty());
    let mut spec = compliant();
    spec["securityContext"]["runAsNonRoot"] = json!(false);
    spec["containers"][0]["securityContext"]["runAsNonRoot"] = json!(false);
    assert_eq!(
        only(Level::Restricted, spec).1,
        "pod and container \"c\" must not set securityContext.runAsNonRoot=false"
    );
    let mut spec = compliant();
    spec["securityContext"]["runAsUser"] = json!(0);
    assert_eq!(
        only(Level::Restricted, spec),
        ("runAsUser=0".into(), "pod must not set runAsUser=0".into())
    );
    let mut spec = compliant();
    spec["securityContext"]["seccompProfile"] = json!({"type": "Unconfined"});
    assert_eq!(
        only(Level::Restricted, spec).1,
        "pod must not set securityContext.seccompProfile.type to \"Unconfined\""
    );
    let mut spec = compliant();
    spec["initContainers"] = json!([{"name": "init"}]);
    let found = evaluate(Level::Restricted, &json!({}), &spec);
    assert_eq!(
        found[0].detail,
        "container \"init\" must set securityContext.allowPrivilegeEscalation=false"
    );
}

#[test]
fn only_image_and_container_changes_are_significant() {
    let pod = json!({"spec": {"containers": [{"name": "c", "image": "a"}]}});
    let mut relabelled = pod.clone();
    relabelled["metadata"] = json!({"labels": {"x": "y"}});
    assert!(!significant_update(&pod, &relabelled));
    let mut reimaged = pod.clone();
    reimaged["spec"]["containers"][0]["image"] = json!("b");
    assert!(significant_update(&pod, &reimaged));
    let mut debugged = pod.clone();
    debugged["spec"]["ephemeralContainers"] = json!([{"name": "dbg", "image": "busybox"}]);
    assert!(significant_update(&pod, &debugged));
    assert!(!significant_update(&debugged, &debugged));
}
