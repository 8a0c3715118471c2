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
        message: Some(format!("{message} (operation {operation})")),
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
