//! A namespace that enforces the restricted Pod Security profile: the
//! movers run as the app's own user and groups with no capability, copy
//! the app's private files with their modes and owners, cut the app over,
//! fail for good (by name) on a file that identity may not read, and a
//! request for root movers is refused before anything is created.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::app::{
    assert_gapless, await_running, await_sequence_past, bound_volume, claim_of, sequence,
};
use common::{env, object, records, volmig, volume_dir, wait_until, Env};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::json;
use volmig::plan::security::Profile;
use volmig::record::{AttemptPhase, Phase};

const UID: u32 = 1000;
const GID: u32 = 2000;

/// A fresh sandbox whose commands run in namespace `secure`, which
/// enforces `restricted`.
async fn secure_env() -> (Env, Client) {
    let mut env = env().await;
    let client = env.client().await;
    let ns: Namespace = object(json!({
        "metadata": {"name": "secure", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    env.namespace = "secure".into();
    (env, client)
}

/// Deployment `app`, compliant with `restricted`, as 1000:2000 with
/// fsGroup 2000, appending its synced sequence (umask 077) to `claim`.
async fn restricted_app(client: &Client, claim: &str) {
    let script = format!("umask 077; {}", common::app::SEQUENCE_SCRIPT);
    let deployment: Deployment = object(json!({
        "metadata": {"name": "app"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "app"}},
            "template": {
                "metadata": {"labels": {"app": "app"}},
                "spec": {
                    "terminationGracePeriodSeconds": 10,
                    "securityContext": {
                        "runAsNonRoot": true, "runAsUser": UID, "runAsGroup": GID, "fsGroup": GID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [{
                        "name": "app", "image": "busybox", "command": ["sh", "-c", script],
                        "securityContext": {
                            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
                },
            },
        },
    }));
    Api::<Deployment>::namespaced(client.clone(), "secure")
        .create(&PostParams::default(), &deployment)
        .await
        .expect("deployment");
    await_running(client, "secure", "app").await;
}

/// Claim `name` in `secure`, bound; its volume directory.
async fn claim(client: &Client, name: &str) -> std::path::PathBuf {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "secure");
    let pvc: PersistentVolumeClaim = object(json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }));
    common::create_bound(&api, pvc).await;
    volume_dir(client, "secure", name).await
}

/// Private files of the app's, as it would have written them.
fn app_files(root: &Path) {
    for (i, dir) in ["", "db", "db/wal"].iter().enumerate() {
        let dir = root.join(dir);
        std::fs::create_dir_all(&dir).expect("dir");
        std::os::unix::fs::chown(&dir, Some(UID), Some(GID)).expect("chown");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o2770)).expect("mode");
        for j in 0..5 {
            let file = dir.join(format!("f{i}{j}"));
            std::fs::write(&file, vec![(i * 5 + j) as u8; 10_000 + j]).expect("write");
            std::os::unix::fs::chown(&file, Some(UID), Some(GID)).expect("chown");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("mode");
        }
    }
}

/// Path → (mode, uid, gid) of every entry but the sequence file and
/// volmig's own state.
fn modes_and_owners(root: &Path) -> BTreeMap<String, (u32, u32, u32)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .expect("under")
                .display()
                .to_string();
            if rel == "seq" || rel.starts_with(".volmig") {
                continue;
            }
            let md = std::fs::symlink_metadata(&path).expect("stat");
            if md.is_dir() {
                stack.push(path.clone());
            }
            out.insert(rel, (md.mode() & 0o7777, md.uid(), md.gid()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn restricted_movers_copy_the_app_s_private_files_and_cut_it_over() {
    let (env, client) = secure_env().await;
    let src = claim(&client, "data").await;
    app_files(&src);
    restricted_app(&client, "data").await;
    await_sequence_past(&src, 20).await;
    let before = modes_and_owners(&src);
    assert!(before.values().any(|(mode, _, _)| *mode == 0o600));

    // A copy: restricted by itself, as the app.
    let run = volmig(
        &env,
        &[
            "migrate",
            "data",
            "--to",
            "copy",
            "--start-timeout",
            "30",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    let security = vm.status.security.clone().expect("security recorded");
    assert_eq!(security.profile, Profile::Restricted);
    assert_eq!(
        security.reason,
        "namespace secure enforces it (pod-security.kubernetes.io/enforce=restricted)"
    );
    let identity = security.identity.expect("identity").describe();
    assert!(
        identity.starts_with("uid 1000, gid 2000, fsGroup 2000 (pod app-"),
        "{identity}"
    );
    let copy = volume_dir(&client, "secure", "copy").await;
    assert_eq!(modes_and_owners(&copy), before, "modes and owners");
    for (rel, _) in before.iter().filter(|(_, (m, _, _))| m & 0o170000 == 0) {
        let (a, b) = (std::fs::read(src.join(rel)), std::fs::read(copy.join(rel)));
        if let (Ok(a), Ok(b)) = (a, b) {
            assert_eq!(a, b, "{rel}");
        }
    }

    // A cutover, in the same namespace: the app goes on on the new volume.
    let run = volmig(
        &env,
        &[
            "migrate",
            "data",
            "--to-storage-class",
            "local",
            "--cutover",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(vm.status.phase, Phase::Succeeded, "{:?}", vm.status.message);
    let moved = volume_dir(&client, "secure", "data").await;
    assert_ne!(moved, src);
    await_running(&client, "secure", "app").await;
    let old = sequence(&src);
    assert_gapless(&old, "old volume");
    let new = await_sequence_past(&moved, old.len() + 5).await;
    assert_gapless(&new, "new volume");
    assert_eq!(&new[..old.len()], &old[..]);
    // Owners as the app's; the kubelet gave the new volume's files the
    // app's fsGroup bits when the app started on it (a `local` volume), so
    // modes are compared on the copy above.
    let moved_owners = modes_and_owners(&moved);
    for (rel, (_, uid, gid)) in &before {
        let got = moved_owners.get(rel).map(|(_, u, g)| (*u, *g));
        assert_eq!(got, Some((*uid, *gid)), "{rel}");
    }
    assert_ne!(bound_volume(&claim_of(&client, "secure", "data").await), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_the_app_s_identity_may_not_read_fails_the_copy_by_name_and_root_movers_are_refused()
{
    let (env, client) = secure_env().await;
    let src = claim(&client, "data").await;
    app_files(&src);
    // Someone else's private file, on the app's volume.
    let secret = src.join("db/other.key");
    std::fs::write(&secret, b"k").expect("write");
    std::os::unix::fs::chown(&secret, Some(4242), Some(4242)).expect("chown");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("mode");
    restricted_app(&client, "data").await;

    // Root movers: refused before anything is created, quoting the label.
    let run = volmig(
        &env,
        &["migrate", "data", "--to", "copy", "--security", "baseline"],
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("pod-security.kubernetes.io/enforce=restricted"),
        "{}",
        run.stderr
    );
    assert!(records(&client, "secure").await.is_empty());

    let run = volmig(
        &env,
        &[
            "migrate",
            "data",
            "--to",
            "copy",
            "--start-timeout",
            "30",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    let vm = run.operation();
    assert_eq!(vm.status.phase, Phase::Failed);
    // Once: no retry changes who the sender is.
    assert_eq!(vm.status.attempts.len(), 1, "{:#?}", vm.status.attempts);
    let attempt = &vm.status.attempts[0];
    assert_eq!(attempt.phase, AttemptPhase::Failed);
    assert_eq!(attempt.retryable, Some(false));
    let reason = attempt.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("could not be read as uid 1000 gid 2000 (permission denied): db/other.key")
            && reason.contains("--security baseline"),
        "{reason}"
    );
    wait_until("the movers gone", || async {
        common::leftovers(&client, "secure")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
}
