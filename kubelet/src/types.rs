//! Types every part of the kubelet shares: pod updates from sources, and the runtime's view of
//! a pod as read back through CRI.

use std::collections::BTreeMap;
use std::sync::Arc;

pub use k8s_openapi::api::core::v1::Pod;

/// What a source says happened to its pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodOp {
    /// New pods.
    Add,
    /// Changed pods (same UID).
    Update,
    /// Gone pods.
    Remove,
    /// The source's full set, after a re-list: anything of that source not in it is gone.
    Reconcile,
}

/// One message from a pod source.
#[derive(Clone, Debug)]
pub struct PodUpdate {
    /// What happened.
    pub op: PodOp,
    /// The pods it happened to (for Reconcile: all of the source's pods), shared: the merge,
    /// the kubelet's state, its status and volume managers and the pod workers hold the same
    /// copy (a pod is kilobytes; a copy per holder was a quarter of the heap at 100 pods).
    pub pods: Vec<Arc<Pod>>,
    /// `file`, `http` or `api`, as the Go kubelet's `kubernetes.io/config.source` annotation.
    pub source: String,
}

impl PodUpdate {
    /// An update of `source` for freshly made pods.
    pub fn new(op: PodOp, pods: Vec<Pod>, source: &str) -> Self {
        Self {
            op,
            pods: pods.into_iter().map(Arc::new).collect(),
            source: source.into(),
        }
    }
}

/// Labels and annotations the Go kubelet puts on sandboxes and containers; CRI runtimes,
/// crictl and our own restart recovery read them.
pub mod labels {
    /// Pod name (sandbox and container label).
    pub const POD_NAME: &str = "io.kubernetes.pod.name";
    /// Pod namespace.
    pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
    /// Pod UID.
    pub const POD_UID: &str = "io.kubernetes.pod.uid";
    /// Container name (container label).
    pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
    /// Hash of the container spec (container annotation).
    pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
    /// The container's spec hash without its resources (Go 1.28's annotation).
    pub const CONTAINER_HASH_WITHOUT_RESOURCES: &str =
        "io.kubernetes.container.hashWithoutResources";
    /// Restart count (container annotation).
    pub const RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
    /// Termination message path (container annotation).
    pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
    /// Pod termination grace period in seconds (container annotation).
    pub const GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
    /// Marks the kubelet's own objects (sandbox label), value "true".
    pub const MANAGED: &str = "io.kubernetes.container.managed-by";
    /// Which source a pod came from (pod annotation).
    pub const CONFIG_SOURCE: &str = "kubernetes.io/config.source";
    /// Hash of a static pod's manifest (pod annotation).
    pub const CONFIG_HASH: &str = "kubernetes.io/config.hash";
    /// Marks a static pod's mirror (pod annotation).
    pub const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";
    /// When the source first saw the pod (pod annotation, RFC 3339).
    pub const CONFIG_SEEN: &str = "kubernetes.io/config.seen";
}

/// When the pod's source first saw it (its `config.seen` annotation), in nanoseconds since
/// the epoch; None without a readable annotation.
pub fn config_seen_nanos(pod: &Pod) -> Option<i64> {
    let seen = pod
        .metadata
        .annotations
        .as_ref()?
        .get(labels::CONFIG_SEEN)?;
    let seen: jiff::Timestamp = seen.parse().ok()?;
    i64::try_from(seen.as_nanosecond()).ok()
}

/// A container as the runtime reports it (ListContainers + ContainerStatus), keyed back to
/// its pod by labels.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimeContainer {
    /// CRI container id.
    pub id: String,
    /// Its sandbox.
    pub sandbox_id: String,
    /// `io.kubernetes.container.name`.
    pub name: String,
    /// CRI metadata attempt (= restart count when we made it).
    pub attempt: u32,
    /// `io.kubernetes.container.hash`.
    pub hash: String,
    /// CRI state.
    pub state: ferrolet_proto::cri::ContainerState,
    /// Nanoseconds since the epoch (0 = unset).
    pub created_at: i64,
    /// Nanoseconds since the epoch (0 = unset).
    pub started_at: i64,
    /// Nanoseconds since the epoch (0 = unset).
    pub finished_at: i64,
    /// Exit code once exited.
    pub exit_code: i32,
    /// CRI reason (`Completed`, `Error`, `OOMKilled`, ...).
    pub reason: String,
    /// CRI message.
    pub message: String,
    /// Image as reported.
    pub image: String,
    /// Image ref (digest) as reported.
    pub image_ref: String,
    /// Log path.
    pub log_path: String,
    /// All labels and annotations.
    pub labels: BTreeMap<String, String>,
    /// All annotations.
    pub annotations: BTreeMap<String, String>,
    /// The resources the runtime reports applied (ContainerStatus.resources).
    pub resources: Option<ferrolet_proto::cri::ContainerResources>,
}

/// A sandbox as the runtime reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimeSandbox {
    /// CRI sandbox id.
    pub id: String,
    /// CRI metadata attempt.
    pub attempt: u32,
    /// Ready or not.
    pub ready: bool,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    /// Primary pod IP ("" for host network or before CNI).
    pub ip: String,
    /// Further pod IPs.
    pub additional_ips: Vec<String>,
}

/// Everything the runtime has for one pod UID.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimePod {
    /// Pod UID.
    pub uid: String,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Newest first.
    pub sandboxes: Vec<RuntimeSandbox>,
    /// Every container of every sandbox, newest first.
    pub containers: Vec<RuntimeContainer>,
}

/// A pod's UID (static pods always have one).
pub fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// `namespace/name`.
pub fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// The pod's termination grace period (default 30 s).
pub fn grace_period(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30)
        .max(0)
}
