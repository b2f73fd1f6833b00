//! Pod sandboxes: what one is ([`Sandbox`]), the files it shares with its containers
//! ([`files`]), its network ([`network`]) and, when it runs without a pause process, its
//! pinned IPC and UTS namespaces ([`namespaces`]). The CRI calls on sandboxes are in
//! `runtime::sandbox_lifecycle` and `runtime::sandbox_status`.

pub mod files;
pub mod namespaces;
pub mod network;
pub mod userns;

use std::path::PathBuf;
use std::sync::Mutex;

use ferrolet_proto::cri;
use serde::{Deserialize, Serialize};

use self::files::SandboxFiles;
use self::namespaces::PinnedNamespaces;
use self::network::PodIps;
use crate::store::{Named, proto_b64};

/// What never changes about a sandbox once it runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SandboxMeta {
    /// 64 hex digits.
    pub id: String,
    /// The CRI reservation key (`name_namespace_uid_attempt`).
    pub name: String,
    /// The request's config.
    #[serde(with = "proto_b64")]
    pub config: cri::PodSandboxConfig,
    /// The runtime handler asked for.
    pub runtime_handler: String,
    /// containerd's runtime (shim) type of its record and tasks, and of its containers'.
    #[serde(default = "crate::task::legacy_runtime_type")]
    pub runtime_type: String,
    /// The pinned network namespace; `None` with host networking.
    pub netns: Option<PathBuf>,
    /// hostname, hosts, resolv.conf, shm.
    pub files: SandboxFiles,
    /// The pause container's cgroup.
    pub cgroups_path: String,
    /// Set when the sandbox runs without a pause process: its IPC and UTS namespaces, pinned
    /// on files. `None`: a pause process holds them (records older than this field too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<PinnedNamespaces>,
    /// The pod's pinned user namespace (`hostUsers: false`), which owns its netns, IPC and
    /// UTS namespaces; its pause process, if any, and every container join it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userns: Option<userns::PinnedUserns>,
    /// The sandbox image, as configured.
    pub image: String,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
}

/// Whether the sandbox is up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxState {
    /// Being created, or stopped.
    #[default]
    NotReady,
    /// Its namespaces and network are up (and its pause process runs, when it has one).
    Ready,
}

/// What changes over a sandbox's life (kept on disk too).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SandboxStatus {
    /// Ready or not.
    pub state: SandboxState,
    /// The pause process, while it runs; 0 without one.
    pub pid: u32,
    /// Addresses from CNI.
    pub ips: PodIps,
    /// CNI ADD may have run and no DEL has since: true from the record written before the
    /// ADD starts, so a stop after a crash mid-start still releases what it reserved.
    pub network_up: bool,
    /// StopPodSandbox finished (idempotent stops skip the work).
    pub stopped: bool,
    /// Where its RunPodSandbox went (served in the verbose PodSandboxStatus, for the
    /// kubelet's start timeline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timings: Option<StartTimings>,
}

impl SandboxStatus {
    /// The status recorded before a sandbox is made: not ready, and with its network to tear
    /// down when it has a netns of its own (CNI DEL is idempotent; an IP reserved by an ADD
    /// that a crash cut short would otherwise stay reserved).
    pub fn starting(meta: &SandboxMeta) -> Self {
        Self {
            network_up: meta.netns.is_some(),
            ..Self::default()
        }
    }
}

/// How long the parts of a RunPodSandbox took, milliseconds. The network and the pause
/// container are set up at the same time, so they overlap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartTimings {
    /// The sandbox's files (hostname, hosts, resolv.conf, shm).
    pub files_ms: f64,
    /// Making the network namespace (and the pinned IPC and UTS ones, without a pause).
    pub netns_ms: f64,
    /// Loopback up and the CNI ADD of the plugin chain.
    pub cni_add_ms: f64,
    /// The pause container: snapshot, record, task created and started; absent when the
    /// sandbox has no pause process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_ms: Option<f64>,
}

/// The record on disk: `<root>/sandboxes/<id>/sandbox.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SandboxRecord {
    /// Fixed part.
    pub meta: SandboxMeta,
    /// Changing part.
    pub status: SandboxStatus,
}

/// A sandbox in the index.
#[derive(Debug)]
pub struct Sandbox {
    /// Fixed part.
    pub meta: SandboxMeta,
    /// Changing part.
    pub status: Mutex<SandboxStatus>,
    /// Serializes lifecycle calls on this sandbox (stop vs. remove vs. create container).
    pub op: tokio::sync::Mutex<()>,
    /// Serializes record writes; true once removed, so a late exit cannot write it back.
    removed: tokio::sync::Mutex<bool>,
}

impl Named for Sandbox {
    fn id(&self) -> &str {
        &self.meta.id
    }
}

impl Sandbox {
    /// A sandbox entry.
    pub fn new(meta: SandboxMeta, status: SandboxStatus) -> Self {
        Self {
            meta,
            status: Mutex::new(status),
            op: tokio::sync::Mutex::new(()),
            removed: tokio::sync::Mutex::new(false),
        }
    }

    /// Writes the record under `root`, unless the sandbox has been removed.
    pub async fn persist(&self, root: &std::path::Path) -> Result<(), crate::store::StoreError> {
        let removed = self.removed.lock().await;
        if *removed {
            return Ok(());
        }
        crate::store::write_record(&record_path(root, &self.meta.id), &self.record()).await
    }

    /// Marks the sandbox removed: no record write happens from now on.
    pub async fn mark_removed(&self) {
        *self.removed.lock().await = true;
    }

    /// A copy of the changing part.
    pub fn status(&self) -> SandboxStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Changes the changing part.
    pub fn update<R>(&self, f: impl FnOnce(&mut SandboxStatus) -> R) -> R {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The record to persist.
    pub fn record(&self) -> SandboxRecord {
        SandboxRecord {
            meta: self.meta.clone(),
            status: self.status(),
        }
    }

    /// The pod's metadata.
    pub fn metadata(&self) -> cri::PodSandboxMetadata {
        self.meta.config.metadata.clone().unwrap_or_default()
    }

    /// The namespace options the pod asked for.
    pub fn namespace_options(&self) -> cri::NamespaceOption {
        self.meta
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone())
            .unwrap_or_default()
    }
}

/// Where a sandbox's record lives.
pub fn record_path(root: &std::path::Path, id: &str) -> PathBuf {
    root.join("sandboxes").join(id).join("sandbox.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_made_before_runtime_types_keeps_the_runc_shim() {
        let mut record = serde_json::json!({
            "id": "a", "name": "n", "config": "", "runtime_handler": "", "netns": null,
            "files": {"dir": "/d", "hostname": "/d/h", "hosts": "/d/hosts",
                      "resolv_conf": "/d/r", "shm": null},
            "cgroups_path": "", "image": "i", "created_at": 1
        });
        let old: SandboxMeta = serde_json::from_value(record.clone()).unwrap();
        assert_eq!(old.runtime_type, "io.containerd.runc.v2");
        record["runtime_type"] = "io.containerd.ferrolet.v1".into();
        let new: SandboxMeta = serde_json::from_value(record).unwrap();
        assert_eq!(new.runtime_type, "io.containerd.ferrolet.v1");
    }
}
