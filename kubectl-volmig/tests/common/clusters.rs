//! Two sandboxes side by side as two clusters, for copies into another
//! cluster (`--to-context`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use kube_sandbox::SandboxConfig;

/// Two clusters, `src` and `dst`, in one kubeconfig with a context each
/// (`src` current).
pub struct Pair {
    pub src: super::Env,
    pub dst: super::Env,
    pub kubeconfig: PathBuf,
}

impl Pair {
    pub async fn start(load_balancers: bool) -> Pair {
        let src = super::env_configured(SandboxConfig {
            name: "src".into(),
            ..SandboxConfig::default()
        })
        .await;
        let dst = super::env_configured(SandboxConfig {
            name: "dst".into(),
            load_balancers,
            ..SandboxConfig::default()
        })
        .await;
        let kubeconfig = src.sandbox().data_dir().join("two-clusters");
        kube_sandbox::testkit::merged_kubeconfig(
            &[(src.sandbox(), "src"), (dst.sandbox(), "dst")],
            &kubeconfig,
        )
        .expect("merged kubeconfig");
        Pair {
            src,
            dst,
            kubeconfig,
        }
    }

    /// The plugin with the merged kubeconfig, in the source's context
    /// unless `args` name another.
    pub async fn volmig(&self, args: &[&str]) -> super::Run {
        let mut with_context = vec!["--context", "src"];
        if args.contains(&"--context") {
            with_context.clear();
        }
        with_context.extend_from_slice(args);
        super::volmig_as(&self.src, &self.kubeconfig, &[], &with_context).await
    }

    /// [`Pair::volmig`] left running.
    pub fn spawn(&self, args: &[&str]) -> tokio::process::Child {
        let env = super::Env {
            sandbox: None,
            kubeconfig: self.kubeconfig.clone(),
            namespace: self.src.namespace.clone(),
        };
        let mut with_context = vec!["--context", "src"];
        with_context.extend_from_slice(args);
        super::spawn_volmig(&env, &with_context)
    }

    /// A source claim `data` seeded with 40 files of 64 KiB; its manifest.
    pub async fn seeded_source(&self) -> BTreeMap<String, String> {
        self.seeded_source_of(40, 64 * 1024).await
    }

    /// A source claim `data` seeded with `files` files of `size` bytes;
    /// its manifest.
    pub async fn seeded_source_of(&self, files: usize, size: usize) -> BTreeMap<String, String> {
        let client = self.src.client().await;
        super::claim(&client, "default", "data", "ReadWriteOnce", "1Gi").await;
        let dir = super::volume_dir(&client, "default", "data").await;
        super::seed(&dir, files, size);
        super::manifest(&dir)
    }

    /// The manifest of `claim` in the destination's cluster.
    pub async fn destination_manifest(&self, claim: &str) -> BTreeMap<String, String> {
        let client = self.dst.client().await;
        super::manifest(&super::volume_dir(&client, "default", claim).await)
    }
}
