//! The HTTP API server: discovery, CRUD, watch, patch and pod logs over
//! plain HTTP/1.1 on loopback, answering in JSON the way kube-apiserver does.

mod discovery;
pub use discovery::{MAJOR, MINOR};
mod filter;
mod logs;
mod objects;
pub mod protobuf;
mod request;
pub mod table;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::kubelet::LogIndex;
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
}

/// Serves the API on `listener` until the returned task is dropped.
pub fn serve(listener: TcpListener, api: Arc<Api>) -> Owned {
    let app = Router::new()
        .fallback(handle)
        .layer(DefaultBodyLimit::max(16 << 20))
        .with_state(api);
    Owned::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("API server stopped: {e}");
        }
    })
}

async fn handle(
    State(api): State<Arc<Api>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query = Query::parse(uri.query().unwrap_or_default());
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    tracing::debug!("{method} {uri}");
    if let Some(response) = discovery::route(&api, &method, uri.path()) {
        return response;
    }
    let path = match Path::parse(uri.path()) {
        Ok(path) => path,
        Err(e) => return error(&e),
    };
    let request = objects::Request {
        api: &api,
        path,
        query,
        accept,
        content_type,
        body,
    };
    match method {
        Method::GET if request.query.flag("watch") => watch::serve(&request),
        Method::GET if request.path.subresource.as_deref() == Some("log") => {
            logs::serve(&request).await
        }
        Method::GET => objects::get(&request),
        Method::POST => objects::create(&request),
        Method::PUT => objects::update(&request),
        Method::PATCH => objects::patch(&request),
        Method::DELETE => objects::delete(&request),
        _ => Err(ApiError::MethodNotAllowed),
    }
    .unwrap_or_else(|e| error(&e))
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
