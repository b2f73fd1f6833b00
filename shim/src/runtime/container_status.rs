//! ContainerStatus and ListContainers: the CRI views of a container.

use std::collections::HashMap;
use std::sync::Arc;

use ferrolet_proto::cri;

use super::{Result, RuntimeInner};
use crate::container::{Container, ContainerState};
use crate::store::labels_match;

impl RuntimeInner {
    /// Containers matching CRI's list filters: id and sandbox id prefixes, labels.
    pub fn matching_containers(
        &self,
        id: &str,
        sandbox_id: &str,
        labels: &HashMap<String, String>,
    ) -> Vec<Arc<Container>> {
        self.containers
            .list()
            .into_iter()
            .filter(|c| c.meta.id.starts_with(id) && c.meta.sandbox_id.starts_with(sandbox_id))
            .filter(|c| labels_match(labels, &c.meta.config.labels))
            .collect()
    }

    /// A sandbox's containers.
    pub fn containers_of(&self, sandbox_id: &str) -> Vec<Arc<Container>> {
        self.containers
            .list()
            .into_iter()
            .filter(|c| c.meta.sandbox_id == sandbox_id)
            .collect()
    }

    /// The image name and image ref to report: the first tag the image still has, and its
    /// repo digest, as containerd reports them.
    fn image_names(&self, c: &Container) -> (String, String) {
        let requested = c
            .meta
            .config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        match self.images.resolve(&c.meta.image_id) {
            Some(image) => (
                image.repo_tags().into_iter().next().unwrap_or(requested),
                image
                    .repo_digests()
                    .into_iter()
                    .next()
                    .unwrap_or_else(|| c.meta.image_ref.clone()),
            ),
            None => (requested, c.meta.image_ref.clone()),
        }
    }

    /// A container as ListContainers shows it.
    pub fn cri_container(&self, c: &Container) -> cri::Container {
        let status = c.status();
        let (image, image_ref) = self.image_names(c);
        cri::Container {
            id: c.meta.id.clone(),
            pod_sandbox_id: c.meta.sandbox_id.clone(),
            metadata: Some(c.metadata()),
            image: Some(cri::ImageSpec {
                image,
                annotations: c
                    .meta
                    .config
                    .image
                    .as_ref()
                    .map(|i| i.annotations.clone())
                    .unwrap_or_default(),
                ..Default::default()
            }),
            image_ref,
            state: status.state.to_cri() as i32,
            created_at: c.meta.created_at,
            labels: c.meta.config.labels.clone(),
            annotations: c.meta.config.annotations.clone(),
            image_id: c.meta.image_id.clone(),
        }
    }

    /// A container's CRI status.
    pub fn cri_container_status(&self, c: &Container) -> cri::ContainerStatus {
        let status = c.status();
        let (image, image_ref) = self.image_names(c);
        // Applied: after an update, the updated spec's; else the created spec's (records
        // made before it was kept: the request).
        let resources = status
            .resources
            .clone()
            .or_else(|| c.meta.applied_resources.clone())
            .or_else(|| {
                c.meta
                    .config
                    .linux
                    .as_ref()
                    .and_then(|l| l.resources.clone())
            });
        cri::ContainerStatus {
            id: c.meta.id.clone(),
            metadata: Some(c.metadata()),
            state: status.state.to_cri() as i32,
            created_at: c.meta.created_at,
            started_at: status.started_at,
            finished_at: status.finished_at,
            exit_code: status.exit_code,
            image: Some(cri::ImageSpec {
                image,
                ..Default::default()
            }),
            image_ref,
            reason: status.reason.clone(),
            message: status.message.clone(),
            labels: c.meta.config.labels.clone(),
            annotations: c.meta.config.annotations.clone(),
            mounts: c.meta.config.mounts.clone(),
            log_path: c.meta.log_path.display().to_string(),
            resources: resources.map(|linux| cri::ContainerResources {
                linux: Some(linux),
                windows: None,
            }),
            image_id: c.meta.image_id.clone(),
            user: c.meta.user.clone(),
        }
    }

    /// ContainerStatus.
    pub async fn container_status(
        &self,
        req: cri::ContainerStatusRequest,
    ) -> Result<cri::ContainerStatusResponse> {
        let c = self.container(&req.container_id)?;
        let status = self.cri_container_status(&c);
        let info = if req.verbose {
            verbose_info(&c, &status)
        } else {
            HashMap::new()
        };
        Ok(cri::ContainerStatusResponse {
            status: Some(status),
            info,
        })
    }

    /// ListContainers.
    pub async fn list_containers(
        &self,
        req: cri::ListContainersRequest,
    ) -> Result<cri::ListContainersResponse> {
        let filter = req.filter.unwrap_or_default();
        let mut containers: Vec<_> = self
            .matching_containers(&filter.id, &filter.pod_sandbox_id, &filter.label_selector)
            .into_iter()
            .map(|c| self.cri_container(&c))
            .filter(|c| filter.state.as_ref().is_none_or(|s| s.state == c.state))
            .collect();
        containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        Ok(cri::ListContainersResponse { containers })
    }
}

/// The `info` map of a verbose status: what a person debugging wants, as JSON.
fn verbose_info(c: &Container, status: &cri::ContainerStatus) -> HashMap<String, String> {
    let s = c.status();
    let info = serde_json::json!({
        "sandboxID": c.meta.sandbox_id,
        "pid": s.pid,
        "removing": false,
        "snapshotKey": c.meta.id,
        "snapshotter": "overlayfs",
        "runtimeType": c.meta.runtime_type,
        "cgroupsPath": c.meta.cgroups_path,
        "logPath": status.log_path,
        "fifos": c.meta.fifos,
        "rootfs": c.meta.rootfs,
        "stopSignal": c.meta.stop_signal,
        "process": c.meta.process,
        "state": match s.state {
            ContainerState::Created => "created",
            ContainerState::Running => "running",
            ContainerState::Exited => "exited",
            ContainerState::Unknown => "unknown",
        },
    });
    HashMap::from([("info".to_string(), info.to_string())])
}
