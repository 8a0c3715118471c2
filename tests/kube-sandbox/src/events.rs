//! Events: what the controllers and kubelets did, as `v1` Event objects
//! that `kubectl describe` and `kubectl get events` show. A repeat of the
//! same reason and message for the same object bumps `count` and
//! `lastTimestamp`, as the client-go recorder's aggregation does.

use serde_json::{json, Value};

use crate::registry;
use crate::store::{generate_suffix, Store};

/// A repeated event is counted again after this long.
const REPEAT_AFTER_SECONDS: i64 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Who reports: `default-scheduler`, `kubelet` (with its node), ...
#[derive(Debug, Clone)]
pub struct Source {
    pub component: &'static str,
    pub host: Option<String>,
}

impl Source {
    pub fn new(component: &'static str) -> Source {
        Source {
            component,
            host: None,
        }
    }

    pub fn on(component: &'static str, host: &str) -> Source {
        Source {
            component,
            host: Some(host.to_string()),
        }
    }
}

/// Records an event about `object`. Failures are logged, never returned:
/// an event that could not be written must not stop a controller.
pub fn record(
    store: &Store,
    source: &Source,
    object: &Value,
    kind: EventType,
    reason: &str,
    message: &str,
) {
    let meta = &object["metadata"];
    let namespace = meta["namespace"].as_str().unwrap_or("default").to_string();
    let uid = meta["uid"].clone();
    let events = registry::get("events");
    let now = crate::time::now();
    let (existing, _) = store.list(events, Some(&namespace));
    let same = existing.iter().find(|e| {
        e["involvedObject"]["uid"] == uid
            && e["reason"] == json!(reason)
            && e["message"] == json!(message)
    });
    if let Some(same) = same {
        // Controllers here re-run on every write: count a repeat only once
        // the last one is a while old, or a pending condition would write
        // an event bump on every pass.
        let last = same["lastTimestamp"].as_str().and_then(crate::time::parse);
        let fresh = last.is_some_and(|t| {
            time::OffsetDateTime::now_utc() - t < time::Duration::seconds(REPEAT_AFTER_SECONDS)
        });
        if fresh {
            return;
        }
        let name = same["metadata"]["name"].as_str().unwrap_or_default();
        let bumped = store.modify(events, &namespace, name, |e| {
            e["count"] = json!(e["count"].as_i64().unwrap_or(1) + 1);
            e["lastTimestamp"] = json!(now);
            true
        });
        if let Err(e) = bumped {
            tracing::warn!("event {reason} on {name}: {e}");
        }
        return;
    }
    let name = format!(
        "{}.{}",
        meta["name"].as_str().unwrap_or("object"),
        generate_suffix()
    );
    let mut source_obj = json!({"component": source.component});
    if let Some(host) = &source.host {
        source_obj["host"] = json!(host);
    }
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "kind": object["kind"],
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": uid,
            "apiVersion": object["apiVersion"],
            "resourceVersion": meta["resourceVersion"],
        },
        "reason": reason,
        "message": message,
        "source": source_obj,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "type": kind.as_str(),
        "reportingComponent": source.component,
        "reportingInstance": source.host.clone().unwrap_or_default(),
    });
    if let Err(e) = store.create(events, &namespace, event) {
        tracing::warn!("event {reason}: {e}");
    }
}
