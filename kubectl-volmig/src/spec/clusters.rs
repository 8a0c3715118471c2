//! A migration into another cluster (`--to-context`): which kubeconfig
//! contexts reach each side, and how the sender reaches the receiver.

use serde::{Deserialize, Serialize};

/// The two clusters of a cross-cluster migration, as the client that
/// planned it reached them. Other clients find them by these contexts (in
/// their own kubeconfig, or the file named here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Clusters {
    /// Where the source claim, the sender and its Secret live.
    pub source: ClusterRef,
    /// Where the destination claim, the receiver and the record live.
    pub destination: ClusterRef,
    /// `--network`: how the sender reaches the receiver.
    pub network: NetworkMode,
}

/// One cluster, by its kubeconfig context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRef {
    /// The context's name.
    pub context: String,
    /// The kubeconfig file it was read from, when a flag named one
    /// (`--kubeconfig`, `--to-kubeconfig`); none: the default file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<String>,
    /// Its API server's URL, to tell clusters apart in messages.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server: String,
}

impl std::fmt::Display for ClusterRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "context {}", self.context)?;
        if !self.server.is_empty() {
            write!(f, " ({})", self.server)?;
        }
        Ok(())
    }
}

/// What `--network` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// `loadbalancer`, else `nodeport`, else `tunnel`: the first that works.
    #[default]
    Auto,
    /// The receiver behind a `LoadBalancer` Service, at its address.
    #[value(name = "loadbalancer")]
    LoadBalancer,
    /// The receiver behind a `NodePort` Service, at a destination node's address.
    #[value(name = "nodeport")]
    NodePort,
    /// Through both API servers and this client (port-forward streams).
    Tunnel,
}

impl NetworkMode {
    /// The paths this mode tries, in order.
    pub fn paths(self) -> &'static [NetworkPath] {
        match self {
            NetworkMode::Auto => &[
                NetworkPath::LoadBalancer,
                NetworkPath::NodePort,
                NetworkPath::Tunnel,
            ],
            NetworkMode::LoadBalancer => &[NetworkPath::LoadBalancer],
            NetworkMode::NodePort => &[NetworkPath::NodePort],
            NetworkMode::Tunnel => &[NetworkPath::Tunnel],
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Auto => "auto",
            NetworkMode::LoadBalancer => "loadbalancer",
            NetworkMode::NodePort => "nodeport",
            NetworkMode::Tunnel => "tunnel",
        }
    }
}

/// A way from the sender to the receiver across clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkPath {
    LoadBalancer,
    NodePort,
    Tunnel,
}

impl NetworkPath {
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkPath::LoadBalancer => "loadbalancer",
            NetworkPath::NodePort => "nodeport",
            NetworkPath::Tunnel => "tunnel",
        }
    }

    /// The receiver Service's type on this path.
    pub fn service_type(self) -> &'static str {
        match self {
            NetworkPath::LoadBalancer => "LoadBalancer",
            NetworkPath::NodePort => "NodePort",
            // The tunnel dials the receiver pod itself.
            NetworkPath::Tunnel => "ClusterIP",
        }
    }
}

impl std::fmt::Display for NetworkPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_tries_the_direct_paths_first() {
        assert_eq!(
            NetworkMode::Auto.paths(),
            &[
                NetworkPath::LoadBalancer,
                NetworkPath::NodePort,
                NetworkPath::Tunnel
            ]
        );
        assert_eq!(NetworkMode::NodePort.paths(), &[NetworkPath::NodePort]);
    }

    #[test]
    fn paths_are_recorded_as_the_flag_spells_them() {
        let json = serde_json::to_string(&NetworkMode::LoadBalancer).unwrap();
        assert_eq!(json, "\"loadbalancer\"");
        let json = serde_json::to_string(&NetworkPath::NodePort).unwrap();
        assert_eq!(json, "\"nodeport\"");
        let back: NetworkMode = serde_json::from_str("\"tunnel\"").unwrap();
        assert_eq!(back, NetworkMode::Tunnel);
    }
}
