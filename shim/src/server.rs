//! The gRPC server: CRI RuntimeService and ImageService on a unix socket, with graceful
//! shutdown (stop accepting, let in-flight calls finish within a bound, remove the socket).

use std::future::Future;
use std::time::Duration;

use ferrolet_proto::cri::image_service_server::ImageServiceServer;
use ferrolet_proto::cri::runtime_service_server::RuntimeServiceServer;
use ferrolet_proto::transport::{self, TransportError};
use tokio::sync::oneshot;

use crate::image::ImageService;
use crate::runtime::Runtime;

/// Why the server stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket could not be set up.
    #[error(transparent)]
    Listen(#[from] TransportError),
    /// The gRPC server failed.
    #[error("serving CRI: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Serves CRI on `endpoint` until `shutdown` resolves, then gives in-flight calls `grace` to
/// finish. The socket file is removed on the way out, unless another server has replaced it.
/// Clients may send any `:authority` unless `accept_any_authority` is false. A call that
/// outlives its client's deadline is answered `DEADLINE_EXCEEDED` ([`crate::deadline`]).
pub async fn serve(
    endpoint: &str,
    mode: u32,
    runtime: Runtime,
    images: ImageService,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
    accept_any_authority: bool,
) -> Result<(), ServeError> {
    let (listener, socket) = transport::bind_owned(endpoint, mode)?;
    tracing::info!(
        endpoint,
        mode = format!("{mode:o}"),
        accept_any_authority,
        "serving CRI"
    );
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .layer(crate::deadline::DeadlineLayer)
        .add_service(RuntimeServiceServer::new(runtime))
        .add_service(ImageServiceServer::new(images))
        .serve_with_incoming_shutdown(transport::incoming(listener, accept_any_authority), async {
            let _ = stop_rx.await;
        });
    tokio::pin!(server);
    let result = tokio::select! {
        r = &mut server => r.map_err(ServeError::from),
        () = shutdown => {
            tracing::info!(?grace, "shutting down: no new connections, waiting for in-flight calls");
            let _ = stop_tx.send(());
            match tokio::time::timeout(grace, &mut server).await {
                Ok(r) => r.map_err(ServeError::from),
                Err(_) => {
                    tracing::warn!(?grace, "in-flight calls still running after the grace period; exiting");
                    Ok(())
                }
            }
        }
    };
    // Only while the path is still our socket: a successor may have taken it over while we
    // drained, and its socket must stay.
    let path = socket.path().to_path_buf();
    if let Err(e) = socket.remove() {
        tracing::warn!(path = %path.display(), error = %e, "removing the CRI socket");
    }
    result
}

/// Resolves on SIGTERM or SIGINT.
pub async fn termination_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers we cannot shut down gracefully; never resolve, so the
        // default disposition (exit) applies.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
}
