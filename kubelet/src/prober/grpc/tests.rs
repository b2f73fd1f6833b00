//! gRPC probes against a grpc.health.v1 server (tonic-health's, over a test service) on a
//! loopback port.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use tonic_health::pb::HealthCheckResponse;
use tonic_health::pb::health_server::{Health as HealthService, HealthServer};

use super::*;

/// The health service: answers with the shared status; service `missing` is NotFound,
/// `unimplemented` Unimplemented, `slow` never answers in time.
struct Health(Arc<AtomicI32>);

#[tonic::async_trait]
impl HealthService for Health {
    async fn check(
        &self,
        req: tonic::Request<HealthCheckRequest>,
    ) -> Result<tonic::Response<HealthCheckResponse>, tonic::Status> {
        let status = self.0.load(Ordering::SeqCst);
        match req.into_inner().service.as_str() {
            "missing" => Err(tonic::Status::not_found("unknown service")),
            "unimplemented" => Err(tonic::Status::unimplemented("no health here")),
            "slow" => {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok(tonic::Response::new(HealthCheckResponse { status }))
            }
            _ => Ok(tonic::Response::new(HealthCheckResponse { status })),
        }
    }

    type WatchStream = futures::stream::Empty<Result<HealthCheckResponse, tonic::Status>>;

    async fn watch(
        &self,
        _: tonic::Request<HealthCheckRequest>,
    ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("probes only check"))
    }
}

/// Serves the health service on a loopback port; returns the port and the status switch.
async fn serve() -> (u16, Arc<AtomicI32>) {
    let status = Arc::new(AtomicI32::new(ServingStatus::Serving as i32));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let svc = HealthServer::new(Health(status.clone()));
    tokio::spawn(async move {
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let _ = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(incoming)
            .await;
    });
    (port, status)
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn serving_passes_and_anything_else_fails() {
    let (port, status) = serve().await;
    assert_eq!(
        probe("127.0.0.1", port, "", SECOND).await,
        (Outcome::Success, "service healthy".into())
    );
    status.store(ServingStatus::NotServing as i32, Ordering::SeqCst);
    assert_eq!(
        probe("127.0.0.1", port, "", SECOND).await,
        (
            Outcome::Failure,
            "service unhealthy (responded with \"NOT_SERVING\")".into()
        )
    );
    status.store(ServingStatus::Unknown as i32, Ordering::SeqCst);
    assert_eq!(
        probe("127.0.0.1", port, "svc", SECOND).await.1,
        "service unhealthy (responded with \"UNKNOWN\")"
    );
}

#[tokio::test]
async fn rpc_errors_fail_with_go_messages() {
    let (port, _) = serve().await;
    let (outcome, message) = probe("127.0.0.1", port, "missing", SECOND).await;
    assert_eq!(outcome, Outcome::Failure);
    assert!(
        message.starts_with("error: health rpc probe failed: "),
        "{message}"
    );
    let (_, message) = probe("127.0.0.1", port, "unimplemented", SECOND).await;
    assert_eq!(
        message,
        "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): no health here"
    );
    let (outcome, message) = probe("127.0.0.1", port, "slow", SECOND).await;
    assert_eq!(outcome, Outcome::Failure);
    assert_eq!(message, "timeout: health rpc did not complete within 1s");
}

#[tokio::test]
async fn no_server_is_a_failure() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (outcome, message) = probe("127.0.0.1", port, "", SECOND).await;
    assert_eq!(outcome, Outcome::Failure);
    assert!(
        message.starts_with(&format!(
            "error: failed to connect service at \"127.0.0.1:{port}\": "
        )),
        "{message}"
    );
}

#[test]
fn status_names_are_the_proto_names() {
    assert_eq!(status_name(1), "SERVING");
    assert_eq!(status_name(2), "NOT_SERVING");
    assert_eq!(status_name(3), "SERVICE_UNKNOWN");
    assert_eq!(status_name(9), "9");
}
