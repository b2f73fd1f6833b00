//! The pod resources API (Go's `pkg/kubelet/apis/podresources`, v1): `List`, `Get` and
//! `GetAllocatableResources` on `<root-dir>/pod-resources/kubelet.sock` (0600: it tells which
//! pod holds which device), for monitoring agents. Calls are rate-limited as Go's (a token
//! bucket of 100 per second, bursts of 10; past it `ResourceExhausted`).

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use ferrolet_proto::podresources::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, Answer, ContainerDevices,
    ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, POD_RESOURCES_DIR, PodResources, PodResourcesLister,
    PodResourcesListerServer, SOCKET,
};
use tonic::Status;

use crate::types::{Pod, uid_of};

/// Go's `DefaultQPS`.
const QPS: f64 = 100.0;
/// Go's `DefaultBurstTokens`.
const BURST: f64 = 10.0;

/// What the API reports, read from the kubelet's managers.
pub trait PodResourcesSource: Send + Sync + 'static {
    /// The pods the kubelet knows (Go's pod manager's).
    fn pods(&self) -> Vec<Arc<Pod>>;
    /// The devices container `name` of pod `uid` holds.
    fn container_devices(&self, uid: &str, name: &str) -> Vec<ContainerDevices>;
    /// Its exclusive CPUs (static CPU manager).
    fn container_cpus(&self, uid: &str, name: &str) -> Vec<i64>;
    /// The healthy devices.
    fn allocatable_devices(&self) -> Vec<ContainerDevices>;
    /// The CPUs exclusive allocations come from (static CPU manager).
    fn allocatable_cpus(&self) -> Vec<i64>;
}

/// Why the API could not start.
#[derive(Debug, thiserror::Error)]
#[error("serving the pod resources API: {0}")]
pub struct PodResourcesError(#[from] ferrolet_proto::transport::TransportError);

/// Starts serving `source` under `root_dir`; the server runs as long as the runtime.
pub fn start<S: PodResourcesSource>(
    root_dir: &Path,
    source: Arc<S>,
) -> Result<(), PodResourcesError> {
    let socket = root_dir.join(POD_RESOURCES_DIR).join(SOCKET);
    let listener = ferrolet_proto::transport::bind(&socket.display().to_string(), 0o600)?;
    tracing::info!(socket = %socket.display(), "pod resources API: serving");
    let server = tonic::transport::Server::builder()
        .add_service(PodResourcesListerServer::new(Lister {
            source,
            bucket: Arc::new(Mutex::new(Bucket::new())),
        }))
        .serve_with_incoming(ferrolet_proto::transport::incoming(listener, true));
    tokio::spawn(async move {
        if let Err(e) = server.await {
            tracing::error!(error = %e, "pod resources API stopped");
        }
    });
    Ok(())
}

/// A token bucket (Go's `rate.Limiter`).
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new() -> Self {
        Self {
            tokens: BURST,
            at: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * QPS).min(BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Lister<S> {
    source: Arc<S>,
    bucket: Arc<Mutex<Bucket>>,
}

impl<S: PodResourcesSource> Lister<S> {
    /// Runs `f` on the source in a blocking task (the CPU manager's lock is taken by blocking
    /// tasks that write its file), once the rate limit lets the call through.
    fn answer<A: Send + 'static>(
        &self,
        f: impl FnOnce(&S) -> Result<A, Status> + Send + 'static,
    ) -> Answer<A> {
        let allowed = self
            .bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let source = self.source.clone();
        Box::pin(async move {
            if !allowed {
                return Err(Status::resource_exhausted("rejected by rate limit"));
            }
            tokio::task::spawn_blocking(move || f(&source))
                .await
                .map_err(|e| Status::internal(e.to_string()))?
        })
    }
}

/// One pod's resources: its app containers, as Go's v1 server lists them.
fn pod_resources<S: PodResourcesSource>(source: &S, pod: &Pod) -> PodResources {
    let uid = uid_of(pod);
    let containers = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| ContainerResources {
            name: c.name.clone(),
            devices: source.container_devices(&uid, &c.name),
            cpu_ids: source.container_cpus(&uid, &c.name),
            ..Default::default()
        })
        .collect();
    PodResources {
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        containers,
    }
}

impl<S: PodResourcesSource> PodResourcesLister for Lister<S> {
    fn list(&self, _: ListPodResourcesRequest) -> Answer<ListPodResourcesResponse> {
        self.answer(|s| {
            Ok(ListPodResourcesResponse {
                pod_resources: s.pods().iter().map(|p| pod_resources(s, p)).collect(),
            })
        })
    }

    fn get_allocatable_resources(
        &self,
        _: AllocatableResourcesRequest,
    ) -> Answer<AllocatableResourcesResponse> {
        self.answer(|s| {
            Ok(AllocatableResourcesResponse {
                devices: s.allocatable_devices(),
                cpu_ids: s.allocatable_cpus(),
                memory: Vec::new(),
            })
        })
    }

    fn get(&self, r: GetPodResourcesRequest) -> Answer<GetPodResourcesResponse> {
        self.answer(move |s| {
            let pod = s.pods().into_iter().find(|p| {
                p.metadata.name.as_deref() == Some(r.pod_name.as_str())
                    && p.metadata.namespace.as_deref() == Some(r.pod_namespace.as_str())
            });
            let Some(pod) = pod else {
                return Err(Status::unknown(format!(
                    "pod {} in namespace {} not found",
                    r.pod_name, r.pod_namespace
                )));
            };
            Ok(GetPodResourcesResponse {
                pod_resources: Some(pod_resources(s, &pod)),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_a_burst_then_refills() {
        let mut b = Bucket::new();
        for _ in 0..10 {
            assert!(b.take());
        }
        assert!(!b.take());
        b.at -= std::time::Duration::from_millis(20);
        assert!(b.take(), "2 tokens back after 20 ms at 100/s");
    }
}
