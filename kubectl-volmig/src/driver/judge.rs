//! Deciding an attempt's fate from what its two pods show (pure).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::logs::{LoggedError, MoverResult};

/// How long one side may keep running after the other failed: the survivor
/// notices the dropped connection within seconds and writes its final
/// checkpoint.
pub const SURVIVOR_GRACE: Duration = Duration::from_secs(20);

/// How long a pod's last log lines may take to be read after it ended:
/// whether exit 24 is a live source (a summary with counters) or a failure
/// depends on them.
pub const LOG_GRACE: Duration = Duration::from_secs(10);

/// A mover pod as the driver sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodView {
    pub name: String,
    pub role: &'static str,
    pub exists: bool,
    pub phase: Option<String>,
    pub node: Option<String>,
    pub running: bool,
    pub exit_code: Option<i32>,
    /// Terminated or waiting reason.
    pub reason: Option<String>,
    pub message: Option<String>,
    /// Why the scheduler could not place it yet.
    pub unschedulable: Option<String>,
    /// When its container finished.
    pub finished_at: Option<jiff::Timestamp>,
}

/// The role of the in-cluster driver's pods in a [`PodView`].
pub const DRIVER_ROLE: &str = "driver";

impl PodView {
    pub fn new(role: &'static str, name: &str, pod: Option<&Pod>) -> PodView {
        PodView::of_container(role, name, pod, crate::resources::CONTAINER)
    }

    /// The view of `pod` through its container `container` (the driver
    /// pod's is not the movers').
    pub fn of_container(
        role: &'static str,
        name: &str,
        pod: Option<&Pod>,
        container: &str,
    ) -> PodView {
        let mut view = PodView {
            name: name.to_string(),
            role,
            exists: pod.is_some(),
            ..PodView::default()
        };
        let Some(pod) = pod else { return view };
        view.node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let Some(status) = &pod.status else {
            return view;
        };
        view.phase = status.phase.clone();
        view.unschedulable = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .map(|c| c.message.clone().unwrap_or_default());
        // By name: injected sidecars sort before `mover`.
        let container = status
            .container_statuses
            .iter()
            .flatten()
            .find(|c| c.name == container);
        if let Some(state) = container.and_then(|c| c.state.as_ref()) {
            if let Some(t) = &state.terminated {
                view.exit_code = Some(t.exit_code);
                view.finished_at = t.finished_at.as_ref().map(|t| t.0);
                view.reason = t.reason.clone();
                view.message = t.message.clone();
            } else if let Some(w) = &state.waiting {
                view.reason = w.reason.clone();
                view.message = w.message.clone();
            } else if state.running.is_some() {
                view.running = true;
            }
        }
        // A pod that failed as a whole (evicted, node shut down, ...) has
        // no terminated container to tell it.
        if view.exit_code.is_none() {
            match status.phase.as_deref() {
                Some("Failed") => {
                    view.exit_code = Some(-1);
                    view.running = false;
                    view.reason = status.reason.clone().or(view.reason.take());
                    view.message = status.message.clone().or(view.message.take());
                }
                Some("Succeeded") => view.exit_code = Some(0),
                _ => {}
            }
        }
        view
    }

    fn finished(&self) -> bool {
        self.exit_code.is_some()
    }

    fn started(&self) -> bool {
        self.running || self.finished()
    }

    /// A waiting state no retry fixes by itself.
    pub fn stuck(&self) -> Option<String> {
        let reason = self.reason.as_deref()?;
        if self.finished() {
            return None;
        }
        let detail = self.message.as_deref().unwrap_or("");
        let advice = match reason {
            // ErrImagePull alone may be a registry hiccup the kubelet retries.
            "ImagePullBackOff" | "InvalidImageName" if self.role == DRIVER_ROLE => {
                "check --driver-image and that the nodes can pull it"
            }
            "ImagePullBackOff" | "InvalidImageName" => {
                "check --mover-image and that the nodes can pull it"
            }
            "CreateContainerConfigError" | "CreateContainerError" | "RunContainerError" => {
                "the container cannot start: check the pod's events (kubectl describe pod)"
            }
            _ => return None,
        };
        Some(format!(
            "{} {} cannot start: {reason}{}{detail}; {advice}",
            self.role,
            self.name,
            if detail.is_empty() { "" } else { ": " }
        ))
    }
}

/// What to do with an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Keep watching.
    Wait,
    /// Both sides completed. With `live_source`, the source changed during
    /// the copy (exit 24): the destination holds what was sent, which is a
    /// copy's best, not a failure that another attempt would mend.
    Succeeded { live_source: bool },
    Failed {
        reason: String,
        retryable: bool,
        /// The receiver failed on the destination's data or state.
        destination: bool,
    },
}

impl Verdict {
    /// A failure as the attempt's end: phase Failed, why, and whether
    /// another attempt may mend it. `None` for any other verdict.
    pub(super) fn failure(self) -> Option<super::run::AttemptEnd> {
        match self {
            Verdict::Failed {
                reason,
                retryable,
                destination,
            } => Some(super::run::AttemptEnd {
                phase: crate::record::AttemptPhase::Failed,
                reason: Some(reason),
                retryable: Some(retryable),
                destination_fault: destination,
            }),
            _ => None,
        }
    }
}

/// An attempt's pods, their mover results, and how long things have taken.
#[derive(Debug, Clone, Default)]
pub struct AttemptView<'a> {
    pub receiver: PodView,
    pub receiver_result: Option<&'a MoverResult>,
    /// `None` until the sender is created.
    pub sender: Option<PodView>,
    pub sender_result: Option<&'a MoverResult>,
    /// The last error line each mover printed, for one that ended without
    /// a summary (a usage error).
    pub receiver_error: Option<&'a LoggedError>,
    pub sender_error: Option<&'a LoggedError>,
    /// Since the attempt's first pod (the receiver) was created.
    pub age: Duration,
    /// Since the sender was created.
    pub sender_age: Duration,
    /// Since one side finished while the other had not.
    pub one_side_finished_for: Duration,
    /// How long a pod may take to start.
    pub start_timeout: Duration,
}

/// Decides from the pods' states; see [`Verdict`].
pub fn judge(view: &AttemptView<'_>) -> Verdict {
    let sides: Vec<Side<'_>> = std::iter::once((
        &view.receiver,
        Said {
            result: view.receiver_result,
            error: view.receiver_error,
        },
    ))
    .chain(view.sender.as_ref().map(|s| {
        (
            s,
            Said {
                result: view.sender_result,
                error: view.sender_error,
            },
        )
    }))
    .collect();
    for (pod, _) in &sides {
        if !pod.exists {
            return Verdict::Failed {
                reason: format!(
                    "{} pod {} was deleted before it finished",
                    pod.role, pod.name
                ),
                retryable: true,
                destination: false,
            };
        }
        if let Some(reason) = pod.stuck() {
            return Verdict::Failed {
                reason,
                retryable: false,
                destination: false,
            };
        }
    }
    // Exit 24 from a session that completed (its summary has the counters)
    // is a live source, not a failure.
    let live = |(p, said): &&Side<'_>| {
        p.exit_code == Some(24) && said.result.is_some_and(|r| r.summary.is_some())
    };
    let live_source = sides.iter().any(|s| live(&s));
    let unread = sides
        .iter()
        .any(|(p, said)| p.exit_code == Some(24) && said.result.is_none());
    let all_done = view.sender.is_some() && sides.iter().all(|(p, _)| p.finished());
    if all_done && unread && view.one_side_finished_for < LOG_GRACE {
        return Verdict::Wait;
    }
    let failed: Vec<_> = sides
        .iter()
        .filter(|s| s.0.exit_code.is_some_and(|c| c != 0) && !live(s))
        .collect();
    if let Some((pod, said)) = most_telling(&failed) {
        if all_done || view.one_side_finished_for >= SURVIVOR_GRACE {
            return failure(pod, *said);
        }
        return Verdict::Wait;
    }
    if all_done {
        return Verdict::Succeeded { live_source };
    }
    // One side finished cleanly, the other goes on: it should have ended
    // with the session.
    if view.one_side_finished_for >= SURVIVOR_GRACE * 3 {
        if let Some((pod, _)) = sides.iter().find(|(p, _)| !p.finished()) {
            return Verdict::Failed {
                reason: format!(
                    "{} {} still runs {}s after the other side finished",
                    pod.role,
                    pod.name,
                    view.one_side_finished_for.as_secs()
                ),
                retryable: true,
                destination: false,
            };
        }
    }
    // Each pod's start timeout counts from its own creation.
    let late = |p: &PodView| {
        let age = if p.role == "sender" {
            view.sender_age
        } else {
            view.age
        };
        !p.started() && age >= view.start_timeout
    };
    if let Some((pod, _)) = sides.iter().find(|(p, _)| late(p)) {
        let why = pod
            .unschedulable
            .clone()
            .filter(|m| !m.is_empty())
            .or_else(|| pod.reason.clone())
            .unwrap_or_else(|| "no reason given".into());
        return Verdict::Failed {
            reason: format!(
                "{} pod {} did not start within {}s: {why}",
                pod.role,
                pod.name,
                view.start_timeout.as_secs()
            ),
            retryable: true,
            destination: false,
        };
    }
    Verdict::Wait
}

/// What a mover said about its end: its summary line, else its last error
/// line.
#[derive(Debug, Clone, Copy)]
struct Said<'a> {
    result: Option<&'a MoverResult>,
    error: Option<&'a LoggedError>,
}

type Side<'a> = (&'a PodView, Said<'a>);

/// Of the failed sides, the one whose error explains the failure: a side
/// that failed on its own (not "the peer failed", 13, or a dropped
/// connection, 10) first, and of those one whose summary says why (the
/// sender that could not read files, over the receiver that only counted
/// them).
fn most_telling<'a, 'b>(failed: &'b [&'b Side<'a>]) -> Option<&'b Side<'a>> {
    let rank = |(p, said): &&Side<'_>| {
        let code = match p.exit_code {
            Some(13) => 2,
            Some(10) => 1,
            _ => 0,
        };
        let silent = said.result.is_none_or(|r| r.error.is_none());
        (code, silent)
    };
    failed.iter().copied().min_by_key(|s| rank(s))
}

/// A failed side's exit in words: the mover's own error (its summary's,
/// else its last error line, else the container's termination message),
/// what the exit code means when it said nothing, and what to do.
fn failure(pod: &PodView, said: Said<'_>) -> Verdict {
    let code = pod.exit_code.unwrap_or(-1);
    let result = said.result;
    let summary_error = result.and_then(|r| r.error.clone());
    let logged = said.error.filter(|_| summary_error.is_none());
    let error = summary_error
        .or_else(|| logged.map(|e| e.message.clone()))
        .or_else(|| pod.message.clone())
        .unwrap_or_else(|| describe_exit(code).to_string());
    let retryable = result
        .and_then(|r| r.retryable)
        .unwrap_or_else(|| exit_code_retryable(code));
    let reason = pod.reason.as_deref().unwrap_or("Error");
    let mut text = format!("{} exited {code} ({reason}): {error}", pod.role);
    let usage = logged.filter(|e| e.usage).map(|_| USAGE_ADVICE);
    if let Some(advice) = usage.or_else(|| advice(code, &error)) {
        text.push_str("; ");
        text.push_str(advice);
    }
    // The receiver's own local I/O error, or entries it could not write,
    // replace or verify: the destination's data or state, not the link.
    let destination = pod.role == "receiver" && matches!(code, 11 | 23);
    Verdict::Failed {
        reason: text,
        retryable,
        destination,
    }
}

/// Whether a mover exit code (or a signal's 128+N) is worth another attempt
/// when the mover said nothing itself.
pub fn exit_code_retryable(code: i32) -> bool {
    !matches!(code, 1 | 2 | 3 | 12)
}

fn describe_exit(code: i32) -> &'static str {
    match code {
        137 => "killed (SIGKILL: out of memory, node failure or a manual kill)",
        143 => "terminated (SIGTERM)",
        23 => "some entries could not be read or written, or verification found differences (see the log tail)",
        24 => "source files vanished or changed while they were read (is the app writing?)",
        _ => "no error message in the log",
    }
}

/// What to do about a mover that refused its command line.
const USAGE_ADVICE: &str = "the mover refused the command line volmig gave it: check the \
    transfer options (such as --bwlimit) and that --mover-image is the mover of this plugin's version";

/// What the user can do about a failure no retry fixes.
fn advice(code: i32, error: &str) -> Option<&'static str> {
    let has = |s: &str| error.contains(s);
    Some(match code {
        3 => "the operation's key material was refused: run `kubectl volmig cleanup` for it and migrate again",
        2 => "the two movers do not speak the same protocol: use one --mover-image for both",
        11 if has("No space") || has("ENOSPC") || has("quota") => {
            "the destination is full: expand its claim if the storage class allows, or delete it \
             (kubectl volmig cleanup, then kubectl delete pvc) and migrate again with a larger --to-size"
        }
        11 if has("ermission denied") || has("not permitted") => {
            "permission denied: baseline movers need root with the capabilities listed in \
             docs/security.md; restricted ones write only where the app's user may"
        }
        11 if has("Read-only") => "the destination volume is read-only",
        23 if has("could not be read as uid") => {
            "the sender runs as the app's identity (--security restricted) or on storage that \
             denies root (NFS root squash), and may not read them: make them readable to that \
             identity, or use --security baseline in a namespace that allows it"
        }
        1 if has("stale") || has("older") => {
            "a mover pod of an earlier attempt is still running: delete it \
             (kubectl delete pods -l volmig.io/operation=<operation>) and resume"
        }
        _ => return None,
    })
}
