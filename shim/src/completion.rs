//! Calls that run to their end whatever their client does.
//!
//! tonic drops a handler's future when its client goes away or its deadline passes. A call
//! with side effects cut short there (a sandbox half made, its name reserved, nothing
//! recorded) would leak what it made and wedge the client's next attempt. grpc-go servers
//! (containerd's CRI) run a handler to its end and the client that comes back finds the
//! result; [`run`] gives our handlers the same footing.

use std::future::Future;

use tonic::Status;
use tracing::Instrument;

/// Runs `call` as a task of its own inside the current span, so dropping the caller does not
/// cancel it; a panic in it is the client's `INTERNAL` error.
pub async fn run<T: Send + 'static>(
    call: impl Future<Output = Result<T, Status>> + Send + 'static,
) -> Result<T, Status> {
    tokio::spawn(call.in_current_span())
        .await
        .unwrap_or_else(|e| Err(Status::internal(format!("the call's task failed: {e}"))))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_dropped_caller_does_not_cancel_the_call() {
        let finished = Arc::new(AtomicBool::new(false));
        let flag = finished.clone();
        let caller = run(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
            Ok(())
        });
        // The client goes away at once, as tonic drops a handler whose client hung up.
        assert!(
            tokio::time::timeout(Duration::from_millis(1), caller)
                .await
                .is_err()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(finished.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_panic_is_an_internal_error() {
        let status = run::<()>(async { panic!("boom") }).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Internal);
    }
}
