//! The CPU manager (Go's `pkg/kubelet/cm/cpumanager`, 1.28): which CPUs each container may
//! run on. With the `none` policy nothing is pinned; with `static`, Guaranteed containers
//! with whole-number CPU requests get CPUs of their own and the rest share the remainder.
//!
//! - [`cpuset`]: CPU sets and their list form (`0-3,5`).
//! - [`topology`]: CPUs, cores, sockets and NUMA nodes, from sysfs.
//! - [`cpu_assignment`]: which CPUs to take, by topology.
//! - [`static_policy`]: the static policy's rules.
//! - [`checkpoint`]: the state file's format and checksum, as Go's.
//! - [`state`]: the state and its file.
//!
//! [`CpuManager`] ties them: built at start-up (state restored and checked), asked at
//! admission ([`CpuManager::allocate`]), at container creation
//! ([`CpuManager::container_cpuset`], for CRI's `cpuset_cpus`), and periodically
//! ([`CpuManager::reconcile_targets`], for `UpdateContainerResources`). It makes no CRI calls
//! and holds no lock: the caller shares it (behind a mutex) and does the calls.

pub mod checkpoint;
pub mod cpu_assignment;
pub mod cpuset;
pub mod reservation;
pub mod state;
pub mod static_policy;
pub mod topology;

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::Container;

pub use checkpoint::ContainerMap;
pub use cpuset::CpuSet;
pub use reservation::CpuReservation;
pub use state::{CpuState, StateError, StateFile};
pub use static_policy::{StaticPolicy, StaticPolicyError};
pub use topology::CpuTopology;

use super::settings::{CpuManagerPolicy, Settings};
use crate::types::Pod;
use reservation::ReservationError;
use topology::TopologyError;

/// Why the CPU manager cannot start or admit a container.
#[derive(Debug, thiserror::Error)]
pub enum CpuManagerError {
    /// `static` without any CPU reserved (Go's message).
    #[error("[cpumanager] unable to determine reserved CPU resources for static policy")]
    NoReservation,
    /// The static policy could not be built.
    #[error("new static policy error: {0}")]
    NewStaticPolicy(#[source] StaticPolicyError),
    /// The state file.
    #[error(transparent)]
    State(#[from] StateError),
    /// The restored state does not fit the machine or the reservation (Go: "please drain
    /// node and remove policy state file").
    #[error(transparent)]
    Start(StaticPolicyError),
    /// A container's exclusive CPUs could not be found.
    #[error(transparent)]
    Allocate(StaticPolicyError),
    /// The machine's CPUs could not be read.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// The CPU reservation is unusable.
    #[error(transparent)]
    Reservation(#[from] ReservationError),
}

impl CpuManagerError {
    /// Whether it arose restoring or checking the state file (Go's `Start`, whose errors
    /// the kubelet reports as "start cpu manager error"), not building the policy.
    pub fn at_start(&self) -> bool {
        matches!(self, CpuManagerError::State(_) | CpuManagerError::Start(_))
    }
}

/// A container running now, as the runtime reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningContainer {
    /// Its pod's UID.
    pub pod_uid: String,
    /// Its name in the pod.
    pub container_name: String,
    /// Its runtime id.
    pub container_id: String,
}

#[derive(Clone, Debug)]
enum Policy {
    None,
    Static(StaticPolicy),
}

/// The CPU manager.
#[derive(Debug)]
pub struct CpuManager {
    policy: Policy,
    state: CpuState,
    file: StateFile,
    /// Container id → (pod UID, name) of the containers we know were started.
    containers: ContainerMap,
    /// What each container's cpuset was last set to (Go's `lastUpdateState`).
    last_update: BTreeMap<(String, String), CpuSet>,
}

impl CpuManager {
    /// Builds the manager and restores its state from `state_dir/cpu_manager_state` (Go's
    /// `NewManager` + `Start`): the file must be of the same policy, and for `static` agree
    /// with the reservation and the CPUs online.
    #[cfg(test)]
    pub fn new(
        policy: CpuManagerPolicy,
        topology: CpuTopology,
        reserved: &CpuReservation,
        state_dir: &Path,
    ) -> Result<Self, CpuManagerError> {
        Self::with_initial_containers(policy, topology, reserved, state_dir, &ContainerMap::new())
    }

    /// The manager the kubelet's `settings` ask for, on this machine's CPUs (sysfs), its
    /// state in `state_dir` (Go's `NewManager` + `Start`); `initial_containers` are the
    /// runtime's, as for [`CpuManager::with_initial_containers`].
    pub fn from_settings(
        settings: &Settings,
        state_dir: &Path,
        initial_containers: &ContainerMap,
    ) -> Result<Self, CpuManagerError> {
        let topology = CpuTopology::discover()?;
        tracing::info!(
            cpus = topology.num_cpus(),
            cores = topology.num_cores(),
            sockets = topology.num_sockets(),
            numa_nodes = topology.num_numa_nodes(),
            "cpu manager: detected CPU topology"
        );
        let reserved = match settings.cpu_manager_policy {
            CpuManagerPolicy::None => CpuReservation::default(),
            CpuManagerPolicy::Static => {
                CpuReservation::from_settings(settings, &topology.all_cpus())?
            }
        };
        Self::with_initial_containers(
            settings.cpu_manager_policy,
            topology,
            &reserved,
            state_dir,
            initial_containers,
        )
    }

    /// [`CpuManager::new`] knowing the runtime's containers at start-up (Go's initial
    /// container map), needed only to migrate a V1 state file.
    pub fn with_initial_containers(
        policy: CpuManagerPolicy,
        topology: CpuTopology,
        reserved: &CpuReservation,
        state_dir: &Path,
        initial_containers: &ContainerMap,
    ) -> Result<Self, CpuManagerError> {
        let name = policy.as_str();
        let policy = match policy {
            CpuManagerPolicy::None => Policy::None,
            CpuManagerPolicy::Static => {
                let count = reserved.num_cpus();
                if count == 0 {
                    return Err(CpuManagerError::NoReservation);
                }
                let p = StaticPolicy::new(topology, count, &reserved.cpus)
                    .map_err(CpuManagerError::NewStaticPolicy)?;
                Policy::Static(p)
            }
        };
        let (file, mut state) = StateFile::restore(state_dir, name, initial_containers)?;
        if let Policy::Static(p) = &policy {
            let before = state.clone();
            p.start(&mut state).map_err(CpuManagerError::Start)?;
            if state != before {
                file.store(&state)?;
            }
        }
        Ok(Self {
            policy,
            state,
            file,
            containers: initial_containers.clone(),
            last_update: BTreeMap::new(),
        })
    }

    /// Admits a container (Go's `Allocate`): its exclusive CPUs when it gets some (found
    /// now or earlier), `None` when it runs on the shared pool. As Go, the caller should
    /// first drop the state of pods that are gone ([`CpuManager::remove_stale_state`]).
    pub fn allocate(
        &mut self,
        pod: &Pod,
        container: &Container,
    ) -> Result<Option<CpuSet>, CpuManagerError> {
        let Policy::Static(p) = &mut self.policy else {
            return Ok(None);
        };
        let before = self.state.clone();
        let cpus = p
            .allocate(&mut self.state, pod, container)
            .map_err(CpuManagerError::Allocate)?;
        self.persist_if_changed(&before);
        Ok(cpus)
    }

    /// Records that a container was started with the cpuset of
    /// [`CpuManager::container_cpuset`] (Go's `AddContainer`).
    pub fn add_container(&mut self, pod_uid: &str, container_name: &str, container_id: &str) {
        if let Some(cpus) = self.state.cpuset(pod_uid, container_name) {
            let key = (pod_uid.to_string(), container_name.to_string());
            self.last_update.insert(key, cpus.clone());
        }
        self.containers.insert(
            container_id.to_string(),
            (pod_uid.to_string(), container_name.to_string()),
        );
    }

    /// A container is gone: its exclusive CPUs return to the shared pool.
    pub fn remove(&mut self, pod_uid: &str, container_name: &str) {
        let before = self.state.clone();
        if let Policy::Static(p) = &self.policy {
            p.remove_container(&mut self.state, pod_uid, container_name);
        }
        self.last_update
            .remove(&(pod_uid.to_string(), container_name.to_string()));
        self.containers
            .retain(|_, (pod, name)| !(pod == pod_uid && name == container_name));
        self.persist_if_changed(&before);
    }

    /// The cpuset to create a container with (CRI `cpuset_cpus`): its exclusive CPUs, else
    /// the shared pool; `None` when nothing is to be set (the `none` policy). Go's
    /// `GetCPUAffinity`, as `PreCreateContainer` uses it.
    pub fn container_cpuset(&self, pod_uid: &str, container_name: &str) -> Option<CpuSet> {
        Some(self.state.cpuset_or_default(pod_uid, container_name)).filter(|s| !s.is_empty())
    }

    /// A container's exclusive CPUs, if any (Go's `GetExclusiveCPUs`; the pod resources API
    /// reports them).
    pub fn exclusive_cpus(&self, pod_uid: &str, container_name: &str) -> Option<&CpuSet> {
        self.state.cpuset(pod_uid, container_name)
    }

    /// The CPUs of every container without exclusive ones (Go's default CPU set: all CPUs
    /// but the exclusive ones, the reserved included). Empty with the `none` policy.
    pub fn shared_pool(&self) -> CpuSet {
        self.state.default_cpu_set.clone()
    }

    /// The CPUs never given exclusively (empty for `none`).
    pub fn reserved_cpus(&self) -> CpuSet {
        match &self.policy {
            Policy::None => CpuSet::new(),
            Policy::Static(p) => p.reserved().clone(),
        }
    }

    /// The CPUs that may ever be exclusive (Go's `GetAllocatableCPUs`; empty for `none`).
    pub fn allocatable_cpus(&self) -> CpuSet {
        match &self.policy {
            Policy::None => CpuSet::new(),
            Policy::Static(p) => p.allocatable_cpus(),
        }
    }

    /// Drops the assignments of containers not in `active_pods` (Go's `removeStaleState`,
    /// which looks at the active pods and the one being admitted). Call it only once every
    /// pod source has been seen, as Go does, or live pods would lose their CPUs.
    pub fn remove_stale_state<'a>(&mut self, active_pods: impl IntoIterator<Item = &'a Pod>) {
        let mut active: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for pod in active_pods {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            let names = active.entry(uid).or_default();
            if let Some(spec) = &pod.spec {
                let all = crate::podspec::init_and_app_containers(spec);
                names.extend(all.map(|c| c.name.as_str()));
            }
        }
        let is_active = |pod: &str, name: &str| active.get(pod).is_some_and(|n| n.contains(&name));
        let mut stale: Vec<(String, String)> = Vec::new();
        for (pod, containers) in &self.state.assignments {
            for name in containers.keys() {
                if !is_active(pod, name) {
                    stale.push((pod.clone(), name.clone()));
                }
            }
        }
        for (pod, name) in self.containers.values() {
            if !is_active(pod, name) && !stale.contains(&(pod.clone(), name.clone())) {
                stale.push((pod.clone(), name.clone()));
            }
        }
        for (pod, name) in stale {
            tracing::info!(pod_uid = %pod, container = %name, "cpu manager: removing stale state");
            self.remove(&pod, &name);
        }
    }

    /// The cpusets to push to running containers (Go's `reconcileState`): each running
    /// container's exclusive CPUs or the shared pool, where that differs from what it was
    /// last given. They are recorded as given; report a failed update with
    /// [`CpuManager::update_failed`] so the next round retries. Nothing for `none`. As Go,
    /// drop the state of pods that are gone first ([`CpuManager::remove_stale_state`]).
    pub fn reconcile_targets(&mut self, running: &[RunningContainer]) -> Vec<(String, CpuSet)> {
        if matches!(self.policy, Policy::None) {
            return Vec::new();
        }
        let mut targets = Vec::new();
        for c in running {
            // As Go: a running container is known from now on (e.g. after a restart).
            self.containers.insert(
                c.container_id.clone(),
                (c.pod_uid.clone(), c.container_name.clone()),
            );
            let cpus = self.state.cpuset_or_default(&c.pod_uid, &c.container_name);
            if cpus.is_empty() {
                continue;
            }
            let key = (c.pod_uid.clone(), c.container_name.clone());
            if self.last_update.get(&key) != Some(&cpus) {
                self.last_update.insert(key, cpus.clone());
                targets.push((c.container_id.clone(), cpus));
            }
        }
        targets
    }

    /// An update from [`CpuManager::reconcile_targets`] did not happen: forget it was given.
    pub fn update_failed(&mut self, container_id: &str) {
        if let Some((pod, name)) = self.containers.get(container_id) {
            self.last_update.remove(&(pod.clone(), name.clone()));
        }
    }

    /// The state file.
    pub fn state_file(&self) -> &Path {
        self.file.path()
    }

    /// Writes the state when an operation changed it. Go writes after each change and
    /// carries on when that fails (the state in memory stays authoritative); so do we, once
    /// per operation, so a crash never leaves half an allocation on disk.
    fn persist_if_changed(&self, before: &CpuState) {
        if self.state == *before {
            return;
        }
        if let Err(e) = self.file.store(&self.state) {
            tracing::warn!(error = %e, "cpu manager: store state to checkpoint");
        }
    }
}

#[cfg(test)]
mod tests;
