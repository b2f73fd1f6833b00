//! CRI stats from containerd/cgroups' `Metrics` messages (cgroup v1 and v2), whose types live
//! in the wire crate ([`ferrolet_proto::cgroup_metrics`]).

use ferrolet_proto::containerd::types::Metric;
use prost::Message;

use super::{Sample, StatsError};

pub(crate) use ferrolet_proto::cgroup_metrics::{V1_TYPE, V1Metrics, V2_TYPE, V2Metrics};

/// Above this a memory limit means "unlimited": the kernel rounds its maximum down to a page
/// multiple, so the sentinel is not exactly `u64::MAX` (containerd and cAdvisor use the same).
const UNLIMITED: u64 = 1 << 62;

/// Either payload, decoded.
enum Decoded {
    V1(V1Metrics),
    V2(V2Metrics),
}

fn decode_any(metric: &Metric) -> Result<Decoded, StatsError> {
    let data = metric.data.as_ref().ok_or_else(|| StatsError::NoData {
        id: metric.id.clone(),
    })?;
    // containerd 1.6 sends the bare message name; typeurl may also prefix a host.
    let name = data.type_url.rsplit('/').next().unwrap_or_default();
    let bad = |source| StatsError::Decode {
        type_url: data.type_url.clone(),
        source,
    };
    match name {
        V1_TYPE => V1Metrics::decode(data.value.as_slice())
            .map(Decoded::V1)
            .map_err(bad),
        V2_TYPE => V2Metrics::decode(data.value.as_slice())
            .map(Decoded::V2)
            .map_err(bad),
        _ => Err(StatsError::UnknownType {
            type_url: data.type_url.clone(),
        }),
    }
}

/// Decodes containerd's metric for a task (v1 or v2 type URL; an unknown URL is an error naming it).
///
/// Absent sections read as zero, as containerd's getters do; a missing timestamp is "now".
pub fn decode(metric: &Metric) -> Result<Sample, StatsError> {
    let timestamp_ns = metric
        .timestamp
        .as_ref()
        .map(|t| {
            t.seconds
                .saturating_mul(1_000_000_000)
                .saturating_add(i64::from(t.nanos))
        })
        .unwrap_or_else(super::now_ns);
    Ok(match decode_any(metric)? {
        Decoded::V1(m) => v1_sample(&m, timestamp_ns),
        Decoded::V2(m) => v2_sample(&m, timestamp_ns),
    })
}

/// The task's process count (`pids.current`), which containerd sums over a pod's containers
/// for `PodSandboxStats.linux.process`; `None` when the pids controller reported nothing.
pub fn process_count(metric: &Metric) -> Option<u64> {
    match decode_any(metric).ok()? {
        Decoded::V1(m) => m.pids.map(|p| p.current),
        Decoded::V2(m) => m.pids.map(|p| p.current),
    }
}

fn limit(value: u64) -> Option<u64> {
    (value > 0 && value <= UNLIMITED).then_some(value)
}

pub(crate) fn v1_sample(m: &V1Metrics, timestamp_ns: i64) -> Sample {
    let memory = m.memory.clone().unwrap_or_default();
    let usage = memory.usage.unwrap_or_default();
    // memsw counts memory plus swap; swap alone is the difference.
    let swap_usage = memory
        .swap
        .filter(|s| s.usage > 0)
        .map(|s| s.usage.saturating_sub(usage.usage));
    Sample {
        timestamp_ns,
        cpu_usage_ns: m
            .cpu
            .as_ref()
            .and_then(|c| c.usage.as_ref())
            .map_or(0, |u| u.total),
        memory_usage: usage.usage,
        memory_limit: limit(usage.limit),
        working_set: usage.usage.saturating_sub(memory.total_inactive_file),
        rss: memory.total_rss,
        page_faults: memory.total_pg_fault,
        major_page_faults: memory.total_pg_maj_fault,
        swap_usage,
    }
}

pub(crate) fn v2_sample(m: &V2Metrics, timestamp_ns: i64) -> Sample {
    let memory = m.memory.clone().unwrap_or_default();
    Sample {
        timestamp_ns,
        cpu_usage_ns: m
            .cpu
            .as_ref()
            .map_or(0, |c| c.usage_usec.saturating_mul(1000)),
        memory_usage: memory.usage,
        memory_limit: limit(memory.usage_limit),
        working_set: memory.usage.saturating_sub(memory.inactive_file),
        // cgroup v2 has no rss counter; anon is what cAdvisor and containerd report instead.
        rss: memory.anon,
        page_faults: memory.pgfault,
        major_page_faults: memory.pgmajfault,
        swap_usage: m.memory.as_ref().map(|m| m.swap_usage),
    }
}
