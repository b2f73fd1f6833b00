//! `ferrolet-cri`: a CRI v1 runtime and image service on containerd.
//!
//! Module map:
//! - [`config`]: the TOML config and its defaults; flags override it.
//! - [`cli`]: the command line, and how flags, the config file and defaults combine.
//! - [`server`]: the gRPC server on a unix socket, graceful shutdown.
//! - [`runtime`]: the CRI RuntimeService: shared state, task-exit events, recovery, stats, Status.
//! - [`sandbox`]: pod sandboxes: lifecycle, pod network (netns + CNI), shared files.
//! - [`container`]: containers: lifecycle, status, FIFO IO, CRI log files, exec.
//! - [`oci`]: OCI runtime specs for pause and application containers.
//! - [`task`]: containerd plumbing: snapshots, container records, tasks.
//! - [`store`]: in-memory indexes and the records kept under `root`.
//! - [`mount`]: reading an image's /etc from snapshot mounts; tmpfs mounts.
//! - [`stats`]: container and pod stats from containerd's task metrics.
//! - [`image`]: the CRI ImageService: pull, list, status, remove, fs info, the pause image.
//! - [`reference`]: image reference parsing and normalization, as Kubernetes users expect.
//! - [`registry`]: the registry v2 client: hosts and mirrors, auth, manifests, blobs.
//! - [`content`]: verified blob writes into containerd's content store.
//! - [`oci_layout`]: OCI image layouts, and leases.
//! - [`archive`]: OCI and Docker image archives, as OCI layouts.
//! - [`logging`]: text or JSON logs with per-call spans.

pub mod archive;
pub mod cli;
pub mod config;
pub mod container;
pub mod content;
pub mod image;
pub mod logging;
pub mod mount;
pub mod oci;
pub mod oci_layout;
pub mod reference;
pub mod registry;
pub mod runtime;
pub mod sandbox;
pub mod server;
pub mod stats;
pub mod store;
pub mod task;
