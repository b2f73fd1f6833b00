//! The seam through which pods' secrets, configMaps and service-account tokens reach the
//! kubelet (volumes and environment). In a cluster it is the object cache (`object_cache`,
//! Go's secret/configMap managers) and the token manager (`token`); standalone there is no
//! API server and every read fails as in a Go kubelet without a kube client ([`NoApi`]).
//! Consumers register the pods whose references they will read ([`ObjectSource::register_pod`])
//! so a watch-based source knows what to watch, and may subscribe to changes of referenced
//! objects ([`ObjectSource::changes`]) to refresh volumes without waiting for a resync.
//! Claims, persistent volumes and the node's labels come through [`StorageSource`]
//! (`storage_api` in a cluster).

use std::sync::Arc;

use futures::future::BoxFuture;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Secret};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use tokio::sync::broadcast;

use crate::types::Pod;

/// The kind of a watched object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// A core/v1 Secret.
    Secret,
    /// A core/v1 ConfigMap.
    ConfigMap,
}

/// A changed object: the pods referring to it may need their volumes refreshed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectChange {
    /// Secret or ConfigMap.
    pub kind: ObjectKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Why an object could not be read. A missing object is not an error (`Ok(None)`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// Standalone: there is no API server to ask.
    #[error("no kubeClient defined")]
    NoApiServer,
    /// The API server answered with an error or could not be reached (message as returned).
    #[error("{0}")]
    Api(String),
    /// The pod is not registered with the source (a programming error in the caller).
    #[error("object {namespace}/{name} not registered")]
    NotRegistered {
        /// The object's namespace.
        namespace: String,
        /// The object's name.
        name: String,
    },
}

/// Secrets and configMaps as the kubelet may read them.
pub trait ObjectSource: Send + Sync {
    /// Registers `pod`: the secrets and configMaps it refers to (volumes, projected sources,
    /// `env`/`envFrom`, imagePullSecrets) become readable and, with the Watch strategy,
    /// watched. Registering a pod again (a new spec) replaces its references.
    fn register_pod(&self, pod: &Pod);
    /// Forgets `pod`'s references; an object no registered pod refers to any more is dropped
    /// (its watch stopped).
    fn unregister_pod(&self, pod: &Pod);
    /// Secret `namespace/name`, `None` if the API has no such object.
    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<Secret>>, ObjectError>>;
    /// ConfigMap `namespace/name`, `None` if the API has no such object.
    fn config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<ConfigMap>>, ObjectError>>;
    /// Changes of registered objects (created, updated, deleted) as the source learns of
    /// them; a lagging receiver should treat every object as changed.
    fn changes(&self) -> broadcast::Receiver<ObjectChange>;
}

/// What a bound service-account token is asked for (a `serviceAccountToken` projection of a
/// pod's volume).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenRequestSpec {
    /// The pod's namespace.
    pub namespace: String,
    /// The service account (the pod's `serviceAccountName`, `default` when empty).
    pub service_account: String,
    /// The token's audience; empty means the API server's own.
    pub audience: Option<String>,
    /// Requested lifetime in seconds (the projection's `expirationSeconds`, default 3600).
    pub expiration_seconds: i64,
    /// The pod the token is bound to.
    pub pod_name: String,
    /// Its UID.
    pub pod_uid: String,
}

/// Bound service-account tokens (Go's token manager): cached and refreshed before they
/// expire.
pub trait TokenSource: Send + Sync {
    /// A token for `spec`, from the cache while it is fresh, else from the TokenRequest API.
    fn token<'a>(
        &'a self,
        spec: &'a TokenRequestSpec,
    ) -> BoxFuture<'a, Result<String, ObjectError>>;
    /// Drops the cached tokens of pod `uid` (deleted).
    fn forget_pod(&self, uid: &str);
}

/// What the volume manager reads of the API for persistent volumes, each read a GET as in
/// Go's populator (a claim's binding must be seen as it is now, not as a cache last saw it).
pub trait StorageSource: Send + Sync {
    /// Claim `namespace/name`, `None` if the API has no such object.
    fn claim<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PersistentVolumeClaim>, ObjectError>>;
    /// PersistentVolume `name`, `None` if the API has no such object.
    fn persistent_volume<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PersistentVolume>, ObjectError>>;
    /// This node's labels as the API has them (a local volume's node affinity is checked
    /// against them).
    fn node_labels(&self) -> BoxFuture<'_, Result<BTreeMap<String, String>, ObjectError>>;
    /// This node's `status.volumesInUse` and the names in `status.volumesAttached` as the API
    /// has them (Go's `VerifyControllerAttachedVolume` reads both).
    fn node_volumes(&self) -> BoxFuture<'_, Result<NodeVolumes, ObjectError>>;
    /// CSIDriver `name`, `None` if the API has none (its defaults apply).
    fn csi_driver<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<CSIDriver>, ObjectError>>;
    /// VolumeAttachment `name`, `None` if the API has none.
    fn volume_attachment<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<VolumeAttachment>, ObjectError>>;
    /// Patches claim `namespace/name`'s status (a JSON merge patch of `{"status": ...}`).
    fn patch_claim_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: serde_json::Value,
    ) -> BoxFuture<'a, Result<(), ObjectError>>;
    /// Secret `namespace/name` for a CSI call (`node*SecretRef`), `None` if there is none.
    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Secret>, ObjectError>>;
}

/// What the Node's status says of its volumes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeVolumes {
    /// `volumesInUse`: what this kubelet reported.
    pub in_use: Vec<String>,
    /// The names in `volumesAttached`: what the attach/detach controller attached.
    pub attached: Vec<String>,
}

/// Standalone: nothing to read; every read fails with [`ObjectError::NoApiServer`].
#[derive(Debug)]
pub struct NoApi {
    changes: broadcast::Sender<ObjectChange>,
}

impl Default for NoApi {
    fn default() -> Self {
        Self {
            changes: broadcast::channel(1).0,
        }
    }
}

impl ObjectSource for NoApi {
    fn register_pod(&self, _: &Pod) {}
    fn unregister_pod(&self, _: &Pod) {}
    fn secret<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<Secret>>, ObjectError>> {
        Box::pin(async { Err(ObjectError::NoApiServer) })
    }
    fn config_map<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<ConfigMap>>, ObjectError>> {
        Box::pin(async { Err(ObjectError::NoApiServer) })
    }
    fn changes(&self) -> broadcast::Receiver<ObjectChange> {
        self.changes.subscribe()
    }
}

impl StorageSource for NoApi {
    fn claim<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<PersistentVolumeClaim>, ObjectError>> {
        Box::pin(async { Err(ObjectError::NoApiServer) })
    }
    fn persistent_volume<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<PersistentVolume>, ObjectError>> {
        Box::pin(async { Err(ObjectError::NoApiServer) })
    }
    fn node_labels(&self) -> BoxFuture<'_, Result<BTreeMap<String, String>, ObjectError>> {
        Box::pin(async { Err(ObjectError::NoApiServer) })
    }
    fn csi_driver<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<CSIDriver>, ObjectError>> {
        Box::pin(async { Err(ObjectError::NoApiServer) })
    }
    fn node_volumes(&self) -> BoxFuture<'_, Result<NodeVolumes, ObjectError>> {
        Box::pin(async { Err(ObjectError::NoApiServer) })
    }
    fn volume_attachment<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<VolumeAttachment>, ObjectError>> {
        Box::pin(async { Err(ObjectError::NoApiServer) })
    }
    fn secret<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<Secret>, ObjectError>> {
        Box::pin(async { Err(ObjectError::NoApiServer) })
    }
    fn patch_claim_status<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: serde_json::Value,
    ) -> BoxFuture<'a, Result<(), ObjectError>> {
        Box::pin(async { Err(ObjectError::NoApiServer) })
    }
}

impl TokenSource for NoApi {
    fn token<'a>(&'a self, _: &'a TokenRequestSpec) -> BoxFuture<'a, Result<String, ObjectError>> {
        Box::pin(async { Err(ObjectError::NoApiServer) })
    }
    fn forget_pod(&self, _: &str) {}
}
