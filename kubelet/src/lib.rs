//! `ferrolet`: a kubelet that drives pods to their desired state through CRI.
//!
//! Module map:
//! - [`types`]: pod updates, the runtime's view of a pod, the Go kubelet's label keys.
//! - [`config`]: KubeletConfiguration + flags.
//! - [`manifest`]: manifests: parsing, static-pod identity, defaults, validation.
//! - [`source`]: pod sources (directory, URL) and their merge into one update stream.
//! - [`cri`]: the CRI client (timeouts; the runtime's pods read back by label).
//! - [`podspec`]: a pod as CRI sandbox and container configs.
//! - [`volume`]: emptyDir and hostPath volumes, container mounts.
//! - [`pleg`]: the pod lifecycle event generator and the runtime pod cache.
//! - [`backoff`]: crash-loop and image-pull back-off.
//! - [`status`]: the API PodStatus from the runtime's view.
//! - [`server`]: the read-only HTTP API and healthz.
//! - [`kubelet`]: desired pods, the sync loop, housekeeping; [`pod_workers`]: one task per pod.
//! - [`pod_actions`]: what one sync does (pure); [`sync_pod`]: SyncPod/KillPod, carrying it
//!   out; [`images`]: pull policies.
//! - [`credentials`]: image pull credentials (Docker config files, pull secrets), the keyring.
//! - [`view`]: what the HTTP API reads from the kubelet.
//! - [`gc`]: container, sandbox and image garbage collection.
//! - [`metrics`]: the Prometheus metrics served as `/metrics`.
//! - [`stats`]: the Summary API (`/stats/summary`); [`eviction`]: node-pressure signals,
//!   conditions and evictions.
//! - [`prober`]: liveness, readiness and startup probes; [`lifecycle`]: postStart and preStop
//!   hooks.
//! - [`log_rotation`]: container logs rotated by size through ReopenContainerLog.
//! - [`node`], [`logging`]: node facts, log set-up; [`heap`]: the allocator's tuning and
//!   the return of free pages.

pub mod backoff;
pub mod config;
pub mod credentials;
pub mod cri;
pub mod eviction;
pub mod gc;
pub mod heap;
pub mod images;
pub mod kubelet;
pub mod lifecycle;
pub mod log_rotation;
pub mod logging;
pub mod manifest;
pub mod metrics;
pub mod node;
pub mod pleg;
pub mod pod_actions;
pub mod pod_workers;
pub mod podspec;
pub mod prober;
pub mod server;
pub mod source;
pub mod stats;
pub mod status;
pub mod sync_pod;
pub mod types;
pub mod view;
pub mod volume;
