//! The streaming endpoints of the secure API, as the Go kubelet's `getExec`, `getAttach`,
//! `getPortForward` and `getRun`:
//!
//! - `/exec/{namespace}/{pod}[/{uid}]/{container}` and `/attach/…` (GET or POST):
//!   the streams from the query ([`stream_options`](super::stream_options)), the desired pod by
//!   namespace and name, the running container by name in the runtime's pod of that name (the
//!   PLEG's view), then the runtime's `Exec`/`Attach` and the [`upgrade_proxy`](super::upgrade_proxy)
//!   to the URL it returns. Attach takes `tty` from the container's spec, as Go.
//! - `/portForward/{namespace}/{pod}[/{uid}]` (GET or POST): the ports (from the query over
//!   WebSocket), the pod (a given uid must be the desired pod's), the runtime's newest sandbox
//!   of it, `PortForward`, the proxy.
//! - `/run/{namespace}/{pod}[/{uid}]/{container}` (POST): `cmd` (query or form body) split on
//!   spaces, run by `ExecSync` without a deadline; stdout then stderr as the answer, or 500
//!   `command '…' exited with N: <stderr>`.
//!
//! Errors are the Go kubelet's: 400 with the query's error, 404 `pod does not exist`, 500
//! `container not found ("c")`, and the runtime's gRPC errors as Go prints them (`rpc error:
//! code = … desc = …`; NotFound → 404, ResourceExhausted → 429 with `Retry-After`).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};

use ferrolet_proto::cri::{self, ContainerState};

use super::logs::{parse_query, percent_decode};
use super::stream_options::{
    exec_command, is_websocket_request, port_forward_ports, run_command, stream_options,
};
use super::upgrade_proxy::{self, UpstreamTls};
use super::{Body, NodeView, text};
use crate::cri::{Cri, CriError};
use crate::types::{Pod, RuntimePod};

/// The path prefixes served here.
pub const PATHS: &[&str] = &["/exec", "/attach", "/portForward", "/run"];

/// The largest form body `/run` reads (Go's `ParseForm` limit).
const MAX_FORM_BODY: usize = 10 << 20;

/// How long a client waits before retrying after the runtime's ResourceExhausted (Go: the
/// streaming server's token TTL).
const RETRY_AFTER_SECS: &str = "60";

/// The runtime calls the streaming endpoints make; [`Cri`] is the real one.
pub trait StreamingRuntime: Send + Sync + 'static {
    /// `Exec`: the streaming URL.
    fn exec(&self, req: cri::ExecRequest) -> BoxFuture<'_, Result<String, CriError>>;
    /// `Attach`: the streaming URL.
    fn attach(&self, req: cri::AttachRequest) -> BoxFuture<'_, Result<String, CriError>>;
    /// `PortForward`: the streaming URL.
    fn port_forward(&self, req: cri::PortForwardRequest)
    -> BoxFuture<'_, Result<String, CriError>>;
    /// `ExecSync` without a deadline.
    fn run_in_container(
        &self,
        container_id: String,
        cmd: Vec<String>,
    ) -> BoxFuture<'_, Result<cri::ExecSyncResponse, CriError>>;
}

impl StreamingRuntime for Cri {
    fn exec(&self, req: cri::ExecRequest) -> BoxFuture<'_, Result<String, CriError>> {
        Box::pin(Cri::exec(self, req))
    }
    fn attach(&self, req: cri::AttachRequest) -> BoxFuture<'_, Result<String, CriError>> {
        Box::pin(Cri::attach(self, req))
    }
    fn port_forward(
        &self,
        req: cri::PortForwardRequest,
    ) -> BoxFuture<'_, Result<String, CriError>> {
        Box::pin(Cri::port_forward(self, req))
    }
    fn run_in_container(
        &self,
        container_id: String,
        cmd: Vec<String>,
    ) -> BoxFuture<'_, Result<cri::ExecSyncResponse, CriError>> {
        Box::pin(async move { Cri::run_in_container(self, &container_id, cmd).await })
    }
}

/// The streaming endpoints: the runtime they call and the proxy's TLS client.
pub struct Streaming {
    runtime: Arc<dyn StreamingRuntime>,
    tls: UpstreamTls,
}

impl std::fmt::Debug for Streaming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streaming").finish_non_exhaustive()
    }
}

/// Which endpoint a path is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Exec,
    Attach,
    PortForward,
    Run,
}

/// A path's parameters.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    kind: Kind,
    namespace: String,
    pod: String,
    uid: Option<String>,
    container: String,
}

/// A path under one of [`PATHS`] that matches none of its routes (go-restful's answers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NoRoute {
    /// No route of that shape.
    NotFound,
    /// A route, not for this method.
    MethodNotAllowed,
}

impl NoRoute {
    fn response(self) -> Response<Body> {
        match self {
            NoRoute::NotFound => text(StatusCode::NOT_FOUND, "404: Page Not Found"),
            NoRoute::MethodNotAllowed => {
                text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed")
            }
        }
    }
}

/// Whether the URL's pod UID, when it names one, is the desired pod's, or its mirror pod's
/// (the API server knows a static pod by its mirror), as Go's `TranslatePodUID`.
fn uid_matches(view: &dyn NodeView, target: &Target, pod: &Pod) -> bool {
    let Some(wanted) = target.uid.as_deref() else {
        return true;
    };
    pod.metadata.uid.as_deref() == Some(wanted)
        || view
            .mirror_pod_uid(&target.namespace, &target.pod)
            .as_deref()
            == Some(wanted)
}

/// The endpoint and parameters of `path`.
fn parse_path(method: &Method, path: &str) -> Result<Target, NoRoute> {
    let not_found = || NoRoute::NotFound;
    let (prefix, rest) = path
        .strip_prefix('/')
        .and_then(|p| p.split_once('/'))
        .ok_or_else(not_found)?;
    let kind = match prefix {
        "exec" => Kind::Exec,
        "attach" => Kind::Attach,
        "portForward" => Kind::PortForward,
        "run" => Kind::Run,
        _ => return Err(not_found()),
    };
    let segments: Vec<String> = rest.split('/').map(percent_decode).collect();
    if segments.iter().any(String::is_empty) {
        return Err(not_found());
    }
    let with_container = kind != Kind::PortForward;
    let (namespace, pod, uid, container) = match (with_container, segments.as_slice()) {
        (true, [ns, pod, c]) => (ns, pod, None, c.clone()),
        (true, [ns, pod, uid, c]) => (ns, pod, Some(uid.clone()), c.clone()),
        (false, [ns, pod]) => (ns, pod, None, String::new()),
        (false, [ns, pod, uid]) => (ns, pod, Some(uid.clone()), String::new()),
        _ => return Err(not_found()),
    };
    let allowed = match kind {
        Kind::Run => method == Method::POST,
        _ => method == Method::GET || method == Method::POST,
    };
    if !allowed {
        return Err(NoRoute::MethodNotAllowed);
    }
    Ok(Target {
        kind,
        namespace: namespace.clone(),
        pod: pod.clone(),
        uid,
        container,
    })
}

/// Go's `podFullName`: `name_namespace`.
fn full_name(name: &str, namespace: &str) -> String {
    format!("{name}_{namespace}")
}

/// A runtime error as Go prints a gRPC error.
fn go_error(e: &CriError) -> String {
    match e {
        CriError::Call { status, .. } => format!(
            "rpc error: code = {:?} desc = {}",
            status.code(),
            status.message()
        ),
        CriError::Timeout { .. } => {
            "rpc error: code = DeadlineExceeded desc = context deadline exceeded".into()
        }
        CriError::Connect { .. } => e.to_string(),
    }
}

/// A runtime error as the CRI streaming package's `WriteError` answers it.
fn runtime_error(e: &CriError) -> Response<Body> {
    tracing::warn!(error = %e, "streaming request to the runtime");
    let status = match e.code() {
        Some(tonic::Code::NotFound) => StatusCode::NOT_FOUND,
        Some(tonic::Code::ResourceExhausted) => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut resp = text(status, go_error(e));
    if status == StatusCode::TOO_MANY_REQUESTS {
        resp.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
    }
    resp
}

fn internal(message: String) -> Response<Body> {
    text(StatusCode::INTERNAL_SERVER_ERROR, message)
}

/// The first running container named `name` in the runtime's pod (Go's runtime pods list
/// only running containers).
fn running_container<'a>(pod: &'a RuntimePod, name: &str) -> Option<&'a str> {
    pod.containers
        .iter()
        .find(|c| c.name == name && c.state == ContainerState::ContainerRunning)
        .map(|c| c.id.as_str())
}

/// Whether the runtime's pod counts as there (a ready sandbox or a running container).
fn is_running(pod: &RuntimePod) -> bool {
    pod.sandboxes.iter().any(|s| s.ready)
        || pod
            .containers
            .iter()
            .any(|c| c.state == ContainerState::ContainerRunning)
}

/// Whether the container `name` of `pod` has a tty (any of its container lists).
fn container_tty(pod: &Pod, name: &str) -> Option<bool> {
    let spec = pod.spec.as_ref()?;
    let regular = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .map(|c| c.tty.unwrap_or(false));
    regular.or_else(|| {
        spec.ephemeral_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)
            .map(|c| c.tty.unwrap_or(false))
    })
}

impl Streaming {
    /// The endpoints calling `runtime`; `https` streaming URLs are verified against the
    /// system's roots.
    pub fn new(runtime: Arc<dyn StreamingRuntime>) -> Self {
        Self {
            runtime,
            tls: UpstreamTls::default(),
        }
    }

    /// As [`Streaming::new`], with `tls` for `https` streaming URLs.
    #[cfg(test)]
    pub fn with_tls(runtime: Arc<dyn StreamingRuntime>, tls: UpstreamTls) -> Self {
        Self { runtime, tls }
    }

    /// Serves `req` (authorized, its path under one of [`PATHS`]) from `remote`.
    pub async fn serve(
        &self,
        req: Request<Incoming>,
        view: &dyn NodeView,
        remote: SocketAddr,
    ) -> Response<Body> {
        let target = match parse_path(req.method(), req.uri().path()) {
            Ok(t) => t,
            Err(no_route) => return no_route.response(),
        };
        match target.kind {
            Kind::Run => self.run(req, &target, view).await,
            Kind::PortForward => self.port_forward(req, &target, view, remote).await,
            Kind::Exec | Kind::Attach => self.remote_command(req, &target, view, remote).await,
        }
    }

    async fn remote_command(
        &self,
        req: Request<Incoming>,
        target: &Target,
        view: &dyn NodeView,
        remote: SocketAddr,
    ) -> Response<Body> {
        let query = parse_query(req.uri().query().unwrap_or_default());
        let options = match stream_options(&query) {
            Ok(o) => o,
            Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
        };
        let Some(pod) = view.pod(&target.namespace, &target.pod) else {
            return text(StatusCode::NOT_FOUND, "pod does not exist");
        };
        let pod_full_name = full_name(&target.pod, &target.namespace);
        let runtime_pod = view.runtime_pod(&target.namespace, &target.pod);
        let container_id = runtime_pod
            .as_ref()
            .filter(|p| is_running(p))
            .and_then(|p| running_container(p, &target.container))
            .map(str::to_string);
        let url = if target.kind == Kind::Exec {
            let Some(container_id) = container_id.filter(|_| uid_matches(view, target, &pod))
            else {
                return internal(format!("container not found ({:?})", target.container));
            };
            let exec = cri::ExecRequest {
                container_id,
                cmd: exec_command(&query),
                tty: options.tty,
                stdin: options.stdin,
                stdout: options.stdout,
                stderr: options.stderr,
            };
            self.runtime.exec(exec).await
        } else {
            let missing = || {
                internal(format!(
                    "container {} not found in pod {pod_full_name}",
                    target.container
                ))
            };
            let Some(container_id) = container_id else {
                return missing();
            };
            if !uid_matches(view, target, &pod) {
                return internal(format!("pod {pod_full_name} not found"));
            }
            // A running process's tty cannot change: the container's spec decides.
            let Some(tty) = container_tty(&pod, &target.container) else {
                return missing();
            };
            let attach = cri::AttachRequest {
                container_id,
                stdin: options.stdin,
                tty,
                stdout: options.stdout,
                stderr: options.stderr,
            };
            self.runtime.attach(attach).await
        };
        match url {
            Ok(url) => upgrade_proxy::proxy(req, &url, remote, &self.tls).await,
            Err(e) => runtime_error(&e),
        }
    }

    async fn port_forward(
        &self,
        req: Request<Incoming>,
        target: &Target,
        view: &dyn NodeView,
        remote: SocketAddr,
    ) -> Response<Body> {
        let query = parse_query(req.uri().query().unwrap_or_default());
        let ports = match port_forward_ports(&query, is_websocket_request(req.headers())) {
            Ok(p) => p,
            Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
        };
        let Some(pod) = view.pod(&target.namespace, &target.pod) else {
            return text(StatusCode::NOT_FOUND, "pod does not exist");
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !uid_matches(view, target, &pod) {
            return text(StatusCode::NOT_FOUND, "pod not found");
        }
        let pod_full_name = full_name(&target.pod, &target.namespace);
        let Some(runtime_pod) = view
            .runtime_pod(&target.namespace, &target.pod)
            .filter(is_running)
        else {
            return internal(format!("pod not found ({pod_full_name:?})"));
        };
        let Some(sandbox) = runtime_pod.sandboxes.first() else {
            return internal(format!(
                "failed to find sandboxID for pod {pod_full_name}({uid})"
            ));
        };
        let forward = cri::PortForwardRequest {
            pod_sandbox_id: sandbox.id.clone(),
            port: ports,
        };
        match self.runtime.port_forward(forward).await {
            Ok(url) => upgrade_proxy::proxy(req, &url, remote, &self.tls).await,
            Err(e) => runtime_error(&e),
        }
    }

    async fn run(
        &self,
        req: Request<Incoming>,
        target: &Target,
        view: &dyn NodeView,
    ) -> Response<Body> {
        let Some(_pod) = view.pod(&target.namespace, &target.pod) else {
            return text(StatusCode::NOT_FOUND, "pod does not exist");
        };
        let query = match form(req).await {
            Ok(q) => q,
            Err(e) => return text(StatusCode::BAD_REQUEST, e),
        };
        let cmd = run_command(&query);
        let Some(container_id) = view
            .runtime_pod(&target.namespace, &target.pod)
            .filter(is_running)
            .and_then(|p| running_container(&p, &target.container).map(str::to_string))
        else {
            return internal(format!("container not found ({:?})", target.container));
        };
        let resp = match self
            .runtime
            .run_in_container(container_id, cmd.clone())
            .await
        {
            Ok(resp) => resp,
            Err(e) if e.code() == Some(tonic::Code::DeadlineExceeded) => {
                return internal(format!("command {:?} timed out", cmd.join(" ")));
            }
            Err(e) => return internal(go_error(&e)),
        };
        if resp.exit_code != 0 {
            return internal(format!(
                "command '{}' exited with {}: {}",
                cmd.join(" "),
                resp.exit_code,
                String::from_utf8_lossy(&resp.stderr)
            ));
        }
        let mut output = resp.stdout;
        output.extend_from_slice(&resp.stderr);
        if output.is_empty() {
            // Go writes no body and no content type for no output.
            return Response::new(Body::Full(None));
        }
        let mut answer = Response::new(Body::Full(Some(Bytes::from(output))));
        // Go's writeJSONResponse, whatever the command printed.
        answer
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        answer
    }
}

/// The form of `/run`, as Go's `FormValue` sees it: a url-encoded body's pairs first, then
/// the query's.
async fn form(req: Request<Incoming>) -> Result<Vec<(String, String)>, String> {
    let query = parse_query(req.uri().query().unwrap_or_default());
    let urlencoded = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            v.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if !urlencoded {
        return Ok(query);
    }
    let body = Limited::new(req.into_body(), MAX_FORM_BODY)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let mut pairs = parse_query(&String::from_utf8_lossy(&body));
    pairs.extend(query);
    Ok(pairs)
}

#[cfg(test)]
mod tests;
