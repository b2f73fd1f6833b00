//! The `static` policy (Go's policy_static.go, without policy options or topology hints):
//! a Guaranteed pod's container whose CPU request is a whole number gets that many CPUs of
//! its own; every other container runs on the shared pool.
//!
//! The sets: RESERVED (never handed out exclusively, fixed for the kubelet's life), SHARED
//! (the state's default set: all CPUs but the exclusive ones, reserved included), and the
//! exclusive assignments. Exclusive CPUs come from SHARED − RESERVED, plus the CPUs the
//! pod's init containers held (they have finished before app containers start).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;

use super::cpu_assignment::{TakeError, take_by_topology};
use super::cpuset::CpuSet;
use super::state::CpuState;
use super::topology::CpuTopology;
use crate::podspec::qos::{QosClass, effective_request, qos_class};
use crate::types::Pod;

/// Why the static policy cannot start or allocate; the texts are Go's.
#[derive(Debug, thiserror::Error)]
pub enum StaticPolicyError {
    /// Fewer CPUs could be reserved than asked for.
    #[error(
        "[cpumanager] unable to reserve the required amount of CPUs (size of {reserved} did not equal {wanted})"
    )]
    Reserve {
        /// What could be reserved.
        reserved: CpuSet,
        /// How many were asked for.
        wanted: usize,
    },
    /// The restored state has assignments but no shared pool.
    #[error("default cpuset cannot be empty")]
    EmptyDefault,
    /// Reserved CPUs were found assigned (the reservation grew, or the file was edited).
    #[error("not all reserved cpus: \"{reserved}\" are present in defaultCpuSet: \"{default}\"")]
    ReservedNotShared {
        /// The reserved CPUs.
        reserved: CpuSet,
        /// The restored shared pool.
        default: CpuSet,
    },
    /// An exclusive assignment overlaps the shared pool.
    #[error(
        "pod: {pod}, container: {container} cpuset: \"{cpus}\" overlaps with default cpuset \"{default}\""
    )]
    Overlap {
        /// The pod UID.
        pod: String,
        /// The container.
        container: String,
        /// Its CPUs.
        cpus: CpuSet,
        /// The shared pool.
        default: CpuSet,
    },
    /// The CPUs online now are not the CPUs the state knows.
    #[error(
        "current set of available CPUs \"{online}\" doesn't match with CPUs in state \"{known}\""
    )]
    CpusChanged {
        /// The topology's CPUs.
        online: CpuSet,
        /// Shared pool ∪ assignments.
        known: CpuSet,
    },
    /// Not enough CPUs for an exclusive allocation.
    #[error(transparent)]
    Take(#[from] TakeError),
}

/// The static policy.
#[derive(Clone, Debug)]
pub struct StaticPolicy {
    topology: CpuTopology,
    reserved: CpuSet,
    /// Per pod (only the one being admitted is kept), CPUs its init containers held that
    /// its app containers may take (Go's `cpusToReuse`, in memory only).
    cpus_to_reuse: BTreeMap<String, CpuSet>,
}

impl StaticPolicy {
    /// Reserves `reserved_cpus` when given, else `num_reserved` CPUs taken by topology from
    /// the lowest ids (Go's `NewStaticPolicy`).
    pub fn new(
        topology: CpuTopology,
        num_reserved: usize,
        reserved_cpus: &CpuSet,
    ) -> Result<Self, StaticPolicyError> {
        let reserved = if reserved_cpus.is_empty() {
            // Go ignores the error: a short reservation is reported below.
            take_by_topology(&topology, &topology.all_cpus(), num_reserved).unwrap_or_default()
        } else {
            reserved_cpus.clone()
        };
        if reserved.len() != num_reserved {
            return Err(StaticPolicyError::Reserve {
                reserved,
                wanted: num_reserved,
            });
        }
        Ok(Self {
            topology,
            reserved,
            cpus_to_reuse: BTreeMap::new(),
        })
    }

    /// The reserved CPUs.
    pub fn reserved(&self) -> &CpuSet {
        &self.reserved
    }

    /// The CPUs that may ever be exclusive (Go's `GetAllocatableCPUs`).
    pub fn allocatable_cpus(&self) -> CpuSet {
        self.topology.all_cpus().difference(&self.reserved)
    }

    /// The CPUs free for exclusive use now (Go's `GetAvailableCPUs`).
    pub fn available_cpus(&self, state: &CpuState) -> CpuSet {
        state.default_cpu_set.difference(&self.reserved)
    }

    /// Go's `Start` (`validateState`): an empty state becomes "everything shared"; a
    /// restored one must keep the reserved CPUs shared, not overlap, and cover exactly the
    /// CPUs online now.
    pub fn start(&self, state: &mut CpuState) -> Result<(), StaticPolicyError> {
        let all = self.topology.all_cpus();
        if state.default_cpu_set.is_empty() {
            if !state.assignments.is_empty() {
                return Err(StaticPolicyError::EmptyDefault);
            }
            state.default_cpu_set = all;
            return Ok(());
        }
        let default = &state.default_cpu_set;
        if !self.reserved.is_subset(default) {
            return Err(StaticPolicyError::ReservedNotShared {
                reserved: self.reserved.clone(),
                default: default.clone(),
            });
        }
        let mut known = default.clone();
        for (pod, containers) in &state.assignments {
            for (container, cpus) in containers {
                if !cpus.intersection(default).is_empty() {
                    return Err(StaticPolicyError::Overlap {
                        pod: pod.clone(),
                        container: container.clone(),
                        cpus: cpus.clone(),
                        default: default.clone(),
                    });
                }
                known = known.union(cpus);
            }
        }
        if known != all {
            return Err(StaticPolicyError::CpusChanged { online: all, known });
        }
        Ok(())
    }

    /// Go's `Allocate`: exclusive CPUs for the container when it qualifies, recorded in
    /// `state` (the shared pool shrinks). Returns the container's exclusive CPUs, `None`
    /// when it runs on the shared pool.
    pub fn allocate(
        &mut self,
        state: &mut CpuState,
        pod: &Pod,
        container: &Container,
    ) -> Result<Option<CpuSet>, StaticPolicyError> {
        let count = guaranteed_cpus(pod, container);
        if count == 0 {
            return Ok(None);
        }
        let uid = pod_uid(pod);
        if let Some(cpus) = state.cpuset(uid, &container.name).cloned() {
            self.update_cpus_to_reuse(pod, container, &cpus);
            return Ok(Some(cpus));
        }
        let reusable = self.cpus_to_reuse.get(uid).cloned().unwrap_or_default();
        let allocatable = self.available_cpus(state).union(&reusable);
        let cpus = take_by_topology(&self.topology, &allocatable, count)?;
        state.default_cpu_set = state.default_cpu_set.difference(&cpus);
        state.set_cpuset(uid, &container.name, cpus.clone());
        self.update_cpus_to_reuse(pod, container, &cpus);
        Ok(Some(cpus))
    }

    /// Go's `RemoveContainer`: the container's CPUs go back to the shared pool, except those
    /// a sibling still holds (an app container may hold CPUs an init container held).
    pub fn remove_container(&self, state: &mut CpuState, pod_uid: &str, container: &str) {
        let Some(released) = state.cpuset(pod_uid, container).cloned() else {
            return;
        };
        let in_use = state
            .assignments
            .get(pod_uid)
            .into_iter()
            .flatten()
            .filter(|(name, _)| name.as_str() != container)
            .fold(CpuSet::new(), |acc, (_, cpus)| acc.union(cpus));
        state.delete(pod_uid, container);
        state.default_cpu_set = state.default_cpu_set.union(&released.difference(&in_use));
    }

    /// Go's `updateCPUsToReuse`: an init container's CPUs become reusable by the pod's next
    /// containers; an app container's stop being so.
    fn update_cpus_to_reuse(&mut self, pod: &Pod, container: &Container, cpus: &CpuSet) {
        let uid = pod_uid(pod);
        self.cpus_to_reuse.retain(|k, _| k == uid);
        let reuse = self.cpus_to_reuse.entry(uid.to_string()).or_default();
        let is_init = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|inits| inits.iter().any(|c| c.name == container.name));
        *reuse = if is_init {
            reuse.union(cpus)
        } else {
            reuse.difference(cpus)
        };
    }
}

fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// How many exclusive CPUs a container gets (Go's `guaranteedCPUs`): its CPU request when
/// the pod is Guaranteed and the request is a whole number, else 0.
pub fn guaranteed_cpus(pod: &Pod, container: &Container) -> usize {
    if qos_class(pod) != QosClass::Guaranteed {
        return 0;
    }
    let Some(request) = effective_request(container, "cpu") else {
        return 0;
    };
    // Go: Value() * 1000 != MilliValue(), both rounded up.
    let whole = request.value_ceil();
    if whole * 1000 != request.milli_ceil() {
        return 0;
    }
    usize::try_from(whole).unwrap_or(0)
}

#[cfg(test)]
#[path = "static_policy_tests.rs"]
pub(crate) mod tests;
