//! The streaming server behind Exec, Attach and PortForward, as containerd's CRI runs one
//! (`internal/cri/streaming`, after the Go kubelet's `pkg/cri/streaming`): the RPC validates
//! the request and stores it under a single-use token ([`cache`]), answering with a URL on
//! this server (`http://<stream_server_address>:<port>/exec/<token>`); the client then
//! upgrades a connection to that URL (SPDY/3.1 or WebSocket, through
//! `ferrolet_proto::streaming`) and the session runs: [`session`] over the container's
//! exec and attach backends (`crate::container::{exec_stream, attach}`) and [`portforward`].
//!
//! - [`cache`]: tokens, TTL, the in-flight bound.
//!
//! Sessions are admitted when their URL is asked for: at most `max_streaming_sessions`
//! (waiting URLs and running sessions together) at once. A request past that is refused at
//! once with RESOURCE_EXHAUSTED (the kubelet answers 429), rather than admitted to wait
//! behind hundreds of `runc exec`s until its client gives up; the admission is held by the
//! waiting URL and then by the session, and ends with either.
//! - [`validate`]: what a request must satisfy, in Go's words.
//! - [`session`]: one exec, attach or forwarded connection, given the client's streams.
//! - [`portforward`]: dialing inside a sandbox's network namespace; copying both ways.
//! - [`http`]: the HTTP/1.1 server: routes, token lookup, TLS.
//! - [`upgrade`]: protocol negotiation and the session on the upgraded connection.

pub mod cache;
pub mod http;
pub mod portforward;
pub mod session;
pub mod upgrade;
pub mod validate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::cri;

use crate::container::Container;
use crate::sandbox::Sandbox;

pub use cache::{RequestCache, TooManyInFlight};

/// A request waiting for its URL to be used.
#[derive(Clone, Debug)]
pub enum Cached {
    /// An Exec.
    Exec(cri::ExecRequest),
    /// An Attach.
    Attach(cri::AttachRequest),
    /// A PortForward.
    PortForward(cri::PortForwardRequest),
}

/// What the sessions need from the runtime (implemented by it; keeps this module below it).
pub trait Backend: Send + Sync + 'static {
    /// containerd, in our namespace.
    fn containerd(&self) -> &Containerd;
    /// A container by its full id.
    fn container(&self, id: &str) -> Option<Arc<Container>>;
    /// A sandbox by its full id.
    fn sandbox(&self, id: &str) -> Option<Arc<Sandbox>>;
    /// Where a container's exec FIFOs go.
    fn exec_fifo_dir(&self, container_id: &str) -> PathBuf;
}

/// A request with its admission: the place it holds among the sessions the server admits,
/// given back when it is dropped (its URL expired unused, or its session ended).
#[derive(Debug)]
pub struct Admitted {
    /// The request.
    pub request: Cached,
    /// Its place.
    pub permit: tokio::sync::OwnedSemaphorePermit,
}

/// Why a URL was not handed out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refused {
    /// The token cache is full (Go's bound).
    #[error(transparent)]
    InFlight(#[from] TooManyInFlight),
    /// As many sessions as the server admits wait or run.
    #[error(
        "too many streaming sessions: {max} exec, attach and port-forward sessions wait or run (max_streaming_sessions); try again when some have ended"
    )]
    Sessions {
        /// The bound.
        max: usize,
    },
}

/// Hands out URLs: the cache and the server's base URL (cheap to clone).
#[derive(Clone)]
pub struct Urls {
    cache: Arc<RequestCache<Admitted>>,
    base: String,
    sessions: Arc<tokio::sync::Semaphore>,
    max_sessions: usize,
}

impl Urls {
    /// URLs under `base` (`http://127.0.0.1:38023`) backed by `cache`, admitting at most
    /// `max_sessions` sessions at once.
    pub fn new(cache: Arc<RequestCache<Admitted>>, base: String, max_sessions: usize) -> Self {
        Self {
            cache,
            base,
            sessions: Arc::new(tokio::sync::Semaphore::new(max_sessions)),
            max_sessions,
        }
    }

    /// Admits the request and stores it; its URL.
    pub fn insert(&self, request: Cached) -> Result<String, Refused> {
        let kind = match &request {
            Cached::Exec(_) => "exec",
            Cached::Attach(_) => "attach",
            Cached::PortForward(_) => "portforward",
        };
        // Expired URLs give their places back first.
        self.cache.drop_expired();
        let permit = self
            .sessions
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refused::Sessions {
                max: self.max_sessions,
            })?;
        let token = self.cache.insert(Admitted { request, permit })?;
        Ok(format!("{}/{kind}/{token}", self.base))
    }

    /// The cache behind them.
    pub fn cache(&self) -> &Arc<RequestCache<Admitted>> {
        &self.cache
    }
}

/// The streaming server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address is not usable.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Binding the port failed.
    #[error("listening on {addr} for streaming: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The TLS certificate or key could not be used.
    #[error("streaming TLS: {0}")]
    Tls(String),
}

/// A bound streaming server, not yet serving.
pub struct StreamServer {
    listener: tokio::net::TcpListener,
    tls: Option<http::Tls>,
    urls: Urls,
    idle_timeout: Option<std::time::Duration>,
}

impl StreamServer {
    /// Binds `stream_server_address:stream_server_port` (TLS when configured).
    pub async fn bind(config: &crate::config::Config) -> Result<Self, StartError> {
        let addr = config.stream_server_addr()?;
        let idle_timeout = config.stream_idle_timeout()?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| StartError::Bind { addr, source })?;
        let tls = if config.enable_tls_streaming {
            let pair = &config.x509_key_pair_streaming;
            Some(http::Tls::load(&pair.tls_cert_file, &pair.tls_key_file)?)
        } else {
            None
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let urls = Urls::new(
            Arc::default(),
            format!("{scheme}://{local}"),
            config.max_streaming_sessions,
        );
        Ok(Self {
            listener,
            tls,
            urls,
            idle_timeout,
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The URL maker the RPCs use.
    pub fn urls(&self) -> Urls {
        self.urls.clone()
    }

    /// Serves until the process ends.
    pub async fn serve(self, backend: Arc<dyn Backend>) {
        http::serve(
            self.listener,
            self.tls,
            self.urls.cache.clone(),
            backend,
            self.idle_timeout,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn urls_name_the_kind_and_a_token() {
        let urls = Urls::new(Arc::default(), "http://127.0.0.1:1234".into(), 8);
        let u = urls
            .insert(Cached::PortForward(cri::PortForwardRequest::default()))
            .unwrap();
        let token = u
            .strip_prefix("http://127.0.0.1:1234/portforward/")
            .unwrap();
        assert_eq!(token.len(), cache::TOKEN_LEN);
        assert!(matches!(
            urls.cache().consume(token).map(|a| a.request),
            Some(Cached::PortForward(_))
        ));
        let e = urls
            .insert(Cached::Exec(cri::ExecRequest::default()))
            .unwrap();
        assert!(e.starts_with("http://127.0.0.1:1234/exec/"));
    }

    #[test]
    fn sessions_past_the_bound_are_refused_until_one_ends() {
        let urls = Urls::new(Arc::default(), "http://127.0.0.1:1234".into(), 2);
        let exec = || Cached::Exec(cri::ExecRequest::default());
        let a = urls.insert(exec()).unwrap();
        let _b = urls.insert(exec()).unwrap();
        assert_eq!(urls.insert(exec()), Err(Refused::Sessions { max: 2 }));
        // A URL used becomes a session that still holds its place...
        let token = a.rsplit('/').next().unwrap();
        let session = urls.cache().consume(token).unwrap();
        assert!(urls.insert(exec()).is_err());
        // ...until it ends.
        drop(session);
        urls.insert(exec()).unwrap();
    }

    #[tokio::test]
    async fn binds_a_free_port_and_names_it_in_urls() {
        let s = StreamServer::bind(&crate::config::Config::default())
            .await
            .unwrap();
        let port = s.local_addr().unwrap().port();
        assert_ne!(port, 0);
        let u = s
            .urls()
            .insert(Cached::Attach(cri::AttachRequest::default()))
            .unwrap();
        assert!(
            u.starts_with(&format!("http://127.0.0.1:{port}/attach/")),
            "{u}"
        );
    }
}
