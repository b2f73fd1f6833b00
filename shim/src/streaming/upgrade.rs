//! The upgrade, until `ferrolet_proto::streaming` (SPDY/3.1 and WebSocket) is merged: the
//! token is already consumed; the answer says the protocols are not available yet.

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::{Backend, Cached};

/// Which endpoint an upgrade is for (`ferrolet_proto::streaming::Endpoint` once merged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Exec and attach.
    RemoteCommand,
    /// Port-forward.
    PortForward,
}

/// Answers an upgrade request for `cached`.
pub(super) fn start(
    _req: Request<Incoming>,
    _endpoint: Endpoint,
    _cached: Cached,
    _backend: Arc<dyn Backend>,
) -> Response<String> {
    super::http::text(
        StatusCode::NOT_IMPLEMENTED,
        "streaming protocols are not available in this build yet\n",
    )
}
