//! An upgrade-aware reverse proxy to the runtime's streaming server (the Go kubelet's
//! `proxyStream`, apimachinery's `UpgradeAwareHandler` with `upgradeRequired`): the client's
//! upgrade request goes to the URL the runtime returned, and once the runtime answers 101 the
//! two connections are joined byte for byte, whatever protocol (SPDY/3.1, WebSocket) they
//! speak; nothing is re-framed.
//!
//! - The upstream request is the client's: its method, the URL's path and query, the client's
//!   headers without the credentials meant for the kubelet (`Authorization`,
//!   `Proxy-Authorization`) and the hop-by-hop ones an upgrade does not need; `Host` names the
//!   runtime; `X-Forwarded-For` gets the client's address, as Go. No body is sent (upgrade
//!   requests carry none).
//! - 101: the client gets 101 with the runtime's headers, then bytes flow both ways until both
//!   directions have ended; an end (EOF) in one direction is passed on as a half-close, and a
//!   client that goes away (reset, TLS closed without notice) closes the runtime's connection,
//!   so the runtime ends the exec.
//! - An error status (400 and above) is passed through with its body (read for at most 10 s,
//!   as Go); another status is an `invalid upgrade response`, and a request that is not an
//!   upgrade, `Upgrade request required` (both 500, the Go kubelet's responder).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::OnceCell;

use super::stream_options::is_upgrade_request;
use super::{Body, text};

/// How long the runtime may take to accept the connection and answer the upgrade (Go waits
/// on the request's context alone; a runtime that never answers should not hold the client).
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an error answer's body may take (Go's deadline on the hijacked connections).
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest error body passed on; more is cut (error answers are a line or two).
const MAX_ERROR_BODY: usize = 1 << 20;

/// Headers of the client's request the runtime does not get: credentials for the kubelet,
/// and hop-by-hop headers other than the upgrade's own (`Connection`, `Upgrade`).
const DROPPED: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "content-length",
    "host",
];

/// Hop-by-hop headers of an error answer that do not describe the body passed on.
const DROPPED_FROM_ERRORS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "content-length",
    "upgrade",
];

/// The bundles Go's crypto/x509 reads the system's roots from on Linux, in its order.
const ROOT_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The TLS client for `https` streaming URLs: the system's roots (`SSL_CERT_FILE`, or the
/// first bundle found), as Go's default transport; loaded on the first `https` URL.
#[derive(Debug, Default)]
pub struct UpstreamTls {
    config: OnceCell<Arc<rustls::ClientConfig>>,
}

impl UpstreamTls {
    /// A client trusting exactly `config`'s roots (tests).
    #[cfg(test)]
    pub fn with_config(config: Arc<rustls::ClientConfig>) -> Self {
        Self {
            config: OnceCell::new_with(Some(config)),
        }
    }

    async fn config(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        self.config
            .get_or_try_init(|| async {
                tokio::task::spawn_blocking(system_client_config)
                    .await
                    .map_err(|e| e.to_string())?
            })
            .await
            .cloned()
    }
}

/// A client config with the system's roots and HTTP/1.1 as its only ALPN protocol.
fn system_client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
    let path = from_env
        .into_iter()
        .chain(ROOT_BUNDLES.iter().map(std::path::PathBuf::from))
        .find(|p| p.is_file())
        .ok_or("no system certificate bundle to verify the runtime's streaming server")?;
    let pem = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok);
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(certs);
    let mut config = rustls::ClientConfig::builder_with_provider(super::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Where the upstream connection goes.
struct Target {
    https: bool,
    host: String,
    port: u16,
    authority: String,
    path_and_query: String,
}

/// The target of the runtime's `location` (a scheme-less URL is `http`, as Go normalizes it).
fn target(location: &str) -> Result<Target, String> {
    let uri: Uri = location
        .parse()
        .map_err(|e| format!("parsing the runtime's streaming URL {location:?}: {e}"))?;
    let https = match uri.scheme_str() {
        None | Some("http") => false,
        Some("https") => true,
        Some(other) => return Err(format!("unknown scheme: {other}")),
    };
    let authority = uri
        .authority()
        .filter(|a| !a.host().is_empty())
        .ok_or_else(|| format!("the runtime's streaming URL {location:?} names no host"))?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok(Target {
        https,
        port: authority.port_u16().unwrap_or(if https { 443 } else { 80 }),
        host,
        authority: authority.as_str().to_string(),
        path_and_query: uri
            .path_and_query()
            .map_or_else(|| "/".to_string(), |p| p.as_str().to_string()),
    })
}

/// The connection to the runtime, plain or TLS.
trait Upstream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Upstream for T {}

async fn dial(target: &Target, tls: &UpstreamTls) -> Result<Box<dyn Upstream>, String> {
    let tcp = TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|e| format!("error dialing backend: dial tcp {}: {e}", target.authority))?;
    let _ = tcp.set_nodelay(true);
    if !target.https {
        return Ok(Box::new(tcp));
    }
    let config = tls
        .config()
        .await
        .map_err(|e| format!("error dialing backend: {e}"))?;
    let name = ServerName::try_from(target.host.clone())
        .map_err(|e| format!("error dialing backend: {e}"))?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("error dialing backend: {e}"))?;
    Ok(Box::new(stream))
}

/// The client's headers as the runtime gets them.
fn upstream_headers(client: &HeaderMap, target: &Target, remote: SocketAddr) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(client.len() + 2);
    for (name, value) in client {
        if !DROPPED.contains(&name.as_str()) && name != header::FORWARDED {
            headers.append(name.clone(), value.clone());
        }
    }
    if let Ok(host) = HeaderValue::from_str(&target.authority) {
        headers.insert(header::HOST, host);
    }
    // Go's AppendForwardedForHeader: the earlier hops, then the client.
    let xff = HeaderName::from_static("x-forwarded-for");
    let prior: Vec<&str> = client
        .get_all(&xff)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let ip = remote.ip().to_string();
    let value = if prior.is_empty() {
        ip
    } else {
        format!("{}, {ip}", prior.join(", "))
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(xff, value);
    }
    if let Some(v) = client.get(header::FORWARDED) {
        headers.insert(header::FORWARDED, v.clone());
    }
    headers
}

/// 500 with the message, as the Go kubelet's proxy responder (`http.Error`).
fn proxy_error(message: impl std::fmt::Display) -> Response<Body> {
    tracing::warn!(error = %message, "error while proxying a streaming request");
    text(StatusCode::INTERNAL_SERVER_ERROR, format!("{message}\n"))
}

/// Proxies `req` (already authorized) to the runtime's streaming URL `location`; `remote` is
/// the client's address.
pub async fn proxy(
    mut req: Request<Incoming>,
    location: &str,
    remote: SocketAddr,
    tls: &UpstreamTls,
) -> Response<Body> {
    if !is_upgrade_request(req.headers()) {
        return proxy_error("Upgrade request required");
    }
    let target = match target(location) {
        Ok(t) => t,
        Err(e) => return proxy_error(format!("error dialing backend: {e}")),
    };
    let upstream = match tokio::time::timeout(UPSTREAM_TIMEOUT, dial(&target, tls)).await {
        Ok(Ok(io)) => io,
        Ok(Err(e)) => return proxy_error(e),
        Err(_) => {
            return proxy_error(format!(
                "error dialing backend: dial tcp {}: i/o timeout",
                target.authority
            ));
        }
    };
    let mut upstream_req = Request::new(Empty::<Bytes>::new());
    *upstream_req.method_mut() = req.method().clone();
    *upstream_req.headers_mut() = upstream_headers(req.headers(), &target, remote);
    match target.path_and_query.parse() {
        Ok(uri) => *upstream_req.uri_mut() = uri,
        Err(e) => return proxy_error(format!("error sending request: {e}")),
    }
    let exchange = async {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(upstream))
            .await
            .map_err(|e| format!("error sending request: {e}"))?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "streaming upstream connection");
            }
        });
        sender
            .send_request(upstream_req)
            .await
            .map_err(|e| e.to_string())
    };
    let mut resp = match tokio::time::timeout(UPSTREAM_TIMEOUT, exchange).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => return proxy_error(e),
        Err(_) => return proxy_error("no answer from the runtime's streaming server"),
    };
    let status = resp.status();
    if status == StatusCode::SWITCHING_PROTOCOLS {
        let upstream = hyper::upgrade::on(&mut resp);
        let client = hyper::upgrade::on(&mut req);
        let mut answer = Response::new(Body::Full(None));
        *answer.status_mut() = status;
        *answer.headers_mut() = resp.headers().clone();
        tokio::spawn(join(client, upstream, location.to_string()));
        return answer;
    }
    if status.as_u16() < 400 {
        return proxy_error(format!(
            "invalid upgrade response: status code {}",
            status.as_u16()
        ));
    }
    pass_error(resp).await
}

/// The runtime's error answer, status, headers and body, as the client gets it.
async fn pass_error(resp: Response<Incoming>) -> Response<Body> {
    let (parts, mut incoming) = resp.into_parts();
    let mut body = Vec::new();
    let read = async {
        while let Some(frame) = incoming.frame().await {
            let Ok(frame) = frame else { break };
            if let Ok(data) = frame.into_data() {
                let room = MAX_ERROR_BODY.saturating_sub(body.len());
                body.extend_from_slice(&data[..data.len().min(room)]);
                if room <= data.len() {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(ERROR_BODY_TIMEOUT, read).await;
    let mut answer = Response::new(Body::Full(Some(Bytes::from(body))));
    *answer.status_mut() = parts.status;
    for (name, value) in &parts.headers {
        if !DROPPED_FROM_ERRORS.contains(&name.as_str()) {
            answer.headers_mut().append(name.clone(), value.clone());
        }
    }
    answer
}

/// Copies bytes both ways between the client's and the runtime's upgraded connections until
/// both directions have ended (or one fails, which ends both).
async fn join(client: hyper::upgrade::OnUpgrade, upstream: hyper::upgrade::OnUpgrade, at: String) {
    let (client, upstream) = match tokio::join!(client, upstream) {
        (Ok(c), Ok(u)) => (c, u),
        (c, u) => {
            tracing::debug!(url = %at, client = ?c.err(), upstream = ?u.err(), "streaming upgrade failed");
            return;
        }
    };
    let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
    match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        Ok((sent, received)) => {
            tracing::debug!(url = %at, sent, received, "streaming connection closed");
        }
        Err(e) => tracing::debug!(url = %at, error = %e, "streaming connection ended"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn targets_of_runtime_urls() {
        let t = target("http://127.0.0.1:34567/exec/AbC?x=1").unwrap();
        assert!(!t.https);
        assert_eq!((t.host.as_str(), t.port), ("127.0.0.1", 34567));
        assert_eq!(t.authority, "127.0.0.1:34567");
        assert_eq!(t.path_and_query, "/exec/AbC?x=1");
        let t = target("https://[::1]/attach/t").unwrap();
        assert!(t.https);
        assert_eq!((t.host.as_str(), t.port), ("::1", 443));
        assert_eq!(target("http://h:1").unwrap().path_and_query, "/");
        assert_eq!(
            target("ftp://h/x").err().unwrap(),
            "unknown scheme: ftp".to_string()
        );
        assert!(target("/exec/abc").err().unwrap().contains("names no host"));
    }

    #[test]
    fn the_runtime_gets_no_credentials() {
        let mut client = HeaderMap::new();
        for (k, v) in [
            ("authorization", "Bearer secret"),
            ("connection", "Upgrade"),
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "v4.channel.k8s.io"),
            ("x-stream-protocol-version", "v3.channel.k8s.io"),
            ("host", "node:10250"),
            ("content-length", "0"),
            ("x-forwarded-for", "10.0.0.1"),
        ] {
            client.append(k, HeaderValue::from_static(v));
        }
        let t = target("http://127.0.0.1:9/exec/x").unwrap();
        let h = upstream_headers(&client, &t, "192.0.2.7:5555".parse().unwrap());
        assert!(h.get("authorization").is_none());
        assert!(h.get("content-length").is_none());
        assert_eq!(h["host"], "127.0.0.1:9");
        assert_eq!(h["connection"], "Upgrade");
        assert_eq!(h.get_all("x-stream-protocol-version").iter().count(), 2);
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 192.0.2.7");
    }
}
