//! Jobs (batch/v1) and their controllers, as volmig's in-cluster driver
//! uses them: a pod from the template owned and labelled as the real Job
//! controller does it, failed pods replaced until the backoff limit, a
//! pod deleted while running counted as failed and replaced, Complete and
//! Failed conditions, the TTL after finishing, and the pods going with
//! their Job.

mod common;

use std::time::Duration;

use common::k8s::is_running;
use common::{await_object, client, kubectl_ok, object, sandbox};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

fn job(name: &str, script: &str, backoff_limit: i32, ttl: Option<i32>) -> Job {
    object(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "ttlSecondsAfterFinished": ttl,
            "template": {
                "metadata": {"labels": {"volmig.io/driver-of": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "driver", "image": "busybox", "command": ["sh", "-c", script]}],
                },
            },
        },
    }))
}

fn condition<'a>(
    job: &'a Job,
    kind: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind && c.status == "True")
}

async fn pods_of(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    let selector = format!("batch.kubernetes.io/job-name={job}");
    let list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .expect("list");
    list.items
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_runs_its_pod_to_completion() {
    let sb = sandbox().await;
    let c = client(&sb).await;
    let jobs: Api<Job> = Api::default_namespaced(c.clone());
    let pods: Api<Pod> = Api::default_namespaced(c);
    let created = jobs
        .create(&PostParams::default(), &job("drive", "exit 0", 6, None))
        .await
        .expect("create");
    let uid = created.metadata.uid.clone().expect("uid");
    let spec = created.spec.as_ref().expect("spec");
    assert_eq!((spec.parallelism, spec.completions), (Some(1), Some(1)));
    await_object(&jobs, "drive", "Complete", |j| {
        j.and_then(|j| condition(j, "Complete")).is_some()
    })
    .await;

    let done = jobs.get("drive").await.expect("get");
    let status = done.status.clone().expect("status");
    assert_eq!(
        (status.succeeded, status.failed, status.active),
        (Some(1), None, None)
    );
    assert!(status.completion_time.is_some() && status.start_time.is_some());
    assert_eq!(
        condition(&done, "Complete").and_then(|c| c.reason.as_deref()),
        Some("CompletionsReached")
    );
    assert!(condition(&done, "SuccessCriteriaMet").is_some());

    let all = pods_of(&pods, "drive").await;
    assert_eq!(all.len(), 1);
    let pod = &all[0];
    let meta = &pod.metadata;
    assert!(
        meta.name
            .as_deref()
            .is_some_and(|n| n.starts_with("drive-") && n.len() == "drive-".len() + 5),
        "{meta:?}"
    );
    assert_eq!(meta.generate_name.as_deref(), Some("drive-"));
    let labels = meta.labels.clone().expect("labels");
    for (key, want) in [
        ("batch.kubernetes.io/controller-uid", uid.as_str()),
        ("controller-uid", uid.as_str()),
        ("batch.kubernetes.io/job-name", "drive"),
        ("job-name", "drive"),
        ("volmig.io/driver-of", "drive"),
    ] {
        assert_eq!(labels.get(key).map(String::as_str), Some(want), "{key}");
    }
    let owner = &meta.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("Job", uid.as_str(), Some(true))
    );
    // Counted, so the tracking finalizer is off.
    assert!(
        meta.finalizers.as_ref().is_none_or(Vec::is_empty),
        "{meta:?}"
    );
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );

    let table = kubectl_ok(&sb, &["get", "jobs"]).await;
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .expect("a row")
        .split_whitespace()
        .collect();
    assert_eq!(&row[..3], ["drive", "Complete", "1/1"], "{table}");
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_pods_are_replaced_until_the_backoff_limit() {
    let sb = sandbox().await;
    let c = client(&sb).await;
    let jobs: Api<Job> = Api::default_namespaced(c.clone());
    let pods: Api<Pod> = Api::default_namespaced(c);
    jobs.create(&PostParams::default(), &job("flaky", "exit 3", 2, None))
        .await
        .expect("create");
    await_object(&jobs, "flaky", "Failed", |j| {
        j.and_then(|j| condition(j, "Failed")).is_some()
    })
    .await;

    let failed = jobs.get("flaky").await.expect("get");
    let status = failed.status.clone().expect("status");
    // backoffLimit 2: the third failure ends it.
    assert_eq!(
        (status.failed, status.succeeded, status.active),
        (Some(3), None, None)
    );
    let cond = condition(&failed, "Failed").expect("Failed");
    assert_eq!(cond.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert_eq!(
        cond.message.as_deref(),
        Some("Job has reached the specified backoff limit")
    );
    assert!(condition(&failed, "FailureTarget").is_some());
    assert!(condition(&failed, "Complete").is_none());
    let all = pods_of(&pods, "flaky").await;
    assert_eq!(all.len(), 3, "one pod per attempt");
    assert!(all
        .iter()
        .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")));
    let table = kubectl_ok(&sb, &["get", "job", "flaky"]).await;
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().nth(1) == Some("Failed")),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_deleted_while_running_is_counted_failed_and_replaced_and_pods_go_with_their_job() {
    let sb = sandbox().await;
    let c = client(&sb).await;
    let jobs: Api<Job> = Api::default_namespaced(c.clone());
    let pods: Api<Pod> = Api::default_namespaced(c);
    jobs.create(&PostParams::default(), &job("long", "sleep 300", 6, None))
        .await
        .expect("create");
    let first = loop {
        let list = pods_of(&pods, "long").await;
        if let Some(p) = list.iter().find(|p| is_running(Some(p))) {
            break p.metadata.name.clone().expect("name");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    pods.delete(&first, &DeleteParams::default())
        .await
        .expect("delete");
    await_object(&jobs, "long", "one failure and a new active pod", |j| {
        let s = j.and_then(|j| j.status.as_ref());
        s.is_some_and(|s| s.failed == Some(1) && s.active == Some(1))
    })
    .await;
    let replacement = loop {
        let list = pods_of(&pods, "long").await;
        let running: Vec<String> = list
            .iter()
            .filter(|p| is_running(Some(p)) && p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        if let [one] = running.as_slice() {
            break one.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_ne!(replacement, first);
    let job = jobs.get("long").await.expect("get");
    assert!(condition(&job, "Failed").is_none() && condition(&job, "Complete").is_none());

    jobs.delete("long", &DeleteParams::background())
        .await
        .expect("delete job");
    for _ in 0..600 {
        if pods_of(&pods, "long").await.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the job's pods outlived it: {:?}",
        pods_of(&pods, "long").await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_finished_job_goes_with_its_pods_after_its_ttl() {
    let sb = sandbox().await;
    let c = client(&sb).await;
    let jobs: Api<Job> = Api::default_namespaced(c.clone());
    let pods: Api<Pod> = Api::default_namespaced(c);
    // A long TTL stays; a zero TTL goes at once.
    jobs.create(
        &PostParams::default(),
        &job("kept", "exit 0", 6, Some(3600)),
    )
    .await
    .expect("create");
    jobs.create(&PostParams::default(), &job("brief", "exit 0", 6, Some(0)))
        .await
        .expect("create");
    await_object(&jobs, "kept", "Complete", |j| {
        j.and_then(|j| condition(j, "Complete")).is_some()
    })
    .await;
    await_object(&jobs, "brief", "deleted", |j| j.is_none()).await;
    for _ in 0..600 {
        if pods_of(&pods, "brief").await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(pods_of(&pods, "brief").await.is_empty());
    assert!(jobs.get_opt("kept").await.expect("get").is_some());
    assert_eq!(pods_of(&pods, "kept").await.len(), 1);
}
