//! What a run reports: JSON events on stdout, a human line on stderr, the exit code.

use std::sync::{Arc, Mutex};

use mover::session::{ProgressFn, Removed, SessionError};
use mover::stats::{Progress, Summary};
use serde::Serialize;

use crate::args::{OutputArgs, ProgressMode};

/// A JSON line on stdout: `{"event": ..., fields...}`.
#[derive(Serialize)]
struct Event<'a, T: Serialize> {
    event: &'a str,
    #[serde(flatten)]
    data: T,
}

#[derive(Serialize)]
struct Outcome<'a> {
    ok: bool,
    exit_code: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retryable: Option<bool>,
    #[serde(flatten)]
    summary: Option<&'a Summary>,
    /// What `receive --wipe` removed, in the first session's summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    wiped: Option<Removed>,
}

pub fn emit<T: Serialize>(event: &str, data: T) {
    if let Ok(line) = serde_json::to_string(&Event { event, data }) {
        mover::stdio::out(&format!("{line}\n"));
    }
}

pub fn progress_sink(mode: ProgressMode) -> Option<ProgressFn> {
    (mode == ProgressMode::Json).then(|| {
        let last = Arc::new(Mutex::new(None::<Progress>));
        Arc::new(move |p: &Progress| {
            // Identical consecutive events carry no news.
            if let Ok(mut last) = last.lock() {
                if last.as_ref() == Some(p) {
                    return;
                }
                *last = Some(p.clone());
            }
            emit("progress", p);
        }) as ProgressFn
    })
}

/// With `--progress json`: each block checkpoint told as a JSON line,
/// `{"event":"checkpoint","operation_id":..,"attempt":..,"verified":N,"data":"<base64>"}`,
/// which a driver gives the next attempt's receiver as `--checkpoint-seed`.
pub fn checkpoint_sink(mode: ProgressMode) -> Option<mover::session::CheckpointFn> {
    use base64::Engine;
    (mode == ProgressMode::Json).then(|| {
        Arc::new(
            |cp: &mover::block::checkpoint::BlockCheckpoint, bytes: &[u8]| {
                let line = serde_json::json!({
                    "event": "checkpoint",
                    "operation_id": cp.operation_id,
                    "attempt": cp.attempt,
                    "verified": cp.verified,
                    "data": base64::engine::general_purpose::STANDARD.encode(bytes),
                });
                mover::stdio::out(&format!("{line}\n"));
            },
        ) as mover::session::CheckpointFn
    })
}

/// Reports a session's end and returns the exit code.
pub fn finish(result: Result<Summary, SessionError>, output: &OutputArgs) -> u8 {
    finish_wiped(result, output, None)
}

/// [`finish`], with what the wipe before the session removed.
pub fn finish_wiped(
    result: Result<Summary, SessionError>,
    output: &OutputArgs,
    wiped: Option<Removed>,
) -> u8 {
    match result {
        Ok(summary) => {
            let code = summary.exit_code();
            emit(
                "summary",
                Outcome {
                    ok: code == 0,
                    exit_code: code,
                    error: None,
                    retryable: None,
                    summary: Some(&summary),
                    wiped,
                },
            );
            if !output.quiet {
                say!("mover: {}", summary.human());
            }
            code as u8
        }
        Err(e) => {
            let code = e.exit_code();
            let msg = e.to_string();
            emit(
                "summary",
                Outcome {
                    ok: false,
                    exit_code: code,
                    error: Some(&msg),
                    retryable: Some(e.is_retryable()),
                    summary: None,
                    wiped,
                },
            );
            say!("mover: error: {msg}");
            code as u8
        }
    }
}
