//! The container manager's configuration, filled from the KubeletConfiguration (fields named
//! as Go names them; defaults as Go's).

use std::collections::BTreeMap;
use std::time::Duration;

/// The CPU manager's policy (`cpuManagerPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CpuManagerPolicy {
    /// No CPU pinning (Go's default, `none`).
    #[default]
    None,
    /// Exclusive CPUs for Guaranteed containers with integer CPU requests (`static`).
    Static,
}

impl CpuManagerPolicy {
    /// The name Go writes (`none`, `static`), also in the state file.
    pub fn as_str(self) -> &'static str {
        match self {
            CpuManagerPolicy::None => "none",
            CpuManagerPolicy::Static => "static",
        }
    }
}

/// How the kubelet's cgroups are made (`cgroupDriver`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CgroupDriver {
    /// Directories and files under `/sys/fs/cgroup` (`cgroupfs`, the default).
    #[default]
    Cgroupfs,
    /// Transient slice units made by systemd over D-Bus (`systemd`).
    Systemd,
}

/// Everything the container manager is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Build the QoS and pod cgroup tree (`cgroupsPerQOS`, default true).
    pub cgroups_per_qos: bool,
    /// Root of the tree (`cgroupRoot`, default "/"): `kubepods` is made under it.
    pub cgroup_root: String,
    /// The cgroup driver (`cgroupDriver`, default `cgroupfs`).
    pub cgroup_driver: CgroupDriver,
    /// What node allocatable is enforced on (`enforceNodeAllocatable`, default `["pods"]`):
    /// `pods`, `kube-reserved`, `system-reserved`, or `none`.
    pub enforce_node_allocatable: Vec<String>,
    /// `kubeReserved`: resource name → quantity.
    pub kube_reserved: BTreeMap<String, String>,
    /// `systemReserved`: resource name → quantity.
    pub system_reserved: BTreeMap<String, String>,
    /// The cgroup kube-reserved is enforced on (`kubeReservedCgroup`).
    pub kube_reserved_cgroup: String,
    /// The cgroup system-reserved is enforced on (`systemReservedCgroup`).
    pub system_reserved_cgroup: String,
    /// Most processes per pod (`podPidsLimit`, default -1: none).
    pub pod_pids_limit: i64,
    /// Memory kept from lower QoS classes for higher ones, percent (`qosReserved`, `memory`).
    pub qos_reserved_memory_percent: Option<i64>,
    /// The CPU manager's policy (`cpuManagerPolicy`, default `none`).
    pub cpu_manager_policy: CpuManagerPolicy,
    /// How often the CPU manager reconciles containers' cpusets (`cpuManagerReconcilePeriod`).
    pub cpu_manager_reconcile_period: Duration,
    /// CPUs kept from pods (`reservedSystemCPUs`, kernel list form), overriding the CPUs of
    /// kubeReserved + systemReserved for the CPU manager.
    pub reserved_system_cpus: String,
    /// Enforce CPU limits with CFS quota (`cpuCFSQuota`, default true).
    pub cpu_cfs_quota: bool,
    /// The CFS period (`cpuCFSQuotaPeriod`, default 100ms).
    pub cpu_cfs_quota_period: Duration,
    /// The `MemoryQoS` gate: `memory.min` on the QoS and pod cgroups (acted on only on
    /// cgroup v2).
    pub memory_qos: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            cgroups_per_qos: true,
            cgroup_root: "/".into(),
            cgroup_driver: CgroupDriver::Cgroupfs,
            enforce_node_allocatable: vec!["pods".into()],
            kube_reserved: BTreeMap::new(),
            system_reserved: BTreeMap::new(),
            kube_reserved_cgroup: String::new(),
            system_reserved_cgroup: String::new(),
            pod_pids_limit: -1,
            qos_reserved_memory_percent: None,
            cpu_manager_policy: CpuManagerPolicy::None,
            cpu_manager_reconcile_period: Duration::from_secs(10),
            reserved_system_cpus: String::new(),
            cpu_cfs_quota: true,
            cpu_cfs_quota_period: Duration::from_millis(100),
            memory_qos: false,
        }
    }
}
