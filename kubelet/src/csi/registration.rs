//! CSI drivers registering through the plugin manager (Go's `csi.RegistrationHandler` and
//! its driver store): a driver's versions are checked (1.x; a second driver of the same name
//! only with a higher one), its node identity is asked (`NodeGetInfo`) and handed to
//! [`NodeInfo`] (the node's `CSINode` entry and annotation), and its endpoint is kept for the
//! volume plugin to call. Messages are Go's, with its `kubernetes.io/csi: ` prefix.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrolet_proto::csi::{NodeClient, NodeGetInfoResponse};
use futures::future::BoxFuture;

use super::version::{Version, highest_supported};
use crate::plugin_manager::PluginHandler;

/// How long registration calls to a driver may take (Go's `csiTimeout`).
const CSI_TIMEOUT: Duration = Duration::from_secs(120);

/// Go's `log()` for CSI messages.
fn log(message: impl std::fmt::Display) -> String {
    format!("kubernetes.io/csi: {message}")
}

/// A registered driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Driver {
    /// Its Node service's socket.
    pub endpoint: String,
    /// The highest CSI version it speaks.
    pub version: Version,
}

/// The registered drivers by name, shared with the volume plugin.
#[derive(Clone, Debug, Default)]
pub struct Drivers(Arc<Mutex<BTreeMap<String, Driver>>>);

impl Drivers {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Driver>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The driver registered as `name`.
    pub fn get(&self, name: &str) -> Option<Driver> {
        self.map().get(name).cloned()
    }

    /// The registered drivers' names.
    pub fn names(&self) -> Vec<String> {
        self.map().keys().cloned().collect()
    }

    fn set(&self, name: &str, driver: Driver) {
        self.map().insert(name.to_string(), driver);
    }

    fn remove(&self, name: &str) {
        self.map().remove(name);
    }
}

/// Where a registered driver's node identity goes (Go's `nodeinfomanager`): the node's
/// `CSINode` driver entry and its `csi.volume.kubernetes.io/nodeid` annotation.
pub trait NodeInfo: Send + Sync {
    /// Records `driver` with what its `NodeGetInfo` said.
    fn install<'a>(
        &'a self,
        driver: &'a str,
        info: &'a NodeGetInfoResponse,
    ) -> BoxFuture<'a, Result<(), String>>;
    /// Removes `driver`'s entry.
    fn uninstall<'a>(&'a self, driver: &'a str) -> BoxFuture<'a, Result<(), String>>;
}

/// The plugin manager's handler of `CSIPlugin` registrations.
pub struct CsiRegistration {
    drivers: Drivers,
    node_info: Arc<dyn NodeInfo>,
}

impl CsiRegistration {
    /// A handler filling `drivers` and telling `node_info`.
    pub fn new(drivers: Drivers, node_info: Arc<dyn NodeInfo>) -> Self {
        Self { drivers, node_info }
    }

    /// Go's `validateVersions`.
    fn validate_versions(
        &self,
        caller: &str,
        name: &str,
        versions: &[String],
    ) -> Result<Version, String> {
        if versions.is_empty() {
            return Err(log(format!(
                "{caller} for CSI driver {name:?} failed. Plugin returned an empty list for \
                 supported versions"
            )));
        }
        let highest = highest_supported(versions).map_err(|e| {
            let quoted: Vec<String> = versions.iter().map(|v| format!("{v:?}")).collect();
            log(format!(
                "{caller} for CSI driver {name:?} failed. None of the versions specified [{}] \
                 are supported. err={e}",
                quoted.join(" ")
            ))
        })?;
        if let Some(existing) = self.drivers.get(name)
            && existing.version >= highest
        {
            return Err(log(format!(
                "{caller} for CSI driver {name:?} failed. Another driver with the same name is \
                 already registered with a higher supported version: \"{}\"",
                existing.version
            )));
        }
        Ok(highest)
    }

    /// Go's `unregisterDriver`.
    async fn unregister(&self, name: &str) -> Result<(), String> {
        self.drivers.remove(name);
        self.node_info
            .uninstall(name)
            .await
            .map_err(|e| log(format!("Error uninstalling CSI driver: {e}")))
    }

    async fn node_get_info(endpoint: &str) -> Result<NodeGetInfoResponse, String> {
        let target = if endpoint.starts_with('/') {
            format!("unix://{endpoint}")
        } else {
            endpoint.to_string()
        };
        let call = async {
            let channel = ferrolet_proto::transport::connect(&target)
                .await
                .map_err(|e| e.to_string())?;
            NodeClient::new(channel)
                .node_get_info()
                .await
                .map_err(|s| format!("rpc error: code = {:?} desc = {}", s.code(), s.message()))
        };
        tokio::time::timeout(CSI_TIMEOUT, call)
            .await
            .map_err(|_| "context deadline exceeded".to_string())?
    }
}

impl PluginHandler for CsiRegistration {
    fn validate(&self, name: &str, _endpoint: &str, versions: &[String]) -> Result<(), String> {
        self.validate_versions("ValidatePlugin", name, versions)
            .map(|_| ())
    }

    fn register<'a>(
        &'a self,
        name: &'a str,
        endpoint: &'a str,
        versions: &'a [String],
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            tracing::info!(
                driver = name,
                endpoint,
                "Register new plugin with name: {name} at endpoint: {endpoint}"
            );
            let version = self.validate_versions("RegisterPlugin", name, versions)?;
            self.drivers.set(
                name,
                Driver {
                    endpoint: endpoint.to_string(),
                    version,
                },
            );
            let outcome = match Self::node_get_info(endpoint).await {
                Ok(info) => self.node_info.install(name, &info).await,
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                if let Err(u) = self.unregister(name).await {
                    tracing::error!(
                        driver = name,
                        "{}",
                        log(format!(
                            "registrationHandler.RegisterPlugin failed to unregister plugin due \
                             to previous error: {u}"
                        ))
                    );
                }
                return Err(e);
            }
            Ok(())
        })
    }

    fn deregister<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            tracing::info!(
                driver = name,
                "{}",
                log(format!(
                    "registrationHandler.DeRegisterPlugin request for plugin {name}"
                ))
            );
            if let Err(e) = self.unregister(name).await {
                tracing::error!(
                    driver = name,
                    "{}",
                    log(format!("registrationHandler.DeRegisterPlugin failed: {e}"))
                );
            }
        })
    }
}

#[cfg(test)]
mod tests;
