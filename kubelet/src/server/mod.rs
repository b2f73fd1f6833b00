//! The kubelet's HTTP APIs on hyper: the read-only API (the Go kubelet's `readOnlyPort`
//! server), the healthz server, and the secure API on `port` ([`secure`]).
//!
//! - `/healthz`: `ok`, or 500 with the reason.
//! - `/pods`: the desired pods with their statuses, a v1 PodList.
//! - `/runningpods/`: what the runtime runs, as pods with just names, UIDs and containers.
//! - `/containerLogs/{namespace}/{pod}/{container}`: a container's log ([`logs`]).
//! - Paths registered as [`extra`] routes: `/stats/summary` ([`stats`]), `/metrics…`
//!   ([`metrics`]), `/debug/pods/{namespace}/{name}/timeline` ([`timeline`]).
//!
//! [`crate::cri_log`] reads the CRI log format, [`follow`] streams a log file as it grows. The
//! secure API adds TLS ([`tls`]), authentication and authorization ([`auth`]),
//! `/configz` ([`configz`]) and the streaming endpoints ([`streaming`]: `/exec`, `/attach`,
//! `/portForward`, `/run`; their queries in [`stream_options`], the connection to the
//! runtime's streaming server through [`upgrade_proxy`]).

pub mod auth;
pub mod configz;
pub mod extra;
pub mod follow;
pub mod logs;
pub mod metrics;
pub mod pod_resources;
pub mod pods;
pub mod secure;
pub mod stats;
pub mod stream_options;
pub mod streaming;
pub mod timeline;
pub mod tls;
pub mod upgrade_proxy;
pub mod webhook;

pub use extra::{ApiRequest, Endpoint, ExtraRoutes};

use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Frame, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::types::{Pod, RuntimePod};

/// What the server reads; the kubelet implements it.
pub trait NodeView: Send + Sync + 'static {
    /// The desired pods, with their full statuses.
    fn pods(&self) -> Vec<Pod>;
    /// The runtime's pods: name, namespace, UID and containers (name, image), as Go's
    /// `/runningpods/`.
    fn running_pods(&self) -> Vec<Pod>;
    /// Whether the kubelet is healthy; the reason when not.
    fn healthy(&self) -> Result<(), String>;
    /// The log file of a container's current instance (or the one before it, `previous`).
    fn container_log_path(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Option<PathBuf>;

    /// The desired pod `namespace/name` (Go's `GetPodByName`). The default looks through
    /// [`NodeView::pods`].
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods()
            .into_iter()
            .find(|p| {
                p.metadata.namespace.as_deref() == Some(namespace)
                    && p.metadata.name.as_deref() == Some(name)
            })
            .map(Arc::new)
    }

    /// The UID of the API's mirror pod of static pod `namespace/name`, if it has one: the
    /// streaming endpoints accept it for the static pod's own, as Go's `TranslatePodUID`.
    fn mirror_pod_uid(&self, _namespace: &str, _name: &str) -> Option<String> {
        None
    }

    /// What the runtime runs of pod `namespace/name` (its sandboxes and containers, newest
    /// first), as last seen; the streaming endpoints find containers and sandboxes in it.
    fn runtime_pod(&self, _namespace: &str, _name: &str) -> Option<RuntimePod> {
        None
    }

    /// Whether the instance writing `log_path` still runs; following its log ends once it
    /// does not (and the file is drained). The default says so while `container_log_path`
    /// still names that file and the pod's status shows the container running.
    fn log_writer_running(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        log_path: &Path,
    ) -> bool {
        if self
            .container_log_path(namespace, pod, container, false)
            .as_deref()
            != Some(log_path)
        {
            return false;
        }
        self.pods()
            .iter()
            .filter(|p| {
                p.metadata.namespace.as_deref() == Some(namespace)
                    && p.metadata.name.as_deref() == Some(pod)
            })
            .flat_map(|p| p.status.iter())
            .flat_map(|s| {
                s.container_statuses
                    .iter()
                    .flatten()
                    .chain(s.init_container_statuses.iter().flatten())
                    .chain(s.ephemeral_container_statuses.iter().flatten())
            })
            .any(|s| s.name == container && s.state.as_ref().is_some_and(|st| st.running.is_some()))
    }
}

/// A response body: all at once, or streamed from a channel (logs).
#[derive(Debug)]
pub enum Body {
    /// The whole body (taken once sent).
    Full(Option<Bytes>),
    /// Chunks as they come; the body ends when the sender goes.
    Stream(mpsc::Receiver<Bytes>),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            Body::Stream(rx) => rx
                .poll_recv(cx)
                .map(|chunk| chunk.map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }
}

/// A plain-text response.
pub(crate) fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut resp = Response::new(Body::Full(Some(body.into())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// A JSON response.
pub(crate) fn json(body: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Body::Full(Some(body.into())));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// Which endpoints a server has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Routes {
    /// The read-only API.
    ReadOnly,
    /// `/healthz` only.
    Healthz,
}

/// Serves the read-only API, with the `extra` endpoints, on a bound listener until
/// `shutdown` completes.
pub async fn serve_read_only_with(
    listener: TcpListener,
    view: Arc<dyn NodeView>,
    extra: ExtraRoutes,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_on(listener, view, Routes::ReadOnly, extra, shutdown).await
}

/// Serves the read-only API on a bound listener (tests bind port 0).
#[cfg(test)]
pub async fn serve_read_only_on(
    listener: TcpListener,
    view: Arc<dyn NodeView>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_on(
        listener,
        view,
        Routes::ReadOnly,
        ExtraRoutes::new(),
        shutdown,
    )
    .await
}

/// Serves `/healthz` only on a bound listener.
pub async fn serve_healthz_on(
    listener: TcpListener,
    view: Arc<dyn NodeView>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_on(
        listener,
        view,
        Routes::Healthz,
        ExtraRoutes::new(),
        shutdown,
    )
    .await
}

async fn serve_on(
    listener: TcpListener,
    view: Arc<dyn NodeView>,
    routes: Routes,
    extra: ExtraRoutes,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let (view, extra) = (view.clone(), extra.clone());
                    connections.spawn(async move {
                        let service = hyper::service::service_fn(move |req| {
                            let (view, extra) = (view.clone(), extra.clone());
                            async move { Ok::<_, Infallible>(route(req, view, routes, &extra).await) }
                        });
                        let conn = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service);
                        if let Err(e) = conn.await {
                            tracing::debug!(error = %e, "HTTP connection");
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tracing::warn!(error = %e, "accepting an HTTP connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    // Open connections (log followers) end with the server.
    connections.shutdown().await;
    Ok(())
}

async fn route(
    req: Request<Incoming>,
    view: Arc<dyn NodeView>,
    routes: Routes,
    extra: &ExtraRoutes,
) -> Response<Body> {
    if routes == Routes::ReadOnly
        && let Some(endpoint) = extra.find(req.uri().path())
    {
        return endpoint.serve(api_request(&req)).await;
    }
    let query = req.uri().query().unwrap_or_default();
    common_route(req.method(), req.uri().path(), query, view, routes).await
}

/// What an [`Endpoint`] sees of `req`.
pub(crate) fn api_request(req: &Request<Incoming>) -> ApiRequest {
    ApiRequest {
        method: req.method().clone(),
        path: req.uri().path().to_string(),
        query: req.uri().query().unwrap_or_default().to_string(),
    }
}

/// The endpoints of `routes` (the read-only API or healthz); 404 for other paths.
pub(crate) async fn common_route(
    method: &Method,
    path: &str,
    query: &str,
    view: Arc<dyn NodeView>,
    routes: Routes,
) -> Response<Body> {
    let known = match routes {
        Routes::Healthz => matches!(path, "/healthz" | "/healthz/ping"),
        Routes::ReadOnly => {
            matches!(
                path,
                "/healthz"
                    | "/healthz/ping"
                    | "/pods"
                    | "/pods/"
                    | "/runningpods"
                    | "/runningpods/"
            ) || path.starts_with("/containerLogs/")
        }
    };
    if !known {
        return text(StatusCode::NOT_FOUND, "404 page not found\n");
    }
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
    }
    match path {
        "/healthz" => healthz(view.as_ref(), query),
        "/healthz/ping" => text(StatusCode::OK, "ok"),
        "/pods" | "/pods/" => pods::pods(view.as_ref()),
        "/runningpods" | "/runningpods/" => pods::running_pods(view.as_ref()),
        _ => logs::container_logs(path, query, view).await,
    }
}

/// `/healthz`: `ok`, or 500 with the failed check, in the Go health checker's words.
fn healthz(view: &dyn NodeView, query: &str) -> Response<Body> {
    let verbose = logs::parse_query(query).iter().any(|(k, _)| k == "verbose");
    match view.healthy() {
        Ok(()) if verbose => text(
            StatusCode::OK,
            "[+]ping ok\n[+]syncloop ok\nhealthz check passed\n",
        ),
        Ok(()) => text(StatusCode::OK, "ok"),
        Err(reason) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("[+]ping ok\n[-]syncloop failed: {reason}\nhealthz check failed\n"),
        ),
    }
}

#[cfg(test)]
mod tests;
