//! Custom resources through kube-rs, served as a real API server serves
//! them: a CustomResourceDefinition (the ZFSVolume fixture of
//! `tests/fixtures/crds`) is validated, established and discovered; its
//! objects are created, selected, pruned to the schema, patched with
//! preconditions (strategic merge refused), watched, kept to JSON,
//! authorized by RBAC like any resource, and deleted with the definition.

mod common;

use std::time::Duration;

use common::crds::{api_error, fixture, install, names, namespace, send, volume, zfs, CRD, GROUP};
use common::{await_object, client, client_as, sandbox};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::discovery::{Discovery, Scope};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread")]
async fn an_established_definition_is_discovered_and_served() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let crd = install(&client, &fixture("zfsvolume.yaml")).await;
    let status = crd.status.expect("status");
    assert_eq!(status.stored_versions, Some(vec!["v1".to_string()]));
    let short = status.accepted_names.and_then(|n| n.short_names);
    assert_eq!(short, Some(vec!["zfsvol".to_string(), "zv".to_string()]));
    namespace(&client, "openebs").await;

    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let group = discovery.get(GROUP).expect("group discovered");
    assert_eq!(group.preferred_version(), Some("v1"));
    assert_eq!(group.versions().collect::<Vec<_>>(), ["v1", "v1alpha1"]);
    let gvk = GroupVersionKind::gvk(GROUP, "v1", "ZFSVolume");
    let (ar, caps) = discovery.resolve_gvk(&gvk).expect("ZFSVolume discovered");
    assert_eq!(
        (ar.plural.as_str(), caps.scope),
        ("zfsvolumes", Scope::Namespaced)
    );
    assert!(caps.subresources.is_empty(), "no status subresource");

    let volumes: Api<DynamicObject> = Api::namespaced_with(client.clone(), "openebs", &ar);
    let pp = PostParams::default();
    let sent = volume(
        "pvc-1",
        "node-a",
        json!({"junk": 1, "status": {"state": "Pending"}}),
    );
    let mut sent = serde_json::to_value(sent).expect("json");
    sent["spec"]["thinProvision"] = json!("no");
    let created = volumes
        .create(&pp, &serde_json::from_value(sent).expect("object"))
        .await
        .expect("created");
    // Pruned to the schema, but what it preserves is kept.
    assert!(created.data.get("junk").is_none());
    assert_eq!(created.data["spec"]["thinProvision"], "no");
    assert_eq!(created.data["status"]["state"], "Pending");
    let got = volumes.get("pvc-1").await.expect("get");
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(got.data["spec"]["ownerNodeID"], "node-a");

    // The other served version is a view of the same object.
    let alpha = discovery
        .resolve_gvk(&GroupVersionKind::gvk(GROUP, "v1alpha1", "ZFSVolume"))
        .expect("v1alpha1")
        .0;
    let old: Api<DynamicObject> = Api::namespaced_with(client.clone(), "openebs", &alpha);
    let same = old.get("pvc-1").await.expect("get v1alpha1");
    let api_version = same.types.as_ref().map(|t| t.api_version.as_str());
    assert_eq!(api_version, Some("zfs.openebs.io/v1alpha1"));
    assert_eq!(same.metadata.uid, created.metadata.uid);

    let labelled = volume(
        "pvc-2",
        "node-b",
        json!({"metadata": {"name": "pvc-2", "labels": {"tier": "fast"}}}),
    );
    volumes.create(&pp, &labelled).await.expect("second");
    let exists = api_error(volumes.create(&pp, &labelled).await);
    assert_eq!(
        (exists.code, exists.message.as_str()),
        (409, r#"zfsvolumes.zfs.openebs.io "pvc-2" already exists"#)
    );
    let fast = volumes
        .list(&ListParams::default().labels("tier=fast"))
        .await
        .expect("list");
    assert_eq!(names(&fast), ["pvc-2"]);
    let one = volumes
        .list(&ListParams::default().fields("metadata.name=pvc-1"))
        .await
        .expect("list");
    assert_eq!(names(&one), ["pvc-1"]);
    let everywhere: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let here = ListParams::default().fields("metadata.namespace=openebs");
    assert_eq!(
        names(&everywhere.list(&here).await.expect("list")),
        ["pvc-1", "pvc-2"]
    );
    let unknown = api_error(
        volumes
            .list(&ListParams::default().fields("spec.poolName=tank"))
            .await,
    );
    assert_eq!(
        (unknown.code, unknown.message.as_str()),
        (
            400,
            r#""spec.poolName" is not a known field selector: only "metadata.name", "metadata.namespace""#
        )
    );
    let dp = DeleteParams::default();
    let lp = ListParams::default().labels("tier=fast");
    volumes
        .delete_collection(&dp, &lp)
        .await
        .expect("deletecollection");
    assert_eq!(
        names(&volumes.list(&ListParams::default()).await.expect("list")),
        ["pvc-1"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn patches_keep_preconditions_and_watches_see_them() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let ar = zfs(&client).await;
    let volumes: Api<DynamicObject> = Api::namespaced_with(client.clone(), "openebs", &ar);
    let created = volumes
        .create(
            &PostParams::default(),
            &volume("pvc-1", "node-a", json!({})),
        )
        .await
        .expect("created");
    let rv = created.metadata.resource_version.clone().expect("version");
    let wp = WatchParams::default().fields("metadata.name=pvc-1");
    let mut events = volumes.watch(&wp, &rv).await.expect("watch").boxed();

    let pp = PatchParams::default();
    let moved = json!({"metadata": {"resourceVersion": rv}, "spec": {"ownerNodeID": "node-b"}});
    let patched = volumes
        .patch("pvc-1", &pp, &Patch::Merge(&moved))
        .await
        .expect("patched");
    assert_eq!(patched.data["spec"]["ownerNodeID"], "node-b");
    assert_eq!(patched.metadata.generation, Some(2));
    let stale = api_error(volumes.patch("pvc-1", &pp, &Patch::Merge(&moved)).await);
    assert_eq!(
        (stale.code, stale.reason.as_str(), stale.message.as_str()),
        (
            409,
            "Conflict",
            r#"Operation cannot be fulfilled on zfsvolumes.zfs.openebs.io "pvc-1": the object has been modified; please apply your changes to the latest version and try again"#
        )
    );
    let strategic = Patch::Strategic(json!({"spec": {"poolName": "other"}}));
    let refused = api_error(volumes.patch("pvc-1", &pp, &strategic).await);
    assert_eq!(
        (refused.code, refused.message.as_str()),
        (415, "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")
    );
    let invalid = Patch::Merge(json!({"spec": {"volumeType": "RAID"}}));
    let invalid = api_error(volumes.patch("pvc-1", &pp, &invalid).await);
    assert_eq!(
        (invalid.code, invalid.message.as_str()),
        (
            422,
            r#"ZFSVolume.zfs.openebs.io "pvc-1" is invalid: spec.volumeType: Unsupported value: "RAID": supported values: "ZVOL", "DATASET""#
        )
    );
    let path = "/apis/zfs.openebs.io/v1/namespaces/openebs/zfsvolumes/pvc-1";
    let json_patch = br#"[{"op": "replace", "path": "/spec/capacity", "value": "2147483648"}]"#;
    let headers = [("content-type", "application/json-patch+json")];
    let (code, body) = send(&client, "PATCH", path, &headers, json_patch.to_vec()).await;
    assert_eq!(code, 200, "{body}");

    let mut seen = Vec::new();
    while seen.len() < 2 {
        let next = tokio::time::timeout(Duration::from_secs(10), events.try_next()).await;
        match next.expect("an event within 10 s").expect("watch") {
            Some(WatchEvent::Modified(obj)) => seen.push(obj.data["spec"].clone()),
            Some(other) => panic!("unexpected event {other:?}"),
            None => panic!("watch ended"),
        }
    }
    assert_eq!(seen[0]["ownerNodeID"], "node-b");
    assert_eq!(seen[1]["capacity"], "2147483648");

    // Server-side apply (simplified, as for built-in kinds) creates, then
    // merges over what others set.
    let apply = PatchParams::apply("crds-test");
    let applied = Patch::Apply(volume("pvc-2", "node-c", json!({})));
    let made = volumes
        .patch("pvc-2", &apply, &applied)
        .await
        .expect("applied");
    assert_eq!(made.data["spec"]["ownerNodeID"], "node-c");
}

/// A namespaced kind with a status subresource, written here.
fn backups() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": {"name": "backups.sandbox.volmig.io"},
        "spec": {
            "group": "sandbox.volmig.io", "scope": "Namespaced",
            "names": {"plural": "backups", "kind": "Backup"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"source": {"type": "string"}}},
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}],
        },
    }))
    .expect("definition")
}

#[tokio::test(flavor = "multi_thread")]
async fn status_is_a_subresource_only_where_the_definition_says_so() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let ar = zfs(&client).await;
    let volumes: Api<DynamicObject> = Api::namespaced_with(client.clone(), "openebs", &ar);
    volumes
        .create(
            &PostParams::default(),
            &volume("pvc-1", "node-a", json!({})),
        )
        .await
        .expect("created");
    // No subresource: status is written with the object, and counts.
    let pp = PatchParams::default();
    let ready = Patch::Merge(json!({"status": {"state": "Ready"}}));
    let written = volumes
        .patch("pvc-1", &pp, &ready)
        .await
        .expect("status via the object");
    assert_eq!(written.data["status"]["state"], "Ready");
    assert_eq!(written.metadata.generation, Some(2));
    let missing = api_error(volumes.patch_status("pvc-1", &pp, &ready).await);
    assert_eq!(missing.code, 404);

    let crd = install(&client, &backups()).await;
    assert_eq!(crd.spec.names.singular.as_deref(), Some("backup"));
    let list = client
        .list_api_group_resources("sandbox.volmig.io/v1")
        .await
        .expect("discovery");
    let listed: Vec<&str> = list.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(listed, ["backups", "backups/status"]);
    let gvk = GroupVersionKind::gvk("sandbox.volmig.io", "v1", "Backup");
    let backups: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "openebs", &ApiResource::from_gvk(&gvk));
    let backup = serde_json::from_value(json!({
        "apiVersion": "sandbox.volmig.io/v1", "kind": "Backup", "metadata": {"name": "b"},
        "spec": {"source": "a"}, "status": {"phase": "Done"},
    }))
    .expect("backup");
    let created = backups
        .create(&PostParams::default(), &backup)
        .await
        .expect("created");
    assert!(
        created.data.get("status").is_none(),
        "status is the subresource's"
    );
    let both = Patch::Merge(json!({"spec": {"source": "b"}, "status": {"phase": "Done"}}));
    let main = backups.patch("b", &pp, &both).await.expect("main");
    assert_eq!(
        (
            main.data["spec"]["source"].as_str(),
            main.data.get("status")
        ),
        (Some("b"), None)
    );
    assert_eq!(main.metadata.generation, Some(2));
    let both = Patch::Merge(json!({"spec": {"source": "c"}, "status": {"phase": "Running"}}));
    let status = backups.patch_status("b", &pp, &both).await.expect("status");
    assert_eq!(status.data["spec"]["source"], "b", "only status changes");
    assert_eq!(status.data["status"]["phase"], "Running");
    assert_eq!(status.metadata.generation, Some(2));
    let bad = Patch::Merge(json!({"status": {"phase": 3}}));
    let bad = api_error(backups.patch_status("b", &pp, &bad).await);
    assert_eq!(
        (bad.code, bad.message.as_str()),
        (
            422,
            r#"Backup.sandbox.volmig.io "b" is invalid: status.phase: Invalid value: "integer": status.phase in body must be of type string: "integer""#
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_definitions_and_objects_are_refused() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let raw: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<CustomResourceDefinition>(&()),
    );
    let mut misnamed = serde_json::to_value(fixture("zfsvolume.yaml")).expect("json");
    misnamed["metadata"]["name"] = json!("volumes.zfs.openebs.io");
    let misnamed = serde_json::from_value(misnamed).expect("object");
    let status = api_error(raw.create(&PostParams::default(), &misnamed).await);
    assert_eq!(
        (status.code, status.reason.as_str(), status.message.as_str()),
        (
            422,
            "Invalid",
            r#"CustomResourceDefinition.apiextensions.k8s.io "volumes.zfs.openebs.io" is invalid: metadata.name: Invalid value: "volumes.zfs.openebs.io": must be spec.names.plural+"."+spec.group"#
        )
    );
    let causes = status.details.map(|d| d.causes).unwrap_or_default();
    assert_eq!(causes[0].field, "metadata.name");

    let broken = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example"},
        "spec": {"group": "example", "scope": "Global", "names": {"plural": "things", "kind": "Thing"},
                 "versions": [{"name": "v1", "served": true, "storage": false}]},
    }))
    .expect("object");
    let status = api_error(raw.create(&PostParams::default(), &broken).await);
    assert_eq!(status.code, 422);
    for want in [
        r#"spec.group: Invalid value: "example": should be a domain with at least one dot"#,
        r#"spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#,
        "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required",
        ": must have exactly one version marked as storage version",
    ] {
        assert!(
            status.message.contains(want),
            "{want} not in {}",
            status.message
        );
    }

    let ar = zfs(&client).await;
    let volumes: Api<DynamicObject> = Api::namespaced_with(client.clone(), "openebs", &ar);
    let mut bad = volume("bad", "node-a", json!({}));
    bad.data["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("poolName");
    let status = api_error(volumes.create(&PostParams::default(), &bad).await);
    assert_eq!(
        (status.code, status.message.as_str()),
        (
            422,
            r#"ZFSVolume.zfs.openebs.io "bad" is invalid: spec.poolName: Required value"#
        )
    );
}

/// A self review of `verb` on zfsvolumes in `openebs`.
async fn may(client: &kube::Client, verb: &str) -> bool {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review = serde_json::from_value(json!({"spec": {"resourceAttributes": {
        "namespace": "openebs", "verb": verb, "group": GROUP, "resource": "zfsvolumes"}}}))
    .expect("review");
    let answer = reviews
        .create(&PostParams::default(), &review)
        .await
        .expect("review");
    answer.status.is_some_and(|s| s.allowed)
}

#[tokio::test(flavor = "multi_thread")]
async fn rbac_grants_custom_resources_like_any_other() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let ar = zfs(&client).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "openebs");
    let account = serde_json::from_value(json!({"metadata": {"name": "driver"}})).expect("sa");
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("account");
    let volumes: Api<DynamicObject> = Api::namespaced_with(client.clone(), "openebs", &ar);
    volumes
        .create(
            &PostParams::default(),
            &volume("pvc-1", "node-a", json!({})),
        )
        .await
        .expect("created");

    let driver = client_as(&sb, "openebs", "driver").await;
    let as_driver: Api<DynamicObject> = Api::namespaced_with(driver.clone(), "openebs", &ar);
    let denied = api_error(as_driver.list(&ListParams::default()).await);
    assert_eq!(
        (denied.code, denied.message.as_str()),
        (
            403,
            r#"zfsvolumes.zfs.openebs.io is forbidden: User "system:serviceaccount:openebs:driver" cannot list resource "zfsvolumes" in API group "zfs.openebs.io" in the namespace "openebs""#
        )
    );
    assert!(!may(&driver, "list").await);

    let grants: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "openebs",
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
        )),
    );
    let role = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "zfs"},
        "rules": [{"apiGroups": [GROUP], "resources": ["zfsvolumes"], "verbs": ["get", "list", "watch", "patch"]}],
    }))
    .expect("role");
    grants
        .create(&PostParams::default(), &role)
        .await
        .expect("role");
    let bindings: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "openebs",
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
        )),
    );
    let binding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "zfs"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "zfs"},
        "subjects": [{"kind": "ServiceAccount", "name": "driver", "namespace": "openebs"}],
    }))
    .expect("binding");
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");

    let listed = as_driver
        .list(&ListParams::default())
        .await
        .expect("list allowed");
    assert_eq!(names(&listed), ["pvc-1"]);
    let moved = Patch::Merge(json!({"spec": {"ownerNodeID": "node-b"}}));
    as_driver
        .patch("pvc-1", &PatchParams::default(), &moved)
        .await
        .expect("patch allowed");
    assert!(may(&driver, "patch").await);
    assert!(!may(&driver, "delete").await);
    let refused = api_error(as_driver.delete("pvc-1", &DeleteParams::default()).await);
    assert_eq!(refused.code, 403);
    let everywhere: Api<DynamicObject> = Api::all_with(driver, &ar);
    assert_eq!(
        api_error(everywhere.list(&ListParams::default()).await).code,
        403
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn media_types_are_json_only() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let ar = zfs(&client).await;
    let volumes: Api<DynamicObject> = Api::namespaced_with(client.clone(), "openebs", &ar);
    volumes
        .create(
            &PostParams::default(),
            &volume("pvc-1", "node-a", json!({})),
        )
        .await
        .expect("created");
    let path = "/apis/zfs.openebs.io/v1/namespaces/openebs/zfsvolumes/pvc-1";
    let protobuf = "application/vnd.kubernetes.protobuf";
    let (code, message) = send(&client, "GET", path, &[("accept", protobuf)], Vec::new()).await;
    assert_eq!(
        (code, message.as_str()),
        (406, "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf")
    );
    let either = format!("{protobuf}, application/json");
    let (code, body) = send(&client, "GET", path, &[("accept", &either)], Vec::new()).await;
    assert_eq!(code, 200);
    let obj: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(obj["metadata"]["name"], "pvc-1");

    // What client-go would send: the magic, then a runtime.Unknown whose
    // typeMeta names the kind.
    let field =
        |n: u8, bytes: &[u8]| [vec![n << 3 | 2, bytes.len() as u8], bytes.to_vec()].concat();
    let meta = [field(1, b"zfs.openebs.io/v1"), field(2, b"ZFSVolume")].concat();
    let body = [b"k8s\0".to_vec(), field(1, &meta), field(2, b"")].concat();
    let collection = "/apis/zfs.openebs.io/v1/namespaces/openebs/zfsvolumes";
    let (code, message) = send(
        &client,
        "POST",
        collection,
        &[("content-type", protobuf)],
        body,
    )
    .await;
    assert_eq!(
        (code, message.as_str()),
        (
            400,
            r#"ZFSVolume in version "v1" cannot be handled as a ZFSVolume: Object 'Kind' is missing in 'object has no kind field '"#
        )
    );

    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let (code, body) = send(&client, "GET", collection, &[("accept", table)], Vec::new()).await;
    assert_eq!(code, 200);
    let table: Value = serde_json::from_str(&body).expect("Table");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Name",
            "ZPool",
            "NodeID",
            "Size",
            "Status",
            "Filesystem",
            "Age"
        ]
    );
    let cells = table["rows"][0]["cells"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let want = json!(["pvc-1", "tank", "node-a", "1073741824", null, "zfs"]);
    assert_eq!(Value::from(cells[..6].to_vec()), want);
}

#[tokio::test(flavor = "multi_thread")]
async fn owners_and_namespaces_take_custom_resources_with_them() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let ar = zfs(&client).await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "openebs");
    let owner = serde_json::from_value(json!({"metadata": {"name": "owner"}})).expect("map");
    let owner = maps
        .create(&PostParams::default(), &owner)
        .await
        .expect("owner");
    let volumes: Api<DynamicObject> = Api::namespaced_with(client.clone(), "openebs", &ar);
    let owned = volume(
        "owned",
        "node-a",
        json!({"metadata": {"name": "owned", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}]}}),
    );
    volumes
        .create(&PostParams::default(), &owned)
        .await
        .expect("owned");
    maps.delete("owner", &DeleteParams::default())
        .await
        .expect("owner deleted");
    await_object(&volumes, "owned", "garbage collected", |o| o.is_none()).await;

    volumes
        .create(
            &PostParams::default(),
            &volume("pvc-1", "node-a", json!({})),
        )
        .await
        .expect("created");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete("openebs", &DeleteParams::default())
        .await
        .expect("namespace deleted");
    await_object(&namespaces, "openebs", "namespace gone", |o| o.is_none()).await;
    let everywhere: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    assert!(everywhere
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_the_definition_deletes_its_objects_and_endpoints() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let ar = zfs(&client).await;
    let volumes: Api<DynamicObject> = Api::namespaced_with(client.clone(), "openebs", &ar);
    let pp = PostParams::default();
    volumes
        .create(&pp, &volume("pvc-1", "node-a", json!({})))
        .await
        .expect("created");
    let held = json!({"metadata": {"name": "pvc-2", "finalizers": ["volmig.io/hold"]}});
    volumes
        .create(&pp, &volume("pvc-2", "node-a", held))
        .await
        .expect("created");

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let uid = crds.get(CRD).await.expect("crd").metadata.uid.expect("uid");
    crds.delete(CRD, &DeleteParams::default())
        .await
        .expect("delete accepted");
    await_object(&volumes, "pvc-1", "deleted with its definition", |o| {
        o.is_none()
    })
    .await;
    await_object(&volumes, "pvc-2", "terminating", |o| {
        o.is_some_and(|o| o.metadata.deletion_timestamp.is_some())
    })
    .await;
    let terminating = crds.get(CRD).await.expect("held by its objects");
    let held = terminating.metadata.finalizers.unwrap_or_default();
    assert_eq!(held, ["customresourcecleanup.apiextensions.k8s.io"]);
    let refused = api_error(
        volumes
            .create(&pp, &volume("pvc-3", "node-a", json!({})))
            .await,
    );
    assert_eq!(
        (refused.code, refused.message.as_str()),
        (
            405,
            "create not allowed while custom resource definition is terminating"
        )
    );

    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    volumes
        .patch("pvc-2", &PatchParams::default(), &release)
        .await
        .expect("released");
    let gone = await_condition(crds.clone(), CRD, conditions::is_deleted(&uid));
    tokio::time::timeout(Duration::from_secs(30), gone)
        .await
        .expect("definition gone within 30 s")
        .expect("watch");
    let missing = api_error(volumes.get("pvc-1").await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(
        api_error(volumes.list(&ListParams::default()).await).code,
        404
    );
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    assert!(!discovery.has_group(GROUP));
}

#[tokio::test(flavor = "multi_thread")]
async fn lvm_volumes_are_served_too() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    install(&client, &fixture("lvmvolume.yaml")).await;
    namespace(&client, "openebs").await;
    let gvk = GroupVersionKind::gvk("local.openebs.io", "v1alpha1", "LVMVolume");
    let (ar, caps) = kube::discovery::pinned_kind(&client, &gvk)
        .await
        .expect("discovered");
    assert_eq!(
        (ar.plural.as_str(), caps.scope),
        ("lvmvolumes", Scope::Namespaced)
    );
    let volumes: Api<DynamicObject> = Api::namespaced_with(client.clone(), "openebs", &ar);
    let lvm = serde_json::from_value(json!({
        "apiVersion": "local.openebs.io/v1alpha1", "kind": "LVMVolume", "metadata": {"name": "pvc-1"},
        "spec": {"ownerNodeID": "node-a", "volGroup": "lvmvg", "capacity": "1073741824", "vgPattern": "^lvmvg$"},
        "status": {"state": "Ready"},
    }))
    .expect("LVMVolume");
    let created = volumes
        .create(&PostParams::default(), &lvm)
        .await
        .expect("created");
    assert_eq!(created.data["spec"]["vgPattern"], "^lvmvg$");
    assert_eq!(created.data["status"]["state"], "Ready");
}
