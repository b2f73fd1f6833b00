//! The plugin manager (Go's `pkg/kubelet/pluginmanager`): plugins announce themselves with a
//! socket in `<root-dir>/plugins_registry/` (or a directory below it) serving the
//! `pluginregistration.v1` `Registration` service; the manager asks each who it is
//! (`GetInfo`), hands it to the handler of its type (CSI drivers; DRA drivers later), which
//! validates and registers it, and tells the plugin the outcome (`NotifyRegistrationStatus`).
//! A socket that goes is de-registered; one made again (a restarted plugin) is
//! de-registered and registered anew.
//!
//! Go learns of sockets from fsnotify events and reconciles every second. Here each
//! reconcile rescans the directory: the same one-second latency, and no event queue that can
//! overflow and lose a socket. A socket is known by its inode and change time, so one
//! replaced between two scans still counts as new.
//!
//! Failures follow Go: a socket that cannot be dialled or asked, of an unknown type, or
//! whose handler refuses it in validation, is tried again after a back-off (500 ms doubling
//! to 2 min 2 s); one whose handler accepted it in validation but failed to register it is
//! kept as registered (Go adds it to the actual state first) until its socket changes.

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrolet_proto::pluginregistration::{RegistrationClient, RegistrationStatus};
use futures::future::BoxFuture;

use crate::backoff::Backoff;

/// How often the registry directory is reconciled (Go's reconciler loop period).
pub const RECONCILE_PERIOD: Duration = Duration::from_secs(1);
/// Dialling a plugin's socket (Go's `dialTimeoutDuration`).
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// `GetInfo` (Go: one second).
const GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);
/// `NotifyRegistrationStatus` (Go's `notifyTimeoutDuration`).
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// What a kind of plugin's consumer does with registrations (Go's `PluginHandler`).
pub trait PluginHandler: Send + Sync {
    /// Whether a plugin of this name, endpoint and versions may register.
    fn validate(&self, name: &str, endpoint: &str, versions: &[String]) -> Result<(), String>;
    /// Registers it (a CSI driver: its node info into the API).
    fn register<'a>(
        &'a self,
        name: &'a str,
        endpoint: &'a str,
        versions: &'a [String],
    ) -> BoxFuture<'a, Result<(), String>>;
    /// Forgets it: its socket is gone.
    fn deregister<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()>;
}

/// A socket file as one incarnation: replaced, it is another plugin start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SocketId {
    dev: u64,
    ino: u64,
    ctime: i64,
    ctime_nsec: i64,
}

/// A registered plugin (Go's actual state of the world).
#[derive(Clone, Debug)]
struct Registered {
    id: SocketId,
    plugin_type: String,
    name: String,
}

/// The plugin manager; [`PluginManager::spawn`] runs it.
pub struct PluginManager {
    dir: PathBuf,
    handlers: BTreeMap<String, Arc<dyn PluginHandler>>,
    registered: Mutex<BTreeMap<PathBuf, Registered>>,
    retries: Backoff,
}

impl PluginManager {
    /// A manager of `dir` (`<root-dir>/plugins_registry`) with a handler per plugin type
    /// (`CSIPlugin`, ...).
    pub fn new(dir: PathBuf, handlers: BTreeMap<String, Arc<dyn PluginHandler>>) -> Self {
        Self {
            dir,
            handlers,
            registered: Mutex::new(BTreeMap::new()),
            retries: Backoff::new(
                Duration::from_millis(500),
                Duration::from_secs(122),
                Duration::from_secs(244),
            ),
        }
    }

    /// Makes the directory (0750, as Go's plugin dirs) and reconciles it every
    /// [`RECONCILE_PERIOD`] until the task is dropped.
    pub fn spawn(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let dir = self.dir.clone();
            let made = tokio::task::spawn_blocking(move || {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o750)
                    .create(&dir)
            })
            .await;
            match made {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!(dir = %self.dir.display(), error = %e, "making the plugin registry dir")
                }
                Err(e) => tracing::error!(error = %e, "making the plugin registry dir"),
            }
            tracing::info!(dir = %self.dir.display(), "plugin manager: watching for plugin sockets");
            let mut tick = tokio::time::interval(RECONCILE_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                self.reconcile().await;
            }
        })
    }

    /// The registered plugins as `(type, name)`, by socket.
    #[cfg(test)]
    pub fn registered(&self) -> BTreeMap<PathBuf, (String, String)> {
        self.state()
            .iter()
            .map(|(p, r)| (p.clone(), (r.plugin_type.clone(), r.name.clone())))
            .collect()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, BTreeMap<PathBuf, Registered>> {
        self.registered.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One pass: de-register what went or changed, register what is new.
    pub async fn reconcile(&self) {
        let dir = self.dir.clone();
        let sockets = tokio::task::spawn_blocking(move || scan(&dir))
            .await
            .unwrap_or_default();
        let gone: Vec<(PathBuf, Registered)> = self
            .state()
            .iter()
            .filter(|(path, r)| sockets.get(*path) != Some(&r.id))
            .map(|(p, r)| (p.clone(), r.clone()))
            .collect();
        for (path, plugin) in gone {
            self.state().remove(&path);
            if let Some(handler) = self.handlers.get(&plugin.plugin_type) {
                handler.deregister(&plugin.name).await;
            }
            tracing::info!(
                socket = %path.display(),
                plugin = %plugin.name,
                r#type = %plugin.plugin_type,
                "plugin de-registered"
            );
        }
        let now = Instant::now();
        for (path, id) in sockets {
            let key = path.display().to_string();
            if self.state().contains_key(&path) || self.retries.in_backoff(&key, now).is_some() {
                continue;
            }
            match self.register(&path, id).await {
                Ok(()) => self.retries.reset(&key),
                Err(e) => {
                    self.retries.next(&key, Instant::now());
                    tracing::warn!(socket = %path.display(), error = %e, "plugin registration failed");
                }
            }
        }
        self.retries.gc(Instant::now());
    }

    /// Go's `GenerateRegisterPluginFunc`, with its messages.
    async fn register(&self, socket: &Path, id: SocketId) -> Result<(), String> {
        let shown = socket.display();
        let endpoint = format!("unix://{shown}");
        let channel = tokio::time::timeout(DIAL_TIMEOUT, ferrolet_proto::transport::connect(&endpoint))
            .await
            .map_err(|_| "timed out".to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
            .map_err(|e| {
                format!("RegisterPlugin error -- dial failed at socket {shown}, err: failed to dial socket {shown}, err: {e}")
            })?;
        let mut client = RegistrationClient::new(channel);
        let info = tokio::time::timeout(GET_INFO_TIMEOUT, client.get_info())
            .await
            .map_err(|_| "context deadline exceeded".to_string())
            .and_then(|r| r.map_err(|s| s.message().to_string()))
            .map_err(|e| {
                format!("RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {shown}, err: {e}")
            })?;
        let Some(handler) = self.handlers.get(&info.r#type) else {
            let reason = format!(
                "RegisterPlugin error -- no handler registered for plugin type: {} at socket {shown}",
                info.r#type
            );
            return Err(notify(&mut client, false, &reason)
                .await
                .err()
                .unwrap_or(reason));
        };
        let endpoint = if info.endpoint.is_empty() {
            shown.to_string()
        } else {
            info.endpoint.clone()
        };
        if let Err(e) = handler.validate(&info.name, &endpoint, &info.supported_versions) {
            let reason = format!("RegisterPlugin error -- plugin validation failed with err: {e}");
            notify(&mut client, false, &reason).await?;
            return Err("RegisterPlugin error -- pluginHandler.ValidatePluginFunc failed".into());
        }
        // Into the actual state before the handler runs, as Go: a socket removed meanwhile is
        // then de-registered by the next pass.
        self.state().insert(
            socket.to_path_buf(),
            Registered {
                id,
                plugin_type: info.r#type.clone(),
                name: info.name.clone(),
            },
        );
        if let Err(e) = handler
            .register(&info.name, &endpoint, &info.supported_versions)
            .await
        {
            let reason =
                format!("RegisterPlugin error -- plugin registration failed with err: {e}");
            // Kept as registered, as Go keeps it: retried only once its socket changes.
            return notify(&mut client, false, &reason).await;
        }
        notify(&mut client, true, "").await?;
        tracing::info!(
            socket = %shown,
            plugin = %info.name,
            r#type = %info.r#type,
            endpoint = %endpoint,
            versions = ?info.supported_versions,
            "plugin registered"
        );
        Ok(())
    }
}

/// Go's `notifyPlugin`: tells the plugin, then fails with `reason` when there is one.
async fn notify(
    client: &mut RegistrationClient,
    registered: bool,
    reason: &str,
) -> Result<(), String> {
    let status = RegistrationStatus {
        plugin_registered: registered,
        error: reason.to_string(),
    };
    let sent = tokio::time::timeout(NOTIFY_TIMEOUT, client.notify_registration_status(status))
        .await
        .map_err(|_| "context deadline exceeded".to_string())
        .and_then(|r| r.map_err(|s| s.message().to_string()));
    match sent {
        Err(e) if reason.is_empty() => Err(format!(": {e}")),
        Err(e) => Err(format!("{reason}: {e}")),
        Ok(_) if reason.is_empty() => Ok(()),
        Ok(_) => Err(reason.to_string()),
    }
}

/// The sockets under `dir`, in it and in its subdirectories, except names starting with a
/// dot (Go ignores them).
fn scan(dir: &Path) -> BTreeMap<PathBuf, SocketId> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.file_type().is_socket() {
                found.insert(
                    entry.path(),
                    SocketId {
                        dev: meta.dev(),
                        ino: meta.ino(),
                        ctime: meta.ctime(),
                        ctime_nsec: meta.ctime_nsec(),
                    },
                );
            }
        }
    }
    found
}

#[cfg(test)]
mod tests;
