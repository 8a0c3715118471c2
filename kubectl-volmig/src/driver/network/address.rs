//! Where a sender in another cluster connects, read off the receiver's
//! Service and the destination's nodes (pure).

use k8s_openapi::api::core::v1::{Node, Service};

use crate::names;
use crate::record::network::NetworkStatus;
use crate::spec::{NetworkMode, NetworkPath};

/// The path to try now: the one being tried, else the first of `mode`'s
/// not given up yet.
pub fn next_path(mode: NetworkMode, status: &NetworkStatus) -> Option<NetworkPath> {
    if let Some(path) = status.path {
        return Some(path);
    }
    mode.paths().iter().copied().find(|p| !status.gave_up(*p))
}

/// What `auto` learns from an attempt that failed with `reason`: the
/// direct path in use is given up when the sender could not connect over
/// it (a firewall between the clusters, an address only the destination's
/// network reaches), so the next attempt takes the next path.
pub fn learn_from_failure(mode: NetworkMode, status: &mut NetworkStatus, reason: &str) -> bool {
    let Some(path @ (NetworkPath::LoadBalancer | NetworkPath::NodePort)) = status.path else {
        return false;
    };
    if mode != NetworkMode::Auto || !reason.contains("cannot connect to") {
        return false;
    }
    let address = status.address.clone().unwrap_or_default();
    status.give_up(
        path,
        format!("the sender could not connect to {address}: {reason}"),
    );
    true
}

/// A load balancer's address, as the cloud set it on the Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ingress {
    Ip(String),
    /// A name (AWS's ELBs): resolved by the client, since the static mover
    /// resolves none.
    Hostname(String),
}

/// The Service's first load-balancer ingress, if it has one yet.
pub fn load_balancer_ingress(service: &Service) -> Option<Ingress> {
    let ingress = service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?;
    ingress.iter().find_map(|i| match (&i.ip, &i.hostname) {
        (Some(ip), _) if !ip.is_empty() => Some(Ingress::Ip(ip.clone())),
        (_, Some(name)) if !name.is_empty() => Some(Ingress::Hostname(name.clone())),
        _ => None,
    })
}

/// `IP:PORT` for a sender: a Ready node's address at the Service's node
/// port. An `ExternalIP` is preferred (another cluster may not reach the
/// internal network), then an `InternalIP`; nodes by name, so every
/// client picks the same one.
pub fn node_port_address(service: &Service, nodes: &[Node]) -> Result<String, String> {
    let port = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.port == names::MOVER_PORT))
        .and_then(|p| p.node_port)
        .ok_or_else(|| "the Service has no node port yet".to_string())?;
    let mut ready: Vec<&Node> = nodes
        .iter()
        .filter(|n| crate::plan::fit::ready(n))
        .collect();
    ready.sort_by_key(|n| n.metadata.name.clone());
    for kind in ["ExternalIP", "InternalIP"] {
        let found = ready.iter().find_map(|n| {
            let addresses = n.status.as_ref()?.addresses.as_ref()?;
            addresses
                .iter()
                .find(|a| a.type_ == kind && !a.address.is_empty())
                .map(|a| a.address.clone())
        });
        if let Some(ip) = found {
            return Ok(join(&ip, port));
        }
    }
    Err(match ready.is_empty() {
        true => "no destination node is Ready".to_string(),
        false => "no Ready destination node has an ExternalIP or InternalIP address".to_string(),
    })
}

/// `IP:PORT`, with an IPv6 address in brackets.
pub fn join(ip: &str, port: i32) -> String {
    match ip.contains(':') {
        true => format!("[{ip}]:{port}"),
        false => format!("{ip}:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(value: serde_json::Value) -> Service {
        serde_json::from_value(value).unwrap()
    }

    fn node(name: &str, ready: bool, addresses: &[(&str, &str)]) -> Node {
        let addresses: Vec<_> = addresses
            .iter()
            .map(|(t, a)| json!({"type": t, "address": a}))
            .collect();
        let status = if ready { "True" } else { "False" };
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {
                "conditions": [{"type": "Ready", "status": status}],
                "addresses": addresses,
            }
        }))
        .unwrap()
    }

    #[test]
    fn auto_goes_on_from_the_paths_given_up() {
        let mut status = NetworkStatus::default();
        assert_eq!(
            next_path(NetworkMode::Auto, &status),
            Some(NetworkPath::LoadBalancer)
        );
        status.give_up(NetworkPath::LoadBalancer, "no address".into());
        assert_eq!(
            next_path(NetworkMode::Auto, &status),
            Some(NetworkPath::NodePort)
        );
        status.give_up(NetworkPath::NodePort, "no node".into());
        status.give_up(NetworkPath::Tunnel, "no".into());
        assert_eq!(next_path(NetworkMode::Auto, &status), None);
        // A path asked for is not tried again once given up.
        assert_eq!(next_path(NetworkMode::NodePort, &status), None);
        // One being tried is tried again (a driver stopped while it waited).
        status.path = Some(NetworkPath::Tunnel);
        assert_eq!(
            next_path(NetworkMode::Auto, &status),
            Some(NetworkPath::Tunnel)
        );
    }

    #[test]
    fn auto_gives_a_direct_path_up_when_the_sender_cannot_connect() {
        let mut status = NetworkStatus {
            path: Some(NetworkPath::NodePort),
            address: Some("10.0.0.2:30412".into()),
            ..NetworkStatus::default()
        };
        let refused = "sender: cannot connect to 10.0.0.2:30412: Connection refused (os error 111)";
        // Asked for by name, the path stays: the user said which.
        assert!(!learn_from_failure(
            NetworkMode::NodePort,
            &mut status,
            refused
        ));
        // Another failure says nothing about the path.
        assert!(!learn_from_failure(
            NetworkMode::Auto,
            &mut status,
            "disk full"
        ));
        assert!(learn_from_failure(NetworkMode::Auto, &mut status, refused));
        assert_eq!(status.path, None);
        assert_eq!(status.tried[0].path, NetworkPath::NodePort);
        assert!(status.tried[0]
            .why
            .contains("could not connect to 10.0.0.2:30412"));
        assert_eq!(
            next_path(NetworkMode::Auto, &status),
            Some(NetworkPath::LoadBalancer)
        );
    }

    #[test]
    fn the_ingress_is_an_address_or_a_name() {
        let pending = service(json!({"status": {"loadBalancer": {}}}));
        assert_eq!(load_balancer_ingress(&pending), None);
        let ip = service(json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}));
        assert_eq!(
            load_balancer_ingress(&ip),
            Some(Ingress::Ip("203.0.113.7".into()))
        );
        let name = service(
            json!({"status": {"loadBalancer": {"ingress": [{"hostname": "a.elb.example"}]}}}),
        );
        assert_eq!(
            load_balancer_ingress(&name),
            Some(Ingress::Hostname("a.elb.example".into()))
        );
    }

    #[test]
    fn node_ports_are_reached_on_a_ready_node_external_address_first() {
        let svc = service(json!({"spec": {"ports": [{"port": 7000, "nodePort": 30412}]}}));
        let nodes = [
            node(
                "c",
                true,
                &[("InternalIP", "10.0.0.3"), ("ExternalIP", "198.51.100.3")],
            ),
            node("a", false, &[("ExternalIP", "198.51.100.1")]),
            node("b", true, &[("InternalIP", "10.0.0.2")]),
        ];
        assert_eq!(
            node_port_address(&svc, &nodes).unwrap(),
            "198.51.100.3:30412"
        );
        let internal = [node("b", true, &[("InternalIP", "fd00::2")])];
        assert_eq!(
            node_port_address(&svc, &internal).unwrap(),
            "[fd00::2]:30412"
        );
        let down = [node("a", false, &[("InternalIP", "10.0.0.1")])];
        assert_eq!(
            node_port_address(&svc, &down).unwrap_err(),
            "no destination node is Ready"
        );
        let unallocated = service(json!({"spec": {"ports": [{"port": 7000}]}}));
        assert!(node_port_address(&unallocated, &nodes).is_err());
    }
}
