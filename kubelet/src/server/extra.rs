//! Endpoints that other parts of the kubelet plug into the API servers without the servers
//! knowing them: `/stats/summary`, `/metrics`, `/metrics/probes`, … An [`Endpoint`] is
//! registered for a path in [`ExtraRoutes`] and answers that path and everything under it;
//! on the secure port it runs after authentication and authorization.
//!
//! ```ignore
//! let extra = ExtraRoutes::new()
//!     .route("/stats/summary", move |req: ApiRequest| { let s = stats.clone(); async move { s.summary(req).await } })
//!     .route("/metrics", metrics_endpoint);
//! ```

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use hyper::{Method, Response};

use super::Body;

/// A request handed to an [`Endpoint`].
#[derive(Clone, Debug)]
pub struct ApiRequest {
    /// The method.
    pub method: Method,
    /// The path, e.g. `/stats/summary`.
    pub path: String,
    /// The raw query string (without `?`), "" when none.
    pub query: String,
}

/// Answers the requests of one registered path.
pub trait Endpoint: Send + Sync + 'static {
    /// The response to `req`.
    fn serve(&self, req: ApiRequest) -> BoxFuture<'static, Response<Body>>;
}

impl<F, Fut> Endpoint for F
where
    F: Fn(ApiRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    fn serve(&self, req: ApiRequest) -> BoxFuture<'static, Response<Body>> {
        Box::pin(self(req))
    }
}

/// Registered endpoints by path; cheap to clone and share between servers.
#[derive(Clone, Default)]
pub struct ExtraRoutes {
    routes: Vec<(String, Arc<dyn Endpoint>)>,
}

impl std::fmt::Debug for ExtraRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.routes.iter().map(|(p, _)| p))
            .finish()
    }
}

impl ExtraRoutes {
    /// No endpoints.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `path` and the paths under it with `endpoint`; the longest registered path
    /// that matches a request wins, and a path registered again replaces the earlier one.
    pub fn route(mut self, path: &str, endpoint: impl Endpoint) -> Self {
        let path = path.trim_end_matches('/').to_string();
        self.routes.retain(|(p, _)| *p != path);
        self.routes.push((path, Arc::new(endpoint)));
        // Longest first, so the first match is the most specific.
        self.routes.sort_by_key(|r| std::cmp::Reverse(r.0.len()));
        self
    }

    /// The endpoint for `path`, if one is registered.
    pub fn find(&self, path: &str) -> Option<Arc<dyn Endpoint>> {
        self.routes
            .iter()
            .find(|(p, _)| is_subpath(path, p))
            .map(|(_, e)| e.clone())
    }

    /// Whether no endpoint is registered.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

/// Whether `sub` is `path` or under it (`path`'s trailing slash ignored), as Go's kubelet
/// matches its paths.
pub fn is_subpath(sub: &str, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    sub == path
        || sub
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use hyper::StatusCode;

    fn req(path: &str) -> ApiRequest {
        ApiRequest {
            method: Method::GET,
            path: path.into(),
            query: String::new(),
        }
    }

    fn answering(s: &'static str) -> impl Endpoint {
        move |_req: ApiRequest| async move { super::super::text(StatusCode::OK, s) }
    }

    async fn body(extra: &ExtraRoutes, path: &str) -> Option<String> {
        use http_body_util::BodyExt;
        let resp = extra.find(path)?.serve(req(path)).await;
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        Some(String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[test]
    fn subpaths() {
        assert!(is_subpath("/stats", "/stats/"));
        assert!(is_subpath("/stats/summary", "/stats/"));
        assert!(is_subpath("/metrics", "/metrics"));
        assert!(is_subpath("/metrics/probes", "/metrics"));
        assert!(!is_subpath("/metricsx", "/metrics"));
        assert!(!is_subpath("/metric", "/metrics"));
        assert!(is_subpath("/", "/"));
    }

    #[tokio::test]
    async fn longest_path_wins_and_later_replaces() {
        let extra = ExtraRoutes::new()
            .route("/metrics", answering("all"))
            .route("/metrics/probes", answering("probes"))
            .route("/stats/", answering("old"))
            .route("/stats", answering("stats"));
        assert_eq!(body(&extra, "/metrics").await.as_deref(), Some("all"));
        assert_eq!(
            body(&extra, "/metrics/cadvisor").await.as_deref(),
            Some("all")
        );
        assert_eq!(
            body(&extra, "/metrics/probes").await.as_deref(),
            Some("probes")
        );
        assert_eq!(
            body(&extra, "/stats/summary").await.as_deref(),
            Some("stats")
        );
        assert_eq!(body(&extra, "/pods").await, None);
        assert!(!extra.is_empty());
        assert!(ExtraRoutes::new().find("/metrics").is_none());
    }
}
