//! Watches: newline-delimited JSON events over a chunked response, from a
//! resourceVersion, with bookmarks when asked, selectors applied to both
//! sides of a change (an object that stops matching is seen as DELETED),
//! `timeoutSeconds`, and an ERROR event with a 410 Status for a version
//! older than the history, as the watch cache answers.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::custom;
use super::filter::Filter;
use super::objects::Request;
use super::table::{self, IncludeObject};
use crate::registry::{Resource, Served, Text};
use crate::status::ApiError;
use crate::store::{Change, ChangeType, Subscription};

/// How often a watch that asked for bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);

/// Who reads the events and how they are to be rendered.
struct Watcher {
    resource: Served,
    /// The store's name of the resource's objects.
    key: Text,
    filter: Filter,
    table: Option<IncludeObject>,
    bookmarks: bool,
    name: Option<String>,
}

pub fn serve(req: &Request) -> Result<Response, ApiError> {
    let filter = Filter::from_query(req.path.resource.clone(), &req.query)?;
    let since = match req.query.get("resourceVersion") {
        None | Some("" | "0") => None,
        Some(v) => Some(
            v.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {v:?}")))?,
        ),
    };
    let timeout = req.query.number("timeoutSeconds")?.filter(|t| *t > 0);
    let watcher = Watcher {
        resource: req.path.resource.clone(),
        key: req.path.resource.store_key(),
        filter,
        table: table::wants_table(&req.accept)
            .then(|| IncludeObject::from_query(req.query.get("includeObject"))),
        bookmarks: req.query.flag("allowWatchBookmarks"),
        name: req.path.name.clone(),
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    match req
        .api
        .store
        .watch(&req.path.resource, req.path.namespace.as_deref(), since)
    {
        Ok(sub) => {
            tokio::spawn(pump(watcher, sub, tx, timeout));
        }
        Err(e) => {
            // The watch cache's way: 200, then one ERROR event.
            let line = event_line("ERROR", &e.to_status());
            tokio::spawn(async move { tx.send(Ok(line)).await });
        }
    }
    let content_type = "application/json";
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(ReceiverStream::new(rx)),
    )
        .into_response())
}

async fn pump(
    watcher: Watcher,
    sub: Subscription,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    timeout: Option<i64>,
) {
    let Subscription {
        backlog,
        mut live,
        rv: mut last_rv,
        mut closed,
    } = sub;
    let deadline =
        timeout.map(|t| tokio::time::Instant::now() + Duration::from_secs(t.unsigned_abs()));
    let sleep_until = async move {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(sleep_until);
    for change in backlog {
        if !send(&watcher, &change, &tx).await {
            return;
        }
    }
    let mut bookmark = tokio::time::interval(BOOKMARK_EVERY);
    bookmark.tick().await;
    loop {
        tokio::select! {
            () = &mut sleep_until => return,
            () = tx.closed() => return,
            _ = closed.changed() => return,
            _ = bookmark.tick(), if watcher.bookmarks => {
                let line = event_line("BOOKMARK", &bookmark_object(&watcher.resource, last_rv));
                if tx.send(Ok(line)).await.is_err() {
                    return;
                }
            }
            change = live.recv() => match change {
                Ok(change) => {
                    last_rv = change.rv;
                    if !send(&watcher, &change, &tx).await {
                        return;
                    }
                }
                // Fell behind or the store is gone: end the watch; the
                // client watches again from the last version it saw.
                Err(_) => return,
            },
        }
    }
}

/// Sends one change if this watch sees it; false when the client is gone.
async fn send(
    watcher: &Watcher,
    change: &Change,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
) -> bool {
    let Some((kind, object)) = visible(watcher, change) else {
        return true;
    };
    let object = custom::present(&watcher.resource, object.clone());
    let object = match watcher.table {
        Some(include) => table::one_row(&watcher.resource, &object, include),
        None => object,
    };
    tx.send(Ok(event_line(kind.as_str(), &object)))
        .await
        .is_ok()
}

/// How a change looks through this watch's selectors: a change into the
/// selection is ADDED, out of it DELETED, outside it nothing.
fn visible<'c>(watcher: &Watcher, change: &'c Change) -> Option<(ChangeType, &'c Value)> {
    if change.resource != watcher.key {
        return None;
    }
    let named = |o: &Value| {
        watcher
            .name
            .as_deref()
            .is_none_or(|n| o["metadata"]["name"] == json!(n))
    };
    let now_in = watcher.filter.matches(&change.object) && named(&change.object);
    let was_in = change
        .previous
        .as_ref()
        .map(|p| watcher.filter.matches(p) && named(p));
    let kind = match (change.kind, was_in, now_in) {
        (ChangeType::Modified, Some(false), true) => ChangeType::Added,
        (ChangeType::Modified, Some(true), false) => ChangeType::Deleted,
        (_, _, true) => change.kind,
        _ => return None,
    };
    Some((kind, &change.object))
}

fn bookmark_object(res: &Resource, rv: u64) -> Value {
    json!({"kind": res.kind, "apiVersion": res.api_version(), "metadata": {"resourceVersion": rv.to_string()}})
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}
