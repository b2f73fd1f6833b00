//! `/metrics` and `/metrics/probes`: the process-wide [`crate::metrics`] in the text format,
//! on the read-only and secure ports as the Go kubelet serves them.

use hyper::header::{CONTENT_TYPE as CONTENT_TYPE_HEADER, HeaderValue};
use hyper::{Method, Response, StatusCode};

use super::{ApiRequest, Body, ExtraRoutes};
use crate::metrics::{CONTENT_TYPE, render_async};

/// Registers `/metrics` and `/metrics/probes` on the API servers' extra routes.
pub fn add_routes(extra: ExtraRoutes) -> ExtraRoutes {
    extra.route(
        "/metrics",
        |req: ApiRequest| async move { serve(&req).await },
    )
}

/// The HTTP answer to a request under `/metrics`.
pub async fn serve(req: &ApiRequest) -> Response<Body> {
    if req.method != Method::GET && req.method != Method::HEAD {
        return super::text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
    }
    let probes_only = match req.path.trim_end_matches('/') {
        "/metrics" => false,
        "/metrics/probes" => true,
        _ => return super::text(StatusCode::NOT_FOUND, "404 page not found\n"),
    };
    let body = render_async(probes_only).await;
    let mut resp = super::text(StatusCode::OK, body);
    resp.headers_mut()
        .insert(CONTENT_TYPE_HEADER, HeaderValue::from_static(CONTENT_TYPE));
    resp
}
