//! The in-cluster driver's grants are enough, and the driver image runs
//! it (issue 17, first proof): a copy started with `--detach` is finished
//! by `kubectl-volmig resume` in a Job's pod, from the release's driver
//! image, as a ServiceAccount holding only the Role and ClusterRole that
//! `resources::access` derives from what the driver does. The sandbox
//! enforces RBAC for ServiceAccount tokens and audits every request: not
//! one of the driver's may be refused.
//!
//! The plugin does not create these objects itself yet; this test does,
//! with the plugin's own builders.

mod common;

use common::{claim, manifest, records, seed, volmig, volume_dir, wait_until, MOVER_IMAGE};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, PostParams};
use kube_sandbox::kubelet::OciArchive;
use kube_sandbox::{Sandbox, SandboxConfig};
use volmig::record::Phase;
use volmig::resources::access::{driver_cluster_role, driver_rbac_name, driver_role};
use volmig::resources::driver::{self, Owner};

const DRIVER_IMAGE: &str = "ghcr.io/volmig/driver:0.1.0";

#[tokio::test(flavor = "multi_thread")]
async fn a_detached_copy_is_finished_by_the_driver_in_a_pod_with_only_its_grants() {
    let sandbox = Sandbox::start(SandboxConfig {
        oci_archives: vec![
            OciArchive::new("ghcr.io/volmig/mover", common::release_mover_image()),
            OciArchive::new(
                "ghcr.io/volmig/driver",
                kube_sandbox::testkit::release_file("driver", ".oci.tar"),
            ),
        ],
        ..SandboxConfig::default()
    })
    .await
    .expect("sandbox");
    let env = common::Env {
        kubeconfig: sandbox.kubeconfig_path().to_path_buf(),
        sandbox: Some(sandbox),
        namespace: "default".into(),
    };
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    let src = volume_dir(&client, &ns, "data").await;
    seed(&src, 200, 20_000);

    let run = volmig(
        &env,
        &[
            "migrate",
            "data",
            "--to",
            "copy",
            "--mover-image",
            MOVER_IMAGE,
            "--detach",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let op = run.operation().metadata.name;

    // What `--detach` will create: the roles first, the rest owned by them.
    let roles: Api<Role> = Api::namespaced(client.clone(), &ns);
    let role = roles
        .create(&PostParams::default(), &driver_role(&op, &ns))
        .await
        .expect("role");
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let cluster_role = cluster_roles
        .create(&PostParams::default(), &driver_cluster_role(&op))
        .await
        .expect("cluster role");
    let owner = |kind, uid: Option<String>| Owner {
        kind,
        name: driver_rbac_name(&op),
        uid: uid.expect("uid"),
    };
    let role_owner = owner("Role", role.metadata.uid);
    let cluster_owner = owner("ClusterRole", cluster_role.metadata.uid);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    accounts
        .create(
            &PostParams::default(),
            &driver::service_account(&op, &ns, &role_owner),
        )
        .await
        .expect("service account");
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &driver::role_binding(&op, &ns, &ns, &role_owner),
        )
        .await
        .expect("role binding");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(
            &PostParams::default(),
            &driver::cluster_role_binding(&op, &ns, &cluster_owner),
        )
        .await
        .expect("cluster role binding");
    Api::<Job>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &driver::job(&op, &ns, DRIVER_IMAGE))
        .await
        .expect("job");

    let vm = wait_until("the operation finished by the driver pod", || async {
        let vm = records(&client, &ns)
            .await
            .into_iter()
            .find(|r| r.metadata.name == op)?;
        vm.status.phase.is_final().then_some(vm)
    })
    .await;
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    assert_eq!(
        manifest(&src),
        manifest(&volume_dir(&client, &ns, "copy").await)
    );

    // The pod's `resume` saw it through and exited 0.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    wait_until("the driver Job complete", || async {
        let job = jobs.get(&driver_rbac_name(&op)).await.ok()?;
        (job.status?.succeeded? == 1).then_some(())
    })
    .await;

    // Every request the driver made was allowed by the derived grants.
    let account = driver_rbac_name(&op);
    let audit = env.sandbox().audit();
    let mine: Vec<_> = audit
        .iter()
        .filter(|e| format!("{:?}", e.identity).contains(&account))
        .collect();
    assert!(
        mine.len() > 10,
        "the driver pod made {} requests",
        mine.len()
    );
    let refused: Vec<String> = mine
        .iter()
        .filter(|e| e.authorization.as_ref().is_some_and(|a| !a.allowed))
        .map(|e| format!("{} {}", e.method, e.uri))
        .collect();
    assert!(refused.is_empty(), "refused to the driver: {refused:#?}");
}
