//! The CRI RuntimeService. Until the sandbox and container parts land, every method but
//! `Version` answers `Unimplemented`, naming itself, so clients fail clearly.

use ferrolet_proto::cri::runtime_service_server::RuntimeService;
use ferrolet_proto::cri::*;
use tonic::{Request, Response, Status};

/// Runtime name reported by `Version`.
pub const RUNTIME_NAME: &str = "ferrolet";
/// CRI API version served.
pub const RUNTIME_API_VERSION: &str = "v1";
/// The kubelet API version field, fixed at "0.1.0" by CRI convention.
const KUBE_API_VERSION: &str = "0.1.0";

/// The RuntimeService implementation.
#[derive(Clone, Debug, Default)]
pub struct Runtime;

/// The `Version` answer.
pub fn version_response() -> VersionResponse {
    VersionResponse {
        version: KUBE_API_VERSION.into(),
        runtime_name: RUNTIME_NAME.into(),
        runtime_version: env!("CARGO_PKG_VERSION").into(),
        runtime_api_version: RUNTIME_API_VERSION.into(),
    }
}

fn unimplemented(method: &str) -> Status {
    Status::unimplemented(format!(
        "runtime.v1.RuntimeService/{method} is not implemented by ferrolet-cri yet"
    ))
}

// The whole impl comes from one macro: `async_trait` must see the generated methods, and
// attribute macros do not look inside macro calls.
macro_rules! runtime_service {
    (
        implemented { $($done:item)* }
        not_yet { $($name:ident($req:ty) -> $resp:ty = $method:literal;)* }
    ) => {
        #[tonic::async_trait]
        impl RuntimeService for Runtime {
            $($done)*
            $(
                #[tracing::instrument(name = $method, skip_all)]
                async fn $name(&self, _: Request<$req>) -> Result<Response<$resp>, Status> {
                    Err(unimplemented($method))
                }
            )*
        }
    };
}

runtime_service! {
    implemented {
        #[tracing::instrument(name = "Version", skip_all)]
        async fn version(
            &self,
            _: Request<VersionRequest>,
        ) -> Result<Response<VersionResponse>, Status> {
            Ok(Response::new(version_response()))
        }

        type GetContainerEventsStream =
            futures::stream::Empty<Result<ContainerEventResponse, Status>>;

        #[tracing::instrument(name = "GetContainerEvents", skip_all)]
        async fn get_container_events(
            &self,
            _: Request<GetEventsRequest>,
        ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
            Err(unimplemented("GetContainerEvents"))
        }
    }
    not_yet {
        run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse = "RunPodSandbox";
        stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse = "StopPodSandbox";
        remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse = "RemovePodSandbox";
        pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse = "PodSandboxStatus";
        list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse = "ListPodSandbox";
        create_container(CreateContainerRequest) -> CreateContainerResponse = "CreateContainer";
        start_container(StartContainerRequest) -> StartContainerResponse = "StartContainer";
        stop_container(StopContainerRequest) -> StopContainerResponse = "StopContainer";
        remove_container(RemoveContainerRequest) -> RemoveContainerResponse = "RemoveContainer";
        list_containers(ListContainersRequest) -> ListContainersResponse = "ListContainers";
        container_status(ContainerStatusRequest) -> ContainerStatusResponse = "ContainerStatus";
        update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse = "UpdateContainerResources";
        reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse = "ReopenContainerLog";
        exec_sync(ExecSyncRequest) -> ExecSyncResponse = "ExecSync";
        exec(ExecRequest) -> ExecResponse = "Exec";
        attach(AttachRequest) -> AttachResponse = "Attach";
        port_forward(PortForwardRequest) -> PortForwardResponse = "PortForward";
        container_stats(ContainerStatsRequest) -> ContainerStatsResponse = "ContainerStats";
        list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse = "ListContainerStats";
        pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse = "PodSandboxStats";
        list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse = "ListPodSandboxStats";
        update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse = "UpdateRuntimeConfig";
        status(StatusRequest) -> StatusResponse = "Status";
        checkpoint_container(CheckpointContainerRequest) -> CheckpointContainerResponse = "CheckpointContainer";
        list_metric_descriptors(ListMetricDescriptorsRequest) -> ListMetricDescriptorsResponse = "ListMetricDescriptors";
        list_pod_sandbox_metrics(ListPodSandboxMetricsRequest) -> ListPodSandboxMetricsResponse = "ListPodSandboxMetrics";
        runtime_config(RuntimeConfigRequest) -> RuntimeConfigResponse = "RuntimeConfig";
    }
}
