//! The network path of a cross-cluster operation, as recorded: the one in
//! use, and why each one tried before it did not work.

use serde::{Deserialize, Serialize};

use crate::spec::NetworkPath;

/// How the sender reaches the receiver (`status.network`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    /// The path in use; while one is being tried, that one (written
    /// before its Service is changed, so a resumed driver tries it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<NetworkPath>,
    /// Where senders connect on it (`IP:PORT`); none while it is tried,
    /// and on the tunnel, which dials the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Why this path: asked for, or what `auto` found.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The paths given up, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tried: Vec<TriedPath>,
}

impl NetworkStatus {
    /// Whether `path` was given up already.
    pub fn gave_up(&self, path: NetworkPath) -> bool {
        self.tried.iter().any(|t| t.path == path)
    }

    /// Gives `path` up for `why` (once): no path is chosen until the
    /// next one is tried.
    pub fn give_up(&mut self, path: NetworkPath, why: String) {
        if !self.gave_up(path) {
            self.tried.push(TriedPath { path, why });
        }
        self.path = None;
        self.address = None;
        self.reason.clear();
    }

    /// One line for `status OP`: `nodeport 127.11.0.1:30412 (loadbalancer:
    /// no address in 30s)`.
    pub fn summary(&self) -> String {
        let mut line = match self.path {
            Some(path) => path.to_string(),
            None => "choosing".to_string(),
        };
        if let Some(address) = &self.address {
            line.push(' ');
            line.push_str(address);
        }
        if !self.reason.is_empty() {
            line.push_str(&format!(": {}", self.reason));
        }
        for t in &self.tried {
            line.push_str(&format!("; not {}: {}", t.path, t.why));
        }
        line
    }
}

/// A path given up, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriedPath {
    pub path: NetworkPath,
    pub why: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn giving_up_keeps_why_and_clears_the_choice() {
        let mut net = NetworkStatus {
            path: Some(NetworkPath::LoadBalancer),
            ..NetworkStatus::default()
        };
        net.give_up(NetworkPath::LoadBalancer, "no address in 30s".into());
        net.give_up(NetworkPath::LoadBalancer, "again".into());
        assert_eq!(net.tried.len(), 1);
        assert!(net.gave_up(NetworkPath::LoadBalancer));
        assert_eq!(net.path, None);
        net.path = Some(NetworkPath::NodePort);
        net.address = Some("127.11.0.1:30412".into());
        net.reason = "the first load balancer path gave none".into();
        assert_eq!(
            net.summary(),
            "nodeport 127.11.0.1:30412: the first load balancer path gave none; \
             not loadbalancer: no address in 30s"
        );
    }
}
