//! The kubelet's pod resources API (`podresources.v1`, proto package `v1`): the
//! `PodResourcesLister` service on `<root-dir>/pod-resources/kubelet.sock`, where monitoring
//! agents learn which pod's containers hold which devices, exclusive CPUs and memory, and what
//! the node has to give. Written as prost structs with the proto's field numbers (Kubernetes
//! 1.28's messages), as [`crate::csi`] is.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::transport::Channel;

pub use crate::deviceplugin::{NumaNode, TopologyInfo};
pub use crate::unary::Answer;
use crate::unary::serve;

/// Where the socket lives under the kubelet's root directory.
pub const POD_RESOURCES_DIR: &str = "pod-resources";
/// The socket's file name.
pub const SOCKET: &str = "kubelet.sock";
/// The gRPC service name.
pub const SERVICE: &str = "v1.PodResourcesLister";
const LIST: &str = "/v1.PodResourcesLister/List";
const GET_ALLOCATABLE: &str = "/v1.PodResourcesLister/GetAllocatableResources";
const GET: &str = "/v1.PodResourcesLister/Get";

/// `List`'s empty request.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct ListPodResourcesRequest {}

/// Every pod's resources.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    /// One per pod.
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// `GetAllocatableResources`' empty request.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct AllocatableResourcesRequest {}

/// What the node has to give.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocatableResourcesResponse {
    /// Healthy devices, per resource.
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<ContainerDevices>,
    /// CPUs that may be allocated exclusively (static CPU manager).
    #[prost(int64, repeated, tag = "2")]
    pub cpu_ids: Vec<i64>,
    /// Memory per NUMA node (memory manager).
    #[prost(message, repeated, tag = "3")]
    pub memory: Vec<ContainerMemory>,
}

/// `Get`'s request: one pod by name.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPodResourcesRequest {
    /// The pod's name.
    #[prost(string, tag = "1")]
    pub pod_name: String,
    /// Its namespace.
    #[prost(string, tag = "2")]
    pub pod_namespace: String,
}

/// `Get`'s answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPodResourcesResponse {
    /// The pod's resources.
    #[prost(message, optional, tag = "1")]
    pub pod_resources: Option<PodResources>,
}

/// One pod's resources.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its namespace.
    #[prost(string, tag = "2")]
    pub namespace: String,
    /// Its containers.
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// One container's resources.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its devices, per resource.
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    /// Its exclusive CPUs.
    #[prost(int64, repeated, tag = "3")]
    pub cpu_ids: Vec<i64>,
    /// Its memory per NUMA node.
    #[prost(message, repeated, tag = "4")]
    pub memory: Vec<ContainerMemory>,
    /// Its dynamically allocated resources (DRA).
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

/// Memory of one type reserved on NUMA nodes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMemory {
    /// `memory` or `hugepages-<size>`.
    #[prost(string, tag = "1")]
    pub memory_type: String,
    /// Bytes.
    #[prost(uint64, tag = "2")]
    pub size: u64,
    /// The nodes.
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// Devices of one resource.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    /// The extended resource.
    #[prost(string, tag = "1")]
    pub resource_name: String,
    /// The devices' ids.
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
    /// Their NUMA nodes.
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// A DRA claim's resources held by a container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DynamicResource {
    /// The resource class.
    #[prost(string, tag = "1")]
    pub class_name: String,
    /// The claim.
    #[prost(string, tag = "2")]
    pub claim_name: String,
    /// Its namespace.
    #[prost(string, tag = "3")]
    pub claim_namespace: String,
    /// What the claim holds.
    #[prost(message, repeated, tag = "4")]
    pub claim_resources: Vec<ClaimResource>,
}

/// One resource of a claim.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClaimResource {
    /// Its CDI devices.
    #[prost(message, repeated, tag = "1")]
    pub cdi_devices: Vec<crate::deviceplugin::CdiDevice>,
}

/// A client of the pod resources socket (monitoring agents; the tests).
#[derive(Clone, Debug)]
pub struct PodResourcesListerClient {
    inner: tonic::client::Grpc<Channel>,
}

impl PodResourcesListerClient {
    /// A client on an open channel ([`crate::transport::connect`]).
    pub fn new(channel: Channel) -> Self {
        Self {
            inner: tonic::client::Grpc::new(channel),
        }
    }

    /// `List`.
    pub async fn list(&mut self) -> Result<ListPodResourcesResponse, Status> {
        self.unary(LIST, ListPodResourcesRequest {}).await
    }

    /// `GetAllocatableResources`.
    pub async fn get_allocatable_resources(
        &mut self,
    ) -> Result<AllocatableResourcesResponse, Status> {
        self.unary(GET_ALLOCATABLE, AllocatableResourcesRequest {})
            .await
    }

    /// `Get`.
    pub async fn get(
        &mut self,
        request: GetPodResourcesRequest,
    ) -> Result<GetPodResourcesResponse, Status> {
        self.unary(GET, request).await
    }

    async fn unary<Q, A>(&mut self, path: &'static str, request: Q) -> Result<A, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        crate::unary::call(&mut self.inner, path, request, "pod resources socket").await
    }
}

/// What the pod resources socket answers (the kubelet).
pub trait PodResourcesLister: Send + Sync + 'static {
    /// `List`.
    fn list(&self, request: ListPodResourcesRequest) -> Answer<ListPodResourcesResponse>;
    /// `GetAllocatableResources`.
    fn get_allocatable_resources(
        &self,
        request: AllocatableResourcesRequest,
    ) -> Answer<AllocatableResourcesResponse>;
    /// `Get`.
    fn get(&self, request: GetPodResourcesRequest) -> Answer<GetPodResourcesResponse>;
}

crate::unary::named_service!(
    PodResourcesListerServer,
    PodResourcesLister,
    SERVICE,
    "[`PodResourcesLister`] as a tonic service, for `tonic::transport::Server::add_service`."
);

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
impl<T: PodResourcesLister> tower::Service<http::Request<tonic::body::Body>>
    for PodResourcesListerServer<T>
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move {
            Ok(match req.uri().path() {
                LIST => serve(inner, T::list, req).await,
                GET_ALLOCATABLE => serve(inner, T::get_allocatable_resources, req).await,
                GET => serve(inner, T::get, req).await,
                other => Status::unimplemented(format!("unknown method {other}")).into_http(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn field_numbers_are_the_protos() {
        let d = ContainerDevices {
            resource_name: "a".into(),
            device_ids: vec!["b".into()],
            topology: Some(TopologyInfo {
                nodes: vec![NumaNode { id: 1 }],
            }),
        };
        // tag 1 "a", tag 2 "b", tag 3 { tag 1 { tag 1 varint 1 } }.
        assert_eq!(
            d.encode_to_vec(),
            [0x0a, 1, b'a', 0x12, 1, b'b', 0x1a, 4, 0x0a, 2, 0x08, 1]
        );
        let r = AllocatableResourcesResponse {
            cpu_ids: vec![2, 3],
            ..Default::default()
        };
        // Packed repeated int64 at tag 2.
        assert_eq!(r.encode_to_vec(), [0x12, 2, 2, 3]);
    }
}
