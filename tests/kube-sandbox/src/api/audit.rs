//! Who made which request: a bounded log of the authenticated identity of
//! every request, as kube-apiserver's audit log records `user` with the
//! verb and URI, and for resource requests the attributes the authorizer
//! decided on (`objectRef` and `verb` in a real audit event) with its
//! answer. Tests read it to see whom the server took a client for and
//! which (group, resource, verb) an identity used or was refused.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::auth::rbac::Attributes;
use crate::auth::Identity;

/// One request.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    pub identity: Identity,
    /// The HTTP method.
    pub method: String,
    /// The request URI's path and query.
    pub uri: String,
    /// For a resource request (not discovery): what was asked and whether
    /// it was allowed.
    pub authorization: Option<Authorization>,
}

/// The authorizer's question and answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    pub attributes: Attributes,
    pub allowed: bool,
}

/// The latest [`AuditLog::CAPACITY`] requests.
#[derive(Default)]
pub struct AuditLog(Mutex<VecDeque<AuditEntry>>);

impl AuditLog {
    pub const CAPACITY: usize = 10_000;

    pub fn record(&self, entry: AuditEntry) {
        let mut log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() == Self::CAPACITY {
            log.pop_front();
        }
        log.push_back(entry);
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> Vec<AuditEntry> {
        let log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_the_latest_requests() {
        let log = AuditLog::default();
        for i in 0..=AuditLog::CAPACITY {
            log.record(AuditEntry {
                identity: Identity::Anonymous,
                method: "GET".into(),
                uri: format!("/api/{i}"),
                authorization: None,
            });
        }
        let entries = log.entries();
        assert_eq!(entries.len(), AuditLog::CAPACITY);
        assert_eq!(entries[0].uri, "/api/1");
    }
}
