//! The device manager (Go's `pkg/kubelet/cm/devicemanager`, 1.28): device plugins register
//! on `<root-dir>/device-plugins/kubelet.sock` ([`registration`]), the kubelet follows each
//! plugin's devices over `ListAndWatch` ([`endpoint`]), reports them as extended resources in
//! the node's capacity and allocatable ([`DeviceManager::capacity`]), gives each container the
//! devices its limits ask for at admission ([`DeviceManager::allocate`]: the plugin's
//! `GetPreferredAllocation` and `Allocate`), hands the plugin's answer to CRI when the
//! container is created ([`DeviceManager::run_container_options`], after `PreStartContainer`),
//! and keeps every allocation in a checkpoint ([`checkpoint`], Go's file) so a restart neither
//! loses a running pod's devices nor gives one device to two pods.
//!
//! - [`pod_devices`]: who holds what, and what the plugin answered for it.
//! - [`checkpoint`]: the `kubelet_internal_checkpoint` file, byte-compatible with Go's.
//! - [`registration`]: the `Registration` service and its socket.
//! - [`endpoint`]: one plugin's connection: options, the `ListAndWatch` stream.
//! - [`allocation`]: which devices a container gets (pure).
//! - [`watcher`]: plugins registering through the plugin watcher instead.

pub mod allocation;
pub mod checkpoint;
pub mod endpoint;
pub mod pod_devices;
pub mod registration;
pub mod watcher;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ferrolet_proto::deviceplugin::{
    AllocateRequest, ContainerAllocateRequest, Device, DevicePluginClient, DevicePluginOptions,
    HEALTHY, PreStartContainerRequest,
};
use ferrolet_proto::podresources::{ContainerDevices, NumaNode, TopologyInfo};
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tokio::sync::Notify;

use crate::manifest::quantity::parse_quantity;
pub use crate::node_status::DeviceCapacity;
use crate::podspec::pod_resources::ContainerKind;
use crate::types::{Pod, uid_of};
use allocation::Choice;
use checkpoint::{Checkpoint, CheckpointError};
pub use pod_devices::RunContainerOptions;
use pod_devices::{Allocation, NO_TOPOLOGY, PodDevices};

/// How long a plugin that went away keeps its resource in the node's capacity (Go's
/// `endpointStopGracePeriod`).
pub const DEFAULT_STOP_GRACE_PERIOD: Duration = Duration::from_secs(5 * 60);

/// Why a container's devices could not be given or prepared; the messages are Go's (an
/// admission failure shows them inside `Allocate failed due to …, which is unexpected`).
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// Fewer free healthy devices than asked for.
    #[error(
        "requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}"
    )]
    Unavailable {
        /// The resource.
        resource: String,
        /// How many more the container needs.
        requested: usize,
        /// How many are free.
        available: usize,
    },
    /// No plugin has registered the resource since the kubelet started.
    #[error("cannot allocate unregistered device {0}")]
    Unregistered(String),
    /// The resource has no healthy device at all.
    #[error("no healthy devices present; cannot allocate unhealthy devices {0}")]
    NoHealthy(String),
    /// Devices the container held went unhealthy.
    #[error(
        "previously allocated devices are no longer healthy; cannot allocate unhealthy devices {0}"
    )]
    NoLongerHealthy(String),
    /// A container asks for another count than it was given.
    #[error(
        "pod {pod:?} container {container:?} changed request for resource {resource:?} from {from} to {to}"
    )]
    ChangedRequest {
        /// The pod's UID.
        pod: String,
        /// The container.
        container: String,
        /// The resource.
        resource: String,
        /// What it holds.
        from: usize,
        /// What it asks for.
        to: usize,
    },
    /// The resource's plugin is not connected.
    #[error("unknown Device Plugin {0}")]
    UnknownPlugin(String),
    /// The resource's plugin is gone (PreStartContainer, GetPreferredAllocation).
    #[error("endpoint not found in cache for a registered resource: {0}")]
    NoEndpoint(String),
    /// The plugin stopped serving.
    #[error("endpoint {0} has been stopped")]
    Stopped(String),
    /// A call to the plugin failed.
    #[error(
        "device plugin {call} rpc failed with err: rpc error: code = {code:?} desc = {message}"
    )]
    Rpc {
        /// `Allocate`, `PreStartContainer`, `GetPreferredAllocation`.
        call: &'static str,
        /// The gRPC code.
        code: tonic::Code,
        /// The plugin's message.
        message: String,
    },
    /// `Allocate` answered for no container.
    #[error("no containers return in allocation response")]
    EmptyAnswer,
    /// The container's devices were not in the local cache at PreStartContainer.
    #[error(
        "no devices found allocated in local cache for pod {pod}, container {container}, resource {resource}"
    )]
    NotAllocated {
        /// The pod's UID.
        pod: String,
        /// The container.
        container: String,
        /// The resource.
        resource: String,
    },
    /// Fewer devices were chosen than needed (a plugin preference naming unknown devices).
    #[error(
        "unexpectedly allocated less resources than required. Requested: {required}, Got: {got}"
    )]
    Short {
        /// Needed.
        required: usize,
        /// Chosen.
        got: usize,
    },
    /// The checkpoint could not be written.
    #[error("writing the device manager checkpoint: {0}")]
    Checkpoint(#[from] CheckpointError),
}

impl DeviceError {
    fn rpc(call: &'static str, status: tonic::Status) -> Self {
        DeviceError::Rpc {
            call,
            code: status.code(),
            message: status.message().to_string(),
        }
    }
}

/// What admission knows that the device manager needs.
pub struct AdmitContext<'a> {
    /// The active pods' UIDs once every source has been seen (allocations of other pods are
    /// then freed, Go's `UpdateAllocatedDevices`); None before.
    pub active: Option<&'a BTreeSet<String>>,
}

/// One plugin as the manager knows it.
struct Endpoint {
    /// None for a plugin known only from the checkpoint, or gone.
    client: Option<DevicePluginClient>,
    options: DevicePluginOptions,
    /// When its stream ended; None while it serves.
    stopped_at: Option<Instant>,
    /// Tells this connection from a later registration of the same resource.
    generation: u64,
    /// The `ListAndWatch` task, aborted when the plugin registers again.
    task: Option<tokio::task::AbortHandle>,
}

#[derive(Default)]
struct State {
    endpoints: BTreeMap<String, Endpoint>,
    healthy: BTreeMap<String, BTreeSet<String>>,
    unhealthy: BTreeMap<String, BTreeSet<String>>,
    /// Resource → device id → the device as last listed (its topology).
    devices: BTreeMap<String, BTreeMap<String, Device>>,
    pod_devices: PodDevices,
    /// Ids in use, by resource (the pods' plus those chosen by an allocation in progress).
    allocated: BTreeMap<String, BTreeSet<String>>,
    /// Init containers' devices the pod being admitted may give its app containers.
    reuse: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    generations: u64,
    /// The containers the runtime ran when the kubelet started, `(pod uid, name)`: after a
    /// restart they already use their devices (Go's `containerRunningSet`).
    running_at_start: BTreeSet<(String, String)>,
}

impl State {
    fn is_plugin_resource(&self, resource: &str) -> bool {
        self.healthy.contains_key(resource) || self.allocated.contains_key(resource)
    }

    fn checkpoint(&self) -> Checkpoint {
        // Healthy devices only, as Go 1.28 writes them: the names matter (a restarted
        // kubelet counts these resources as registered), the ids are not read back.
        let registered = self
            .healthy
            .iter()
            .map(|(resource, ids)| (resource.clone(), ids.iter().cloned().collect()))
            .collect();
        Checkpoint {
            pod_device_entries: self.pod_devices.to_entries(),
            registered_devices: registered,
        }
    }

    /// The NUMA nodes of `ids` (Go's `NewDevicesPerNUMA`).
    fn per_numa(&self, resource: &str, ids: &BTreeSet<String>) -> BTreeMap<i64, Vec<String>> {
        let mut out: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for id in ids {
            let nodes = self.numa_nodes(resource, id);
            if nodes.is_empty() {
                out.entry(NO_TOPOLOGY).or_default().push(id.clone());
            }
            for n in nodes {
                out.entry(n).or_default().push(id.clone());
            }
        }
        out
    }

    /// The NUMA nodes device `id` of `resource` was last listed on; none without topology.
    fn numa_nodes(&self, resource: &str, id: &str) -> Vec<i64> {
        self.devices
            .get(resource)
            .and_then(|d| d.get(id))
            .and_then(|d| d.topology.as_ref())
            .map(|t| t.nodes.iter().map(|n| n.id).collect())
            .unwrap_or_default()
    }
}

/// The device manager; see the module doc.
pub struct DeviceManager {
    dir: PathBuf,
    grace: Duration,
    state: Mutex<State>,
    /// One admission at a time: a pod's containers, and the next pod, see earlier choices.
    allocating: tokio::sync::Mutex<()>,
    /// Checkpoint writes one at a time, each of the state as it is when it starts.
    writing: tokio::sync::Mutex<()>,
    /// Woken when the devices change (the node status reports them sooner).
    changed: Arc<Notify>,
}

/// The device-plugin limits of a container, in Go's terms (limits, whole units).
fn device_limits(c: &Container) -> Vec<(String, usize)> {
    c.resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|(name, q)| {
            let n = parse_quantity(&q.0).ok()?.value_ceil();
            Some((name.clone(), usize::try_from(n).unwrap_or(0)))
        })
        .collect()
}

impl DeviceManager {
    /// A manager for `<root_dir>/device-plugins`, with the allocations of the checkpoint
    /// there (a checkpoint that cannot be read is reported and the manager starts empty, as
    /// Go's). Resources the checkpoint names count as registered but empty until their
    /// plugin comes back, within `grace`.
    pub fn new(root_dir: &Path, grace: Duration, changed: Arc<Notify>) -> Arc<Self> {
        let dir = root_dir.join(ferrolet_proto::deviceplugin::DEVICE_PLUGIN_DIR);
        let mut state = State::default();
        match checkpoint::read(&dir) {
            Ok(Some(cp)) => {
                state.pod_devices = PodDevices::from_entries(cp.pod_device_entries);
                state.allocated = state.pod_devices.devices();
                for resource in cp.registered_devices.into_keys() {
                    state.healthy.insert(resource.clone(), BTreeSet::new());
                    state.unhealthy.insert(resource.clone(), BTreeSet::new());
                    state.endpoints.insert(
                        resource,
                        Endpoint {
                            client: None,
                            options: DevicePluginOptions::default(),
                            stopped_at: Some(Instant::now()),
                            generation: 0,
                            task: None,
                        },
                    );
                }
                tracing::info!(
                    pods = state.pod_devices.pods().count(),
                    "device manager: checkpoint restored"
                );
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, dir = %dir.display(), "continuing after failing to read the device manager checkpoint; device allocation info may not be up to date")
            }
        }
        Arc::new(Self {
            dir,
            grace,
            state: Mutex::new(state),
            allocating: tokio::sync::Mutex::new(()),
            writing: tokio::sync::Mutex::new(()),
            changed,
        })
    }

    /// The containers the runtime runs as the kubelet starts, `(pod uid, name)`.
    pub fn set_running_at_start(&self, running: BTreeSet<(String, String)>) {
        self.lock().running_at_start = running;
    }

    /// The device plugin directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes the checkpoint of the state as it is now.
    async fn write_checkpoint(&self) -> Result<(), DeviceError> {
        let _w = self.writing.lock().await;
        let cp = self.lock().checkpoint();
        let dir = self.dir.clone();
        let path = dir.join(checkpoint::CHECKPOINT_FILE);
        tokio::task::spawn_blocking(move || checkpoint::write(&dir, &cp))
            .await
            .map_err(|e| CheckpointError::Write {
                path,
                source: std::io::Error::other(e.to_string()),
            })??;
        Ok(())
    }

    /// Writes the checkpoint, reporting a failure (the next write carries the same state).
    async fn save(&self) {
        if let Err(e) = self.write_checkpoint().await {
            tracing::error!(error = %e, "device manager");
        }
    }

    /// Whether `resource` is (or was, per the checkpoint) served by a device plugin.
    pub fn is_plugin_resource(&self, resource: &str) -> bool {
        self.lock().is_plugin_resource(resource)
    }

    /// The device-plugin resources for the node's status (Go's `GetCapacity`): plugins gone
    /// past the grace period are dropped here, once, and reported as removed.
    pub async fn capacity(&self) -> DeviceCapacity {
        let mut out = DeviceCapacity::default();
        let dropped = {
            let mut s = self.lock();
            let expired: Vec<String> = s
                .endpoints
                .iter()
                .filter(|(_, e)| e.stopped_at.is_some_and(|t| t.elapsed() >= self.grace))
                .map(|(r, _)| r.clone())
                .collect();
            let known: BTreeSet<String> = s
                .healthy
                .keys()
                .chain(s.unhealthy.keys())
                .cloned()
                .collect();
            for resource in &known {
                if expired.contains(resource) || !s.endpoints.contains_key(resource) {
                    s.endpoints.remove(resource);
                    s.healthy.remove(resource);
                    s.unhealthy.remove(resource);
                    s.devices.remove(resource);
                    out.removed.push(resource.clone());
                    continue;
                }
                let healthy = s.healthy.get(resource).map_or(0, BTreeSet::len) as i64;
                let unhealthy = s.unhealthy.get(resource).map_or(0, BTreeSet::len) as i64;
                out.capacity.insert(resource.clone(), healthy + unhealthy);
                out.allocatable.insert(resource.clone(), healthy);
            }
            !out.removed.is_empty()
        };
        if dropped {
            tracing::info!(resources = ?out.removed, "device plugins gone past their grace period");
            self.save().await;
        }
        out
    }

    /// Raises `allocatable` to at least the devices in use, so pods that hold devices pass
    /// admission while their plugin is away (Go's `sanitizeNodeAllocatable`, applied for a
    /// pod that holds devices).
    pub fn sanitize_allocatable(&self, uid: &str, allocatable: &mut BTreeMap<String, Quantity>) {
        let s = self.lock();
        if !s.pod_devices.has_pod(uid) {
            return;
        }
        for (resource, ids) in &s.allocated {
            let have = allocatable
                .get(resource)
                .and_then(|q| parse_quantity(&q.0).ok())
                .map_or(0, |q| q.value_ceil());
            if have < ids.len() as i128 {
                allocatable.insert(resource.clone(), Quantity(ids.len().to_string()));
            }
        }
    }

    /// Healthy devices by resource, as the node's allocatable shows them (no plugin is
    /// dropped here: [`DeviceManager::capacity`] does that).
    pub fn allocatable_now(&self) -> BTreeMap<String, usize> {
        self.lock()
            .healthy
            .iter()
            .map(|(r, ids)| (r.clone(), ids.len()))
            .collect()
    }

    /// Gives `pod`'s init and then app containers their devices (Go's topology manager admit
    /// handler calling the device manager's `Allocate`); on failure the pod holds nothing.
    pub async fn allocate(&self, pod: &Pod, ctx: &AdmitContext<'_>) -> Result<(), DeviceError> {
        // Most pods ask for no device: they neither wait for another pod's allocation nor
        // free stale ones (Go frees them only when it allocates a device too).
        let wants_devices = pod.spec.iter().any(|spec| {
            spec.init_containers
                .iter()
                .flatten()
                .chain(&spec.containers)
                .flat_map(device_limits)
                .any(|(r, n)| n > 0 && self.is_plugin_resource(&r))
        });
        if !wants_devices {
            return Ok(());
        }
        let _one = self.allocating.lock().await;
        let uid = uid_of(pod);
        {
            let mut s = self.lock();
            if let Some(active) = ctx.active
                && s.pod_devices
                    .retain_pods(|u| active.contains(u) || u == uid)
            {
                s.allocated = s.pod_devices.devices();
            }
            // Only the pod being admitted may reuse its init containers' devices.
            s.reuse.retain(|p, _| *p == uid);
        }
        let result = self.allocate_pod(pod, &uid, ctx).await;
        let undone = {
            let mut s = self.lock();
            s.reuse.remove(&uid);
            let undone = result.is_err() && s.pod_devices.remove_pod(&uid);
            if undone {
                s.allocated = s.pod_devices.devices();
            }
            undone
        };
        if undone {
            self.save().await;
        }
        result
    }

    async fn allocate_pod(
        &self,
        pod: &Pod,
        uid: &str,
        ctx: &AdmitContext<'_>,
    ) -> Result<(), DeviceError> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        let inits = spec.init_containers.iter().flatten().map(|c| {
            let sidecar = c.restart_policy.as_deref() == Some("Always");
            let kind = if sidecar {
                ContainerKind::Sidecar
            } else {
                ContainerKind::Init
            };
            (c, kind)
        });
        let apps = spec.containers.iter().map(|c| (c, ContainerKind::App));
        for (c, kind) in inits.chain(apps) {
            self.allocate_container(uid, c, ctx).await?;
            let mut s = self.lock();
            let held: Vec<(String, BTreeSet<String>)> = s
                .pod_devices
                .container(uid, &c.name)
                .map(|m| m.iter().map(|(r, a)| (r.clone(), a.all_ids())).collect())
                .unwrap_or_default();
            let reuse = s.reuse.entry(uid.to_string()).or_default();
            for (resource, ids) in held {
                let set = reuse.entry(resource).or_default();
                match kind {
                    // A regular init container is done before the next one starts: what it
                    // held may be given again within the pod. A sidecar keeps running.
                    ContainerKind::Init => set.extend(ids),
                    ContainerKind::App | ContainerKind::Sidecar => set.retain(|i| !ids.contains(i)),
                }
            }
        }
        Ok(())
    }

    /// One container's devices, resource by resource: chosen, then `Allocate`d.
    async fn allocate_container(
        &self,
        uid: &str,
        c: &Container,
        ctx: &AdmitContext<'_>,
    ) -> Result<(), DeviceError> {
        for (resource, needed) in device_limits(c) {
            if needed == 0 || !self.is_plugin_resource(&resource) {
                continue;
            }
            let Some(ids) = self.choose(uid, &c.name, &resource, needed, ctx).await? else {
                continue;
            };
            self.call_allocate(uid, &c.name, &resource, ids).await?;
        }
        Ok(())
    }

    /// Which devices the container gets (Go's `devicesToAllocate`); None when it needs no
    /// more. The chosen ones count as in use from here on.
    async fn choose(
        &self,
        uid: &str,
        container: &str,
        resource: &str,
        needed: usize,
        ctx: &AdmitContext<'_>,
    ) -> Result<Option<BTreeSet<String>>, DeviceError> {
        let (choice, client) = {
            let s = self.lock();
            let held = s.pod_devices.container_devices(uid, container, resource);
            if let Some(held) = &held
                && held.len() != needed
            {
                return Err(DeviceError::ChangedRequest {
                    pod: uid.into(),
                    container: container.into(),
                    resource: resource.into(),
                    from: held.len(),
                    to: needed,
                });
            }
            // After a kubelet restart a running container already uses its devices.
            if ctx.active.is_none()
                && s.running_at_start
                    .contains(&(uid.to_string(), container.to_string()))
            {
                return Ok(None);
            }
            let healthy = s
                .healthy
                .get(resource)
                .ok_or_else(|| DeviceError::Unregistered(resource.into()))?;
            if healthy.is_empty() {
                return Err(DeviceError::NoHealthy(resource.into()));
            }
            if let Some(held) = &held {
                if !held.is_subset(healthy) {
                    return Err(DeviceError::NoLongerHealthy(resource.into()));
                }
                return Ok(None);
            }
            let reusable = s
                .reuse
                .get(uid)
                .and_then(|r| r.get(resource))
                .cloned()
                .unwrap_or_default();
            let in_use = s.allocated.get(resource).cloned().unwrap_or_default();
            let choice = allocation::choose(needed, &reusable, healthy, &in_use).map_err(
                |(requested, available)| DeviceError::Unavailable {
                    resource: resource.into(),
                    requested,
                    available,
                },
            )?;
            let endpoint = s
                .endpoints
                .get(resource)
                .ok_or_else(|| DeviceError::NoEndpoint(resource.into()))?;
            let client = match &choice {
                Choice::Done(_) => None,
                Choice::Ask { .. } if endpoint.options.get_preferred_allocation_available => {
                    Some(endpoint.client.clone())
                }
                Choice::Ask { .. } => None,
            };
            (choice, client)
        };
        let chosen = match choice {
            Choice::Done(ids) => ids,
            Choice::Ask {
                taken,
                available,
                required,
            } => {
                let preferred = match client {
                    Some(Some(mut client)) => {
                        let request = allocation::preferred_request(&available, &taken, required);
                        let answer = client
                            .get_preferred_allocation(request)
                            .await
                            .map_err(|e| DeviceError::rpc("GetPreferredAllocation", e))?;
                        allocation::preferred_ids(answer)
                    }
                    Some(None) => return Err(DeviceError::Stopped(resource.into())),
                    None => BTreeSet::new(),
                };
                allocation::fill(taken, &preferred, &available, required)
                    .map_err(|got| DeviceError::Short { required, got })?
            }
        };
        self.lock()
            .allocated
            .entry(resource.to_string())
            .or_default()
            .extend(chosen.iter().cloned());
        Ok(Some(chosen))
    }

    /// The plugin's `Allocate` for the chosen devices; its answer recorded and checkpointed
    /// (Go's `allocateContainerResources`). On failure the devices are free again.
    async fn call_allocate(
        &self,
        uid: &str,
        container: &str,
        resource: &str,
        ids: BTreeSet<String>,
    ) -> Result<(), DeviceError> {
        let client = self
            .lock()
            .endpoints
            .get(resource)
            .map(|e| e.client.clone());
        let undo = |e: DeviceError| {
            let mut s = self.lock();
            s.allocated = s.pod_devices.devices();
            e
        };
        let mut client = match client {
            Some(Some(c)) => c,
            Some(None) => return Err(undo(DeviceError::Stopped(resource.into()))),
            None => return Err(undo(DeviceError::UnknownPlugin(resource.into()))),
        };
        let request = AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: ids.iter().cloned().collect(),
            }],
        };
        let started = Instant::now();
        tracing::debug!(pod = uid, container, resource, devices = ?ids, "device plugin Allocate");
        let answer = client.allocate(request).await;
        crate::metrics::device_plugin_alloc(resource, started.elapsed());
        let answer = answer.map_err(|e| undo(DeviceError::rpc("Allocate", e)))?;
        let Some(response) = answer.container_responses.into_iter().next() else {
            return Err(undo(DeviceError::EmptyAnswer));
        };
        {
            let mut s = self.lock();
            let per_numa = s.per_numa(resource, &ids);
            s.pod_devices.insert(
                uid,
                container,
                resource,
                Allocation {
                    ids: per_numa,
                    response,
                },
            );
            s.allocated = s.pod_devices.devices();
        }
        self.write_checkpoint().await.map_err(undo)
    }

    /// What container `c` of `pod` is created with for its devices (Go's
    /// `GetDeviceRunContainerOptions`): `PreStartContainer` first where the plugin asks for
    /// it, and devices allocated now if an active pod's container has none (a pod admitted
    /// before its plugin was back after a reboot).
    pub async fn run_container_options(
        &self,
        pod: &Pod,
        c: &Container,
        active: bool,
    ) -> Result<RunContainerOptions, DeviceError> {
        let uid = uid_of(pod);
        let mut reallocate = false;
        for (resource, n) in device_limits(c) {
            if n == 0 || !self.is_plugin_resource(&resource) {
                continue;
            }
            self.pre_start(&uid, &c.name, &resource).await?;
            if !active {
                continue;
            }
            let held = self
                .lock()
                .pod_devices
                .container_devices(&uid, &c.name, &resource);
            reallocate |= held.is_none();
        }
        if reallocate {
            tracing::info!(pod = %crate::types::pod_name(pod), container = %c.name, "re-allocating device plugin resources");
            let _one = self.allocating.lock().await;
            let ctx = AdmitContext { active: None };
            self.allocate_container(&uid, c, &ctx).await?;
        }
        Ok(self.lock().pod_devices.run_options(&uid, &c.name))
    }

    /// `PreStartContainer` when the plugin asks for it (Go's `callPreStartContainerIfNeeded`).
    async fn pre_start(
        &self,
        uid: &str,
        container: &str,
        resource: &str,
    ) -> Result<(), DeviceError> {
        let (client, ids) = {
            let s = self.lock();
            let endpoint = s
                .endpoints
                .get(resource)
                .ok_or_else(|| DeviceError::NoEndpoint(resource.into()))?;
            if !endpoint.options.pre_start_required {
                return Ok(());
            }
            let ids = s
                .pod_devices
                .container_devices(uid, container, resource)
                .ok_or_else(|| DeviceError::NotAllocated {
                    pod: uid.into(),
                    container: container.into(),
                    resource: resource.into(),
                })?;
            (endpoint.client.clone(), ids)
        };
        let mut client = client.ok_or_else(|| DeviceError::Stopped(resource.into()))?;
        client
            .pre_start_container(PreStartContainerRequest {
                devices_ids: ids.into_iter().collect(),
            })
            .await
            .map_err(|e| DeviceError::rpc("PreStartContainer", e))?;
        Ok(())
    }

    /// The devices container `name` of pod `uid` holds, one entry per device with its NUMA
    /// nodes, for the pod resources API.
    pub fn container_devices(&self, uid: &str, name: &str) -> Vec<ContainerDevices> {
        let s = self.lock();
        let mut out = Vec::new();
        for (resource, a) in s.pod_devices.container(uid, name).into_iter().flatten() {
            let mut nodes: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
            for (numa, ids) in &a.ids {
                for id in ids {
                    let entry = nodes.entry(id.as_str()).or_default();
                    if *numa != NO_TOPOLOGY {
                        entry.push(*numa);
                    }
                }
            }
            for (id, numas) in nodes {
                out.push(ContainerDevices {
                    resource_name: resource.clone(),
                    device_ids: vec![id.to_string()],
                    topology: topology(&numas),
                });
            }
        }
        out
    }

    /// The healthy devices by resource, one entry per device, for the pod resources API's
    /// `GetAllocatableResources`.
    pub fn allocatable_devices(&self) -> Vec<ContainerDevices> {
        let s = self.lock();
        let mut out = Vec::new();
        for (resource, ids) in &s.healthy {
            for id in ids {
                out.push(ContainerDevices {
                    resource_name: resource.clone(),
                    device_ids: vec![id.clone()],
                    topology: topology(&s.numa_nodes(resource, id)),
                });
            }
        }
        out
    }

    /// A plugin's devices as its stream last listed them (Go's `genericDeviceUpdateCallback`).
    async fn devices_listed(&self, resource: &str, generation: u64, devices: Vec<Device>) {
        {
            let mut s = self.lock();
            if s.endpoints.get(resource).map(|e| e.generation) != Some(generation) {
                return;
            }
            let mut healthy = BTreeSet::new();
            let mut unhealthy = BTreeSet::new();
            let mut all = BTreeMap::new();
            for d in devices {
                if d.health == HEALTHY {
                    healthy.insert(d.id.clone());
                } else {
                    unhealthy.insert(d.id.clone());
                }
                all.insert(d.id.clone(), d);
            }
            tracing::info!(
                resource,
                healthy = healthy.len(),
                unhealthy = unhealthy.len(),
                "device plugin listed its devices"
            );
            s.healthy.insert(resource.to_string(), healthy);
            s.unhealthy.insert(resource.to_string(), unhealthy);
            s.devices.insert(resource.to_string(), all);
        }
        self.save().await;
        self.changed.notify_one();
    }

    /// A plugin's stream ended: its devices are all unhealthy now, and its resource leaves
    /// the capacity after the grace period unless it registers again (Go's
    /// `PluginDisconnected`).
    async fn disconnected(&self, resource: &str, generation: u64) {
        {
            let mut s = self.lock();
            let Some(e) = s.endpoints.get_mut(resource) else {
                return;
            };
            if e.generation != generation {
                return;
            }
            e.stopped_at = Some(Instant::now());
            e.client = None;
            e.task = None;
            let healthy = s.healthy.insert(resource.to_string(), BTreeSet::new());
            s.unhealthy
                .entry(resource.to_string())
                .or_default()
                .extend(healthy.into_iter().flatten());
        }
        tracing::warn!(resource, grace = ?self.grace, "device plugin went away; its devices are unhealthy");
        self.changed.notify_one();
    }

    /// `resource`'s plugin is gone (its watcher socket went): its stream is ended and its
    /// devices go unhealthy, as when the stream ends by itself.
    pub async fn plugin_gone(&self, resource: &str) {
        let current = {
            let s = self.lock();
            s.endpoints
                .get(resource)
                .filter(|e| e.client.is_some())
                .map(|e| (e.generation, e.task.clone()))
        };
        let Some((generation, task)) = current else {
            return;
        };
        if let Some(task) = task {
            task.abort();
        }
        self.disconnected(resource, generation).await;
    }

    /// Takes a newly connected plugin for `resource` in place of any earlier one; the
    /// generation its stream reports under.
    fn connected(
        &self,
        resource: &str,
        client: DevicePluginClient,
        options: DevicePluginOptions,
    ) -> u64 {
        let mut s = self.lock();
        s.generations += 1;
        let generation = s.generations;
        let old = s.endpoints.insert(
            resource.to_string(),
            Endpoint {
                client: Some(client),
                options,
                stopped_at: None,
                generation,
                task: None,
            },
        );
        if let Some(task) = old.and_then(|e| e.task) {
            task.abort();
        }
        s.healthy.entry(resource.to_string()).or_default();
        s.unhealthy.entry(resource.to_string()).or_default();
        generation
    }

    fn set_task(&self, resource: &str, generation: u64, task: tokio::task::AbortHandle) {
        let mut s = self.lock();
        match s.endpoints.get_mut(resource) {
            Some(e) if e.generation == generation => e.task = Some(task),
            _ => task.abort(),
        }
    }
}

fn topology(numas: &[i64]) -> Option<TopologyInfo> {
    (!numas.is_empty()).then(|| TopologyInfo {
        nodes: numas.iter().map(|&id| NumaNode { id }).collect(),
    })
}

#[cfg(test)]
mod tests;
