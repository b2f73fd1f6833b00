//! gRPC probes, as the Go kubelet's `probe/grpc`: `grpc.health.v1.Health/Check` on the pod
//! IP and the probe's port, plaintext, with the probe's service name; `SERVING` is success,
//! any other status or error a failure. The messages and the client are `tonic-health`'s.

use std::time::Duration;

use tonic::codegen::Service;
use tonic::transport::Endpoint;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::check::{Outcome, join_host_port};
use super::http::KUBE_VERSION;

/// The proto name of a status value, as Go prints it (`%d` for values the enum lacks).
pub fn status_name(value: i32) -> String {
    ServingStatus::try_from(value)
        .map_or_else(|_| value.to_string(), |s| s.as_str_name().to_string())
}

/// Asks the health service at `host:port` about `service`, connecting and calling within
/// `timeout`.
pub async fn probe(host: &str, port: u16, service: &str, timeout: Duration) -> (Outcome, String) {
    let addr = join_host_port(host, port);
    let secs = timeout.as_secs();
    let endpoint = match Endpoint::from_shared(format!("http://{addr}"))
        .and_then(|e| e.user_agent(format!("kube-probe/{KUBE_VERSION}")))
    {
        // The call is bounded below, as one deadline for connecting and calling.
        Ok(e) => e.connect_timeout(timeout),
        Err(e) => {
            return (
                Outcome::Failure,
                format!("error: failed to connect service at {addr:?}: {e}"),
            );
        }
    };
    let started = tokio::time::Instant::now();
    let mut channel = match tokio::time::timeout(timeout, endpoint.connect()).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            return (
                Outcome::Failure,
                format!(
                    "error: failed to connect service at {addr:?}: {}",
                    error_chain(&e)
                ),
            );
        }
        Err(_) => {
            return (
                Outcome::Failure,
                format!(
                    "timeout: failed to connect service {addr:?} within {secs}s: context deadline exceeded"
                ),
            );
        }
    };
    let left = timeout.saturating_sub(started.elapsed());
    let request = HealthCheckRequest {
        service: service.to_string(),
    };
    // No grpc-timeout on the request: tonic would enforce it itself (as a Cancelled status)
    // racing the bound below; one deadline, one message.
    let request = tonic::Request::new(request);
    let call = async {
        // Readied here, not by the client (which words the error as an Unknown status), so a
        // channel that cannot take the call reads as Unavailable. The slot it reserves moves
        // with the channel into the client.
        std::future::poll_fn(|cx| channel.poll_ready(cx))
            .await
            .map_err(|e| tonic::Status::unavailable(format!("service was not ready: {e}")))?;
        HealthClient::new(channel).check(request).await
    };
    let timed_out = || {
        (
            Outcome::Failure,
            format!("timeout: health rpc did not complete within {secs}s"),
        )
    };
    match tokio::time::timeout(left, call).await {
        Err(_) => timed_out(),
        Ok(Err(status)) => match status.code() {
            tonic::Code::Unimplemented => (
                Outcome::Failure,
                format!(
                    "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                    status.message()
                ),
            ),
            tonic::Code::DeadlineExceeded => timed_out(),
            tonic::Code::Cancelled if status.message() == "Timeout expired" => timed_out(),
            _ => (
                Outcome::Failure,
                format!("error: health rpc probe failed: {status}"),
            ),
        },
        Ok(Ok(resp)) => {
            let status = resp.into_inner().status;
            if status == ServingStatus::Serving as i32 {
                (Outcome::Success, "service healthy".into())
            } else {
                (
                    Outcome::Failure,
                    format!(
                        "service unhealthy (responded with {:?})",
                        status_name(status)
                    ),
                )
            }
        }
    }
}

/// An error with its causes, `: `-separated.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests;
