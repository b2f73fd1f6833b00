//! A cgroup's CPU, memory and pid counters with the time they were read: the node (the root
//! cgroup), the `pods` and `kubelet` system containers, and pods whose runtime does not report
//! pod stats. The files are read by ferrolet-cgroups' one reader of cgroupfs, v1 or v2, the
//! one ferrolet-cri reads pod stats with.

pub use ferrolet_cgroups::usage::{Hierarchy, MemoryUsage, Pressure, Psi, cgroup_of_process};

/// One reading of a cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CgroupReading {
    /// When read, nanoseconds since the epoch.
    pub timestamp_ns: i64,
    /// Cumulative CPU time, nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    /// Memory, when the memory controller knows the cgroup.
    pub memory: Option<MemoryUsage>,
    /// Tasks in the cgroup (pids controller).
    pub pids: Option<u64>,
    /// Pressure stall information (cgroup v2 with PSI).
    pub pressure: Pressure,
}

/// Reads `cgroup` (`/kubepods/pod<uid>`, `/` for the root) at `timestamp_ns`. Blocking: a few
/// small file reads. `None` when it has no cpu, memory or pressure files, or a file of it
/// cannot be read.
pub fn read(cgroups: &Hierarchy, cgroup: &str, timestamp_ns: i64) -> Option<CgroupReading> {
    let usage = if cgroup.trim_matches('/').is_empty() {
        cgroups.read_root()
    } else {
        cgroups.read(cgroup)
    };
    let usage = usage
        .map_err(|e| tracing::debug!(cgroup, error = %e, "reading a cgroup"))
        .ok()?;
    let p = &usage.pressure;
    let known = usage.cpu_usage_ns.is_some()
        || usage.memory.is_some()
        || p.cpu.is_some()
        || p.memory.is_some()
        || p.io.is_some();
    known.then_some(CgroupReading {
        timestamp_ns,
        cpu_usage_ns: usage.cpu_usage_ns,
        memory: usage.memory,
        pids: usage.pids,
        pressure: usage.pressure,
    })
}
