//! ClusterIP Services: each Service port is a TCP listener on the
//! Service's own loopback address (`127.B.255.N`, allocated at create) that
//! forwards every connection to a ready endpoint, round-robin, as
//! kube-proxy's rules do.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};

use crate::registry;
use crate::store::Store;
use crate::task::Owned;

/// Runs the forwarders, following Services as they come and go, until the
/// returned task is dropped.
pub fn spawn(store: Arc<Store>) -> Owned {
    Owned::spawn(async move {
        let mut listeners: HashMap<(String, String, SocketAddr), Owned> = HashMap::new();
        let mut version = store.subscribe_version();
        loop {
            let (services, _) = store.list(registry::get("services"), None);
            let wanted: Vec<(String, String, SocketAddr)> =
                services.iter().flat_map(frontends).collect();
            // A dropped forwarder stops listening.
            listeners.retain(|key, _| wanted.contains(key));
            for key in wanted {
                if let std::collections::hash_map::Entry::Vacant(slot) = listeners.entry(key) {
                    let (ns, name, addr) = slot.key().clone();
                    slot.insert(Owned::spawn(forward(store.clone(), ns, name, addr)));
                }
            }
            if version.changed().await.is_err() {
                break;
            }
        }
    })
}

/// (namespace, name, clusterIP:port) of each port of a Service.
fn frontends(service: &Value) -> Vec<(String, String, SocketAddr)> {
    let Some(ip) = service["spec"]["clusterIP"]
        .as_str()
        .and_then(|ip| ip.parse::<IpAddr>().ok())
    else {
        return Vec::new();
    };
    let ns = service["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let name = service["metadata"]["name"].as_str().unwrap_or_default();
    service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["protocol"].as_str().is_none_or(|p| p == "TCP"))
        .filter_map(|p| p["port"].as_u64().and_then(|p| u16::try_from(p).ok()))
        .map(|port| (ns.to_string(), name.to_string(), SocketAddr::new(ip, port)))
        .collect()
}

async fn forward(store: Arc<Store>, namespace: String, name: String, frontend: SocketAddr) {
    let listener = loop {
        match TcpListener::bind(frontend).await {
            Ok(l) => break l,
            Err(e) => {
                tracing::warn!(
                    "service {namespace}/{name}: cannot listen on {frontend} (retrying): {e}"
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
        let backends = backends(&store, &namespace, &name, frontend.port());
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
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
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

/// The next free Service address in the sandbox's block (`127.B.255.N`),
/// given the addresses in use.
pub fn allocate(block: u8, in_use: &[&str]) -> Option<String> {
    (1..=254u8)
        .map(|n| format!("127.{block}.255.{n}"))
        .find(|ip| !in_use.contains(&ip.as_str()))
}
