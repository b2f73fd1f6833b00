//! containerd's runtime v2 shim API (`containerd.task.v2.Task`, served over [`crate::ttrpc`]),
//! and the runc shim's task options, field numbers as in containerd's
//! `api/runtime/task/v2/shim.proto` and `api/types/runc/options/oci.proto`. containerd-client
//! ships neither: it is a client of containerd, not of shims.

use prost::Message;
use prost_types::{Any, Timestamp};

use crate::containerd::types::Mount;
pub use crate::containerd::types::v1::{ProcessInfo, Status as ProcessStatus};

/// The service name containerd 1.6–2.x call shims by (task API v2).
pub const SERVICE_V2: &str = "containerd.task.v2.Task";
/// The same service under task API v3 (containerd 2.x, when a shim's bootstrap asks for it).
pub const SERVICE_V3: &str = "containerd.task.v3.Task";

/// `Create`: a container's init process from an OCI bundle.
#[derive(Clone, PartialEq, Message)]
pub struct CreateTaskRequest {
    /// Container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// The bundle directory (config.json, rootfs).
    #[prost(string, tag = "2")]
    pub bundle: String,
    /// Mounts that make the bundle's rootfs.
    #[prost(message, repeated, tag = "3")]
    pub rootfs: Vec<Mount>,
    /// Give the process a pseudo-terminal.
    #[prost(bool, tag = "4")]
    pub terminal: bool,
    /// Stdin (a FIFO path), empty for none.
    #[prost(string, tag = "5")]
    pub stdin: String,
    /// Stdout: a FIFO path or a `file://`/`binary://` URI.
    #[prost(string, tag = "6")]
    pub stdout: String,
    /// Stderr, like stdout.
    #[prost(string, tag = "7")]
    pub stderr: String,
    /// Checkpoint to restore from (unsupported here).
    #[prost(string, tag = "8")]
    pub checkpoint: String,
    /// Parent checkpoint (unsupported here).
    #[prost(string, tag = "9")]
    pub parent_checkpoint: String,
    /// The runtime's options ([`RuncOptions`]).
    #[prost(message, optional, tag = "10")]
    pub options: Option<Any>,
}

/// `Create`'s answer.
#[derive(Clone, PartialEq, Message)]
pub struct CreateTaskResponse {
    /// The init process's pid.
    #[prost(uint32, tag = "1")]
    pub pid: u32,
}

/// Names a process: a container's init (`exec_id` empty) or one of its execs.
#[derive(Clone, PartialEq, Message)]
pub struct ProcessRef {
    /// Container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Exec id, empty for the init process.
    #[prost(string, tag = "2")]
    pub exec_id: String,
}

/// `Delete`, `State`, `Start` and `Wait` take a [`ProcessRef`].
pub type DeleteRequest = ProcessRef;
/// See [`DeleteRequest`].
pub type StateRequest = ProcessRef;
/// See [`DeleteRequest`].
pub type StartRequest = ProcessRef;
/// See [`DeleteRequest`].
pub type WaitRequest = ProcessRef;

/// `Delete`'s answer.
#[derive(Clone, PartialEq, Message)]
pub struct DeleteResponse {
    /// The process's pid.
    #[prost(uint32, tag = "1")]
    pub pid: u32,
    /// Its exit status.
    #[prost(uint32, tag = "2")]
    pub exit_status: u32,
    /// When it exited.
    #[prost(message, optional, tag = "3")]
    pub exited_at: Option<Timestamp>,
}

/// `Exec`: an extra process in a running container.
#[derive(Clone, PartialEq, Message)]
pub struct ExecProcessRequest {
    /// Container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// The new process's id.
    #[prost(string, tag = "2")]
    pub exec_id: String,
    /// Give it a pseudo-terminal.
    #[prost(bool, tag = "3")]
    pub terminal: bool,
    /// Stdin FIFO, empty for none.
    #[prost(string, tag = "4")]
    pub stdin: String,
    /// Stdout FIFO or URI.
    #[prost(string, tag = "5")]
    pub stdout: String,
    /// Stderr FIFO or URI.
    #[prost(string, tag = "6")]
    pub stderr: String,
    /// The OCI `Process` (JSON in an Any).
    #[prost(message, optional, tag = "7")]
    pub spec: Option<Any>,
}

/// `ResizePty`.
#[derive(Clone, PartialEq, Message)]
pub struct ResizePtyRequest {
    /// Container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Exec id, empty for init.
    #[prost(string, tag = "2")]
    pub exec_id: String,
    /// Columns.
    #[prost(uint32, tag = "3")]
    pub width: u32,
    /// Rows.
    #[prost(uint32, tag = "4")]
    pub height: u32,
}

/// `State`'s answer.
#[derive(Clone, PartialEq, Message)]
pub struct StateResponse {
    /// Container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Bundle directory.
    #[prost(string, tag = "2")]
    pub bundle: String,
    /// Pid (0 before it started).
    #[prost(uint32, tag = "3")]
    pub pid: u32,
    /// [`ProcessStatus`] as a number.
    #[prost(enumeration = "ProcessStatus", tag = "4")]
    pub status: i32,
    /// Stdin as given.
    #[prost(string, tag = "5")]
    pub stdin: String,
    /// Stdout as given.
    #[prost(string, tag = "6")]
    pub stdout: String,
    /// Stderr as given.
    #[prost(string, tag = "7")]
    pub stderr: String,
    /// Has a terminal.
    #[prost(bool, tag = "8")]
    pub terminal: bool,
    /// Exit status once stopped.
    #[prost(uint32, tag = "9")]
    pub exit_status: u32,
    /// Exit time once stopped.
    #[prost(message, optional, tag = "10")]
    pub exited_at: Option<Timestamp>,
    /// Exec id, empty for init.
    #[prost(string, tag = "11")]
    pub exec_id: String,
}

/// `Kill`.
#[derive(Clone, PartialEq, Message)]
pub struct KillRequest {
    /// Container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Exec id, empty for init.
    #[prost(string, tag = "2")]
    pub exec_id: String,
    /// Signal number.
    #[prost(uint32, tag = "3")]
    pub signal: u32,
    /// Every process of the container, not just the one named.
    #[prost(bool, tag = "4")]
    pub all: bool,
}

/// `CloseIO`.
#[derive(Clone, PartialEq, Message)]
pub struct CloseIoRequest {
    /// Container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Exec id, empty for init.
    #[prost(string, tag = "2")]
    pub exec_id: String,
    /// Close the process's stdin.
    #[prost(bool, tag = "3")]
    pub stdin: bool,
}

/// `Pids`, `Stats`, `Connect`, `Pause`, `Resume`: by container id.
#[derive(Clone, PartialEq, Message)]
pub struct ContainerRef {
    /// Container id.
    #[prost(string, tag = "1")]
    pub id: String,
}

/// `Pids`'s answer.
#[derive(Clone, PartialEq, Message)]
pub struct PidsResponse {
    /// The container's processes.
    #[prost(message, repeated, tag = "1")]
    pub processes: Vec<ProcessInfo>,
}

/// The `info` of a [`ProcessInfo`] that is an exec (`containerd.runc.v1.ProcessDetails`).
#[derive(Clone, PartialEq, Message)]
pub struct ProcessDetails {
    /// The exec's id.
    #[prost(string, tag = "1")]
    pub exec_id: String,
}

/// `Update`.
#[derive(Clone, PartialEq, Message)]
pub struct UpdateTaskRequest {
    /// Container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// The OCI `LinuxResources` (JSON in an Any).
    #[prost(message, optional, tag = "2")]
    pub resources: Option<Any>,
    /// Annotations.
    #[prost(map = "string, string", tag = "3")]
    pub annotations: std::collections::HashMap<String, String>,
}

/// `Start`'s answer.
#[derive(Clone, PartialEq, Message)]
pub struct StartResponse {
    /// The started process's pid.
    #[prost(uint32, tag = "1")]
    pub pid: u32,
}

/// `Wait`'s answer.
#[derive(Clone, PartialEq, Message)]
pub struct WaitResponse {
    /// Exit status.
    #[prost(uint32, tag = "1")]
    pub exit_status: u32,
    /// Exit time.
    #[prost(message, optional, tag = "2")]
    pub exited_at: Option<Timestamp>,
}

/// `Stats`' answer.
#[derive(Clone, PartialEq, Message)]
pub struct StatsResponse {
    /// cgroup v1 or v2 metrics ([`crate::cgroup_metrics`]).
    #[prost(message, optional, tag = "1")]
    pub stats: Option<Any>,
}

/// `Connect`'s answer.
#[derive(Clone, PartialEq, Message)]
pub struct ConnectResponse {
    /// The shim's pid.
    #[prost(uint32, tag = "1")]
    pub shim_pid: u32,
    /// The task's init pid.
    #[prost(uint32, tag = "2")]
    pub task_pid: u32,
    /// Shim version.
    #[prost(string, tag = "3")]
    pub version: String,
}

/// `Shutdown`.
#[derive(Clone, PartialEq, Message)]
pub struct ShutdownRequest {
    /// Container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Exit even with tasks left.
    #[prost(bool, tag = "2")]
    pub now: bool,
}

/// Any-typed name of [`RuncOptions`].
pub const RUNC_OPTIONS_TYPE: &str = "containerd.runc.v1.Options";

/// The runc shim's task options (`containerd.runc.v1.Options`), which ours takes too.
#[derive(Clone, PartialEq, Message)]
pub struct RuncOptions {
    /// runc's `--no-pivot`.
    #[prost(bool, tag = "1")]
    pub no_pivot_root: bool,
    /// runc's `--no-new-keyring`.
    #[prost(bool, tag = "2")]
    pub no_new_keyring: bool,
    /// The OCI runtime the shim runs instead of `runc` (`BinaryName`).
    #[prost(string, tag = "6")]
    pub binary_name: String,
    /// The OCI runtime's state root (`--root`).
    #[prost(string, tag = "7")]
    pub root: String,
    /// The runtime manages cgroups through systemd (`--systemd-cgroup`).
    #[prost(bool, tag = "9")]
    pub systemd_cgroup: bool,
}
