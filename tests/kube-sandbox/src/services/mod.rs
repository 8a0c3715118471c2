//! Services, as kube-proxy makes them reachable: each Service port is a
//! TCP listener that forwards every connection to a ready endpoint,
//! round-robin, on
//!
//! - the Service's ClusterIP (`127.B.255.N`, allocated at create) at the
//!   port;
//! - for NodePort and LoadBalancer Services, each Node's `InternalIP`
//!   (`127.B.0.N`) at the port's `nodePort` (`externalTrafficPolicy` is
//!   not looked at: every node forwards to every ready endpoint, as
//!   `Cluster` does);
//! - for LoadBalancer Services, each `status.loadBalancer.ingress[].ip`
//!   (which the sandbox's cloud controller, `controllers::cloud`, sets)
//!   at the port, as a cloud load balancer in front of the Service.
//!
//! [`allocation`] is the API server's side: addresses and node ports.

pub mod allocation;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};

use crate::registry;
use crate::store::Store;
use crate::task::Owned;

pub use allocation::allocate;

/// Bytes a forwarded connection buffers each way.
const COPY_BUFFER: usize = 256 << 10;

/// One address a Service port listens on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Frontend {
    namespace: String,
    name: String,
    /// The Service port it stands for (backends are found by it).
    port: u16,
    listen: SocketAddr,
}

/// Runs the forwarders, following Services and Nodes as they come, change
/// and go, until the returned task is dropped.
pub fn spawn(store: Arc<Store>) -> Owned {
    Owned::spawn(async move {
        let mut listeners: HashMap<Frontend, Owned> = HashMap::new();
        let mut version = store.subscribe_version();
        loop {
            let (services, _) = store.list(registry::get("services"), None);
            let (nodes, _) = store.list(registry::get("nodes"), None);
            let node_ips: Vec<IpAddr> = nodes.iter().filter_map(internal_ip).collect();
            let wanted: Vec<Frontend> = services
                .iter()
                .flat_map(|s| frontends(s, &node_ips))
                .collect();
            // A dropped forwarder stops listening.
            listeners.retain(|key, _| wanted.contains(key));
            for key in wanted {
                if let std::collections::hash_map::Entry::Vacant(slot) = listeners.entry(key) {
                    let frontend = slot.key().clone();
                    slot.insert(Owned::spawn(forward(store.clone(), frontend)));
                }
            }
            if version.changed().await.is_err() {
                break;
            }
        }
    })
}

/// A Node's `InternalIP`.
pub fn internal_ip(node: &Value) -> Option<IpAddr> {
    node["status"]["addresses"]
        .as_array()?
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .and_then(|ip| ip.parse().ok())
}

/// Where each TCP port of a Service listens: its ClusterIP, the nodes'
/// addresses at its node port, its load balancer's addresses.
fn frontends(service: &Value, node_ips: &[IpAddr]) -> Vec<Frontend> {
    let spec = &service["spec"];
    let kind = spec["type"].as_str().unwrap_or("ClusterIP");
    let cluster_ip = spec["clusterIP"]
        .as_str()
        .and_then(|ip| ip.parse::<IpAddr>().ok());
    let ingress: Vec<IpAddr> = match kind {
        "LoadBalancer" => service["status"]["loadBalancer"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["ip"].as_str().and_then(|ip| ip.parse().ok()))
            .collect(),
        _ => Vec::new(),
    };
    let with_node_ports = matches!(kind, "NodePort" | "LoadBalancer");
    let namespace = service["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let name = service["metadata"]["name"].as_str().unwrap_or_default();
    let frontend = |port: u16, listen: SocketAddr| Frontend {
        namespace: namespace.to_string(),
        name: name.to_string(),
        port,
        listen,
    };
    let mut out = Vec::new();
    let tcp = spec["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["protocol"].as_str().is_none_or(|p| p == "TCP"));
    for p in tcp {
        let Some(port) = p["port"].as_u64().and_then(|p| u16::try_from(p).ok()) else {
            continue;
        };
        out.extend(cluster_ip.map(|ip| frontend(port, SocketAddr::new(ip, port))));
        let node_port = p["nodePort"].as_u64().and_then(|p| u16::try_from(p).ok());
        if let Some(node_port) = node_port.filter(|p| with_node_ports && *p != 0) {
            out.extend(
                node_ips
                    .iter()
                    .map(|ip| frontend(port, SocketAddr::new(*ip, node_port))),
            );
        }
        out.extend(
            ingress
                .iter()
                .map(|ip| frontend(port, SocketAddr::new(*ip, port))),
        );
    }
    out
}

async fn forward(store: Arc<Store>, frontend: Frontend) {
    let Frontend {
        namespace,
        name,
        port,
        listen,
    } = frontend;
    let listener = loop {
        match TcpListener::bind(listen).await {
            Ok(l) => break l,
            Err(e) => {
                tracing::warn!(
                    "service {namespace}/{name}: cannot listen on {listen} (retrying): {e}"
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    let mut next = 0;
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(e) => {
                tracing::debug!("service {namespace}/{name}: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let backends = backends(&store, &namespace, &name, port);
        if backends.is_empty() {
            // No ready endpoint: closed at once. (kube-proxy rejects the
            // SYN; a listener cannot, so clients see EOF, not ECONNREFUSED.)
            drop(client);
            continue;
        }
        let backend = backends[next % backends.len()];
        next = next.wrapping_add(1);
        tokio::spawn(async move {
            let Ok(mut upstream) = TcpStream::connect(backend).await else {
                return;
            };
            let mut client = client;
            let _ = tokio::io::copy_bidirectional_with_sizes(
                &mut client,
                &mut upstream,
                COPY_BUFFER,
                COPY_BUFFER,
            )
            .await;
        });
    }
}

/// Ready endpoint addresses of the Service port `port`.
fn backends(store: &Store, namespace: &str, name: &str, port: u16) -> Vec<SocketAddr> {
    let Ok(service) = store.get(registry::get("services"), namespace, name) else {
        return Vec::new();
    };
    let Ok(endpoints) = store.get(registry::get("endpoints"), namespace, name) else {
        return Vec::new();
    };
    let port_name = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_u64() == Some(u64::from(port)))
        .map(|p| p["name"].clone())
        .unwrap_or(Value::Null);
    let mut out = Vec::new();
    for subset in endpoints["subsets"].as_array().into_iter().flatten() {
        let ports = subset["ports"].as_array().cloned().unwrap_or_default();
        let target = ports
            .iter()
            .find(|p| p["name"] == port_name || ports.len() == 1)
            .and_then(|p| p["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok());
        let Some(target) = target else { continue };
        for address in subset["addresses"].as_array().into_iter().flatten() {
            if let Some(ip) = address["ip"]
                .as_str()
                .and_then(|ip| ip.parse::<IpAddr>().ok())
            {
                out.push(SocketAddr::new(ip, target));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_load_balancer_listens_on_its_cluster_ip_nodes_and_ingress() {
        let service = json!({
            "metadata": {"namespace": "ns", "name": "web"},
            "spec": {"type": "LoadBalancer", "clusterIP": "127.20.255.3", "ports": [
                {"port": 80, "nodePort": 30080, "protocol": "TCP"},
                {"port": 53, "nodePort": 30053, "protocol": "UDP"},
            ]},
            "status": {"loadBalancer": {"ingress": [{"ip": "127.20.254.1"}]}},
        });
        let nodes: Vec<IpAddr> = vec![
            "127.20.0.1".parse().expect("ip"),
            "127.20.0.2".parse().expect("ip"),
        ];
        let listen: Vec<String> = frontends(&service, &nodes)
            .iter()
            .map(|f| format!("{}>{}", f.listen, f.port))
            .collect();
        assert_eq!(
            listen,
            [
                "127.20.255.3:80>80",
                "127.20.0.1:30080>80",
                "127.20.0.2:30080>80",
                "127.20.254.1:80>80"
            ]
        );
        // A ClusterIP Service with a stale status listens on its ClusterIP only.
        let mut plain = service.clone();
        plain["spec"]["type"] = json!("ClusterIP");
        assert_eq!(frontends(&plain, &nodes).len(), 1);
    }
}
