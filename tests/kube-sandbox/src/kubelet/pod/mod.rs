//! A pod worker: everything one pod's kubelet does, from "can it start"
//! to the last status write and the removal of the object.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use super::image::{ImageError, Source as ImageSource};
use super::probe::{self, Check, Probe};
use super::status::{self, waiting, Container, State, Terminated};
use super::volumes::HostVolume;
use super::{launch, runtime, LogFile, Shared};
use crate::events::{self, EventType, Source};
use crate::registry;
use crate::store::DeleteOptions;
use crate::task::Owned;

mod start;

/// Restart back-off: doubles from the first to the cap.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_CAP: Duration = Duration::from_secs(10);
/// A container that ran this long restarts without back-off.
const BACKOFF_RESET: Duration = Duration::from_secs(20);

#[derive(Debug, Clone)]
pub struct PodId {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// `NAME_NAMESPACE(UID)`, as the kubelet names a pod in its messages.
impl std::fmt::Display for PodId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}_{}({})", self.name, self.namespace, self.uid)
    }
}

pub struct Worker {
    shared: Arc<Shared>,
    node: String,
    host_ip: Ipv4Addr,
    id: PodId,
    kill: watch::Receiver<u64>,
    dir: PathBuf,
    containers: Mutex<Vec<Container>>,
    /// A status write was skipped while the node was unreachable.
    unpublished: AtomicBool,
}

impl Worker {
    pub fn new(
        shared: Arc<Shared>,
        node: String,
        host_ip: Ipv4Addr,
        id: PodId,
        kill: watch::Receiver<u64>,
    ) -> Arc<Worker> {
        let dir = shared
            .data_dir
            .join("pods")
            .join(format!("{}_{}_{}", id.namespace, id.name, id.uid));
        Arc::new(Worker {
            shared,
            node,
            host_ip,
            id,
            kill,
            dir,
            containers: Mutex::new(Vec::new()),
            unpublished: AtomicBool::new(false),
        })
    }

    /// The pod as stored now; None once it is gone (or replaced by a pod
    /// of the same name).
    fn current(&self) -> Option<Value> {
        let pod = self
            .shared
            .store
            .get(registry::get("pods"), &self.id.namespace, &self.id.name)
            .ok()?;
        (pod["metadata"]["uid"] == json!(self.id.uid)).then_some(pod)
    }

    fn event(&self, pod: &Value, kind: EventType, reason: &str, message: &str) {
        events::record(
            &self.shared.store,
            &Source::on("kubelet", &self.node),
            pod,
            kind,
            reason,
            message,
        );
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Vec<Container>> {
        self.containers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the containers' state into the pod's status. A NotReady
    /// node's kubelet cannot reach the API: nothing is written until the
    /// node is back.
    fn publish(&self) {
        if !self.node_ready() {
            self.unpublished.store(true, Ordering::Relaxed);
            return;
        }
        self.unpublished.store(false, Ordering::Relaxed);
        let model = self.model().clone();
        let uid = json!(self.id.uid);
        let _ = self.shared.store.modify(
            registry::get("pods"),
            &self.id.namespace,
            &self.id.name,
            |p| p["metadata"]["uid"] == uid && status::apply(p, &model),
        );
    }

    fn set_pod_fields(&self, edit: impl FnOnce(&mut Value)) {
        let uid = json!(self.id.uid);
        let _ = self.shared.store.modify(
            registry::get("pods"),
            &self.id.namespace,
            &self.id.name,
            |p| {
                if p["metadata"]["uid"] != uid {
                    return false;
                }
                edit(p);
                true
            },
        );
    }

    pub async fn run(self: Arc<Self>) {
        let mut version = self.shared.store.subscribe_version();
        let Some((pod, volumes)) = self.wait_until_startable(&mut version).await else {
            return self.remove().await;
        };
        let ip = self.shared.allocate_ip();
        let host_ip = self.host_ip.to_string();
        self.set_pod_fields(|p| {
            p["status"]["podIP"] = json!(ip.to_string());
            p["status"]["podIPs"] = json!([{"ip": ip.to_string()}]);
            p["status"]["hostIP"] = json!(host_ip);
            p["status"]["hostIPs"] = json!([{"ip": host_ip}]);
            p["status"]["startTime"] = json!(crate::time::now());
        });
        let (stop_tx, stop_rx) = watch::channel(None::<Duration>);
        let mut tasks = Vec::new();
        let specs = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for (index, spec) in specs.into_iter().enumerate() {
            let worker = self.clone();
            let volumes = volumes.clone();
            let stop = stop_rx.clone();
            tasks.push(Owned::spawn(async move {
                worker.run_container(index, spec, volumes, stop).await
            }));
        }
        // Supervise until the pod is deleted.
        let grace = loop {
            match self.current() {
                None => break Duration::ZERO,
                // An unreachable node neither kills nor confirms: the pod
                // stays Terminating until the node is back or it is
                // force-deleted.
                Some(p) if crate::controllers::is_terminating(&p) && self.node_ready() => {
                    let secs = p["metadata"]["deletionGracePeriodSeconds"]
                        .as_u64()
                        .unwrap_or(0);
                    break Duration::from_secs(secs);
                }
                // Back from unreachable: report what happened meanwhile.
                Some(_) if self.unpublished.load(Ordering::Relaxed) => self.publish(),
                Some(_) => {}
            }
            tokio::select! {
                changed = version.changed() => if changed.is_err() { break Duration::ZERO },
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        };
        stop_tx.send_replace(Some(grace));
        for task in tasks {
            task.join().await;
        }
        self.publish();
        self.shared.release_ip(ip);
        self.remove().await;
    }

    fn node_ready(&self) -> bool {
        self.shared
            .store
            .get(registry::get("nodes"), "", &self.node)
            .is_ok_and(|n| is_ready(&n))
    }

    /// Deletes the pod object (its kubelet's confirmation) and cleans up.
    async fn remove(&self) {
        let opts = DeleteOptions {
            grace_seconds: Some(0),
            uid: Some(self.id.uid.clone()),
            ..Default::default()
        };
        let _ = self.shared.store.delete(
            registry::get("pods"),
            &self.id.namespace,
            &self.id.name,
            &opts,
        );
        self.shared.logs.forget(&self.id.uid);
        if let Err(e) = tokio::fs::remove_dir_all(&self.dir).await {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("removing {}: {e}", self.dir.display());
            }
        }
    }

    fn update_container(&self, index: usize, edit: impl FnOnce(&mut Container)) {
        if let Some(c) = self.model().get_mut(index) {
            edit(c);
        }
        self.publish();
    }

    /// Runs one container until the pod stops it or its restart policy
    /// says it is done.
    async fn run_container(
        self: Arc<Self>,
        index: usize,
        spec: Value,
        volumes: HashMap<String, HostVolume>,
        mut stop: watch::Receiver<Option<Duration>>,
    ) {
        let mut kill = self.kill.clone();
        kill.borrow_and_update();
        let name = spec["name"].as_str().unwrap_or_default().to_string();
        let mut backoff = BACKOFF_FIRST;
        let (mut run, mut pull_failures) = (0u32, 0u32);
        loop {
            if stop.borrow().is_some() {
                return self.finish(index);
            }
            let Some(pod) = self.current() else { return };
            let Some((files, pulled)) = self.pull(&pod, &spec, index, &mut pull_failures).await
            else {
                if !self.back_off(index, &mut stop, backoff).await {
                    return;
                }
                backoff = (backoff * 2).min(BACKOFF_CAP);
                continue;
            };
            let log_path = self.dir.join("logs").join(&name).join(format!("{run}.log"));
            let built = launch::build(
                &self.shared,
                &self.dir,
                &pod,
                &spec,
                &files,
                &volumes,
                log_path.clone(),
            );
            // Started through the freezer: not while a volume it mounts is
            // being snapshotted, and stopped during the next snapshots
            // until `freezable` is dropped, once the process has ended.
            let started = match built {
                Ok(launch) => match self.shared.freezer.spawn(&launch).await {
                    Ok((process, freezable)) => Ok((launch, process, freezable)),
                    Err(e) => Err((e.reason(), e.to_string())),
                },
                Err(e) => Err(e),
            };
            let (launch, mut process, freezable) = match started {
                Ok(started) => started,
                Err((reason, message)) => {
                    self.event(
                        &pod,
                        EventType::Warning,
                        "Failed",
                        &format!("Error: {message}"),
                    );
                    self.update_container(index, |c| c.state = waiting(reason, Some(message)));
                    if !self.back_off(index, &mut stop, backoff).await {
                        return;
                    }
                    backoff = (backoff * 2).min(BACKOFF_CAP);
                    continue;
                }
            };
            let (finished_tx, finished_rx) = watch::channel(false);
            self.shared.logs.record(
                &self.id.uid,
                &name,
                LogFile {
                    path: log_path,
                    finished: finished_rx,
                },
            );
            let started_at = crate::time::now();
            if run == 0 && !pulled {
                let image = spec["image"].as_str().unwrap_or_default();
                self.event(
                    &pod,
                    EventType::Normal,
                    "Pulled",
                    &format!("Container image \"{image}\" already present on machine"),
                );
                self.event(
                    &pod,
                    EventType::Normal,
                    "Created",
                    &format!("Created container: {name}"),
                );
            }
            self.event(
                &pod,
                EventType::Normal,
                "Started",
                &format!("Started container {name}"),
            );
            let pid = process.pid();
            // Reachable by a per-pod kill while it runs.
            let registered = self
                .shared
                .processes
                .register(&self.id.uid, process.killer());
            let probe = Probe::readiness(&spec);
            if let Err(message) = &probe {
                self.event(&pod, EventType::Warning, "Unhealthy", message);
            }
            self.update_container(index, |c| {
                c.state = State::Running {
                    started_at: started_at.clone(),
                };
                c.pid = Some(pid);
                c.probed = !matches!(probe, Ok(None));
                c.probe_ok = false;
            });
            // Probes run while this run of the container lives.
            let _prober = match probe {
                Ok(Some(probe)) => Some(Owned::spawn(self.clone().probe(
                    index,
                    probe,
                    launch.clone(),
                ))),
                _ => None,
            };
            let ran_since = std::time::Instant::now();
            let (exit, stopping) = tokio::select! {
                exit = process.wait() => (exit, false),
                _ = stop.changed() => {
                    let grace = stop.borrow().unwrap_or(Duration::ZERO);
                    self.event(&pod, EventType::Normal, "Killing", &format!("Stopping container {name}"));
                    (process.stop(grace).await, true)
                }
                _ = kill.changed() => (process.kill().await, false),
            };
            drop(registered);
            drop(freezable);
            finished_tx.send_replace(true);
            run += 1;
            // A run that lasted resets the back-off, as the kubelet's does.
            if ran_since.elapsed() > BACKOFF_RESET {
                backoff = BACKOFF_FIRST;
            }
            let terminated = Terminated::new(exit, started_at);
            let policy = pod["spec"]["restartPolicy"].as_str().unwrap_or("Always");
            let restart =
                !stopping && (policy == "Always" || (policy == "OnFailure" && exit.code != 0));
            if !restart {
                return self.update_container(index, |c| {
                    c.state = State::Terminated(terminated);
                    c.done = true;
                });
            }
            let (secs, id) = (backoff.as_secs(), &self.id);
            let message = format!("back-off {secs}s restarting failed container={name} pod={id}");
            self.event(
                &pod,
                EventType::Warning,
                "BackOff",
                &format!("Back-off restarting failed container {name} in pod {id}"),
            );
            self.update_container(index, |c| {
                c.last = Some(terminated);
                c.restarts += 1;
                c.state = waiting("CrashLoopBackOff", Some(message));
            });
            if !self.back_off(index, &mut stop, backoff).await {
                return;
            }
            backoff = (backoff * 2).min(BACKOFF_CAP);
            while !self.node_ready() {
                if !self
                    .back_off(index, &mut stop, Duration::from_millis(500))
                    .await
                {
                    return;
                }
            }
        }
    }

    /// The container's files, its image pulled from its archive first when
    /// it is not on the node yet (and whether it was pulled now), with the
    /// kubelet's events. None when the pull failed: the container waits in
    /// `ErrImagePull`, then `ImagePullBackOff` as the failures go on.
    async fn pull(
        &self,
        pod: &Value,
        spec: &Value,
        index: usize,
        failures: &mut u32,
    ) -> Option<(launch::Files, bool)> {
        let image = spec["image"].as_str().unwrap_or_default().to_string();
        let archive = match self.shared.images.source(&image) {
            ImageSource::Host => return Some((launch::Files::Host, false)),
            ImageSource::Binary(m) => {
                return Some((launch::Files::Binary(m.binary.clone()), false))
            }
            ImageSource::Archive(archive) => archive.clone(),
        };
        let (pulled, fresh) = match self.shared.images.present(&archive, &image) {
            Some(found) => (Ok(found), false),
            None => {
                let message = format!("Pulling image \"{image}\"");
                self.event(pod, EventType::Normal, "Pulling", &message);
                let (shared, reference) = (self.shared.clone(), image.clone());
                let began = std::time::Instant::now();
                let pulled =
                    tokio::task::spawn_blocking(move || shared.images.pull(&archive, &reference))
                        .await
                        .unwrap_or_else(|e| Err(ImageError::Invalid(format!("pulling: {e}"))));
                if let Ok(found) = &pulled {
                    let took = began.elapsed();
                    let message = format!(
                        "Successfully pulled image \"{image}\" in {took:?} ({took:?} including waiting). Image size: {} bytes.",
                        found.size
                    );
                    self.event(pod, EventType::Normal, "Pulled", &message);
                }
                (pulled, true)
            }
        };
        match pulled {
            Ok(found) => {
                *failures = 0;
                let id = format!("{}@{}", super::image::repository(&image), found.digest);
                self.update_container(index, |c| c.image_id = Some(id));
                Some((launch::Files::Image(found), fresh))
            }
            Err(e) => {
                *failures += 1;
                let failed = format!("Failed to pull image \"{image}\": {e}");
                self.event(pod, EventType::Warning, "Failed", &failed);
                let (reason, message) = if *failures == 1 {
                    ("ErrImagePull", failed)
                } else {
                    let back_off = format!("Back-off pulling image \"{image}\"");
                    self.event(pod, EventType::Normal, "BackOff", &back_off);
                    ("ImagePullBackOff", format!("{back_off}: ErrImagePull: {e}"))
                };
                let error = format!("Error: {reason}");
                self.event(pod, EventType::Warning, "Failed", &error);
                self.update_container(index, |c| c.state = waiting(reason, Some(message)));
                None
            }
        }
    }

    /// Runs a container's readiness probe until dropped, flipping its
    /// Ready as the thresholds say.
    async fn probe(self: Arc<Self>, index: usize, probe: Probe, mut exec: runtime::Launch) {
        if let Check::Exec { command } = &probe.check {
            exec.argv = command.clone();
            exec.scratch_dir = exec.scratch_dir.join("probe");
            exec.log_path = PathBuf::from("/dev/null");
            if let Err(e) = std::fs::create_dir_all(&exec.scratch_dir) {
                tracing::warn!("probe scratch dir: {e}");
            }
        }
        tokio::time::sleep(probe.initial_delay).await;
        let (mut successes, mut failures) = (0u32, 0u32);
        loop {
            let ip = self
                .current()
                .and_then(|p| p["status"]["podIP"].as_str().and_then(|ip| ip.parse().ok()));
            let result = match ip {
                Some(ip) => tokio::time::timeout(
                    probe.timeout,
                    probe::run(&probe.check, ip, &exec, &self.shared.freezer),
                )
                .await
                .unwrap_or_else(|_| Err("probe timed out".into())),
                None => Err("the pod has no IP yet".into()),
            };
            let ok = self.model().get(index).is_some_and(|c| c.probe_ok);
            match result {
                Ok(()) => {
                    (successes, failures) = (successes + 1, 0);
                    if !ok && successes >= probe.success_threshold {
                        self.update_container(index, |c| c.probe_ok = true);
                    }
                }
                Err(message) => {
                    (successes, failures) = (0, failures + 1);
                    if let Some(pod) = self.current() {
                        self.event(
                            &pod,
                            EventType::Warning,
                            "Unhealthy",
                            &format!("Readiness probe failed: {message}"),
                        );
                    }
                    if ok && failures >= probe.failure_threshold {
                        self.update_container(index, |c| c.probe_ok = false);
                    }
                }
            }
            tokio::time::sleep(probe.period).await;
        }
    }

    /// Sleeps; false as soon as the pod is being stopped, the container
    /// then marked done.
    async fn back_off(
        &self,
        index: usize,
        stop: &mut watch::Receiver<Option<Duration>>,
        delay: Duration,
    ) -> bool {
        let stopped = tokio::select! {
            () = tokio::time::sleep(delay) => false,
            _ = stop.wait_for(Option::is_some) => true,
        };
        if stopped || stop.borrow().is_some() {
            self.finish(index);
            return false;
        }
        true
    }

    /// The container will not run again.
    fn finish(&self, index: usize) {
        self.update_container(index, |c| c.done = true);
    }
}

/// A node's Ready condition is True.
fn is_ready(node: &Value) -> bool {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}
