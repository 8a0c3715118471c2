//! The record store against a real API server (the local sandbox): records
//! are created, read, listed and deleted, and concurrent writers never lose
//! each other's changes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube_sandbox::{Sandbox, SandboxConfig};
use volmig::names;
use volmig::record::store::{RecordStore, StoreError};
use volmig::record::{Attempt, AttemptPhase, Phase, VolumeMigration};

const NAMESPACE: &str = "default";

async fn client(sb: &Sandbox) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(sb.kubeconfig_path()).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// The fixture operation, renamed, in [`NAMESPACE`], without attempts.
fn record(op: &str) -> VolumeMigration {
    let mut vm: VolumeMigration =
        serde_saphyr::from_str(include_str!("fixtures/record/succeeded.yaml")).expect("fixture");
    vm.metadata.name = op.to_string();
    vm.metadata.namespace = NAMESPACE.to_string();
    vm.metadata.resource_version = None;
    vm.metadata.creation_timestamp = None;
    vm.status.phase = Phase::Running;
    vm.status.attempts.clear();
    vm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_all_land() {
    let sb = Sandbox::start(SandboxConfig::default())
        .await
        .expect("sandbox");
    let store = RecordStore::new(client(&sb).await, NAMESPACE);
    store.create(&record("race")).await.expect("create");

    let writer = |who: &'static str| {
        let store = store.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                store
                    .update("race", |vm| {
                        let number = vm.status.attempts.len() as u32 + 1;
                        vm.status.attempts.push(Attempt {
                            number,
                            phase: AttemptPhase::Failed,
                            reason: Some(who.to_string()),
                            ..Attempt::default()
                        });
                        Ok(())
                    })
                    .await
                    .expect("update");
            }
        })
    };
    let (a, b) = (writer("a"), writer("b"));
    a.await.expect("writer a");
    b.await.expect("writer b");

    let vm = store.get("race").await.expect("get");
    let numbers: Vec<u32> = vm.status.attempts.iter().map(|a| a.number).collect();
    assert_eq!(numbers, (1..=40).collect::<Vec<_>>(), "no write was lost");
    for who in ["a", "b"] {
        let n = vm
            .status
            .attempts
            .iter()
            .filter(|a| a.reason.as_deref() == Some(who))
            .count();
        assert_eq!(n, 20, "writer {who}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn records_are_created_read_listed_and_deleted() {
    let sb = Sandbox::start(SandboxConfig::default())
        .await
        .expect("sandbox");
    let client = client(&sb).await;
    let store = RecordStore::new(client.clone(), NAMESPACE);

    let first = store.create(&record("first")).await.expect("create");
    assert!(first.metadata.resource_version.is_some());
    assert!(first.metadata.creation_timestamp.is_some());
    let err = store.create(&record("first")).await.unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");
    store.create(&record("second")).await.expect("create");

    // A ConfigMap with a record's labels but no record in it is skipped.
    let labels: BTreeMap<String, String> = names::labels("junk", names::Component::Record);
    let mut junk = ConfigMap::default();
    junk.metadata.name = Some(names::record_name("junk"));
    junk.metadata.labels = Some(labels);
    Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &junk)
        .await
        .expect("junk");

    let listed: Vec<String> = store
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|vm| vm.metadata.name)
        .collect();
    assert_eq!(listed, ["first", "second"]);
    let everywhere = RecordStore::list_all(client.clone())
        .await
        .expect("list -A");
    assert_eq!(everywhere.len(), 2);

    // A change that declines writes nothing.
    let err = store
        .update("first", |_| {
            Err(StoreError::Changed("aborted elsewhere".into()))
        })
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "aborted elsewhere");
    let unchanged = store.get("first").await.expect("get");
    assert_eq!(
        unchanged.metadata.resource_version,
        first.metadata.resource_version
    );

    let aborted = store
        .update("first", |vm| {
            vm.status.phase = Phase::Aborted;
            Ok(())
        })
        .await
        .expect("update");
    assert_eq!(store.get("first").await.expect("get"), aborted);
    let cm = Api::<ConfigMap>::namespaced(client, NAMESPACE)
        .get(&names::record_name("first"))
        .await
        .expect("configmap");
    let phase = cm
        .metadata
        .labels
        .unwrap_or_default()
        .remove(names::PHASE_KEY);
    assert_eq!(phase.as_deref(), Some("Aborted"), "the phase label follows");

    store.delete("first").await.expect("delete");
    let err = store.get("first").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "no operation \"first\" in namespace \"default\"; \
         list them with: kubectl volmig status -n default"
    );
    assert!(!err.is_retryable());
    assert!(matches!(
        store.delete("first").await,
        Err(StoreError::NotFound { .. })
    ));
}
