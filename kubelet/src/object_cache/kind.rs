//! What the cache needs to know of each kind it serves: its [`ObjectKind`], its name in
//! messages (Go's group resource) and whether an object is immutable.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde::de::DeserializeOwned;

use crate::objects::ObjectKind;

/// A kind the object cache serves: Secret or ConfigMap.
pub trait CachedKind:
    kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The kind, as change notices name it.
    const KIND: ObjectKind;
    /// The singular resource name Go's messages use (`secret`, `configmap`).
    const RESOURCE: &'static str;
    /// Whether the object may never change (`immutable: true`), so needs no watch.
    fn is_immutable(&self) -> bool;
}

impl CachedKind for Secret {
    const KIND: ObjectKind = ObjectKind::Secret;
    const RESOURCE: &'static str = "secret";
    fn is_immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

impl CachedKind for ConfigMap {
    const KIND: ObjectKind = ObjectKind::ConfigMap;
    const RESOURCE: &'static str = "configmap";
    fn is_immutable(&self) -> bool {
        self.immutable == Some(true)
    }
}

/// The object's resourceVersion, to tell a change from a re-delivery.
pub fn resource_version<K: CachedKind>(object: &K) -> Option<&str> {
    object.meta().resource_version.as_deref()
}
