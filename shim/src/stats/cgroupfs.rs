//! A cgroup's cpu and memory read straight from cgroupfs, for pod-level stats: containerd (1.6
//! and 2.x alike) reports a pod's cpu/memory from the pod's parent cgroup
//! (`PodSandboxConfig.linux.cgroup_parent`), which no task's metrics cover. The files are read
//! by ferrolet-cgroups' reader, the kubelet's too.

use std::path::Path;

use ferrolet_cgroups::usage::Hierarchy;

use super::{Sample, StatsError};

const ROOT: &str = "/sys/fs/cgroup";

/// The sample of a cgroupfs-driver cgroup path (e.g. the pod's `cgroup_parent`); v1 or v2 is
/// told by whether `/sys/fs/cgroup` itself is the unified hierarchy.
pub async fn cgroup_sample(cgroup: &str, timestamp_ns: i64) -> Result<Sample, StatsError> {
    let cgroup = cgroup.to_string();
    tokio::task::spawn_blocking(move || read_sample(Path::new(ROOT), &cgroup, timestamp_ns)).await?
}

pub(crate) fn read_sample(
    root: &Path,
    cgroup: &str,
    timestamp_ns: i64,
) -> Result<Sample, StatsError> {
    let usage = Hierarchy::detect_at(root).read(cgroup)?;
    let missing = |what| StatsError::NoCounters {
        cgroup: cgroup.to_string(),
        what,
    };
    let cpu_usage_ns = usage.cpu_usage_ns.ok_or_else(|| missing("cpu"))?;
    let memory = usage.memory.ok_or_else(|| missing("memory"))?;
    Ok(Sample {
        timestamp_ns,
        cpu_usage_ns,
        memory_usage: memory.usage,
        memory_limit: memory.limit,
        working_set: memory.working_set,
        rss: memory.rss,
        page_faults: memory.page_faults,
        major_page_faults: memory.major_page_faults,
        swap_usage: memory.swap,
    })
}
