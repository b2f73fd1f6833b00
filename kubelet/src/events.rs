//! What the kubelet tells people about objects, as `core/v1` Events: the recorder seam. Parts
//! that have something to say take an `Arc<dyn EventRecorder>`; in a cluster it is the
//! aggregating, rate-limited API writer (`event_recorder`), standalone it only logs.

use k8s_openapi::api::core::v1::{ObjectReference, Pod};

/// `Normal` or `Warning`, as the Event's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something went wrong or may go wrong.
    Warning,
}

impl EventType {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Records events; never blocks and never fails (a lost event is logged, not an error).
pub trait EventRecorder: Send + Sync {
    /// Records `reason`/`message` about `object`.
    fn record(&self, object: &ObjectReference, kind: EventType, reason: &str, message: &str);
}

/// Standalone: events go to the log only.
#[derive(Debug, Default)]
pub struct LogRecorder;

impl EventRecorder for LogRecorder {
    fn record(&self, object: &ObjectReference, kind: EventType, reason: &str, message: &str) {
        tracing::debug!(
            kind = object.kind.as_deref().unwrap_or(""),
            namespace = object.namespace.as_deref().unwrap_or(""),
            name = object.name.as_deref().unwrap_or(""),
            r#type = kind.as_str(),
            reason,
            message,
            "event"
        );
    }
}

/// The reference to a pod, as the Go kubelet's `ref.GetReference(pod)`.
pub fn pod_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// The reference to one container of a pod (`fieldPath: spec.containers{name}`,
/// `spec.initContainers{name}` or `spec.ephemeralContainers{name}`), as Go's
/// `kubecontainer.GenerateContainerRef`.
pub fn container_ref(pod: &Pod, container: &str) -> ObjectReference {
    let spec = pod.spec.as_ref();
    let init = spec
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == container));
    let ephemeral = spec
        .and_then(|s| s.ephemeral_containers.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == container));
    let field = if init {
        "initContainers"
    } else if ephemeral {
        "ephemeralContainers"
    } else {
        "containers"
    };
    ObjectReference {
        field_path: Some(format!("spec.{field}{{{container}}}")),
        ..pod_ref(pod)
    }
}

/// The reference to this node, as Go's node reference (its UID is the node's name).
pub fn node_ref(node_name: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("Node".into()),
        name: Some(node_name.into()),
        uid: Some(node_name.into()),
        ..Default::default()
    }
}

/// The Go kubelet's event reasons (`pkg/kubelet/events/event.go`) that the kubelet emits.
pub mod reason {
    /// A container was created.
    pub const CREATED: &str = "Created";
    /// A container was started.
    pub const STARTED: &str = "Started";
    /// Creating or starting a container, or pulling its image, failed.
    pub const FAILED: &str = "Failed";
    /// A container is being stopped.
    pub const KILLING: &str = "Killing";
    /// A crash-looping container, or an image pull, is backing off.
    pub const BACK_OFF: &str = "BackOff";
    /// Killing a pod failed.
    pub const FAILED_KILL_POD: &str = "FailedKillPod";
    /// An image pull starts.
    pub const PULLING: &str = "Pulling";
    /// An image was pulled, or was already there.
    pub const PULLED: &str = "Pulled";
    /// An image could not be inspected.
    pub const INSPECT_FAILED: &str = "InspectFailed";
    /// An image is missing and its pull policy is Never.
    pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
    /// The pod's sandbox is replaced.
    pub const SANDBOX_CHANGED: &str = "SandboxChanged";
    /// The pod's sandbox could not be created.
    pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
    /// A probe failed.
    pub const UNHEALTHY: &str = "Unhealthy";
    /// A probe succeeded with a warning.
    pub const PROBE_WARNING: &str = "ProbeWarning";
    /// A postStart hook failed.
    pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
    /// A preStop hook failed.
    pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
    /// The eviction manager evicted the pod.
    pub const EVICTED: &str = "Evicted";
    /// `envFrom` keys were left out of a container's environment as invalid names (the Go
    /// kubelet's literal in `makeEnvironmentVariables`, 1.28–1.29).
    pub const INVALID_ENVIRONMENT_VARIABLE_NAMES: &str = "InvalidEnvironmentVariableNames";
    /// A volume could not be set up (Go's `FailedMountVolume`).
    pub const FAILED_MOUNT: &str = "FailedMount";
    /// The kernel killed a process outside the node's containers because the machine ran
    /// out of memory (Go's OOM watcher, on the Node).
    pub const SYSTEM_OOM: &str = "SystemOOM";
}

/// One event a [`MemoryRecorder`] kept: object name, field path, type, reason, message.
#[cfg(test)]
pub type Recorded = (String, String, EventType, String, String);

/// A test double keeping what it was told.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct MemoryRecorder {
    /// The events, in order.
    pub events: std::sync::Mutex<Vec<Recorded>>,
}

#[cfg(test)]
impl EventRecorder for MemoryRecorder {
    fn record(&self, object: &ObjectReference, kind: EventType, reason: &str, message: &str) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        events.push((
            object.name.clone().unwrap_or_default(),
            object.field_path.clone().unwrap_or_default(),
            kind,
            reason.to_owned(),
            message.to_owned(),
        ));
    }
}
