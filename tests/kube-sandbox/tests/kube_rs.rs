//! kube-rs against the sandbox: watcher, await_condition, server-side
//! apply, optimistic concurrency, selectors and an expired watch.

mod common;

use std::time::Duration;

use common::{client, object, sandbox};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube_sandbox::{Sandbox, SandboxConfig};
use serde_json::json;

fn pod(name: &str, command: &str, restart: &str) -> Pod {
    object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "kube-rs", "name": name}},
        "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", command]}]},
    }))
}

#[tokio::test(flavor = "multi_thread")]
async fn watcher_sees_pods_come_and_go() {
    let sb = sandbox().await;
    let pods: Api<Pod> = Api::default_namespaced(client(&sb).await);
    let stream = watcher(
        pods.clone(),
        watcher::Config::default().labels("app=kube-rs"),
    );
    let mut events = Box::pin(stream);
    // The initial list, empty.
    let first = events.try_next().await.expect("watch").expect("event");
    assert!(matches!(first, watcher::Event::Init), "{first:?}");
    pods.create(&PostParams::default(), &pod("w", "sleep 30", "Always"))
        .await
        .expect("create");
    let mut added = false;
    let mut deleted = false;
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = events.try_next().await.expect("watch") {
            match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p)
                    if p.metadata.name.as_deref() == Some("w") && !added =>
                {
                    added = true;
                    pods.delete("w", &DeleteParams::default().grace_period(1))
                        .await
                        .expect("delete");
                }
                watcher::Event::Delete(p) if p.metadata.name.as_deref() == Some("w") => {
                    deleted = true;
                    break;
                }
                _ => {}
            }
        }
    })
    .await;
    assert!(
        seen.is_ok() && added && deleted,
        "added {added}, deleted {deleted}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn await_condition_running_then_succeeded() {
    let sb = sandbox().await;
    let pods: Api<Pod> = Api::default_namespaced(client(&sb).await);
    pods.create(
        &PostParams::default(),
        &pod("job", "sleep 1; exit 0", "Never"),
    )
    .await
    .expect("create");
    let running = tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(pods.clone(), "job", conditions::is_pod_running()),
    );
    running.await.expect("running in time").expect("watch");
    let succeeded =
        |p: Option<&Pod>| p.and_then(|p| p.status.as_ref()?.phase.as_deref()) == Some("Succeeded");
    let done = tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(pods.clone(), "job", succeeded),
    );
    let done = done
        .await
        .expect("succeeded in time")
        .expect("watch")
        .expect("pod");
    let status = done.status.expect("status");
    let terminated = status.container_statuses.expect("statuses")[0]
        .state
        .clone()
        .expect("state")
        .terminated
        .expect("terminated");
    assert_eq!(
        (terminated.exit_code, terminated.reason.as_deref()),
        (0, Some("Completed"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn server_side_apply_creates_then_merges() {
    let sb = sandbox().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client(&sb).await);
    let params = PatchParams::apply("volmig-test").force();
    let first = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "1"}});
    let created = maps
        .patch("ssa", &params, &Patch::Apply(&first))
        .await
        .expect("apply creates");
    assert_eq!(created.data.expect("data")["a"], "1");
    let second = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "2", "b": "3"}});
    let merged = maps
        .patch("ssa", &params, &Patch::Apply(&second))
        .await
        .expect("apply updates");
    let data = merged.data.expect("data");
    assert_eq!((data["a"].as_str(), data["b"].as_str()), ("2", "3"));
    assert_ne!(
        created.metadata.resource_version,
        merged.metadata.resource_version
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stale_replace_is_a_conflict() {
    let sb = sandbox().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client(&sb).await);
    let cm: ConfigMap = object(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "occ"}, "data": {"n": "0"}}),
    );
    let original = maps
        .create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let mut first = original.clone();
    first.data = Some([("n".to_string(), "1".to_string())].into());
    maps.replace("occ", &PostParams::default(), &first)
        .await
        .expect("first writer wins");
    let mut second = original;
    second.data = Some([("n".to_string(), "2".to_string())].into());
    let err = maps
        .replace("occ", &PostParams::default(), &second)
        .await
        .expect_err("stale");
    match err {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"))
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    let missing = maps.get("nope").await.expect_err("absent");
    assert!(
        matches!(missing, kube::Error::Api(ref s) if s.code == 404 && s.reason == "NotFound"),
        "{missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn selectors_filter_lists() {
    let sb = sandbox().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client(&sb).await);
    for (name, tier) in [("a", "db"), ("b", "web"), ("c", "db")] {
        let cm: ConfigMap = object(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"tier": tier}}}),
        );
        maps.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    let names = |list: kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        list.items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .filter(|n| n.len() == 1)
            .collect()
    };
    assert_eq!(
        names(
            maps.list(&ListParams::default().labels("tier=db"))
                .await
                .expect("list")
        ),
        ["a", "c"]
    );
    assert_eq!(
        names(
            maps.list(&ListParams::default().labels("tier notin (db)"))
                .await
                .expect("list")
        ),
        ["b"]
    );
    assert_eq!(
        names(
            maps.list(&ListParams::default().fields("metadata.name=b"))
                .await
                .expect("list")
        ),
        ["b"]
    );
    assert_eq!(
        names(
            maps.list(&ListParams::default().labels("tier,tier!=web"))
                .await
                .expect("list")
        ),
        ["a", "c"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn too_old_watch_gets_410() {
    let sb = Sandbox::start(SandboxConfig {
        watch_history: 5,
        ..SandboxConfig::default()
    })
    .await
    .expect("sandbox");
    let maps: Api<ConfigMap> = Api::default_namespaced(client(&sb).await);
    for i in 0..10 {
        let cm: ConfigMap = object(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("m{i}")}}),
        );
        maps.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    let mut stream = maps
        .watch(&WatchParams::default(), "1")
        .await
        .expect("watch starts")
        .boxed();
    let first = stream.try_next().await.expect("stream").expect("an event");
    match first {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected 410, got {other:?}"),
    }
    // And a watcher recovers by relisting.
    let mut w = Box::pin(watcher(maps.clone(), watcher::Config::default()));
    let mut names = 0;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(10), w.try_next())
        .await
        .expect("in time")
        .expect("watcher")
    {
        match event {
            watcher::Event::InitApply(_) => names += 1,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert!(names >= 10, "{names}");
}

#[tokio::test(flavor = "multi_thread")]
async fn watches_end_with_their_sandbox() {
    let sb = sandbox().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client(&sb).await);
    let mut stream = maps
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch starts")
        .boxed();
    drop(sb);
    // The client outlives the sandbox; its watch must not.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(_)) = stream.next().await {}
    })
    .await;
    assert!(
        ended.is_ok(),
        "the watch went on after its sandbox was dropped"
    );
}
