//! `/stats/summary` as an API endpoint ([`super::Endpoint`]) over [`crate::stats`], served on the read-only
//! port and the secure port as the Go kubelet's stats handler serves it: GET or POST,
//! `?only_cpu_and_memory=true` for CPU and memory alone, compact JSON, and 500
//! `Internal Error: …` when the stats cannot be had.

use std::sync::Arc;

use futures::future::BoxFuture;
use hyper::{Method, Response, StatusCode};

use super::{ApiRequest, Body, Endpoint};
use crate::stats::StatsError;
use crate::stats::types::Summary;

/// The path served.
pub const SUMMARY_PATH: &str = "/stats/summary";

/// What the endpoint reads summaries from; the kubelet, or a fake in tests.
pub trait SummarySource: Send + Sync + 'static {
    /// The summary (`cpu_and_memory_only`: CPU and memory alone).
    fn summary(&self, cpu_and_memory_only: bool) -> BoxFuture<'_, Result<Summary, StatsError>>;
}

/// The `/stats/summary` endpoint over `source`, for [`super::ExtraRoutes::route`].
pub fn endpoint<S: SummarySource>(source: Arc<S>) -> impl Endpoint {
    move |req: ApiRequest| {
        let source = source.clone();
        async move { respond(source.as_ref(), &req).await }
    }
}

/// Whether the query asks for CPU and memory only: exactly one `only_cpu_and_memory`, and
/// it is `true`, as the Go handler checks.
pub fn cpu_and_memory_only(query: &str) -> bool {
    let values: Vec<String> = super::logs::parse_query(query)
        .into_iter()
        .filter(|(k, _)| k == "only_cpu_and_memory")
        .map(|(_, v)| v)
        .collect();
    matches!(values.as_slice(), [v] if v == "true")
}

/// The answer to one request.
pub async fn respond<S: SummarySource + ?Sized>(source: &S, req: &ApiRequest) -> Response<Body> {
    if req.path.trim_end_matches('/') != SUMMARY_PATH {
        return super::text(StatusCode::NOT_FOUND, "404 page not found\n");
    }
    if !matches!(req.method, Method::GET | Method::POST | Method::HEAD) {
        return super::text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
    }
    let summary = source.summary(cpu_and_memory_only(&req.query)).await;
    match summary.map(|s| serde_json::to_vec(&s)) {
        Ok(Ok(body)) => super::json(body),
        Ok(Err(e)) => internal_error(&e),
        Err(e) => {
            tracing::warn!(error = %e, "/stats/summary");
            internal_error(&e)
        }
    }
}

fn internal_error(e: &dyn std::fmt::Display) -> Response<Body> {
    super::text(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("Internal Error: {e}\n"),
    )
}
