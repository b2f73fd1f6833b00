//! A device plugin for the tests (issue #37): the `v1beta1.DevicePlugin` service on a socket of
//! its own in the kubelet's device plugin directory, registered with the kubelet's
//! `kubelet.sock` there, as a vendor's plugin is. It does what Go's plugins do: it registers
//! once the kubelet's socket exists, and when that socket is replaced (a restarted kubelet,
//! which removes every socket in the directory at its start) it serves on a fresh socket of its
//! own and registers again. It notices a replaced socket by polling its identity (device,
//! inode, change time) every 100 ms, the poll standing in for Go's fsnotify watch.
//!
//! Its devices (with their NUMA nodes), their health, its options and what `Allocate` answers
//! are the test's ([`PluginBuilder`]); a test changes a device's health while it runs (a
//! `ListAndWatch` update to every stream) and stops it as a killed plugin goes (its streams
//! end, its socket goes). Every call is recorded ([`Calls`]) for the test to check what the
//! kubelet asked. [`observe`] reads what the kubelet shows of its devices in return.

pub mod observe;
mod service;
#[cfg(test)]
mod tests;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ferrolet_proto::deviceplugin::{
    ContainerAllocateResponse, ContainerPreferredAllocationRequest, DEVICE_PLUGIN_DIR, Device,
    DevicePluginOptions, HEALTHY, KUBELET_SOCKET, NumaNode, PreferredAllocationRequest,
    RegisterRequest, RegistrationClient, TopologyInfo, UNHEALTHY, VERSION,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use service::Generation;

/// How often the kubelet's socket is looked at.
const POLL: Duration = Duration::from_millis(100);
/// How long one registration may take: Go's kubelet dials the plugin back within `Register`,
/// for up to 10 s, before it answers.
const REGISTER_LIMIT: Duration = Duration::from_secs(15);
/// How long a failed registration waits before the next try.
const REGISTER_RETRY: Duration = Duration::from_secs(1);

/// What `Allocate` answers for one container, given the device ids the kubelet gave it.
pub type AllocateFn = Arc<dyn Fn(&[String]) -> ContainerAllocateResponse + Send + Sync>;
/// What `GetPreferredAllocation` answers for one container.
pub type PreferFn = Arc<dyn Fn(&ContainerPreferredAllocationRequest) -> Vec<String> + Send + Sync>;
/// Run in `PreStartContainer`, with the container's device ids, before it answers.
pub type PreStartFn = Arc<dyn Fn(&[String]) + Send + Sync>;

/// The device plugin directory under a kubelet's `--root-dir`.
pub fn plugin_dir(root_dir: &Path) -> PathBuf {
    root_dir.join(DEVICE_PLUGIN_DIR)
}

/// A device in `ListAndWatch`'s form: healthy, on the NUMA nodes `numa` (none: no topology).
pub fn device(id: &str, numa: &[i64]) -> Device {
    Device {
        id: id.to_string(),
        health: HEALTHY.to_string(),
        topology: (!numa.is_empty()).then(|| TopologyInfo {
            nodes: numa.iter().map(|&id| NumaNode { id }).collect(),
        }),
    }
}

/// Several containers' worth of answers as one: maps merged (a later key wins), lists
/// concatenated. How a per-device answer becomes a container's.
pub fn merged(
    parts: impl IntoIterator<Item = ContainerAllocateResponse>,
) -> ContainerAllocateResponse {
    let mut out = ContainerAllocateResponse::default();
    for part in parts {
        out.envs.extend(part.envs);
        out.mounts.extend(part.mounts);
        out.devices.extend(part.devices);
        out.annotations.extend(part.annotations);
        out.cdi_devices.extend(part.cdi_devices);
    }
    out
}

/// The environment variable the default `Allocate` answer sets: the container's device ids,
/// sorted, comma-separated.
pub const DEFAULT_ENV: &str = "TEST_DEVICE_IDS";

/// How a [`TestDevicePlugin`] is made.
#[derive(Clone)]
pub struct PluginBuilder {
    resource_name: String,
    socket_name: String,
    devices: Vec<Device>,
    options: DevicePluginOptions,
    allocate: AllocateFn,
    prefer: PreferFn,
    pre_start: Option<PreStartFn>,
}

impl PluginBuilder {
    /// A plugin of `resource_name` (`vendor.com/name`) with no devices, no options, its socket
    /// named after the resource, and the default answers: `Allocate` sets [`DEFAULT_ENV`];
    /// `GetPreferredAllocation` prefers the devices it must include, then the highest ids
    /// (the opposite of any natural order, so a test sees whether the kubelet followed it).
    pub fn new(resource_name: &str) -> Self {
        let socket_name = format!("{}.sock", resource_name.replace(['/', '.'], "-"));
        Self {
            resource_name: resource_name.to_string(),
            socket_name,
            devices: Vec::new(),
            options: DevicePluginOptions::default(),
            allocate: Arc::new(|ids: &[String]| {
                let mut sorted = ids.to_vec();
                sorted.sort();
                ContainerAllocateResponse {
                    envs: [(DEFAULT_ENV.to_string(), sorted.join(","))].into(),
                    ..Default::default()
                }
            }),
            prefer: Arc::new(highest_first),
            pre_start: None,
        }
    }

    /// Its socket's file name in the device plugin directory.
    pub fn socket_name(mut self, name: &str) -> Self {
        self.socket_name = name.to_string();
        self
    }

    /// Adds a healthy device without topology.
    pub fn device(self, id: &str) -> Self {
        self.device_on_numa(id, &[])
    }

    /// Adds healthy devices without topology.
    pub fn devices(mut self, ids: &[&str]) -> Self {
        self.devices.extend(ids.iter().map(|id| device(id, &[])));
        self
    }

    /// Adds a healthy device close to the NUMA nodes `numa`.
    pub fn device_on_numa(mut self, id: &str, numa: &[i64]) -> Self {
        self.devices.push(device(id, numa));
        self
    }

    /// `PreStartContainer` is to be called before each container with its devices starts.
    pub fn pre_start_required(mut self, required: bool) -> Self {
        self.options.pre_start_required = required;
        self
    }

    /// `GetPreferredAllocation` may be called.
    pub fn get_preferred_allocation_available(mut self, available: bool) -> Self {
        self.options.get_preferred_allocation_available = available;
        self
    }

    /// What `Allocate` answers for a container, from its device ids (in the order sent).
    pub fn allocate(
        mut self,
        f: impl Fn(&[String]) -> ContainerAllocateResponse + Send + Sync + 'static,
    ) -> Self {
        self.allocate = Arc::new(f);
        self
    }

    /// What `Allocate` answers per device; a container's answer is its devices' [`merged`].
    pub fn allocate_per_device(
        self,
        f: impl Fn(&str) -> ContainerAllocateResponse + Send + Sync + 'static,
    ) -> Self {
        self.allocate(move |ids: &[String]| merged(ids.iter().map(|id| f(id))))
    }

    /// What `GetPreferredAllocation` answers for a container.
    pub fn prefer(
        mut self,
        f: impl Fn(&ContainerPreferredAllocationRequest) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.prefer = Arc::new(f);
        self
    }

    /// Runs `f` with the container's device ids in each `PreStartContainer`, before it
    /// answers (e.g. to leave a mark the container can look for when it starts).
    pub fn on_pre_start(mut self, f: impl Fn(&[String]) + Send + Sync + 'static) -> Self {
        self.pre_start = Some(Arc::new(f));
        self
    }

    /// Starts serving in the device plugin directory `dir` and registering with the kubelet
    /// there, now or once its socket appears. Must run inside a tokio runtime.
    pub fn start(self, dir: &Path) -> std::io::Result<TestDevicePlugin> {
        std::fs::create_dir_all(dir)?;
        let (devices, _) = watch::channel(self.devices);
        let shared = Arc::new(Shared {
            resource_name: self.resource_name,
            options: self.options,
            devices,
            allocate: self.allocate,
            prefer: self.prefer,
            pre_start: self.pre_start,
            calls: Mutex::default(),
        });
        let socket = dir.join(&self.socket_name);
        let serving = Arc::new(tokio::sync::Mutex::new(Some(Generation::serve(
            shared.clone(),
            &socket,
        )?)));
        let watcher = tokio::spawn(keep_registered(
            shared.clone(),
            dir.to_path_buf(),
            self.socket_name,
            serving.clone(),
        ));
        Ok(TestDevicePlugin {
            shared,
            socket,
            serving,
            watcher: Mutex::new(Some(watcher)),
        })
    }
}

/// The default preference: what must be included, then the other available devices, highest
/// id first, as many as asked for.
fn highest_first(r: &ContainerPreferredAllocationRequest) -> Vec<String> {
    let mut rest: Vec<&String> = r
        .available_device_ids
        .iter()
        .filter(|id| !r.must_include_device_ids.contains(id))
        .collect();
    rest.sort_by(|a, b| b.cmp(a));
    let size = usize::try_from(r.allocation_size).unwrap_or(0);
    r.must_include_device_ids
        .iter()
        .chain(rest)
        .take(size)
        .cloned()
        .collect()
}

/// Every call the plugin received, and its registrations.
#[derive(Clone, Debug, Default)]
pub struct Calls {
    /// `GetDevicePluginOptions` calls.
    pub options: usize,
    /// `ListAndWatch` calls.
    pub list_and_watch: usize,
    /// `Allocate` calls: per call, each container's device ids as sent.
    pub allocate: Vec<Vec<Vec<String>>>,
    /// `PreStartContainer` calls: the device ids of each.
    pub pre_start: Vec<Vec<String>>,
    /// `GetPreferredAllocation` requests.
    pub preferred: Vec<PreferredAllocationRequest>,
    /// Registrations the kubelet accepted.
    pub registrations: usize,
    /// Why registrations failed (the kubelet's answer or the connection's error).
    pub registration_errors: Vec<String>,
}

/// What the plugin's service and its registration loop share.
struct Shared {
    resource_name: String,
    options: DevicePluginOptions,
    /// The devices as `ListAndWatch` streams them: each change is an update.
    devices: watch::Sender<Vec<Device>>,
    allocate: AllocateFn,
    prefer: PreferFn,
    pre_start: Option<PreStartFn>,
    calls: Mutex<Calls>,
}

impl Shared {
    fn calls(&self) -> MutexGuard<'_, Calls> {
        // A test that panicked while holding it left the record whole: every change is one
        // push or increment.
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running test device plugin; stopped (as [`TestDevicePlugin::stop`], without waiting) on
/// drop.
pub struct TestDevicePlugin {
    shared: Arc<Shared>,
    socket: PathBuf,
    /// The server of the moment: replaced when a new kubelet appears, `None` once stopped.
    serving: Arc<tokio::sync::Mutex<Option<Generation>>>,
    watcher: Mutex<Option<JoinHandle<()>>>,
}

impl TestDevicePlugin {
    /// A builder for a plugin of `resource_name`.
    pub fn builder(resource_name: &str) -> PluginBuilder {
        PluginBuilder::new(resource_name)
    }

    /// The resource it serves.
    pub fn resource_name(&self) -> &str {
        &self.shared.resource_name
    }

    /// Its socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Its devices as it reports them now.
    pub fn devices(&self) -> Vec<Device> {
        self.shared.devices.borrow().clone()
    }

    /// Sets device `id`'s health and sends the update on every `ListAndWatch` stream; false
    /// if it has no such device.
    pub fn set_health(&self, id: &str, healthy: bool) -> bool {
        let health = if healthy { HEALTHY } else { UNHEALTHY };
        self.shared.devices.send_if_modified(|devices| {
            match devices.iter_mut().find(|d| d.id == id) {
                Some(d) => {
                    d.health = health.to_string();
                    // Sent even when unchanged: a plugin may repeat itself, and a test asking
                    // twice wants two updates.
                    true
                }
                None => false,
            }
        })
    }

    /// What it has been asked so far.
    pub fn calls(&self) -> Calls {
        self.shared.calls().clone()
    }

    /// Waits until the kubelet has accepted `n` registrations in all.
    ///
    /// # Panics
    /// After `limit`, with the registration errors seen.
    pub async fn wait_registrations(&self, n: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let calls = self.calls();
            if calls.registrations >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {} registration(s) within {limit:?}, wanted {n}; errors: {:?}",
                self.shared.resource_name,
                calls.registrations,
                calls.registration_errors
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops as a killed plugin does: no more registrations, every `ListAndWatch` stream
    /// ends, connections close, the socket goes. Idempotent.
    pub async fn stop(&self) {
        let watcher = self.watcher_slot().take();
        if let Some(watcher) = watcher {
            watcher.abort();
            let _ = watcher.await;
        }
        if let Some(generation) = self.serving.lock().await.take() {
            generation.end().await;
        }
    }

    fn watcher_slot(&self) -> MutexGuard<'_, Option<JoinHandle<()>>> {
        self.watcher.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for TestDevicePlugin {
    fn drop(&mut self) {
        if let Some(watcher) = self.watcher_slot().take() {
            watcher.abort();
        }
        // The watcher may hold the lock for a moment while it swaps servers: the generation
        // then goes with the last Arc, which stops it all the same.
        if let Ok(mut slot) = self.serving.try_lock() {
            slot.take();
        }
    }
}

/// A file's identity: a socket replaced at the same path differs in inode or change time (a
/// freed inode number is reused at once).
type Identity = (u64, u64, i64, i64);

fn identity(path: &Path) -> Option<Identity> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some((meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()))
}

/// The registration loop: registers with each kubelet socket that appears at `dir`'s
/// `kubelet.sock`, once; a replaced socket is a new kubelet, which has removed ours, so the
/// plugin serves again on a fresh socket before it registers (as Go's plugins restart their
/// server when they see `kubelet.sock` created).
async fn keep_registered(
    shared: Arc<Shared>,
    dir: PathBuf,
    socket_name: String,
    serving: Arc<tokio::sync::Mutex<Option<Generation>>>,
) {
    let kubelet = dir.join(KUBELET_SOCKET);
    let own = dir.join(&socket_name);
    let mut seen: Option<Identity> = None;
    let mut registered = false;
    let mut next_try = Instant::now();
    loop {
        let now = identity(&kubelet);
        if now.is_some() && now != seen {
            if seen.is_some() || identity(&own).is_none() {
                let mut slot = serving.lock().await;
                if let Some(old) = slot.take() {
                    old.end().await;
                }
                match Generation::serve(shared.clone(), &own) {
                    Ok(generation) => *slot = Some(generation),
                    Err(e) => {
                        shared
                            .calls()
                            .registration_errors
                            .push(format!("serving on {}: {e}", own.display()));
                        drop(slot);
                        tokio::time::sleep(REGISTER_RETRY).await;
                        continue;
                    }
                }
            }
            seen = now;
            registered = false;
            next_try = Instant::now();
        }
        if now.is_some() && !registered && Instant::now() >= next_try {
            match register(&shared, &kubelet, &socket_name).await {
                Ok(()) => {
                    registered = true;
                    shared.calls().registrations += 1;
                }
                Err(e) => {
                    shared.calls().registration_errors.push(e);
                    next_try = Instant::now() + REGISTER_RETRY;
                }
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One `Register` call on the kubelet's socket.
async fn register(shared: &Shared, kubelet: &Path, socket_name: &str) -> Result<(), String> {
    let request = RegisterRequest {
        version: VERSION.to_string(),
        endpoint: socket_name.to_string(),
        resource_name: shared.resource_name.clone(),
        options: Some(shared.options),
    };
    let call = async {
        let channel = ferrolet_proto::transport::connect(&kubelet.display().to_string())
            .await
            .map_err(|e| e.to_string())?;
        RegistrationClient::new(channel)
            .register(request)
            .await
            .map(drop)
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
    };
    tokio::time::timeout(REGISTER_LIMIT, call)
        .await
        .map_err(|_| format!("Register took more than {REGISTER_LIMIT:?}"))?
}
