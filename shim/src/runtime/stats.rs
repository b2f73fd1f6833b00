//! ContainerStats, ListContainerStats, PodSandboxStats and ListPodSandboxStats, from
//! containerd's task metrics (one Metrics call per request) and snapshot usage.

use std::collections::HashMap;

use ferrolet_proto::containerd::services::v1::MetricsRequest;
use ferrolet_proto::cri;

use super::{Result, RuntimeError, RuntimeInner};
use crate::container::Container;
use crate::sandbox::Sandbox;
use crate::stats::{self, Sample};
use crate::store::{labels_match, now_ns};

/// Whether the kernel OOM-killed a process in a cgroup (v1 memory.oom_control, or v2
/// memory.events), read before the cgroup goes away with the task; `None` when it is gone
/// already (systemd removes a scope as soon as its last process exits).
pub fn cgroup_oom_killed(cgroups_path: &str) -> Option<bool> {
    ferrolet_cgroups::usage::Hierarchy::detect()
        .oom_kills(&crate::oci::cgroup_dir(cgroups_path))
        .map(|n| n > 0)
}

impl RuntimeInner {
    /// Samples for the given task ids (all tasks when empty), by id.
    async fn samples(&self, ids: &[&str]) -> Result<HashMap<String, Sample>> {
        let filters = ids.iter().map(|id| format!("id=={id}")).collect();
        let metrics = self
            .cd
            .tasks()
            .metrics(MetricsRequest { filters })
            .await
            .map_err(RuntimeError::containerd("reading task metrics"))?
            .into_inner()
            .metrics;
        let mut out = HashMap::new();
        for m in metrics {
            match stats::decode(&m) {
                Ok(sample) => {
                    out.insert(m.id.clone(), sample);
                }
                Err(e) => tracing::debug!(id = %m.id, error = %e, "undecodable task metric"),
            }
        }
        Ok(out)
    }

    async fn one_container_stats(
        &self,
        c: &Container,
        samples: &HashMap<String, Sample>,
    ) -> cri::ContainerStats {
        let id = c.meta.id.as_str();
        let sample = samples.get(id);
        let nano_cores = sample.and_then(|s| self.cpu.nano_cores(id, s));
        let writable = stats::writable_layer(&self.cd, &self.opts.snapshotter, id, now_ns())
            .await
            .ok();
        stats::container_stats(
            cri::ContainerAttributes {
                id: id.to_string(),
                metadata: Some(c.metadata()),
                labels: c.meta.config.labels.clone(),
                annotations: c.meta.config.annotations.clone(),
            },
            sample,
            nano_cores,
            writable,
        )
    }

    /// ContainerStats.
    pub async fn container_stats(
        &self,
        req: cri::ContainerStatsRequest,
    ) -> Result<cri::ContainerStatsResponse> {
        let c = self.container(&req.container_id)?;
        let samples = self.samples(&[c.meta.id.as_str()]).await?;
        Ok(cri::ContainerStatsResponse {
            stats: Some(self.one_container_stats(&c, &samples).await),
        })
    }

    /// ListContainerStats.
    pub async fn list_container_stats(
        &self,
        req: cri::ListContainerStatsRequest,
    ) -> Result<cri::ListContainerStatsResponse> {
        let filter = req.filter.unwrap_or_default();
        let containers =
            self.matching_containers(&filter.id, &filter.pod_sandbox_id, &filter.label_selector);
        let samples = self.samples(&[]).await?;
        let stats = futures::future::join_all(
            containers
                .iter()
                .map(|c| self.one_container_stats(c, &samples)),
        )
        .await;
        Ok(cri::ListContainerStatsResponse { stats })
    }

    async fn one_sandbox_stats(
        &self,
        sb: &Sandbox,
        samples: &HashMap<String, Sample>,
    ) -> cri::PodSandboxStats {
        let id = sb.meta.id.as_str();
        // The pod's own cgroup, as containerd reads it, when the pod has one; else the pause's.
        let parent = sb
            .meta
            .config
            .linux
            .as_ref()
            .map(|l| l.cgroup_parent.clone())
            .unwrap_or_default();
        let pod_sample = if parent.is_empty() {
            None
        } else {
            stats::cgroup_sample(&parent, now_ns()).await.ok()
        };
        let sample = pod_sample.as_ref().or_else(|| samples.get(id));
        let nano_cores = sample.and_then(|s| self.cpu.nano_cores(id, s));
        let containers = self.containers_of(id);
        // Any process in the pod's netns reads its counters: the pause, or without one, a
        // running container.
        let pid = match sb.status().pid {
            0 => containers
                .iter()
                .map(|c| c.status().pid)
                .find(|&p| p > 0)
                .unwrap_or(0),
            pid => pid,
        };
        let network = if pid > 0 && sb.meta.netns.is_some() {
            stats::network_usage(pid, now_ns()).await
        } else {
            None
        };
        let container_stats = futures::future::join_all(
            containers
                .iter()
                .map(|c| self.one_container_stats(c, samples)),
        )
        .await;
        stats::pod_sandbox_stats(
            cri::PodSandboxAttributes {
                id: id.to_string(),
                metadata: Some(sb.metadata()),
                labels: sb.meta.config.labels.clone(),
                annotations: sb.meta.config.annotations.clone(),
            },
            sample,
            nano_cores,
            network,
            None,
            container_stats,
        )
    }

    /// PodSandboxStats.
    pub async fn pod_sandbox_stats(
        &self,
        req: cri::PodSandboxStatsRequest,
    ) -> Result<cri::PodSandboxStatsResponse> {
        let sb = self.sandbox(&req.pod_sandbox_id)?;
        // Only this pod's tasks: the pause and its containers.
        let containers = self.containers_of(&sb.meta.id);
        let ids: Vec<&str> = std::iter::once(sb.meta.id.as_str())
            .chain(containers.iter().map(|c| c.meta.id.as_str()))
            .collect();
        let samples = self.samples(&ids).await?;
        Ok(cri::PodSandboxStatsResponse {
            stats: Some(self.one_sandbox_stats(&sb, &samples).await),
        })
    }

    /// ListPodSandboxStats.
    pub async fn list_pod_sandbox_stats(
        &self,
        req: cri::ListPodSandboxStatsRequest,
    ) -> Result<cri::ListPodSandboxStatsResponse> {
        let filter = req.filter.unwrap_or_default();
        let sandboxes: Vec<_> = self
            .sandboxes
            .list()
            .into_iter()
            .filter(|s| filter.id.is_empty() || s.meta.id.starts_with(&filter.id))
            .filter(|s| labels_match(&filter.label_selector, &s.meta.config.labels))
            .collect();
        let samples = self.samples(&[]).await?;
        let stats = futures::future::join_all(
            sandboxes
                .iter()
                .map(|s| self.one_sandbox_stats(s, &samples)),
        )
        .await;
        Ok(cri::ListPodSandboxStatsResponse { stats })
    }
}
