//! `containerd-shim-ferrolet-v1`: a containerd runtime v2 shim (runtime type
//! `io.containerd.ferrolet.v1`). containerd starts one per pod; it runs the pod's containers
//! and exec'd processes with runc (or crun), reaps them, and tells containerd what happened.
//!
//! Built to be small in memory, since one runs per pod: one thread, an epoll loop, no async
//! runtime; outputs go straight from the process into containerd's FIFOs.
//!
//! - [`args`]: containerd's Go-style command line; [`start`] and [`cleanup`] (the `start` and
//!   `delete` commands); [`address`]: the pod's socket and the bundle files naming it.
//! - [`server`]: the daemon's event loop (ttrpc connections, SIGCHLD, pumps, OOM, publisher);
//!   [`service`]: the Task service's calls and exits; [`error`]: their ttrpc statuses.
//! - [`task`]: containers and processes; [`runtime`]: the OCI runtime binary; [`rootfs`]:
//!   rootfs mounts; [`cgroup`]: stats and OOM watches.
//! - [`stdio`], [`io`], [`pump`], [`console`]: process stdio (FIFOs, log URIs, terminals).
//! - [`publisher`]: task events to containerd; [`log`], [`time`]: the shim's log lines.

pub mod address;
pub mod args;
pub mod cgroup;
pub mod cleanup;
pub mod console;
pub mod error;
pub mod io;
pub mod log;
pub mod publisher;
pub mod pump;
pub mod rootfs;
pub mod runtime;
pub mod server;
pub mod service;
pub mod start;
pub mod stdio;
pub mod task;
pub mod time;
