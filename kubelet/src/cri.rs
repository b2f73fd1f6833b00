//! The kubelet's CRI client: the runtime and image services on one unix socket (or two), every
//! call bounded by `runtimeRequestTimeout`, and the runtime's pods read back by their labels.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::time::Duration;

use ferrolet_proto::cri::image_service_client::ImageServiceClient;
use ferrolet_proto::cri::runtime_service_client::RuntimeServiceClient;
use ferrolet_proto::cri::{self, ContainerState};
use ferrolet_proto::transport;
use tonic::transport::Channel;

use crate::types::{RuntimeContainer, RuntimePod, RuntimeSandbox, labels};

/// The runtime name (in Version) of the runtime that tells its sandboxes' start timings:
/// ferrolet-cri.
pub const TIMING_RUNTIME: &str = "ferrolet";

/// A CRI call that failed.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The endpoint could not be reached.
    #[error("connecting to CRI endpoint {endpoint}: {source}")]
    Connect {
        endpoint: String,
        #[source]
        source: transport::TransportError,
    },
    /// The runtime answered with an error.
    #[error("CRI {method}: {status}")]
    Call {
        method: &'static str,
        #[source]
        status: tonic::Status,
    },
    /// The call took longer than runtimeRequestTimeout.
    #[error("CRI {method}: no answer within {timeout:?}")]
    Timeout {
        method: &'static str,
        timeout: Duration,
    },
}

impl CriError {
    /// The gRPC code, when the runtime answered.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CriError::Call { status, .. } => Some(status.code()),
            _ => None,
        }
    }

    /// Whether the object was not there.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(tonic::Code::NotFound)
    }
}

/// CRI clients; cheap to clone.
#[derive(Clone, Debug)]
pub struct Cri {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    timeout: Duration,
}

/// Runs one call with the timeout, recorded in the runtime operation metrics.
macro_rules! call {
    ($self:ident, $client:ident, $method:ident, $name:literal, $req:expr) => {{
        let mut client = $self.$client.clone();
        let started = std::time::Instant::now();
        let result = match tokio::time::timeout($self.timeout, client.$method($req)).await {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => Err(CriError::Call {
                method: $name,
                status,
            }),
            Err(_) => Err(CriError::Timeout {
                method: $name,
                timeout: $self.timeout,
            }),
        };
        crate::metrics::runtime_operation($name, started, result.is_err());
        result
    }};
}

impl Cri {
    /// Connects to the runtime and image endpoints (`unix:///path`).
    pub async fn connect(
        runtime_endpoint: &str,
        image_endpoint: &str,
        timeout: Duration,
    ) -> Result<Self, CriError> {
        let connect = |endpoint: &str| {
            let endpoint = endpoint.to_string();
            async move {
                transport::connect(&endpoint)
                    .await
                    .map_err(|source| CriError::Connect { endpoint, source })
            }
        };
        let runtime_channel = connect(runtime_endpoint).await?;
        let image_channel = if image_endpoint.is_empty() || image_endpoint == runtime_endpoint {
            runtime_channel.clone()
        } else {
            connect(image_endpoint).await?
        };
        Ok(Self {
            runtime: RuntimeServiceClient::new(runtime_channel).max_decoding_message_size(16 << 20),
            images: ImageServiceClient::new(image_channel),
            timeout,
        })
    }

    /// The runtime service client (for calls not wrapped here).
    pub fn runtime(&self) -> RuntimeServiceClient<Channel> {
        self.runtime.clone()
    }

    /// The image service client.
    pub fn images(&self) -> ImageServiceClient<Channel> {
        self.images.clone()
    }

    /// Version.
    pub async fn version(&self) -> Result<cri::VersionResponse, CriError> {
        call!(
            self,
            runtime,
            version,
            "Version",
            cri::VersionRequest::default()
        )
    }

    /// RuntimeConfig: the runtime's cgroup driver.
    pub async fn runtime_config(&self) -> Result<cri::RuntimeConfigResponse, CriError> {
        call!(
            self,
            runtime,
            runtime_config,
            "RuntimeConfig",
            cri::RuntimeConfigRequest::default()
        )
    }

    /// The runtime's cgroup driver as the kubelet's `cgroupDriver` names it (`systemd`,
    /// `cgroupfs`), from RuntimeConfig; None when the runtime reports no Linux config.
    pub async fn cgroup_driver(&self) -> Result<Option<&'static str>, CriError> {
        let linux = self.runtime_config().await?.linux;
        Ok(linux.map(|l| {
            if l.cgroup_driver == cri::CgroupDriver::Systemd as i32 {
                "systemd"
            } else {
                "cgroupfs"
            }
        }))
    }

    /// Status: the runtime's conditions (RuntimeReady, NetworkReady).
    pub async fn status(&self) -> Result<cri::StatusResponse, CriError> {
        call!(
            self,
            runtime,
            status,
            "Status",
            cri::StatusRequest::default()
        )
    }

    /// ListImages, all of them.
    pub async fn list_images(&self) -> Result<Vec<cri::Image>, CriError> {
        call!(
            self,
            images,
            list_images,
            "ListImages",
            cri::ListImagesRequest::default()
        )
        .map(|r| r.images)
    }

    /// RunPodSandbox; returns the sandbox id.
    pub async fn run_pod_sandbox(&self, config: cri::PodSandboxConfig) -> Result<String, CriError> {
        let req = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        };
        call!(self, runtime, run_pod_sandbox, "RunPodSandbox", req).map(|r| r.pod_sandbox_id)
    }

    /// StopPodSandbox.
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let req = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        call!(self, runtime, stop_pod_sandbox, "StopPodSandbox", req).map(|_| ())
    }

    /// RemovePodSandbox.
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let req = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        call!(self, runtime, remove_pod_sandbox, "RemovePodSandbox", req).map(|_| ())
    }

    /// PodSandboxStatus.
    pub async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus, CriError> {
        let req = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: false,
        };
        call!(self, runtime, pod_sandbox_status, "PodSandboxStatus", req)
            .map(|r| r.status.unwrap_or_default())
    }

    /// The runtime's account of a sandbox's start: `startTimings` in the `info` of its verbose
    /// PodSandboxStatus, which ferrolet-cri gives (ask only [`TIMING_RUNTIME`]); None from a
    /// runtime that gives none.
    pub async fn sandbox_start_timings(
        &self,
        id: &str,
    ) -> Result<Option<crate::timeline::SandboxTimings>, CriError> {
        let req = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        };
        let resp = call!(self, runtime, pod_sandbox_status, "PodSandboxStatus", req)?;
        let timings = resp
            .info
            .get("info")
            .and_then(|info| serde_json::from_str::<serde_json::Value>(info).ok())
            .and_then(|mut info| info.get_mut("startTimings").map(serde_json::Value::take))
            .and_then(|t| serde_json::from_value(t).ok());
        Ok(timings)
    }

    /// CreateContainer; returns the container id.
    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String, CriError> {
        let req = cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        call!(self, runtime, create_container, "CreateContainer", req).map(|r| r.container_id)
    }

    /// StartContainer.
    pub async fn start_container(&self, id: &str) -> Result<(), CriError> {
        let req = cri::StartContainerRequest {
            container_id: id.to_string(),
        };
        call!(self, runtime, start_container, "StartContainer", req).map(|_| ())
    }

    /// StopContainer with a grace period in seconds (the call may take that long, so it is
    /// not bounded by the request timeout alone).
    pub async fn stop_container(&self, id: &str, grace_secs: i64) -> Result<(), CriError> {
        let req = cri::StopContainerRequest {
            container_id: id.to_string(),
            timeout: grace_secs,
        };
        let mut client = self.runtime.clone();
        let limit = self.timeout + Duration::from_secs(grace_secs.max(0) as u64);
        let started = std::time::Instant::now();
        let result = match tokio::time::timeout(limit, client.stop_container(req)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(status)) => Err(CriError::Call {
                method: "StopContainer",
                status,
            }),
            Err(_) => Err(CriError::Timeout {
                method: "StopContainer",
                timeout: limit,
            }),
        };
        crate::metrics::runtime_operation("StopContainer", started, result.is_err());
        result
    }

    /// RemoveContainer.
    pub async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let req = cri::RemoveContainerRequest {
            container_id: id.to_string(),
        };
        call!(self, runtime, remove_container, "RemoveContainer", req).map(|_| ())
    }

    /// UpdateContainerResources with these linux resources; fields left zero are not
    /// changed (the CPU manager sends `cpuset_cpus` alone, as Go's `updateContainerCPUSet`).
    pub async fn update_container_resources(
        &self,
        id: &str,
        linux: cri::LinuxContainerResources,
    ) -> Result<(), CriError> {
        let req = cri::UpdateContainerResourcesRequest {
            container_id: id.to_string(),
            linux: Some(linux),
            ..Default::default()
        };
        call!(
            self,
            runtime,
            update_container_resources,
            "UpdateContainerResources",
            req
        )
        .map(|_| ())
    }

    /// ContainerStatus.
    pub async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus, CriError> {
        let req = cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        call!(self, runtime, container_status, "ContainerStatus", req)
            .map(|r| r.status.unwrap_or_default())
    }

    /// ReopenContainerLog.
    pub async fn reopen_container_log(&self, id: &str) -> Result<(), CriError> {
        let req = cri::ReopenContainerLogRequest {
            container_id: id.to_string(),
        };
        call!(
            self,
            runtime,
            reopen_container_log,
            "ReopenContainerLog",
            req
        )
        .map(|_| ())
    }

    /// ExecSync.
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_secs: i64,
    ) -> Result<cri::ExecSyncResponse, CriError> {
        let req = cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd,
            timeout: timeout_secs,
        };
        let mut client = self.runtime.clone();
        let limit = self.timeout + Duration::from_secs(timeout_secs.max(0) as u64);
        let started = std::time::Instant::now();
        let result = match tokio::time::timeout(limit, client.exec_sync(req)).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(status)) => Err(CriError::Call {
                method: "ExecSync",
                status,
            }),
            Err(_) => Err(CriError::Timeout {
                method: "ExecSync",
                timeout: limit,
            }),
        };
        crate::metrics::runtime_operation("ExecSync", started, result.is_err());
        result
    }

    /// ExecSync without a deadline of ours (`timeout` 0: the runtime's own default), as the Go
    /// kubelet's RunInContainer for `/run`: the call ends with the command, or is dropped
    /// with the request.
    pub async fn run_in_container(
        &self,
        id: &str,
        cmd: Vec<String>,
    ) -> Result<cri::ExecSyncResponse, CriError> {
        let req = cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd,
            timeout: 0,
        };
        let mut client = self.runtime.clone();
        let started = std::time::Instant::now();
        let result = client
            .exec_sync(req)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| CriError::Call {
                method: "ExecSync",
                status,
            });
        crate::metrics::runtime_operation("ExecSync", started, result.is_err());
        result
    }

    /// Exec: the URL of the runtime's streaming server that runs the command.
    pub async fn exec(&self, req: cri::ExecRequest) -> Result<String, CriError> {
        call!(self, runtime, exec, "Exec", req).map(|r| r.url)
    }

    /// Attach: the URL of the runtime's streaming server that attaches to the container.
    pub async fn attach(&self, req: cri::AttachRequest) -> Result<String, CriError> {
        call!(self, runtime, attach, "Attach", req).map(|r| r.url)
    }

    /// PortForward: the URL of the runtime's streaming server that forwards to the sandbox.
    pub async fn port_forward(&self, req: cri::PortForwardRequest) -> Result<String, CriError> {
        call!(self, runtime, port_forward, "PortForward", req).map(|r| r.url)
    }

    /// Whether the image is present; its id when it is.
    pub async fn image_id(&self, image: &str) -> Result<Option<String>, CriError> {
        let req = cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            verbose: false,
        };
        call!(self, images, image_status, "ImageStatus", req).map(|r| r.image.map(|i| i.id))
    }

    /// PullImage; returns the image ref.
    pub async fn pull_image(
        &self,
        image: &str,
        auth: Option<cri::AuthConfig>,
        sandbox_config: Option<cri::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        let req = cri::PullImageRequest {
            image: Some(cri::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            auth,
            sandbox_config,
        };
        // Pulls are bounded by progress, not by the request timeout (as the Go kubelet does).
        let mut client = self.images.clone();
        let started = std::time::Instant::now();
        let result = client
            .pull_image(req)
            .await
            .map(|r| r.into_inner().image_ref)
            .map_err(|status| CriError::Call {
                method: "PullImage",
                status,
            });
        crate::metrics::runtime_operation("PullImage", started, result.is_err());
        result
    }

    /// Every sandbox and container the kubelet made, grouped by pod UID (from the labels the
    /// kubelet puts on them).
    pub async fn runtime_pods(&self) -> Result<Vec<RuntimePod>, CriError> {
        self.runtime_pods_matching(None).await
    }

    /// The sandboxes and containers of pod `uid` (none, or one pod): the runtime filters by
    /// the UID label, so this costs the same however many pods the node runs.
    pub async fn runtime_pod(&self, uid: &str) -> Result<Vec<RuntimePod>, CriError> {
        self.runtime_pods_matching(Some(uid)).await
    }

    async fn runtime_pods_matching(&self, uid: Option<&str>) -> Result<Vec<RuntimePod>, CriError> {
        let selector = uid.map(|u| {
            std::collections::HashMap::from([(labels::POD_UID.to_string(), u.to_string())])
        });
        let sandbox_filter = selector
            .clone()
            .map(|label_selector| cri::PodSandboxFilter {
                label_selector,
                ..Default::default()
            });
        let container_filter = selector.map(|label_selector| cri::ContainerFilter {
            label_selector,
            ..Default::default()
        });
        let sandboxes = call!(
            self,
            runtime,
            list_pod_sandbox,
            "ListPodSandbox",
            cri::ListPodSandboxRequest {
                filter: sandbox_filter
            }
        )?
        .items;
        let containers = call!(
            self,
            runtime,
            list_containers,
            "ListContainers",
            cri::ListContainersRequest {
                filter: container_filter
            }
        )?
        .containers;
        let mut pods: BTreeMap<String, RuntimePod> = BTreeMap::new();
        // The listed objects are ours: their strings are moved, not copied (this runs every
        // relist, once a second, for every object on the node).
        for mut sb in sandboxes {
            let Some(uid) = sb.labels.remove(labels::POD_UID) else {
                continue;
            };
            let meta = sb.metadata.take().unwrap_or_default();
            let pod = match pods.entry(uid) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => {
                    let uid = e.key().clone();
                    e.insert(RuntimePod {
                        uid,
                        name: meta.name,
                        namespace: meta.namespace,
                        ..Default::default()
                    })
                }
            };
            pod.sandboxes.push(RuntimeSandbox {
                id: sb.id,
                attempt: meta.attempt,
                ready: sb.state == cri::PodSandboxState::SandboxReady as i32,
                created_at: sb.created_at,
                ip: String::new(),
                additional_ips: Vec::new(),
            });
        }
        for c in containers {
            let Some(pod) = c
                .labels
                .get(labels::POD_UID)
                .and_then(|uid| pods.get_mut(uid))
            else {
                continue;
            };
            let meta = c.metadata.unwrap_or_default();
            pod.containers.push(RuntimeContainer {
                id: c.id,
                sandbox_id: c.pod_sandbox_id,
                name: c
                    .labels
                    .get(labels::CONTAINER_NAME)
                    .cloned()
                    .unwrap_or(meta.name),
                attempt: meta.attempt,
                hash: c
                    .annotations
                    .get(labels::CONTAINER_HASH)
                    .cloned()
                    .unwrap_or_default(),
                state: ContainerState::try_from(c.state)
                    .unwrap_or(ContainerState::ContainerUnknown),
                created_at: c.created_at,
                image: c.image.map(|i| i.image).unwrap_or_default(),
                image_ref: c.image_ref,
                labels: c.labels.into_iter().collect(),
                annotations: c.annotations.into_iter().collect(),
                ..Default::default()
            });
        }
        for pod in pods.values_mut() {
            pod.sandboxes
                .sort_by_key(|s| std::cmp::Reverse(s.created_at));
            pod.containers
                .sort_by_key(|c| std::cmp::Reverse(c.created_at));
        }
        Ok(pods.into_values().collect())
    }
}
