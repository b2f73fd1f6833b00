//! Calls to a registered driver's Node service (Go's `csiDriverClient`): the endpoint comes
//! from the driver store, each call has Go's `csiTimeout`, and failures read as Go's
//! (`rpc error: code = NotFound desc = ...`).

use std::time::Duration;

use ferrolet_proto::csi::node_service_capability::{self, rpc};
use ferrolet_proto::csi::{
    NodeClient, NodePublishVolumeRequest, NodeStageVolumeRequest, NodeUnpublishVolumeRequest,
    NodeUnstageVolumeRequest,
};
use tonic::Status;

use super::registration::Drivers;

/// How long one call to a driver may take (Go's `csiTimeout`).
pub const CSI_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a call to a driver failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CsiError {
    /// The driver is not registered (yet, or any more): transient, as Go treats it.
    #[error("driver name {0} not found in the list of registered CSI drivers")]
    NotRegistered(String),
    /// Its socket could not be reached.
    #[error("failed to connect to {endpoint}: {reason}")]
    Connect {
        /// The driver's endpoint.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// The driver answered with an error.
    #[error("rpc error: code = {code:?} desc = {message}")]
    Rpc {
        /// The gRPC code.
        code: tonic::Code,
        /// The driver's message.
        message: String,
    },
    /// The call took longer than [`CSI_TIMEOUT`].
    #[error("rpc error: code = DeadlineExceeded desc = context deadline exceeded")]
    Timeout,
}

impl From<Status> for CsiError {
    fn from(s: Status) -> Self {
        CsiError::Rpc {
            code: s.code(),
            message: s.message().to_string(),
        }
    }
}

/// What a driver's Node service can do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `STAGE_UNSTAGE_VOLUME`: volumes are staged at a global mount first.
    pub stage_unstage: bool,
    /// `GET_VOLUME_STATS`.
    pub volume_stats: bool,
    /// `EXPAND_VOLUME`.
    pub expand: bool,
    /// `SINGLE_NODE_MULTI_WRITER`: the finer access modes.
    pub single_node_multi_writer: bool,
    /// `VOLUME_MOUNT_GROUP`: the driver applies the fsGroup itself.
    pub volume_mount_group: bool,
}

/// A client of one driver.
#[derive(Clone)]
pub struct CsiClient {
    client: NodeClient,
}

impl CsiClient {
    /// Connects to driver `name` as registered in `drivers`.
    pub async fn connect(drivers: &Drivers, name: &str) -> Result<Self, CsiError> {
        let driver = drivers
            .get(name)
            .ok_or_else(|| CsiError::NotRegistered(name.to_string()))?;
        let target = if driver.endpoint.starts_with('/') {
            format!("unix://{}", driver.endpoint)
        } else {
            driver.endpoint.clone()
        };
        let channel =
            tokio::time::timeout(CSI_TIMEOUT, ferrolet_proto::transport::connect(&target))
                .await
                .map_err(|_| CsiError::Timeout)?
                .map_err(|e| CsiError::Connect {
                    endpoint: driver.endpoint.clone(),
                    reason: e.to_string(),
                })?;
        Ok(Self {
            client: NodeClient::new(channel),
        })
    }

    /// `NodeGetCapabilities`.
    pub async fn capabilities(&self) -> Result<Capabilities, CsiError> {
        let mut c = self.client.clone();
        let got = timed(async move { c.node_get_capabilities().await }).await?;
        let mut out = Capabilities::default();
        for cap in got.capabilities {
            let Some(node_service_capability::Type::Rpc(r)) = cap.r#type else {
                continue;
            };
            match rpc::Type::try_from(r.r#type) {
                Ok(rpc::Type::StageUnstageVolume) => out.stage_unstage = true,
                Ok(rpc::Type::GetVolumeStats) => out.volume_stats = true,
                Ok(rpc::Type::ExpandVolume) => out.expand = true,
                Ok(rpc::Type::SingleNodeMultiWriter) => out.single_node_multi_writer = true,
                Ok(rpc::Type::VolumeMountGroup) => out.volume_mount_group = true,
                _ => {}
            }
        }
        Ok(out)
    }

    /// `NodeStageVolume`.
    pub async fn stage(&self, req: NodeStageVolumeRequest) -> Result<(), CsiError> {
        let mut c = self.client.clone();
        timed(async move { c.node_stage_volume(req).await })
            .await
            .map(drop)
    }

    /// `NodeUnstageVolume`.
    pub async fn unstage(&self, volume_id: &str, staging_path: &str) -> Result<(), CsiError> {
        let mut c = self.client.clone();
        let req = NodeUnstageVolumeRequest {
            volume_id: volume_id.into(),
            staging_target_path: staging_path.into(),
        };
        timed(async move { c.node_unstage_volume(req).await })
            .await
            .map(drop)
    }

    /// `NodePublishVolume`.
    pub async fn publish(&self, req: NodePublishVolumeRequest) -> Result<(), CsiError> {
        let mut c = self.client.clone();
        timed(async move { c.node_publish_volume(req).await })
            .await
            .map(drop)
    }

    /// `NodeExpandVolume`.
    pub async fn expand(
        &self,
        req: ferrolet_proto::csi::NodeExpandVolumeRequest,
    ) -> Result<(), CsiError> {
        let mut c = self.client.clone();
        timed(async move { c.node_expand_volume(req).await })
            .await
            .map(drop)
    }

    /// `NodeGetVolumeStats`.
    pub async fn volume_stats(
        &self,
        req: ferrolet_proto::csi::NodeGetVolumeStatsRequest,
    ) -> Result<ferrolet_proto::csi::NodeGetVolumeStatsResponse, CsiError> {
        let mut c = self.client.clone();
        timed(async move { c.node_get_volume_stats(req).await }).await
    }

    /// `NodeUnpublishVolume`.
    pub async fn unpublish(&self, volume_id: &str, target_path: &str) -> Result<(), CsiError> {
        let mut c = self.client.clone();
        let req = NodeUnpublishVolumeRequest {
            volume_id: volume_id.into(),
            target_path: target_path.into(),
        };
        timed(async move { c.node_unpublish_volume(req).await })
            .await
            .map(drop)
    }
}

async fn timed<T>(call: impl Future<Output = Result<T, Status>>) -> Result<T, CsiError> {
    match tokio::time::timeout(CSI_TIMEOUT, call).await {
        Ok(r) => r.map_err(CsiError::from),
        Err(_) => Err(CsiError::Timeout),
    }
}
