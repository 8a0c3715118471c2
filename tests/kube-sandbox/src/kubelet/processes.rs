//! The container processes running now, by pod: what a per-pod kill (a
//! crash or an OOM kill of one pod, as tests inject them) reaches, outside
//! the kubelet's own stopping of a pod. The pod worker registers each
//! container's process while it runs; a killed process is seen by its
//! worker as any other exit, and reported as such (exit code 137).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::runtime::Killer;

/// The container processes of every pod of the sandbox, by pod uid.
#[derive(Default)]
pub struct PodProcesses {
    running: Mutex<HashMap<String, Vec<(u64, Killer)>>>,
    next: Mutex<u64>,
}

/// How long a kill waits for the processes to be collected.
const KILL_WAIT: Duration = Duration::from_secs(10);

impl PodProcesses {
    /// Records a container process of pod `uid` until the returned guard
    /// is dropped.
    pub(super) fn register(&self, uid: &str, killer: Killer) -> Registered<'_> {
        let id = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            *next += 1;
            *next
        };
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running
            .entry(uid.to_string())
            .or_default()
            .push((id, killer));
        Registered {
            table: self,
            uid: uid.to_string(),
            id,
        }
    }

    /// Kills every container process of pod `uid` with SIGKILL and waits
    /// (10 s at most) until they are collected; how many there were. The
    /// signals are all sent before this returns: a killed process runs no
    /// more of its own code.
    pub async fn kill(&self, uid: &str) -> usize {
        let killers: Vec<Killer> = {
            let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            running
                .get(uid)
                .into_iter()
                .flatten()
                .map(|(_, k)| k.clone())
                .collect()
        };
        for killer in &killers {
            killer.kill();
        }
        let count = killers.len();
        let collected = futures::future::join_all(killers.into_iter().map(|mut k| async move {
            k.wait().await;
        }));
        if tokio::time::timeout(KILL_WAIT, collected).await.is_err() {
            tracing::warn!("pod {uid}: killed processes not collected in {KILL_WAIT:?}");
        }
        count
    }
}

/// A process recorded in [`PodProcesses`]; dropping it forgets the process.
pub(super) struct Registered<'a> {
    table: &'a PodProcesses,
    uid: String,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        let mut running = self.table.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = running.get_mut(&self.uid) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                running.remove(&self.uid);
            }
        }
    }
}
