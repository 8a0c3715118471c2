//! The driver's eyes: a reflector of the operation's pods in each
//! namespace it uses, and one [`Notify`] that wakes the driver on any change.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use tokio::sync::Notify;

use crate::cluster::{Side, Sides};
use crate::names;

/// Watches the operation's pods; dropping it stops the watches.
pub struct PodWatch {
    /// The destination's store, then the source's when it is another
    /// namespace or cluster.
    stores: Vec<(Side, String, Store<Pod>)>,
    pub wake: Arc<Notify>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl PodWatch {
    /// Starts watching operation `op`'s pods in the source's namespace and
    /// the destination's, each in its cluster.
    pub fn start(sides: &Sides, op: &str, (source_ns, destination_ns): (&str, &str)) -> PodWatch {
        let wake = Arc::new(Notify::new());
        let mut stores = Vec::new();
        let mut tasks = Vec::new();
        let mut watched = vec![(Side::Destination, destination_ns)];
        if sides.is_remote() || source_ns != destination_ns {
            watched.push((Side::Source, source_ns));
        }
        for (side, ns) in watched {
            let api: Api<Pod> = Api::namespaced(sides.client(side).clone(), ns);
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
            stores.push((side, ns.to_string(), reader));
        }
        PodWatch {
            stores,
            wake,
            tasks,
        }
    }

    /// Waits until every store has its first listing.
    pub async fn ready(&self) {
        for (_, _, store) in &self.stores {
            // Only fails when the writer is gone, i.e. never while we run.
            let _ = store.wait_until_ready().await;
        }
    }

    /// The pod `name` on `side`, as last seen.
    pub fn get(&self, side: Side, name: &str) -> Option<Arc<Pod>> {
        // One cluster and one namespace: the destination's store holds both.
        let (_, ns, store) = self
            .stores
            .iter()
            .find(|(s, _, _)| *s == side)
            .or_else(|| self.stores.first())?;
        store.get(&ObjectRef::new(name).within(ns))
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}
