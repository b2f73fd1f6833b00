//! HTTP GET for probes and lifecycle hooks, as the Go kubelet's `probe/http`: the URL from
//! the action (scheme, host defaulting to the pod IP, port by number or name, path with its
//! query), the action's headers with `User-Agent: kube-<purpose>/1.32` and `Accept: */*`
//! unless given, certificates not verified, no proxy, no kept-alive connections; redirects
//! followed only to the same host (another host ends the chain on its 3xx answer), at most 10.
//! For probes, 2xx is success, 3xx success with a warning, anything else a failure; at most
//! 10 KiB of the body is read.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction};
use reqwest::header::{ACCEPT, HeaderMap, HeaderName, HeaderValue, USER_AGENT};

use super::check::{CheckError, Outcome, join_host_port, resolve_port};

mod wire;

#[cfg(feature = "fuzzing")]
pub(crate) use wire::judge_answer;

/// Bytes of a probe answer's body that are read (Go's `maxRespBodyLength`).
pub const MAX_BODY: usize = 10 * 1024;
/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 10;
/// The Kubernetes version the user agents name.
pub const KUBE_VERSION: &str = "1.32";

/// The client probes and hooks share.
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    let redirects = reqwest::redirect::Policy::custom(|attempt| {
        let first_host = attempt
            .previous()
            .first()
            .and_then(|u| u.host_str())
            .map(str::to_owned);
        if attempt.url().host_str() != first_host.as_deref() {
            // Go's ErrUseLastResponse: the redirect itself is the answer.
            attempt.stop()
        } else if attempt.previous().len() >= MAX_REDIRECTS {
            attempt.error("stopped after 10 redirects")
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .redirect(redirects)
        // Probes target pods, whose certificates the node cannot check (Go: InsecureSkipVerify).
        .danger_accept_invalid_certs(true)
        .tls_built_in_root_certs(false)
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
}

/// One GET, ready to send.
#[derive(Clone, Debug)]
pub struct HttpGet {
    /// Where.
    pub url: reqwest::Url,
    /// With which headers.
    pub headers: HeaderMap,
}

impl HttpGet {
    /// The request for `action` of `container` in a pod at `pod_ip`; `purpose` names the
    /// user agent (`probe`, `lifecycle`).
    pub fn new(
        action: &HTTPGetAction,
        container: &Container,
        pod_ip: &str,
        purpose: &str,
    ) -> Result<Self, CheckError> {
        let scheme = action
            .scheme
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or("HTTP")
            .to_ascii_lowercase();
        let host = action
            .host
            .as_deref()
            .filter(|h| !h.is_empty())
            .unwrap_or(pod_ip);
        let port = resolve_port(&action.port, container)?;
        let url = format_url(&scheme, host, port, action.path.as_deref().unwrap_or(""))?;
        let mut headers = HeaderMap::new();
        for h in action.http_headers.iter().flatten() {
            let name = HeaderName::from_bytes(h.name.as_bytes())
                .map_err(|e| CheckError::Request(format!("header name {:?}: {e}", h.name)))?;
            let value = HeaderValue::from_str(&h.value)
                .map_err(|e| CheckError::Request(format!("header {:?} value: {e}", h.name)))?;
            headers.append(name, value);
        }
        if !headers.contains_key(USER_AGENT) {
            let agent = format!("kube-{purpose}/{KUBE_VERSION}");
            if let Ok(v) = HeaderValue::from_str(&agent) {
                headers.insert(USER_AGENT, v);
            }
        }
        match headers.get(ACCEPT) {
            None => {
                headers.insert(ACCEPT, HeaderValue::from_static("*/*"));
            }
            // Given but empty: Go sends none (reqwest's own default then applies).
            Some(v) if v.is_empty() => {
                headers.remove(ACCEPT);
            }
            Some(_) => {}
        }
        Ok(Self { url, headers })
    }

    fn request(
        &self,
        client: &reqwest::Client,
        timeout: Option<Duration>,
    ) -> reqwest::RequestBuilder {
        let mut req = client.get(self.url.clone()).headers(self.headers.clone());
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        req
    }
}

/// The URL of scheme, host, port and the action's path (which may carry a query).
fn format_url(scheme: &str, host: &str, port: u16, path: &str) -> Result<reqwest::Url, CheckError> {
    let base = format!("{scheme}://{}", join_host_port(host, port));
    let mut url = reqwest::Url::parse(&base)
        .map_err(|e| CheckError::Request(format!("URL {base:?}: {e}")))?;
    let path = path.split_once('#').map_or(path, |(p, _)| p);
    let (path, query) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path, None),
    };
    url.set_path(path);
    url.set_query(query);
    Ok(url)
}

/// A request error as Go's client prints it: `Get "<url>": <cause>`.
pub fn describe_error(url: &reqwest::Url, e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return format!(
            "Get {:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            url.as_str()
        );
    }
    let at = e.url().unwrap_or(url);
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(e);
    let mut io = None;
    while let Some(s) = source {
        causes.push(s.to_string());
        io = s.downcast_ref::<std::io::Error>().or(io);
        source = s.source();
    }
    let cause = match io {
        // A failed connect reads as Go's dialer puts it.
        Some(io) if e.is_connect() => {
            let host = at.host_str().unwrap_or_default().trim_matches(['[', ']']);
            let port = at.port_or_known_default().unwrap_or_default();
            format!(
                "dial tcp {}: connect: {}",
                join_host_port(host, port),
                go_io_error(io)
            )
        }
        _ if causes.is_empty() => e.to_string(),
        _ => causes.join(": "),
    };
    format!("Get {:?}: {cause}", at.as_str())
}

/// An I/O error as Go prints it: `connection refused`, without Rust's `(os error N)`.
fn go_io_error(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = text
        .split_once(" (os error")
        .map_or(text.as_str(), |(t, _)| t);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Runs an HTTP probe within `timeout`: plain HTTP on the wire directly, HTTPS (and a
/// redirect into it) on `client`.
pub async fn probe(
    client: &reqwest::Client,
    req: &HttpGet,
    timeout: Duration,
) -> (Outcome, String) {
    if req.url.scheme() == "http"
        && let Some(found) = wire::probe(req, timeout).await
    {
        return found;
    }
    // Boxed: the client's future is large, and would otherwise make every probe's future as
    // large even when it runs on the wire alone.
    Box::pin(on_client(client, req, timeout)).await
}

async fn on_client(
    client: &reqwest::Client,
    req: &HttpGet,
    timeout: Duration,
) -> (Outcome, String) {
    let resp = match req.request(client, Some(timeout)).send().await {
        Ok(r) => r,
        // Errors (refused, timeouts) are failures, not errors, so that they count.
        Err(e) => return (Outcome::Failure, describe_error(&req.url, &e)),
    };
    let status = resp.status().as_u16();
    let body = match read_limited(resp, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => return (Outcome::Failure, describe_error(&req.url, &e)),
    };
    verdict(status, &body)
}

/// The verdict on an answer's status code and body.
pub fn verdict(status: u16, body: &str) -> (Outcome, String) {
    match status {
        200..=299 => (Outcome::Success, body.to_string()),
        300..=399 => (
            Outcome::Warning,
            format!("Probe terminated redirects, Response body: {body}"),
        ),
        // The body stays out: it may carry what the user must not see in statuses (Go too).
        _ => (
            Outcome::Failure,
            format!("HTTP probe failed with statuscode: {status}"),
        ),
    }
}

/// Reads at most `limit` bytes of the body (the rest is dropped with the connection).
async fn read_limited(mut resp: reqwest::Response, limit: usize) -> Result<String, reqwest::Error> {
    let mut body = Vec::new();
    while body.len() < limit {
        match resp.chunk().await? {
            Some(chunk) => body.extend_from_slice(&chunk),
            None => break,
        }
    }
    body.truncate(limit);
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Sends a lifecycle hook's GET and reads its answer away; only a failed request is an error
/// (a hook's status code does not matter, as in Go).
pub async fn get(client: &reqwest::Client, req: &HttpGet) -> Result<(), String> {
    let resp = req
        .request(client, None)
        .send()
        .await
        .map_err(|e| describe_error(&req.url, &e))?;
    let _ = read_limited(resp, MAX_BODY).await;
    Ok(())
}

#[cfg(test)]
mod tests;
