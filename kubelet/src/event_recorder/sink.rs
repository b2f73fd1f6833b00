//! Where correlated events are written: the API server's `core/v1` Events, or a test double.

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::kube_client::ApiHandle;

/// A sink's answer, boxed so that the trait stays object-safe and `Send`.
pub type SinkFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The server refused an event.
#[derive(Debug, Clone)]
pub struct Rejection {
    /// The server's message.
    pub message: String,
    /// It exists already (a benign race, logged at debug as Go).
    pub already_exists: bool,
}

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The event to patch is gone.
    #[error("event not found")]
    NotFound,
    /// The server answered no; retrying would not help.
    #[error("rejected: {}", .0.message)]
    Rejected(Rejection),
    /// The server could not be reached; worth retrying.
    #[error("unreachable: {0}")]
    Unreachable(String),
}

/// Creates and patches events.
pub trait EventSink: Send + Sync + 'static {
    /// Creates `event` in `namespace`, returning the server's copy.
    fn create<'a>(
        &'a self,
        namespace: &'a str,
        event: &'a Event,
    ) -> SinkFuture<'a, Result<Event, SinkError>>;
    /// Strategic-merge-patches event `name` with `body`, returning the server's copy.
    fn patch<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        body: &'a serde_json::Value,
    ) -> SinkFuture<'a, Result<Event, SinkError>>;
}

/// The API server, through the current client.
#[derive(Debug, Clone)]
pub struct ApiSink {
    api: ApiHandle,
}

impl ApiSink {
    /// Writes through `api`'s current client.
    pub fn new(api: ApiHandle) -> Self {
        Self { api }
    }

    fn events(&self, namespace: &str) -> Api<Event> {
        Api::namespaced(self.api.client(), namespace)
    }
}

impl EventSink for ApiSink {
    fn create<'a>(
        &'a self,
        namespace: &'a str,
        event: &'a Event,
    ) -> SinkFuture<'a, Result<Event, SinkError>> {
        Box::pin(async move {
            self.events(namespace)
                .create(&PostParams::default(), event)
                .await
                .map_err(classify)
        })
    }

    fn patch<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        body: &'a serde_json::Value,
    ) -> SinkFuture<'a, Result<Event, SinkError>> {
        Box::pin(async move {
            self.events(namespace)
                .patch(name, &PatchParams::default(), &Patch::Strategic(body))
                .await
                .map_err(classify)
        })
    }
}

/// Go's `recordEvent` split: an API status is final (404 aside), anything else is retried.
fn classify(err: kube::Error) -> SinkError {
    match err {
        kube::Error::Api(status) if status.is_not_found() => SinkError::NotFound,
        kube::Error::Api(status) => SinkError::Rejected(Rejection {
            already_exists: status.is_already_exists(),
            message: status.message.clone(),
        }),
        kube::Error::SerdeError(e) => SinkError::Rejected(Rejection {
            message: e.to_string(),
            already_exists: false,
        }),
        kube::Error::BuildRequest(e) => SinkError::Rejected(Rejection {
            message: e.to_string(),
            already_exists: false,
        }),
        other => SinkError::Unreachable(other.to_string()),
    }
}
