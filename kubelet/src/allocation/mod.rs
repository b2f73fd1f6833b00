//! In-place pod resize (Go's allocation manager, `pkg/kubelet/allocation`, with the
//! `InPlacePodVerticalScaling` gate): the resources each admitted pod's containers were
//! allocated, checkpointed under the root dir so a restart neither re-admits nor re-applies
//! anything differently ([`checkpoint`]); whether a changed spec may be allocated
//! ([`decision`]: `Infeasible`, `Deferred` or allocated); what the runtime must do to a
//! running container to reach its allocation ([`actuation`]); and how the pod's status shows
//! it ([`status`]: the 1.28 `status.resize` field and the 1.33 conditions).
//!
//! The kubelet syncs a pod with its *allocated* resources in place of the spec's (Go's
//! `UpdatePodFromAllocation`), so nothing the node has not admitted is ever applied.

pub mod actuation;
pub mod checkpoint;
pub mod decision;
pub mod status;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::core::v1::ResourceRequirements;

pub use checkpoint::{PodAllocation, ResizeState};

/// The checkpoint's file name under the root dir (Go 1.33's).
pub const CHECKPOINT_FILE: &str = "allocated_pods_state";

/// Why the allocations could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum AllocationError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The checkpoint.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a checkpoint, or its checksum does not match.
    #[error("{path}: corrupt checkpoint ({reason}); remove it to start afresh")]
    Corrupt {
        /// The checkpoint.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The allocations of every admitted pod, kept on disk after each change.
#[derive(Debug)]
pub struct AllocationManager {
    path: PathBuf,
    pods: Mutex<BTreeMap<String, PodAllocation>>,
}

impl AllocationManager {
    /// Reads the checkpoint under `root_dir` (none yet: no allocations).
    pub fn load(root_dir: &Path) -> Result<Self, AllocationError> {
        let path = root_dir.join(CHECKPOINT_FILE);
        let pods = checkpoint::read(&path)?;
        Ok(Self {
            path,
            pods: Mutex::new(pods),
        })
    }

    /// Pod `uid`'s allocation, if it was admitted.
    pub fn get(&self, uid: &str) -> Option<PodAllocation> {
        self.lock().get(uid).cloned()
    }

    /// Every pod's allocation.
    pub fn all(&self) -> BTreeMap<String, PodAllocation> {
        self.lock().clone()
    }

    /// Sets pod `uid`'s containers' allocated resources (keeping its resize state), and
    /// writes the checkpoint when that changed anything. Blocking (fsync).
    pub fn set_containers(
        &self,
        uid: &str,
        containers: BTreeMap<String, ResourceRequirements>,
    ) -> Result<(), AllocationError> {
        self.change(|pods| {
            let entry = pods.entry(uid.to_string()).or_default();
            if entry.containers == containers {
                return false;
            }
            entry.containers = containers;
            true
        })
    }

    /// Sets (or clears) pod `uid`'s resize state. Blocking (fsync).
    pub fn set_resize(
        &self,
        uid: &str,
        resize: Option<ResizeState>,
    ) -> Result<(), AllocationError> {
        self.change(|pods| match pods.get_mut(uid) {
            Some(entry) if entry.resize != resize => {
                entry.resize = resize;
                true
            }
            _ => false,
        })
    }

    /// Forgets the pods `keep` says no to. Blocking (fsync).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) -> Result<(), AllocationError> {
        self.change(|pods| {
            let before = pods.len();
            pods.retain(|uid, _| keep(uid));
            pods.len() != before
        })
    }

    /// Runs `f` on the allocations and writes them when it says it changed them; a failed
    /// write leaves memory as it was, so memory never claims more than the disk has.
    fn change(
        &self,
        f: impl FnOnce(&mut BTreeMap<String, PodAllocation>) -> bool,
    ) -> Result<(), AllocationError> {
        let mut pods = self.lock();
        let mut next = pods.clone();
        if !f(&mut next) {
            return Ok(());
        }
        checkpoint::write(&self.path, &next)?;
        *pods = next;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PodAllocation>> {
        self.pods.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
