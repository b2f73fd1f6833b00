//! The device plugin API (`deviceplugin.v1beta1`, proto package `v1beta1`): a device plugin
//! registers with the kubelet's [`Registration`] service on
//! `<root-dir>/device-plugins/kubelet.sock`, and serves the [`DevicePlugin`] service on a
//! socket of its own in that directory, which the kubelet then calls: `ListAndWatch` (the
//! plugin's devices and their health, streamed), `GetPreferredAllocation`, `Allocate` (what a
//! container needs to use the devices it was given) and `PreStartContainer`.
//!
//! The messages have been stable since Kubernetes 1.10 (CDI devices added in 1.28), so they
//! are written here as prost structs with the proto's field numbers, as [`crate::csi`] is.
//! Maps are `BTreeMap`s: their encoding is then in key order, as Kubernetes' generated code
//! writes it, so an encoded response is the same bytes every time (the kubelet's checkpoint
//! stores and checksums them).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

pub use crate::unary::Answer;
use crate::unary::serve;

/// The API version a plugin registers with.
pub const VERSION: &str = "v1beta1";
/// A device's `health` when usable.
pub const HEALTHY: &str = "Healthy";
/// A device's `health` when not.
pub const UNHEALTHY: &str = "Unhealthy";
/// The kubelet's registration socket's file name, in [`DEVICE_PLUGIN_DIR`].
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// Where device plugins' sockets live under the kubelet's root directory.
pub const DEVICE_PLUGIN_DIR: &str = "device-plugins";

/// The registration service's gRPC name.
pub const REGISTRATION_SERVICE: &str = "v1beta1.Registration";
/// The device plugin service's gRPC name.
pub const DEVICE_PLUGIN_SERVICE: &str = "v1beta1.DevicePlugin";
const REGISTER: &str = "/v1beta1.Registration/Register";
const GET_OPTIONS: &str = "/v1beta1.DevicePlugin/GetDevicePluginOptions";
const LIST_AND_WATCH: &str = "/v1beta1.DevicePlugin/ListAndWatch";
const GET_PREFERRED: &str = "/v1beta1.DevicePlugin/GetPreferredAllocation";
const ALLOCATE: &str = "/v1beta1.DevicePlugin/Allocate";
const PRE_START: &str = "/v1beta1.DevicePlugin/PreStartContainer";

/// What a plugin offers beyond the required calls.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct DevicePluginOptions {
    /// `PreStartContainer` is to be called before each container using its devices starts.
    #[prost(bool, tag = "1")]
    pub pre_start_required: bool,
    /// `GetPreferredAllocation` may be called to choose devices.
    #[prost(bool, tag = "2")]
    pub get_preferred_allocation_available: bool,
}

/// A plugin's registration.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterRequest {
    /// The API version it speaks ([`VERSION`]).
    #[prost(string, tag = "1")]
    pub version: String,
    /// Its socket's file name, relative to the device plugin directory.
    #[prost(string, tag = "2")]
    pub endpoint: String,
    /// The extended resource it serves (`vendor.com/name`).
    #[prost(string, tag = "3")]
    pub resource_name: String,
    /// What it offers.
    #[prost(message, optional, tag = "4")]
    pub options: Option<DevicePluginOptions>,
}

/// The empty message.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Empty {}

/// One update of `ListAndWatch`: every device the plugin has, each time.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListAndWatchResponse {
    /// The devices.
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<Device>,
}

/// The NUMA nodes a device is close to.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct TopologyInfo {
    /// The nodes.
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<NumaNode>,
}

/// A NUMA node.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct NumaNode {
    /// Its id.
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// A device.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Device {
    /// Its id, unique within the resource.
    #[prost(string, tag = "1")]
    pub id: String,
    /// [`HEALTHY`] or [`UNHEALTHY`].
    #[prost(string, tag = "2")]
    pub health: String,
    /// Where it sits, if the plugin knows.
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// `PreStartContainer`'s request: the devices of the container about to start.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PreStartContainerRequest {
    /// The device ids.
    #[prost(string, repeated, tag = "1")]
    pub devices_ids: Vec<String>,
}

/// `PreStartContainer`'s empty answer.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct PreStartContainerResponse {}

/// `GetPreferredAllocation`'s request, one entry per container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PreferredAllocationRequest {
    /// The containers.
    #[prost(message, repeated, tag = "1")]
    pub container_requests: Vec<ContainerPreferredAllocationRequest>,
}

/// What the kubelet may give one container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerPreferredAllocationRequest {
    /// The devices free to choose from.
    #[prost(string, repeated, tag = "1")]
    pub available_device_ids: Vec<String>,
    /// The devices that must be in the answer (reused from init containers).
    #[prost(string, repeated, tag = "2")]
    pub must_include_device_ids: Vec<String>,
    /// How many to choose.
    #[prost(int32, tag = "3")]
    pub allocation_size: i32,
}

/// `GetPreferredAllocation`'s answer, one entry per container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PreferredAllocationResponse {
    /// The containers.
    #[prost(message, repeated, tag = "1")]
    pub container_responses: Vec<ContainerPreferredAllocationResponse>,
}

/// The devices a plugin would give one container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerPreferredAllocationResponse {
    /// The device ids.
    #[prost(string, repeated, tag = "1")]
    pub device_ids: Vec<String>,
}

/// `Allocate`'s request, one entry per container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocateRequest {
    /// The containers.
    #[prost(message, repeated, tag = "1")]
    pub container_requests: Vec<ContainerAllocateRequest>,
}

/// The devices given to one container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerAllocateRequest {
    /// The device ids.
    #[prost(string, repeated, tag = "1")]
    pub devices_ids: Vec<String>,
}

/// A device by its fully qualified CDI name (`vendor.com/class=name`).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct CdiDevice {
    /// The name.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `Allocate`'s answer, one entry per container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocateResponse {
    /// The containers.
    #[prost(message, repeated, tag = "1")]
    pub container_responses: Vec<ContainerAllocateResponse>,
}

/// What a container needs to use its devices.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ContainerAllocateResponse {
    /// Environment variables to set.
    #[prost(btree_map = "string, string", tag = "1")]
    pub envs: BTreeMap<String, String>,
    /// Host paths to mount.
    #[prost(message, repeated, tag = "2")]
    pub mounts: Vec<Mount>,
    /// Device nodes to make.
    #[prost(message, repeated, tag = "3")]
    pub devices: Vec<DeviceSpec>,
    /// Annotations for the runtime.
    #[prost(btree_map = "string, string", tag = "4")]
    pub annotations: BTreeMap<String, String>,
    /// CDI devices for the runtime to resolve.
    #[prost(message, repeated, tag = "5")]
    pub cdi_devices: Vec<CdiDevice>,
}

/// A host path mounted into the container.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Mount {
    /// Where inside.
    #[prost(string, tag = "1")]
    pub container_path: String,
    /// What, on the host.
    #[prost(string, tag = "2")]
    pub host_path: String,
    /// Read-only.
    #[prost(bool, tag = "3")]
    pub read_only: bool,
}

/// A device node made in the container.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct DeviceSpec {
    /// Its path inside.
    #[prost(string, tag = "1")]
    pub container_path: String,
    /// The host's device node.
    #[prost(string, tag = "2")]
    pub host_path: String,
    /// cgroup permissions: some of `r`, `w`, `m`.
    #[prost(string, tag = "3")]
    pub permissions: String,
}

/// A stream of [`ListAndWatchResponse`]s a plugin sends.
pub type DeviceStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

/// A client of the kubelet's registration socket (what a plugin calls).
#[derive(Clone, Debug)]
pub struct RegistrationClient {
    inner: tonic::client::Grpc<Channel>,
}

impl RegistrationClient {
    /// A client on an open channel ([`crate::transport::connect`]).
    pub fn new(channel: Channel) -> Self {
        Self {
            inner: tonic::client::Grpc::new(channel),
        }
    }

    /// `Register`.
    pub async fn register(&mut self, request: RegisterRequest) -> Result<Empty, Status> {
        crate::unary::call(
            &mut self.inner,
            REGISTER,
            request,
            "kubelet registration socket",
        )
        .await
    }
}

/// What the kubelet's registration socket answers.
pub trait Registration: Send + Sync + 'static {
    /// `Register`.
    fn register(&self, request: RegisterRequest) -> Answer<Empty>;
}

/// A client of a plugin's socket (what the kubelet calls).
#[derive(Clone, Debug)]
pub struct DevicePluginClient {
    inner: tonic::client::Grpc<Channel>,
}

impl DevicePluginClient {
    /// A client on an open channel ([`crate::transport::connect`]).
    pub fn new(channel: Channel) -> Self {
        Self {
            inner: tonic::client::Grpc::new(channel),
        }
    }

    /// `GetDevicePluginOptions`.
    pub async fn get_device_plugin_options(&mut self) -> Result<DevicePluginOptions, Status> {
        self.unary(GET_OPTIONS, Empty {}).await
    }

    /// `ListAndWatch`: the stream of the plugin's devices.
    pub async fn list_and_watch(&mut self) -> Result<Streaming<ListAndWatchResponse>, Status> {
        self.inner
            .ready()
            .await
            .map_err(|e| Status::unavailable(format!("device plugin not ready: {e}")))?;
        let codec = tonic_prost::ProstCodec::<Empty, ListAndWatchResponse>::default();
        let path = http::uri::PathAndQuery::from_static(LIST_AND_WATCH);
        self.inner
            .server_streaming(Request::new(Empty {}), path, codec)
            .await
            .map(Response::into_inner)
    }

    /// `GetPreferredAllocation`.
    pub async fn get_preferred_allocation(
        &mut self,
        request: PreferredAllocationRequest,
    ) -> Result<PreferredAllocationResponse, Status> {
        self.unary(GET_PREFERRED, request).await
    }

    /// `Allocate`.
    pub async fn allocate(&mut self, request: AllocateRequest) -> Result<AllocateResponse, Status> {
        self.unary(ALLOCATE, request).await
    }

    /// `PreStartContainer`.
    pub async fn pre_start_container(
        &mut self,
        request: PreStartContainerRequest,
    ) -> Result<PreStartContainerResponse, Status> {
        self.unary(PRE_START, request).await
    }

    async fn unary<Q, A>(&mut self, path: &'static str, request: Q) -> Result<A, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        crate::unary::call(&mut self.inner, path, request, "device plugin").await
    }
}

/// What a plugin's socket answers (device plugins; the tests' stand-in).
pub trait DevicePlugin: Send + Sync + 'static {
    /// `GetDevicePluginOptions`.
    fn get_device_plugin_options(&self) -> Answer<DevicePluginOptions>;
    /// `ListAndWatch`: a stream that lives as long as the plugin serves the kubelet.
    fn list_and_watch(&self) -> Answer<DeviceStream>;
    /// `GetPreferredAllocation`.
    fn get_preferred_allocation(
        &self,
        request: PreferredAllocationRequest,
    ) -> Answer<PreferredAllocationResponse>;
    /// `Allocate`.
    fn allocate(&self, request: AllocateRequest) -> Answer<AllocateResponse>;
    /// `PreStartContainer`.
    fn pre_start_container(
        &self,
        request: PreStartContainerRequest,
    ) -> Answer<PreStartContainerResponse>;
}

crate::unary::named_service!(
    RegistrationServer,
    Registration,
    REGISTRATION_SERVICE,
    "[`Registration`] as a tonic service, for `tonic::transport::Server::add_service`."
);
crate::unary::named_service!(
    DevicePluginServer,
    DevicePlugin,
    DEVICE_PLUGIN_SERVICE,
    "[`DevicePlugin`] as a tonic service, for `tonic::transport::Server::add_service`."
);

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<T: Registration> tower::Service<http::Request<tonic::body::Body>> for RegistrationServer<T> {
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
                REGISTER => serve(inner, T::register, req).await,
                other => Status::unimplemented(format!("unknown method {other}")).into_http(),
            })
        })
    }
}

/// `ListAndWatch` as tonic's server-streaming method.
struct ListAndWatch<T>(std::sync::Arc<T>);

impl<T: DevicePlugin> tonic::server::ServerStreamingService<Empty> for ListAndWatch<T> {
    type Response = ListAndWatchResponse;
    type ResponseStream = DeviceStream;
    type Future = Answer<Response<DeviceStream>>;

    fn call(&mut self, _: Request<Empty>) -> Self::Future {
        let answer = self.0.list_and_watch();
        Box::pin(async move { answer.await.map(Response::new) })
    }
}

impl<T: DevicePlugin> tower::Service<http::Request<tonic::body::Body>> for DevicePluginServer<T> {
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
                GET_OPTIONS => {
                    serve(inner, |p: &T, _: Empty| p.get_device_plugin_options(), req).await
                }
                LIST_AND_WATCH => {
                    let codec = tonic_prost::ProstCodec::<ListAndWatchResponse, Empty>::default();
                    let mut grpc = tonic::server::Grpc::new(codec);
                    grpc.server_streaming(ListAndWatch(inner), req).await
                }
                GET_PREFERRED => serve(inner, T::get_preferred_allocation, req).await,
                ALLOCATE => serve(inner, T::allocate, req).await,
                PRE_START => serve(inner, T::pre_start_container, req).await,
                other => Status::unimplemented(format!("unknown method {other}")).into_http(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use prost::Message;
    use tokio_stream::StreamExt;

    use std::sync::Arc;

    use super::*;

    #[derive(Default)]
    struct Plugin {
        allocated: Mutex<Vec<Vec<String>>>,
    }

    impl DevicePlugin for Arc<Plugin> {
        fn get_device_plugin_options(&self) -> Answer<DevicePluginOptions> {
            Box::pin(async {
                Ok(DevicePluginOptions {
                    pre_start_required: true,
                    get_preferred_allocation_available: false,
                })
            })
        }

        fn list_and_watch(&self) -> Answer<DeviceStream> {
            let devices = |health: &str| ListAndWatchResponse {
                devices: vec![Device {
                    id: "dev-0".into(),
                    health: health.into(),
                    topology: None,
                }],
            };
            let updates = vec![Ok(devices(HEALTHY)), Ok(devices(UNHEALTHY))];
            Box::pin(async move { Ok(Box::pin(tokio_stream::iter(updates)) as DeviceStream) })
        }

        fn get_preferred_allocation(
            &self,
            _: PreferredAllocationRequest,
        ) -> Answer<PreferredAllocationResponse> {
            Box::pin(async { Err(Status::unimplemented("no preference")) })
        }

        fn allocate(&self, request: AllocateRequest) -> Answer<AllocateResponse> {
            let ids: Vec<Vec<String>> = request
                .container_requests
                .into_iter()
                .map(|c| c.devices_ids)
                .collect();
            self.allocated.lock().unwrap().extend(ids.clone());
            Box::pin(async move {
                Ok(AllocateResponse {
                    container_responses: ids
                        .into_iter()
                        .map(|ids| ContainerAllocateResponse {
                            envs: [("DEVICES".to_string(), ids.join(","))].into(),
                            cdi_devices: vec![CdiDevice {
                                name: "example.com/dev=0".into(),
                            }],
                            ..Default::default()
                        })
                        .collect(),
                })
            })
        }

        fn pre_start_container(
            &self,
            _: PreStartContainerRequest,
        ) -> Answer<PreStartContainerResponse> {
            Box::pin(async { Ok(PreStartContainerResponse {}) })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_plugin_answers_and_streams_over_its_socket() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("plugin.sock");
        let plugin = Arc::new(Plugin::default());
        let listener = crate::transport::bind(&sock.display().to_string(), 0o600).unwrap();
        let server = tonic::transport::Server::builder()
            .add_service(DevicePluginServer::new(plugin.clone()))
            .serve_with_incoming(crate::transport::incoming(listener, true));
        let task = tokio::spawn(server);

        let channel = crate::transport::connect(&sock.display().to_string())
            .await
            .unwrap();
        let mut client = DevicePluginClient::new(channel);
        let options = client.get_device_plugin_options().await.unwrap();
        assert!(options.pre_start_required);
        let mut stream = client.list_and_watch().await.unwrap();
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first.devices[0].health, HEALTHY);
        let second = stream.next().await.unwrap().unwrap();
        assert_eq!(second.devices[0].health, UNHEALTHY);
        assert!(stream.next().await.is_none(), "the plugin's stream ended");

        let answer = client
            .allocate(AllocateRequest {
                container_requests: vec![ContainerAllocateRequest {
                    devices_ids: vec!["dev-0".into()],
                }],
            })
            .await
            .unwrap();
        assert_eq!(answer.container_responses[0].envs["DEVICES"], "dev-0");
        assert_eq!(*plugin.allocated.lock().unwrap(), vec![vec!["dev-0"]]);
        let err = client
            .get_preferred_allocation(PreferredAllocationRequest::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unimplemented);
        task.abort();
    }

    #[test]
    fn maps_encode_in_key_order() {
        // Kubernetes' generated marshaller sorts map keys; the checkpoint relies on the same
        // response always being the same bytes.
        let r = ContainerAllocateResponse {
            envs: [("B".into(), "2".into()), ("A".into(), "1".into())].into(),
            ..Default::default()
        };
        let bytes = r.encode_to_vec();
        let a = bytes.windows(1).position(|w| w == b"A").unwrap();
        let b = bytes.windows(1).position(|w| w == b"B").unwrap();
        assert!(a < b);
        assert_eq!(ContainerAllocateResponse::decode(&bytes[..]).unwrap(), r);
    }
}
