//! The streaming server's HTTP/1.1 side: `GET|POST /exec/{token}`, `/attach/{token}` and
//! `/portforward/{token}`, as the Go CRI streaming server routes them. The token is consumed
//! first (unknown, used or expired: 404, Go's `404 page not found`); then [`super::upgrade`]
//! negotiates the protocol and runs the session on the upgraded connection. Connections are
//! served over TLS when `enable_tls_streaming` is set.

use std::path::Path;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::upgrade::Endpoint;
use super::{Admitted, Backend, Cached, RequestCache, StartError};

/// Go's `http.NotFound` body.
const NOT_FOUND: &str = "404 page not found\n";

/// The server's TLS setup.
pub struct Tls(tokio_rustls::TlsAcceptor);

impl Tls {
    /// Reads a PEM certificate chain and its key.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, StartError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = CertificateDer::pem_file_iter(cert)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| StartError::Tls(format!("reading {}: {e}", cert.display())))?;
        if certs.is_empty() {
            return Err(StartError::Tls(format!(
                "{} holds no certificate",
                cert.display()
            )));
        }
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| StartError::Tls(format!("reading {}: {e}", key.display())))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| StartError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| StartError::Tls(e.to_string()))?;
        Ok(Self(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
    }
}

struct Ctx {
    cache: Arc<RequestCache<Admitted>>,
    backend: Arc<dyn Backend>,
    idle_timeout: Option<std::time::Duration>,
}

/// Accepts connections until the process ends; each is served in its own task, and an
/// upgraded one closed after `idle_timeout` without traffic.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Tls>,
    cache: Arc<RequestCache<Admitted>>,
    backend: Arc<dyn Backend>,
    idle_timeout: Option<std::time::Duration>,
) {
    let ctx = Arc::new(Ctx {
        cache,
        backend,
        idle_timeout,
    });
    let tls = tls.map(|t| Arc::new(t.0));
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of fds, say: wait a little rather than spin.
                tracing::warn!(error = %e, "accepting a streaming connection");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let ctx = ctx.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => match acceptor.accept(tcp).await {
                    Ok(stream) => serve_connection(stream, ctx).await,
                    Err(e) => tracing::debug!(%peer, error = %e, "streaming TLS handshake"),
                },
                None => serve_connection(tcp, ctx).await,
            }
        });
    }
}

async fn serve_connection<S>(io: S, ctx: Arc<Ctx>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let ctx = ctx.clone();
        async move { Ok::<_, std::convert::Infallible>(route(req, &ctx)) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "streaming connection");
    }
}

pub(super) fn text(status: StatusCode, body: &str) -> Response<String> {
    let mut r = Response::new(body.to_string());
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Answers one request; an upgrade's session is spawned to run once hyper hands over the
/// connection.
fn route(req: Request<Incoming>, ctx: &Arc<Ctx>) -> Response<String> {
    let path = req.uri().path().to_string();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (kind, token) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let endpoint = match kind {
        "exec" | "attach" => Endpoint::RemoteCommand,
        "portforward" => Endpoint::PortForward,
        _ => return text(StatusCode::NOT_FOUND, NOT_FOUND),
    };
    if token.is_empty() || token.contains('/') {
        return text(StatusCode::NOT_FOUND, NOT_FOUND);
    }
    if req.method() != Method::GET && req.method() != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
    }
    let Some(admitted) = ctx.cache.consume(token) else {
        return text(StatusCode::NOT_FOUND, NOT_FOUND);
    };
    let matches = matches!(
        (kind, &admitted.request),
        ("exec", Cached::Exec(_))
            | ("attach", Cached::Attach(_))
            | ("portforward", Cached::PortForward(_))
    );
    if !matches {
        return text(StatusCode::NOT_FOUND, NOT_FOUND);
    }
    super::upgrade::start(
        req,
        endpoint,
        admitted,
        ctx.backend.clone(),
        ctx.idle_timeout,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn not_found_is_go_s() {
        let r = text(StatusCode::NOT_FOUND, NOT_FOUND);
        assert_eq!(r.status(), 404);
        assert_eq!(r.body(), "404 page not found\n");
    }
}
