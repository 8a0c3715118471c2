//! What a mover pod's log says: JSON progress events and the summary on
//! stdout, human lines on stderr (both in the pod log).

use std::collections::VecDeque;

use mover::stats::{Progress, Summary};
use serde::Deserialize;

/// Lines of human text kept per pod for the record.
pub const TAIL_LINES: usize = 20;

/// One log line, understood.
#[derive(Debug, Clone, PartialEq)]
pub enum MoverLine {
    Progress(Box<Progress>),
    /// A block receiver's `{"event":"checkpoint", ...}`: its verified prefix.
    Checkpoint(BlockSeen),
    Result(Box<MoverResult>),
    /// `mover: listening on ADDR`: the receiver is ready for the sender.
    Listening,
    Text(String),
}

/// A block receiver's checkpoint as its log told it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BlockSeen {
    pub attempt: u32,
    /// Bytes from 0 verified and durable.
    pub verified: u64,
    /// The checkpoint, encoded (base64): the next receiver's `--checkpoint-seed`.
    pub data: String,
}

/// The mover's `{"event":"summary", ...}` line: how the session ended.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MoverResult {
    pub ok: bool,
    pub exit_code: i32,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub retryable: Option<bool>,
    /// The counters, present when the session completed.
    #[serde(skip)]
    pub summary: Option<Summary>,
}

/// Parses one line of a mover pod's log.
pub fn parse_line(line: &str) -> MoverLine {
    let trimmed = line.trim_end();
    if trimmed.starts_with('{') {
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(trimmed) {
            match value.get("event").and_then(|e| e.as_str()) {
                Some("progress") => {
                    if let Ok(p) = serde_json::from_value::<Progress>(value) {
                        return MoverLine::Progress(Box::new(p));
                    }
                }
                Some("checkpoint") => {
                    if let Ok(c) = serde_json::from_value::<BlockSeen>(value) {
                        return MoverLine::Checkpoint(c);
                    }
                }
                Some("summary") => {
                    if let Ok(mut r) = serde_json::from_value::<MoverResult>(value.clone()) {
                        // A failed session's line has no counters.
                        if value.get("files_total").is_some() {
                            r.summary = serde_json::from_value(value).ok();
                        }
                        return MoverLine::Result(Box::new(r));
                    }
                }
                _ => {}
            }
        }
    }
    if trimmed.starts_with("mover: listening on ") {
        return MoverLine::Listening;
    }
    MoverLine::Text(trimmed.to_string())
}

/// Everything worth keeping from one pod's log, fed line by line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogDigest {
    pub progress: Option<Progress>,
    /// The first progress event of the attempt: what it resumed.
    pub first_progress: Option<Progress>,
    pub result: Option<MoverResult>,
    /// The last block checkpoint told.
    pub checkpoint: Option<BlockSeen>,
    pub listening: bool,
    /// The last error the mover printed (`mover: error: ...`, or its
    /// command line parser's `error: ...`), for a mover that ended without
    /// a summary line.
    pub error: Option<LoggedError>,
    tail: VecDeque<String>,
    /// Lines fed so far.
    lines: usize,
}

/// An error line of a mover's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedError {
    /// The message, without `mover: error: ` or `error: `.
    pub message: String,
    /// The mover refused its command line (clap's `error: ...`).
    pub usage: bool,
}

impl LoggedError {
    /// The error a human line tells, if it is one.
    pub fn parse(line: &str) -> Option<LoggedError> {
        let line = line.trim();
        if let Some(message) = line.strip_prefix("mover: error: ") {
            return Some(LoggedError {
                message: message.to_string(),
                usage: false,
            });
        }
        line.strip_prefix("error: ").map(|message| LoggedError {
            message: message.to_string(),
            usage: true,
        })
    }
}

impl LogDigest {
    pub fn feed(&mut self, line: &str) {
        self.lines += 1;
        match parse_line(line) {
            MoverLine::Progress(p) => {
                if self.first_progress.is_none() {
                    self.first_progress = Some((*p).clone());
                }
                self.progress = Some(*p);
            }
            MoverLine::Result(r) => self.result = Some(*r),
            MoverLine::Checkpoint(c) => self.checkpoint = Some(c),
            MoverLine::Listening => {
                self.listening = true;
                self.keep(line);
            }
            MoverLine::Text(t) if !t.is_empty() => {
                if let Some(e) = LoggedError::parse(&t) {
                    self.error = Some(e);
                }
                self.keep(&t);
            }
            MoverLine::Text(_) => {}
        }
    }

    /// A whole log at once.
    pub fn from_text(text: &str) -> LogDigest {
        let mut digest = LogDigest::default();
        text.lines().for_each(|l| digest.feed(l));
        digest
    }

    /// How many lines were fed: of two digests of one log, the longer has
    /// read further.
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// The last human lines (progress events left out).
    pub fn tail(&self) -> Vec<String> {
        self.tail.iter().cloned().collect()
    }

    fn keep(&mut self, line: &str) {
        if self.tail.len() == TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line.trim_end().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_gives_progress_result_and_a_tail_without_json() {
        let log = r#"mover: listening on 10.0.0.7:7000
mover: authenticated session from 10.0.0.9:41234
{"event":"progress","operation_id":"op","attempt":2,"files_done":1,"files_total":3,"bytes_done":100,"bytes_total":300,"listing_done":false,"current":"a","elapsed_ms":5,"rate":20,"eta_s":null,"bytes_prior":64}
{"event":"progress","operation_id":"op","attempt":2,"files_done":3,"files_total":3,"bytes_done":300,"bytes_total":300,"listing_done":true,"current":null,"elapsed_ms":9,"rate":30,"eta_s":0,"bytes_prior":64}
{"event":"summary","ok":true,"exit_code":0,"files_total":3,"entries_total":4,"files_transferred":2,"files_up_to_date":1,"bytes_total":300,"bytes_literal":200,"bytes_matched":0,"bytes_on_wire":400,"dirs":1,"symlinks":0,"hard_links":0,"specials":0,"deleted":0,"files_vanished":0,"files_changed":0,"files_failed":0,"elapsed_ms":9,"operation_id":"op","attempt":2,"files_resumed":0,"bytes_resumed":64,"checkpoint_problem":null,"verify":{"passed":true,"entries":4,"differences":0,"manifest":"ab"}}
mover: 4 entries, 3 files"#;
        let d = LogDigest::from_text(log);
        assert!(d.listening);
        assert_eq!(d.first_progress.as_ref().map(|p| p.bytes_prior), Some(64));
        assert_eq!(d.progress.as_ref().map(|p| p.bytes_done), Some(300));
        let r = d.result.expect("summary");
        assert!(r.ok);
        let s = r.summary.expect("counters");
        assert_eq!(s.verify.map(|v| v.passed), Some(true));
        assert_eq!(s.bytes_literal, 200);
        assert_eq!(d.tail.len(), 3);
        assert!(d.tail.iter().all(|l| !l.starts_with('{')));
    }

    #[test]
    fn a_block_receiver_s_last_checkpoint_is_kept() {
        let log = r#"{"event":"checkpoint","operation_id":"op","attempt":2,"verified":16384,"data":"QUFB"}
{"event":"checkpoint","operation_id":"op","attempt":2,"verified":65536,"data":"QkJC"}
mover: error: interrupted"#;
        let d = LogDigest::from_text(log);
        let c = d.checkpoint.expect("a checkpoint");
        assert_eq!((c.attempt, c.verified, c.data.as_str()), (2, 65536, "QkJC"));
        assert!(d.tail.iter().all(|l| !l.contains("checkpoint")));
    }

    #[test]
    fn a_failed_session_has_no_counters() {
        let line = r#"{"event":"summary","ok":false,"exit_code":10,"error":"connection: reset","retryable":true}"#;
        let MoverLine::Result(r) = parse_line(line) else {
            panic!("not a result")
        };
        assert_eq!((r.ok, r.exit_code, r.retryable), (false, 10, Some(true)));
        assert_eq!(r.error.as_deref(), Some("connection: reset"));
        assert!(r.summary.is_none());
    }

    #[test]
    fn the_mover_s_own_error_line_is_kept() {
        // A usage error: clap's lines, no summary.
        let usage = "error: invalid value '2Q' for '--bwlimit <RATE>': invalid rate \"2Q\" \
                     (examples: 500, 20M, 1.5G)\n\nFor more information, try '--help'.\n";
        let d = LogDigest::from_text(usage);
        assert!(d.result.is_none());
        let e = d.error.expect("the error line");
        assert!(e.usage);
        assert!(
            e.message
                .starts_with("invalid value '2Q' for '--bwlimit <RATE>'"),
            "{}",
            e.message
        );
        // The mover's own error, before any session (no summary either).
        let d = LogDigest::from_text(
            "mover: error: reading the checkpoint: Permission denied (os error 13)\n",
        );
        let e = d.error.expect("the error line");
        assert!(!e.usage);
        assert_eq!(
            e.message,
            "reading the checkpoint: Permission denied (os error 13)"
        );
        assert_eq!(
            LoggedError::parse("mover: listening on 10.0.0.7:7000"),
            None
        );
    }

    #[test]
    fn the_tail_keeps_the_last_lines() {
        let text: Vec<String> = (0..50).map(|i| format!("line {i}")).collect();
        let d = LogDigest::from_text(&text.join("\n"));
        let tail = d.tail();
        assert_eq!(tail.len(), TAIL_LINES);
        assert_eq!(tail.last().map(String::as_str), Some("line 49"));
        assert_eq!(parse_line("{not json"), MoverLine::Text("{not json".into()));
    }
}
