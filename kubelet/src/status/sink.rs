//! Where computed pod statuses go besides the kubelet's own `/pods`: in a cluster, the status
//! manager that patches them into the API server; standalone, nowhere. The sync path knows
//! only this seam.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PodStatus;

use crate::types::Pod;

/// Receives pod statuses from the sync path; never blocks (implementations queue).
pub trait StatusSink: Send + Sync {
    /// The pod's status after a sync (or its admission rejection).
    fn set_pod_status(&self, pod: &Arc<Pod>, status: &PodStatus);
    /// The pod, being deleted, has no containers or volumes left: its final status may be
    /// sent and the API object removed (Go's `canBeDeleted` path).
    fn pod_terminated(&self, pod: &Arc<Pod>, status: &PodStatus);
    /// The pod as its source shows it now (the API's view of its status included), for the
    /// periodic check of statuses someone else changed.
    fn pod_seen(&self, pod: &Arc<Pod>);
    /// The pod is gone from every source: forget it.
    fn pod_removed(&self, uid: &str);
}

/// Standalone: statuses stay in the kubelet.
#[derive(Debug, Default)]
pub struct NoSink;

impl StatusSink for NoSink {
    fn set_pod_status(&self, _: &Arc<Pod>, _: &PodStatus) {}
    fn pod_terminated(&self, _: &Arc<Pod>, _: &PodStatus) {}
    fn pod_seen(&self, _: &Arc<Pod>) {}
    fn pod_removed(&self, _: &str) {}
}
