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

pub mod app;
pub(crate) mod backoff;
pub(crate) mod config;
pub(crate) mod credentials;
pub(crate) mod cri;
pub(crate) mod cri_log;
pub(crate) mod duration;
pub(crate) mod eviction;
pub(crate) mod gc;
pub(crate) mod heap;
pub(crate) mod images;
pub(crate) mod kubelet;
pub(crate) mod lifecycle;
pub(crate) mod log_rotation;
pub(crate) mod logging;
pub(crate) mod manifest;
pub(crate) mod metrics;
pub(crate) mod node;
pub(crate) mod pleg;
pub(crate) mod pod_actions;
pub(crate) mod pod_workers;
pub(crate) mod podspec;
pub(crate) mod prober;
pub(crate) mod server;
pub(crate) mod source;
pub(crate) mod stats;
pub(crate) mod status;
pub(crate) mod sync_pod;
pub(crate) mod types;
pub(crate) mod view;
pub(crate) mod volume;
