//! The API server: discovery, CRUD, watch, patch and pod logs over
//! HTTPS (HTTP/1.1 over TLS, with the cluster CA's serving certificate) on
//! loopback, answering in JSON the way kube-apiserver does. Each request is
//! authenticated ([`crate::auth`]) and its identity recorded ([`audit`]).

mod access_review;
pub mod audit;
mod authz;
mod custom;
mod discovery;
pub use discovery::{MAJOR, MINOR};
pub mod faults;
mod filter;
mod logs;
mod objects;
pub mod portforward;
pub mod protobuf;
mod request;
pub mod table;
mod token_request;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

pub use audit::{AuditEntry, AuditLog, Authorization};
pub use faults::{Faults, Tripwire};

use crate::auth::Authority;
use crate::kubelet::{LogIndex, PodProcesses};
use crate::registry::Served;
use crate::status::ApiError;
use crate::store::Store;
use crate::task::Owned;
use request::{Path, Query};

/// What every request handler shares.
pub struct Api {
    pub store: Arc<Store>,
    pub logs: Arc<LogIndex>,
    /// Where the server listens, for discovery's serverAddressByClientCIDRs.
    pub addr: SocketAddr,
    /// Credentials: the serving certificate, tokens, the admin's token.
    pub authority: Arc<Authority>,
    pub audit: AuditLog,
    /// Rules that kill the pod making a matching request.
    pub faults: Faults,
    /// The pods' container processes, which the faults kill.
    pub processes: Arc<PodProcesses>,
    /// Whether the `snapshot.storage.k8s.io` CRDs are installed: when not,
    /// the group is in no discovery answer and its paths are 404.
    pub snapshots: bool,
}

impl Api {
    /// Whether the built-in resources of `group` are served.
    pub fn serves(&self, group: &str) -> bool {
        self.snapshots || group != crate::registry::SNAPSHOT_GROUP
    }

    /// The resource a URL names: a built-in one of a group served, else a
    /// custom resource a definition serves (built-ins win, as the
    /// apiextensions server only gets what kube-apiserver does not serve).
    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<Served> {
        match crate::registry::find(group, version, plural) {
            Some(builtin) if self.serves(group) => Some(Served::Builtin(builtin)),
            _ => self
                .store
                .custom_resource(group, version, plural)
                .map(Served::Custom),
        }
    }
}

/// Serves the API over TLS on `listener` until the returned task is
/// dropped, which closes every connection too.
pub fn serve(listener: TcpListener, tls: TlsAcceptor, api: Arc<Api>) -> Owned {
    let app = Router::new()
        .fallback(handle)
        .layer(DefaultBodyLimit::max(16 << 20))
        .with_state(api);
    Owned::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            while connections.try_join_next().is_some() {}
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::debug!("API server: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            connections.spawn(connection(tcp, tls.clone(), app.clone()));
        }
    })
}

/// One client connection: the TLS handshake, then HTTP/1.1 requests (and
/// upgrades) until the client closes it.
async fn connection(tcp: tokio::net::TcpStream, tls: TlsAcceptor, app: Router) {
    let stream = match tls.accept(tcp).await {
        Ok(stream) => stream,
        Err(e) => {
            tracing::debug!("API server: TLS handshake: {e}");
            return;
        }
    };
    let service = TowerToHyperService::new(app);
    let served = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!("API server: connection: {e}");
    }
}

async fn handle(
    State(api): State<Arc<Api>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    upgrade: portforward::Upgrade,
    body: Bytes,
) -> Response {
    let header = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let identity = match api.authority.authenticate(&api.store, authorization) {
        Ok(identity) => identity,
        Err(e) => return error(&e),
    };
    tracing::debug!("{method} {uri} as {}", identity.username());
    let incoming = Incoming {
        entry: AuditEntry {
            identity,
            method: method.to_string(),
            uri: uri.to_string(),
            authorization: None,
        },
        method,
        uri,
        accept: header(header::ACCEPT),
        content_type: header(header::CONTENT_TYPE),
        headers,
        upgrade: upgrade.0,
        body,
    };
    let (entry, response) = respond(&api, incoming).await;
    // Done, and not yet answered: the moment a fault may kill the caller.
    api.faults.after(&entry, &api.processes).await;
    response
}

/// An authenticated request.
struct Incoming {
    /// Its audit entry, without the authorizer's answer yet.
    entry: AuditEntry,
    method: Method,
    uri: Uri,
    accept: String,
    content_type: String,
    headers: HeaderMap,
    /// The connection's pending upgrade (port forwarding's WebSocket).
    upgrade: Option<hyper::upgrade::OnUpgrade>,
    body: Bytes,
}

/// Authorizes and serves a request; its audit entry (recorded before it
/// was served) with the response.
async fn respond(api: &Api, incoming: Incoming) -> (AuditEntry, Response) {
    let Incoming {
        mut entry,
        method,
        uri,
        accept,
        content_type,
        headers,
        upgrade,
        body,
    } = incoming;
    let identity = entry.identity.clone();
    if let Some(response) = access_review::route(api, &method, uri.path(), &identity, &body) {
        entry.authorization = Some(access_review::audit_attributes());
        api.audit.record(entry.clone());
        return (entry, response);
    }
    if let Some(response) = discovery::route(api, &method, uri.path()) {
        api.audit.record(entry.clone());
        return (entry, response);
    }
    let path = match Path::resolve(uri.path(), |g, v, p| api.resolve(g, v, p)) {
        Ok(path) => path,
        Err(e) => {
            api.audit.record(entry.clone());
            return (entry, error(&e));
        }
    };
    let query = Query::parse(uri.query().unwrap_or_default());
    let attributes = authz::attributes(&method, &path, &query);
    let decision = crate::auth::rbac::authorize(&api.store, &identity, &attributes);
    entry.authorization = Some(Authorization {
        attributes: attributes.clone(),
        allowed: decision.allowed,
    });
    api.audit.record(entry.clone());
    if !decision.allowed {
        let denied = authz::denied(&identity.username(), &attributes, &decision.reason);
        return (entry, error(&denied));
    }
    let has_namespace = path.namespace.is_some();
    if let Err(e) = custom::admit(
        &path.resource,
        &attributes.verb,
        has_namespace,
        &accept,
        uri.path(),
    ) {
        return (entry, error(&e));
    }
    if path.subresource.as_deref() == Some("portforward") {
        let request = portforward::Request {
            api,
            identity: &identity,
            attributes: &attributes,
            method: &method,
            path: &path,
            query: uri.query().unwrap_or_default(),
            headers: &headers,
        };
        let response = match method {
            Method::GET | Method::POST => portforward::serve(&request, upgrade),
            _ => Err(ApiError::MethodNotAllowed),
        };
        return (entry, response.unwrap_or_else(|e| error(&e)));
    }
    let request = objects::Request {
        api,
        identity: &identity,
        path,
        query,
        accept,
        content_type,
        body,
    };
    let subresource = request.path.subresource.as_deref();
    let response = match method {
        Method::POST if subresource == Some("token") => token_request::create(&request),
        _ if subresource == Some("token") => Err(ApiError::MethodNotAllowed),
        Method::GET if request.query.flag("watch") => watch::serve(&request),
        Method::GET if subresource == Some("log") => logs::serve(&request).await,
        Method::GET => objects::get(&request),
        Method::POST => objects::create(&request),
        Method::PUT => objects::update(&request),
        Method::PATCH => objects::patch(&request),
        Method::DELETE => objects::delete(&request),
        _ => Err(ApiError::MethodNotAllowed),
    };
    (entry, response.unwrap_or_else(|e| error(&e)))
}

/// A JSON response.
pub(crate) fn json(code: StatusCode, value: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(value.to_string()),
    )
        .into_response()
}

/// The Status object for an error, with its HTTP code.
pub(crate) fn error(e: &ApiError) -> Response {
    let code = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(code, &e.to_status())
}
