//! Following a mover pod's log while it runs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use tokio::sync::Notify;

use super::logs::LogDigest;

/// Reads a pod's log as it is written, from the start, into a
/// [`LogDigest`]; wakes the driver on each line. Stops when dropped.
pub struct Follower {
    digest: Arc<Mutex<LogDigest>>,
    task: tokio::task::JoinHandle<()>,
}

impl Follower {
    pub fn start(api: Api<Pod>, name: String, wake: Arc<Notify>) -> Follower {
        let digest = Arc::new(Mutex::new(LogDigest::default()));
        let shared = digest.clone();
        let task = tokio::spawn(async move { follow(api, name, shared, wake).await });
        Follower { digest, task }
    }

    /// What the log said so far.
    pub fn digest(&self) -> LogDigest {
        self.digest
            .lock()
            .map(|d| d.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn follow(api: Api<Pod>, name: String, digest: Arc<Mutex<LogDigest>>, wake: Arc<Notify>) {
    let params = LogParams {
        follow: true,
        container: Some(crate::resources::CONTAINER.into()),
        ..LogParams::default()
    };
    loop {
        // Fails until the container has started.
        if let Ok(stream) = api.log_stream(&name, &params).await {
            // Each stream starts from the beginning of the log.
            let mut fresh = LogDigest::default();
            let mut lines = stream.lines();
            while let Some(Ok(line)) = lines.next().await {
                fresh.feed(&line);
                if let Ok(mut d) = digest.lock() {
                    *d = fresh.clone();
                }
                wake.notify_one();
            }
            if fresh.result.is_some() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The last `lines` lines of the logs of `attempt`'s two pods, receiver
/// first, each with its role; `None` for a pod whose log cannot be read
/// (gone, or not started).
pub async fn attempt_logs(
    client: &kube::Client,
    vm: &crate::record::VolumeMigration,
    attempt: &crate::record::Attempt,
    lines: i64,
) -> [(&'static str, Option<String>); 2] {
    let params = LogParams {
        container: Some(crate::resources::CONTAINER.into()),
        tail_lines: Some(lines),
        ..LogParams::default()
    };
    let read = |name: &str, ns: &str| {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let (name, params) = (name.to_string(), params.clone());
        async move { api.logs(&name, &params).await.ok() }
    };
    let (receiver, sender) = tokio::join!(
        read(&attempt.receiver.name, &vm.spec.destination.namespace),
        read(&attempt.sender.name, &vm.spec.source.namespace),
    );
    [("receiver", receiver), ("sender", sender)]
}
