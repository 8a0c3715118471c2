//! What the API server refuses and answers, checked through kube-rs (and
//! kubectl where it is kubectl's behaviour): metadata and per-kind
//! validation, the DefaultStorageClass admission, Secret decoding, field
//! selectors, DELETE answers, the StatefulSet controller's revisions and
//! ordered scale-down, and the Scale subresource's optimistic concurrency.

mod common;

use std::time::{Duration, Instant};

use common::{client, kubectl, object, sandbox};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchParams,
};
use kube::core::response::StatusSummary;
use serde_json::{json, Value};

/// The Status of a request that must fail.
fn api_error<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn config_map(name: &str, extra: Value) -> ConfigMap {
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    if let (Some(cm), Some(extra)) = (cm.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            if k == "metadata" {
                for (mk, mv) in v.as_object().into_iter().flatten() {
                    cm["metadata"][mk] = mv.clone();
                }
            } else {
                cm.insert(k.clone(), v.clone());
            }
        }
    }
    object(cm)
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_labels_and_names_are_invalid() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();

    let bad = config_map(
        "labelled",
        json!({"metadata": {"labels": {"bad key": "v"}}}),
    );
    let status = api_error(maps.create(&pp, &bad).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        r#"ConfigMap "labelled" is invalid: metadata.labels: Invalid value: "bad key": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"#
    );
    let long_value = config_map(
        "long",
        json!({"metadata": {"labels": {"tier": "x".repeat(64)}}}),
    );
    let status = api_error(maps.create(&pp, &long_value).await);
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .ends_with(": must be no more than 63 characters"),
        "{}",
        status.message
    );

    // On update too.
    let fine = config_map(
        "fine",
        json!({"metadata": {"labels": {"app.kubernetes.io/name": "x"}}}),
    );
    maps.create(&pp, &fine).await.expect("valid labels");
    let relabel = json!({"metadata": {"labels": {"-x": "v"}}});
    let status = api_error(
        maps.patch("fine", &PatchParams::default(), &Patch::Merge(&relabel))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status
            .message
            .contains(r#"metadata.labels: Invalid value: "-x": name part must consist of"#),
        "{}",
        status.message
    );

    // Service names are DNS-1035 labels: no leading digit.
    let services: Api<Service> = Api::default_namespaced(client.clone());
    let svc: Service = object(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "1web"}, "spec": {"ports": [{"port": 80}]}}));
    let status = api_error(services.create(&pp, &svc).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        r#"Service "1web" is invalid: metadata.name: Invalid value: "1web": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"#
    );

    // Namespace names are DNS-1123 labels: no dots.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    let ns =
        object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team.one"}}));
    let status = api_error(namespaces.create(&pp, &ns).await);
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"
        ),
        "{}",
        status.message
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn claims_need_a_positive_storage_request_and_null_classes_get_the_default() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let claims: Api<DynamicObject> = Api::default_namespaced_with(
        client,
        &ApiResource::erase::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(&()),
    );
    let pp = PostParams::default();
    let claim = |name: &str, spec: Value| -> DynamicObject {
        object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name}, "spec": spec}))
    };

    // A claim that names its volume still requests storage.
    let bound = claim(
        "bound",
        json!({"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1"}),
    );
    let status = api_error(claims.create(&pp, &bound).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        r#"PersistentVolumeClaim "bound" is invalid: spec.resources[storage]: Required value"#
    );
    let zero = claim(
        "zero",
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "0"}}}),
    );
    let status = api_error(claims.create(&pp, &zero).await);
    assert_eq!(
        status.message,
        r#"PersistentVolumeClaim "zero" is invalid: spec.resources[storage]: Invalid value: "0": must be greater than zero"#
    );

    // `storageClassName: null` is unset: the default class is written in.
    let storage = json!({"requests": {"storage": "1Gi"}});
    let null = claim(
        "null-class",
        json!({"accessModes": ["ReadWriteOnce"], "resources": storage, "storageClassName": null}),
    );
    let created = claims.create(&pp, &null).await.expect("null class");
    assert_eq!(created.data["spec"]["storageClassName"], "standard");
    // "" asks for no class, and keeps it.
    let empty = claim(
        "no-class",
        json!({"accessModes": ["ReadWriteOnce"], "resources": storage, "storageClassName": ""}),
    );
    let created = claims.create(&pp, &empty).await.expect("empty class");
    assert_eq!(created.data["spec"]["storageClassName"], "");
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_decode_validate_and_stay_immutable() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let raw: Api<DynamicObject> =
        Api::default_namespaced_with(client.clone(), &ApiResource::erase::<Secret>(&()));
    let secrets: Api<Secret> = Api::default_namespaced(client);
    let pp = PostParams::default();
    let secret = |name: &str, body: Value| -> DynamicObject {
        let mut s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}});
        for (k, v) in body.as_object().into_iter().flatten() {
            s[k] = v.clone();
        }
        object(s)
    };

    // Data that is not base64 does not decode: 400 on create, as the API
    // server's decoder answers, and 422 for a patch whose result does not.
    let status = api_error(
        raw.create(&pp, &secret("b64", json!({"data": {"k": "not base64!"}})))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        status.message,
        r#"Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3"#
    );
    raw.create(&pp, &secret("b64", json!({"data": {"k": "aGk="}})))
        .await
        .expect("valid base64");
    let garbage = json!({"data": {"k": "%%%%"}});
    let status = api_error(
        raw.patch("b64", &PatchParams::default(), &Patch::Merge(&garbage))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status
            .message
            .ends_with("illegal base64 data at input byte 0"),
        "{}",
        status.message
    );

    // Keys are file names.
    let status = api_error(
        raw.create(&pp, &secret("keys", json!({"data": {"a/b": "aGk="}})))
            .await,
    );
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains(
            r#"data[a/b]: Invalid value: "a/b": a valid config key must consist of alphanumeric characters, '-', '_' or '.'"#
        ),
        "{}",
        status.message
    );
    // A TLS secret has both halves.
    let tls = secret(
        "tls",
        json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "aGk="}}),
    );
    let status = api_error(raw.create(&pp, &tls).await);
    assert_eq!(
        status.message,
        r#"Secret "tls" is invalid: data[tls.key]: Required value"#
    );

    // Once immutable, always immutable.
    let locked = secret(
        "locked",
        json!({"immutable": true, "stringData": {"k": "v"}}),
    );
    raw.create(&pp, &locked).await.expect("immutable secret");
    let unlock = json!({"immutable": false});
    let status = api_error(
        secrets
            .patch("locked", &PatchParams::default(), &Patch::Merge(&unlock))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "Secret \"locked\" is invalid: immutable: Forbidden: field is immutable when `immutable` is set"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unsupported_field_selectors_are_bad_requests() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());

    let status = api_error(
        pods.list(&ListParams::default().fields("spec.bogus=x"))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
    assert_eq!(status.message, "field label not supported: spec.bogus");
    // Kinds without their own field labels take apimachinery's default.
    let status = api_error(maps.list(&ListParams::default().fields("data.a=1")).await);
    assert_eq!(status.code, 400);
    assert_eq!(
        status.message,
        r#""data.a" is not a known field selector: only "metadata.name", "metadata.namespace""#
    );
    // A watch is refused before it starts.
    let status = api_error(
        pods.watch(&WatchParams::default().fields("spec.bogus=x"), "0")
            .await
            .map(|_| ()),
    );
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
    assert_eq!(status.message, "field label not supported: spec.bogus");
    // And so is a deletecollection.
    let status = api_error(
        maps.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().fields("data.a=1"),
        )
        .await,
    );
    assert_eq!(status.code, 400);

    // The supported ones select, with the values Kubernetes derives.
    let pod: Pod = object(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sel"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}),
    );
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let names = |fields: &'static str| {
        let pods = pods.clone();
        async move {
            pods.list(&ListParams::default().fields(fields))
                .await
                .expect("list")
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(names("spec.hostNetwork=false").await, ["sel"]);
    assert_eq!(
        names("spec.restartPolicy=Always,metadata.name=sel").await,
        ["sel"]
    );
    assert!(names("spec.hostNetwork=true").await.is_empty());

    // kubectl shows the server's message.
    let out = kubectl(
        &sb,
        &["get", "pods", "--field-selector", "spec.bogus=x"],
        None,
    )
    .await;
    assert!(!out.ok, "{}", out.stdout);
    assert!(
        out.stderr.contains("field label not supported: spec.bogus"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deletes_answer_a_status_or_the_object() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();

    // Gone at once: a Success Status naming it (kind is the resource).
    let created = maps
        .create(&pp, &config_map("gone", json!({})))
        .await
        .expect("create");
    let answer = maps
        .delete("gone", &DeleteParams::default())
        .await
        .expect("delete");
    let status = answer.right().expect("a Status, not the object");
    assert_eq!(status.status, Some(StatusSummary::Success));
    let details = status.details.expect("details");
    assert_eq!(
        (
            details.name.as_str(),
            details.kind.as_str(),
            details.group.as_str()
        ),
        ("gone", "configmaps", "")
    );
    assert_eq!(Some(details.uid), created.metadata.uid);

    // Held by a finalizer: the object, now terminating.
    let held = config_map(
        "held",
        json!({"metadata": {"finalizers": ["example.com/hold"]}}),
    );
    maps.create(&pp, &held).await.expect("create");
    let answer = maps
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    let terminating = answer.left().expect("the object, not a Status");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let release = json!({"metadata": {"finalizers": null}});
    maps.patch("held", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("release");
    assert!(maps.get_opt("held").await.expect("get").is_none());

    // Kinds whose registry returns the deleted object (Services) do.
    let services: Api<Service> = Api::default_namespaced(client.clone());
    let svc: Service = object(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}));
    services.create(&pp, &svc).await.expect("service");
    let answer = services
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    let deleted = answer.left().expect("the Service, not a Status");
    assert_eq!(deleted.metadata.name.as_deref(), Some("web"));

    // A group's resources name their group.
    let sets: Api<StatefulSet> = Api::default_namespaced(client);
    sets.create(&pp, &statefulset("empty", 0, "sleep 300"))
        .await
        .expect("statefulset");
    let answer = sets
        .delete("empty", &DeleteParams::default())
        .await
        .expect("delete");
    let status = answer.right().expect("a Status, not the object");
    let details = status.details.expect("details");
    assert_eq!(
        (details.kind.as_str(), details.group.as_str()),
        ("statefulsets", "apps")
    );
}

fn statefulset(name: &str, replicas: i32, command: &str) -> StatefulSet {
    object(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
        "spec": {
            "replicas": replicas, "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "terminationGracePeriodSeconds": 10,
                "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", command]}]}},
        },
    }))
}

/// Polls the set until `check` holds.
async fn await_set(sets: &Api<StatefulSet>, name: &str, check: impl Fn(&StatefulSet) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    while Instant::now() < deadline {
        let set = sets.get(name).await.expect("get");
        if check(&set) {
            return;
        }
        last = Some(set);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{name}: never reached; last: {:#?}", last.map(|s| s.status));
}

#[tokio::test(flavor = "multi_thread")]
async fn statefulset_pods_carry_the_update_revision() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client);
    sets.create(&PostParams::default(), &statefulset("db", 2, "sleep 300"))
        .await
        .expect("statefulset");
    await_set(&sets, "db", |s| {
        s.status.as_ref().and_then(|s| s.ready_replicas) == Some(2)
    })
    .await;
    let status = sets.get("db").await.expect("get").status.expect("status");
    let revision = status.update_revision.expect("updateRevision");
    assert!(revision.starts_with("db-"), "{revision}");
    assert_eq!(status.current_revision.as_deref(), Some(revision.as_str()));
    assert_eq!(
        (
            status.replicas,
            status.current_replicas,
            status.updated_replicas
        ),
        (2, Some(2), Some(2))
    );
    let list = pods
        .list(&ListParams::default().labels("app=db"))
        .await
        .expect("pods");
    assert_eq!(list.items.len(), 2);
    for pod in &list.items {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("controller-revision-hash"),
            Some(&revision),
            "{:?}",
            pod.metadata.name
        );
    }
    // Selecting by the revision finds them, as kubectl rollout does.
    let selected = pods
        .list(&ListParams::default().labels(&format!("controller-revision-hash={revision}")))
        .await
        .expect("pods");
    assert_eq!(selected.items.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn ordered_scale_down_terminates_one_pod_at_a_time() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client);
    // Each pod takes about a second to go after SIGTERM.
    let slow_exit = "trap 'sleep 1; exit 0' TERM; while true; do sleep 0.1; done";
    sets.create(&PostParams::default(), &statefulset("web", 3, slow_exit))
        .await
        .expect("statefulset");
    await_set(&sets, "web", |s| {
        s.status.as_ref().and_then(|s| s.ready_replicas) == Some(3)
    })
    .await;

    let scale = json!({"spec": {"replicas": 1}});
    sets.patch("web", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .expect("scale to 1");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut most_terminating, mut counted_terminating) = (0, false);
    loop {
        assert!(Instant::now() < deadline, "scale-down did not finish");
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .expect("pods");
        let name_of = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
        let names: Vec<String> = list.items.iter().map(name_of).collect();
        let terminating: Vec<String> = list
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .map(name_of)
            .collect();
        most_terminating = most_terminating.max(terminating.len());
        assert!(
            terminating.len() <= 1,
            "two pods terminating at once: {terminating:?}"
        );
        assert!(
            !(terminating.contains(&"web-1".to_string()) && names.contains(&"web-2".to_string())),
            "web-1 went before web-2 was gone: {names:?}"
        );
        if !terminating.is_empty() {
            // status.replicas counts terminating pods too.
            let set = sets.get("web").await.expect("get");
            let replicas = set.status.map(|s| s.replicas).unwrap_or_default();
            let now = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .expect("pods")
                .items
                .len();
            if replicas as usize == now && now == names.len() {
                counted_terminating = true;
            }
        }
        if names == ["web-0"] && terminating.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(most_terminating, 1, "never saw a pod terminating");
    assert!(
        counted_terminating,
        "status.replicas never counted a terminating pod"
    );
    await_set(&sets, "web", |s| {
        s.status
            .as_ref()
            .is_some_and(|s| s.replicas == 1 && s.ready_replicas == Some(1))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_scale_is_a_conflict() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let sets: Api<StatefulSet> = Api::default_namespaced(client);
    sets.create(&PostParams::default(), &statefulset("db", 0, "sleep 300"))
        .await
        .expect("statefulset");
    let stale = sets.get_scale("db").await.expect("scale");
    // Someone else writes the set.
    let annotate = json!({"metadata": {"annotations": {"touched": "yes"}}});
    sets.patch("db", &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .expect("annotate");

    let mut wanted = stale.clone();
    wanted.spec.get_or_insert_with(Default::default).replicas = Some(2);
    let status = api_error(
        sets.replace_scale("db", &PostParams::default(), &wanted)
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        r#"Operation cannot be fulfilled on statefulsets.apps "db": the object has been modified; please apply your changes to the latest version and try again"#
    );
    assert_eq!(
        sets.get("db")
            .await
            .expect("get")
            .spec
            .and_then(|s| s.replicas),
        Some(0)
    );
    // A PATCH pinned to the stale version is refused too; unpinned it applies.
    let pinned = json!({"metadata": {"resourceVersion": stale.metadata.resource_version},
        "spec": {"replicas": 2}});
    let status = api_error(
        sets.patch_scale("db", &PatchParams::default(), &Patch::Merge(&pinned))
            .await,
    );
    assert_eq!(status.code, 409);

    // Read-modify-write as clients do: the StatefulSet controller writes
    // the status meanwhile, so a fresh version may be stale by the PUT.
    let mut scaled = None;
    for _ in 0..10 {
        let mut fresh = sets.get_scale("db").await.expect("scale");
        fresh.spec.get_or_insert_with(Default::default).replicas = Some(2);
        match sets
            .replace_scale("db", &PostParams::default(), &fresh)
            .await
        {
            Ok(s) => {
                scaled = Some(s);
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => panic!("replace_scale: {e}"),
        }
    }
    let scaled = scaled.expect("a current version is accepted");
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(2));
    let unpinned = json!({"spec": {"replicas": 0}});
    let scaled = sets
        .patch_scale("db", &PatchParams::default(), &Patch::Merge(&unpinned))
        .await
        .expect("unpinned patch");
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(0));
}
