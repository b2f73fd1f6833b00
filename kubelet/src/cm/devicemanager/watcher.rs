//! Device plugins that register through the plugin watcher (`<root-dir>/plugins_registry`,
//! type `DevicePlugin`) instead of the kubelet's socket, as Go 1.28's device manager also
//! takes them (its server's `ValidatePlugin`/`RegisterPlugin`/`DeRegisterPlugin`): the plugin's
//! name is its resource, its endpoint its socket; when the socket goes, the plugin is gone.

use std::path::Path;
use std::sync::Arc;

use ferrolet_proto::deviceplugin::VERSION;
use futures::future::BoxFuture;

use super::registration::is_extended_resource_name;
use super::{DeviceManager, endpoint};
use crate::plugin_manager::PluginHandler;

/// The device manager as a plugin watcher handler.
pub struct WatcherHandler {
    manager: Arc<DeviceManager>,
}

impl WatcherHandler {
    /// A handler registering plugins with `manager`.
    pub fn new(manager: Arc<DeviceManager>) -> Self {
        Self { manager }
    }
}

impl PluginHandler for WatcherHandler {
    fn validate(&self, name: &str, endpoint: &str, versions: &[String]) -> Result<(), String> {
        tracing::info!(
            plugin = name,
            endpoint,
            ?versions,
            "device plugin found by the plugin watcher"
        );
        if !versions.iter().any(|v| v == VERSION) {
            return Err(format!(
                "manager version, {VERSION}, is not compatible with plugin version {versions:?}"
            ));
        }
        if !is_extended_resource_name(name) {
            return Err(format!(
                "invalid name of device plugin socket: the ResourceName {name:?} is invalid"
            ));
        }
        Ok(())
    }

    fn register<'a>(
        &'a self,
        name: &'a str,
        endpoint: &'a str,
        _versions: &'a [String],
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            crate::metrics::device_plugin_registration(name);
            endpoint::connect(&self.manager, name, Path::new(endpoint))
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn deregister<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move { self.manager.plugin_gone(name).await })
    }
}
