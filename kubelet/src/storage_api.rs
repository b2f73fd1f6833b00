//! The cluster's [`StorageSource`]: claims, persistent volumes and this node's labels, one GET
//! per read as Go's populator and volume host do (binding changes under a pod that waits for
//! it; a cache would answer with what it saw before).

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Secret};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};

use crate::kube_client::ApiHandle;
use crate::objects::{NodeVolumes, ObjectError, StorageSource};

/// Storage objects read from the API server.
#[derive(Clone, Debug)]
pub struct ApiStorage {
    api: ApiHandle,
}

impl ApiStorage {
    /// Reads through `api`.
    pub fn new(api: ApiHandle) -> Self {
        Self { api }
    }
}

fn api_error(e: kube::Error) -> ObjectError {
    ObjectError::Api(e.to_string())
}

impl StorageSource for ApiStorage {
    fn claim<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PersistentVolumeClaim>, ObjectError>> {
        Box::pin(async move {
            kube::Api::<PersistentVolumeClaim>::namespaced(self.api.client(), namespace)
                .get_opt(name)
                .await
                .map_err(api_error)
        })
    }

    fn persistent_volume<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PersistentVolume>, ObjectError>> {
        Box::pin(async move {
            kube::Api::<PersistentVolume>::all(self.api.client())
                .get_opt(name)
                .await
                .map_err(api_error)
        })
    }

    fn csi_driver<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<CSIDriver>, ObjectError>> {
        Box::pin(async move {
            kube::Api::<CSIDriver>::all(self.api.client())
                .get_opt(name)
                .await
                .map_err(api_error)
        })
    }

    fn volume_attachment<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<VolumeAttachment>, ObjectError>> {
        Box::pin(async move {
            kube::Api::<VolumeAttachment>::all(self.api.client())
                .get_opt(name)
                .await
                .map_err(api_error)
        })
    }

    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Secret>, ObjectError>> {
        Box::pin(async move {
            kube::Api::<Secret>::namespaced(self.api.client(), namespace)
                .get_opt(name)
                .await
                .map_err(api_error)
        })
    }

    fn patch_claim_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: serde_json::Value,
    ) -> BoxFuture<'a, Result<(), ObjectError>> {
        Box::pin(async move {
            kube::Api::<PersistentVolumeClaim>::namespaced(self.api.client(), namespace)
                .patch_status(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .map(drop)
                .map_err(api_error)
        })
    }

    fn node_volumes(&self) -> BoxFuture<'_, Result<NodeVolumes, ObjectError>> {
        Box::pin(async move {
            let node = kube::Api::<Node>::all(self.api.client())
                .get_opt(self.api.node_name())
                .await
                .map_err(api_error)?;
            let status = node.and_then(|n| n.status).unwrap_or_default();
            Ok(NodeVolumes {
                in_use: status.volumes_in_use.unwrap_or_default(),
                attached: status
                    .volumes_attached
                    .unwrap_or_default()
                    .into_iter()
                    .map(|v| v.name)
                    .collect(),
            })
        })
    }

    fn node_labels(&self) -> BoxFuture<'_, Result<BTreeMap<String, String>, ObjectError>> {
        Box::pin(async move {
            let node = kube::Api::<Node>::all(self.api.client())
                .get_opt(self.api.node_name())
                .await
                .map_err(api_error)?;
            let Some(node) = node else {
                return Err(ObjectError::Api(format!(
                    "nodes {:?} not found",
                    self.api.node_name()
                )));
            };
            Ok(node.metadata.labels.unwrap_or_default())
        })
    }
}
