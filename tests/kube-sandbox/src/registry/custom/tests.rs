use serde_json::json;

use super::*;

fn definition(established: bool) -> Value {
    let mut crd = json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wd"]},
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                 "schema": {"openAPIV3Schema": {"type": "object"}},
                 "additionalPrinterColumns": [{"name": "Size", "type": "string", "jsonPath": ".spec.size"}]},
                {"name": "v0", "served": false, "storage": false},
            ],
        },
        "status": {"acceptedNames": {"plural": "", "kind": ""}},
    });
    if established {
        crd["status"]["acceptedNames"] = crd["spec"]["names"].clone();
        crd["status"]["conditions"] = json!([
            {"type": "NamesAccepted", "status": "True"},
            {"type": "Established", "status": "True"},
        ]);
    }
    crd
}

#[test]
fn served_versions_become_resources_once_names_are_accepted() {
    assert!(resources_of(&definition(false)).is_empty());
    let crd = definition(true);
    let index = Index::build([&crd]);
    let v1 = index
        .find("example.com", "v1", "widgets")
        .expect("v1 served");
    assert!(index.find("example.com", "v0", "widgets").is_none());
    assert_eq!(
        (
            v1.api_version(),
            v1.store_key(),
            v1.builtin_kind(),
            v1.list_kind()
        ),
        (
            "example.com/v1".to_string(),
            "widgets.example.com".into(),
            "",
            "WidgetList".to_string()
        )
    );
    assert!(v1.namespaced && v1.has_subresource("status"));
    let beta = index
        .find("example.com", "v1beta1", "widgets")
        .expect("beta served");
    assert!(!beta.has_subresource("status"));
    assert_eq!(beta.store_key(), v1.store_key());
    let storage = index.storage_of("widgets.example.com").expect("stored");
    assert_eq!(storage.version, "v1");
    let stored: Vec<String> = index.stored().iter().map(|r| r.api_version()).collect();
    assert_eq!(stored, ["example.com/v1"]);
    let def = v1.custom.as_ref().expect("custom");
    assert_eq!(def.columns.len(), 1);
    assert_eq!(def.storage_version_hash.len(), 12);
    assert_eq!(v1.verbs.len(), 8);
}

#[test]
fn a_terminating_definition_serves_fewer_verbs() {
    let mut crd = definition(true);
    crd["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let resources = resources_of(&crd);
    let verbs: Vec<&str> = resources[0].verbs.iter().map(|v| &**v).collect();
    assert_eq!(
        verbs,
        ["delete", "deletecollection", "get", "list", "watch"]
    );
    assert!(resources[0].custom.as_ref().is_some_and(|d| d.terminating));
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "string", "minLength": 1},
                    "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"},
                    "count": {"type": "integer", "minimum": 0},
                    "port": {"x-kubernetes-int-or-string": true},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "note": {"type": "string", "nullable": true},
                },
            },
            "status": {"type": "object", "properties": {"state": {"type": "string"}}},
        },
    })
}

#[test]
fn pruning_drops_what_the_schema_does_not_specify() {
    let mut obj = json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "anything": 1},
        "spec": {"size": "1Gi", "unknown": true, "labels": {"a": "b"}, "extra": {"kept": {"deep": 1}},
                 "note": null, "mode": null},
        "status": {"state": "Ready", "junk": 1},
        "top": "level",
    });
    prune(&schema(), &mut obj);
    default_fields(&schema(), &mut obj);
    assert_eq!(
        obj,
        json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "anything": 1},
            "spec": {"size": "1Gi", "labels": {"a": "b"}, "extra": {"kept": {"deep": 1}}, "note": null, "mode": "slow"},
            "status": {"state": "Ready"},
        })
    );
}

#[test]
fn validation_reports_kube_openapi_messages() {
    let obj = json!({"metadata": {"name": "w"}, "spec": {"mode": "warp", "count": -1, "port": 80, "labels": {"a": 1}}});
    let causes = schema_causes(&schema(), &obj);
    assert_eq!(
        causes,
        [
            "spec.size: Required value",
            "spec.count: Invalid value: -1: spec.count in body should be greater than or equal to 0",
            "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
            "spec.mode: Unsupported value: \"warp\": supported values: \"fast\", \"slow\"",
        ]
    );
    let wrong = json!({"spec": {"size": 5}});
    assert_eq!(
        schema_causes(&schema(), &wrong),
        ["spec.size: Invalid value: \"integer\": spec.size in body must be of type string: \"integer\""]
    );
    assert!(schema_causes(&schema(), &json!({"spec": {"size": "1"}})).is_empty());
}
