//! `pods/log`: what a container wrote, from the files the kubelet keeps,
//! with `container`, `tailLines`, `limitBytes`, `previous` and `follow`.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;

use super::objects::Request;
use crate::kubelet::logs::{follow, read_log};
use crate::status::ApiError;

pub async fn serve(req: &Request<'_>) -> Result<Response, ApiError> {
    let name = req.path.name.as_deref().unwrap_or_default();
    let pod = req
        .api
        .store
        .get(&req.path.resource, req.path.namespace_or_default(), name)?;
    let container = container_of(&pod, name, req.query.get("container"))?;
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let previous = req.query.flag("previous");
    let file = if previous {
        req.api.logs.previous(uid, &container).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            ))
        })?
    } else {
        req.api.logs.current(uid, &container).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: {}",
                waiting_reason(&pod, &container)
            ))
        })?
    };
    let tail = req.query.number("tailLines")?.map(|n| n.max(0) as usize);
    let limit = req.query.number("limitBytes")?.map(|n| n.max(0) as usize);
    let text = [(header::CONTENT_TYPE, "text/plain")];
    if req.query.flag("follow") && !previous {
        let stream = follow(file.path, tail, file.finished).map(|chunk| match chunk {
            Ok(bytes) => Ok::<Bytes, Infallible>(bytes),
            Err(e) => {
                tracing::warn!("log stream ended: {e}");
                Ok(Bytes::new())
            }
        });
        return Ok((StatusCode::OK, text, Body::from_stream(stream)).into_response());
    }
    let path = file.path;
    let bytes = tokio::task::spawn_blocking(move || read_log(&path, tail, limit))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| ApiError::Internal(format!("reading the log: {e}")))?;
    Ok((StatusCode::OK, text, Body::from(bytes)).into_response())
}

/// The container a log request means: the named one, or the only one.
fn container_of(pod: &Value, name: &str, wanted: Option<&str>) -> Result<String, ApiError> {
    let names: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    match wanted.filter(|w| !w.is_empty()) {
        Some(w) if names.contains(&w) => Ok(w.to_string()),
        Some(w) => Err(ApiError::BadRequest(format!(
            "container {w} is not valid for pod {name}"
        ))),
        None if names.len() == 1 => Ok(names[0].to_string()),
        None => Err(ApiError::BadRequest(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            names.join(" ")
        ))),
    }
}

fn waiting_reason(pod: &Value, container: &str) -> String {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == container)
        .and_then(|s| s["state"]["waiting"]["reason"].as_str())
        .unwrap_or("ContainerCreating")
        .to_string()
}
