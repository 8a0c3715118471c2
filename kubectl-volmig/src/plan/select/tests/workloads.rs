//! `--workload`: a StatefulSet's replica claims, a Deployment through its
//! ReplicaSet, a ReplicaSet or a pod; how kubectl's `KIND/NAME` is read.

use super::*;

#[test]
fn a_statefulset_takes_every_replica_claim_even_without_a_pod() {
    let got = chosen(
        &workload(WorkloadKind::StatefulSet, "db"),
        &found(&many(), &["prod", "staging"]),
    );
    assert_eq!(
        got,
        [
            (
                "prod/data-db-0".into(),
                "mounted by pod db-0 of StatefulSet db".into()
            ),
            (
                "prod/data-db-1".into(),
                "mounted by pod db-1 of StatefulSet db".into()
            ),
            (
                "prod/data-db-2".into(),
                "mounted by pod db-2 of StatefulSet db".into()
            ),
            (
                "prod/data-db-3".into(),
                "replica claim of StatefulSet db (ordinal 3 >= replicas 3: no pod)".into()
            ),
        ]
    );
}

#[test]
fn a_replica_whose_pod_is_gone_is_still_its_statefulsets() {
    let mut cluster = many();
    cluster.remove_pod("db-1");
    let got = chosen(
        &workload(WorkloadKind::StatefulSet, "db"),
        &found(&cluster, &["prod"]),
    );
    assert_eq!(got[1].0, "prod/data-db-1");
    assert_eq!(
        got[1].1,
        "replica claim of StatefulSet db (ordinal 1: no pod now)"
    );
    assert_eq!(got.len(), 4);
}

#[test]
fn a_deployment_is_found_through_its_replica_set() {
    let got = chosen(
        &workload(WorkloadKind::Deployment, "web"),
        &found(&many(), &["prod"]),
    );
    // Both pods mount both claims: the first pod by name says why.
    let why = "mounted by pod web-5d8f-4tq7z of Deployment web";
    assert_eq!(
        got,
        [
            ("prod/web-cache".into(), why.into()),
            ("prod/web-data".into(), why.into()),
        ]
    );
}

#[test]
fn a_deployment_scaled_to_zero_keeps_its_templates_claims() {
    let mut cluster = many();
    cluster.remove_pod("web-5d8f-k2x9p");
    if let Some(status) = cluster.pod("web-5d8f-4tq7z").status.as_mut() {
        status.phase = Some("Failed".into());
    }
    let got = chosen(
        &workload(WorkloadKind::Deployment, "web"),
        &found(&cluster, &["prod"]),
    );
    let why = "named in the pod template of Deployment web";
    assert_eq!(
        got,
        [
            ("prod/web-cache".into(), why.into()),
            ("prod/web-data".into(), why.into()),
        ]
    );
}

#[test]
fn a_replica_set_or_a_pod_is_a_workload_too() {
    let prod = found(&many(), &["prod"]);
    let got = chosen(&workload(WorkloadKind::ReplicaSet, "web-5d8f"), &prod);
    assert_eq!(names(&got), ["prod/web-cache", "prod/web-data"]);
    assert_eq!(
        got[0].1,
        "mounted by pod web-5d8f-4tq7z of ReplicaSet web-5d8f"
    );

    let got = chosen(&workload(WorkloadKind::Pod, "tool"), &prod);
    assert_eq!(got, [("prod/scratch".into(), "mounted by pod tool".into())]);
    let got = chosen(&workload(WorkloadKind::Pod, "db-2"), &prod);
    assert_eq!(
        got,
        [("prod/data-db-2".into(), "mounted by pod db-2".into())]
    );
}

#[test]
fn a_workload_that_is_not_there_or_uses_no_claim_says_what_to_do() {
    let prod = found(&many(), &["prod"]);
    let e = refused(&workload(WorkloadKind::StatefulSet, "web"), &prod);
    assert!(matches!(e, SelectError::UnknownWorkload { .. }), "{e:?}");
    assert_says(
        &e.to_string(),
        &[
            "no statefulset/web in namespace prod",
            "kubectl get statefulsets",
            "-n",
        ],
    );

    let e = refused(&workload(WorkloadKind::Deployment, "api"), &prod);
    assert!(
        matches!(e, SelectError::WorkloadWithoutClaims { .. }),
        "{e:?}"
    );
    assert_says(
        &e.to_string(),
        &[
            "deployment/api in namespace prod uses no claim",
            "name the claims",
        ],
    );
}

#[test]
fn replica_claims_are_the_templates_in_ordinal_order() {
    let cluster = with_replica_claim(with_replica_claim(many(), "data-db-10"), "data-db-x");
    let sts = &cluster.stateful_sets[0];
    assert_eq!(
        replica_claims(sts, &cluster.claims),
        [
            "data-db-0",
            "data-db-1",
            "data-db-2",
            "data-db-3",
            "data-db-10"
        ]
    );
}

#[test]
fn workloads_are_written_as_kubectl_takes_them() {
    for (arg, kind, name) in [
        ("statefulset/db", WorkloadKind::StatefulSet, "db"),
        ("sts/db", WorkloadKind::StatefulSet, "db"),
        ("StatefulSets.apps/db", WorkloadKind::StatefulSet, "db"),
        ("deploy/web", WorkloadKind::Deployment, "web"),
        ("deployment.apps/web", WorkloadKind::Deployment, "web"),
        ("deployments.v1.apps/web", WorkloadKind::Deployment, "web"),
        ("rs/web-5d8f", WorkloadKind::ReplicaSet, "web-5d8f"),
        ("Pod/tool", WorkloadKind::Pod, "tool"),
        ("po/tool", WorkloadKind::Pod, "tool"),
    ] {
        assert_eq!(parse_workload(arg), Ok((kind, name.to_string())), "{arg}");
    }
    for (arg, why) in [
        ("db", "no /NAME"),
        ("daemonset/agent", "\"daemonset\" is not a kind"),
        (
            "statefulset.batch/db",
            "\"statefulset.batch\" is not a kind",
        ),
        ("pod.apps/tool", "\"pod.apps\" is not a kind"),
        ("statefulset/", "\"\" is not a name"),
        ("pod/a/b", "\"a/b\" is not a name"),
    ] {
        let e = parse_workload(arg).expect_err(arg);
        assert!(!e.is_retryable());
        assert_says(
            &e.to_string(),
            &[&format!("invalid --workload {arg:?}"), why, "sts/db"],
        );
    }
    assert_eq!("STS".parse::<WorkloadKind>(), Ok(WorkloadKind::StatefulSet));
    assert!("cronjob".parse::<WorkloadKind>().is_err());
}
