//! The kubelet as a node of a cluster: what API-server mode adds to it. The managers it
//! brings (node status and lease, the pod status manager, mirror pods, the event recorder, the
//! API pod source) each take narrow handles; this file joins them to the kubelet: the facts
//! the node status reports, the node admission sees, and the static pods mirrors are kept for.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use k8s_openapi::api::core::v1::{NodeRuntimeHandler, NodeRuntimeHandlerFeatures, PodStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::Kubelet;
use crate::admission::{NodeInfo, Rejection};
use crate::cri::Cri;
use crate::kube_client::ApiHandle;
use crate::mirror_pods::MirrorPods;
use crate::node_status::{
    ImageInfo, NodeFacts, NodeInputs, NodeStatusHandle, Pressure, RuntimeCondition, RuntimeHealth,
};
use crate::pleg::Pleg;
use crate::source::MirrorTable;
use crate::status::phase;
use crate::types::Pod;

/// What API-server mode adds to the kubelet.
pub struct Cluster {
    /// The API client.
    pub api: ApiHandle,
    /// The Node's registration, status and lease.
    pub node_status: NodeStatusHandle,
    /// The mirror pods the API source sees.
    pub mirror_table: MirrorTable,
    /// Keeps the static pods' mirrors.
    pub mirrors: MirrorPods,
}

/// The node status's inputs, read from the kubelet's parts.
pub struct ClusterFacts {
    cri: Cri,
    pleg: Arc<Pleg>,
    kubelet: Weak<Kubelet>,
    /// When the runtime last said RuntimeReady (Go's `runtimeState` last base sync).
    last_ready: Mutex<Option<Instant>>,
}

impl ClusterFacts {
    /// Facts of `kubelet`.
    pub fn new(kubelet: &Arc<Kubelet>) -> Self {
        Self {
            cri: kubelet.cri.clone(),
            pleg: kubelet.pleg.clone(),
            kubelet: Arc::downgrade(kubelet),
            last_ready: Mutex::new(None),
        }
    }

    async fn runtime_health(&self) -> (RuntimeHealth, Option<Vec<NodeRuntimeHandler>>) {
        let mut handlers = None;
        let conditions = match self.cri.status().await {
            Ok(resp) => {
                handlers = Some(self.runtime_handlers(&resp));
                resp.status.map(|s| {
                    s.conditions
                        .into_iter()
                        .map(|c| RuntimeCondition {
                            type_: c.r#type,
                            status: c.status,
                            reason: c.reason,
                            message: c.message,
                        })
                        .collect::<Vec<_>>()
                })
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the runtime's status");
                None
            }
        };
        let ready = conditions
            .as_ref()
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "RuntimeReady" && c.status));
        let mut last = self.last_ready.lock().unwrap_or_else(|p| p.into_inner());
        if ready {
            *last = Some(Instant::now());
        }
        let health = RuntimeHealth {
            last_ready_age: last.map(|t| t.elapsed()),
            conditions,
        };
        (health, handlers)
    }

    /// The Node's `runtimeHandlers` from a CRI Status (Go's setter: user namespace support
    /// only with its gate on); the userns manager learns the same.
    fn runtime_handlers(
        &self,
        resp: &ferrolet_proto::cri::StatusResponse,
    ) -> Vec<NodeRuntimeHandler> {
        let userns_gate = match self.kubelet.upgrade() {
            Some(k) => {
                k.userns.observe_status(resp);
                k.userns.enabled()
            }
            None => false,
        };
        resp.runtime_handlers
            .iter()
            .map(|h| {
                let f = h.features.unwrap_or_default();
                NodeRuntimeHandler {
                    name: Some(h.name.clone()),
                    features: Some(NodeRuntimeHandlerFeatures {
                        recursive_read_only_mounts: Some(f.recursive_read_only_mounts),
                        user_namespaces: userns_gate.then_some(f.user_namespaces),
                    }),
                }
            })
            .collect()
    }
}

impl NodeFacts for ClusterFacts {
    fn gather(&self) -> std::pin::Pin<Box<dyn Future<Output = NodeInputs> + Send + '_>> {
        Box::pin(async move {
            let (runtime, runtime_handlers) = self.runtime_health().await;
            let devices = match self.kubelet.upgrade() {
                Some(k) => k.devices.capacity().await,
                None => Default::default(),
            };
            let images = match self.cri.list_images().await {
                Ok(images) => Some(
                    images
                        .into_iter()
                        .map(|i| ImageInfo {
                            repo_tags: i.repo_tags,
                            repo_digests: i.repo_digests,
                            size: i64::try_from(i.size).unwrap_or(i64::MAX),
                        })
                        .collect(),
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "listing images for the node status");
                    None
                }
            };
            let runtime_version = self
                .cri
                .version()
                .await
                .ok()
                .map(|v| (v.runtime_name, v.runtime_version));
            let pressure = match self.kubelet.upgrade() {
                Some(k) => {
                    use crate::eviction::signals::Condition;
                    Pressure {
                        memory: k.eviction.has_condition(Condition::MemoryPressure),
                        disk: k.eviction.has_condition(Condition::DiskPressure),
                        pid: k.eviction.has_condition(Condition::PidPressure),
                    }
                }
                None => Pressure::default(),
            };
            NodeInputs {
                runtime,
                pleg_error: self.pleg.healthy().err(),
                pressure,
                images,
                runtime_version,
                volumes_in_use: self
                    .kubelet
                    .upgrade()
                    .and_then(|k| k.volumes.volumes_in_use()),
                devices,
                runtime_handlers,
            }
        })
    }
}

impl Kubelet {
    /// The node as admission sees it: the registered Node's allocatable, labels and taints,
    /// or (before registration, and standalone) the machine's capacity.
    pub(super) fn node_info(&self) -> NodeInfo {
        if let Some(node) = self.cluster.get().and_then(|c| c.node_status.node()) {
            return NodeInfo::from_node(&node);
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut allocatable: BTreeMap<String, Quantity> = [
            ("cpu", cpus.to_string()),
            ("memory", self.node.memory_capacity.to_string()),
            ("pods", self.config.max_pods.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v)))
        .collect();
        // Standalone there is no Node: the device plugins' resources as its status would show.
        for (resource, n) in self.devices.allocatable_now() {
            allocatable.insert(resource, Quantity(n.to_string()));
        }
        NodeInfo {
            name: self.node.node_name.clone(),
            allocatable,
            ..Default::default()
        }
    }

    /// The Go kubelet's `canAdmitPod` for a pod seen for the first time, against the pods
    /// admitted before it that have not finished.
    pub(crate) fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        // With in-place resize, the other pods count as allocated, and so does this one if it
        // was allocated before a restart (Go's `AddPod`).
        let uid = crate::types::uid_of(pod);
        let admitted: Vec<Arc<Pod>> = self.allocated_others(&uid);
        let allocated = self.as_allocated(&Arc::new(pod.clone()));
        let pod = allocated.as_ref();
        let mut node = self.node_info();
        self.devices
            .sanitize_allocatable(&crate::types::uid_of(pod), &mut node.allocatable);
        match crate::admission::admit(pod, &node, &admitted) {
            Ok(admitted) => {
                if !admitted.shortfall.is_empty() {
                    tracing::warn!(pod = %crate::types::pod_name(pod), "critical pod admitted without the resources it requests");
                }
                Ok(())
            }
            Err(rejection) => Err(rejection),
        }
    }

    /// Keeps a mirror pod in the API for every static pod that still runs (Go's
    /// `podManager` + `mirrorClient`); a no-op standalone.
    pub(crate) async fn sync_mirror_pods(&self) {
        let Some(cluster) = self.cluster.get() else {
            return;
        };
        let statics: Vec<_> = self
            .pods()
            .into_iter()
            .filter(|s| {
                !s.terminating && !s.rejected && crate::podspec::resources::is_static_pod(&s.pod)
            })
            .collect();
        let pods: Vec<Arc<Pod>> = statics.iter().map(|s| s.pod.clone()).collect();
        cluster
            .mirrors
            .sync(&cluster.api, &pods, &cluster.mirror_table.all())
            .await;
        // A static pod's status waits for its mirror: hand it over again now that the mirror
        // may exist (an unchanged status costs nothing).
        for state in statics {
            if state.status.phase.is_some() {
                self.status_sink.set_pod_status(&state.pod, &state.status);
            }
        }
    }
}

/// The status of a pod admission rejected (Go's `rejectPod`): Failed, with the reason and
/// message, never started.
pub fn rejected_status(rejection: &Rejection) -> PodStatus {
    PodStatus {
        phase: Some(phase::FAILED.into()),
        reason: Some(rejection.reason.clone()),
        message: Some(format!("Pod was rejected: {}", rejection.message)),
        ..Default::default()
    }
}
