//! Whether the next attempt reuses the destination, waits for it, empties
//! it or replaces it (issue 20), pure: the trade-off Longhorn makes with a
//! failed replica. Reusing a destination's data is far cheaper than a full
//! copy, so a destination whose node is away is waited for, a while; data
//! that keeps failing attempts is not reused forever; and nothing blocks
//! the copy: when the destination cannot be reused, a fresh one is made.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, PersistentVolume};

use super::objects::UNREACHABLE;
use crate::plan::fit;
use crate::record::{Attempt, AttemptPhase};

/// The node a node-local destination volume is pinned to, as seen now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationNode {
    pub name: String,
    /// `None` while it is up; else why not ("NotReady", "unreachable",
    /// "gone").
    pub away: Option<String>,
}

/// What the decision is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// The destination volume's node, when it is pinned to one.
    pub node: Option<DestinationNode>,
    /// Since when the record says the destination has been unavailable.
    pub unavailable_since: Option<Timestamp>,
    pub now: Timestamp,
    /// Whether an attempt has written to the destination (a receiver ran
    /// on it): a destination never written holds nothing worth waiting for.
    pub written: bool,
    /// The attempts that failed in a row because of the destination's
    /// data or state (since the last wipe or replacement).
    pub destination_failures: u32,
    /// The last attempt was a wipe that failed: the data cannot be removed.
    pub wipe_failed: bool,
    /// `--reuse-wait`.
    pub wait: Duration,
    /// `--reuse-limit`.
    pub limit: u32,
    /// A new destination the user asked for, and how.
    pub asked_new: Option<String>,
}

/// What the next attempt does with the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start the attempt on it: it resumes from the checkpoint.
    Reuse,
    /// Its node is away: spend no attempt; look again later.
    Wait {
        node: String,
        why: String,
        waited: Duration,
        left: Duration,
    },
    /// Start the attempt with a receiver that empties it first.
    Wipe { why: String },
    /// Make a fresh destination claim (the old one is kept, labelled,
    /// until the operation ends) and copy in full.
    Replace { why: String },
}

/// The next attempt's way with the destination.
pub fn decide(f: &Facts) -> Decision {
    if let Some(how) = &f.asked_new {
        return Decision::Replace { why: how.clone() };
    }
    if let Some(DestinationNode {
        name,
        away: Some(why),
    }) = &f.node
    {
        if !f.written {
            return Decision::Replace {
                why: format!(
                    "its node {name} is {why}, and nothing was written to it: nothing to wait for"
                ),
            };
        }
        let since = f.unavailable_since.unwrap_or(f.now);
        let waited = Duration::try_from(f.now.duration_since(since)).unwrap_or_default();
        if waited < f.wait {
            return Decision::Wait {
                node: name.clone(),
                why: why.clone(),
                waited,
                left: f.wait - waited,
            };
        }
        return Decision::Replace {
            why: format!(
                "its node {name} has been {why} for {} (--reuse-wait {})",
                human(waited),
                human(f.wait)
            ),
        };
    }
    if f.wipe_failed {
        return Decision::Replace {
            why: "its data could not be removed".to_string(),
        };
    }
    if f.destination_failures >= f.limit {
        return Decision::Wipe {
            why: format!(
                "{} attempts in a row failed on its data (--reuse-limit {})",
                f.destination_failures, f.limit
            ),
        };
    }
    Decision::Reuse
}

/// The node `volume` is pinned to, as `nodes` show it: `None` for a volume
/// any node may mount; up when some node its affinity allows is Ready and
/// reachable; else away, named by the first node it allows (or by its
/// first `In` value, when no node it allows exists any more).
pub fn destination_node(volume: &PersistentVolume, nodes: &[Node]) -> Option<DestinationNode> {
    let selector = crate::plan::rehome::affinity(volume)?;
    let allowed: Vec<&Node> = nodes
        .iter()
        .filter(|n| fit::selector_matches(selector, n))
        .collect();
    let name = |n: &Node| n.metadata.name.clone().unwrap_or_default();
    if let Some(up) = allowed.iter().find(|n| away(n).is_none()) {
        return Some(DestinationNode {
            name: name(up),
            away: None,
        });
    }
    match allowed.first() {
        Some(n) => Some(DestinationNode {
            name: name(n),
            away: away(n),
        }),
        None => {
            let first = selector.node_selector_terms.iter().find_map(|t| {
                t.match_expressions
                    .iter()
                    .flatten()
                    .find(|r| r.operator == "In")
                    .and_then(|r| r.values.as_ref()?.first().cloned())
            });
            Some(DestinationNode {
                name: first.unwrap_or_else(|| "<none>".into()),
                away: Some("gone (no such node)".into()),
            })
        }
    }
}

/// Whether the node lifecycle controller has tainted `node` unreachable.
pub fn unreachable(node: &Node) -> bool {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
    taints
        .unwrap_or_default()
        .iter()
        .any(|t| t.key == UNREACHABLE)
}

/// Why a node cannot run the receiver now, if it cannot.
fn away(node: &Node) -> Option<String> {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
    if taints
        .unwrap_or_default()
        .iter()
        .any(|t| t.key == UNREACHABLE)
    {
        return Some("unreachable".into());
    }
    (!fit::ready(node)).then(|| "NotReady".into())
}

/// What the attempts so far say of the current destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct History {
    /// A receiver ran on it, or it is a claim the user gave (`--reuse`).
    pub written: bool,
    /// Attempts in a row that failed on its data since it was last
    /// emptied: a transient failure in between counts neither way.
    pub destination_failures: u32,
    /// The last attempt on it was a wipe that could not remove something.
    pub wipe_failed: bool,
}

/// [`History`] from `attempts`: those numbered from `since` (the first on
/// this destination, in this pass) up to, not including, `before`.
pub fn history(attempts: &[Attempt], since: u32, before: u32, users_claim: bool) -> History {
    let on_it: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| a.number >= since && a.number < before)
        .collect();
    let cannot_wipe = |a: &Attempt| {
        a.wipe
            && a.reason
                .as_deref()
                .is_some_and(|r| r.contains("cannot wipe"))
    };
    let ended: Vec<&&Attempt> = on_it.iter().filter(|a| a.phase.is_over()).collect();
    let mut destination_failures = 0;
    for a in ended.iter().rev() {
        if a.phase == AttemptPhase::Succeeded {
            break;
        }
        // A wipe that ran (its receiver got to exit) emptied the data:
        // what failed before it says nothing about what is there now. One
        // that never started changed nothing.
        let wiped = a.wipe && a.receiver.exit_code.is_some() && !cannot_wipe(a);
        if a.phase == AttemptPhase::Failed && a.destination_fault && !cannot_wipe(a) {
            destination_failures += 1;
        }
        if wiped {
            break;
        }
    }
    History {
        written: users_claim || on_it.iter().any(|a| a.receiver.node.is_some()),
        destination_failures,
        wipe_failed: ended
            .last()
            .is_some_and(|a| cannot_wipe(a) && a.destination_fault),
    }
}

/// What `mover inspect`'s JSON says a destination holds, for the plan's
/// reader: a checkpoint of this operation (resumed from); or else how much
/// of the source it holds by the quick check (size and time), when the
/// inspector could read the source beside it, or what it holds at all and
/// why it was not compared (`apart`).
pub fn reusable(inspect: &serde_json::Value, operation: &str, apart: Option<&str>) -> String {
    let bytes = |v: &serde_json::Value| {
        v.as_u64()
            .map_or("?".to_string(), |b| mover::stats::human_bytes(b as f64))
    };
    let cp = &inspect["checkpoint"];
    if inspect["kind"] == "block" && cp.is_null() {
        return format!(
            "a device of {}: its blocks are compared with the source's as they are copied, \
             and those that match are not sent again",
            bytes(&inspect["size"])
        );
    }
    let of = match cp["bytes_total"].is_null() {
        true => String::new(),
        false => format!(" of {}", bytes(&cp["bytes_total"])),
    };
    let whose = cp["operation_id"].as_str().unwrap_or_default();
    let head = match inspect["problem"].as_str() {
        Some(problem) => format!("an unreadable checkpoint ({problem})"),
        None if cp.is_null() => "no checkpoint".to_string(),
        None if whose == operation => {
            return format!(
                "a checkpoint of attempt {}: {}{of} done, resumed from",
                cp["attempt"],
                bytes(&cp["bytes_done"])
            )
        }
        None => format!(
            "a checkpoint of operation {whose} ({}{of} done)",
            bytes(&cp["bytes_done"])
        ),
    };
    let quick = &inspect["quick_check"];
    if quick.is_object() {
        return format!(
            "{head}; by size and time, {} of {} files ({} of {}) are there already and will \
             not be sent again",
            quick["files_up_to_date"],
            quick["files_total"],
            bytes(&quick["bytes_up_to_date"]),
            bytes(&quick["bytes_total"]),
        );
    }
    let held = &inspect["holds"];
    let holds = match held.is_object() {
        true => format!("{} files, {}", held["files"], bytes(&held["bytes"])),
        false => "files".to_string(),
    };
    let why = apart.unwrap_or("the mover did not compare them");
    format!(
        "{head}; it holds {holds}, not compared with the source beforehand ({why}): those \
         that match by size and time are not sent again"
    )
}

/// `3m`, `10m`, `1m30s`, `45s`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 60, s % 60) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            node: Some(DestinationNode {
                name: "node-2".into(),
                away: None,
            }),
            unavailable_since: None,
            now: "2026-11-26T12:00:00Z".parse().expect("time"),
            written: true,
            destination_failures: 0,
            wipe_failed: false,
            wait: Duration::from_secs(600),
            limit: 3,
            asked_new: None,
        }
    }

    fn away(f: &mut Facts, minutes_ago: i64) {
        f.node.as_mut().expect("node").away = Some("NotReady".into());
        f.unavailable_since = Some(f.now - jiff::SignedDuration::from_mins(minutes_ago));
    }

    fn node(name: &str, ready: bool, unreachable: bool) -> Node {
        let taints = if unreachable {
            serde_json::json!([{"key": UNREACHABLE, "effect": "NoSchedule"}])
        } else {
            serde_json::json!([])
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "Unknown" }}]},
        }))
        .expect("node")
    }

    #[test]
    fn the_destination_node_is_the_one_its_volume_is_pinned_to() {
        let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-2"]}]}]}}},
        }))
        .expect("pv");
        let up = [node("node-1", true, false), node("node-2", true, false)];
        let at = |nodes: &[Node]| destination_node(&pv, nodes).expect("pinned");
        assert_eq!(at(&up).away, None);
        assert_eq!(at(&up).name, "node-2");
        let down = [node("node-1", true, false), node("node-2", false, true)];
        assert_eq!(at(&down).away.as_deref(), Some("unreachable"));
        let not_ready = [node("node-2", false, false)];
        assert_eq!(at(&not_ready).away.as_deref(), Some("NotReady"));
        let gone = [node("node-1", true, false)];
        assert_eq!(
            (at(&gone).name.as_str(), at(&gone).away.as_deref()),
            ("node-2", Some("gone (no such node)"))
        );
        let mut anywhere = pv.clone();
        anywhere.spec = None;
        assert_eq!(destination_node(&anywhere, &up), None);
    }

    fn attempt(number: u32, phase: AttemptPhase, fault: bool) -> Attempt {
        let mut a = Attempt {
            number,
            phase,
            destination_fault: fault,
            ..Attempt::default()
        };
        a.receiver.node = Some("node-2".into());
        a.receiver.exit_code = Some(if fault { 23 } else { 10 });
        a
    }

    #[test]
    fn failures_on_the_data_are_counted_in_a_row_since_it_was_emptied() {
        use AttemptPhase::{Failed, Succeeded};
        let mut attempts = vec![
            attempt(1, Failed, true),
            attempt(2, Failed, false), // the link: neither way
            attempt(3, Failed, true),
        ];
        let h = history(&attempts, 1, 4, false);
        assert_eq!(
            (h.written, h.destination_failures, h.wipe_failed),
            (true, 2, false)
        );
        // A success ends the run.
        attempts.insert(0, attempt(0, Succeeded, false));
        attempts[1].number = 1;
        assert_eq!(history(&attempts, 0, 4, false).destination_failures, 2);
        // A wipe that ran empties what failed before it; one that never
        // started changes nothing; one that could not remove is said.
        let mut never_ran = attempt(4, Failed, false);
        never_ran.wipe = true;
        never_ran.receiver.exit_code = None;
        attempts.push(never_ran);
        assert_eq!(history(&attempts, 0, 5, false).destination_failures, 2);
        let mut failed_wipe = attempt(5, Failed, true);
        failed_wipe.wipe = true;
        failed_wipe.receiver.exit_code = Some(11);
        failed_wipe.reason = Some(
            "receiver exited 11 (Error): cannot wipe the destination: cannot remove zzz".into(),
        );
        attempts.push(failed_wipe);
        let h = history(&attempts, 0, 6, false);
        assert!(h.wipe_failed);
        let mut wiped = attempt(6, Failed, true);
        wiped.wipe = true;
        attempts.push(wiped);
        let h = history(&attempts, 0, 7, false);
        assert_eq!((h.destination_failures, h.wipe_failed), (1, false));
    }

    #[test]
    fn only_attempts_on_this_destination_and_pass_count() {
        use AttemptPhase::Failed;
        let attempts = vec![
            attempt(1, Failed, true),
            attempt(2, Failed, true),
            attempt(3, Failed, true),
        ];
        // Replaced (or a new pass) before attempt 3: only attempt 3 counts.
        let h = history(&attempts, 3, 4, false);
        assert_eq!(h.destination_failures, 1);
        // Nothing ran on a fresh destination yet: not written, unless the
        // user gave it.
        let fresh = history(&attempts, 4, 4, false);
        assert!(!fresh.written);
        assert!(history(&attempts, 4, 4, true).written);
    }

    #[test]
    fn what_a_destination_holds_is_said_from_mover_inspect() {
        let ours = serde_json::json!({"root": "/data", "checkpoint": {"operation_id": "op",
            "attempt": 3, "bytes_done": 52428800u64, "bytes_total": 104857600u64}});
        assert_eq!(
            reusable(&ours, "op", None),
            "a checkpoint of attempt 3: 50.0 MiB of 100.0 MiB done, resumed from"
        );
        // Anything else: the quick check's estimate where the source was
        // read beside the destination...
        let mut theirs = ours.clone();
        theirs["quick_check"] = serde_json::json!({"files_total": 5, "bytes_total": 25165824u64,
            "files_up_to_date": 3, "bytes_up_to_date": 7340032u64});
        assert_eq!(
            reusable(&theirs, "other", None),
            "a checkpoint of operation op (50.0 MiB of 100.0 MiB done); by size and time, 3 \
             of 5 files (7.0 MiB of 24.0 MiB) are there already and will not be sent again"
        );
        // ...or what it holds, and why it was not compared.
        let none = serde_json::json!({"root": "/data", "checkpoint": null,
            "holds": {"files": 4, "bytes": 2048}});
        assert_eq!(
            reusable(&none, "op", Some("they are in two namespaces")),
            "no checkpoint; it holds 4 files, 2.0 KiB, not compared with the source \
             beforehand (they are in two namespaces): those that match by size and time are \
             not sent again"
        );
        let bad = serde_json::json!({"root": "/data", "checkpoint": null, "problem": "corrupt checkpoint"});
        assert!(reusable(&bad, "op", None)
            .starts_with("an unreadable checkpoint (corrupt checkpoint); it holds files"));
    }

    #[test]
    fn a_destination_whose_node_is_up_is_reused() {
        assert_eq!(decide(&facts()), Decision::Reuse);
        let mut unpinned = facts();
        unpinned.node = None;
        assert_eq!(decide(&unpinned), Decision::Reuse);
    }

    #[test]
    fn an_away_node_is_waited_for_then_the_destination_is_replaced() {
        let mut f = facts();
        away(&mut f, 3);
        assert_eq!(
            decide(&f),
            Decision::Wait {
                node: "node-2".into(),
                why: "NotReady".into(),
                waited: Duration::from_secs(180),
                left: Duration::from_secs(420),
            }
        );
        // The first look: nothing recorded yet, the wait starts now.
        f.unavailable_since = None;
        assert!(matches!(decide(&f), Decision::Wait { left, .. } if left == f.wait));
        away(&mut f, 10);
        assert_eq!(
            decide(&f),
            Decision::Replace {
                why: "its node node-2 has been NotReady for 10m (--reuse-wait 10m)".into()
            }
        );
    }

    #[test]
    fn a_destination_never_written_is_not_waited_for() {
        let mut f = facts();
        away(&mut f, 0);
        f.written = false;
        assert!(
            matches!(decide(&f), Decision::Replace { why } if why.contains("nothing was written"))
        );
    }

    #[test]
    fn data_that_keeps_failing_is_wiped_then_replaced_if_it_cannot_be() {
        let mut f = facts();
        f.destination_failures = 2;
        assert_eq!(decide(&f), Decision::Reuse);
        f.destination_failures = 3;
        assert_eq!(
            decide(&f),
            Decision::Wipe {
                why: "3 attempts in a row failed on its data (--reuse-limit 3)".into()
            }
        );
        f.wipe_failed = true;
        assert!(matches!(decide(&f), Decision::Replace { .. }));
        // An away node comes first: its data cannot even be looked at.
        away(&mut f, 1);
        assert!(matches!(decide(&f), Decision::Wait { .. }));
        // Unless the user asked for a new destination: no waiting then.
        f.asked_new = Some("asked by resume: --to-node node-3".into());
        assert_eq!(
            decide(&f),
            Decision::Replace {
                why: "asked by resume: --to-node node-3".into()
            }
        );
    }
}
