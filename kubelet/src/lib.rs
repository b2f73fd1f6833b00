//! `ferrolet`: a kubelet that drives pods to their desired state through CRI.
//!
//! Module map, by layer (a module imports only its own layer or lower ones; see
//! ARCHITECTURE.md and `integration/tests/module_layers.rs`):
//! - process: [`app`], the only public module (the binary calls [`app::main`]); `check`
//!   (`ferrolet check`, the node's preflight); `trace`
//!   (`ferrolet trace pod`, a client of the timeline endpoint).
//! - assembly: `config` (KubeletConfiguration + flags, assembling the managers' own config
//!   types), `kubelet` (desired pods, the sync loop, housekeeping), `sync_pod` (SyncPod and
//!   KillPod carrying out the actions), `view` (the kubelet as the servers see it), `server`
//!   (read-only, healthz and secure HTTP APIs, `/stats/summary`, `/metrics`, the streaming
//!   endpoints `/exec`, `/attach`, `/portForward`, `/run` proxied to the runtime).
//! - managers: `pod_actions` (what one sync does, pure), `pod_workers` (one task per pod),
//!   `images` (pull policies, back-off), `prober`, `lifecycle` (hooks), `gc`, `stats` (the
//!   Summary API), `eviction`, `log_rotation`, `admission` (does a pod fit the node, pure),
//!   `node_status` (registration, the Node's status, the node Lease), `status_manager` (pod
//!   statuses written to the API, pods deleted when done), `mirror_pods` (static pods'
//!   mirrors in the API), `event_recorder` (events written to the API server: correlation,
//!   spam filter, patches of repeats), `volume_manager` (desired and actual state of the
//!   pods' volumes, the reconciler that sets them up, refreshes and tears them down,
//!   reconstruction from disk at start), `cm` (the container manager: the `kubepods` cgroup
//!   tree, node allocatable, pod cgroups, the static CPU manager, OOM watching).
//! - runtime access: `cri` (the CRI client), `pleg` (events and the runtime pod cache),
//!   `certificate` (the API client's kubeconfig, TLS bootstrap, certificate rotation),
//!   `object_cache` (the secret and configMap managers: watches, TTL cache or GETs),
//!   `token` (the token manager: bound service-account tokens from TokenRequest),
//!   `plugin_manager` (plugins' registration sockets: CSI drivers announcing themselves),
//!   `csi` (CSI drivers: their registration and versions), `storage_api` (claims, persistent
//!   volumes and the node's labels, read for the volume manager).
//! - pod model: `manifest`, `source` (directory, URL and API server sources, their merge),
//!   `podspec` (a pod as CRI configs), `volume`, `status` (the API PodStatus), `credentials`.
//! - foundations: `types`, `cri_log`, `backoff`, `metrics` (the process-wide
//!   recorder), `node`, `logging`, `heap`, `kube_client` (the API client handle), `events`
//!   (the event recorder seam), `objects` (the secret/configMap/token/storage seam), `timeline` (the
//!   per-pod start timelines: the bounded store, its JSON and table), `yaml` (the nesting
//!   bound YAML from files and URLs is checked against first).

pub(crate) mod admission;
pub(crate) mod allocation;
pub mod app;
pub(crate) mod backoff;
pub(crate) mod certificate;
pub(crate) mod check;
pub(crate) mod cm;
pub(crate) mod config;
pub(crate) mod credentials;
pub(crate) mod cri;
pub(crate) mod cri_log;
#[allow(dead_code)] // wired into the kubelet next (issue #35)
pub(crate) mod csi;
pub(crate) mod event_recorder;
pub(crate) mod events;
pub(crate) mod eviction;
pub(crate) mod gc;
pub(crate) mod heap;
pub(crate) mod images;
pub(crate) mod kube_client;
pub(crate) mod kubelet;
pub(crate) mod lifecycle;
pub(crate) mod log_rotation;
pub(crate) mod logging;
pub(crate) mod manifest;
pub(crate) mod metrics;
pub(crate) mod mirror_pods;
pub(crate) mod node;
pub(crate) mod node_status;
pub(crate) mod object_cache;
pub(crate) mod objects;
pub(crate) mod pleg;
pub(crate) mod plugin_manager;
pub(crate) mod pod_actions;
pub(crate) mod pod_workers;
pub(crate) mod podspec;
pub(crate) mod prober;
pub(crate) mod server;
pub(crate) mod source;
pub(crate) mod stats;
pub(crate) mod status;
pub(crate) mod status_manager;
pub(crate) mod storage_api;
pub(crate) mod sync_pod;
pub(crate) mod timeline;
pub(crate) mod token;
pub(crate) mod trace;
pub(crate) mod types;
pub(crate) mod userns;
pub(crate) mod view;
pub(crate) mod volume;
pub(crate) mod volume_manager;
pub(crate) mod yaml;

/// What the benchmarks (`kubelet/benches`) drive directly, below the process; not an API.
#[doc(hidden)]
pub mod bench_support {
    pub use crate::prober::check::Outcome;
    pub use crate::prober::dial;
    pub use crate::prober::http::{self, HttpGet, MAX_BODY};
}
