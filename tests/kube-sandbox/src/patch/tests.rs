use serde_json::json;

use super::*;

/// Asserts that strategically merging `patch` into `live` gives `want`.
fn check(kind: &str, live: Value, patch: Value, want: Value) {
    let got = apply_patch(kind, &live, &patch, PatchType::StrategicMerge);
    assert_eq!(got.unwrap(), want, "{kind}: {patch}");
}

fn fail(kind: &str, live: Value, patch: Value, ty: PatchType) -> PatchError {
    apply_patch(kind, &live, &patch, ty).unwrap_err()
}

fn spec(spec: Value) -> Value {
    json!({ "spec": spec })
}

/// A list of objects with these names.
fn named(names: &[&str]) -> Value {
    names.iter().map(|name| json!({ "name": name })).collect()
}

#[test]
fn content_types_map_to_patch_types() {
    let cases = [
        ("application/json-patch+json", Some(PatchType::Json)),
        (
            "application/merge-patch+json; charset=utf-8",
            Some(PatchType::Merge),
        ),
        (
            "Application/Strategic-Merge-Patch+JSON",
            Some(PatchType::StrategicMerge),
        ),
        ("application/apply-patch+yaml", Some(PatchType::Apply)),
        (" application/apply-patch+json ;x=y", Some(PatchType::Apply)),
        ("application/json", None),
    ];
    for (ct, want) in cases {
        assert_eq!(PatchType::from_content_type(ct), want, "{ct}");
    }
    assert!(PatchType::accepted().contains("application/strategic-merge-patch+json"));
}

#[test]
fn json_patches() {
    let live = json!({"metadata": {"name": "a", "labels": {"x": "1"}}});
    let patch = json!([
        {"op": "test", "path": "/metadata/name", "value": "a"},
        {"op": "replace", "path": "/metadata/labels/x", "value": "2"},
    ]);
    let got = apply_patch("Pod", &live, &patch, PatchType::Json).unwrap();
    assert_eq!(
        got,
        json!({"metadata": {"name": "a", "labels": {"x": "2"}}})
    );
    let failing = [
        json!([{"op": "test", "path": "/metadata/name", "value": "b"}]),
        json!([{"op": "remove", "path": "/spec/nodeName"}]),
        json!([{"op": "replace", "path": "", "value": 3}]),
    ];
    for patch in failing {
        assert!(fail("Pod", live.clone(), patch, PatchType::Json).is_invalid());
    }
    for patch in [
        json!({"op": "add"}),
        json!([{"op": "frobnicate", "path": "/a"}]),
    ] {
        let err = fail("Pod", live.clone(), patch, PatchType::Json);
        assert!(matches!(err, PatchError::MalformedJsonPatch(_)) && !err.is_invalid());
    }
}

#[test]
fn merge_patches_replace_lists() {
    let live = spec(json!({"containers": named(&["a"]), "nodeName": "n"}));
    let patch = spec(json!({"containers": named(&["c"]), "nodeName": null}));
    let got = apply_patch("Pod", &live, &patch, PatchType::Merge).unwrap();
    assert_eq!(got, spec(json!({"containers": named(&["c"])})));
    let err = fail("Pod", live, json!([1]), PatchType::Merge);
    assert_eq!(
        err.to_string(),
        "a merge patch must be a JSON object, not a list"
    );
    assert!(!err.is_invalid());
}

#[test]
fn lists_merge_by_the_key_kubernetes_gives_them() {
    check(
        "Pod",
        spec(json!({"containers": [
            {"name": "a"}, {"name": "b", "image": "1", "args": ["x"]}, {"name": "c"},
        ]})),
        spec(json!({"containers": [{"name": "b", "image": "2"}]})),
        spec(json!({"containers": [
            {"name": "a"}, {"name": "b", "image": "2", "args": ["x"]}, {"name": "c"},
        ]})),
    );
    // Like Kubernetes' mergeSortedSlice, a new element goes before the
    // live elements it is not ordered against.
    let template = |names| spec(json!({"template": spec(json!({"initContainers": named(names)}))}));
    check(
        "Deployment",
        template(&["a"]),
        template(&["b"]),
        template(&["b", "a"]),
    );
    check(
        "Pod",
        spec(json!({"ephemeralContainers": [{
            "name": "a",
            "ports": [{"containerPort": 80}],
            "env": [{"name": "X", "value": "1"}],
            "volumeMounts": [{"mountPath": "/d", "name": "v"}],
        }]})),
        spec(json!({"ephemeralContainers": [{
            "name": "a",
            "ports": [{"containerPort": 80, "name": "http"}],
            "env": [{"name": "X", "value": "2"}],
            "volumeMounts": [{"mountPath": "/d", "readOnly": true}],
        }]})),
        spec(json!({"ephemeralContainers": [{
            "name": "a",
            "ports": [{"containerPort": 80, "name": "http"}],
            "env": [{"name": "X", "value": "2"}],
            "volumeMounts": [{"mountPath": "/d", "name": "v", "readOnly": true}],
        }]})),
    );
    check(
        "Service",
        spec(json!({"ports": [{"port": 80, "targetPort": 8080}]})),
        spec(json!({"ports": [{"port": 80, "targetPort": 9090}, {"port": 443}]})),
        spec(json!({"ports": [{"port": 80, "targetPort": 9090}, {"port": 443}]})),
    );
    let meta = |refs, finalizers| {
        let metadata = json!({"ownerReferences": refs, "finalizers": finalizers});
        json!({ "metadata": metadata })
    };
    check(
        "ReplicaSet",
        meta(json!([{"uid": "1", "name": "a"}]), json!(["x", "y"])),
        meta(json!([{"uid": "1", "controller": true}]), json!(["y", "z"])),
        meta(
            json!([{"uid": "1", "name": "a", "controller": true}]),
            json!(["x", "y", "z"]),
        ),
    );
    let status = |ready, address: Value| {
        let conditions = json!([{"type": "Ready", "status": ready}]);
        json!({"status": {"conditions": conditions, "addresses": [address]}})
    };
    check(
        "Node",
        status("False", json!({"type": "Hostname", "address": "n"})),
        status("True", json!({"type": "Hostname"})),
        status("True", json!({"type": "Hostname", "address": "n"})),
    );
}

#[test]
fn other_lists_are_replaced_and_maps_merged() {
    let pod = |key, args: &[&str]| {
        let container = json!({"name": "a", "args": args, "command": ["sh"]});
        spec(json!({"tolerations": [{ "key": key }], "containers": [container]}))
    };
    check(
        "Pod",
        pod("a", &["x", "y"]),
        pod("b", &["z"]),
        pod("b", &["z"]),
    );
    let pvc =
        |labels, mode| json!({"metadata": {"labels": labels}, "spec": {"accessModes": [mode]}});
    check(
        "PersistentVolumeClaim",
        pvc(json!({"a": "1", "b": "2"}), "ReadWriteOnce"),
        pvc(json!({"a": null, "c": "3"}), "ReadOnlyMany"),
        pvc(json!({"b": "2", "c": "3"}), "ReadOnlyMany"),
    );
    // Custom resources only get the metadata strategies.
    let widget = |names, finalizers: &[&str]| {
        let metadata = json!({ "finalizers": finalizers });
        json!({"spec": {"containers": named(names)}, "metadata": metadata})
    };
    check(
        "Widget",
        widget(&["a"], &["x"]),
        widget(&["b"], &["y"]),
        widget(&["b"], &["y", "x"]),
    );
}

#[test]
fn patch_directives() {
    let volumes = |volumes| spec(json!({ "volumes": volumes }));
    let live = volumes(named(&["a", "b", "c"]));
    let delete = volumes(json!([{"name": "b", "$patch": "delete"}]));
    check("Pod", live.clone(), delete, volumes(named(&["a", "c"])));
    let replace = volumes(json!([{"name": "z"}, {"$patch": "replace"}]));
    check("Pod", live.clone(), replace, volumes(named(&["z"])));
    let merge = volumes(json!([{"$patch": "merge"}, {"name": "a", "$patch": "merge"}]));
    check("Pod", live, merge, volumes(named(&["a", "b", "c"])));
    check(
        "ConfigMap",
        json!({"data": {"x": "1"}, "metadata": {"labels": {"a": "1"}}}),
        json!({
            "data": {"$patch": "replace", "y": "2"},
            "metadata": {"labels": {"$patch": "delete"}},
        }),
        json!({"data": {"y": "2"}, "metadata": {"labels": {}}}),
    );
    // Nulls and directives of new values never reach the object.
    check(
        "Pod",
        json!({}),
        spec(json!({
            "nodeSelector": {"x": "1", "y": null},
            "volumes": [{"name": "v"}, {"name": "w", "$patch": "delete"}],
        })),
        spec(json!({"nodeSelector": {"x": "1"}, "volumes": named(&["v"])})),
    );
}

#[test]
fn set_element_order_retain_keys_and_delete_from_primitive_list() {
    // What kubectl apply sends to put Y first and add Z between Y and X.
    let containers = |container| spec(json!({ "containers": [container] }));
    check(
        "Pod",
        containers(json!({"name": "a", "env": named(&["X", "Y"])})),
        containers(json!({
            "name": "a",
            "$setElementOrder/env": named(&["Y", "Z", "X"]),
            "env": named(&["Z"]),
        })),
        containers(json!({"name": "a", "env": named(&["Y", "Z", "X"])})),
    );
    check(
        "Namespace",
        json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
        json!({"metadata": {
            "$setElementOrder/finalizers": ["c", "a"],
            "$deleteFromPrimitiveList/finalizers": ["b"],
        }}),
        json!({"metadata": {"finalizers": ["c", "a"]}}),
    );
    let strategy = |strategy| spec(json!({ "strategy": strategy }));
    check(
        "Deployment",
        strategy(json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}})),
        strategy(json!({"$retainKeys": ["type"], "type": "Recreate"})),
        strategy(json!({"type": "Recreate"})),
    );
}

#[test]
fn malformed_strategic_patches_are_bad_requests() {
    let live = spec(json!({ "containers": named(&["a", "b"]) }));
    let reorder = json!({
        "$setElementOrder/containers": named(&["a", "b"]),
        "containers": named(&["b", "a"]),
    });
    let cases = [
        (spec(json!({"$frobnicate": 1})), "spec"),
        (
            spec(json!({"containers": [{"image": "x"}]})),
            "spec.containers[0]",
        ),
        (
            spec(json!({"containers": [{"name": "a", "$patch": "x"}]})),
            "spec.containers[0]",
        ),
        (
            spec(json!({"containers": [{"name": "a"}, "b"]})),
            "spec.containers",
        ),
        (spec(json!({"$deleteFromPrimitiveList/x": "a"})), "spec"),
        (
            spec(json!({"$retainKeys": ["x"], "containers": []})),
            "spec",
        ),
        (spec(reorder), "spec.containers"),
        (json!({"$setElementOrder/": []}), "the top level"),
    ];
    for (patch, at) in cases {
        let err = fail(
            "Pod",
            live.clone(),
            patch.clone(),
            PatchType::StrategicMerge,
        );
        let reported =
            matches!(&err, PatchError::MalformedStrategicPatch { path, .. } if path == at);
        assert!(reported && !err.is_invalid(), "{patch}: {err}");
    }
    let err = fail("Pod", live, json!("x"), PatchType::StrategicMerge);
    let message = "a strategic merge patch must be a JSON object, not a string";
    assert_eq!(err.to_string(), message);
    let finalizers = json!({"metadata": {"finalizers": [["b"]]}});
    let err = fail("Pod", json!({}), finalizers, PatchType::StrategicMerge);
    assert!(matches!(&err, PatchError::ListOfLists(path) if path == "metadata.finalizers"));
    assert!(err.is_invalid());
}

#[test]
fn apply_creates_or_merges_over_the_live_object() {
    let applied = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
    let created = apply_patch("ConfigMap", &Value::Null, &applied, PatchType::Apply).unwrap();
    assert_eq!(created, applied);
    let live = json!({"metadata": {"name": "c", "uid": "u"}, "data": {"b": "2"}});
    let got = apply_patch("ConfigMap", &live, &applied, PatchType::Apply).unwrap();
    let want = json!({"metadata": {"name": "c", "uid": "u"}, "data": {"a": "1", "b": "2"}});
    assert_eq!(got, want);
    let err = fail("ConfigMap", Value::Null, json!(1), PatchType::Apply);
    assert!(matches!(
        err,
        PatchError::NotAnObject { patch: "apply", .. }
    ));
}
