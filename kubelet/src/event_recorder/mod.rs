//! The kubelet's events in a cluster, as client-go's `tools/record` writes them for the Go
//! kubelet: `record` queues the event (never blocking; a full queue drops it), and one
//! background task correlates it (spam filter, aggregation, repeats as patches) and writes
//! it as a `core/v1` Event, retrying while the API server is unreachable.

pub mod correlator;
mod lru;
pub mod sink;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use tokio::sync::mpsc;

use crate::events::{EventRecorder, EventType};
use crate::kube_client::ApiHandle;

pub use correlator::{Decision, EventCorrelator, make_event, patch_body};
pub use sink::{ApiSink, EventSink, SinkError};

/// Go's `maxQueuedEvents`: events waiting to be written before new ones are dropped.
pub const MAX_QUEUED_EVENTS: usize = 1000;
/// Go's `maxTriesPerEvent`: attempts at writing one event while the server is unreachable.
pub const MAX_TRIES_PER_EVENT: u32 = 12;
/// Go's `defaultSleepDuration`: the pause between attempts (the first one is randomized).
pub const RETRY_SLEEP: Duration = Duration::from_secs(10);

/// The component name in every event's source and `reportingComponent`.
pub const COMPONENT: &str = "kubelet";

/// The recorder writing to the API server; cheap to share.
#[derive(Debug)]
pub struct ApiEventRecorder {
    source: EventSource,
    queue: mpsc::Sender<Event>,
}

/// Starts the writer task for node `node_name` on the current tokio runtime.
pub fn spawn(api: ApiHandle, node_name: &str) -> Arc<ApiEventRecorder> {
    spawn_with(ApiSink::new(api), node_name, RetryPolicy::default())
}

/// How a write that could not reach the server is retried.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// Attempts in all.
    pub tries: u32,
    /// Pause between attempts; the first pause is a random part of it.
    pub sleep: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            tries: MAX_TRIES_PER_EVENT,
            sleep: RETRY_SLEEP,
        }
    }
}

/// Starts the writer task over any sink (tests use an in-memory one).
pub fn spawn_with<S: EventSink>(
    sink: S,
    node_name: &str,
    retry: RetryPolicy,
) -> Arc<ApiEventRecorder> {
    let (queue, rx) = mpsc::channel(MAX_QUEUED_EVENTS);
    tokio::spawn(run(rx, sink, EventCorrelator::default(), retry));
    Arc::new(ApiEventRecorder {
        source: EventSource {
            component: Some(COMPONENT.to_owned()),
            host: Some(node_name.to_owned()),
        },
        queue,
    })
}

impl EventRecorder for ApiEventRecorder {
    fn record(&self, object: &ObjectReference, kind: EventType, reason: &str, message: &str) {
        let event = make_event(
            &self.source,
            object,
            kind,
            reason,
            message,
            Timestamp::now(),
        );
        match self.queue.try_send(event) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => tracing::error!(
                object = object.name.as_deref().unwrap_or(""),
                reason,
                "unable to record event: too many queued events, dropped event"
            ),
            Err(mpsc::error::TrySendError::Closed(_)) => tracing::debug!(
                object = object.name.as_deref().unwrap_or(""),
                reason,
                "event writer stopped; dropped event"
            ),
        }
    }
}

/// The writer: correlates and writes queued events one by one, as Go's sink watcher.
async fn run<S: EventSink>(
    mut rx: mpsc::Receiver<Event>,
    sink: S,
    mut correlator: EventCorrelator,
    retry: RetryPolicy,
) {
    while let Some(event) = rx.recv().await {
        let decision = correlator.correlate(event, Timestamp::now());
        write(&sink, decision, &mut correlator, retry).await;
    }
}

/// Writes one decision, retrying only while the server cannot be reached (Go's
/// `recordToSink`); a rejected event is logged and given up.
async fn write<S: EventSink>(
    sink: &S,
    decision: Decision,
    correlator: &mut EventCorrelator,
    retry: RetryPolicy,
) {
    let (event, patch) = match decision {
        Decision::Drop => {
            tracing::debug!("event dropped by the spam filter");
            return;
        }
        Decision::Create(event) => (event, None),
        Decision::Patch {
            name,
            count,
            last_timestamp,
            message,
            event,
        } => (
            event,
            Some((name, patch_body(count, &last_timestamp, &message))),
        ),
    };
    let mut tries = 0;
    loop {
        match write_once(sink, &event, patch.as_ref()).await {
            Ok(written) => {
                correlator.update_state(&written);
                return;
            }
            Err(SinkError::Rejected(e)) => {
                if e.already_exists {
                    tracing::debug!(reason = ?event.reason, "event already exists: {}", e.message);
                } else {
                    tracing::warn!(reason = ?event.reason, "server rejected event (will not retry): {}", e.message);
                }
                return;
            }
            Err(SinkError::Unreachable(e)) => {
                tries += 1;
                if tries >= retry.tries {
                    tracing::error!(reason = ?event.reason, "unable to write event (retry limit exceeded): {e}");
                    return;
                }
                tracing::debug!(reason = ?event.reason, tries, "unable to write event, will retry: {e}");
                tokio::time::sleep(pause(retry.sleep, tries)).await;
            }
            Err(SinkError::NotFound) => {
                // A create answered 404 (the namespace is gone): final, as in Go.
                tracing::warn!(reason = ?event.reason, "server rejected event (will not retry): not found");
                return;
            }
        }
    }
}

/// One attempt: patch a repeat, creating it anew if the old event is gone.
async fn write_once<S: EventSink>(
    sink: &S,
    event: &Event,
    patch: Option<&(String, serde_json::Value)>,
) -> Result<Event, SinkError> {
    let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
    if let Some((name, body)) = patch {
        match sink.patch(namespace, name, body).await {
            Err(SinkError::NotFound) => {}
            other => return other,
        }
    }
    let mut fresh = event.clone();
    fresh.metadata.resource_version = None;
    sink.create(namespace, &fresh).await
}

/// The pause after the `tries`th failure: the first is random in [0, sleep) so that
/// kubelets do not all retry in step after an API server outage.
fn pause(sleep: Duration, tries: u32) -> Duration {
    if tries > 1 {
        return sleep;
    }
    let fraction = f64::from(Timestamp::now().subsec_nanosecond().unsigned_abs()) / 1e9;
    sleep.mul_f64(fraction.clamp(0.0, 1.0))
}
