//! Kubernetes Events on the claims a migration touches, so that `kubectl
//! describe pvc` tells what volmig did to them.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, PostParams};
use kube::Client;

use crate::names;
use crate::spec::ClaimRef;

/// `Normal` or `Warning`, as kubectl shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Normal,
    Warning,
}

/// Posts Events about one operation.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    operation: String,
}

impl Recorder {
    pub fn new(client: Client, operation: &str) -> Recorder {
        Recorder {
            client,
            operation: operation.to_string(),
        }
    }

    /// Posts an Event on each claim in `claims`. An Event that cannot be
    /// posted is logged and otherwise ignored: it never stops a migration.
    pub async fn post(&self, claims: &[&ClaimRef], severity: Severity, reason: &str, msg: &str) {
        for claim in claims {
            // kubectl describe matches events by the claim's uid.
            let claims: Api<PersistentVolumeClaim> =
                Api::namespaced(self.client.clone(), &claim.namespace);
            let uid = match claims.get_opt(&claim.name).await {
                Ok(Some(c)) => c.metadata.uid,
                _ => None,
            };
            let event = event(claim, uid, &self.operation, severity, reason, msg);
            let api: Api<Event> = Api::namespaced(self.client.clone(), &claim.namespace);
            if let Err(e) = api.create(&PostParams::default(), &event).await {
                tracing::warn!(claim = %claim, reason, "cannot post an event: {e}");
            }
        }
    }
}

/// The API server refuses an Event with `eventTime` whose message is longer.
const MESSAGE_LIMIT: usize = 1024;

/// `text` cut to at most `limit` bytes, at a character boundary, marked.
fn truncate(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit - "...".len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// The Event object (pure).
pub fn event(
    claim: &ClaimRef,
    uid: Option<String>,
    operation: &str,
    severity: Severity,
    reason: &str,
    message: &str,
) -> Event {
    let now = jiff::Timestamp::now();
    Event {
        metadata: ObjectMeta {
            // client-go's recorder names events `<object>.<unix nanos, hex>`.
            name: Some(format!("{}.{:x}", claim.name, now.as_nanosecond())),
            namespace: Some(claim.namespace.clone()),
            labels: Some(
                [
                    (
                        names::MANAGED_BY_KEY.to_string(),
                        names::MANAGED_BY.to_string(),
                    ),
                    (names::OPERATION_KEY.to_string(), operation.to_string()),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            name: Some(claim.name.clone()),
            namespace: Some(claim.namespace.clone()),
            uid,
            ..ObjectReference::default()
        },
        reason: Some(reason.to_string()),
        message: Some(truncate(
            &format!("{message} (operation {operation})"),
            MESSAGE_LIMIT,
        )),
        type_: Some(match severity {
            Severity::Normal => "Normal".into(),
            Severity::Warning => "Warning".into(),
        }),
        source: Some(EventSource {
            component: Some(names::MANAGED_BY.into()),
            host: None,
        }),
        reporting_component: Some(names::MANAGED_BY.into()),
        reporting_instance: Some(names::MANAGED_BY.into()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        action: Some(reason.to_string()),
        count: Some(1),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_valid_for_the_api_server() {
        let claim = ClaimRef {
            namespace: "ns".into(),
            name: "data".into(),
        };
        let long = "é".repeat(2000);
        let e = event(
            &claim,
            Some("uid-1".into()),
            "op-1",
            Severity::Warning,
            "AttemptFailed",
            &long,
        );
        let message = e.message.expect("message");
        assert!(
            message.len() <= MESSAGE_LIMIT && message.ends_with("..."),
            "{}",
            message.len()
        );
        assert_eq!(e.involved_object.uid.as_deref(), Some("uid-1"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        let name = e.metadata.name.expect("name");
        assert!(
            name.starts_with("data.") && name.len() > "data.".len(),
            "{name}"
        );
        assert_eq!(truncate("short", 10), "short");
    }
}
