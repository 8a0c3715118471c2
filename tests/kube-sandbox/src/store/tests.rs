use serde_json::json;

use super::*;

fn store() -> Arc<Store> {
    let s = Store::new(4);
    s.create(
        registry::get("namespaces"),
        "",
        json!({"metadata": {"name": "default"}}),
    )
    .expect("namespace");
    // The namespace controller's, which ServiceAccount admission needs.
    s.create(
        registry::get("serviceaccounts"),
        "default",
        json!({"metadata": {"name": "default"}}),
    )
    .expect("service account");
    s
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
}

fn pods() -> &'static Resource {
    registry::get("pods")
}

#[test]
fn create_fills_server_metadata() {
    let s = store();
    let created = s.create(pods(), "default", pod("a")).expect("created");
    let meta = &created["metadata"];
    assert_eq!(meta["namespace"], "default");
    assert_eq!(meta["uid"].as_str().map(str::len), Some(36));
    assert!(meta["creationTimestamp"].is_string());
    // After the namespace's and its ServiceAccount's writes.
    assert_eq!(meta["resourceVersion"], "3");
    let err = s
        .create(pods(), "default", pod("a"))
        .expect_err("duplicate");
    assert_eq!(err.reason(), "AlreadyExists");
    let err = s
        .create(pods(), "nowhere", pod("b"))
        .expect_err("no namespace");
    assert_eq!(err.code(), 404);
}

#[test]
fn generate_name_appends_five_characters() {
    let s = store();
    let created = s
        .create(pods(), "default", json!({"metadata": {"generateName": "mover-"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}))
        .expect("created");
    let name = created["metadata"]["name"].as_str().expect("name");
    assert!(name.starts_with("mover-") && name.len() == 11, "{name}");
}

#[test]
fn stale_updates_conflict() {
    let s = store();
    let created = s.create(pods(), "default", pod("a")).expect("created");
    let mut first = created.clone();
    first["metadata"]["labels"] = json!({"v": "1"});
    s.update(pods(), "default", "a", first, Part::Main)
        .expect("first update");
    let mut stale = created;
    stale["metadata"]["labels"] = json!({"v": "2"});
    let err = s
        .update(pods(), "default", "a", stale, Part::Main)
        .expect_err("stale");
    assert_eq!((err.code(), err.reason()), (409, "Conflict"));
    assert!(err.is_retryable());
}

#[test]
fn main_updates_keep_status_and_status_updates_keep_spec() {
    let s = store();
    let created = s.create(pods(), "default", pod("a")).expect("created");
    let mut with_status = created.clone();
    with_status["status"]["phase"] = json!("Running");
    with_status["spec"]["containers"][0]["image"] = json!("other");
    let after = s
        .update(pods(), "default", "a", with_status, Part::Status)
        .expect("status");
    assert_eq!(after["status"]["phase"], "Running");
    assert_eq!(after["spec"]["containers"][0]["image"], "busybox");
    let mut main = after.clone();
    main["status"]["phase"] = json!("Failed");
    main["metadata"]["labels"] = json!({"a": "b"});
    let after = s
        .update(pods(), "default", "a", main, Part::Main)
        .expect("main");
    assert_eq!(after["status"]["phase"], "Running");
    assert_eq!(after["metadata"]["labels"]["a"], "b");
}

#[test]
fn finalizers_hold_deletion_until_removed() {
    let s = store();
    let cm = json!({"metadata": {"name": "c", "finalizers": ["example.com/hold"]}});
    s.create(registry::get("configmaps"), "default", cm)
        .expect("created");
    let held = s
        .delete(
            registry::get("configmaps"),
            "default",
            "c",
            &DeleteOptions::default(),
        )
        .expect("deleted");
    let Deleted::Terminating(obj) = held else {
        panic!("should be held")
    };
    assert!(obj["metadata"]["deletionTimestamp"].is_string());
    let gone = s
        .modify(registry::get("configmaps"), "default", "c", |o| {
            o["metadata"]["finalizers"] = json!([]);
            true
        })
        .expect("finalizer removed");
    assert!(gone["metadata"]["deletionTimestamp"].is_string());
    assert!(s.get(registry::get("configmaps"), "default", "c").is_err());
}

#[test]
fn running_pods_wait_for_their_kubelet() {
    let s = store();
    let mut p = pod("a");
    p["spec"]["nodeName"] = json!("node-1");
    s.create(pods(), "default", p).expect("created");
    let held = s
        .delete(pods(), "default", "a", &DeleteOptions::default())
        .expect("delete");
    assert!(
        matches!(held, Deleted::Terminating(ref o) if o["metadata"]["deletionGracePeriodSeconds"] == 30)
    );
    let forced = DeleteOptions {
        grace_seconds: Some(0),
        ..Default::default()
    };
    assert!(matches!(
        s.delete(pods(), "default", "a", &forced),
        Ok(Deleted::Gone(_))
    ));
    // Unscheduled pods go at once.
    s.create(pods(), "default", pod("b")).expect("created");
    assert!(matches!(
        s.delete(pods(), "default", "b", &DeleteOptions::default()),
        Ok(Deleted::Gone(_))
    ));
}

#[test]
fn watches_replay_history_and_expire() {
    let s = store();
    let start = s.resource_version();
    for name in ["a", "b"] {
        s.create(pods(), "default", pod(name)).expect("created");
    }
    let sub = s
        .watch(pods(), Some("default"), Some(start))
        .expect("watch");
    let names: Vec<&str> = sub
        .backlog
        .iter()
        .filter_map(|c| c.object["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["a", "b"]);
    for name in ["c", "d", "e", "f"] {
        s.create(pods(), "default", pod(name)).expect("created");
    }
    let err = s.watch(pods(), None, Some(start)).err().expect("too old");
    assert_eq!((err.code(), err.reason()), (410, "Expired"));
    let fresh = s.watch(pods(), None, None).expect("from now");
    assert_eq!(fresh.backlog.len(), 6);
    assert!(fresh.backlog.iter().all(|c| c.kind == ChangeType::Added));
}

#[test]
fn orphaning_removes_owner_references() {
    let s = store();
    let cm = s
        .create(
            registry::get("configmaps"),
            "default",
            json!({"metadata": {"name": "owner"}}),
        )
        .expect("owner");
    let uid = cm["metadata"]["uid"].clone();
    let mut p = pod("child");
    p["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]);
    s.create(pods(), "default", p).expect("child");
    let opts = DeleteOptions {
        orphan: true,
        ..Default::default()
    };
    s.delete(registry::get("configmaps"), "default", "owner", &opts)
        .expect("deleted");
    let child = s.get(pods(), "default", "child").expect("child kept");
    assert!(
        child["metadata"].get("ownerReferences").is_none(),
        "{child}"
    );
}

#[test]
fn adoption_needs_a_live_owner_and_an_orphan() {
    let s = store();
    let cms = registry::get("configmaps");
    let owner = s
        .create(cms, "default", json!({"metadata": {"name": "owner"}}))
        .expect("owner");
    let reference = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner["metadata"]["uid"], "controller": true});
    s.create(pods(), "default", pod("orphan")).expect("orphan");
    let adopt = |name: &str| {
        s.adopt(pods(), "default", name, cms, &owner, reference.clone())
            .expect("adopt")
    };
    let adopted = adopt("orphan").expect("adopted");
    assert_eq!(adopted["metadata"]["ownerReferences"], json!([reference]));
    // Already controlled: left alone.
    assert!(adopt("orphan").is_none());
    // An owner deleted (and re-created under the same name) adopts nothing.
    s.create(pods(), "default", pod("late")).expect("late");
    let opts = DeleteOptions {
        orphan: true,
        ..Default::default()
    };
    s.delete(cms, "default", "owner", &opts).expect("deleted");
    assert!(adopt("late").is_none());
    s.create(cms, "default", json!({"metadata": {"name": "owner"}}))
        .expect("another owner");
    assert!(adopt("late").is_none());
    let late = s.get(pods(), "default", "late").expect("late");
    assert!(late["metadata"].get("ownerReferences").is_none());
}

#[test]
fn delete_preconditions_fail_as_the_api_server_words_it() {
    let s = store();
    let claims = registry::get("persistentvolumeclaims");
    let claim = json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}}}});
    let created = s.create(claims, "default", claim).expect("claim");
    let rv = created["metadata"]["resourceVersion"].as_str().expect("rv");
    let wrong_uid = DeleteOptions {
        uid: Some("other".into()),
        ..Default::default()
    };
    let err = s
        .delete(claims, "default", "data", &wrong_uid)
        .expect_err("uid");
    assert_eq!(
        (err.code(), err.to_string()),
        (409, format!("Operation cannot be fulfilled on persistentvolumeclaims \"data\": Precondition failed: UID in precondition: other, UID in object meta: {}", created["metadata"]["uid"].as_str().unwrap_or_default()))
    );
    let stale = DeleteOptions {
        resource_version: Some("1".into()),
        ..Default::default()
    };
    let err = s.delete(claims, "default", "data", &stale).expect_err("rv");
    assert_eq!(
        err.to_string(),
        format!("Operation cannot be fulfilled on persistentvolumeclaims \"data\": Precondition failed: ResourceVersion in precondition: 1, ResourceVersion in object meta: {rv}")
    );
    let right = DeleteOptions {
        uid: created["metadata"]["uid"].as_str().map(str::to_string),
        ..Default::default()
    };
    let deleted = s.delete(claims, "default", "data", &right).expect("delete");
    // pvc-protection holds it.
    assert!(matches!(deleted, Deleted::Terminating(_)));
}
