//! The container manager proper, as the Go kubelet's `containerManagerImpl` with its QoS and
//! pod container managers (cgroupfs names below; the systemd driver's are
//! `kubepods.slice`, `kubepods-burstable.slice`, `kubepods-burstable-pod<uid>.slice`):
//!
//! ```text
//! <cgroupRoot>/kubepods                 node allocatable (memory, cpu shares, pids, huge pages)
//! <cgroupRoot>/kubepods/pod<uid>        a Guaranteed pod: its summed limits plus overhead
//! <cgroupRoot>/kubepods/burstable       shares of the Burstable pods' cpu requests
//! <cgroupRoot>/kubepods/burstable/pod<uid>
//! <cgroupRoot>/kubepods/besteffort      2 shares
//! <cgroupRoot>/kubepods/besteffort/pod<uid>
//! ```
//!
//! The runtime makes the containers' cgroups under a pod's (its `cgroup_parent`). Everything
//! here writes cgroup files, so it is synchronous: the kubelet calls it from blocking tasks.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::allocatable::{self, AllocatableError, Capacity};
use super::cgroup::{CgroupError, CgroupManager, CgroupName, Layout, Systemd};
use super::pod_config::resource_config_for_pod;
use super::qos::qos_cgroup_configs;
use super::{CgroupDriver, ResourceConfig, Settings};
use crate::podspec::SpecError;
use crate::podspec::qos::{QosClass, qos_class};
use crate::types::Pod;

/// The QoS cgroups' names under `kubepods`.
const BURSTABLE: &str = "burstable";
const BEST_EFFORT: &str = "besteffort";
/// Go's `tryKillingCgroupProcesses`: this many rounds of SIGKILL, a second apart.
const KILL_ROUNDS: u32 = 5;

/// Why the container manager could not do something.
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    /// A cgroup could not be made, written, read or removed.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// Node allocatable does not add up.
    #[error(transparent)]
    Allocatable(#[from] AllocatableError),
    /// A pod's resources do not parse.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// Go's words when `cgroupRoot` is missing.
    #[error("invalid configuration: cgroup-root {0:?} doesn't exist")]
    CgroupRootMissing(String),
    /// `kube-reserved` / `system-reserved` enforcement names a cgroup that is not there.
    #[error("{what} cgroup {name:?} does not exist")]
    ReservedCgroupMissing {
        /// `kube reserved` or `system reserved`.
        what: &'static str,
        /// The cgroup named.
        name: String,
    },
    /// A blocking task running it failed.
    #[error("container manager task: {0}")]
    Join(String),
    /// Processes outlived every SIGKILL round (Go's words).
    #[error("failed to kill all the processes attached to cgroup {0}")]
    Unkillable(String),
}

/// The kubelet's cgroup tree; `None` from [`ContainerManager::start`] when `cgroupsPerQOS`
/// is off (the pods then go straight under `cgroupRoot`, as Go's no-op pod manager).
#[derive(Debug)]
pub struct ContainerManager {
    settings: Settings,
    cgroups: CgroupManager,
    kubepods: CgroupName,
    capacity: Capacity,
    allocatable_memory: i64,
    hugepage_sizes: Vec<u64>,
    // QoS updates read every active pod and pod cgroups are made under them: one at a time,
    // as Go's QoS container manager holds its lock.
    lock: Mutex<()>,
}

impl ContainerManager {
    /// Validates the node against the settings and builds the top of the tree: `kubepods`
    /// with node allocatable, the reserved cgroups' limits when enforced, the QoS cgroups, in
    /// the node's cgroup `layout`.
    pub fn start(
        settings: Settings,
        capacity: Capacity,
        layout: Layout,
    ) -> Result<Option<Self>, CmError> {
        if !settings.cgroups_per_qos {
            return Ok(None);
        }
        layout.validate_required_controllers()?;
        let hugepage_sizes: Vec<u64> = capacity.hugepages.keys().copied().collect();
        let size_names = hugepage_sizes
            .iter()
            .filter_map(|&s| crate::podspec::resources::hugepage_unit_size(s))
            .collect();
        let mut cgroups = CgroupManager::new(layout).with_hugepage_sizes(size_names);
        if settings.cgroup_driver == CgroupDriver::Systemd {
            cgroups = cgroups.with_systemd(Systemd::connect().map_err(CgroupError::from)?);
        }
        Self::start_on(settings, capacity, cgroups, hugepage_sizes).map(Some)
    }

    /// [`ContainerManager::start`] on a given cgroup manager (a scratch tree in tests).
    pub fn start_on(
        settings: Settings,
        capacity: Capacity,
        cgroups: CgroupManager,
        hugepage_sizes: Vec<u64>,
    ) -> Result<Self, CmError> {
        let root = CgroupName::from_cgroupfs(&settings.cgroup_root);
        if !root.is_root() && !cgroups.exists(&root) {
            return Err(CmError::CgroupRootMissing(settings.cgroup_root.clone()));
        }
        let kubepods = root.join("kubepods")?;
        let enforce = |key: &str| settings.enforce_node_allocatable.iter().any(|e| e == key);
        let allocatable = allocatable::node_allocatable_config(
            &capacity,
            &settings.kube_reserved,
            &settings.system_reserved,
            enforce("pods"),
        )?;
        let allocatable_memory = allocatable::allocatable_absolute(
            &capacity,
            &settings.kube_reserved,
            &settings.system_reserved,
        )?
        .memory;
        if cgroups.exists(&kubepods) {
            cgroups.update(&kubepods, &allocatable)?;
        } else {
            cgroups.create(&kubepods, &allocatable)?;
        }
        for (what, key, name, reserved) in [
            (
                "kube reserved",
                "kube-reserved",
                &settings.kube_reserved_cgroup,
                &settings.kube_reserved,
            ),
            (
                "system reserved",
                "system-reserved",
                &settings.system_reserved_cgroup,
                &settings.system_reserved,
            ),
        ] {
            if !enforce(key) {
                continue;
            }
            let cgroup = CgroupName::from_cgroupfs(name);
            if !cgroups.exists(&cgroup) {
                return Err(CmError::ReservedCgroupMissing {
                    what,
                    name: name.clone(),
                });
            }
            if let Some(config) = allocatable::reserved_cgroup_config(reserved)? {
                cgroups.update(&cgroup, &config)?;
            }
        }
        let cm = Self {
            settings,
            cgroups,
            kubepods,
            capacity,
            allocatable_memory,
            hugepage_sizes,
            lock: Mutex::new(()),
        };
        for qos in [BURSTABLE, BEST_EFFORT] {
            let name = cm.kubepods.join(qos)?;
            if !cm.cgroups.exists(&name) {
                cm.cgroups.create(&name, &ResourceConfig::default())?;
            }
        }
        cm.update_qos(&[])?;
        Ok(cm)
    }

    /// `<cgroupRoot>/kubepods`.
    pub fn kubepods(&self) -> &CgroupName {
        &self.kubepods
    }

    /// The cgroup driver's view of the tree.
    pub fn cgroups(&self) -> &CgroupManager {
        &self.cgroups
    }

    /// The QoS cgroup a pod goes under.
    fn qos_parent(&self, class: QosClass) -> Result<CgroupName, CmError> {
        Ok(match class {
            QosClass::Guaranteed => self.kubepods.clone(),
            QosClass::Burstable => self.kubepods.join(BURSTABLE)?,
            QosClass::BestEffort => self.kubepods.join(BEST_EFFORT)?,
        })
    }

    /// The pod's cgroup (Go's `GetPodContainerName`).
    pub fn pod_cgroup(&self, pod: &Pod) -> Result<CgroupName, CmError> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        Ok(self
            .qos_parent(qos_class(pod))?
            .join(&format!("pod{uid}"))?)
    }

    /// Whether the pod's cgroup is there.
    pub fn pod_cgroup_exists(&self, pod: &Pod) -> Result<bool, CmError> {
        Ok(self.cgroups.exists(&self.pod_cgroup(pod)?))
    }

    /// Makes the pod's cgroup with its resources unless it exists (Go's `EnsureExists`); a
    /// new pod first updates the QoS cgroups with the `active` pods (which include it), as
    /// Go's SyncPod does. True when it was made.
    pub fn ensure_pod(&self, pod: &Pod, active: &[&Pod]) -> Result<bool, CmError> {
        let name = self.pod_cgroup(pod)?;
        if self.cgroups.exists(&name) {
            return Ok(false);
        }
        let config = resource_config_for_pod(
            pod,
            self.settings.cpu_cfs_quota,
            u64::try_from(self.settings.cpu_cfs_quota_period.as_micros()).unwrap_or(100_000),
            self.settings.pod_pids_limit,
            self.memory_qos(),
        )?;
        let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.update_qos_locked(active)?;
        self.cgroups.create(&name, &config)?;
        Ok(true)
    }

    /// The pod cgroup's resources for `pod` as it is allocated now (what [`Self::ensure_pod`]
    /// writes), for an in-place resize.
    pub fn pod_resource_config(&self, pod: &Pod) -> Result<ResourceConfig, CmError> {
        Ok(resource_config_for_pod(
            pod,
            self.settings.cpu_cfs_quota,
            u64::try_from(self.settings.cpu_cfs_quota_period.as_micros()).unwrap_or(100_000),
            self.settings.pod_pids_limit,
            self.memory_qos(),
        )?)
    }

    /// What the pod's cgroup is given now, and its memory usage (Go's `GetPodCgroupConfig`,
    /// `GetPodCgroupMemoryUsage`).
    pub fn pod_cgroup_current(&self, pod: &Pod) -> Result<crate::cm::cgroup::Current, CmError> {
        Ok(self.cgroups.current(&self.pod_cgroup(pod)?)?)
    }

    /// Writes `config`'s values (only those it sets) to the pod's cgroup (Go's
    /// `SetPodCgroupConfig`).
    pub fn set_pod_cgroup(&self, pod: &Pod, config: &ResourceConfig) -> Result<(), CmError> {
        Ok(self.cgroups.update(&self.pod_cgroup(pod)?, config)?)
    }

    /// Whether `memory.min` protects pods' requests: the `MemoryQoS` gate, on cgroup v2 only
    /// (Go's `enforceMemoryQoS`).
    fn memory_qos(&self) -> bool {
        self.settings.memory_qos && self.cgroups.layout().mode().is_v2()
    }

    /// Rewrites the QoS cgroups for the `active` pods (Go's `UpdateCgroups`).
    pub fn update_qos(&self, active: &[&Pod]) -> Result<(), CmError> {
        let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.update_qos_locked(active)
    }

    fn update_qos_locked(&self, active: &[&Pod]) -> Result<(), CmError> {
        let configs = qos_cgroup_configs(
            active,
            self.allocatable_memory,
            self.settings.qos_reserved_memory_percent,
            &self.hugepage_sizes,
            self.memory_qos(),
        );
        self.cgroups
            .update(&self.kubepods.join(BURSTABLE)?, &configs.burstable)?;
        self.cgroups
            .update(&self.kubepods.join(BEST_EFFORT)?, &configs.besteffort)?;
        if configs.guaranteed != ResourceConfig::default() {
            self.cgroups.update(&self.kubepods, &configs.guaranteed)?;
        }
        Ok(())
    }

    /// Every pod cgroup in the tree, by pod UID (for the orphan sweep).
    pub fn pod_cgroups(&self) -> Result<Vec<(String, CgroupName)>, CmError> {
        let mut found = Vec::new();
        for parent in [
            self.kubepods.clone(),
            self.kubepods.join(BURSTABLE)?,
            self.kubepods.join(BEST_EFFORT)?,
        ] {
            for child in self.cgroups.children(&parent) {
                if let Some(uid) = child.strip_prefix("pod") {
                    found.push((uid.to_string(), parent.join(&child)?));
                }
            }
        }
        Ok(found)
    }

    /// Removes pod `uid`'s cgroup wherever it is, after killing whatever still runs in it
    /// (Go's `Destroy` with `tryKillingCgroupProcesses`). Missing is success.
    pub fn destroy_pod(&self, uid: &str) -> Result<(), CmError> {
        for (found, name) in self.pod_cgroups()? {
            if found == uid {
                self.destroy(&name)?;
            }
        }
        Ok(())
    }

    fn destroy(&self, name: &CgroupName) -> Result<(), CmError> {
        for round in 0..=KILL_ROUNDS {
            if round > 0 {
                // Killed processes leave the cgroup once reaped: a short wait first, then
                // Go's second between rounds.
                let wait = if round == 1 { 100 } else { 1000 };
                std::thread::sleep(Duration::from_millis(wait));
            }
            let pids = self.cgroups.pids(name);
            if pids.is_empty() {
                self.cgroups.destroy(name)?;
                return Ok(());
            }
            if round == KILL_ROUNDS {
                break;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        Err(CmError::Unkillable(name.to_cgroupfs()))
    }

    /// The node's capacity it was started with.
    #[allow(dead_code)]
    pub fn capacity(&self) -> &Capacity {
        &self.capacity
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
