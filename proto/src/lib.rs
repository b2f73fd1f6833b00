//! Ferrolet's wire crate: every byte that crosses a socket between our processes, containerd and
//! CRI clients is defined or carried here.
//!
//! - [`cri`]: the CRI v1 API (`runtime.v1` RuntimeService and ImageService, clients and servers),
//!   re-exported from the maintained `k8s-cri` crate.
//! - [`containerd`]: containerd's gRPC API from `containerd-client`, plus [`containerd::Scope`],
//!   the interceptor that stamps the namespace (and lease) metadata every containerd call needs.
//! - [`transport`]: unix-socket endpoints shared by both sides: a client connector for
//!   `unix:///path` endpoints and a listener that owns its socket file (stale-socket removal,
//!   parent directory, mode); its connections accept any `:authority` a gRPC client sends.
//! - [`raw_h2`] (feature `raw-h2`, and in tests): a frame-by-frame HTTP/2 client that sends
//!   what other gRPC libraries send, to test our servers with.
//! - [`csi`]: the Container Storage Interface's Node service (`csi.v1`), which the kubelet
//!   calls on CSI drivers.
//! - [`pluginregistration`]: the kubelet's plugin registration API (`pluginregistration.v1`),
//!   which CSI and DRA drivers serve on a socket the kubelet's plugin watcher finds.
//! - [`deviceplugin`]: the device plugin API (`deviceplugin.v1beta1`): the kubelet's
//!   registration service and the `DevicePlugin` service plugins serve (`ListAndWatch` streamed).
//! - [`podresources`]: the kubelet's pod resources API (`podresources.v1`) monitoring agents call.
//! - [`go_duration`]: durations as Go writes them (`4h0m0s`), the form Kubernetes and
//!   containerd configuration use.
//! - [`spdy`]: SPDY/3.1 (frames, compressed header blocks, a multiplexed connection), the
//!   transport of Kubernetes' SPDY streaming.
//! - [`streaming`]: exec, attach and port-forward streams over SPDY or WebSocket: the upgrade
//!   handshake, the `*.channel.k8s.io` and `portforward.k8s.io` subprotocols, servers and clients.
//! - [`ttrpc`]: ttrpc framing and messages, the RPC containerd speaks to its runtime shims.
//! - [`task_shim`]: containerd's runtime v2 shim API (`containerd.task.v2.Task`) and the runc
//!   shim's task options, which ferrolet-cri sets and our shim serves.
//! - [`cgroup_metrics`]: containerd/cgroups' v1 and v2 `Metrics`, a task's stats payload.
//! - `fuzzing` (feature `fuzzing`, off by default): entry points for the fuzz targets in `fuzz/`.

pub mod cgroup_metrics;
pub mod containerd;
pub mod csi;
pub mod deviceplugin;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod go_duration;
pub mod pluginregistration;
pub mod podresources;
#[cfg(any(test, feature = "raw-h2"))]
pub mod raw_h2;
pub mod spdy;
pub mod streaming;
pub mod task_shim;
pub mod transport;
pub mod ttrpc;
mod unary;

/// CRI v1 (`runtime.v1`), generated from cri-api v0.32 by `k8s-cri`.
pub mod cri {
    pub use k8s_cri::v1::*;

    /// Container annotation from ferrolet to ferrolet-cri: the size (bytes) at which the
    /// kubelet rotates the container's log (`containerLogMaxSize`). The runtime stops reading
    /// the container's output once its log file holds that much, until the kubelet has
    /// rotated it, so a container logging faster than rotation runs cannot outgrow the limit.
    pub const CONTAINER_LOG_MAX_SIZE_ANNOTATION: &str = "ferrolet.dev/container-log-max-size";
}

pub use prost;
pub use prost_types;
pub use tonic;
