//! Container and pod sandbox stats for CRI: containerd's task metrics (cgroup v1 or v2) decoded
//! into a [`Sample`], cumulative CPU time turned into a rate ([`CpuRates`]), and the CRI
//! messages built from them with network counters and writable-layer usage, as containerd's CRI
//! plugin reports them.

mod cgroupfs;
mod metrics;
mod net;

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use ferrolet_proto::containerd::Containerd;
use ferrolet_proto::containerd::services::v1::PluginsRequest;
use ferrolet_proto::containerd::services::v1::snapshots::UsageRequest;
use ferrolet_proto::cri;

pub use cgroupfs::cgroup_sample;
pub use metrics::{decode, process_count};
pub use net::network_usage;

/// One cgroup sample decoded from a task metric.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// When the kernel counters were read, in nanoseconds since the epoch.
    pub timestamp_ns: i64,
    /// Cumulative CPU time of all the cgroup's tasks.
    pub cpu_usage_ns: u64,
    /// Memory charged to the cgroup, page cache included.
    pub memory_usage: u64,
    /// The cgroup's memory limit; `None` when unlimited.
    pub memory_limit: Option<u64>,
    /// Usage minus inactive file pages: what the kubelet evicts on.
    pub working_set: u64,
    /// Anonymous memory (v1 `total_rss`, v2 `anon`).
    pub rss: u64,
    /// Page faults, cumulative.
    pub page_faults: u64,
    /// Major page faults, cumulative.
    pub major_page_faults: u64,
    /// Swap in use; `None` when the kernel does not account swap (v1 without memsw).
    pub swap_usage: Option<u64>,
}

/// Why stats could not be had.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// containerd returned a metric without a payload.
    #[error("metric for {id:?} carries no data")]
    NoData {
        /// The task.
        id: String,
    },
    /// Neither cgroup v1 nor v2 metrics (e.g. a VM-based runtime's).
    #[error("unsupported metrics type {type_url:?}")]
    UnknownType {
        /// The payload's type URL.
        type_url: String,
    },
    /// The payload did not decode as its type says.
    #[error("malformed {type_url} payload: {source}")]
    Decode {
        /// The payload's type URL.
        type_url: String,
        /// Why.
        source: prost::DecodeError,
    },
    /// `Snapshots.Usage` failed (`NotFound` once the snapshot is gone).
    #[error("usage of snapshot {key:?} in {snapshotter}: {source}")]
    Snapshot {
        /// The snapshotter asked.
        snapshotter: String,
        /// The snapshot key.
        key: String,
        /// containerd's answer.
        #[source]
        source: tonic::Status,
    },
    /// A cgroup's files could not be read or parsed, or its path climbs out of the hierarchy.
    #[error(transparent)]
    Cgroup(#[from] ferrolet_cgroups::usage::UsageError),
    /// A cgroup without cpu or memory counters: gone, or never made.
    #[error("cgroup {cgroup:?} has no {what} counters")]
    NoCounters {
        /// The cgroup path.
        cgroup: String,
        /// `cpu` or `memory`.
        what: &'static str,
    },
    /// The blocking read panicked or was cancelled.
    #[error("cgroup read task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Remembers the last sample per id to turn cumulative CPU time into nano-cores.
#[derive(Debug, Default)]
pub struct CpuRates {
    /// id → (timestamp ns, cumulative cpu ns) of the last sample used.
    last: Mutex<HashMap<String, (i64, u64)>>,
}

impl CpuRates {
    /// CPU use between the previous sample of `id` and this one, in billionths of a core;
    /// `None` on the first sample, as containerd 2.x leaves `usage_nano_cores` unset then.
    /// Sandboxes and containers can share one `CpuRates`: their ids never collide.
    pub fn nano_cores(&self, id: &str, sample: &Sample) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let current = (sample.timestamp_ns, sample.cpu_usage_ns);
        let Some(previous) = last.get_mut(id) else {
            last.insert(id.to_string(), current);
            return None;
        };
        let elapsed = sample.timestamp_ns.saturating_sub(previous.0);
        // A repeated or out-of-order sample says nothing new; keep the older baseline.
        if elapsed <= 0 {
            return None;
        }
        let used = sample.cpu_usage_ns.checked_sub(previous.1);
        // After a counter went backwards the new value is the only sane baseline.
        *previous = current;
        let rate = u128::from(used?) * 1_000_000_000 / u128::from(elapsed.unsigned_abs());
        u64::try_from(rate).ok()
    }

    /// Drops the baseline of a removed container or sandbox.
    pub fn forget(&self, id: &str) {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }
}

/// CRI ContainerStats from a sample (cpu, memory, swap), plus the writable layer usage.
///
/// Without a sample (the container has no running task) only attributes and the writable layer
/// are set, as containerd does.
pub fn container_stats(
    attributes: cri::ContainerAttributes,
    sample: Option<&Sample>,
    nano_cores: Option<u64>,
    writable_layer: Option<cri::FilesystemUsage>,
) -> cri::ContainerStats {
    cri::ContainerStats {
        attributes: Some(attributes),
        cpu: sample.map(|s| cpu_usage(s, nano_cores)),
        memory: sample.map(memory_usage),
        writable_layer,
        swap: sample.and_then(|s| {
            s.swap_usage.map(|usage| cri::SwapUsage {
                timestamp: s.timestamp_ns,
                swap_available_bytes: None,
                swap_usage_bytes: value(usage),
            })
        }),
    }
}

/// CRI PodSandboxStats: the sandbox cgroup's (pause) sample for pod cpu/memory as containerd does, its network usage, process count, and the containers' stats.
///
/// containerd (1.6.20 and 2.x both) takes the pod's cpu/memory from the pod's parent cgroup,
/// `PodSandboxConfig.linux.cgroup_parent`, read from cgroupfs, so they cover the pause process
/// and every container: pass [`cgroup_sample`] of it (the pause task's own metric is the
/// fallback when the config has no cgroup parent). `processes` is the pod's process count:
/// containerd 2.x sums [`process_count`] over the containers' metrics (1.6 counts their pids).
pub fn pod_sandbox_stats(
    attributes: cri::PodSandboxAttributes,
    sample: Option<&Sample>,
    nano_cores: Option<u64>,
    network: Option<cri::NetworkUsage>,
    processes: Option<u64>,
    containers: Vec<cri::ContainerStats>,
) -> cri::PodSandboxStats {
    let timestamp = sample.map_or_else(now_ns, |s| s.timestamp_ns);
    cri::PodSandboxStats {
        attributes: Some(attributes),
        linux: Some(cri::LinuxPodSandboxStats {
            cpu: sample.map(|s| cpu_usage(s, nano_cores)),
            memory: sample.map(memory_usage),
            network,
            process: processes.map(|count| cri::ProcessUsage {
                timestamp,
                process_count: value(count),
            }),
            containers,
        }),
        windows: None,
    }
}

/// Writable layer usage of a container's snapshot (`Snapshots.Usage` on `snapshotter`/`key`), as CRI FilesystemUsage (fs_id mountpoint = the snapshotter's root if you can tell it, else empty).
///
/// The root comes from the snapshotter plugin's introspection exports, as the image service's
/// `ImageFsInfo` reports it, so kubelet can match the two.
pub async fn writable_layer(
    containerd: &Containerd,
    snapshotter: &str,
    key: &str,
    timestamp_ns: i64,
) -> Result<cri::FilesystemUsage, StatsError> {
    let mut snapshots = containerd.snapshots();
    let usage = snapshots.usage(UsageRequest {
        snapshotter: snapshotter.to_string(),
        key: key.to_string(),
    });
    let (usage, root) = tokio::join!(usage, snapshotter_root(containerd, snapshotter));
    let usage = usage
        .map_err(|source| StatsError::Snapshot {
            snapshotter: snapshotter.to_string(),
            key: key.to_string(),
            source,
        })?
        .into_inner();
    Ok(cri::FilesystemUsage {
        timestamp: timestamp_ns,
        fs_id: Some(cri::FilesystemIdentifier { mountpoint: root }),
        used_bytes: value(u64::try_from(usage.size).unwrap_or_default()),
        inodes_used: value(u64::try_from(usage.inodes).unwrap_or_default()),
    })
}

/// The snapshotter's directory; empty when introspection does not say (it is only a label).
async fn snapshotter_root(containerd: &Containerd, snapshotter: &str) -> String {
    let request = PluginsRequest {
        filters: vec![format!(
            "type==io.containerd.snapshotter.v1,id=={snapshotter}"
        )],
    };
    match containerd.introspection().plugins(request).await {
        Ok(response) => response
            .into_inner()
            .plugins
            .into_iter()
            .find_map(|p| p.exports.get("root").cloned())
            .unwrap_or_default(),
        Err(status) => {
            tracing::debug!(snapshotter, %status, "cannot introspect snapshotter");
            String::new()
        }
    }
}

fn cpu_usage(sample: &Sample, nano_cores: Option<u64>) -> cri::CpuUsage {
    cri::CpuUsage {
        timestamp: sample.timestamp_ns,
        usage_core_nano_seconds: value(sample.cpu_usage_ns),
        usage_nano_cores: nano_cores.and_then(value),
    }
}

fn memory_usage(sample: &Sample) -> cri::MemoryUsage {
    // containerd reports 0 available bytes for an unlimited cgroup, as kubelet expects.
    let available = sample
        .memory_limit
        .map_or(0, |limit| limit.saturating_sub(sample.working_set));
    cri::MemoryUsage {
        timestamp: sample.timestamp_ns,
        working_set_bytes: value(sample.working_set),
        available_bytes: value(available),
        usage_bytes: value(sample.memory_usage),
        rss_bytes: value(sample.rss),
        page_faults: value(sample.page_faults),
        major_page_faults: value(sample.major_page_faults),
    }
}

fn value(value: u64) -> Option<cri::UInt64Value> {
    Some(cri::UInt64Value { value })
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests;
