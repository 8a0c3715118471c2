//! Pod Security admission, as the PodSecurity plugin of a v1.33 API
//! server (k8s.io/pod-security-admission) enforces it with the default
//! configuration: nothing exempt, every mode `privileged` unless the
//! namespace's labels say otherwise.
//!
//! - A pod created in a namespace labelled
//!   `pod-security.kubernetes.io/enforce=baseline|restricted` that breaks
//!   a check of that level ([`checks`]) is refused with 403: `pods "NAME"
//!   is forbidden: violates PodSecurity "restricted:latest": REASON
//!   (DETAIL), ...`. Controllers create pods through the same store, so
//!   theirs are refused the same way.
//! - A pod update is checked again only when it changes a container's
//!   image or the number of containers (`isSignificantPodUpdate`).
//! - A namespace created with an invalid level or version label is 422;
//!   an update only when it changes the label errors.
//! - Workloads with pod templates (Deployment, Job, ...) are only warned
//!   about by the real plugin (`warn` and `audit` modes); the sandbox
//!   sends no warnings, so they pass unchecked.
//!
//! `enforce-version` is parsed and shown in the message as given
//! (`restricted:v1.29`), but every version is evaluated with the latest
//! checks. An invalid level label enforces `restricted`, an invalid
//! version `latest`, as `PolicyToEvaluate` fails closed.

mod checks;
#[cfg(test)]
mod tests;

use serde_json::Value;

pub use checks::{evaluate, Violation};

use crate::status::ApiError;

const ENFORCE: &str = "pod-security.kubernetes.io/enforce";
const ENFORCE_VERSION: &str = "pod-security.kubernetes.io/enforce-version";
/// The mode labels, level then version, validated on namespace writes.
const LABELS: [(&str, bool); 6] = [
    (ENFORCE, true),
    (ENFORCE_VERSION, false),
    ("pod-security.kubernetes.io/audit", true),
    ("pod-security.kubernetes.io/audit-version", false),
    ("pod-security.kubernetes.io/warn", true),
    ("pod-security.kubernetes.io/warn-version", false),
];

/// A Pod Security Standards level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    fn parse(text: &str) -> Option<Level> {
        match text {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// What a namespace enforces: a level, and the policy version as named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enforce {
    pub level: Level,
    /// `latest` or `v1.N`.
    pub version: String,
}

impl std::fmt::Display for Enforce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// The enforce policy of a namespace with these labels (absent ones
/// default to `privileged:latest`).
pub fn enforced(labels: &Value) -> Enforce {
    let level = match labels[ENFORCE].as_str() {
        None => Level::Privileged,
        Some(text) => Level::parse(text).unwrap_or(Level::Restricted),
    };
    let version = labels[ENFORCE_VERSION]
        .as_str()
        .filter(|v| valid_version(v))
        .unwrap_or("latest")
        .to_string();
    Enforce { level, version }
}

/// `latest` or `v1.N` (N without leading zeros).
fn valid_version(text: &str) -> bool {
    if text == "latest" {
        return true;
    }
    let Some(minor) = text.strip_prefix("v1.") else {
        return false;
    };
    !minor.is_empty()
        && minor.bytes().all(|b| b.is_ascii_digit())
        && (minor == "0" || !minor.starts_with('0'))
        && minor.parse::<u32>().is_ok()
}

/// The label errors of a namespace, as `field.Error`s print.
fn label_causes(labels: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    for (label, is_level) in LABELS {
        let Some(value) = labels.get(label) else {
            continue;
        };
        let text = value.as_str().unwrap_or_default();
        let valid = if is_level {
            Level::parse(text).is_some()
        } else {
            valid_version(text)
        };
        if !valid {
            let why = if is_level {
                "must be one of privileged, baseline, restricted"
            } else {
                "must be \"latest\" or \"v1.x\""
            };
            causes.push(format!(
                "metadata.labels[{label}]: Invalid value: {text:?}: {why}"
            ));
        }
    }
    causes
}

/// `ValidateNamespace`: a new namespace's labels must be valid; an update
/// is refused only when it changes which of them are invalid.
pub fn validate_namespace(new: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let causes = label_causes(&new["metadata"]["labels"]);
    let unchanged = old.is_some_and(|old| {
        let before = label_causes(&old["metadata"]["labels"]);
        !before.is_empty() && before == causes
    });
    if causes.is_empty() || unchanged {
        return Ok(());
    }
    Err(ApiError::Invalid {
        kind: "Namespace".to_string(),
        name: new["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        causes,
    })
}

/// `ValidatePod` on create: the pod against its namespace's enforce
/// level. `pod` has its final name (a generated one too).
pub fn admit_pod(namespace: &Value, pod: &Value) -> Result<(), ApiError> {
    let enforce = enforced(&namespace["metadata"]["labels"]);
    let violations = evaluate(enforce.level, &pod["metadata"], &pod["spec"]);
    if violations.is_empty() {
        return Ok(());
    }
    let details: Vec<String> = violations
        .iter()
        .map(|v| match v.detail.as_str() {
            "" => v.reason.clone(),
            detail => format!("{} ({detail})", v.reason),
        })
        .collect();
    Err(ApiError::Denied {
        group: String::new(),
        resource: "pods".to_string(),
        name: pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        message: format!("violates PodSecurity \"{enforce}\": {}", details.join(", ")),
    })
}

/// `isSignificantPodUpdate`: an update that adds or removes containers or
/// changes an image is evaluated again; others never are.
pub fn significant_update(old: &Value, new: &Value) -> bool {
    let images = |spec: &Value, list: &str| -> Vec<Value> {
        spec[list]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["image"].clone())
            .collect()
    };
    let (old, new) = (&old["spec"], &new["spec"]);
    if images(old, "containers") != images(new, "containers")
        || images(old, "initContainers") != images(new, "initContainers")
    {
        return true;
    }
    let ephemeral = |spec: &Value| -> Vec<(Value, Value)> {
        spec["ephemeralContainers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| (c["name"].clone(), c["image"].clone()))
            .collect()
    };
    let before = ephemeral(old);
    ephemeral(new).iter().any(|c| !before.contains(c))
}
