//! containerd's gRPC API, and the per-call metadata that scopes each call to a namespace and,
//! optionally, a lease.

pub use containerd_client::{events, services, to_any, types};

use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

use crate::transport::{self, TransportError};

/// Metadata key containerd reads the namespace from.
pub const NAMESPACE_HEADER: &str = "containerd-namespace";
/// Metadata key containerd reads the lease from.
pub const LEASE_HEADER: &str = "containerd-lease";

/// A name that cannot be sent as gRPC metadata.
#[derive(Debug, thiserror::Error)]
#[error("{what} {value:?} is not a valid metadata value")]
pub struct InvalidScope {
    what: &'static str,
    value: String,
}

/// Interceptor that stamps the containerd namespace, and the lease when one is set, on every
/// request; containerd rejects calls without a namespace.
#[derive(Clone, Debug)]
pub struct Scope {
    namespace: AsciiMetadataValue,
    lease: Option<AsciiMetadataValue>,
}

impl Scope {
    /// A scope for `namespace` with no lease.
    pub fn new(namespace: &str) -> Result<Self, InvalidScope> {
        Ok(Self {
            namespace: ascii("namespace", namespace)?,
            lease: None,
        })
    }

    /// The same namespace, with every call also holding `lease` (so new content and snapshots
    /// are safe from garbage collection until the lease goes).
    pub fn with_lease(&self, lease: &str) -> Result<Self, InvalidScope> {
        Ok(Self {
            namespace: self.namespace.clone(),
            lease: Some(ascii("lease", lease)?),
        })
    }
}

fn ascii(what: &'static str, value: &str) -> Result<AsciiMetadataValue, InvalidScope> {
    MetadataValue::try_from(value).map_err(|_| InvalidScope {
        what,
        value: value.to_string(),
    })
}

impl tonic::service::Interceptor for Scope {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let md = req.metadata_mut();
        md.insert(NAMESPACE_HEADER, self.namespace.clone());
        if let Some(lease) = &self.lease {
            md.insert(LEASE_HEADER, lease.clone());
        }
        Ok(req)
    }
}

/// A channel to containerd whose every call is scoped; each accessor returns a fresh client.
pub type Scoped = InterceptedService<Channel, Scope>;

/// A connection to containerd bound to one namespace (and maybe a lease).
#[derive(Clone, Debug)]
pub struct Containerd {
    channel: Channel,
    scope: Scope,
    namespace: String,
}

macro_rules! clients {
    ($($(#[$doc:meta])* $name:ident => $($seg:ident)::+;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self) -> $($seg)::+<Scoped> {
                $($seg)::+::with_interceptor(self.channel.clone(), self.scope.clone())
            }
        )*
    };
}

impl Containerd {
    /// Connects to containerd's socket (`/path` or `unix:///path`), scoped to `namespace`.
    pub async fn connect(endpoint: &str, namespace: &str) -> Result<Self, ConnectError> {
        let scope = Scope::new(namespace)?;
        let channel = transport::connect(endpoint).await?;
        Ok(Self {
            channel,
            scope,
            namespace: namespace.to_string(),
        })
    }

    /// Wraps an existing channel, scoped to `namespace`.
    pub fn from_channel(channel: Channel, namespace: &str) -> Result<Self, InvalidScope> {
        Ok(Self {
            channel,
            scope: Scope::new(namespace)?,
            namespace: namespace.to_string(),
        })
    }

    /// The namespace every call is scoped to.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The same connection with every call holding `lease`.
    pub fn with_lease(&self, lease: &str) -> Result<Self, InvalidScope> {
        Ok(Self {
            channel: self.channel.clone(),
            scope: self.scope.with_lease(lease)?,
            namespace: self.namespace.clone(),
        })
    }

    /// Subscribes to `topics` in this namespace and returns once containerd holds the
    /// subscription, so nothing published afterwards is missed. containerd answers a
    /// subscription only with its first event, so an empty event is published to
    /// `marker_topic` (which the subscription also takes: callers skip it) every 20 ms until
    /// the answer comes; a failed publish is handed to `publish_failed` and retried in 500 ms.
    pub async fn subscribe_confirmed(
        &self,
        topics: &[&str],
        marker_topic: &str,
        publish_failed: impl Fn(&Status),
    ) -> Result<tonic::Streaming<types::Envelope>, Status> {
        let filters = topics
            .iter()
            .chain([&marker_topic])
            .map(|topic| format!("namespace=={},topic==\"{topic}\"", self.namespace))
            .collect();
        let mut events = self.events();
        let call = events.subscribe(services::v1::SubscribeRequest { filters });
        let poke = async {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                let marker = prost_types::Any {
                    type_url: "types.googleapis.com/google.protobuf.Empty".into(),
                    value: Vec::new(),
                };
                let published = self
                    .events()
                    .publish(services::v1::PublishRequest {
                        topic: marker_topic.into(),
                        event: Some(marker),
                    })
                    .await;
                if let Err(status) = published {
                    publish_failed(&status);
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        };
        tokio::select! {
            r = call => r.map(tonic::Response::into_inner),
            () = poke => unreachable!("the poke loop never ends"),
        }
    }

    /// The underlying channel, unscoped.
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    clients! {
        /// containerd's version service.
        version => services::v1::version_client::VersionClient;
        /// Plugin introspection.
        introspection => services::v1::introspection_client::IntrospectionClient;
        /// Namespaces.
        namespaces => services::v1::namespaces_client::NamespacesClient;
        /// The content store.
        content => services::v1::content_client::ContentClient;
        /// Image records.
        images => services::v1::images_client::ImagesClient;
        /// Leases that protect resources from garbage collection.
        leases => services::v1::leases_client::LeasesClient;
        /// Snapshotters.
        snapshots => services::v1::snapshots::snapshots_client::SnapshotsClient;
        /// Layer diff apply/compare.
        diff => services::v1::diff_client::DiffClient;
        /// Container records.
        containers => services::v1::containers_client::ContainersClient;
        /// Tasks (running processes).
        tasks => services::v1::tasks_client::TasksClient;
        /// The event stream.
        events => services::v1::events_client::EventsClient;
    }
}

/// Failure to reach containerd.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The namespace cannot be sent as metadata.
    #[error(transparent)]
    Scope(#[from] InvalidScope),
    /// The socket could not be reached.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    #[test]
    fn scope_stamps_namespace_and_lease() {
        let mut scope = Scope::new("k8s.io").unwrap().with_lease("pull-1").unwrap();
        let req = scope.call(Request::new(())).unwrap();
        assert_eq!(req.metadata().get(NAMESPACE_HEADER).unwrap(), "k8s.io");
        assert_eq!(req.metadata().get(LEASE_HEADER).unwrap(), "pull-1");
        let mut plain = Scope::new("default").unwrap();
        let req = plain.call(Request::new(())).unwrap();
        assert!(req.metadata().get(LEASE_HEADER).is_none());
    }

    #[test]
    fn scope_rejects_names_that_are_not_metadata() {
        assert!(Scope::new("bad\nname").is_err());
    }
}
