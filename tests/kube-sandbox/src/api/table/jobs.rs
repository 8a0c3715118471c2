//! The Job printer, as `printJob` in pkg/printers/internalversion/printers.go
//! (v1.33) prints it: status from the conditions, completions as
//! `succeeded/completions`, the duration from start to completion (or now).

use serde_json::Value;
use time::OffsetDateTime;

use super::workloads::{container_cells, selector_string};
use super::{age, has_condition, human_duration, int, is_true, name, parse_time, text};

pub(super) const JOB_COLUMNS: &str = "Name
    Status|string|Status of the job.
    Completions|string|The number of pods which reached phase Succeeded. The value increases monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed jobs.
    Duration|string|Time required to complete the job.
    Age
    +Containers|string|Names of each container in the template.
    +Images|string|Images referenced by each container in the template.
    +Selector|string|A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";

pub(super) fn job_cells(job: &Value, now: OffsetDateTime) -> Vec<Value> {
    let succeeded = int(job, "status.succeeded");
    let completions = match (
        job["spec"]["completions"].as_i64(),
        job["spec"]["parallelism"].as_i64(),
    ) {
        (Some(c), _) => format!("{succeeded}/{c}"),
        (None, Some(p)) if p > 1 => format!("{succeeded}/1 of {p}"),
        (None, _) => format!("{succeeded}/1"),
    };
    let start = parse_time(text(job, "status.startTime"));
    let end = parse_time(text(job, "status.completionTime"));
    let duration = match (start, end) {
        (None, _) => String::new(),
        (Some(s), None) => human_duration(now - s),
        (Some(s), Some(e)) => human_duration(e - s),
    };
    let (names, images) = container_cells(job);
    vec![
        Value::from(name(job)),
        Value::from(status(job)),
        Value::from(completions),
        Value::from(duration),
        Value::from(age(job, now)),
        Value::from(names),
        Value::from(images),
        Value::from(selector_string(&job["spec"]["selector"])),
    ]
}

/// The first that holds of Complete, Failed, Terminating, Suspended,
/// FailureTarget, SuccessCriteriaMet, else Running.
fn status(job: &Value) -> &'static str {
    let holds = |kind: &str| has_condition(job, kind, is_true);
    if holds("Complete") {
        "Complete"
    } else if holds("Failed") {
        "Failed"
    } else if !job["metadata"]["deletionTimestamp"].is_null() {
        "Terminating"
    } else if holds("Suspended") {
        "Suspended"
    } else if holds("FailureTarget") {
        "FailureTarget"
    } else if holds("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    }
}
