//! Watch streams: chunked newline-delimited JSON events, bookmarks, timeouts, selector
//! transitions, and 410 Expired for resourceVersions the history no longer holds.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::Shared;
use super::http::Body;
use super::resources::ResourceType;
use super::selectors::Selector;
use super::store::{Event, EventType};

/// Frames buffered for a slow client before its watch stops reading events (and then lags
/// out of the broadcast channel and is closed, as the real server closes lagging watches).
const STREAM_BUFFER: usize = 64;

/// What one watch request asked for.
#[derive(Debug)]
pub struct WatchParams {
    /// The resource.
    pub res: &'static ResourceType,
    /// The namespace, or every namespace.
    pub namespace: Option<String>,
    /// Label and field selector.
    pub selector: Selector,
    /// The label selector as asked ("" for none).
    pub label_selector: String,
    /// The field selector as asked, a watched name included ("" for none).
    pub field_selector: String,
    /// Start after this RV; `None` sends ADDED for current objects first.
    pub from: Option<u64>,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
}

fn line(event_type: &str, object: &Value) -> Bytes {
    let mut bytes =
        serde_json::to_vec(&json!({"type": event_type, "object": object})).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// The line a watcher gets for `event`, after its selector: an object leaving the selection
/// is DELETED for this watcher, one entering it ADDED.
fn render(p: &WatchParams, event: &Event) -> Option<Bytes> {
    if event.res.key() != p.res.key() {
        return None;
    }
    if let Some(ns) = &p.namespace
        && event.namespace() != ns
    {
        return None;
    }
    let now = p.selector.matches(&event.object);
    let kind = match event.kind {
        EventType::Modified => {
            let before = event
                .previous
                .as_ref()
                .is_some_and(|o| p.selector.matches(o));
            match (before, now) {
                (true, true) => EventType::Modified,
                (true, false) => EventType::Deleted,
                (false, true) => EventType::Added,
                (false, false) => return None,
            }
        }
        other if now => other,
        _ => return None,
    };
    Some(line(kind.as_str(), &event.object))
}

/// A watch being served, as [`super::TestApiServer::active_watches`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ActiveWatch {
    /// The resource's key (`secrets`, `leases.coordination.k8s.io`).
    pub resource: String,
    /// The namespace, `None` for every namespace.
    pub namespace: Option<String>,
    /// The field selector ("" for none; a watch on one name shows as `metadata.name=<name>`).
    pub field_selector: String,
    /// The label selector ("" for none).
    pub label_selector: String,
}

impl ActiveWatch {
    /// What `p` asked for.
    pub(crate) fn of(p: &WatchParams) -> Self {
        ActiveWatch {
            resource: p.res.key(),
            namespace: p.namespace.clone(),
            field_selector: p.field_selector.clone(),
            label_selector: p.label_selector.clone(),
        }
    }
}

/// Starts a watch and answers with its stream.
pub(crate) async fn serve(shared: Arc<Shared>, p: WatchParams) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(STREAM_BUFFER);
    let started = shared
        .store
        .lock()
        .await
        .watch(p.res, p.namespace.as_deref(), p.from);
    match started {
        Ok((backlog, events)) => {
            let active = shared.watch_started(&p);
            tokio::spawn(async move {
                // Counted while it runs: the guard leaves with the task.
                let _active = active;
                run(shared, p, backlog, events, tx).await;
            });
        }
        Err(e) => {
            // The real server answers 200 and streams one ERROR event carrying the Status.
            let _ = tx.try_send(line("ERROR", &e.to_status()));
            drop(tx);
        }
    }
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    let mut resp = Response::new(StreamBody::new(stream).boxed());
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

async fn run(
    shared: Arc<Shared>,
    p: WatchParams,
    backlog: Vec<Arc<Event>>,
    mut events: broadcast::Receiver<Arc<Event>>,
    tx: mpsc::Sender<Bytes>,
) {
    for event in &backlog {
        if let Some(l) = render(&p, event)
            && tx.send(l).await.is_err()
        {
            return;
        }
    }
    let deadline = p.timeout.map(|t| tokio::time::Instant::now() + t);
    let interval = shared
        .options
        .bookmark_interval
        .max(Duration::from_millis(10));
    let mut bookmarks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    loop {
        tokio::select! {
            received = events.recv() => match received {
                Ok(event) => {
                    if let Some(l) = render(&p, &event)
                        && tx.send(l).await.is_err()
                    {
                        return;
                    }
                }
                // Lagged: the client resumes from its last RV (or relists on 410).
                Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = bookmarks.tick(), if p.bookmarks => {
                if !bookmark(&shared, &p, &mut events, &tx).await {
                    return;
                }
            }
            () = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => return,
            () = tx.closed() => return,
        }
    }
}

/// Sends what is pending, then a BOOKMARK at the store's current RV: events are broadcast
/// under the store lock, so once it is held every event up to that RV is in the channel.
async fn bookmark(
    shared: &Shared,
    p: &WatchParams,
    events: &mut broadcast::Receiver<Arc<Event>>,
    tx: &mpsc::Sender<Bytes>,
) -> bool {
    let (rv, pending) = {
        let store = shared.store.lock().await;
        let mut pending = Vec::new();
        loop {
            match events.try_recv() {
                Ok(e) => pending.push(e),
                Err(broadcast::error::TryRecvError::Empty) => break,
                Err(_) => return false,
            }
        }
        (store.resource_version(), pending)
    };
    for event in &pending {
        if let Some(l) = render(p, event)
            && tx.send(l).await.is_err()
        {
            return false;
        }
    }
    let object = json!({"kind": p.res.kind, "apiVersion": p.res.api_version(),
        "metadata": {"resourceVersion": rv.to_string()}});
    tx.send(line("BOOKMARK", &object)).await.is_ok()
}
