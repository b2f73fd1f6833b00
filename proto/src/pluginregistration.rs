//! The kubelet's plugin registration API (`pluginregistration.v1`, proto package
//! `pluginregistration`): the `Registration` service a plugin serves on a socket in the
//! kubelet's `plugins_registry` directory. The kubelet's plugin watcher asks it who it is
//! ([`PluginInfo`]: type, name, endpoint, versions) and tells it whether it was registered.
//! CSI drivers' `node-driver-registrar` and DRA drivers serve it.
//!
//! The messages are few and stable (v1 since Kubernetes 1.13), so they are written here as
//! prost structs instead of generated: the field numbers are the proto's.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::transport::Channel;

pub use crate::unary::Answer;
use crate::unary::serve;

/// `type` of a CSI driver's registration.
pub const CSI_PLUGIN: &str = "CSIPlugin";
/// `type` of a device plugin's registration through the watcher (deprecated path).
pub const DEVICE_PLUGIN: &str = "DevicePlugin";
/// `type` of a dynamic resource allocation driver's registration.
pub const DRA_PLUGIN: &str = "DRAPlugin";

/// The gRPC service name.
pub const SERVICE: &str = "pluginregistration.Registration";
const GET_INFO: &str = "/pluginregistration.Registration/GetInfo";
const NOTIFY: &str = "/pluginregistration.Registration/NotifyRegistrationStatus";

/// `GetInfo`'s empty request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InfoRequest {}

/// Who the plugin is.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginInfo {
    /// [`CSI_PLUGIN`], [`DEVICE_PLUGIN`] or [`DRA_PLUGIN`].
    #[prost(string, tag = "1")]
    pub r#type: String,
    /// The plugin's name (a CSI driver's name, a resource name).
    #[prost(string, tag = "2")]
    pub name: String,
    /// The socket of its own service; empty: the registration socket itself.
    #[prost(string, tag = "3")]
    pub endpoint: String,
    /// The versions of its service it speaks (a CSI driver: `1.0.0`, ...).
    #[prost(string, repeated, tag = "4")]
    pub supported_versions: Vec<String>,
}

/// What the kubelet made of a registration.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegistrationStatus {
    /// Registered.
    #[prost(bool, tag = "1")]
    pub plugin_registered: bool,
    /// Why not, when not.
    #[prost(string, tag = "2")]
    pub error: String,
}

/// `NotifyRegistrationStatus`'s empty answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegistrationStatusResponse {}

/// A client of a plugin's registration socket.
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

    /// `GetInfo`.
    pub async fn get_info(&mut self) -> Result<PluginInfo, Status> {
        self.unary(GET_INFO, InfoRequest {}).await
    }

    /// `NotifyRegistrationStatus`.
    pub async fn notify_registration_status(
        &mut self,
        status: RegistrationStatus,
    ) -> Result<RegistrationStatusResponse, Status> {
        self.unary(NOTIFY, status).await
    }

    async fn unary<Q, A>(&mut self, path: &'static str, request: Q) -> Result<A, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        crate::unary::call(&mut self.inner, path, request, "registration socket").await
    }
}

/// What a registration socket's server answers (a plugin; the tests' stand-in registrars).
pub trait Registration: Send + Sync + 'static {
    /// `GetInfo`.
    fn get_info(&self) -> Answer<PluginInfo>;
    /// `NotifyRegistrationStatus`.
    fn notify_registration_status(
        &self,
        status: RegistrationStatus,
    ) -> Answer<RegistrationStatusResponse>;
}

crate::unary::named_service!(
    RegistrationServer,
    Registration,
    SERVICE,
    "[`Registration`] as a tonic service, for `tonic::transport::Server::add_service`."
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
                GET_INFO => serve(inner, |r: &T, _: InfoRequest| r.get_info(), req).await,
                NOTIFY => serve(inner, T::notify_registration_status, req).await,
                other => Status::unimplemented(format!("unknown method {other}")).into_http(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use std::sync::Arc;

    use super::*;

    #[derive(Default)]
    struct Registrar {
        statuses: Mutex<Vec<RegistrationStatus>>,
    }

    impl Registration for Arc<Registrar> {
        fn get_info(&self) -> Answer<PluginInfo> {
            Box::pin(async {
                Ok(PluginInfo {
                    r#type: CSI_PLUGIN.into(),
                    name: "hostpath.csi.k8s.io".into(),
                    endpoint: "/var/lib/kubelet/plugins/hostpath/csi.sock".into(),
                    supported_versions: vec!["1.0.0".into()],
                })
            })
        }

        fn notify_registration_status(
            &self,
            s: RegistrationStatus,
        ) -> Answer<RegistrationStatusResponse> {
            self.statuses.lock().unwrap().push(s);
            Box::pin(async { Ok(RegistrationStatusResponse {}) })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_registrar_answers_over_its_socket() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("reg.sock");
        let listener = crate::transport::bind(&sock.display().to_string(), 0o600).unwrap();
        let registrar = Arc::new(Registrar::default());
        let server = tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(registrar.clone()))
            .serve_with_incoming(crate::transport::incoming(listener, true));
        let task = tokio::spawn(server);
        let channel = crate::transport::connect(&sock.display().to_string())
            .await
            .unwrap();
        let mut client = RegistrationClient::new(channel);
        let info = client.get_info().await.unwrap();
        assert_eq!(
            (info.r#type.as_str(), info.name.as_str()),
            (CSI_PLUGIN, "hostpath.csi.k8s.io")
        );
        assert_eq!(info.supported_versions, ["1.0.0"]);
        client
            .notify_registration_status(RegistrationStatus {
                plugin_registered: false,
                error: "no".into(),
            })
            .await
            .unwrap();
        assert_eq!(
            *registrar.statuses.lock().unwrap(),
            [RegistrationStatus {
                plugin_registered: false,
                error: "no".into()
            }]
        );
        task.abort();
    }

    #[test]
    fn field_numbers_are_the_protos() {
        use prost::Message;
        let info = PluginInfo {
            r#type: "a".into(),
            name: "b".into(),
            endpoint: "c".into(),
            supported_versions: vec!["d".into()],
        };
        // tag 1 string "a", tag 2 "b", tag 3 "c", tag 4 "d".
        assert_eq!(
            info.encode_to_vec(),
            [0x0a, 1, b'a', 0x12, 1, b'b', 0x1a, 1, b'c', 0x22, 1, b'd']
        );
        let status = RegistrationStatus {
            plugin_registered: true,
            error: "e".into(),
        };
        assert_eq!(status.encode_to_vec(), [0x08, 1, 0x12, 1, b'e']);
    }
}
