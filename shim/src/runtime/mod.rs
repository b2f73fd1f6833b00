//! The CRI RuntimeService: the gRPC face ([`Runtime`]) over the shared state every call works
//! on ([`RuntimeInner`]). The calls live in one file per object and kind, as in containerd's
//! pkg/cri/server: [`sandbox_lifecycle`] (Run/Stop/RemovePodSandbox), [`sandbox_status`],
//! [`container_lifecycle`] (Create/Start/Stop/RemoveContainer, ExecSync, ...),
//! [`container_status`], Exec/Attach/PortForward (URLs on the streaming server) in
//! [`streaming`]; the task-exit follower in [`events`], start-up recovery in
//! [`recover`], what nobody owns any more in [`sweep`], stats in [`stats`], Status and
//! runtime config in [`node`]. The objects
//! themselves ([`crate::sandbox`], [`crate::container`]) sit below and know nothing of this.

pub mod container_lifecycle;
pub mod container_status;
pub mod error;
pub mod events;
mod image_volumes;
pub mod node;
pub mod recover;
pub mod sandbox_lifecycle;
pub mod sandbox_status;
pub mod stats;
pub mod streaming;
pub mod sweep;

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::cri::runtime_service_server::RuntimeService;
use ferrolet_proto::cri::*;
use futures::Stream;
use tonic::{Request, Response, Status};

use crate::config::Config;
use crate::container::Container;
use crate::image::ImageService;
use crate::sandbox::Sandbox;
use crate::sandbox::network::PodNetwork;
use crate::store::Index;

pub use error::{Result, RuntimeError, all_of};

/// Runtime name reported by `Version`.
pub const RUNTIME_NAME: &str = "ferrolet";
/// CRI API version served.
pub const RUNTIME_API_VERSION: &str = "v1";
/// The kubelet API version field, fixed at "0.1.0" by CRI convention.
const KUBE_API_VERSION: &str = "0.1.0";

/// The `Version` answer.
pub fn version_response() -> VersionResponse {
    VersionResponse {
        version: KUBE_API_VERSION.into(),
        runtime_name: RUNTIME_NAME.into(),
        runtime_version: env!("CARGO_PKG_VERSION").into(),
        runtime_api_version: RUNTIME_API_VERSION.into(),
    }
}

/// Settings the runtime calls read.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Persistent state.
    pub root: PathBuf,
    /// State that dies with the node (FIFOs, shm).
    pub state: PathBuf,
    /// Snapshotter for container root filesystems.
    pub snapshotter: String,
    /// The pause image.
    pub sandbox_image: String,
    /// Sandboxes that need no pause process run without one.
    pub drop_infra_container: bool,
    /// containerd's socket, as its shims know it (their sockets are named by it).
    pub containerd_address: String,
    /// containerd's runtime (shim) type of the default handlers ("" and "runc").
    pub runtime_type: String,
    /// Runtime handlers accepted besides "" and "runc", with what runs each.
    pub runtime_handlers: std::collections::BTreeMap<String, HandlerRuntime>,
    /// runc drives cgroups through systemd (`systemd_cgroup`).
    pub systemd_cgroup: bool,
}

impl RuntimeOptions {
    /// The runtime's part of the config.
    pub fn from_config(c: &Config) -> Self {
        Self {
            root: c.root.clone(),
            state: c.state.clone(),
            snapshotter: c.snapshotter.clone(),
            sandbox_image: c.sandbox_image.clone(),
            drop_infra_container: c.drop_infra_container,
            containerd_address: c.containerd.clone(),
            runtime_type: c.runtime_type.clone(),
            runtime_handlers: c
                .runtime_handlers
                .iter()
                .chain(c.runtimes.keys())
                .map(|h| {
                    let binary = c.runtimes.get(h).map(|r| r.binary_name.clone());
                    let runtime = HandlerRuntime {
                        runtime_type: c.runtime_type_of(h).to_string(),
                        binary_name: binary.filter(|b| !b.is_empty()),
                    };
                    (h.clone(), runtime)
                })
                .collect(),
            systemd_cgroup: c.systemd_cgroup,
        }
    }

    /// The runc shim's options for the containers of a sandbox of runtime `handler`.
    pub fn runc_options(&self, handler: &str) -> Option<ferrolet_proto::prost_types::Any> {
        let binary = self
            .runtime_handlers
            .get(handler)
            .and_then(|h| h.binary_name.clone());
        crate::task::runc_options(self.systemd_cgroup, binary)
    }

    /// containerd's runtime (shim) type for a new sandbox of runtime `handler`.
    pub fn runtime_type(&self, handler: &str) -> &str {
        self.runtime_handlers
            .get(handler)
            .map_or(&self.runtime_type, |h| &h.runtime_type)
    }
}

/// What runs the tasks of one runtime handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandlerRuntime {
    /// containerd's runtime (shim) type.
    pub runtime_type: String,
    /// The OCI runtime binary the shim runs; `None`: runc.
    pub binary_name: Option<String>,
}

/// The state every runtime call shares.
pub struct RuntimeInner {
    /// containerd, in our namespace.
    pub cd: Containerd,
    /// Images (the pause image, container images).
    pub images: ImageService,
    /// CNI.
    pub network: PodNetwork,
    /// Settings.
    pub opts: RuntimeOptions,
    /// Every sandbox.
    pub sandboxes: Index<Sandbox>,
    /// Every container.
    pub containers: Index<Container>,
    /// Container lifecycle events for GetContainerEvents subscribers.
    pub events: tokio::sync::broadcast::Sender<ContainerEventResponse>,
    /// CPU rate memory for stats.
    pub cpu: crate::stats::CpuRates,
    /// Our own oom_score_adj, the floor of every container's.
    pub min_oom_score_adj: i32,
    /// The streaming server's URLs (Exec, Attach, PortForward).
    pub streams: crate::streaming::Urls,
    /// Wakes the sweeper ([`sweep`]) early.
    pub sweep_wanted: tokio::sync::Notify,
    /// CDI spec files, when CDI is on (`enable_cdi`).
    pub cdi: Option<Arc<crate::cdi::Registry>>,
    /// Whether user-namespaced pods can run here (probed at start-up).
    pub userns_support: crate::sandbox::userns::UsernsSupport,
}

/// The RuntimeService: cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

impl Runtime {
    /// Builds the runtime, recovers every sandbox and container containerd still has, and
    /// starts following task exits and serving the streaming URLs.
    pub async fn new(cd: Containerd, images: ImageService, config: &Config) -> Result<Self> {
        let stream_server = crate::streaming::StreamServer::bind(config)
            .await
            .map_err(|e| RuntimeError::internal(e.to_string()))?;
        if let Some(addr) = stream_server.local_addr() {
            tracing::info!(%addr, "streaming server listening");
        }
        let network = PodNetwork::new(
            config.cni_conf_dir.clone(),
            config.cni_bin_dirs.clone(),
            config.cni_cache_dir.clone(),
            config.netns_dir.clone(),
        );
        let (events, _) = tokio::sync::broadcast::channel(1024);
        // Detected and logged (one line) now, so what this node cannot enforce is said at
        // start-up rather than found out per container.
        crate::oci::CgroupSupport::node();
        tracing::info!(
            cgroup_driver = if config.systemd_cgroup {
                "systemd"
            } else {
                "cgroupfs"
            },
            "cgroup driver: {}",
            if config.systemd_cgroup {
                "systemd (runc makes each container a scope in its pod's slice)"
            } else {
                "cgroupfs"
            }
        );
        let userns_support = crate::sandbox::userns::UsernsSupport::probe(&config.state).await;
        let inner = Arc::new(RuntimeInner {
            userns_support,
            cd,
            images,
            network,
            opts: RuntimeOptions::from_config(config),
            sandboxes: Index::default(),
            containers: Index::default(),
            events,
            cpu: crate::stats::CpuRates::default(),
            min_oom_score_adj: crate::oci::own_oom_score_adj(),
            streams: stream_server.urls(),
            sweep_wanted: tokio::sync::Notify::new(),
            cdi: config
                .enable_cdi
                .then(|| Arc::new(crate::cdi::Registry::new(config.cdi_spec_dirs.clone()))),
        });
        if let Some(registry) = inner.cdi.clone() {
            // Read once now, so broken spec files are in the log from the start rather than
            // at the first container that asks for a device.
            tokio::task::spawn_blocking(move || {
                let devices = registry.refresh();
                tracing::info!(
                    dirs = ?registry.dirs(),
                    devices,
                    "CDI on: devices resolved from spec files as containers ask for them"
                );
            });
        }
        // Subscribe before reading state, so no exit falls between the two.
        let exits = events::subscribe(&inner).await?;
        recover::recover(&inner).await?;
        // Its first sweep removes what a crash left half-made.
        tokio::spawn(sweep::run(
            inner.clone(),
            std::time::Duration::from_secs(config.sweep_interval_secs),
        ));
        tokio::spawn(events::follow(inner.clone(), exits));
        tokio::spawn(events::follow_kernel_oom_kills(inner.clone(), "/dev/kmsg"));
        tokio::spawn(stream_server.serve(inner.clone()));
        Ok(Self { inner })
    }

    /// The shared state.
    pub fn inner(&self) -> &Arc<RuntimeInner> {
        &self.inner
    }
}

fn unimplemented(method: &str) -> Status {
    Status::unimplemented(format!(
        "runtime.v1.RuntimeService/{method} is not implemented by ferrolet-cri yet"
    ))
}

/// Runs a call on the shared state to its end, whatever the client does
/// ([`crate::completion`]), and turns its error into a status.
macro_rules! call {
    ($self:ident . $method:ident ( $req:ident )) => {{
        let inner = $self.inner.clone();
        let req = $req.into_inner();
        crate::completion::run(async move { inner.$method(req).await.map_err(Status::from) })
            .await
            .map(Response::new)
    }};
}

pub(crate) type EventStream =
    Pin<Box<dyn Stream<Item = Result<ContainerEventResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RuntimeService for Runtime {
    #[tracing::instrument(name = "Version", skip_all)]
    async fn version(
        &self,
        _: Request<VersionRequest>,
    ) -> Result<Response<VersionResponse>, Status> {
        Ok(Response::new(version_response()))
    }

    #[tracing::instrument(name = "RunPodSandbox", skip_all, fields(pod = tracing::field::Empty, id = tracing::field::Empty))]
    async fn run_pod_sandbox(
        &self,
        req: Request<RunPodSandboxRequest>,
    ) -> Result<Response<RunPodSandboxResponse>, Status> {
        call!(self.run_pod_sandbox(req))
    }

    #[tracing::instrument(name = "StopPodSandbox", skip_all, fields(id = %req.get_ref().pod_sandbox_id))]
    async fn stop_pod_sandbox(
        &self,
        req: Request<StopPodSandboxRequest>,
    ) -> Result<Response<StopPodSandboxResponse>, Status> {
        call!(self.stop_pod_sandbox(req))
    }

    #[tracing::instrument(name = "RemovePodSandbox", skip_all, fields(id = %req.get_ref().pod_sandbox_id))]
    async fn remove_pod_sandbox(
        &self,
        req: Request<RemovePodSandboxRequest>,
    ) -> Result<Response<RemovePodSandboxResponse>, Status> {
        call!(self.remove_pod_sandbox(req))
    }

    #[tracing::instrument(name = "PodSandboxStatus", skip_all, fields(id = %req.get_ref().pod_sandbox_id))]
    async fn pod_sandbox_status(
        &self,
        req: Request<PodSandboxStatusRequest>,
    ) -> Result<Response<PodSandboxStatusResponse>, Status> {
        call!(self.pod_sandbox_status(req))
    }

    #[tracing::instrument(name = "ListPodSandbox", skip_all)]
    async fn list_pod_sandbox(
        &self,
        req: Request<ListPodSandboxRequest>,
    ) -> Result<Response<ListPodSandboxResponse>, Status> {
        call!(self.list_pod_sandbox(req))
    }

    #[tracing::instrument(name = "CreateContainer", skip_all, fields(pod = %req.get_ref().pod_sandbox_id, id = tracing::field::Empty))]
    async fn create_container(
        &self,
        req: Request<CreateContainerRequest>,
    ) -> Result<Response<CreateContainerResponse>, Status> {
        call!(self.create_container(req))
    }

    #[tracing::instrument(name = "StartContainer", skip_all, fields(id = %req.get_ref().container_id))]
    async fn start_container(
        &self,
        req: Request<StartContainerRequest>,
    ) -> Result<Response<StartContainerResponse>, Status> {
        call!(self.start_container(req))
    }

    #[tracing::instrument(name = "StopContainer", skip_all, fields(id = %req.get_ref().container_id))]
    async fn stop_container(
        &self,
        req: Request<StopContainerRequest>,
    ) -> Result<Response<StopContainerResponse>, Status> {
        call!(self.stop_container(req))
    }

    #[tracing::instrument(name = "RemoveContainer", skip_all, fields(id = %req.get_ref().container_id))]
    async fn remove_container(
        &self,
        req: Request<RemoveContainerRequest>,
    ) -> Result<Response<RemoveContainerResponse>, Status> {
        call!(self.remove_container(req))
    }

    #[tracing::instrument(name = "ListContainers", skip_all)]
    async fn list_containers(
        &self,
        req: Request<ListContainersRequest>,
    ) -> Result<Response<ListContainersResponse>, Status> {
        call!(self.list_containers(req))
    }

    #[tracing::instrument(name = "ContainerStatus", skip_all, fields(id = %req.get_ref().container_id))]
    async fn container_status(
        &self,
        req: Request<ContainerStatusRequest>,
    ) -> Result<Response<ContainerStatusResponse>, Status> {
        call!(self.container_status(req))
    }

    #[tracing::instrument(name = "UpdateContainerResources", skip_all, fields(id = %req.get_ref().container_id))]
    async fn update_container_resources(
        &self,
        req: Request<UpdateContainerResourcesRequest>,
    ) -> Result<Response<UpdateContainerResourcesResponse>, Status> {
        call!(self.update_container_resources(req))
    }

    #[tracing::instrument(name = "ReopenContainerLog", skip_all, fields(id = %req.get_ref().container_id))]
    async fn reopen_container_log(
        &self,
        req: Request<ReopenContainerLogRequest>,
    ) -> Result<Response<ReopenContainerLogResponse>, Status> {
        call!(self.reopen_container_log(req))
    }

    #[tracing::instrument(name = "ExecSync", skip_all, fields(id = %req.get_ref().container_id))]
    async fn exec_sync(
        &self,
        req: Request<ExecSyncRequest>,
    ) -> Result<Response<ExecSyncResponse>, Status> {
        call!(self.exec_sync(req))
    }

    #[tracing::instrument(name = "Exec", skip_all, fields(id = %req.get_ref().container_id))]
    async fn exec(&self, req: Request<ExecRequest>) -> Result<Response<ExecResponse>, Status> {
        call!(self.exec(req))
    }

    #[tracing::instrument(name = "Attach", skip_all, fields(id = %req.get_ref().container_id))]
    async fn attach(
        &self,
        req: Request<AttachRequest>,
    ) -> Result<Response<AttachResponse>, Status> {
        call!(self.attach(req))
    }

    #[tracing::instrument(name = "PortForward", skip_all, fields(id = %req.get_ref().pod_sandbox_id))]
    async fn port_forward(
        &self,
        req: Request<PortForwardRequest>,
    ) -> Result<Response<PortForwardResponse>, Status> {
        call!(self.port_forward(req))
    }

    #[tracing::instrument(name = "ContainerStats", skip_all, fields(id = %req.get_ref().container_id))]
    async fn container_stats(
        &self,
        req: Request<ContainerStatsRequest>,
    ) -> Result<Response<ContainerStatsResponse>, Status> {
        call!(self.container_stats(req))
    }

    #[tracing::instrument(name = "ListContainerStats", skip_all)]
    async fn list_container_stats(
        &self,
        req: Request<ListContainerStatsRequest>,
    ) -> Result<Response<ListContainerStatsResponse>, Status> {
        call!(self.list_container_stats(req))
    }

    #[tracing::instrument(name = "PodSandboxStats", skip_all, fields(id = %req.get_ref().pod_sandbox_id))]
    async fn pod_sandbox_stats(
        &self,
        req: Request<PodSandboxStatsRequest>,
    ) -> Result<Response<PodSandboxStatsResponse>, Status> {
        call!(self.pod_sandbox_stats(req))
    }

    #[tracing::instrument(name = "ListPodSandboxStats", skip_all)]
    async fn list_pod_sandbox_stats(
        &self,
        req: Request<ListPodSandboxStatsRequest>,
    ) -> Result<Response<ListPodSandboxStatsResponse>, Status> {
        call!(self.list_pod_sandbox_stats(req))
    }

    #[tracing::instrument(name = "UpdateRuntimeConfig", skip_all)]
    async fn update_runtime_config(
        &self,
        req: Request<UpdateRuntimeConfigRequest>,
    ) -> Result<Response<UpdateRuntimeConfigResponse>, Status> {
        call!(self.update_runtime_config(req))
    }

    #[tracing::instrument(name = "Status", skip_all)]
    async fn status(
        &self,
        req: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        call!(self.status(req))
    }

    #[tracing::instrument(name = "CheckpointContainer", skip_all)]
    async fn checkpoint_container(
        &self,
        _: Request<CheckpointContainerRequest>,
    ) -> Result<Response<CheckpointContainerResponse>, Status> {
        Err(unimplemented("CheckpointContainer"))
    }

    type GetContainerEventsStream = EventStream;

    #[tracing::instrument(name = "GetContainerEvents", skip_all)]
    async fn get_container_events(
        &self,
        _: Request<GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        Ok(Response::new(events::container_event_stream(&self.inner)))
    }

    #[tracing::instrument(name = "ListMetricDescriptors", skip_all)]
    async fn list_metric_descriptors(
        &self,
        _: Request<ListMetricDescriptorsRequest>,
    ) -> Result<Response<ListMetricDescriptorsResponse>, Status> {
        // No CRI-side metrics yet: the kubelet falls back to its own when the list is empty.
        Ok(Response::new(ListMetricDescriptorsResponse::default()))
    }

    #[tracing::instrument(name = "ListPodSandboxMetrics", skip_all)]
    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<ListPodSandboxMetricsRequest>,
    ) -> Result<Response<ListPodSandboxMetricsResponse>, Status> {
        Ok(Response::new(ListPodSandboxMetricsResponse::default()))
    }

    #[tracing::instrument(name = "RuntimeConfig", skip_all)]
    async fn runtime_config(
        &self,
        _: Request<RuntimeConfigRequest>,
    ) -> Result<Response<RuntimeConfigResponse>, Status> {
        Ok(Response::new(node::runtime_config(
            self.inner.opts.systemd_cgroup,
        )))
    }
}
