//! Following a mover pod's log while it runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use tokio::sync::Notify;

use super::logs::LogDigest;
use crate::cluster::Side;

/// Reads a pod's log as it is written, from the start, into a
/// [`LogDigest`]; wakes the driver on each line. Stops when dropped.
///
/// The log so far is read at once first, so a driver that adopts a
/// running attempt starts from its newest progress; a stream that
/// replays the log from the start (each does) is not shown until it has
/// read as far.
pub struct Follower {
    digest: Arc<Mutex<LogDigest>>,
    caught_up: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Follower {
    pub fn start(api: Api<Pod>, name: String, wake: Arc<Notify>) -> Follower {
        let digest = Arc::new(Mutex::new(LogDigest::default()));
        let caught_up = Arc::new(AtomicBool::new(false));
        let (shared, flag) = (digest.clone(), caught_up.clone());
        let task = tokio::spawn(async move { follow(api, name, shared, flag, wake).await });
        Follower {
            digest,
            caught_up,
            task,
        }
    }

    /// Whether the log as it was when following began has been read (or
    /// could not be: the container has not started).
    pub fn caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
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

async fn follow(
    api: Api<Pod>,
    name: String,
    digest: Arc<Mutex<LogDigest>>,
    caught_up: Arc<AtomicBool>,
    wake: Arc<Notify>,
) {
    let whole = LogParams {
        container: Some(crate::resources::CONTAINER.into()),
        ..LogParams::default()
    };
    // Fails until the container has started: then there is nothing to
    // catch up with.
    if let Ok(text) = api.logs(&name, &whole).await {
        publish(&digest, LogDigest::from_text(&text));
    }
    caught_up.store(true, Ordering::Release);
    wake.notify_one();
    let params = LogParams {
        follow: true,
        ..whole
    };
    loop {
        if let Ok(stream) = api.log_stream(&name, &params).await {
            // Each stream starts from the beginning of the log: shown once
            // it has read as far as what is shown already.
            let mut fresh = LogDigest::default();
            let mut lines = stream.lines();
            while let Some(Ok(line)) = lines.next().await {
                fresh.feed(&line);
                if fresh.lines() >= shown_lines(&digest) || fresh.result.is_some() {
                    publish(&digest, fresh.clone());
                    wake.notify_one();
                }
            }
            if fresh.result.is_some() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn publish(shared: &Mutex<LogDigest>, digest: LogDigest) {
    if let Ok(mut d) = shared.lock() {
        *d = digest;
    }
}

fn shown_lines(shared: &Mutex<LogDigest>) -> usize {
    shared.lock().map_or(0, |d| d.lines())
}

/// The last `lines` lines of the logs of `attempt`'s two pods, receiver
/// first, each with its role; `None` for a pod whose log cannot be read
/// (gone, or not started).
pub async fn attempt_logs(
    sides: &crate::cluster::Sides,
    vm: &crate::record::VolumeMigration,
    attempt: &crate::record::Attempt,
    lines: i64,
) -> [(&'static str, Option<String>); 2] {
    let params = LogParams {
        container: Some(crate::resources::CONTAINER.into()),
        tail_lines: Some(lines),
        ..LogParams::default()
    };
    let read = |name: &str, side: Side, ns: &str| {
        let api: Api<Pod> = Api::namespaced(sides.client(side).clone(), ns);
        let (name, params) = (name.to_string(), params.clone());
        async move { api.logs(&name, &params).await.ok() }
    };
    let (receiver, sender) = tokio::join!(
        read(
            &attempt.receiver.name,
            Side::Destination,
            &vm.spec.destination.namespace
        ),
        read(
            &attempt.sender.name,
            Side::Source,
            &vm.spec.source.namespace
        ),
    );
    [("receiver", receiver), ("sender", sender)]
}

/// What `attempt`'s pods and whole logs show now, to close it when no
/// driver watched it (`abort` of a detached operation): where the pods
/// run, the receiver's newest progress and what it resumed, both logs'
/// last lines.
pub async fn look_at_attempt(
    sides: &crate::cluster::Sides,
    vm: &crate::record::VolumeMigration,
    attempt: &crate::record::Attempt,
) -> crate::record::figures::Seen {
    let whole = LogParams {
        container: Some(crate::resources::CONTAINER.into()),
        ..LogParams::default()
    };
    let look = |role: &'static str, name: &str, side: Side, ns: &str| {
        let api: Api<Pod> = Api::namespaced(sides.client(side).clone(), ns);
        let (name, whole) = (name.to_string(), whole.clone());
        async move {
            let pod = api.get_opt(&name).await.ok().flatten();
            let seen = pod.as_ref().map(|p| {
                super::ending::pod_record(&super::judge::PodView::new(role, &name, Some(p)))
            });
            let log = match pod {
                Some(_) => api.logs(&name, &whole).await.ok(),
                None => None,
            };
            (
                seen,
                LogDigest::from_text(log.as_deref().unwrap_or_default()),
            )
        }
    };
    let ((receiver, rlog), (sender, slog)) = tokio::join!(
        look(
            "receiver",
            &attempt.receiver.name,
            Side::Destination,
            &vm.spec.destination.namespace
        ),
        look(
            "sender",
            &attempt.sender.name,
            Side::Source,
            &vm.spec.source.namespace
        ),
    );
    let mut log_tail: Vec<String> = rlog
        .tail()
        .into_iter()
        .map(|l| format!("receiver: {l}"))
        .collect();
    log_tail.extend(slog.tail().into_iter().map(|l| format!("sender: {l}")));
    crate::record::figures::Seen {
        receiver,
        sender,
        progress: rlog.progress.as_ref().map(super::attempt::progress_of),
        prior: rlog.first_progress.as_ref().map(|p| p.bytes_prior),
        log_tail,
    }
}
