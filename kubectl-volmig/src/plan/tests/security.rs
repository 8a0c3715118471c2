//! The movers' Pod Security profile from `--security` and the namespaces,
//! and whom restricted movers run as, from each source of an identity.

use k8s_openapi::api::core::v1::{Namespace, Pod};
use serde_json::json;

use super::object;
use crate::plan::security::{self, Identity, OpenShift, Profile};
use crate::plan::Refusal;
use crate::spec::{RunAs, SecurityMode};

fn namespace(name: &str, enforce: Option<&str>, uid_range: Option<&str>) -> Namespace {
    let mut labels = serde_json::Map::new();
    if let Some(level) = enforce {
        labels.insert(security::ENFORCE_LABEL.into(), json!(level));
    }
    let mut annotations = serde_json::Map::new();
    if let Some(range) = uid_range {
        annotations.insert(security::UID_RANGE_ANNOTATION.into(), json!(range));
        annotations.insert(security::GROUPS_ANNOTATION.into(), json!(range));
    }
    object(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
    }))
}

/// A running pod mounting `claim` in container `app`, with `pod_sc` and
/// `container_sc` as its security contexts.
fn app(name: &str, claim: &str, pod_sc: serde_json::Value, container_sc: serde_json::Value) -> Pod {
    object(json!({
        "metadata": {"name": name, "namespace": "prod"},
        "spec": {
            "securityContext": pod_sc,
            "containers": [
                {"name": "sidecar", "image": "proxy"},
                {"name": "app", "image": "db", "securityContext": container_sc,
                 "volumeMounts": [{"name": "data", "mountPath": "/var/lib/db"}]},
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
        "status": {"phase": "Running"},
    }))
}

#[test]
fn auto_is_restricted_where_a_mover_namespace_enforces_it_or_on_openshift() {
    let open = namespace("dev", None, None);
    let strict = namespace("prod", Some("restricted"), None);
    let baseline = namespace("ops", Some("baseline"), None);
    let pick = |mode, namespaces: &[&Namespace], openshift| {
        security::profile(mode, namespaces, openshift).map(|(p, _)| p)
    };
    assert_eq!(
        pick(SecurityMode::Auto, &[&open, &baseline], None),
        Ok(Profile::Baseline)
    );
    assert_eq!(
        pick(SecurityMode::Auto, &[&open, &strict], None),
        Ok(Profile::Restricted)
    );
    let (_, why) = security::profile(SecurityMode::Auto, &[&strict, &open], None).expect("ok");
    assert_eq!(
        why,
        "namespace prod enforces it (pod-security.kubernetes.io/enforce=restricted)"
    );
    let openshift = Some(OpenShift {
        privileged_scc: None,
    });
    assert_eq!(
        pick(SecurityMode::Auto, &[&open], openshift),
        Ok(Profile::Restricted)
    );
    assert_eq!(
        pick(SecurityMode::Restricted, &[&open], None),
        Ok(Profile::Restricted)
    );
    assert_eq!(
        pick(SecurityMode::Baseline, &[&baseline], None),
        Ok(Profile::Baseline)
    );
}

#[test]
fn baseline_is_refused_where_it_would_be_refused_quoting_why() {
    let strict = namespace("prod", Some("restricted"), None);
    let open = namespace("dev", None, None);
    let refusal =
        security::profile(SecurityMode::Baseline, &[&open, &strict], None).expect_err("refused");
    assert_eq!(
        refusal,
        Refusal::BaselineForbidden {
            namespace: "prod".into(),
            label: "pod-security.kubernetes.io/enforce=restricted".into(),
        }
    );
    assert!(refusal.to_string().contains("enforces the restricted Pod Security profile (pod-security.kubernetes.io/enforce=restricted)"));
    // OpenShift: the privileged SCC, or a refusal that says whether it
    // could be checked.
    let scc = |allowed| {
        security::profile(
            SecurityMode::Baseline,
            &[&open],
            Some(OpenShift {
                privileged_scc: allowed,
            }),
        )
    };
    assert_eq!(scc(Some(true)).map(|(p, _)| p), Ok(Profile::Baseline));
    let denied = scc(Some(false)).expect_err("refused").to_string();
    assert!(
        denied.contains("you may not use the privileged SCC"),
        "{denied}"
    );
    let unknown = scc(None).expect_err("refused").to_string();
    assert!(unknown.contains("could not be checked"), "{unknown}");
}

#[test]
fn the_identity_is_the_app_container_s_over_its_pod_s() {
    let ns = namespace("prod", Some("restricted"), Some("1000680000/10000"));
    let pods = [app(
        "db-0",
        "data",
        json!({"runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 2000, "supplementalGroups": [3000]}),
        json!({"runAsUser": 1001}),
    )];
    let id = security::identity("data", &ns, &pods, None).expect("identity");
    assert_eq!(
        id,
        Identity {
            uid: 1001,
            gid: Some(2000),
            fs_group: Some(2000),
            supplemental_groups: vec![3000],
            from: "pod db-0, container app".into(),
        }
    );
    assert_eq!(
        id.describe(),
        "uid 1001, gid 2000, fsGroup 2000, groups 3000 (pod db-0, container app)"
    );
}

#[test]
fn without_an_app_that_says_its_user_the_namespace_range_then_run_as() {
    let quiet = [app("db-0", "data", json!({}), json!({}))];
    let ranged = namespace("prod", None, Some("1000680000/10000"));
    let id = security::identity("data", &ranged, &quiet, None).expect("identity");
    assert_eq!(
        (id.uid, id.gid, id.fs_group),
        (1000680000, None, Some(1000680000))
    );
    assert_eq!(id.from, "namespace prod's openshift.io/sa.scc.uid-range");

    let plain = namespace("prod", None, None);
    let run_as = Some(RunAs {
        uid: 1000,
        gid: Some(2000),
    });
    let id = security::identity("data", &plain, &[], run_as).expect("identity");
    assert_eq!(
        (id.uid, id.gid, id.from.as_str()),
        (1000, Some(2000), "--run-as")
    );

    let refusal = security::identity("data", &plain, &quiet, None).expect_err("none");
    let text = refusal.to_string();
    assert!(
        text.contains("its pods (db-0) leave the user to their image"),
        "{text}"
    );
    assert!(text.contains("--run-as UID[:GID]"), "{text}");
    // Another claim's pod says nothing about this one.
    let other = [app("web-0", "other", json!({"runAsUser": 1000}), json!({}))];
    let text = security::identity("data", &plain, &other, None)
        .expect_err("none")
        .to_string();
    assert!(text.contains("no running pod mounts the claim"), "{text}");
}

#[test]
fn an_app_running_as_root_cannot_have_restricted_movers() {
    let ns = namespace("prod", None, None);
    let pods = [app("db-0", "data", json!({"runAsUser": 0}), json!({}))];
    let refusal = security::identity("data", &ns, &pods, None).expect_err("root");
    assert!(matches!(refusal, Refusal::RootApp { .. }), "{refusal}");
    assert!("0".parse::<RunAs>().is_err() && "0:5".parse::<RunAs>().is_err());
    assert_eq!(
        "1000:2000".parse::<RunAs>(),
        Ok(RunAs {
            uid: 1000,
            gid: Some(2000)
        })
    );
    assert!("1000:x".parse::<RunAs>().is_err());
}
