//! `ferrolet-cri`: a CRI v1 runtime and image service on containerd.
//!
//! Module map, top down. A module imports from its own group or the groups below, never
//! from above, and there are no import cycles (inside a group the imports go one way).
//!
//! Top:
//! - [`server`]: the gRPC server on a unix socket, graceful shutdown.
//! - [`deadline`]: clients' `grpc-timeout` deadlines answered `DEADLINE_EXCEEDED`.
//! - [`cli`]: the command line, and how flags, the config file and defaults combine.
//! - [`logging`]: text or JSON logs with per-call spans.
//!
//! Services, one per CRI service, each RPC in a file named for its object and kind:
//! - [`runtime`]: the CRI RuntimeService: shared state, the sandbox and container calls
//!   (`runtime::{sandbox,container}_{lifecycle,status}`), task-exit events, recovery, stats,
//!   Status.
//! - [`image`]: the CRI ImageService: pull, list, status, remove, fs info, the pause image.
//! - [`streaming`]: the streaming server behind Exec/Attach/PortForward: single-use URL
//!   tokens, the HTTP/1.1 upgrade (SPDY or WebSocket via `ferrolet_proto::streaming`), exec
//!   and attach sessions, port-forward dials inside the sandbox's netns. Below `runtime`,
//!   which implements its `Backend`.
//!
//! Domain, what the services work on:
//! - [`oci`]: OCI runtime specs for pause and application containers.
//! - [`cdi`]: CDI devices: spec files resolved by qualified name, their edits applied to a
//!   container's OCI spec.
//! - [`sandbox`]: what a pod sandbox is; the files it shares; its network (netns + CNI).
//! - [`container`]: what a container is; its FIFO IO, CRI log file (with attach's fan-out),
//!   exec (sync and streaming), attach.
//! - [`stats`]: container and pod stats from containerd's task metrics.
//! - [`archive`]: OCI and Docker image archives, as OCI layouts.
//! - [`oci_layout`]: OCI image layouts: reading them, importing their images.
//! - [`config`]: the TOML config and its defaults; flags override it.
//! - [`registry`]: the registry v2 client: hosts and mirrors, auth, manifests, blobs.
//!
//! Foundations:
//! - [`completion`]: calls that run to their end whatever their client does.
//! - [`task`]: containerd plumbing: snapshots, container records, tasks.
//! - [`shim_socket`]: where a pod's containerd shim listens; the socket a killed one left.
//! - [`content`]: verified blob writes into containerd's content store.
//! - [`lease`]: containerd leases that expire by themselves.
//! - [`store`]: in-memory indexes and the records kept under `root`.
//! - [`mount`]: reading an image's /etc from snapshot mounts; tmpfs mounts.
//! - [`image_config`]: the image config a runtime reads; chain ids.
//! - [`reference`]: image reference parsing and normalization, as Kubernetes users expect.

pub mod archive;
pub mod cdi;
pub mod cli;
pub mod completion;
pub mod config;
pub mod container;
pub mod content;
pub mod deadline;
pub mod idmap;
pub mod image;
pub mod image_config;
pub mod lease;
pub mod logging;
pub mod mount;
pub mod oci;
pub mod oci_layout;
pub mod reference;
pub mod registry;
pub mod runtime;
pub mod sandbox;
pub mod server;
pub mod shim_socket;
pub mod stats;
pub mod store;
pub mod streaming;
pub mod task;
