//! The driver's eyes: a reflector of the operation's pods in each
//! namespace it uses, and one [`Notify`] that wakes the driver on any change.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio::sync::Notify;

use crate::names;

/// Watches the operation's pods; dropping it stops the watches.
pub struct PodWatch {
    stores: Vec<(String, Store<Pod>)>,
    pub wake: Arc<Notify>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl PodWatch {
    /// Starts watching operation `op`'s pods in `namespaces`.
    pub fn start(client: &Client, op: &str, namespaces: &[&str]) -> PodWatch {
        let wake = Arc::new(Notify::new());
        let mut stores = Vec::new();
        let mut tasks = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        for ns in namespaces {
            if seen.contains(ns) {
                continue;
            }
            seen.push(ns);
            let api: Api<Pod> = Api::namespaced(client.clone(), ns);
            let config = watcher::Config::default().labels(&names::operation_selector(op));
            let (reader, writer) = reflector::store();
            let wake_on_change = wake.clone();
            let stream = reflector::reflector(writer, watcher(api, config)).default_backoff();
            tasks.push(tokio::spawn(async move {
                futures::pin_mut!(stream);
                while let Some(event) = stream.next().await {
                    if let Err(e) = event {
                        tracing::debug!("pod watch: {e}");
                    }
                    wake_on_change.notify_one();
                }
            }));
            stores.push((ns.to_string(), reader));
        }
        PodWatch {
            stores,
            wake,
            tasks,
        }
    }

    /// Waits until every store has its first listing.
    pub async fn ready(&self) {
        for (_, store) in &self.stores {
            // Only fails when the writer is gone, i.e. never while we run.
            let _ = store.wait_until_ready().await;
        }
    }

    /// The pod `name` in `namespace`, as last seen.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        let store = self.stores.iter().find(|(ns, _)| ns == namespace)?;
        store.1.get(&ObjectRef::new(name).within(namespace))
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}
