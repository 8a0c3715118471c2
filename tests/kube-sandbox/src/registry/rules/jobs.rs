//! Jobs (batch/v1) on write: the defaults of `SetDefaults_Job`
//! (pkg/apis/batch/v1/defaults.go), the selector and pod labels the job
//! strategy generates (`generateSelector`, pkg/registry/batch/job/strategy.go)
//! and the validation that matters to the controller
//! (`ValidateJob`, pkg/apis/batch/validation/validation.go).

use serde_json::{json, Map, Value};

use super::create::selector_mismatch;

/// The label the generated selector matches (and the legacy one, which the
/// strategy still puts on pods for old clients).
const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
const LEGACY_CONTROLLER_UID: &str = "controller-uid";
/// The Job's name on its pods, new and legacy.
const JOB_NAME: &str = "batch.kubernetes.io/job-name";
const LEGACY_JOB_NAME: &str = "job-name";

/// `SetDefaults_Job`, then (on create, when the object has a uid and no
/// selector yet) `generateSelector`. Runs again on update, where the
/// selector already stands.
pub fn default_job(obj: &mut Value) {
    let spec = &mut obj["spec"];
    // Both unset: one pod to one completion; parallelism alone: 1.
    if spec["completions"].is_null() && spec["parallelism"].is_null() {
        spec["completions"] = json!(1);
    }
    for (field, value) in [
        ("parallelism", json!(1)),
        ("backoffLimit", json!(6)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
    ] {
        if spec[field].is_null() {
            spec[field] = value;
        }
    }
    if spec["podReplacementPolicy"].is_null() {
        let policy = if spec["podFailurePolicy"].is_null() {
            "TerminatingOrFailed"
        } else {
            "Failed"
        };
        spec["podReplacementPolicy"] = json!(policy);
    }
    // The Job's own labels default to its template's (before the
    // generated ones are added).
    let template_labels = obj["spec"]["template"]["metadata"]["labels"].clone();
    let no_labels = obj["metadata"]["labels"]
        .as_object()
        .is_none_or(Map::is_empty);
    if no_labels && template_labels.as_object().is_some_and(|l| !l.is_empty()) {
        obj["metadata"]["labels"] = template_labels;
    }
    generate_selector(obj);
}

/// `generateSelector`: unless `manualSelector` is true, the pods carry the
/// Job's uid and name and the selector is that uid.
fn generate_selector(obj: &mut Value) {
    let uid = obj["metadata"]["uid"].clone();
    let name = obj["metadata"]["name"].clone();
    let spec = &mut obj["spec"];
    if spec["manualSelector"] == json!(true) || !uid.is_string() || !spec["selector"].is_null() {
        return;
    }
    let labels = &mut spec["template"]["metadata"]["labels"];
    if !labels.is_object() {
        *labels = json!({});
    }
    for (key, value) in [
        (LEGACY_CONTROLLER_UID, &uid),
        (CONTROLLER_UID, &uid),
        (LEGACY_JOB_NAME, &name),
        (JOB_NAME, &name),
    ] {
        labels[key] = value.clone();
    }
    spec["selector"] = json!({"matchLabels": {(CONTROLLER_UID): uid}});
}

/// What `ValidateJob` refuses that the controller relies on.
pub fn job_causes(spec: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    if spec["template"]["spec"]["containers"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        causes.push("spec.template.spec.containers: Required value".to_string());
    }
    match spec["template"]["spec"]["restartPolicy"].as_str() {
        Some("Never" | "OnFailure") => {}
        Some(other) => causes.push(format!(
            "spec.template.spec.restartPolicy: Unsupported value: \"{other}\": supported values: \"OnFailure\", \"Never\""
        )),
        None => causes.push(
            "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
                .to_string(),
        ),
    }
    for field in [
        "parallelism",
        "completions",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        if let Some(n) = spec[field].as_i64().filter(|n| *n < 0) {
            causes.push(format!(
                "spec.{field}: Invalid value: {n}: must be greater than or equal to 0"
            ));
        }
    }
    causes.extend(selector_mismatch(&spec["selector"], &spec["template"]));
    causes
}

/// `ValidateJobSpecUpdate`: the selector, the template (while not
/// suspended) and the completion mode are immutable.
pub fn job_update_problem(old: &Value, new: &Value) -> Option<String> {
    ["selector", "template", "completionMode"]
        .into_iter()
        .find(|f| old[f] != new[f])
        .map(|f| format!("spec.{f}: Invalid value: field is immutable"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_gets_one_completion_and_a_selector_of_its_uid() {
        let mut job = json!({
            "metadata": {"name": "drive", "uid": "u-1"},
            "spec": {"template": {"metadata": {"labels": {"app": "x"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}}},
        });
        default_job(&mut job);
        let spec = &job["spec"];
        assert_eq!(
            (spec["completions"].clone(), spec["parallelism"].clone()),
            (json!(1), json!(1))
        );
        assert_eq!(spec["backoffLimit"], 6);
        assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(
            spec["selector"],
            json!({"matchLabels": {(CONTROLLER_UID): "u-1"}})
        );
        let labels = &spec["template"]["metadata"]["labels"];
        for (k, v) in [
            (CONTROLLER_UID, "u-1"),
            (LEGACY_CONTROLLER_UID, "u-1"),
            (JOB_NAME, "drive"),
            (LEGACY_JOB_NAME, "drive"),
            ("app", "x"),
        ] {
            assert_eq!(labels[k], v, "{k}");
        }
        assert_eq!(job["metadata"]["labels"], json!({"app": "x"}));
        assert!(job_causes(spec).is_empty());
    }

    #[test]
    fn parallelism_alone_leaves_completions_unset_and_manual_selectors_stand() {
        let mut job = json!({"metadata": {"uid": "u"}, "spec": {"parallelism": 3, "manualSelector": true, "selector": {"matchLabels": {"a": "b"}}}});
        default_job(&mut job);
        assert!(job["spec"]["completions"].is_null());
        assert_eq!(job["spec"]["selector"], json!({"matchLabels": {"a": "b"}}));
    }

    #[test]
    fn a_job_s_pods_must_not_restart_always() {
        let spec = json!({"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c"}]}}});
        assert_eq!(
            job_causes(&spec),
            ["spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""]
        );
        let old = json!({"template": {"a": 1}});
        assert!(job_update_problem(&old, &json!({"template": {"a": 2}})).is_some());
    }
}
