//! Faults injected at a precise request: a rule names the requests (a
//! predicate over their [`AuditEntry`]: method, URI, identity, and the
//! authorizer's attributes — verb, resource, subresource, namespace,
//! name); when a request made with a pod-bound service-account token
//! matches, it is served as usual (what it wrote stays written), and then,
//! before its response is written, every container process of the pod
//! that made it is killed with SIGKILL, as the OOM killer or a crash of
//! the pod would. The client never reads the answer; the kubelet reports
//! the container terminated with exit code 137 (reason `Error`), and a
//! pod with restartPolicy Never goes `Failed`.
//!
//! A rule fires a given number of times, then stays as it is, spent; its
//! [`Tripwire`] says how often it fired and at which requests.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::AuditEntry;
use crate::auth::Identity;
use crate::kubelet::PodProcesses;

/// Which requests a rule matches.
pub type Matcher = dyn Fn(&AuditEntry) -> bool + Send + Sync;

/// The rules in force.
#[derive(Default)]
pub struct Faults {
    rules: Mutex<Vec<Arc<Rule>>>,
}

struct Rule {
    matcher: Box<Matcher>,
    /// Firings left.
    remaining: Mutex<usize>,
    /// The requests it fired at, once their pods are dead.
    fired: watch::Sender<Vec<AuditEntry>>,
}

/// A rule's record: how often it fired, and at which requests.
#[derive(Clone)]
pub struct Tripwire {
    rule: Arc<Rule>,
}

impl Tripwire {
    /// How many matching requests have had their pod killed.
    pub fn fired(&self) -> usize {
        self.rule.fired.borrow().len()
    }

    /// The requests it fired at, in order; the pod each came from is the
    /// identity's `Subject`.
    pub fn requests(&self) -> Vec<AuditEntry> {
        self.rule.fired.borrow().clone()
    }

    /// Waits until it has fired `times` times; false if `timeout` passed
    /// first.
    pub async fn wait_fired(&self, times: usize, timeout: Duration) -> bool {
        let mut fired = self.rule.fired.subscribe();
        tokio::time::timeout(timeout, fired.wait_for(|f| f.len() >= times))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

impl Faults {
    /// Adds a rule that fires for the next `times` requests, made with a
    /// pod-bound service-account token, that `matcher` accepts.
    pub fn add(&self, times: usize, matcher: Box<Matcher>) -> Tripwire {
        let rule = Arc::new(Rule {
            matcher,
            remaining: Mutex::new(times),
            fired: watch::Sender::new(Vec::new()),
        });
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        rules.push(rule.clone());
        Tripwire { rule }
    }

    /// After serving `entry`'s request, before answering it: kills the
    /// requesting pod if a rule with firings left matches.
    ///
    /// The kill runs as a task of its own: as the client dies its
    /// connection closes, and the server drops this request's handler
    /// then, which must not leave the pod half-killed or the firing
    /// unrecorded.
    pub async fn after(&self, entry: &AuditEntry, processes: &Arc<PodProcesses>) {
        let Identity::ServiceAccount(subject) = &entry.identity else {
            return;
        };
        if !subject.is_pod_bound() {
            return;
        }
        let Some(rule) = self.take(entry) else {
            return;
        };
        let (processes, entry, uid) = (processes.clone(), entry.clone(), subject.pod_uid.clone());
        let firing = tokio::spawn(async move {
            let killed = processes.kill(&uid).await;
            tracing::info!(
                "fault: killed {killed} process(es) of pod {uid} after {} {}",
                entry.method,
                entry.uri
            );
            rule.fired.send_modify(|f| f.push(entry));
        });
        if let Err(e) = firing.await {
            tracing::error!("fault: the kill failed: {e}");
        }
    }

    /// The first rule with firings left that matches, one firing taken.
    fn take(&self, entry: &AuditEntry) -> Option<Arc<Rule>> {
        let rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        rules
            .iter()
            .find(|rule| {
                let mut remaining = rule.remaining.lock().unwrap_or_else(|e| e.into_inner());
                if *remaining == 0 || !(rule.matcher)(entry) {
                    return false;
                }
                *remaining -= 1;
                true
            })
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Subject;

    fn entry(method: &str, pod: &str) -> AuditEntry {
        AuditEntry {
            identity: Identity::ServiceAccount(Subject {
                namespace: "ns".into(),
                service_account: "sa".into(),
                service_account_uid: "sa-uid".into(),
                pod: pod.into(),
                pod_uid: if pod.is_empty() {
                    String::new()
                } else {
                    format!("{pod}-uid")
                },
                node: "node-1".into(),
            }),
            method: method.into(),
            uri: "/api/v1/namespaces/ns/configmaps".into(),
            authorization: None,
        }
    }

    #[tokio::test]
    async fn a_rule_fires_for_pod_tokens_as_many_times_as_asked() {
        let faults = Faults::default();
        let processes = Arc::new(PodProcesses::default());
        let wire = faults.add(2, Box::new(|e: &AuditEntry| e.method == "POST"));
        faults.after(&entry("GET", "p"), &processes).await;
        // A token bound to no pod has no pod to kill.
        faults.after(&entry("POST", ""), &processes).await;
        assert_eq!(wire.fired(), 0);
        faults.after(&entry("POST", "p"), &processes).await;
        faults.after(&entry("POST", "q"), &processes).await;
        faults.after(&entry("POST", "r"), &processes).await;
        assert!(wire.wait_fired(2, Duration::from_secs(1)).await);
        let pods: Vec<String> = wire
            .requests()
            .into_iter()
            .filter_map(|e| match e.identity {
                Identity::ServiceAccount(s) => Some(s.pod),
                _ => None,
            })
            .collect();
        assert_eq!(pods, ["p", "q"]);
        let admin = AuditEntry {
            identity: Identity::Admin,
            ..entry("POST", "p")
        };
        let other = faults.add(1, Box::new(|_: &AuditEntry| true));
        faults.after(&admin, &processes).await;
        assert_eq!(other.fired(), 0);
    }
}
