//! `pods/portforward` over WebSocket, as kube-rs's `Api::<Pod>::portforward`
//! (its `ws` feature) speaks it: `GET
//! /api/v1/namespaces/NS/pods/NAME/portforward?ports=P[,Q]` upgraded to a
//! WebSocket, the subprotocol the first of the client's that the
//! kubelet's handler takes (`v4.channel.k8s.io`,
//! `v4.base64.channel.k8s.io`, or none: binary), as apimachinery's
//! `wsstream` negotiates it; the channels and the copy are in [`tunnel`].
//!
//! The API server's part (`pkg/registry/core/pod/rest/subresources.go`,
//! `PortForwardLocation`): the pod must exist (404) and have a node (400
//! `pod NAME does not have a host assigned`). Authorization is the
//! request's verb on `pods/portforward` (`get` for the WebSocket's GET,
//! `create` for a POST) and, for a WebSocket, `create` too, as
//! kube-apiserver 1.35 does with `AuthorizePodWebsocketUpgradeCreatePermission`.
//! The kubelet's part (`ServePortForward`, `NewV4Options`): the ports from
//! every `ports` value, comma-separated, each 1-65535 (400 otherwise).
//!
//! SPDY is not served: neither `kubectl port-forward`'s SPDY upgrade nor
//! its SPDY-over-WebSocket tunnel (`SPDY/3.1+portforward.k8s.io`); both get
//! a 400 saying so.

mod tunnel;

pub use tunnel::{Codec, Target, TunnelError, FRAME};

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use super::authz;
use super::request::Path;
use super::Api;
use crate::auth::rbac::Attributes;
use crate::auth::Identity;
use crate::registry;
use crate::status::ApiError;

/// The subprotocols of the kubelet's port-forward handler, in its terms.
const BINARY: &str = "v4.channel.k8s.io";
const BASE64: &str = "v4.base64.channel.k8s.io";
/// kubectl's SPDY-over-WebSocket tunnel (KEP-4006), not served.
const SPDY_TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";

const NO_SPDY: &str = "kube-sandbox serves pods/portforward over WebSocket only (subprotocol v4.channel.k8s.io, as kube-rs's Api::portforward speaks it); kubectl port-forward's SPDY and SPDY-over-WebSocket streams are not emulated";

/// The connection's pending upgrade, taken from the request (hyper puts
/// it there for requests that ask for one).
pub struct Upgrade(pub Option<OnUpgrade>);

impl<S: Send + Sync> FromRequestParts<S> for Upgrade {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Upgrade, Self::Rejection> {
        Ok(Upgrade(parts.extensions.remove::<OnUpgrade>()))
    }
}

/// A port-forward request, authorized as `attributes` already.
pub struct Request<'a> {
    pub api: &'a Api,
    pub identity: &'a Identity,
    pub attributes: &'a Attributes,
    pub method: &'a Method,
    pub path: &'a Path,
    /// The raw query (`ports` may repeat).
    pub query: &'a str,
    pub headers: &'a HeaderMap,
}

/// Answers 101 and forwards the ports over the upgraded connection, or
/// answers the API server's (or kubelet's) error.
pub fn serve(request: &Request, upgrade: Option<OnUpgrade>) -> Result<Response, ApiError> {
    let Request {
        api,
        identity,
        attributes,
        method,
        path,
        query,
        headers,
    } = request;
    let websocket = is_websocket(headers);
    if websocket && *method == Method::GET {
        let create = Attributes {
            verb: "create".into(),
            ..(*attributes).clone()
        };
        let decision = crate::auth::rbac::authorize(&api.store, identity, &create);
        if !decision.allowed {
            return Err(authz::denied(
                &identity.username(),
                &create,
                &decision.reason,
            ));
        }
    }
    let name = path.name.as_deref().unwrap_or_default();
    let pod = api
        .store
        .get(registry::get("pods"), path.namespace_or_default(), name)?;
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        return Err(ApiError::BadRequest(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    if !websocket {
        return Err(ApiError::BadRequest(NO_SPDY.into()));
    }
    let ports = ports(query)?;
    let Some(ip) = pod["status"]["podIP"]
        .as_str()
        .and_then(|ip| ip.parse().ok())
    else {
        let namespace = path.namespace_or_default();
        return Err(ApiError::Internal(format!(
            "pod not found (\"{name}_{namespace}\")"
        )));
    };
    let (codec, protocol) = negotiate(headers)?;
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .ok_or_else(|| ApiError::BadRequest("missing Sec-WebSocket-Key".into()))?;
    let upgrade =
        upgrade.ok_or_else(|| ApiError::Internal("the connection cannot be upgraded".into()))?;
    let target = Target {
        ip,
        ports,
        pod: pod["metadata"]["uid"].as_str().unwrap_or(name).to_string(),
    };
    let closed = api.store.subscribe_closed();
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => tunnel::run(TokioIo::new(upgraded), codec, target, closed).await,
            Err(e) => tracing::debug!("port forward: upgrade: {e}"),
        }
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let out = response.headers_mut();
    out.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    out.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    let accept = derive_accept_key(key.as_bytes());
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        out.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if !protocol.is_empty() {
        out.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(protocol),
        );
    }
    Ok(response)
}

/// `wsstream.IsWebSocketRequest`: `Upgrade: websocket` and a `Connection`
/// naming `upgrade`.
fn is_websocket(headers: &HeaderMap) -> bool {
    let value = |name| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",")
            .to_ascii_lowercase()
    };
    value(header::UPGRADE).trim() == "websocket"
        && value(header::CONNECTION)
            .split(',')
            .any(|token| token.trim() == "upgrade")
}

/// The first subprotocol the client offers that the handler takes, in
/// the client's order (none offered: binary, no header in the answer).
fn negotiate(headers: &HeaderMap) -> Result<(Codec, &'static str), ApiError> {
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    if offered.is_empty() {
        return Ok((Codec::Binary, ""));
    }
    for protocol in &offered {
        match protocol.as_str() {
            BINARY => return Ok((Codec::Binary, BINARY)),
            BASE64 => return Ok((Codec::Base64, BASE64)),
            _ => {}
        }
    }
    if offered.iter().any(|p| p == SPDY_TUNNEL) {
        return Err(ApiError::BadRequest(NO_SPDY.into()));
    }
    Err(ApiError::Forbidden(format!(
        "requested protocol(s) are not supported: [{}]; supports [{BINARY} {BASE64}]",
        offered.join(" ")
    )))
}

/// The ports of the request (`NewV4Options`): every `ports` value, each
/// a comma-separated list of 1-65535.
fn ports(query: &str) -> Result<Vec<u16>, ApiError> {
    let values: Vec<String> = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| *k == "ports")
        .map(|(_, v)| v.replace("%2C", ",").replace("%2c", ","))
        .collect();
    if values.is_empty() {
        return Err(ApiError::BadRequest(
            "query parameter \"port\" is required".into(),
        ));
    }
    let mut ports = Vec::new();
    for value in &values {
        if value.is_empty() {
            return Err(ApiError::BadRequest(
                "query parameter \"port\" cannot be empty".into(),
            ));
        }
        for p in value.split(',') {
            let port: u16 = p.parse().map_err(|e| {
                ApiError::BadRequest(format!("unable to parse {value:?} as a port: {e}"))
            })?;
            if port < 1 {
                return Err(ApiError::BadRequest(format!("port {value:?} must be > 0")));
            }
            ports.push(port);
        }
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_from_every_value_comma_separated() {
        assert_eq!(ports("&ports=80%2C1234").expect("ports"), [80, 1234]);
        assert_eq!(ports("ports=80&ports=81").expect("ports"), [80, 81]);
        assert_eq!(ports("").expect_err("none").code(), 400);
        assert!(ports("ports=0")
            .expect_err("zero")
            .to_string()
            .contains("must be > 0"));
        assert!(ports("ports=http")
            .expect_err("name")
            .to_string()
            .starts_with("unable to parse \"http\" as a port"));
    }

    #[test]
    fn the_first_protocol_offered_that_the_kubelet_takes_wins() {
        let with = |offer: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::SEC_WEBSOCKET_PROTOCOL,
                HeaderValue::from_str(offer).expect("value"),
            );
            negotiate(&h)
        };
        // kube-rs offers v5 first, which port forwarding does not take.
        assert_eq!(
            with("v5.channel.k8s.io, v4.channel.k8s.io").expect("v4"),
            (Codec::Binary, BINARY)
        );
        assert_eq!(with(BASE64).expect("base64"), (Codec::Base64, BASE64));
        assert_eq!(with(SPDY_TUNNEL).expect_err("spdy").code(), 400);
        assert_eq!(with("chat").expect_err("other").code(), 403);
        assert_eq!(
            negotiate(&HeaderMap::new()).expect("none"),
            (Codec::Binary, "")
        );
    }
}
