//! What the monitor shows, as messages: records from a ConfigMap watch,
//! mover pods from a pod watch (the nodes the running attempts' pods were
//! scheduled on), live progress and log tails from the
//! current attempts' pod logs, and a tick. Each source is a task that
//! sends [`Msg`]s to the UI task, which owns all state.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::model::{Msg, Scope};
use crate::cluster::Sides;
use crate::driver::follow::{attempt_logs, Follower};
use crate::names::{self, Component};
use crate::record::{configmap, Attempt, AttemptPhase, VolumeMigration};

/// The running feed tasks; dropping it stops them.
pub struct Feeds {
    tasks: Vec<JoinHandle<()>>,
}

impl Feeds {
    /// The first feed that is no longer running, if one is (they only end
    /// by a panic while the monitor runs).
    pub fn stopped(&self) -> Option<&'static str> {
        const WHAT: [&str; 4] = ["record watch", "pod watch", "log follower", "clock"];
        let i = self.tasks.iter().position(JoinHandle::is_finished)?;
        Some(WHAT.get(i).copied().unwrap_or("feed"))
    }
}

impl Drop for Feeds {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// Starts the feeds for `scope`.
pub fn start(client: Client, scope: &Scope, tx: UnboundedSender<Msg>) -> Feeds {
    let selector = names::record_selector();
    let (maps, pods): (Api<ConfigMap>, Api<Pod>) = match scope {
        Scope::Namespace(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        Scope::All => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let (records, records_writer) = reflector::store();
    let (movers, movers_writer) = reflector::store();
    let changed = Arc::new(Notify::new());
    let mut tasks = Vec::new();

    let stream = reflector::reflector(
        records_writer,
        watcher(maps, watcher::Config::default().labels(&selector)),
    )
    .default_backoff();
    tasks.push(tokio::spawn(watch_events(
        stream,
        "operation records",
        changed.clone(),
        tx.clone(),
    )));

    // The mover pods: when a current attempt's receiver runs, its log is
    // followed.
    let pod_selector = format!("{}={}", names::MANAGED_BY_KEY, names::MANAGED_BY);
    let stream = reflector::reflector(
        movers_writer,
        watcher(pods, watcher::Config::default().labels(&pod_selector)),
    )
    .default_backoff();
    tasks.push(tokio::spawn(watch_events(
        stream,
        "mover pods",
        changed.clone(),
        tx.clone(),
    )));

    tasks.push(tokio::spawn(publish(
        client,
        records,
        movers,
        changed,
        tx.clone(),
    )));

    tasks.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            if tx.send(Msg::Tick(jiff::Timestamp::now())).is_err() {
                break;
            }
        }
    }));
    Feeds { tasks }
}

/// Drives one watch: wakes the publisher on each event, and tells the user
/// the first time the watch fails (RBAC, an unreachable API server), and
/// when it works again.
async fn watch_events<S, K>(
    stream: S,
    what: &'static str,
    wake: Arc<Notify>,
    tx: UnboundedSender<Msg>,
) where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    futures::pin_mut!(stream);
    let mut failing = false;
    while let Some(event) = stream.next().await {
        match event {
            Err(e) if !failing => {
                failing = true;
                let _ = tx.send(Msg::Notice(format!("cannot watch the {what}: {e}")));
            }
            Err(_) => {}
            Ok(_) if failing => {
                failing = false;
                let _ = tx.send(Msg::Notice(format!("watching the {what} again")));
            }
            Ok(_) => {}
        }
        wake.notify_one();
    }
}

/// An operation: namespace and name.
type OpKey = (String, String);

/// What was last sent of a followed attempt: its number, the receiver's
/// latest progress event, the log tail.
type Sent = (u32, Option<mover::stats::Progress>, Vec<String>);

/// Where a running attempt's pods run: its number, the receiver's node, the
/// sender's.
type Placed = (u32, Option<String>, Option<String>);

/// One followed attempt: its pods' logs.
struct Followed {
    attempt: u32,
    receiver: Follower,
    sender: Follower,
}

/// On every change: all records to the UI, and log followers for the
/// attempts that run; on every log line: progress and tails.
async fn publish(
    client: Client,
    records: Store<ConfigMap>,
    movers: Store<Pod>,
    changed: Arc<Notify>,
    tx: UnboundedSender<Msg>,
) {
    let _ = records.wait_until_ready().await;
    let logs = Arc::new(Notify::new());
    let mut followed: HashMap<OpKey, Followed> = HashMap::new();
    // What was sent last, so that only news is sent.
    let mut sent_records: Option<Vec<VolumeMigration>> = None;
    let mut sent_logs: HashMap<OpKey, Sent> = HashMap::new();
    let mut sent_nodes: HashMap<OpKey, Placed> = HashMap::new();
    loop {
        let mut ops: Vec<VolumeMigration> = records
            .state()
            .iter()
            .filter_map(|cm| configmap::from_config_map(cm).ok())
            .collect();
        ops.sort_by(|a, b| {
            (
                &a.metadata.namespace,
                a.metadata.creation_timestamp,
                &a.metadata.name,
            )
                .cmp(&(
                    &b.metadata.namespace,
                    b.metadata.creation_timestamp,
                    &b.metadata.name,
                ))
        });
        follow_running(&client, &ops, &movers, &mut followed, &logs);
        sent_logs.retain(|key, _| followed.contains_key(key));
        for ((ns, op), f) in &followed {
            let (r, s) = (f.receiver.digest(), f.sender.digest());
            let mut lines: Vec<String> = r
                .tail()
                .into_iter()
                .map(|l| format!("receiver: {l}"))
                .collect();
            lines.extend(s.tail().into_iter().map(|l| format!("sender: {l}")));
            let now = (f.attempt, r.progress.clone(), lines);
            let key = (ns.clone(), op.clone());
            if sent_logs.get(&key) == Some(&now) {
                continue;
            }
            let (attempt, progress, lines) = now.clone();
            sent_logs.insert(key, now);
            if let Some(p) = &progress {
                let msg = Msg::Progress {
                    namespace: ns.clone(),
                    op: op.clone(),
                    attempt,
                    progress: crate::driver::progress_of(p),
                };
                if tx.send(msg).is_err() {
                    return;
                }
            }
            let msg = Msg::LogTail {
                namespace: ns.clone(),
                op: op.clone(),
                attempt,
                lines,
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
        let placed = scheduled(&ops, &movers);
        sent_nodes.retain(|key, _| placed.contains_key(key));
        for (key, now) in placed {
            if sent_nodes.get(&key) == Some(&now) {
                continue;
            }
            let (attempt, receiver, sender) = now.clone();
            let msg = Msg::Scheduled {
                namespace: key.0.clone(),
                op: key.1.clone(),
                attempt,
                receiver,
                sender,
            };
            sent_nodes.insert(key, now);
            if tx.send(msg).is_err() {
                return;
            }
        }
        if sent_records.as_ref() != Some(&ops) {
            sent_records = Some(ops.clone());
            if tx.send(Msg::Records(ops)).is_err() {
                return;
            }
        }
        tokio::select! {
            () = changed.notified() => {}
            () = logs.notified() => {}
        }
        // Coalesce bursts (a log line per 500 ms per attempt at most).
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts following the pods of each running attempt whose receiver has
/// started, and stops following the rest.
fn follow_running(
    client: &Client,
    ops: &[VolumeMigration],
    movers: &Store<Pod>,
    followed: &mut HashMap<OpKey, Followed>,
    wake: &Arc<Notify>,
) {
    let mut wanted = Vec::new();
    for vm in ops {
        let Some(attempt) = running_attempt(vm) else {
            continue;
        };
        let key = (vm.metadata.namespace.clone(), vm.metadata.name.clone());
        wanted.push(key.clone());
        if followed
            .get(&key)
            .is_some_and(|f| f.attempt == attempt.number)
        {
            continue;
        }
        let receiver_ns = &vm.spec.destination.namespace;
        let receiver = names::pod_name(&vm.metadata.name, Component::Receiver, attempt.number);
        let started = movers
            .get(&ObjectRef::new(&receiver).within(receiver_ns))
            .is_some();
        if !started {
            continue;
        }
        let sender = names::pod_name(&vm.metadata.name, Component::Sender, attempt.number);
        followed.insert(
            key,
            Followed {
                attempt: attempt.number,
                receiver: Follower::start(
                    Api::namespaced(client.clone(), receiver_ns),
                    receiver,
                    wake.clone(),
                ),
                sender: Follower::start(
                    Api::namespaced(client.clone(), &vm.spec.source.namespace),
                    sender,
                    wake.clone(),
                ),
            },
        );
    }
    followed.retain(|k, _| wanted.contains(k));
}

/// The latest attempt of `vm`, if it has not ended.
fn running_attempt(vm: &VolumeMigration) -> Option<&Attempt> {
    let last = vm.status.attempts.last();
    last.filter(|a| matches!(a.phase, AttemptPhase::Starting | AttemptPhase::Running))
}

/// Where each running attempt's pods run, as the pod watch last saw them
/// (`spec.nodeName`, set once the scheduler has placed a pod).
fn scheduled(ops: &[VolumeMigration], movers: &Store<Pod>) -> HashMap<OpKey, Placed> {
    let node = |namespace: &str, name: String| {
        let pod = movers.get(&ObjectRef::new(&name).within(namespace))?;
        pod.spec.as_ref()?.node_name.clone()
    };
    let mut placed = HashMap::new();
    for vm in ops {
        let Some(attempt) = running_attempt(vm) else {
            continue;
        };
        let (op, n) = (&vm.metadata.name, attempt.number);
        let receiver = names::pod_name(op, Component::Receiver, n);
        let sender = names::pod_name(op, Component::Sender, n);
        let key = (vm.metadata.namespace.clone(), op.clone());
        let nodes = (
            n,
            node(&vm.spec.destination.namespace, receiver),
            node(&vm.spec.source.namespace, sender),
        );
        placed.insert(key, nodes);
    }
    placed
}

/// The whole logs of `op`'s latest attempt (both pods, up to 500 lines
/// each, progress events left out), for the logs screen; for a pod that is
/// gone, what the record kept.
pub async fn full_logs(client: &Client, vm: &VolumeMigration) -> Vec<String> {
    let Some(attempt) = vm.status.attempts.last() else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for (role, text) in attempt_logs(&Sides::one(client.clone()), vm, attempt, 500).await {
        match text {
            Some(text) => lines.extend(
                text.lines()
                    .filter(|l| !l.starts_with("{\"event\":\"progress\""))
                    .map(|l| format!("{role}: {l}")),
            ),
            None => lines.extend(
                attempt
                    .log_tail
                    .iter()
                    .filter(|l| l.starts_with(role))
                    .cloned(),
            ),
        }
    }
    lines
}
