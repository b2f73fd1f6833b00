//! The secure kubelet API (`address:port`, 10250 by default) over TLS: every request is
//! authenticated and authorized first ([`auth`]), then served:
//!
//! - the read-only API's endpoints (`/pods`, `/runningpods/`, `/containerLogs/…`,
//!   `/healthz`);
//! - `/configz`: the effective configuration ([`configz`](super::configz));
//! - the [`ExtraRoutes`] other parts of the kubelet register (`/stats/…`, `/metrics…`,
//!   `/debug/pods/…/timeline`); while none is registered for `/stats/` or `/metrics`, those
//!   answer 501;
//! - `/exec`, `/attach`, `/portForward`, `/run`: the streaming endpoints
//!   ([`streaming`](super::streaming)) once [`SecureServer::with_streaming`] gives them the
//!   runtime; 501 without it.
//!
//! Unauthenticated requests get 401 `Unauthorized`, denied ones 403 with the Go kubelet's
//! `Forbidden (user=…, verb=…, resource=nodes, subresource(s)=[…])`, and those whose
//! SubjectAccessReview fails 500 `Authorization error (…)`. The webhook modes review through
//! the API client given to [`SecureServer::bind_with_api`].

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::CertificateDer;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::auth::{self, Authenticator, AuthnError, Authorizer, Denied, Policy, PolicyError};
use super::extra::is_subpath;
use super::streaming::{self, Streaming};
use super::tls::{self, ServingFiles, TlsError};
use super::webhook::{KubeReviews, ReviewClient, TokenAuthenticator, WebhookAuthorizer};
use super::{Body, ExtraRoutes, NodeView, Routes, api_request, common_route, json, text};
use crate::certificate::ReloadingCert;
use crate::config::{AuthorizationMode, Config};
use crate::kube_client::ApiHandle;

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Paths other parts of the kubelet serve through [`ExtraRoutes`]; 501 while unregistered.
const PLUGGED: &[&str] = &["/stats/", "/metrics"];

/// Why the secure API cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SecureError {
    /// The serving certificate or the client CAs.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The static authorization policy.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A setting the server cannot honour (the config check refuses these first).
    #[error("{0}")]
    Unsupported(String),
    /// The address is taken or not ours.
    #[error("listening for the kubelet API on {addr}: {source}")]
    Bind {
        /// `address:port`.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// A webhook mode without an API client (Go's words).
    #[error("no client provided, cannot use webhook {0}")]
    NoClient(&'static str),
    /// The set-up task died.
    #[error("setting up TLS: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// What every request of the server needs.
struct Shared {
    authn: Authenticator,
    authz: Authorizer,
    configz: Bytes,
}

/// The secure API, bound and ready to serve.
pub struct SecureServer {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
    files: ServingFiles,
    streaming: Option<Arc<Streaming>>,
}

impl std::fmt::Debug for SecureServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureServer")
            .field("listener", &self.listener)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl SecureServer {
    /// Sets up TLS (the configured serving pair, or the self-signed one in the cert dir, made
    /// if needed), authentication and authorization from `config`, and binds
    /// `address:port`. Connections wait in the backlog until [`SecureServer::serve`].
    /// Standalone: the webhook modes are refused.
    #[cfg(test)]
    pub async fn bind(config: &Config) -> Result<Self, SecureError> {
        Self::bind_full(config, None, None).await
    }

    /// As [`SecureServer::bind`], presenting the certificate of `serving` when given (the one
    /// `serverTLSBootstrap` obtains and rotates; until it has one, the self-signed pair
    /// stands in).
    #[cfg(test)]
    pub async fn bind_with(
        config: &Config,
        serving: Option<Arc<ReloadingCert>>,
    ) -> Result<Self, SecureError> {
        Self::bind_full(config, serving, None).await
    }

    /// [`SecureServer::bind`] in API-server mode: the webhook modes review through `api`, and
    /// `serving` as in [`SecureServer::bind_with`].
    pub async fn bind_with_api(
        config: &Config,
        api: Option<ApiHandle>,
        serving: Option<Arc<ReloadingCert>>,
    ) -> Result<Self, SecureError> {
        let reviews = api.map(|a| Arc::new(KubeReviews::new(a)) as Arc<dyn ReviewClient>);
        Self::bind_full(config, serving, reviews).await
    }

    /// [`SecureServer::bind`] with the webhook modes reviewing through `reviews`.
    #[cfg(test)]
    pub async fn bind_with_reviews(
        config: &Config,
        reviews: Option<Arc<dyn ReviewClient>>,
    ) -> Result<Self, SecureError> {
        Self::bind_full(config, None, reviews).await
    }

    async fn bind_full(
        config: &Config,
        serving: Option<Arc<ReloadingCert>>,
        reviews: Option<Arc<dyn ReviewClient>>,
    ) -> Result<Self, SecureError> {
        let owned = config.clone();
        let (server_config, shared, files) =
            tokio::task::spawn_blocking(move || setup(&owned, serving, reviews)).await??;
        let addr = SocketAddr::new(config.address, config.port);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| SecureError::Bind { addr, source })?;
        tracing::info!(
            addr = %listener.local_addr().unwrap_or(addr),
            cert = %files.cert_file.display(),
            client_ca = ?config.authentication.client_ca_file,
            anonymous = config.authentication.anonymous,
            authorization = config.authorization.mode.as_str(),
            "kubelet API listening"
        );
        Ok(SecureServer {
            listener,
            acceptor: TlsAcceptor::from(server_config),
            shared: Arc::new(shared),
            files,
            streaming: None,
        })
    }

    /// Serves the streaming endpoints (`/exec`, `/attach`, `/portForward`, `/run`) with
    /// `streaming`; without it they answer 501.
    pub fn with_streaming(mut self, streaming: Streaming) -> Self {
        self.streaming = Some(Arc::new(streaming));
        self
    }

    /// The bound address.
    #[cfg(test)]
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The serving certificate and key in use.
    #[cfg(test)]
    pub fn serving_files(&self) -> &ServingFiles {
        &self.files
    }

    /// Serves until `shutdown` completes; open connections end with it.
    pub async fn serve(
        self,
        view: Arc<dyn NodeView>,
        extra: ExtraRoutes,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, remote)) => {
                        // As Go's listeners: without it, an upgraded SPDY session's small
                        // frames (each stream's SYN_REPLY, which the client awaits before it
                        // opens the next) wait on the client's delayed ACK, ~40 ms apiece.
                        let _ = stream.set_nodelay(true);
                        connections.spawn(connection(
                            stream,
                            remote,
                            self.acceptor.clone(),
                            self.shared.clone(),
                            Handlers { view: view.clone(), extra: extra.clone(), streaming: self.streaming.clone() },
                        ));
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: pause instead of spinning.
                        tracing::warn!(error = %e, "accepting a kubelet API connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        connections.shutdown().await;
        Ok(())
    }
}

/// TLS, authentication and authorization from `config` (the certificate from `serving` when
/// given), reviews through `reviews`. Blocking.
fn setup(
    config: &Config,
    serving: Option<Arc<ReloadingCert>>,
    reviews: Option<Arc<dyn ReviewClient>>,
) -> Result<(Arc<rustls::ServerConfig>, Shared, ServingFiles), SecureError> {
    let authz = match config.authorization.mode {
        AuthorizationMode::AlwaysAllow => Authorizer::AlwaysAllow,
        AuthorizationMode::Static => {
            let path = config.authorization.policy_file.as_deref().ok_or_else(|| {
                SecureError::Unsupported(
                    "authorization.mode Static needs --authorization-policy-file".into(),
                )
            })?;
            Authorizer::Static(Policy::load(path)?)
        }
        AuthorizationMode::Webhook => {
            let client = reviews
                .clone()
                .ok_or(SecureError::NoClient("authorization"))?;
            let authz = &config.authorization;
            Authorizer::Webhook(Arc::new(WebhookAuthorizer::new(
                client,
                &config.node_name,
                authz.webhook_cache_authorized_ttl,
                authz.webhook_cache_unauthorized_ttl,
            )))
        }
    };
    let tokens = if config.authentication.webhook {
        let client = reviews.ok_or(SecureError::NoClient("authentication"))?;
        Some(Arc::new(TokenAuthenticator::new(
            client,
            config.authentication.webhook_cache_ttl,
        )))
    } else {
        None
    };
    let configured = config
        .tls_cert_file
        .as_deref()
        .zip(config.tls_private_key_file.as_deref());
    // Go's certificate names only the host; loopback and the bind address let local clients
    // verify it by the address they dial.
    let mut ips = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
    if !config.address.is_unspecified() {
        ips.push(config.address);
    }
    let host = if config.node_name.is_empty() {
        "localhost"
    } else {
        &config.node_name
    };
    let files = tls::serving_files(configured, &config.cert_dir(), host, &ips)?;
    let clients = config
        .authentication
        .client_ca_file
        .as_deref()
        .map(tls::client_verifier)
        .transpose()?;
    let server_config = match serving {
        Some(serving) => {
            if serving.set_if_empty(tls::certified_key(&files)?) {
                tracing::info!(cert = %files.cert_file.display(), "serving the self-signed certificate until one is issued");
            }
            tls::server_config_resolving(serving, clients.clone())?
        }
        None => tls::server_config(&files, clients.clone())?,
    };
    let mut authn = Authenticator::new(clients, config.authentication.anonymous);
    if let Some(tokens) = tokens {
        authn = authn.with_tokens(tokens);
    }
    let shared = Shared {
        authn,
        authz,
        configz: super::configz::configz(config, Some(&files)).into(),
    };
    Ok((server_config, shared, files))
}

/// What serves an authorized request.
#[derive(Clone)]
struct Handlers {
    view: Arc<dyn NodeView>,
    extra: ExtraRoutes,
    streaming: Option<Arc<Streaming>>,
}

/// One connection: the handshake, then HTTP/1.1 requests with the client's certificates.
async fn connection(
    stream: TcpStream,
    remote: SocketAddr,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
    handlers: Handlers,
) {
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::debug!(%remote, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%remote, "TLS handshake timed out");
            return;
        }
    };
    let peer: Arc<[CertificateDer<'static>]> = tls
        .get_ref()
        .1
        .peer_certificates()
        .map(<[CertificateDer<'static>]>::to_vec)
        .unwrap_or_default()
        .into();
    let service = hyper::service::service_fn(move |req| {
        let (peer, shared, handlers) = (peer.clone(), shared.clone(), handlers.clone());
        async move { Ok::<_, Infallible>(handle(req, &peer, &shared, handlers, remote).await) }
    });
    // Upgrades: the streaming endpoints hand the connection to the runtime's server.
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), service)
        .with_upgrades();
    if let Err(e) = conn.await {
        tracing::debug!(%remote, error = %e, "kubelet API connection");
    }
}

/// Authentication, authorization, then the endpoint.
async fn handle(
    req: Request<Incoming>,
    peer: &[CertificateDer<'static>],
    shared: &Shared,
    handlers: Handlers,
    remote: SocketAddr,
) -> Response<Body> {
    let authorization = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    let user = match shared.authn.authenticate_request(peer, authorization).await {
        Ok(user) => user,
        Err(e) => {
            // The errors never hold the token.
            match &e {
                AuthnError::BadCertificate(_) | AuthnError::TokenReview(_) => {
                    tracing::warn!(%remote, error = %e, "unable to authenticate the request");
                }
                AuthnError::NoCredentials | AuthnError::InvalidToken => {
                    tracing::debug!(%remote, path = req.uri().path(), error = %e, "unauthenticated request");
                }
            }
            return text(StatusCode::UNAUTHORIZED, "Unauthorized");
        }
    };
    let attrs = auth::attributes(req.method(), req.uri().path());
    match shared.authz.authorize(&user, &attrs).await {
        Ok(()) => {}
        Err(Denied::Forbidden(message)) => {
            tracing::info!(%remote, path = req.uri().path(), "{message}");
            return text(StatusCode::FORBIDDEN, message);
        }
        Err(Denied::Error { message, cause }) => {
            tracing::error!(%remote, path = req.uri().path(), error = %cause, "{message}");
            return text(StatusCode::INTERNAL_SERVER_ERROR, message);
        }
    }
    tracing::trace!(user = %user.name, method = %req.method(), path = req.uri().path(), "kubelet API request");
    route(req, shared, handlers, remote).await
}

/// The endpoint of an authorized request.
async fn route(
    req: Request<Incoming>,
    shared: &Shared,
    handlers: Handlers,
    remote: SocketAddr,
) -> Response<Body> {
    let Handlers {
        view,
        extra,
        streaming,
    } = handlers;
    let path = req.uri().path();
    if path == "/configz" {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
        }
        return json(shared.configz.to_vec());
    }
    if let Some(endpoint) = streaming::PATHS.iter().find(|p| is_subpath(path, p)) {
        return match streaming {
            Some(streaming) => streaming.serve(req, view.as_ref(), remote).await,
            None => text(
                StatusCode::NOT_IMPLEMENTED,
                format!(
                    "501 Not Implemented: {endpoint} is a streaming endpoint, and this server \
                     has no runtime to stream from\n"
                ),
            ),
        };
    }
    if let Some(endpoint) = extra.find(path) {
        return endpoint.serve(api_request(&req)).await;
    }
    if PLUGGED.iter().any(|p| is_subpath(path, p)) {
        return text(
            StatusCode::NOT_IMPLEMENTED,
            format!("501 Not Implemented: {path} is not served yet\n"),
        );
    }
    let query = req.uri().query().unwrap_or_default();
    common_route(req.method(), path, query, view, Routes::ReadOnly).await
}

#[cfg(test)]
pub(crate) mod tests;
