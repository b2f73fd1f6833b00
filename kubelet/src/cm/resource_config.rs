//! What a cgroup is given, as Go's `ResourceConfig`: every field optional, a `None` leaves the
//! cgroup's file as it is. Values are in cgroup v1 terms (shares, quota/period, bytes); the
//! v2 writer converts (shares → `cpu.weight`, quota/period → `cpu.max`).

use std::collections::BTreeMap;

/// The resources of one cgroup (Go's `ResourceConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceConfig {
    /// Memory limit in bytes (`memory.limit_in_bytes` / `memory.max`).
    pub memory: Option<i64>,
    /// Memory protected from reclaim, bytes: cgroup v2 `memory.min`, set only under the
    /// `MemoryQoS` gate (Go's `Unified["memory.min"]`); v1 has no such file.
    pub memory_min: Option<i64>,
    /// CPU shares (`cpu.shares`; v2 `cpu.weight` from it).
    pub cpu_shares: Option<u64>,
    /// CFS quota in µs; -1 for none (`cpu.cfs_quota_us` / `cpu.max`).
    pub cpu_quota: Option<i64>,
    /// CFS period in µs (`cpu.cfs_period_us` / `cpu.max`).
    pub cpu_period: Option<u64>,
    /// CPUs in the kernel's list form (`0-1,3`) (`cpuset.cpus`).
    pub cpuset_cpus: Option<String>,
    /// Most processes; -1 for none (`pids.max`, "max").
    pub pids_limit: Option<i64>,
    /// Huge page limits in bytes by page size in bytes (`hugetlb.<size>.limit_in_bytes` /
    /// `hugetlb.<size>.max`).
    pub hugepage_limits: BTreeMap<u64, i64>,
}
