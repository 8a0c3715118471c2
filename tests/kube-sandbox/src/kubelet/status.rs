//! A pod's status as the kubelet reports it, built from what its
//! containers are doing: phase, conditions, container statuses.

use serde_json::{json, Value};

use crate::controllers::set_condition;

/// What one container is doing.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: String,
    },
    Terminated(Terminated),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Terminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub started_at: String,
    pub finished_at: String,
}

impl Terminated {
    pub fn new(exit: super::runtime::Exit, started_at: String) -> Terminated {
        Terminated {
            exit_code: exit.code,
            signal: exit.signal,
            reason: if exit.code == 0 { "Completed" } else { "Error" }.to_string(),
            started_at,
            finished_at: crate::time::now(),
        }
    }

    fn to_json(&self) -> Value {
        let mut t = json!({
            "exitCode": self.exit_code,
            "reason": self.reason,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
        });
        if let Some(signal) = self.signal {
            t["signal"] = json!(signal);
        }
        t
    }
}

#[derive(Debug, Clone)]
pub struct Container {
    pub name: String,
    pub image: String,
    /// The image's ID once pulled from an archive: `repo@sha256:...`.
    pub image_id: Option<String>,
    pub state: State,
    pub last: Option<Terminated>,
    pub restarts: u32,
    pub pid: Option<u32>,
    /// Set once the container will not run again (finished under its
    /// restart policy, or the pod is being killed).
    pub done: bool,
    /// Has a readiness probe: Ready only while `probe_ok`.
    pub probed: bool,
    pub probe_ok: bool,
}

impl Container {
    pub fn new(name: &str, image: &str) -> Container {
        Container {
            name: name.to_string(),
            image: image.to_string(),
            image_id: None,
            state: waiting("ContainerCreating", None),
            last: None,
            restarts: 0,
            pid: None,
            done: false,
            probed: false,
            probe_ok: false,
        }
    }

    /// Running, and passing its readiness probe if it has one.
    pub fn is_ready(&self) -> bool {
        matches!(self.state, State::Running { .. }) && (!self.probed || self.probe_ok)
    }

    fn to_json(&self) -> Value {
        let state = match &self.state {
            State::Waiting { reason, message } => {
                let mut w = json!({"reason": reason});
                if let Some(m) = message {
                    w["message"] = json!(m);
                }
                json!({"waiting": w})
            }
            State::Running { started_at } => json!({"running": {"startedAt": started_at}}),
            State::Terminated(t) => json!({"terminated": t.to_json()}),
        };
        let running = matches!(self.state, State::Running { .. });
        let mut status = json!({
            "name": self.name,
            "image": self.image,
            "imageID": self.image_id.clone().unwrap_or_else(|| format!("sandbox://{}", self.image)),
            "state": state,
            "lastState": self.last.as_ref().map_or(json!({}), |t| json!({"terminated": t.to_json()})),
            "ready": self.is_ready(),
            "started": running,
            "restartCount": self.restarts,
        });
        if let Some(pid) = self.pid {
            status["containerID"] = json!(format!("sandbox://{pid}"));
        }
        status
    }
}

pub fn waiting(reason: &str, message: Option<String>) -> State {
    State::Waiting {
        reason: reason.to_string(),
        message,
    }
}

/// The pod phase from its containers, as the kubelet computes it.
pub fn phase(containers: &[Container]) -> &'static str {
    let all_done = containers
        .iter()
        .all(|c| c.done && matches!(c.state, State::Terminated(_)));
    if all_done && !containers.is_empty() {
        let failed = containers
            .iter()
            .any(|c| matches!(&c.state, State::Terminated(t) if t.exit_code != 0));
        return if failed { "Failed" } else { "Succeeded" };
    }
    let started = containers
        .iter()
        .any(|c| !matches!(c.state, State::Waiting { .. }) || c.restarts > 0 || c.last.is_some());
    if started {
        "Running"
    } else {
        "Pending"
    }
}

/// Writes the containers' statuses, the phase and the conditions into a
/// pod's `status` (other fields, like podIP, are kept).
pub fn apply(pod: &mut Value, containers: &[Container]) -> bool {
    let before = pod["status"].clone();
    let phase = phase(containers);
    let all_ready = containers.iter().all(Container::is_ready);
    let ready = if all_ready && !containers.is_empty() {
        "True"
    } else {
        "False"
    };
    pod["status"]["phase"] = json!(phase);
    pod["status"]["containerStatuses"] = json!(containers
        .iter()
        .map(Container::to_json)
        .collect::<Vec<_>>());
    let started = !matches!(phase, "Pending") || containers.iter().any(|c| c.pid.is_some());
    let sandbox_ready = if started { "True" } else { "False" };
    for (kind, status) in [
        ("PodReadyToStartContainers", sandbox_ready),
        ("Initialized", "True"),
        ("ContainersReady", ready),
        ("Ready", ready),
    ] {
        let mut condition = json!({"type": kind, "status": status});
        if status == "False" && matches!(kind, "ContainersReady" | "Ready") {
            condition["reason"] = json!(if phase == "Succeeded" || phase == "Failed" {
                "PodCompleted"
            } else {
                "ContainersNotReady"
            });
        }
        set_condition(pod, condition);
    }
    pod["status"] != before
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::runtime::Exit;

    fn finished(code: i32) -> Container {
        let mut c = Container::new("c", "busybox");
        c.state = State::Terminated(Terminated::new(
            Exit { code, signal: None },
            crate::time::now(),
        ));
        c.done = true;
        c
    }

    #[test]
    fn phases_follow_the_containers() {
        assert_eq!(phase(&[Container::new("c", "i")]), "Pending");
        let mut running = Container::new("c", "i");
        running.state = State::Running {
            started_at: crate::time::now(),
        };
        assert_eq!(phase(&[running.clone(), finished(0)]), "Running");
        assert_eq!(phase(&[finished(0), finished(0)]), "Succeeded");
        assert_eq!(phase(&[finished(0), finished(2)]), "Failed");
        let mut restarting = finished(1);
        restarting.done = false;
        assert_eq!(phase(&[restarting]), "Running");
    }

    #[test]
    fn ready_only_when_every_container_runs() {
        let mut pod = json!({"status": {}});
        let mut c = Container::new("c", "i");
        apply(&mut pod, std::slice::from_ref(&c));
        let ready = |pod: &Value| {
            pod["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Ready")
                .unwrap()["status"]
                .clone()
        };
        assert_eq!(ready(&pod), "False");
        c.state = State::Running {
            started_at: crate::time::now(),
        };
        c.pid = Some(42);
        assert!(apply(&mut pod, &[c.clone()]));
        assert_eq!(ready(&pod), "True");
        assert_eq!(
            pod["status"]["containerStatuses"][0]["containerID"],
            "sandbox://42"
        );
        assert!(
            !apply(&mut pod, &[c]),
            "a second identical apply changes nothing"
        );
    }
}
