//! When each task really started, from containerd's own `/tasks/start` events: the moment a
//! container's process runs, whichever CRI runtime or kubelet drove it there (ferrolet-cri,
//! containerd's CRI, ferrolet, the Go kubelet), so start latencies can be compared without
//! trusting any of them to report it. The benchmarks subscribe before they write manifests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::events::TaskStart;
use ferrolet_proto::prost::Message;

/// The topic this watcher publishes to itself: containerd answers a subscription only with
/// its first event, so one marker tells that the subscription is in place.
const MARKER_TOPIC: &str = "/ferrolet/bench/subscribed";

/// Why the watcher could not start.
#[derive(Debug, thiserror::Error)]
pub enum TaskEventsError {
    /// containerd could not be reached.
    #[error("connecting to containerd at {endpoint}: {message}")]
    Connect {
        /// The socket.
        endpoint: String,
        /// What failed.
        message: String,
    },
    /// The subscription was refused or never confirmed.
    #[error("subscribing to containerd's task events: {0}")]
    Subscribe(String),
}

/// Task start times of one containerd namespace, collected from the moment it was created
/// until it is dropped.
#[derive(Debug)]
pub struct TaskStarts {
    starts: Arc<Mutex<HashMap<String, SystemTime>>>,
    collector: tokio::task::JoinHandle<()>,
}

impl TaskStarts {
    /// Subscribes to `/tasks/start` in `namespace` of the containerd at `endpoint`; returns once
    /// containerd holds the subscription, so every later start is seen.
    pub async fn watch(endpoint: &str, namespace: &str) -> Result<Self, TaskEventsError> {
        let cd = Containerd::connect(endpoint, namespace)
            .await
            .map_err(|e| TaskEventsError::Connect {
                endpoint: endpoint.to_string(),
                message: e.to_string(),
            })?;
        let confirmed = tokio::time::timeout(
            Duration::from_secs(10),
            cd.subscribe_confirmed(&["/tasks/start"], MARKER_TOPIC, |_| {}),
        )
        .await
        .map_err(|_| TaskEventsError::Subscribe("not confirmed within 10 s".into()))?;
        let mut stream =
            confirmed.map_err(|s| TaskEventsError::Subscribe(s.message().to_string()))?;
        let starts = Arc::new(Mutex::new(HashMap::new()));
        let sink = Arc::clone(&starts);
        let collector = tokio::spawn(async move {
            while let Ok(Some(envelope)) = stream.message().await {
                if envelope.topic != "/tasks/start" {
                    continue;
                }
                let (Some(event), Some(at)) = (envelope.event, envelope.timestamp) else {
                    continue;
                };
                let Ok(start) = TaskStart::decode(event.value.as_slice()) else {
                    continue;
                };
                let at = timestamp(at.seconds, at.nanos);
                if let Ok(mut starts) = sink.lock() {
                    // A restart's later start replaces the first: callers ask per round.
                    starts.entry(start.container_id).or_insert(at);
                }
            }
        });
        Ok(Self { starts, collector })
    }

    /// When the task of `container_id` (a CRI container id) first started, if it has.
    pub fn started(&self, container_id: &str) -> Option<SystemTime> {
        self.starts.lock().ok()?.get(container_id).copied()
    }

    /// How many task starts were seen (sandboxes' pause tasks included).
    pub fn len(&self) -> usize {
        self.starts.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// Whether none was seen.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for TaskStarts {
    fn drop(&mut self) {
        self.collector.abort();
    }
}

/// A protobuf timestamp as a wall-clock time (before the epoch: the epoch).
fn timestamp(seconds: i64, nanos: i32) -> SystemTime {
    let secs = u64::try_from(seconds).unwrap_or(0);
    let nanos = u32::try_from(nanos).unwrap_or(0);
    UNIX_EPOCH + Duration::new(secs, nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_convert_to_wall_time() {
        let t = timestamp(1_700_000_000, 250_000_000);
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap_or_default(),
            Duration::from_millis(1_700_000_000_250)
        );
        assert_eq!(timestamp(-5, -1), UNIX_EPOCH);
    }
}
