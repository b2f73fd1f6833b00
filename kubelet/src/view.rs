//! What the HTTP API reads from the kubelet: desired pods with statuses, the runtime's pods,
//! health, where container logs are, and the pods the streaming endpoints reach.

use std::path::PathBuf;

use ferrolet_proto::cri::ContainerState;
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::kubelet::Kubelet;
use crate::server::NodeView;
use crate::server::stats::SummarySource;
use crate::stats::StatsError;
use crate::stats::types::Summary;
use crate::types::{Pod, RuntimePod};

use crate::pleg::RELIST_THRESHOLD;

impl NodeView for Kubelet {
    fn pods(&self) -> Vec<Pod> {
        Kubelet::pods(self)
            .into_iter()
            .map(|s| {
                let mut pod = std::sync::Arc::unwrap_or_clone(s.pod);
                pod.status = Some(s.status);
                pod
            })
            .collect()
    }

    fn running_pods(&self) -> Vec<Pod> {
        self.pleg
            .all()
            .into_iter()
            .filter(|p| p.sandboxes.iter().any(|s| s.ready))
            .map(|p| Pod {
                metadata: ObjectMeta {
                    name: Some(p.name.clone()),
                    namespace: Some(p.namespace.clone()),
                    uid: Some(p.uid.clone()),
                    ..Default::default()
                },
                spec: Some(PodSpec {
                    containers: p
                        .containers
                        .iter()
                        .filter(|c| c.state == ContainerState::ContainerRunning)
                        .map(|c| Container {
                            name: c.name.clone(),
                            image: Some(c.image.clone()),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }),
                status: None,
            })
            .collect()
    }

    fn healthy(&self) -> Result<(), String> {
        match self.pleg.last_relist() {
            Some(at) if at.elapsed() > RELIST_THRESHOLD => Err(format!(
                "PLEG is not healthy: pleg was last seen active {:?} ago; threshold is {RELIST_THRESHOLD:?}",
                at.elapsed()
            )),
            _ => Ok(()),
        }
    }

    fn pod(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<Pod>> {
        self.find_pod(namespace, name)
    }

    fn mirror_pod_uid(&self, namespace: &str, name: &str) -> Option<String> {
        let cluster = self.cluster.get()?;
        let mirror = cluster.mirror_table.get(&format!("{namespace}/{name}"))?;
        mirror.metadata.uid
    }

    fn runtime_pod(&self, namespace: &str, name: &str) -> Option<RuntimePod> {
        // The desired pod's own first (its UID); another of that name (a pod replaced under
        // the same name) only when that one is not there.
        let uid = self
            .find_pod(namespace, name)
            .and_then(|p| p.metadata.uid.clone());
        if let Some(pod) = uid.and_then(|uid| self.pleg.get(&uid)) {
            return Some(pod);
        }
        self.pleg
            .all()
            .into_iter()
            .find(|p| p.namespace == namespace && p.name == name)
    }

    fn container_log_path(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Option<PathBuf> {
        let uid = Kubelet::pods(self).into_iter().find_map(|s| {
            let m = &s.pod.metadata;
            (m.namespace.as_deref() == Some(namespace) && m.name.as_deref() == Some(pod))
                .then(|| m.uid.clone().unwrap_or_default())
        })?;
        let runtime = self.pleg.get(&uid)?;
        let mut instances: Vec<_> = runtime
            .containers
            .iter()
            .filter(|c| c.name == container && !c.log_path.is_empty())
            .collect();
        instances.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        instances
            .get(usize::from(previous))
            .map(|c| PathBuf::from(&c.log_path))
    }
}

impl SummarySource for Kubelet {
    fn summary(
        &self,
        cpu_and_memory_only: bool,
    ) -> futures::future::BoxFuture<'_, Result<Summary, StatsError>> {
        Box::pin(self.stats_summary(cpu_and_memory_only))
    }
}

impl crate::server::pod_resources::PodResourcesSource for Kubelet {
    fn pods(&self) -> Vec<std::sync::Arc<Pod>> {
        Kubelet::pods(self).into_iter().map(|s| s.pod).collect()
    }

    fn container_devices(
        &self,
        uid: &str,
        name: &str,
    ) -> Vec<ferrolet_proto::podresources::ContainerDevices> {
        self.devices.container_devices(uid, name)
    }

    fn container_cpus(&self, uid: &str, name: &str) -> Vec<i64> {
        let Some(cpu) = &self.cpu else {
            return Vec::new();
        };
        let m = cpu
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.exclusive_cpus(uid, name)
            .map(|set| set.iter().map(i64::from).collect())
            .unwrap_or_default()
    }

    fn allocatable_devices(&self) -> Vec<ferrolet_proto::podresources::ContainerDevices> {
        self.devices.allocatable_devices()
    }

    fn allocatable_cpus(&self) -> Vec<i64> {
        let Some(cpu) = &self.cpu else {
            return Vec::new();
        };
        let m = cpu
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.allocatable_cpus().iter().map(i64::from).collect()
    }
}
