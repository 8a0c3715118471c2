//! The quiesce planner on fixtures: every kind of consumer issue 16 names.

use serde_json::{json, Value};

use super::*;

const CLAIM: &str = "data";

fn object<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid fixture")
}

fn owner(kind: &str, name: &str) -> Value {
    let api = match kind {
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" => "apps/v1",
        "Job" => "batch/v1",
        "ReplicationController" => "v1",
        _ => "example.com/v1",
    };
    json!([{"apiVersion": api, "kind": kind, "name": name, "uid": format!("uid-{name}"), "controller": true}])
}

fn pod(name: &str, owned_by: Option<(&str, &str)>, claim: &str, phase: &str) -> Pod {
    let mut meta = json!({"name": name, "namespace": "default"});
    if let Some((kind, n)) = owned_by {
        meta["ownerReferences"] = owner(kind, n);
    }
    object(json!({
        "metadata": meta,
        "spec": {
            "containers": [{"name": "app", "image": "app"}],
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]
        },
        "status": {"phase": phase}
    }))
}

fn replica_set(name: &str, owned_by: Option<(&str, &str)>, replicas: i32) -> ReplicaSet {
    let mut meta = json!({"name": name});
    if let Some((kind, n)) = owned_by {
        meta["ownerReferences"] = owner(kind, n);
    }
    object(json!({"metadata": meta, "spec": {"replicas": replicas, "selector": {}}}))
}

fn deployment(name: &str, replicas: Option<i32>, labels: Value) -> Deployment {
    let mut spec = json!({"selector": {}, "template": {}});
    if let Some(r) = replicas {
        spec["replicas"] = json!(r);
    }
    object(json!({"metadata": {"name": name, "labels": labels}, "spec": spec}))
}

fn stateful_set(name: &str, replicas: i32) -> StatefulSet {
    object(
        json!({"metadata": {"name": name}, "spec": {"replicas": replicas, "selector": {}, "template": {}, "serviceName": name}}),
    )
}

/// A Deployment `web` (3 replicas) whose ReplicaSet's two pods mount the
/// claim, and a pod of another claim.
fn deployment_app() -> Workloads {
    Workloads {
        pods: vec![
            pod("web-1", Some(("ReplicaSet", "web-abc")), CLAIM, "Running"),
            pod("web-2", Some(("ReplicaSet", "web-abc")), CLAIM, "Pending"),
            pod(
                "other",
                Some(("ReplicaSet", "web-abc")),
                "elsewhere",
                "Running",
            ),
        ],
        replica_sets: vec![replica_set("web-abc", Some(("Deployment", "web")), 3)],
        deployments: vec![deployment("web", Some(3), json!({}))],
        ..Workloads::default()
    }
}

fn refused(w: &Workloads) -> Vec<Unstoppable> {
    plan(CLAIM, w).expect_err("refused")
}

#[test]
fn a_deployments_pods_are_stopped_through_the_deployment_once() {
    let q = plan(CLAIM, &deployment_app()).expect("a plan");
    assert_eq!(
        q.targets,
        [ScaleTarget {
            kind: ScalableKind::Deployment,
            name: "web".into(),
            replicas: 3,
            pods: vec!["web-1".into(), "web-2".into()],
            autoscaler: None,
        }]
    );
}

#[test]
fn a_statefulset_a_bare_replicaset_and_a_replication_controller_are_scaled_themselves() {
    let w = Workloads {
        pods: vec![
            pod("db-0", Some(("StatefulSet", "db")), CLAIM, "Running"),
            pod("rs-x", Some(("ReplicaSet", "lonely")), CLAIM, "Running"),
            pod(
                "rc-x",
                Some(("ReplicationController", "old")),
                CLAIM,
                "Running",
            ),
        ],
        replica_sets: vec![replica_set("lonely", None, 2)],
        stateful_sets: vec![stateful_set("db", 1)],
        replication_controllers: vec![object(json!({"metadata": {"name": "old"}, "spec": {}}))],
        ..Workloads::default()
    };
    let q = plan(CLAIM, &w).expect("a plan");
    let got: Vec<(ScalableKind, &str, i32)> = q
        .targets
        .iter()
        .map(|t| (t.kind, t.name.as_str(), t.replicas))
        .collect();
    assert_eq!(
        got,
        [
            (ScalableKind::StatefulSet, "db", 1),
            (ScalableKind::ReplicaSet, "lonely", 2),
            // spec.replicas unset: the API server's default, 1.
            (ScalableKind::ReplicationController, "old", 1),
        ]
    );
}

#[test]
fn finished_pods_and_pods_of_other_claims_are_not_consumers() {
    let w = Workloads {
        pods: vec![
            pod("done", None, CLAIM, "Succeeded"),
            pod("crashed", None, CLAIM, "Failed"),
            pod("bare", None, "elsewhere", "Running"),
        ],
        ..Workloads::default()
    };
    assert_eq!(plan(CLAIM, &w), Ok(Quiesce::default()));
}

#[test]
fn an_hpa_is_named_but_does_not_refuse() {
    let mut w = deployment_app();
    w.autoscalers = vec![object(json!({
        "metadata": {"name": "web-hpa"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 5}
    }))];
    let q = plan(CLAIM, &w).expect("a plan");
    assert_eq!(q.targets[0].autoscaler.as_deref(), Some("web-hpa"));
}

#[test]
fn consumers_scaling_cannot_stop_are_each_named_with_what_to_do() {
    let cases: Vec<(&str, Workloads, &str, &str)> = vec![
        (
            "bare pod",
            Workloads {
                pods: vec![pod("debug", None, CLAIM, "Running")],
                ..Workloads::default()
            },
            "Pod debug",
            "no controller",
        ),
        (
            "DaemonSet",
            Workloads {
                pods: vec![pod(
                    "agent-x",
                    Some(("DaemonSet", "agent")),
                    CLAIM,
                    "Running",
                )],
                ..Workloads::default()
            },
            "DaemonSet agent",
            "cannot be scaled",
        ),
        (
            "Job",
            Workloads {
                pods: vec![pod("backup-x", Some(("Job", "backup")), CLAIM, "Running")],
                ..Workloads::default()
            },
            "Job backup",
            "runs to completion",
        ),
        (
            "custom resource owning a ReplicaSet",
            Workloads {
                pods: vec![pod("cr-x", Some(("ReplicaSet", "cr-rs")), CLAIM, "Running")],
                replica_sets: vec![replica_set("cr-rs", Some(("Rollout", "canary")), 1)],
                ..Workloads::default()
            },
            "ReplicaSet cr-rs",
            "Rollout canary",
        ),
        (
            "custom resource owning a pod",
            Workloads {
                pods: vec![pod(
                    "vm-x",
                    Some(("VirtualMachineInstance", "vm")),
                    CLAIM,
                    "Running",
                )],
                ..Workloads::default()
            },
            "VirtualMachineInstance vm",
            "cannot stop it",
        ),
        (
            "owner that cannot be read",
            Workloads {
                pods: vec![pod("web-1", Some(("ReplicaSet", "gone")), CLAIM, "Running")],
                ..Workloads::default()
            },
            "ReplicaSet gone",
            "could not be read",
        ),
    ];
    for (case, w, consumer, why) in cases {
        let refused = refused(&w);
        assert_eq!(refused.len(), 1, "{case}: {refused:?}");
        assert_eq!(refused[0].consumer, consumer, "{case}");
        assert!(refused[0].why.contains(why), "{case}: {}", refused[0]);
        assert!(!refused[0].what_to_do.is_empty(), "{case}");
    }
}

#[test]
fn keda_and_gitops_would_scale_back_up_and_refuse() {
    let mut w = deployment_app();
    w.scaled_objects = vec![json!({
        "metadata": {"name": "web-keda"},
        "spec": {"scaleTargetRef": {"name": "web"}}
    })];
    let r = refused(&w);
    assert!(r[0].why.contains("KEDA ScaledObject web-keda"), "{}", r[0]);
    assert!(r[0].what_to_do.contains("paused-replicas"), "{}", r[0]);

    let mut w = deployment_app();
    w.deployments = vec![deployment(
        "web",
        Some(3),
        json!({"argocd.argoproj.io/instance": "shop"}),
    )];
    let r = refused(&w);
    assert!(r[0].why.contains("Argo CD"), "{}", r[0]);
}

#[test]
fn every_unstoppable_consumer_is_listed_once_and_nothing_is_planned() {
    let w = Workloads {
        pods: vec![
            pod("agent-1", Some(("DaemonSet", "agent")), CLAIM, "Running"),
            pod("agent-2", Some(("DaemonSet", "agent")), CLAIM, "Running"),
            pod("debug", None, CLAIM, "Running"),
            pod("web-1", Some(("ReplicaSet", "web-abc")), CLAIM, "Running"),
        ],
        ..deployment_app()
    };
    let consumers: Vec<String> = refused(&w).into_iter().map(|u| u.consumer).collect();
    assert_eq!(consumers, ["DaemonSet agent", "Pod debug"]);
}

#[test]
fn a_statefulset_that_deletes_its_claims_when_scaled_is_refused() {
    let mut deleting = stateful_set("db", 2);
    deleting
        .spec
        .as_mut()
        .expect("spec")
        .persistent_volume_claim_retention_policy = Some(object(
        json!({"whenScaled": "Delete", "whenDeleted": "Retain"}),
    ));
    let w = Workloads {
        pods: vec![pod("db-0", Some(("StatefulSet", "db")), CLAIM, "Running")],
        stateful_sets: vec![deleting],
        ..Workloads::default()
    };
    let refused = plan(CLAIM, &w).expect_err("refused");
    assert_eq!(refused[0].consumer, "StatefulSet db");
    assert!(
        refused[0].why.contains("whenScaled is Delete"),
        "{}",
        refused[0].why
    );
    assert!(refused[0].what_to_do.contains("\"whenScaled\":\"Retain\""));
}
