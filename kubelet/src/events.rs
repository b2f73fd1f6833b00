//! What the kubelet tells people about objects, as `core/v1` Events: the recorder seam. Parts
//! that have something to say take an `Arc<dyn EventRecorder>`; in a cluster it is the
//! aggregating, rate-limited API writer (`event_recorder`), standalone it only logs.

#![allow(dead_code)] // TEMP: until app wiring of API-server mode lands

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

/// The reference to one container of a pod (`fieldPath: spec.containers{name}`, or
/// `spec.initContainers{name}`), as Go's `kubecontainer.GenerateContainerRef`.
pub fn container_ref(pod: &Pod, container: &str) -> ObjectReference {
    let spec = pod.spec.as_ref();
    let init = spec
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == container));
    let field = if init { "initContainers" } else { "containers" };
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
