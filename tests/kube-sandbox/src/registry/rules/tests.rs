use base64::prelude::{Engine as _, BASE64_STANDARD};
use serde_json::{json, Value};

use super::update::{claim_update_problem, pod_update_problem, volume_update_problem};
use super::*;
use crate::registry::get;
use crate::status::ApiError;

#[test]
fn pods_get_the_defaults_a_server_fills() {
    let mut pod = json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    default_object(get("pods"), &mut pod, None);
    assert_eq!(pod["spec"]["restartPolicy"], "Always");
    assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
}

#[test]
fn claims_get_the_default_class_and_secrets_fold_string_data() {
    let mut pvc = json!({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"]}});
    default_object(get("persistentvolumeclaims"), &mut pvc, Some("standard"));
    assert_eq!(pvc["spec"]["storageClassName"], "standard");
    assert_eq!(pvc["status"]["phase"], "Pending");
    let mut secret = json!({"metadata": {"name": "s"}, "stringData": {"a": "hello", "b": "hi"}});
    default_object(get("secrets"), &mut secret, None);
    assert_eq!(secret["data"], json!({"a": "aGVsbG8=", "b": "aGk="}));
    assert!(secret.get("stringData").is_none());
}

#[test]
fn names_follow_dns_1123() {
    let pod = |name: &str| json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    assert!(validate_create(get("pods"), &pod("app-0")).is_ok());
    assert!(validate_create(get("pods"), &pod("app.example")).is_ok());
    for bad in ["", "App", "-a", "a_b", "a-", "a..b", "a-.b"] {
        let err = validate_create(get("pods"), &pod(bad)).expect_err(bad);
        assert_eq!(err.code(), 422, "{bad}");
    }
    let err = validate_create(get("pods"), &pod("")).expect_err("empty");
    assert_eq!(
        err.to_string(),
        "Pod \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
    let err = validate_create(get("pods"), &pod("App")).expect_err("upper case");
    assert_eq!(
        err.to_string(),
        r#"Pod "App" is invalid: metadata.name: Invalid value: "App": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#
    );
}

#[test]
fn services_are_dns_1035_labels_and_namespaces_dns_1123_labels() {
    let svc = |name: &str| json!({"metadata": {"name": name}, "spec": {}});
    assert!(validate_create(get("services"), &svc("web-1")).is_ok());
    let err = validate_create(get("services"), &svc("1web")).expect_err("leading digit");
    assert_eq!(
        err.to_string(),
        r#"Service "1web" is invalid: metadata.name: Invalid value: "1web": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"#
    );
    assert!(validate_create(get("services"), &svc("a.b")).is_err());
    assert!(validate_create(get("services"), &svc(&"a".repeat(64))).is_err());
    let ns = |name: &str| json!({"metadata": {"name": name}});
    assert!(validate_create(get("namespaces"), &ns("team-1")).is_ok());
    let err = validate_create(get("namespaces"), &ns("team.one")).expect_err("dots");
    assert!(
        err.to_string()
            .contains("a lowercase RFC 1123 label must consist of"),
        "{err}"
    );
    assert!(validate_create(get("namespaces"), &ns(&"a".repeat(64))).is_err());
    // A generateName prefix may end in a dash; the name it makes is
    // checked too.
    let generated = json!({"metadata": {"generateName": "Web-", "name": "Web-x2b4z"}, "spec": {}});
    let err = validate_create(get("services"), &generated).expect_err("upper case");
    let ApiError::Invalid { causes, .. } = err else {
        panic!("{err:?}")
    };
    assert!(causes[0].starts_with("metadata.generateName: Invalid value: \"Web-\""));
    assert!(causes[1].starts_with("metadata.name: Invalid value: \"Web-x2b4z\""));
}

#[test]
fn labels_and_annotations_are_validated_on_create_and_update() {
    let cm = |meta: Value| {
        let mut m = json!({"name": "c"});
        m.as_object_mut()
            .unwrap()
            .extend(meta.as_object().unwrap().clone());
        json!({"metadata": m})
    };
    let good = cm(json!({"labels": {"app.kubernetes.io/name": "web", "tier": "", "a_b": "x.y-Z"}}));
    assert!(validate_create(get("configmaps"), &good).is_ok());
    let err = validate_create(get("configmaps"), &cm(json!({"labels": {"bad key": "v"}})))
        .expect_err("space in key");
    assert_eq!(
        err.to_string(),
        r#"ConfigMap "c" is invalid: metadata.labels: Invalid value: "bad key": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"#
    );
    let long = "v".repeat(64);
    let err = validate_create(get("configmaps"), &cm(json!({"labels": {"k": long}})))
        .expect_err("long value");
    assert!(
        err.to_string()
            .ends_with(": must be no more than 63 characters"),
        "{err}"
    );
    for key in ["Example.com/x", "/x", "a/b/c", "x/"] {
        assert!(
            validate_create(get("configmaps"), &cm(json!({"labels": {key: "v"}}))).is_err(),
            "{key}"
        );
    }
    // Annotation keys are checked in lower case; their size is capped.
    let upper = cm(json!({"annotations": {"Example.com/Note": "anything goes: here"}}));
    assert!(validate_create(get("configmaps"), &upper).is_ok());
    let big = cm(json!({"annotations": {"a": "x".repeat(256 << 10)}}));
    let err = validate_create(get("configmaps"), &big).expect_err("too big");
    assert!(
        err.to_string()
            .ends_with("metadata.annotations: Too long: may not be more than 262144 bytes"),
        "{err}"
    );
    let old = cm(json!({}));
    let relabelled = cm(json!({"labels": {"-x": "v"}}));
    assert_eq!(
        validate_update(get("configmaps"), &old, &relabelled).map_err(|e| e.code()),
        Err(422)
    );
}

#[test]
fn claims_always_request_storage() {
    let claim = |spec: Value| json!({"metadata": {"name": "c"}, "spec": spec});
    let claims = get("persistentvolumeclaims");
    let bound = claim(json!({"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1"}));
    assert_eq!(
        validate_create(claims, &bound).map_err(|e| e.to_string()),
        Err(
            "PersistentVolumeClaim \"c\" is invalid: spec.resources[storage]: Required value"
                .into()
        )
    );
    for (storage, shown) in [("0", "0"), ("0Gi", "0"), ("-1Gi", "-1Gi")] {
        let zero = claim(
            json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}),
        );
        assert_eq!(
            validate_create(claims, &zero).map_err(|e| e.to_string()),
            Err(format!("PersistentVolumeClaim \"c\" is invalid: spec.resources[storage]: Invalid value: \"{shown}\": must be greater than zero"))
        );
    }
    let ok = claim(
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv-1"}),
    );
    assert!(validate_create(claims, &ok).is_ok());
    let odd = claim(
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1 Gi"}}}),
    );
    assert!(decode_problem(claims, &odd)
        .is_some_and(|p| p.starts_with("quantities must match the regular expression")));
    assert!(decode_problem(claims, &ok).is_none());
}

#[test]
fn a_null_class_gets_the_default_and_an_empty_one_stays() {
    let claims = get("persistentvolumeclaims");
    let mut null = json!({"metadata": {"name": "c"}, "spec": {"storageClassName": null}});
    default_object(claims, &mut null, Some("standard"));
    assert_eq!(null["spec"]["storageClassName"], "standard");
    let mut none = json!({"metadata": {"name": "c"}, "spec": {"storageClassName": ""}});
    default_object(claims, &mut none, Some("standard"));
    assert_eq!(none["spec"]["storageClassName"], "");
}

#[test]
fn secrets_keys_types_sizes_and_immutability() {
    let secrets = get("secrets");
    let secret =
        |ty: &str, data: Value| json!({"metadata": {"name": "s"}, "type": ty, "data": data});
    assert!(validate_create(secrets, &secret("Opaque", json!({"a.b-C_d": "aGk="}))).is_ok());
    let err =
        validate_create(secrets, &secret("Opaque", json!({"a/b": "aGk="}))).expect_err("slash");
    assert_eq!(
        err.to_string(),
        r#"Secret "s" is invalid: data[a/b]: Invalid value: "a/b": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"#
    );
    assert!(validate_create(secrets, &secret("Opaque", json!({"..x": ""}))).is_err());
    let err = validate_create(
        secrets,
        &secret("kubernetes.io/tls", json!({"tls.crt": "aGk="})),
    )
    .expect_err("no key");
    assert_eq!(
        err.to_string(),
        "Secret \"s\" is invalid: data[tls.key]: Required value"
    );
    let big = BASE64_STANDARD.encode(vec![0u8; (1 << 20) + 1]);
    let err =
        validate_create(secrets, &secret("Opaque", json!({"big": big}))).expect_err("too big");
    assert!(
        err.to_string()
            .ends_with("data: Too long: may not be more than 1048576 bytes"),
        "{err}"
    );
    let mut locked = secret("Opaque", json!({"a": "aGk="}));
    locked["immutable"] = json!(true);
    let mut unlocked = locked.clone();
    unlocked["immutable"] = json!(false);
    assert_eq!(
        validate_update(secrets, &locked, &unlocked).map_err(|e| e.to_string()),
        Err("Secret \"s\" is invalid: immutable: Forbidden: field is immutable when `immutable` is set".into())
    );
    let mut retyped = secret("kubernetes.io/basic-auth", json!({"username": "aGk="}));
    retyped["metadata"]["name"] = json!("s");
    assert!(
        validate_update(secrets, &secret("Opaque", json!({})), &retyped).is_err_and(|e| e
            .to_string()
            .contains("type: Invalid value: \"kubernetes.io/basic-auth\": field is immutable"))
    );
}

#[test]
fn data_that_does_not_decode() {
    let secrets = get("secrets");
    let secret = |v: Value| json!({"metadata": {"name": "s"}, "data": {"k": v}});
    assert_eq!(decode_problem(secrets, &secret(json!("aGk="))), None);
    assert_eq!(
        decode_problem(secrets, &secret(json!("not base64!"))).as_deref(),
        Some("illegal base64 data at input byte 3")
    );
    assert_eq!(
        decode_problem(secrets, &secret(json!(7))).as_deref(),
        Some("json: cannot unmarshal number into Go struct field Secret.data of type []uint8")
    );
    let labelled = json!({"metadata": {"name": "c", "labels": {"n": 1}}});
    assert!(decode_problem(get("configmaps"), &labelled).is_some());
}

#[test]
fn base64_errors_at_the_byte_go_reports() {
    assert_eq!(go_base64_decode(b"aGk="), Ok(b"hi".to_vec()));
    assert_eq!(go_base64_decode(b"aGVsbG8="), Ok(b"hello".to_vec()));
    assert_eq!(go_base64_decode(b"aA=="), Ok(b"h".to_vec()));
    assert_eq!(go_base64_decode(b"aGVs\nbG8="), Ok(b"hello".to_vec()));
    assert_eq!(go_base64_decode(b""), Ok(Vec::new()));
    assert_eq!(go_base64_decode(b"billy"), Err(4));
    assert_eq!(go_base64_decode(b"APIKEY_BASE64"), Err(6));
    assert_eq!(go_base64_decode(b"<foo>"), Err(0));
    assert_eq!(go_base64_decode(b"abc"), Err(0));
    assert_eq!(go_base64_decode(b"a==="), Err(1));
    assert_eq!(go_base64_decode(b"aGk=x"), Err(4));
    assert_eq!(go_base64_decode(b"aA="), Err(3));
}

#[test]
fn bound_claims_only_grow() {
    let old = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv-1", "storageClassName": "standard"});
    let mut grown = old.clone();
    grown["resources"]["requests"]["storage"] = json!("2Gi");
    assert!(claim_update_problem(&old, &grown).is_none());
    let mut shrunk = old.clone();
    shrunk["resources"]["requests"]["storage"] = json!("512Mi");
    assert!(claim_update_problem(&old, &shrunk).is_some());
    let mut reclassed = old.clone();
    reclassed["storageClassName"] = json!("fast");
    assert!(claim_update_problem(&old, &reclassed).is_some());
    let unbound =
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
    let mut binding = unbound.clone();
    binding["volumeName"] = json!("pv-1");
    assert!(claim_update_problem(&unbound, &binding).is_none());
}

#[test]
fn pod_specs_allow_image_and_added_tolerations_only() {
    let old = json!({"containers": [{"name": "c", "image": "a"}], "tolerations": [{"key": "k", "operator": "Exists"}]});
    let mut new = old.clone();
    new["containers"][0]["image"] = json!("b");
    new["tolerations"]
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "x", "operator": "Exists"}));
    assert!(pod_update_problem(&old, &new).is_none());
    new["tolerations"] = json!([]);
    assert!(pod_update_problem(&old, &new).is_some());
    let mut renamed = old.clone();
    renamed["containers"][0]["args"] = json!(["x"]);
    assert!(pod_update_problem(&old, &renamed).is_some());
}

#[test]
fn statefulset_templates_are_immutable_but_replicas_are_not() {
    let old = json!({"replicas": 1, "serviceName": "s", "volumeClaimTemplates": [{"spec": {"storageClassName": "a"}}]});
    let mut scaled = old.clone();
    scaled["replicas"] = json!(3);
    assert!(validate_update(
        get("statefulsets"),
        &json!({"spec": old}),
        &json!({"spec": scaled})
    )
    .is_ok());
    let mut reclassed = old.clone();
    reclassed["volumeClaimTemplates"][0]["spec"]["storageClassName"] = json!("b");
    let err = validate_update(
        get("statefulsets"),
        &json!({"spec": old}),
        &json!({"spec": reclassed}),
    );
    assert_eq!(err.map_err(|e| e.reason()), Err("Invalid"));
}

#[test]
fn volume_node_affinity_and_source_are_fixed() {
    let old = json!({"hostPath": {"path": "/a"}, "nodeAffinity": {"required": {}}, "volumeMode": "Filesystem"});
    let mut released = old.clone();
    released["claimRef"] = Value::Null;
    assert!(volume_update_problem(&old, &released).is_none());
    let mut moved = old.clone();
    moved["nodeAffinity"] = json!({"required": {"x": 1}});
    assert!(volume_update_problem(&old, &moved).is_some());
    let mut resourced = old.clone();
    resourced["hostPath"]["path"] = json!("/b");
    assert!(volume_update_problem(&old, &resourced).is_some());
}

#[test]
fn quantities() {
    assert_eq!(parse_quantity("1Gi"), Some(1 << 30));
    assert_eq!(parse_quantity("500M"), Some(500_000_000));
    assert_eq!(parse_quantity("1.5Ki"), Some(1536));
    assert_eq!(parse_quantity("12"), Some(12));
    assert_eq!(parse_quantity("1X"), None);
}

#[test]
fn daemon_sets_and_replication_controllers_get_their_defaults_and_checks() {
    let template = json!({"metadata": {"labels": {"app": "a"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let mut ds = json!({"metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": template}});
    default_object(get("daemonsets"), &mut ds, None);
    assert_eq!(
        ds["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    );
    assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
    assert!(validate_create(get("daemonsets"), &ds).is_ok());
    let mut other = ds.clone();
    other["spec"]["selector"] = json!({"matchLabels": {"app": "b"}});
    assert!(validate_update(get("daemonsets"), &ds, &other)
        .expect_err("selector")
        .to_string()
        .ends_with("spec.selector: Invalid value: field is immutable"));
    let mut never = ds.clone();
    never["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    assert_eq!(
        validate_create(get("daemonsets"), &never).map_err(|e| e.to_string()),
        Err("DaemonSet.apps \"d\" is invalid: spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"".into())
    );

    // No selector: the template's labels, which also label the object.
    let mut rc = json!({"metadata": {"name": "r"}, "spec": {"template": template}});
    default_object(get("replicationcontrollers"), &mut rc, None);
    assert_eq!(rc["spec"]["selector"], json!({"app": "a"}));
    assert_eq!(rc["metadata"]["labels"], json!({"app": "a"}));
    assert_eq!(rc["spec"]["replicas"], 1);
    assert!(validate_create(get("replicationcontrollers"), &rc).is_ok());
    rc["spec"]["selector"] = json!({"app": "b"});
    assert_eq!(
        validate_create(get("replicationcontrollers"), &rc).map_err(|e| e.to_string()),
        Err("ReplicationController \"r\" is invalid: spec.template.metadata.labels: Invalid value: `selector` does not match template `labels`".into())
    );
    let bare = json!({"metadata": {"name": "r"}, "spec": {"replicas": 1}});
    assert_eq!(
        validate_create(get("replicationcontrollers"), &bare).map_err(|e| e.to_string()),
        Err("ReplicationController \"r\" is invalid: spec.selector: Required value".into())
    );
}

#[test]
fn autoscalers_name_a_target_and_sane_bounds() {
    let hpa = |spec: Value| json!({"metadata": {"name": "h"}, "spec": spec});
    let mut ok =
        hpa(json!({"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3}));
    default_object(get("horizontalpodautoscalers"), &mut ok, None);
    assert_eq!(ok["spec"]["minReplicas"], 1);
    assert!(validate_create(get("horizontalpodautoscalers"), &ok).is_ok());
    let bad =
        hpa(json!({"scaleTargetRef": {"kind": "Deployment"}, "minReplicas": 3, "maxReplicas": 2}));
    assert_eq!(
        validate_create(get("horizontalpodautoscalers"), &bad).map_err(|e| e.to_string()),
        Err("HorizontalPodAutoscaler.autoscaling \"h\" is invalid: [spec.scaleTargetRef.name: Required value, spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`]".into())
    );
}
