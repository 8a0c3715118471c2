//! A VolumeSnapshot's status as the common controller writes it: from its
//! content's status (`updateSnapshotStatus`), or an error
//! (`updateSnapshotErrorStatusWithEvent`).

use serde_json::{json, Value};
use time::OffsetDateTime;

use super::{event, modify, SNAPSHOTS};
use crate::controllers::{name_of, Ctx};
use crate::events::EventType;

/// Sets `status.error` (and `readyToUse: false` with `not_ready`) with a
/// Warning event, unless the same message is already there.
pub(super) fn error_status(
    ctx: &Ctx,
    snapshot: &Value,
    not_ready: bool,
    reason: &str,
    message: &str,
) {
    if snapshot["status"]["error"]["message"] == json!(message) {
        return;
    }
    let error = json!({"time": crate::time::now(), "message": message});
    modify(ctx, SNAPSHOTS, snapshot, |s| {
        if !s["status"].is_object() {
            s["status"] = json!({});
        }
        s["status"]["error"] = error;
        if not_ready {
            s["status"]["readyToUse"] = json!(false);
        }
        true
    });
    event(ctx, snapshot, EventType::Warning, reason, message);
}

/// Copies what the content's status says into the snapshot's: the bound
/// content, readiness, creation time (RFC 3339 from Unix nanoseconds),
/// restore size (a binary quantity from bytes) and the error, with
/// `SnapshotCreated` when the time first appears and `SnapshotReady` when
/// it first becomes ready.
pub(super) fn update_snapshot_status(ctx: &Ctx, snapshot: &Value, content: &Value) {
    let cs = &content["status"];
    let ready = cs["readyToUse"].as_bool().unwrap_or(false);
    let created = cs["creationTime"].as_i64().map(from_unix_nanos);
    let size = cs["restoreSize"].as_i64();
    let error = cs["error"].clone();
    let old = snapshot["status"].clone();
    let mut status = if old.is_object() {
        old.clone()
    } else {
        json!({})
    };
    if status["boundVolumeSnapshotContentName"].is_null() {
        status["boundVolumeSnapshotContentName"] = json!(name_of(content).1);
    }
    if status["creationTime"].is_null() {
        if let Some(created) = &created {
            status["creationTime"] = json!(created);
        }
    }
    if status["readyToUse"] != json!(ready) {
        status["readyToUse"] = json!(ready);
        if ready {
            remove(&mut status, "error");
        }
    }
    let zero = status["restoreSize"].as_str().is_some_and(|q| q == "0");
    if let Some(size) = size.filter(|_| status["restoreSize"].is_null() || zero) {
        status["restoreSize"] = json!(binary_quantity(size));
    }
    if !error.is_null() {
        status["error"] = error;
    } else if old.is_object() && !old["error"].is_null() && cs.is_object() {
        remove(&mut status, "error");
    }
    if status == old {
        return;
    }
    let (ns, name) = name_of(snapshot);
    if old["creationTime"].is_null() && !status["creationTime"].is_null() {
        let message = format!("Snapshot {ns}/{name} was successfully created by the CSI driver.");
        event(
            ctx,
            snapshot,
            EventType::Normal,
            "SnapshotCreated",
            &message,
        );
    }
    if old["readyToUse"] != json!(true) && status["readyToUse"] == json!(true) {
        let message = format!("Snapshot {ns}/{name} is ready to use.");
        event(ctx, snapshot, EventType::Normal, "SnapshotReady", &message);
    }
    modify(ctx, SNAPSHOTS, snapshot, |s| {
        s["status"] = status;
        true
    });
}

fn remove(obj: &mut Value, key: &str) {
    if let Some(map) = obj.as_object_mut() {
        map.remove(key);
    }
}

fn from_unix_nanos(ns: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns))
        .map(crate::time::format)
        .unwrap_or_default()
}

/// `resource.NewQuantity(bytes, BinarySI)` as it prints: the largest
/// power of 1024 that divides it exactly, else the plain number.
pub fn binary_quantity(bytes: i64) -> String {
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes.abs() < 1024 {
        return bytes.to_string();
    }
    let (mut n, mut exp) = (bytes, 0);
    while n % 1024 == 0 && exp < SUFFIXES.len() - 1 {
        n /= 1024;
        exp += 1;
    }
    format!("{n}{}", SUFFIXES[exp])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_print_as_binary_si() {
        assert_eq!(binary_quantity(1 << 30), "1Gi");
        assert_eq!(binary_quantity(1536 * 1024), "1536Ki");
        assert_eq!(binary_quantity(100_000_000), "100000000");
        assert_eq!(binary_quantity(512), "512");
        assert_eq!(
            from_unix_nanos(1_700_000_000_123_456_789),
            "2023-11-14T22:13:20Z"
        );
    }
}
