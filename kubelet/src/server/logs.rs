//! `/containerLogs/{namespace}/{pod}/{container}`: the query (`follow`, `previous`,
//! `timestamps`, `tailLines` or `tail`, `sinceSeconds`, `sinceTime`, `limitBytes`) decoded and
//! validated as the Go kubelet does, the pod and container looked up with its error messages,
//! then the log file streamed by [`super::follow`].

use std::path::PathBuf;
use std::sync::Arc;

use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, PodStatus};
use tokio::sync::mpsc;

use super::follow::{self, FollowOptions};
use super::{Body, NodeView, text};
use crate::types::Pod;

/// The log options of a request (a v1 PodLogOptions subset).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogQuery {
    /// Keep streaming as the log grows.
    pub follow: bool,
    /// The instance before the current one.
    pub previous: bool,
    /// Prefix lines with their RFC3339Nano timestamp.
    pub timestamps: bool,
    /// Only the last N lines.
    pub tail_lines: Option<i64>,
    /// Only lines of the last N seconds.
    pub since_seconds: Option<i64>,
    /// Only lines since this time.
    pub since_time: Option<jiff::Timestamp>,
    /// At most this many bytes.
    pub limit_bytes: Option<i64>,
}

/// Why a query was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// A value of the wrong type (Go: 400 "Unable to decode query.").
    #[error("{{\"message\": \"Unable to decode query.\"}}")]
    Decode(String),
    /// Values that do not go together or are out of range (Go: 422 "Invalid request.").
    #[error("{{\"message\": \"Invalid request.\"}}")]
    Invalid(String),
}

/// `a=b&c=d` split and percent-decoded (`+` is a space); later values of a key win.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect()
}

/// Decodes `%XX` escapes; malformed ones are kept as they are.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Go's query booleans: anything but `false` and `0` (even empty) is true.
fn go_bool(v: &str) -> bool {
    !matches!(v.to_ascii_lowercase().as_str(), "false" | "0")
}

fn go_int(key: &str, v: &str) -> Result<i64, QueryError> {
    v.trim()
        .parse::<i64>()
        .map_err(|_| QueryError::Decode(format!("{key}: {v:?} is not an integer")))
}

/// Decodes and validates the query.
pub fn log_query(query: &str) -> Result<LogQuery, QueryError> {
    let mut q = LogQuery::default();
    let pairs = parse_query(query);
    // `tail` is the old name of `tailLines`; `tail=all` means no limit.
    let tail = pairs
        .iter()
        .rev()
        .find(|(k, _)| k == "tail")
        .map(|(_, v)| v.clone());
    for (k, v) in &pairs {
        match k.as_str() {
            "follow" => q.follow = go_bool(v),
            "previous" => q.previous = go_bool(v),
            "timestamps" => q.timestamps = go_bool(v),
            "tailLines" => q.tail_lines = Some(go_int(k, v)?),
            "sinceSeconds" => q.since_seconds = Some(go_int(k, v)?),
            "limitBytes" => q.limit_bytes = Some(go_int(k, v)?),
            "sinceTime" => {
                let t = v.parse::<jiff::Timestamp>().map_err(|_| {
                    QueryError::Decode(format!("sinceTime: {v:?} is not an RFC 3339 time"))
                })?;
                q.since_time = Some(t);
            }
            _ => {}
        }
    }
    match tail.as_deref() {
        Some("all") => q.tail_lines = None,
        Some(v) if !v.is_empty() => q.tail_lines = Some(go_int("tail", v)?),
        _ => {}
    }
    if q.tail_lines.is_some_and(|n| n < 0) {
        return Err(QueryError::Invalid(
            "tailLines must be greater than or equal to 0".into(),
        ));
    }
    if q.limit_bytes.is_some_and(|n| n < 1) {
        return Err(QueryError::Invalid(
            "limitBytes must be greater than 0".into(),
        ));
    }
    if q.since_seconds.is_some_and(|n| n < 1) {
        return Err(QueryError::Invalid(
            "sinceSeconds must be greater than 0".into(),
        ));
    }
    if q.since_seconds.is_some() && q.since_time.is_some() {
        return Err(QueryError::Invalid(
            "at most one of sinceTime or sinceSeconds may be specified".into(),
        ));
    }
    Ok(q)
}

fn bad_request(message: impl Into<String>) -> Response<Body> {
    text(StatusCode::BAD_REQUEST, message.into())
}

/// Which instance to read, or why there is none (Go's `validateContainerLogStatus`).
fn check_status(
    status: Option<&PodStatus>,
    pod: &str,
    container: &str,
    previous: bool,
) -> Result<(), String> {
    let statuses = status.into_iter().flat_map(|s| {
        s.container_statuses
            .iter()
            .flatten()
            .chain(s.init_container_statuses.iter().flatten())
            .chain(s.ephemeral_container_statuses.iter().flatten())
    });
    let found: Option<&ContainerStatus> = statuses.into_iter().find(|s| s.name == container);
    let Some(cs) = found else {
        return Err(format!(
            "container {container:?} in pod {pod:?} is not available"
        ));
    };
    let empty = ContainerState::default();
    let state = cs.state.as_ref().unwrap_or(&empty);
    let last = cs.last_state.as_ref().and_then(|l| l.terminated.as_ref());
    let last_has_id =
        last.is_some_and(|t| t.container_id.as_deref().is_some_and(|id| !id.is_empty()));
    if previous {
        return if last_has_id {
            Ok(())
        } else {
            Err(format!(
                "previous terminated container {container:?} in pod {pod:?} not found"
            ))
        };
    }
    if state.running.is_some() {
        return Ok(());
    }
    if let Some(t) = &state.terminated {
        if t.container_id.as_deref().is_some_and(|id| !id.is_empty()) || last_has_id {
            return Ok(());
        }
        return Err(format!(
            "container {container:?} in pod {pod:?} is terminated"
        ));
    }
    if last.is_some() {
        return if last_has_id {
            Ok(())
        } else {
            Err(format!(
                "container {container:?} in pod {pod:?} is terminated"
            ))
        };
    }
    if let Some(w) = &state.waiting {
        let reason = w.reason.clone().unwrap_or_default();
        return Err(match reason.as_str() {
            "ErrImagePull" => format!(
                "container {container:?} in pod {pod:?} is waiting to start: image can't be pulled"
            ),
            "ImagePullBackOff" => {
                format!(
                    "container {container:?} in pod {pod:?} is waiting to start: trying and failing to pull image"
                )
            }
            _ => format!("container {container:?} in pod {pod:?} is waiting to start: {reason}"),
        });
    }
    Err(format!(
        "container {container:?} in pod {pod:?} is waiting to start - no logs yet"
    ))
}

fn has_container(pod: &Pod, name: &str) -> bool {
    pod.spec.iter().any(|s| {
        s.containers.iter().any(|c| c.name == name)
            || s.init_containers.iter().flatten().any(|c| c.name == name)
            || s.ephemeral_containers
                .iter()
                .flatten()
                .any(|c| c.name == name)
    })
}

/// Handles `/containerLogs/...`.
pub async fn container_logs(path: &str, query: &str, view: Arc<dyn NodeView>) -> Response<Body> {
    let rest = path.strip_prefix("/containerLogs/").unwrap_or_default();
    let mut parts = rest.splitn(3, '/').map(percent_decode);
    let namespace = parts.next().unwrap_or_default();
    let pod_name = parts.next().unwrap_or_default();
    let container = parts.next().unwrap_or_default();
    if pod_name.is_empty() {
        return bad_request(r#"{"message": "Missing podID."}"#);
    }
    if container.is_empty() || container.contains('/') {
        return bad_request(r#"{"message": "Missing container name."}"#);
    }
    if namespace.is_empty() {
        return bad_request(r#"{"message": "Missing podNamespace."}"#);
    }
    let q = match log_query(query) {
        Ok(q) => q,
        Err(e @ QueryError::Decode(_)) => return bad_request(e.to_string()),
        Err(e @ QueryError::Invalid(_)) => {
            return text(StatusCode::UNPROCESSABLE_ENTITY, e.to_string());
        }
    };
    let pods = view.pods();
    let Some(pod) = pods.iter().find(|p| {
        p.metadata.namespace.as_deref() == Some(&namespace)
            && p.metadata.name.as_deref() == Some(&pod_name)
    }) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod {pod_name:?} does not exist"),
        );
    };
    if !has_container(pod, &container) {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {pod_name:?}"),
        );
    }
    if let Err(message) = check_status(pod.status.as_ref(), &pod_name, &container, q.previous) {
        return bad_request(message);
    }
    let Some(log_path) = view.container_log_path(&namespace, &pod_name, &container, q.previous)
    else {
        return bad_request(format!(
            "container {container:?} in pod {pod_name:?} has no log file yet"
        ));
    };
    let opened = match tokio::fs::File::open(&log_path).await {
        Ok(f) => f,
        Err(e) => {
            return bad_request(format!(
                "failed to open log file {:?}: {e}",
                log_path.display().to_string()
            ));
        }
    };
    let since = q.since_time.or_else(|| {
        q.since_seconds
            .map(|s| crate::status::now().0 - jiff::SignedDuration::from_secs(s))
    });
    let opts = FollowOptions {
        tail: q
            .tail_lines
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        follow: q.follow,
        render: crate::cri_log::RenderOptions {
            timestamps: q.timestamps,
            since,
            limit_bytes: q.limit_bytes.map(|n| n.unsigned_abs()),
        },
    };
    let (tx, rx) = mpsc::channel(16);
    let running = writer_check(view, namespace, pod_name, container, log_path.clone());
    tokio::spawn(follow::stream(
        opened.into_std().await,
        log_path,
        opts,
        running,
        tx,
    ));
    let mut resp = Response::new(Body::Stream(rx));
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// The "does the writer still run" check for a followed log.
fn writer_check(
    view: Arc<dyn NodeView>,
    namespace: String,
    pod: String,
    container: String,
    path: PathBuf,
) -> follow::RunningCheck {
    Arc::new(move || view.log_writer_running(&namespace, &pod, &container, &path))
}
