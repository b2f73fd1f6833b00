//! The Container Storage Interface's node side (`csi.v1`, spec v1.x): the `Node` service a
//! CSI driver serves on its socket, which the kubelet calls to stage, publish, measure and
//! expand volumes and to learn the node's id and topology. Written here as prost structs with
//! the spec's field numbers (the kubelet uses the Node service only; the Controller and
//! Identity services are the cluster's sidecars' business).
//!
//! `secrets` maps are never printed: the requests carrying them have a [`Debug`] that shows
//! their keys only.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::transport::Channel;

pub use crate::unary::Answer;
use crate::unary::serve;

/// The gRPC service name.
pub const NODE_SERVICE: &str = "csi.v1.Node";
const NODE_STAGE: &str = "/csi.v1.Node/NodeStageVolume";
const NODE_UNSTAGE: &str = "/csi.v1.Node/NodeUnstageVolume";
const NODE_PUBLISH: &str = "/csi.v1.Node/NodePublishVolume";
const NODE_UNPUBLISH: &str = "/csi.v1.Node/NodeUnpublishVolume";
const NODE_GET_VOLUME_STATS: &str = "/csi.v1.Node/NodeGetVolumeStats";
const NODE_EXPAND: &str = "/csi.v1.Node/NodeExpandVolume";
const NODE_GET_CAPABILITIES: &str = "/csi.v1.Node/NodeGetCapabilities";
const NODE_GET_INFO: &str = "/csi.v1.Node/NodeGetInfo";

/// How a volume is to be used.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VolumeCapability {
    /// Block device or mounted filesystem.
    #[prost(oneof = "volume_capability::AccessType", tags = "1, 2")]
    pub access_type: Option<volume_capability::AccessType>,
    /// Who may use it at once.
    #[prost(message, optional, tag = "3")]
    pub access_mode: Option<volume_capability::AccessMode>,
}

/// [`VolumeCapability`]'s parts.
pub mod volume_capability {
    /// A raw block device.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct BlockVolume {}

    /// A mounted filesystem.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct MountVolume {
        /// `ext4`, `xfs`, ...; empty: the driver's default.
        #[prost(string, tag = "1")]
        pub fs_type: String,
        /// Mount options.
        #[prost(string, repeated, tag = "2")]
        pub mount_flags: Vec<String>,
        /// The pod's fsGroup when the driver applies it itself (`VOLUME_MOUNT_GROUP`).
        #[prost(string, tag = "3")]
        pub volume_mount_group: String,
    }

    /// The access type.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum AccessType {
        /// A block device.
        #[prost(message, tag = "1")]
        Block(BlockVolume),
        /// A filesystem.
        #[prost(message, tag = "2")]
        Mount(MountVolume),
    }

    /// The access mode.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AccessMode {
        /// An [`access_mode::Mode`].
        #[prost(enumeration = "access_mode::Mode", tag = "1")]
        pub mode: i32,
    }

    /// [`AccessMode`]'s values.
    pub mod access_mode {
        /// Who may use a volume at once.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
        #[repr(i32)]
        pub enum Mode {
            /// Not set.
            Unknown = 0,
            /// Read-write on one node (`ReadWriteOnce`).
            SingleNodeWriter = 1,
            /// Read-only on one node.
            SingleNodeReaderOnly = 2,
            /// Read-only on many nodes (`ReadOnlyMany`).
            MultiNodeReaderOnly = 3,
            /// One writer, many readers.
            MultiNodeSingleWriter = 4,
            /// Read-write on many nodes (`ReadWriteMany`).
            MultiNodeMultiWriter = 5,
            /// One writer on one node (`ReadWriteOncePod`).
            SingleNodeSingleWriter = 6,
            /// Many writers on one node.
            SingleNodeMultiWriter = 7,
        }
    }
}

/// Requested size bounds.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CapacityRange {
    /// At least this many bytes.
    #[prost(int64, tag = "1")]
    pub required_bytes: i64,
    /// At most this many bytes.
    #[prost(int64, tag = "2")]
    pub limit_bytes: i64,
}

/// Where a node or volume is (`{"topology.hostpath.csi/node": "n1"}`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Topology {
    /// Key → value.
    #[prost(btree_map = "string, string", tag = "1")]
    pub segments: BTreeMap<String, String>,
}

/// `NodeStageVolume`: make the volume available at the node's staging path.
#[derive(Clone, PartialEq, prost::Message)]
#[prost(skip_debug)]
pub struct NodeStageVolumeRequest {
    /// The volume's id (the PV's `volumeHandle`).
    #[prost(string, tag = "1")]
    pub volume_id: String,
    /// What ControllerPublish returned (the VolumeAttachment's `attachmentMetadata`).
    #[prost(btree_map = "string, string", tag = "2")]
    pub publish_context: BTreeMap<String, String>,
    /// The global mount dir.
    #[prost(string, tag = "3")]
    pub staging_target_path: String,
    /// How it will be used.
    #[prost(message, optional, tag = "4")]
    pub volume_capability: Option<VolumeCapability>,
    /// Secrets (never printed).
    #[prost(btree_map = "string, string", tag = "5")]
    pub secrets: BTreeMap<String, String>,
    /// The PV's `volumeAttributes`.
    #[prost(btree_map = "string, string", tag = "6")]
    pub volume_context: BTreeMap<String, String>,
}

/// `NodeStageVolume`'s empty answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeStageVolumeResponse {}

/// `NodeUnstageVolume`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnstageVolumeRequest {
    /// The volume's id.
    #[prost(string, tag = "1")]
    pub volume_id: String,
    /// The global mount dir.
    #[prost(string, tag = "2")]
    pub staging_target_path: String,
}

/// `NodeUnstageVolume`'s empty answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnstageVolumeResponse {}

/// `NodePublishVolume`: make the volume available at a pod's path.
#[derive(Clone, PartialEq, prost::Message)]
#[prost(skip_debug)]
pub struct NodePublishVolumeRequest {
    /// The volume's id.
    #[prost(string, tag = "1")]
    pub volume_id: String,
    /// What ControllerPublish returned.
    #[prost(btree_map = "string, string", tag = "2")]
    pub publish_context: BTreeMap<String, String>,
    /// The global mount dir, when the driver stages.
    #[prost(string, tag = "3")]
    pub staging_target_path: String,
    /// The pod's volume path.
    #[prost(string, tag = "4")]
    pub target_path: String,
    /// How it will be used.
    #[prost(message, optional, tag = "5")]
    pub volume_capability: Option<VolumeCapability>,
    /// Read-only.
    #[prost(bool, tag = "6")]
    pub readonly: bool,
    /// Secrets (never printed).
    #[prost(btree_map = "string, string", tag = "7")]
    pub secrets: BTreeMap<String, String>,
    /// The PV's `volumeAttributes`, plus the pod info the CSIDriver asks for.
    #[prost(btree_map = "string, string", tag = "8")]
    pub volume_context: BTreeMap<String, String>,
}

/// `NodePublishVolume`'s empty answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodePublishVolumeResponse {}

/// `NodeUnpublishVolume`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnpublishVolumeRequest {
    /// The volume's id.
    #[prost(string, tag = "1")]
    pub volume_id: String,
    /// The pod's volume path.
    #[prost(string, tag = "2")]
    pub target_path: String,
}

/// `NodeUnpublishVolume`'s empty answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnpublishVolumeResponse {}

/// `NodeGetVolumeStats`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeGetVolumeStatsRequest {
    /// The volume's id.
    #[prost(string, tag = "1")]
    pub volume_id: String,
    /// A path it is published at.
    #[prost(string, tag = "2")]
    pub volume_path: String,
    /// Its global mount dir, when staged.
    #[prost(string, tag = "3")]
    pub staging_target_path: String,
}

/// A volume's usage in one unit.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VolumeUsage {
    /// Free.
    #[prost(int64, tag = "1")]
    pub available: i64,
    /// In all.
    #[prost(int64, tag = "2")]
    pub total: i64,
    /// Used.
    #[prost(int64, tag = "3")]
    pub used: i64,
    /// A [`volume_usage::Unit`].
    #[prost(enumeration = "volume_usage::Unit", tag = "4")]
    pub unit: i32,
}

/// [`VolumeUsage`]'s units.
pub mod volume_usage {
    /// Bytes or inodes.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum Unit {
        /// Not set.
        Unknown = 0,
        /// Bytes.
        Bytes = 1,
        /// Inodes.
        Inodes = 2,
    }
}

/// Whether a volume is healthy (alpha in the spec).
#[derive(Clone, PartialEq, prost::Message)]
pub struct VolumeCondition {
    /// Something is wrong.
    #[prost(bool, tag = "1")]
    pub abnormal: bool,
    /// What.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// `NodeGetVolumeStats`'s answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeGetVolumeStatsResponse {
    /// Usage per unit.
    #[prost(message, repeated, tag = "1")]
    pub usage: Vec<VolumeUsage>,
    /// Health.
    #[prost(message, optional, tag = "2")]
    pub volume_condition: Option<VolumeCondition>,
}

/// `NodeExpandVolume`: grow the filesystem after the volume grew.
#[derive(Clone, PartialEq, prost::Message)]
#[prost(skip_debug)]
pub struct NodeExpandVolumeRequest {
    /// The volume's id.
    #[prost(string, tag = "1")]
    pub volume_id: String,
    /// A path it is published at.
    #[prost(string, tag = "2")]
    pub volume_path: String,
    /// The size wanted.
    #[prost(message, optional, tag = "3")]
    pub capacity_range: Option<CapacityRange>,
    /// Its global mount dir, when staged.
    #[prost(string, tag = "4")]
    pub staging_target_path: String,
    /// How it is used.
    #[prost(message, optional, tag = "5")]
    pub volume_capability: Option<VolumeCapability>,
    /// Secrets (never printed).
    #[prost(btree_map = "string, string", tag = "6")]
    pub secrets: BTreeMap<String, String>,
}

/// `NodeExpandVolume`'s answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeExpandVolumeResponse {
    /// The size now.
    #[prost(int64, tag = "1")]
    pub capacity_bytes: i64,
}

/// `NodeGetCapabilities`' empty request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeGetCapabilitiesRequest {}

/// `NodeGetCapabilities`' answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeGetCapabilitiesResponse {
    /// What the node service can do.
    #[prost(message, repeated, tag = "1")]
    pub capabilities: Vec<NodeServiceCapability>,
}

/// One node capability.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeServiceCapability {
    /// An RPC the service offers.
    #[prost(oneof = "node_service_capability::Type", tags = "1")]
    pub r#type: Option<node_service_capability::Type>,
}

/// [`NodeServiceCapability`]'s parts.
pub mod node_service_capability {
    /// An optional RPC.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Rpc {
        /// An [`rpc::Type`].
        #[prost(enumeration = "rpc::Type", tag = "1")]
        pub r#type: i32,
    }

    /// [`Rpc`]'s values.
    pub mod rpc {
        /// The optional node RPCs.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
        #[repr(i32)]
        pub enum Type {
            /// Not set.
            Unknown = 0,
            /// `NodeStageVolume`/`NodeUnstageVolume`.
            StageUnstageVolume = 1,
            /// `NodeGetVolumeStats`.
            GetVolumeStats = 2,
            /// `NodeExpandVolume`.
            ExpandVolume = 3,
            /// Volume health in stats.
            VolumeCondition = 4,
            /// `SINGLE_NODE_{SINGLE,MULTI}_WRITER` access modes.
            SingleNodeMultiWriter = 5,
            /// The driver applies fsGroup itself.
            VolumeMountGroup = 6,
        }
    }

    /// The capability.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Type {
        /// An RPC.
        #[prost(message, tag = "1")]
        Rpc(Rpc),
    }
}

/// `NodeGetInfo`'s empty request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeGetInfoRequest {}

/// Who the node is to the driver.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeGetInfoResponse {
    /// The driver's id for this node.
    #[prost(string, tag = "1")]
    pub node_id: String,
    /// How many of its volumes the node can have; 0: no limit.
    #[prost(int64, tag = "2")]
    pub max_volumes_per_node: i64,
    /// Where the node is.
    #[prost(message, optional, tag = "3")]
    pub accessible_topology: Option<Topology>,
}

/// A Debug of a secrets-bearing request: its fields, with the secrets' keys only.
macro_rules! redacted_debug {
    ($ty:ident { $($field:ident),* }) => {
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    $(.field(stringify!($field), &self.$field))*
                    .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
                    .finish()
            }
        }
    };
}

redacted_debug!(NodeStageVolumeRequest {
    volume_id,
    publish_context,
    staging_target_path,
    volume_capability,
    volume_context
});
redacted_debug!(NodePublishVolumeRequest {
    volume_id,
    publish_context,
    staging_target_path,
    target_path,
    volume_capability,
    readonly,
    volume_context
});
redacted_debug!(NodeExpandVolumeRequest {
    volume_id,
    volume_path,
    capacity_range,
    staging_target_path,
    volume_capability
});

/// A client of a driver's Node service.
#[derive(Clone, Debug)]
pub struct NodeClient {
    inner: tonic::client::Grpc<Channel>,
}

impl NodeClient {
    /// A client on an open channel ([`crate::transport::connect`]).
    pub fn new(channel: Channel) -> Self {
        Self {
            inner: tonic::client::Grpc::new(channel),
        }
    }

    /// `NodeStageVolume`.
    pub async fn node_stage_volume(
        &mut self,
        r: NodeStageVolumeRequest,
    ) -> Result<NodeStageVolumeResponse, Status> {
        self.unary(NODE_STAGE, r).await
    }

    /// `NodeUnstageVolume`.
    pub async fn node_unstage_volume(
        &mut self,
        r: NodeUnstageVolumeRequest,
    ) -> Result<NodeUnstageVolumeResponse, Status> {
        self.unary(NODE_UNSTAGE, r).await
    }

    /// `NodePublishVolume`.
    pub async fn node_publish_volume(
        &mut self,
        r: NodePublishVolumeRequest,
    ) -> Result<NodePublishVolumeResponse, Status> {
        self.unary(NODE_PUBLISH, r).await
    }

    /// `NodeUnpublishVolume`.
    pub async fn node_unpublish_volume(
        &mut self,
        r: NodeUnpublishVolumeRequest,
    ) -> Result<NodeUnpublishVolumeResponse, Status> {
        self.unary(NODE_UNPUBLISH, r).await
    }

    /// `NodeGetVolumeStats`.
    pub async fn node_get_volume_stats(
        &mut self,
        r: NodeGetVolumeStatsRequest,
    ) -> Result<NodeGetVolumeStatsResponse, Status> {
        self.unary(NODE_GET_VOLUME_STATS, r).await
    }

    /// `NodeExpandVolume`.
    pub async fn node_expand_volume(
        &mut self,
        r: NodeExpandVolumeRequest,
    ) -> Result<NodeExpandVolumeResponse, Status> {
        self.unary(NODE_EXPAND, r).await
    }

    /// `NodeGetCapabilities`.
    pub async fn node_get_capabilities(&mut self) -> Result<NodeGetCapabilitiesResponse, Status> {
        self.unary(NODE_GET_CAPABILITIES, NodeGetCapabilitiesRequest {})
            .await
    }

    /// `NodeGetInfo`.
    pub async fn node_get_info(&mut self) -> Result<NodeGetInfoResponse, Status> {
        self.unary(NODE_GET_INFO, NodeGetInfoRequest {}).await
    }

    async fn unary<Q, A>(&mut self, path: &'static str, request: Q) -> Result<A, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        crate::unary::call(&mut self.inner, path, request, "CSI driver socket").await
    }
}

/// What a driver's Node service answers (the tests' CSI driver).
pub trait Node: Send + Sync + 'static {
    /// `NodeStageVolume`.
    fn node_stage_volume(&self, r: NodeStageVolumeRequest) -> Answer<NodeStageVolumeResponse>;
    /// `NodeUnstageVolume`.
    fn node_unstage_volume(&self, r: NodeUnstageVolumeRequest)
    -> Answer<NodeUnstageVolumeResponse>;
    /// `NodePublishVolume`.
    fn node_publish_volume(&self, r: NodePublishVolumeRequest)
    -> Answer<NodePublishVolumeResponse>;
    /// `NodeUnpublishVolume`.
    fn node_unpublish_volume(
        &self,
        r: NodeUnpublishVolumeRequest,
    ) -> Answer<NodeUnpublishVolumeResponse>;
    /// `NodeGetVolumeStats`.
    fn node_get_volume_stats(
        &self,
        r: NodeGetVolumeStatsRequest,
    ) -> Answer<NodeGetVolumeStatsResponse>;
    /// `NodeExpandVolume`.
    fn node_expand_volume(&self, r: NodeExpandVolumeRequest) -> Answer<NodeExpandVolumeResponse>;
    /// `NodeGetCapabilities`.
    fn node_get_capabilities(&self) -> Answer<NodeGetCapabilitiesResponse>;
    /// `NodeGetInfo`.
    fn node_get_info(&self) -> Answer<NodeGetInfoResponse>;
}

crate::unary::named_service!(
    NodeServer,
    Node,
    NODE_SERVICE,
    "[`Node`] as a tonic service, for `tonic::transport::Server::add_service`."
);

impl<T: Node> tower::Service<http::Request<tonic::body::Body>> for NodeServer<T> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move {
            let response = match req.uri().path() {
                NODE_STAGE => serve(inner, T::node_stage_volume, req).await,
                NODE_UNSTAGE => serve(inner, T::node_unstage_volume, req).await,
                NODE_PUBLISH => serve(inner, T::node_publish_volume, req).await,
                NODE_UNPUBLISH => serve(inner, T::node_unpublish_volume, req).await,
                NODE_GET_VOLUME_STATS => serve(inner, T::node_get_volume_stats, req).await,
                NODE_EXPAND => serve(inner, T::node_expand_volume, req).await,
                NODE_GET_CAPABILITIES => {
                    serve(
                        inner,
                        |n: &T, _: NodeGetCapabilitiesRequest| n.node_get_capabilities(),
                        req,
                    )
                    .await
                }
                NODE_GET_INFO => {
                    serve(inner, |n: &T, _: NodeGetInfoRequest| n.node_get_info(), req).await
                }
                other => Status::unimplemented(format!("unknown method {other}")).into_http(),
            };
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests;
