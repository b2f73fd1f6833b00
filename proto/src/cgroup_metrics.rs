//! containerd/cgroups' `Metrics` messages (cgroup v1 and v2), the `Stats` payload of a task:
//! the parts CRI stats read and our shim fills. Field numbers follow containerd/cgroups'
//! `cgroup1/stats/metrics.proto` and `cgroup2/stats/metrics.proto`; containerd-client does
//! not ship them.

use prost::Message;

/// `Any.type_url` of [`V1Metrics`] (containerd 1.6 sends the bare name).
pub const V1_TYPE: &str = "io.containerd.cgroups.v1.Metrics";
/// `Any.type_url` of [`V2Metrics`].
pub const V2_TYPE: &str = "io.containerd.cgroups.v2.Metrics";

/// cgroup v1 metrics.
#[derive(Clone, PartialEq, Message)]
pub struct V1Metrics {
    /// pids controller.
    #[prost(message, optional, tag = "2")]
    pub pids: Option<PidsStat>,
    /// cpuacct/cpu controllers.
    #[prost(message, optional, tag = "3")]
    pub cpu: Option<V1Cpu>,
    /// memory controller.
    #[prost(message, optional, tag = "4")]
    pub memory: Option<V1Memory>,
}

/// Process counts (both versions).
#[derive(Clone, PartialEq, Message)]
pub struct PidsStat {
    /// `pids.current`.
    #[prost(uint64, tag = "1")]
    pub current: u64,
    /// `pids.max`, 0 for unlimited.
    #[prost(uint64, tag = "2")]
    pub limit: u64,
}

/// cgroup v1 CPU.
#[derive(Clone, PartialEq, Message)]
pub struct V1Cpu {
    /// Usage.
    #[prost(message, optional, tag = "1")]
    pub usage: Option<V1CpuUsage>,
    /// CFS throttling.
    #[prost(message, optional, tag = "2")]
    pub throttling: Option<Throttle>,
}

/// cgroup v1 CPU usage, nanoseconds.
#[derive(Clone, PartialEq, Message)]
pub struct V1CpuUsage {
    /// `cpuacct.usage`.
    #[prost(uint64, tag = "1")]
    pub total: u64,
    /// System time (`cpuacct.stat`, in nanoseconds).
    #[prost(uint64, tag = "2")]
    pub kernel: u64,
    /// User time (`cpuacct.stat`, in nanoseconds).
    #[prost(uint64, tag = "3")]
    pub user: u64,
}

/// CFS throttling (`cpu.stat`).
#[derive(Clone, PartialEq, Message)]
pub struct Throttle {
    /// `nr_periods`.
    #[prost(uint64, tag = "1")]
    pub periods: u64,
    /// `nr_throttled`.
    #[prost(uint64, tag = "2")]
    pub throttled_periods: u64,
    /// `throttled_time`, nanoseconds.
    #[prost(uint64, tag = "3")]
    pub throttled_time: u64,
}

/// cgroup v1 memory (`memory.stat` and the usage files).
#[derive(Clone, PartialEq, Message)]
pub struct V1Memory {
    /// `cache`.
    #[prost(uint64, tag = "1")]
    pub cache: u64,
    /// `rss`.
    #[prost(uint64, tag = "2")]
    pub rss: u64,
    /// `total_cache`.
    #[prost(uint64, tag = "18")]
    pub total_cache: u64,
    /// `total_rss`.
    #[prost(uint64, tag = "19")]
    pub total_rss: u64,
    /// `total_pgfault`.
    #[prost(uint64, tag = "26")]
    pub total_pg_fault: u64,
    /// `total_pgmajfault`.
    #[prost(uint64, tag = "27")]
    pub total_pg_maj_fault: u64,
    /// `total_inactive_file`.
    #[prost(uint64, tag = "30")]
    pub total_inactive_file: u64,
    /// `memory.usage_in_bytes`, `memory.limit_in_bytes`, ….
    #[prost(message, optional, tag = "33")]
    pub usage: Option<MemoryEntry>,
    /// memory+swap (`memory.memsw.*`), absent or zero without swap accounting.
    #[prost(message, optional, tag = "34")]
    pub swap: Option<MemoryEntry>,
}

/// One v1 memory counter family.
#[derive(Clone, PartialEq, Message)]
pub struct MemoryEntry {
    /// `*.limit_in_bytes`.
    #[prost(uint64, tag = "1")]
    pub limit: u64,
    /// `*.usage_in_bytes`.
    #[prost(uint64, tag = "2")]
    pub usage: u64,
    /// `*.max_usage_in_bytes`.
    #[prost(uint64, tag = "3")]
    pub max: u64,
    /// `*.failcnt`.
    #[prost(uint64, tag = "4")]
    pub failcnt: u64,
}

/// cgroup v2 metrics.
#[derive(Clone, PartialEq, Message)]
pub struct V2Metrics {
    /// `pids.*`.
    #[prost(message, optional, tag = "1")]
    pub pids: Option<PidsStat>,
    /// `cpu.stat`.
    #[prost(message, optional, tag = "2")]
    pub cpu: Option<V2Cpu>,
    /// `memory.*`.
    #[prost(message, optional, tag = "4")]
    pub memory: Option<V2Memory>,
    /// `memory.events`.
    #[prost(message, optional, tag = "8")]
    pub memory_events: Option<MemoryEvents>,
}

/// cgroup v2 `cpu.stat`.
#[derive(Clone, PartialEq, Message)]
pub struct V2Cpu {
    /// `usage_usec`.
    #[prost(uint64, tag = "1")]
    pub usage_usec: u64,
    /// `user_usec`.
    #[prost(uint64, tag = "2")]
    pub user_usec: u64,
    /// `system_usec`.
    #[prost(uint64, tag = "3")]
    pub system_usec: u64,
    /// `nr_periods`.
    #[prost(uint64, tag = "4")]
    pub nr_periods: u64,
    /// `nr_throttled`.
    #[prost(uint64, tag = "5")]
    pub nr_throttled: u64,
    /// `throttled_usec`.
    #[prost(uint64, tag = "6")]
    pub throttled_usec: u64,
}

/// cgroup v2 memory.
#[derive(Clone, PartialEq, Message)]
pub struct V2Memory {
    /// `memory.stat` `anon`.
    #[prost(uint64, tag = "1")]
    pub anon: u64,
    /// `memory.stat` `file`.
    #[prost(uint64, tag = "2")]
    pub file: u64,
    /// `memory.stat` `inactive_file`.
    #[prost(uint64, tag = "13")]
    pub inactive_file: u64,
    /// `memory.stat` `pgfault`.
    #[prost(uint64, tag = "18")]
    pub pgfault: u64,
    /// `memory.stat` `pgmajfault`.
    #[prost(uint64, tag = "19")]
    pub pgmajfault: u64,
    /// `memory.current`.
    #[prost(uint64, tag = "32")]
    pub usage: u64,
    /// `memory.max` (`max` as `u64::MAX`).
    #[prost(uint64, tag = "33")]
    pub usage_limit: u64,
    /// `memory.swap.current`.
    #[prost(uint64, tag = "34")]
    pub swap_usage: u64,
    /// `memory.swap.max`.
    #[prost(uint64, tag = "35")]
    pub swap_limit: u64,
}

/// cgroup v2 `memory.events`.
#[derive(Clone, PartialEq, Message)]
pub struct MemoryEvents {
    /// `low`.
    #[prost(uint64, tag = "1")]
    pub low: u64,
    /// `high`.
    #[prost(uint64, tag = "2")]
    pub high: u64,
    /// `max`.
    #[prost(uint64, tag = "3")]
    pub max: u64,
    /// `oom`.
    #[prost(uint64, tag = "4")]
    pub oom: u64,
    /// `oom_kill`.
    #[prost(uint64, tag = "5")]
    pub oom_kill: u64,
}
