//! Containers: what one is ([`Container`]), its IO over FIFOs ([`io`]), its log file
//! ([`log`]), exec ([`exec`], and streaming exec in [`exec_stream`]) and attach
//! ([`attach`]). The CRI calls on containers are in `runtime::container_lifecycle` and
//! `runtime::container_status`.

pub mod attach;
pub mod exec;
pub mod exec_stream;
pub mod io;
pub mod log;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use ferrolet_proto::containerd::types::Mount;
use ferrolet_proto::cri;
use serde::{Deserialize, Serialize};

use self::io::Fifos;
use crate::store::{Named, proto_b64};

/// The kubelet's annotation carrying the pod's termination grace period, in seconds.
pub const GRACE_ANNOTATION: &str = "io.kubernetes.pod.terminationGracePeriod";

/// A rootfs mount, as containerd's snapshotter returned it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MountRecord {
    /// Mount type (`overlay`, `bind`).
    pub kind: String,
    /// Source.
    pub source: String,
    /// Options.
    pub options: Vec<String>,
}

impl From<&Mount> for MountRecord {
    fn from(m: &Mount) -> Self {
        Self {
            kind: m.r#type.clone(),
            source: m.source.clone(),
            options: m.options.clone(),
        }
    }
}

impl From<&MountRecord> for Mount {
    fn from(m: &MountRecord) -> Self {
        Mount {
            r#type: m.kind.clone(),
            source: m.source.clone(),
            options: m.options.clone(),
            ..Default::default()
        }
    }
}

/// What never changes about a container.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ContainerMeta {
    /// 64 hex digits.
    pub id: String,
    /// Its sandbox.
    pub sandbox_id: String,
    /// containerd's runtime (shim) type of its record and task: its sandbox's.
    #[serde(default = "crate::task::legacy_runtime_type")]
    pub runtime_type: String,
    /// The CRI reservation key.
    pub name: String,
    /// The request's config.
    #[serde(with = "proto_b64")]
    pub config: cri::ContainerConfig,
    /// The image id (config digest).
    pub image_id: String,
    /// The image reference to report (a repo digest when there is one).
    pub image_ref: String,
    /// Where its output goes; empty discards it.
    pub log_path: PathBuf,
    /// Its stdio.
    pub fifos: Fifos,
    /// The writable snapshot's mounts.
    pub rootfs: Vec<MountRecord>,
    /// The signal StopContainer sends first.
    pub stop_signal: i32,
    /// The process as created, the template of every exec.
    pub process: oci_spec::runtime::Process,
    /// The user the process runs as (ContainerStatus.user).
    #[serde(default, with = "crate::store::proto_b64_opt")]
    pub user: Option<cri::ContainerUser>,
    /// The resources its OCI spec was created with, as CRI has them (what the node's
    /// cgroups take of the request): ContainerStatus.resources until an update.
    #[serde(default, with = "crate::store::proto_b64_opt")]
    pub applied_resources: Option<cri::LinuxContainerResources>,
    /// Its cgroup.
    pub cgroups_path: String,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    /// The size at which the kubelet rotates its log (the kubelet's annotation
    /// [`ferrolet_proto::cri::CONTAINER_LOG_MAX_SIZE_ANNOTATION`]); 0: not known, no limit.
    #[serde(default)]
    pub log_max_size: u64,
}

/// CRI's container states.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerState {
    /// Created, not started.
    #[default]
    Created,
    /// Its process runs.
    Running,
    /// Its process ended.
    Exited,
    /// We lost track of it.
    Unknown,
}

impl ContainerState {
    /// As CRI's enum.
    pub fn to_cri(self) -> cri::ContainerState {
        match self {
            ContainerState::Created => cri::ContainerState::ContainerCreated,
            ContainerState::Running => cri::ContainerState::ContainerRunning,
            ContainerState::Exited => cri::ContainerState::ContainerExited,
            ContainerState::Unknown => cri::ContainerState::ContainerUnknown,
        }
    }
}

/// What changes over a container's life (kept on disk too).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ContainerStatus {
    /// State.
    pub state: ContainerState,
    /// The process, while it runs.
    pub pid: u32,
    /// Nanoseconds since the epoch, 0 until started.
    pub started_at: i64,
    /// Nanoseconds since the epoch, 0 until exited.
    pub finished_at: i64,
    /// Exit status.
    pub exit_code: i32,
    /// `Completed`, `Error`, `OOMKilled`, `StartError`, ...
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
    /// Resources after UpdateContainerResources, when any: read back from the updated spec
    /// (as containerd's `copyResourcesToStatus`), not the request.
    #[serde(default, with = "crate::store::proto_b64_opt")]
    pub resources: Option<cri::LinuxContainerResources>,
}

/// A container in the index.
pub struct Container {
    /// Fixed part.
    pub meta: ContainerMeta,
    status: Mutex<ContainerStatus>,
    /// Flips to true once the process has exited (StopContainer waits on it).
    exited: tokio::sync::watch::Sender<bool>,
    /// containerd reported an OOM kill in its cgroup.
    pub oom_killed: AtomicBool,
    /// Its exited task was deleted in containerd (the exit was reaped), so removal has no
    /// task left to delete.
    pub task_reaped: AtomicBool,
    /// container.json exists under root (written with the first status).
    pub meta_written: AtomicBool,
    /// The log pumps, while the process runs.
    pub log: Mutex<Option<log::LogHandle>>,
    /// Our write end of its stdin FIFO (containers created with `stdin`), held so its stdin
    /// stays open between attaches, as containerd does; attach writes through it.
    stdin: Mutex<Option<Arc<tokio::net::unix::pipe::Sender>>>,
    /// Serializes lifecycle calls on this container.
    pub op: tokio::sync::Mutex<()>,
    /// Serializes record writes; true once removed, so a late exit cannot write it back.
    pub removed: tokio::sync::Mutex<bool>,
}

impl Named for Container {
    fn id(&self) -> &str {
        &self.meta.id
    }
}

impl Container {
    /// A container entry.
    pub fn new(meta: ContainerMeta, status: ContainerStatus) -> Self {
        let exited = status.state == ContainerState::Exited;
        Self {
            meta,
            status: Mutex::new(status),
            exited: tokio::sync::watch::Sender::new(exited),
            oom_killed: AtomicBool::new(false),
            task_reaped: AtomicBool::new(false),
            meta_written: AtomicBool::new(false),
            log: Mutex::new(None),
            stdin: Mutex::new(None),
            op: tokio::sync::Mutex::new(()),
            removed: tokio::sync::Mutex::new(false),
        }
    }

    /// A copy of the changing part.
    pub fn status(&self) -> ContainerStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Changes the changing part; wakes exit waiters when it becomes Exited.
    pub fn update<R>(&self, f: impl FnOnce(&mut ContainerStatus) -> R) -> R {
        let (r, exited) = {
            let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
            let r = f(&mut s);
            (r, s.state == ContainerState::Exited)
        };
        if exited {
            self.exited.send_replace(true);
        }
        r
    }

    /// Waits until the process has exited.
    pub async fn wait_exited(&self) {
        let mut rx = self.exited.subscribe();
        // An error means the sender is gone, which only happens when the entry is dropped.
        let _ = rx.wait_for(|e| *e).await;
    }

    /// The container's metadata.
    pub fn metadata(&self) -> cri::ContainerMetadata {
        self.meta.config.metadata.clone().unwrap_or_default()
    }

    /// The grace period the kubelet gave the pod (its `io.kubernetes.pod.terminationGracePeriod`
    /// annotation on the container), which StopPodSandbox honours for containers still
    /// running; none means they are killed at once, as containerd does.
    pub fn pod_grace_period(&self) -> std::time::Duration {
        let secs = self
            .meta
            .config
            .annotations
            .get(GRACE_ANNOTATION)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        std::time::Duration::from_secs(secs)
    }

    /// The log pumps' handle, if running.
    pub fn log_handle(&self) -> Option<log::LogHandle> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sets or clears the log pumps' handle.
    pub fn set_log_handle(&self, handle: Option<log::LogHandle>) {
        *self.log.lock().unwrap_or_else(|p| p.into_inner()) = handle;
    }

    /// Keeps (or, with None, closes) our write end of the process's stdin.
    pub fn set_stdin(&self, stdin: Option<tokio::net::unix::pipe::Sender>) {
        *self.stdin.lock().unwrap_or_else(|p| p.into_inner()) = stdin.map(Arc::new);
    }

    /// The stdin write end, while the container has one open.
    pub fn stdin(&self) -> Option<Arc<tokio::net::unix::pipe::Sender>> {
        self.stdin.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Closes our stdin write end (`stdin_once`); the process sees EOF once no attach is
    /// still writing. Whether it was open.
    pub fn close_stdin(&self) -> bool {
        self.stdin
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_some()
    }
}

/// Where a container's records live.
pub fn record_dir(root: &Path, id: &str) -> PathBuf {
    root.join("containers").join(id)
}
