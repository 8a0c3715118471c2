//! What the cutover's quiesce meets when it scales an app's owners through
//! their scale subresource (`shared/cutover-notes.md`, "Quiescing"): a
//! Deployment undoes a scale of its ReplicaSet, and an HorizontalPodAutoscaler
//! leaves a target at 0 alone but holds any other size within its bounds.

mod common;

use common::k8s::scale;
use common::{await_event, await_object, client, object, sandbox};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

fn web(replicas: i32) -> Deployment {
    object(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                {"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}}}),
    )
}

fn replicas_of(d: Option<&Deployment>) -> Option<i32> {
    d?.spec.as_ref()?.replicas
}

/// The autoscaler's condition of this type: (status, reason).
fn condition(h: Option<&HorizontalPodAutoscaler>, kind: &str) -> Option<(String, String)> {
    let conditions = h?.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == kind)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn is(status: &str, reason: &str) -> Option<(String, String)> {
    Some((status.to_string(), reason.to_string()))
}

/// Scaling a ReplicaSet a Deployment owns does not last: the Deployment
/// sets its replicas back. The top owner is the one to scale.
#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_undoes_a_scale_of_its_replica_set() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let sets: Api<ReplicaSet> = Api::default_namespaced(client);
    deployments
        .create(&PostParams::default(), &web(2))
        .await
        .expect("deployment");
    let mut rs = None;
    for _ in 0..600 {
        let list = sets.list(&ListParams::default()).await.expect("list");
        if let Some(name) = list.items.first().and_then(|r| r.metadata.name.clone()) {
            rs = Some(name);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let rs = rs.expect("the Deployment's ReplicaSet");
    let scaled = scale(&sets, &rs, 0).await;
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(0));
    await_object(&sets, &rs, "back at 2", |r| {
        r.and_then(|r| r.spec.as_ref()?.replicas) == Some(2)
    })
    .await;
}

/// An HPA does not scale a target at 0 (ScalingDisabled), so quiescing is
/// safe with one; restored to the recorded replicas within its bounds it
/// leaves them, restored below `minReplicas` it scales up to it, above
/// `maxReplicas` down to it, with a SuccessfulRescale event saying why.
#[tokio::test(flavor = "multi_thread")]
async fn an_autoscaler_leaves_a_target_at_zero_alone() {
    let sb = sandbox().await;
    let client = client(&sb).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let autoscalers: Api<HorizontalPodAutoscaler> = Api::default_namespaced(client.clone());
    deployments
        .create(&PostParams::default(), &web(3))
        .await
        .expect("deployment");
    let hpa: HorizontalPodAutoscaler = object(json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2, "maxReplicas": 4}}));
    let created = autoscalers
        .create(&PostParams::default(), &hpa)
        .await
        .expect("autoscaler");
    // Defaulted as the API server does: CPU at 80%.
    let metrics = serde_json::to_value(created.spec.expect("spec").metrics).expect("metrics");
    let cpu = json!([{"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": 80}}}]);
    assert_eq!(metrics, cpu);
    // Within bounds, without metrics: left alone.
    await_object(&autoscalers, "web", "no metrics", |h| {
        condition(h, "ScalingActive") == is("False", "FailedGetResourceMetric")
            && h.and_then(|h| h.status.as_ref()?.current_replicas) == Some(3)
    })
    .await;
    assert_eq!(
        replicas_of(deployments.get_opt("web").await.expect("get").as_ref()),
        Some(3)
    );

    // Quiesced: the autoscaler sees 0 and says scaling is disabled.
    scale(&deployments, "web", 0).await;
    await_object(&autoscalers, "web", "ScalingDisabled", |h| {
        condition(h, "ScalingActive") == is("False", "ScalingDisabled")
    })
    .await;
    let disabled = autoscalers
        .get("web")
        .await
        .expect("hpa")
        .status
        .expect("status");
    assert_eq!(
        (disabled.current_replicas, disabled.desired_replicas),
        (None, 0)
    );
    let message = disabled.conditions.unwrap_or_default();
    let message = message.iter().find(|c| c.type_ == "ScalingActive");
    assert_eq!(
        message.and_then(|c| c.message.as_deref()),
        Some("scaling is disabled since the replica count of the target is zero")
    );
    assert_eq!(
        replicas_of(deployments.get_opt("web").await.expect("get").as_ref()),
        Some(0)
    );

    // Restored below the minimum: raised to it.
    scale(&deployments, "web", 1).await;
    await_object(&deployments, "web", "raised to 2", |d| {
        replicas_of(d) == Some(2)
    })
    .await;
    let message = await_event(&client, "default", "web", "SuccessfulRescale").await;
    assert_eq!(
        message,
        "New size: 2; reason: Current number of replicas below Spec.MinReplicas"
    );

    // Above the maximum: lowered to it.
    scale(&deployments, "web", 6).await;
    await_object(&deployments, "web", "lowered to 4", |d| {
        replicas_of(d) == Some(4)
    })
    .await;
    let table = common::kubectl_ok(&sb, &["get", "hpa", "web"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "REFERENCE",
            "TARGETS",
            "MINPODS",
            "MAXPODS",
            "REPLICAS",
            "AGE"
        ]
    );
    let row: Vec<&str> = lines.next().expect("row").split_whitespace().collect();
    assert_eq!(row[..4], ["web", "Deployment/web", "cpu:", "<unknown>/80%"]);
}
