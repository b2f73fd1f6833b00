//! The node's presence in the cluster, as the Go kubelet keeps it: registration of the Node
//! (`register`), its status recomputed every `nodeStatusUpdateFrequency` by pure setters
//! (`setters`, over `machine` facts and the kubelet's [`NodeFacts`]) and sent when it changed or
//! every `nodeStatusReportFrequency`, and the heartbeat Lease (`lease`).

pub mod lease;
pub mod machine;
pub mod register;
pub mod setters;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeStatus, Taint};
use kube::api::{Api, GetParams, Patch, PatchParams};
use tokio::sync::watch;

use crate::events::{EventRecorder, EventType, node_ref};
use crate::eviction::signals::Threshold;
use crate::kube_client::ApiHandle;
use machine::MachineInfo;
use setters::{NodeEvent, StatusParams};

/// The version the node reports as `kubeletVersion`: the Go kubelet release whose behaviour
/// ferrolet follows, so that version skew checks and `kubectl get nodes` read sensibly.
pub const KUBELET_VERSION: &str = "v1.32.0";

/// How long the runtime may go without a ready Status answer before it counts as down (Go's
/// `maxWaitForContainerRuntime`).
pub const RUNTIME_SYNC_THRESHOLD: Duration = Duration::from_secs(30);

/// Go's `nodeStatusUpdateRetry`: tries per status update.
const STATUS_UPDATE_RETRY: usize = 5;

/// What the node status and registration need from the configuration.
#[derive(Clone, Debug)]
pub struct NodeStatusSettings {
    /// The node's name (lowercased by config).
    pub node_name: String,
    /// The `kubernetes.io/hostname` label and `Hostname` address; Go's `kl.hostname` (the
    /// hostname override or the host's name, lowercased).
    pub hostname: String,
    /// `registerNode` (default true).
    pub register_node: bool,
    /// `--node-labels`.
    pub node_labels: BTreeMap<String, String>,
    /// `registerWithTaints`.
    pub register_with_taints: Vec<Taint>,
    /// `--node-ip`; the host's default-route address when unset.
    pub node_ip: Option<IpAddr>,
    /// `maxPods` (default 110).
    pub max_pods: u32,
    /// `kubeReserved` (`cpu`, `memory`, `ephemeral-storage`, `pid` → quantity).
    pub kube_reserved: BTreeMap<String, String>,
    /// `systemReserved`, as `kube_reserved`.
    pub system_reserved: BTreeMap<String, String>,
    /// The hard eviction thresholds; `memory.available` and `nodefs.available` are held back
    /// from allocatable (default 100Mi and 10%).
    pub eviction_hard: Vec<Threshold>,
    /// The kubelet's port, `daemonEndpoints.kubeletEndpoint.port` (default 10250).
    pub kubelet_port: u16,
    /// `nodeStatusUpdateFrequency` (default 10 s).
    pub status_update_frequency: Duration,
    /// `nodeStatusReportFrequency` (default 5 min).
    pub status_report_frequency: Duration,
    /// `nodeLeaseDurationSeconds` (default 40).
    pub lease_duration_secs: u32,
    /// `nodeStatusMaxImages` (default 50; -1: all).
    pub max_images: i32,
    /// The kubelet's root directory; its filesystem is `ephemeral-storage` (default
    /// /var/lib/kubelet).
    pub root_dir: PathBuf,
}

impl Default for NodeStatusSettings {
    fn default() -> Self {
        Self {
            node_name: String::new(),
            hostname: String::new(),
            register_node: true,
            node_labels: BTreeMap::new(),
            register_with_taints: Vec::new(),
            node_ip: None,
            max_pods: 110,
            kube_reserved: BTreeMap::new(),
            system_reserved: BTreeMap::new(),
            eviction_hard: Vec::new(),
            kubelet_port: 10250,
            status_update_frequency: Duration::from_secs(10),
            status_report_frequency: Duration::from_secs(300),
            lease_duration_secs: 40,
            max_images: 50,
            root_dir: PathBuf::from("/var/lib/kubelet"),
        }
    }
}

/// One CRI runtime condition (`RuntimeReady`, `NetworkReady`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeCondition {
    /// The condition type.
    pub type_: String,
    /// Whether it holds.
    pub status: bool,
    /// Why, in CamelCase.
    pub reason: String,
    /// Why, for people.
    pub message: String,
}

/// What the kubelet knows of the runtime's health (Go's `runtimeState`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeHealth {
    /// How long ago the runtime last answered Status with RuntimeReady true; `None`: never.
    pub last_ready_age: Option<Duration>,
    /// The conditions of the last Status answer; `None` before the first answer.
    pub conditions: Option<Vec<RuntimeCondition>>,
}

/// The eviction manager's view of node pressure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pressure {
    /// MemoryPressure.
    pub memory: bool,
    /// DiskPressure.
    pub disk: bool,
    /// PIDPressure.
    pub pid: bool,
}

/// One image on the node, as the runtime lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageInfo {
    /// Repo tags (`docker.io/library/nginx:1.27`).
    pub repo_tags: Vec<String>,
    /// Repo digests (`docker.io/library/nginx@sha256:…`).
    pub repo_digests: Vec<String>,
    /// Size in bytes.
    pub size: i64,
}

/// What changes between status updates, gathered from the kubelet each time.
#[derive(Clone, Debug, Default)]
pub struct NodeInputs {
    /// The runtime's health.
    pub runtime: RuntimeHealth,
    /// Why PLEG is unhealthy, when it is: `pleg was last seen active 3m0s ago; threshold is
    /// 3m0s`.
    pub pleg_error: Option<String>,
    /// Node pressure.
    pub pressure: Pressure,
    /// The runtime's images; `None` when listing failed (the last reported list stays).
    pub images: Option<Vec<ImageInfo>>,
    /// The CRI `(runtimeName, runtimeVersion)`; `None` when Version failed.
    pub runtime_version: Option<(String, String)>,
    /// The attachable volumes in use (Go's `volumesInUse`: the attach/detach controller
    /// detaches none of them), sorted; `None` until the volume manager has read the disk.
    pub volumes_in_use: Option<Vec<String>>,
    /// The device plugins' resources (Go's `GetDevicePluginResourceCapacity`).
    pub devices: DeviceCapacity,
    /// The runtime's handlers and their features (Go 1.31+'s `RuntimeHandlers` setter);
    /// `None` when Status failed (the last reported stay).
    pub runtime_handlers: Option<Vec<k8s_openapi::api::core::v1::NodeRuntimeHandler>>,
}

/// The device-plugin resources for the node's status (Go's `GetCapacity`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceCapacity {
    /// Every device, healthy or not, by resource.
    pub capacity: BTreeMap<String, i64>,
    /// Healthy devices, by resource.
    pub allocatable: BTreeMap<String, i64>,
    /// Resources whose plugin has been gone past the grace period: shown as 0 from now on.
    pub removed: Vec<String>,
}

/// The kubelet as the node status sees it; the lead implements it over the kubelet.
pub trait NodeFacts: Send + Sync {
    /// The current inputs.
    fn gather(&self) -> Pin<Box<dyn Future<Output = NodeInputs> + Send + '_>>;
}

/// The running node status loop.
#[derive(Clone)]
pub struct NodeStatusHandle {
    node: watch::Receiver<Option<Arc<Node>>>,
}

impl NodeStatusHandle {
    /// The Node as last read or written; `None` before it exists.
    pub fn node(&self) -> Option<Arc<Node>> {
        self.node.borrow().clone()
    }
}

/// Starts registration, the status loop and the lease loop.
pub fn spawn(
    api: ApiHandle,
    settings: NodeStatusSettings,
    facts: Arc<dyn NodeFacts>,
    events: Arc<dyn EventRecorder>,
    wake: Arc<tokio::sync::Notify>,
) -> NodeStatusHandle {
    let (tx, rx) = watch::channel(None);
    let lease = lease::LeaseController::new(api.clone(), settings.lease_duration_secs);
    tokio::spawn(lease.run());
    let status = StatusLoop {
        api,
        settings,
        facts,
        events,
        node: tx,
        last_report: None,
        failed: false,
        wake,
    };
    tokio::spawn(status.run());
    NodeStatusHandle { node: rx }
}

/// The status loop's state.
struct StatusLoop {
    api: ApiHandle,
    settings: NodeStatusSettings,
    facts: Arc<dyn NodeFacts>,
    events: Arc<dyn EventRecorder>,
    node: watch::Sender<Option<Arc<Node>>>,
    /// When the status was last sent.
    last_report: Option<Instant>,
    /// The last update failed: send the next one whatever it holds.
    failed: bool,
    /// Asks for an update before the period ends (a volume now in use must be reported
    /// before it is mounted; Go waits for its next period, kubernetes#28141).
    wake: Arc<tokio::sync::Notify>,
}

/// What the status is computed from that does not change while the kubelet runs.
struct Fixed {
    machine: MachineInfo,
    ip: IpAddr,
    reservation: BTreeMap<String, i64>,
}

impl StatusLoop {
    fn record(&self, events: &[NodeEvent]) {
        let reference = node_ref(&self.settings.node_name);
        for e in events {
            let kind = if e.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.events.record(&reference, kind, &e.reason, &e.message);
        }
    }

    fn params<'a>(&'a self, fixed: &'a Fixed) -> StatusParams<'a> {
        StatusParams {
            node_name: &self.settings.node_name,
            hostname: &self.settings.hostname,
            ip: fixed.ip,
            machine: &fixed.machine,
            max_pods: self.settings.max_pods,
            reservation: &fixed.reservation,
            kubelet_port: self.settings.kubelet_port,
            max_images: self.settings.max_images,
        }
    }

    async fn run(mut self) {
        let reference = node_ref(&self.settings.node_name);
        self.events.record(
            &reference,
            EventType::Normal,
            "Starting",
            "Starting kubelet.",
        );
        let root = self.settings.root_dir.clone();
        let machine = tokio::task::spawn_blocking(move || machine::read(&root))
            .await
            .unwrap_or_default();
        let ip = match self.settings.node_ip {
            Some(ip) if !ip.is_unspecified() => ip,
            _ => crate::node::host_ip(),
        };
        let cap = setters::capacity(&machine, self.settings.max_pods);
        let reservation = setters::reservation(
            &cap,
            &self.settings.kube_reserved,
            &self.settings.system_reserved,
            &self.settings.eviction_hard,
        );
        let fixed = Fixed {
            machine,
            ip,
            reservation,
        };

        if self.settings.register_node {
            let mut initial = register::initial_node(&self.settings);
            let inputs = self.facts.gather().await;
            let (status, events) = setters::node_status(
                &NodeStatus::default(),
                &self.params(&fixed),
                inputs,
                Timestamp::now(),
            );
            self.record(&events);
            initial.status = Some(status);
            let node = register::register(&self.api, &initial).await;
            self.node.send_replace(Some(Arc::new(node)));
        }

        loop {
            self.update(&fixed).await;
            tokio::select! {
                () = tokio::time::sleep(self.settings.status_update_frequency) => {}
                () = self.wake.notified() => {}
            }
        }
    }

    /// One status update: up to five tries (Go's `updateNodeStatus`).
    async fn update(&mut self, fixed: &Fixed) {
        let inputs = self.facts.gather().await;
        for attempt in 0..STATUS_UPDATE_RETRY {
            match self.try_update(fixed, inputs.clone(), attempt).await {
                Ok(()) => {
                    self.failed = false;
                    return;
                }
                Err(e) => tracing::error!(error = %e, "error updating node status, will retry"),
            }
        }
        tracing::error!("update node status exceeds retry count");
        self.failed = true;
    }

    /// Reads the Node, sets its status and sends it when due (Go's `tryUpdateNodeStatus`).
    async fn try_update(
        &mut self,
        fixed: &Fixed,
        inputs: NodeInputs,
        attempt: usize,
    ) -> Result<(), kube::Error> {
        let nodes: Api<Node> = Api::all(self.api.client());
        let name = self.settings.node_name.clone();
        // The first try may read the API server's cache, as Go's does.
        let params = if attempt == 0 {
            GetParams::any()
        } else {
            GetParams::default()
        };
        let original = nodes.get_with(&name, &params).await?;
        let old = original.status.clone().unwrap_or_default();
        let (status, events) =
            setters::node_status(&old, &self.params(fixed), inputs, Timestamp::now());
        let changed = self.failed || setters::status_changed(&old, &status);
        let since = self.last_report.map(|t| t.elapsed());
        if !setters::should_send(changed, since, self.settings.status_report_frequency) {
            self.record(&events);
            self.node.send_replace(Some(Arc::new(original)));
            return Ok(());
        }
        let patch = status_patch(&old, &status);
        let updated = nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        self.last_report = Some(Instant::now());
        self.record(&events);
        self.node.send_replace(Some(Arc::new(updated)));
        Ok(())
    }
}

/// The merge patch sending `new` whole, with resources gone since `old` removed (lists such as
/// conditions and images are replaced by a merge patch).
pub fn status_patch(old: &NodeStatus, new: &NodeStatus) -> serde_json::Value {
    let mut status = serde_json::to_value(new).unwrap_or_default();
    // The attach/detach controller's to write: sending back what we read could undo an
    // attach it recorded meanwhile.
    if let Some(obj) = status.as_object_mut() {
        obj.remove("volumesAttached");
        // A field that went (no volume in use any more) is removed by a null.
        if let Ok(serde_json::Value::Object(was)) = serde_json::to_value(old) {
            for key in was.keys() {
                if key != "volumesAttached" && !obj.contains_key(key) {
                    obj.insert(key.clone(), serde_json::Value::Null);
                }
            }
        }
    }
    for field in ["capacity", "allocatable"] {
        let old_map = match field {
            "capacity" => old.capacity.as_ref(),
            _ => old.allocatable.as_ref(),
        };
        let Some(old_map) = old_map else { continue };
        let Some(obj) = status.as_object_mut() else {
            continue;
        };
        let entry = obj
            .entry(field)
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if let Some(map) = entry.as_object_mut() {
            for key in old_map.keys() {
                if !map.contains_key(key) {
                    map.insert(key.clone(), serde_json::Value::Null);
                }
            }
        }
    }
    serde_json::json!({ "status": status })
}
