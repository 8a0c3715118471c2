//! The API server's name, resolved in Rust.
//!
//! The release binary links glibc statically, and a static glibc cannot
//! load the NSS modules its `getaddrinfo` needs (or loads ones of another
//! glibc version). So that build resolves the server's name itself, from
//! `/etc/hosts` and `/etc/resolv.conf` (hickory-resolver), and connects to
//! the address it found, while TLS still checks the certificate for the
//! name and the `Host` header still carries it. Dynamic builds (`cargo
//! install`, macOS, Windows) keep the system's resolver, which knows more
//! (nsswitch, per-domain resolvers).

use std::net::IpAddr;

use http::uri::{Authority, Uri};
use http::{header::HOST, HeaderValue};
use kube::Config;

use super::ClusterError;

/// The first address of `host`, as [`addresses`] orders them: for names
/// the static mover cannot resolve (a load balancer's).
pub async fn lookup(host: &str) -> Result<IpAddr, String> {
    let found = addresses(host).await?;
    found
        .first()
        .copied()
        .ok_or_else(|| "no address".to_string())
}

/// The addresses of `host` from `/etc/hosts` and `/etc/resolv.conf`, IPv4
/// first, then as the resolver gave them.
async fn addresses(host: &str) -> Result<Vec<IpAddr>, String> {
    let resolver = hickory_resolver::TokioResolver::builder_tokio()
        .map_err(|e| e.to_string())?
        .build()
        .map_err(|e| e.to_string())?;
    let found = resolver.lookup_ip(host).await.map_err(|e| e.to_string())?;
    let mut addresses: Vec<IpAddr> = found.iter().collect();
    addresses.sort_by_key(IpAddr::is_ipv6);
    Ok(addresses)
}

/// `config` with its server's name replaced by one of its addresses
/// (unchanged when the server is an address already, or when a proxy
/// connects for us).
#[cfg_attr(
    not(all(target_os = "linux", target_feature = "crt-static")),
    allow(dead_code)
)]
pub async fn in_rust(config: Config) -> Result<Config, ClusterError> {
    let Some(host) = name_to_resolve(&config) else {
        return Ok(config);
    };
    let fail = |message: String| ClusterError::Resolve {
        host: host.clone(),
        message,
    };
    let addresses = addresses(&host).await.map_err(fail)?;
    let ip = reachable(&addresses, port_of(&config.cluster_url)).await;
    let ip = ip.ok_or_else(|| fail("no address".into()))?;
    tracing::debug!(%host, %ip, "the API server's name resolved in Rust");
    pin_address(config, ip).map_err(fail)
}

/// The first of `addresses` that takes a TCP connection on `port` within
/// [`PROBE_TIMEOUT`] (a name often has an IPv6 address the server does not
/// listen on: `localhost`); else the first, whose error the client reports.
async fn reachable(addresses: &[IpAddr], port: u16) -> Option<IpAddr> {
    for ip in addresses {
        let connect = tokio::net::TcpStream::connect((*ip, port));
        if let Ok(Ok(_)) = tokio::time::timeout(PROBE_TIMEOUT, connect).await {
            return Some(*ip);
        }
    }
    addresses.first().copied()
}

/// How long one address may take to answer the probe.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The URL's port, or its scheme's.
fn port_of(url: &Uri) -> u16 {
    url.port_u16().unwrap_or(match url.scheme_str() {
        Some("http") => 80,
        _ => 443,
    })
}

/// The server's host name, when it is one and no proxy is in the way.
pub fn name_to_resolve(config: &Config) -> Option<String> {
    if config.proxy_url.is_some() {
        return None;
    }
    let host = config.cluster_url.host()?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() {
        return None;
    }
    Some(host.to_string())
}

/// Points `config` at `ip`, keeping what the name meant: the TLS server
/// name (unless the kubeconfig set its own `tls-server-name`) and the
/// `Host` header.
pub fn pin_address(mut config: Config, ip: IpAddr) -> Result<Config, String> {
    let url = &config.cluster_url;
    let host = url.host().ok_or("the server URL has no host")?.to_string();
    let authority = url.authority().ok_or("the server URL has no host")?.clone();
    let port = url.port_u16();
    let address = match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let new_authority: Authority = match port {
        Some(p) => format!("{address}:{p}"),
        None => address,
    }
    .parse()
    .map_err(|e| format!("{e}"))?;
    let mut parts = url.clone().into_parts();
    parts.authority = Some(new_authority);
    config.cluster_url = Uri::from_parts(parts).map_err(|e| e.to_string())?;
    if config.tls_server_name.is_none() {
        config.tls_server_name = Some(host);
    }
    let host_header = HeaderValue::from_str(authority.as_str()).map_err(|e| e.to_string())?;
    config.headers.retain(|(name, _)| name != HOST);
    config.headers.push((HOST, host_header));
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> Config {
        Config::new(url.parse().expect("a URL"))
    }

    #[test]
    fn a_name_is_replaced_by_its_address_and_kept_for_tls_and_host() {
        let c = config("https://api.example.com:6443/k8s/clusters/c-1");
        assert_eq!(name_to_resolve(&c).as_deref(), Some("api.example.com"));
        let c = pin_address(c, "10.0.0.7".parse().expect("ip")).expect("pinned");
        assert_eq!(
            c.cluster_url.to_string(),
            "https://10.0.0.7:6443/k8s/clusters/c-1"
        );
        assert_eq!(c.tls_server_name.as_deref(), Some("api.example.com"));
        let host: Vec<_> = c.headers.iter().filter(|(n, _)| n == HOST).collect();
        assert_eq!(host.len(), 1);
        assert_eq!(host[0].1, "api.example.com:6443");
    }

    #[test]
    fn ipv6_and_default_ports() {
        let c =
            pin_address(config("https://localhost"), "::1".parse().expect("ip")).expect("pinned");
        assert_eq!(c.cluster_url.to_string(), "https://[::1]/");
        assert_eq!(
            c.headers.last().map(|(_, v)| v.clone()),
            Some(HeaderValue::from_static("localhost"))
        );
    }

    #[test]
    fn addresses_proxies_and_explicit_server_names_are_left_alone() {
        assert_eq!(name_to_resolve(&config("https://127.0.0.1:6443")), None);
        assert_eq!(name_to_resolve(&config("https://[::1]:6443")), None);
        let mut proxied = config("https://api.example.com");
        proxied.proxy_url = Some("http://proxy:3128".parse().expect("url"));
        assert_eq!(name_to_resolve(&proxied), None);
        let mut named = config("https://api.example.com");
        named.tls_server_name = Some("kubernetes.default".into());
        let c = pin_address(named, "10.0.0.1".parse().expect("ip")).expect("pinned");
        assert_eq!(c.tls_server_name.as_deref(), Some("kubernetes.default"));
    }
}
