//! A cgroup's cpu and memory read straight from cgroupfs, for pod-level stats: containerd (1.6
//! and 2.x alike) reports a pod's cpu/memory from the pod's parent cgroup
//! (`PodSandboxConfig.linux.cgroup_parent`), which no task's metrics cover.

use std::collections::HashMap;
use std::io;
use std::path::{Component, Path, PathBuf};

use super::metrics::{
    MemoryEntry, V1Cpu, V1CpuUsage, V1Memory, V1Metrics, V2Cpu, V2Memory, V2Metrics,
};
use super::{Sample, StatsError};

const ROOT: &str = "/sys/fs/cgroup";

/// The sample of a cgroupfs-driver cgroup path (e.g. the pod's `cgroup_parent`), read as
/// containerd's cgroups library does, with the same arithmetic as [`super::decode`]; v1 or v2 is
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
    let rel = relative(cgroup)?;
    if root.join("cgroup.controllers").exists() {
        read_v2(&root.join(rel), timestamp_ns)
    } else {
        read_v1(root, &rel, timestamp_ns)
    }
}

/// The path under each hierarchy; it comes from a CRI request, so it may not climb out.
fn relative(cgroup: &str) -> Result<PathBuf, StatsError> {
    let rel: PathBuf = Path::new(cgroup)
        .components()
        .filter(|c| !matches!(c, Component::RootDir | Component::CurDir))
        .collect();
    if rel.as_os_str().is_empty() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(StatsError::BadCgroup(cgroup.to_string()));
    }
    Ok(rel)
}

fn read_v1(root: &Path, rel: &Path, timestamp_ns: i64) -> Result<Sample, StatsError> {
    let memory = root.join("memory").join(rel);
    let stat = read_keyed(&memory.join("memory.stat"))?;
    let key = |k: &str| stat.get(k).copied().unwrap_or_default();
    let metrics = V1Metrics {
        pids: None,
        cpu: Some(V1Cpu {
            usage: Some(V1CpuUsage {
                total: read_u64(&root.join("cpuacct").join(rel).join("cpuacct.usage"))?,
            }),
        }),
        memory: Some(V1Memory {
            total_rss: key("total_rss"),
            total_pg_fault: key("total_pgfault"),
            total_pg_maj_fault: key("total_pgmajfault"),
            total_inactive_file: key("total_inactive_file"),
            usage: Some(MemoryEntry {
                limit: read_u64(&memory.join("memory.limit_in_bytes"))?,
                usage: read_u64(&memory.join("memory.usage_in_bytes"))?,
            }),
            // Without swap accounting the memsw files do not exist.
            swap: optional(read_u64(&memory.join("memory.memsw.usage_in_bytes")))?
                .map(|usage| MemoryEntry { limit: 0, usage }),
        }),
    };
    Ok(super::metrics::v1_sample(&metrics, timestamp_ns))
}

fn read_v2(dir: &Path, timestamp_ns: i64) -> Result<Sample, StatsError> {
    let cpu = read_keyed(&dir.join("cpu.stat"))?;
    let stat = read_keyed(&dir.join("memory.stat"))?;
    let key = |k: &str| stat.get(k).copied().unwrap_or_default();
    let metrics = V2Metrics {
        pids: None,
        cpu: Some(V2Cpu {
            usage_usec: cpu.get("usage_usec").copied().unwrap_or_default(),
        }),
        memory: Some(V2Memory {
            anon: key("anon"),
            inactive_file: key("inactive_file"),
            pgfault: key("pgfault"),
            pgmajfault: key("pgmajfault"),
            usage: read_u64(&dir.join("memory.current"))?,
            usage_limit: read_u64(&dir.join("memory.max"))?,
            swap_usage: optional(read_u64(&dir.join("memory.swap.current")))?.unwrap_or_default(),
        }),
    };
    Ok(super::metrics::v2_sample(&metrics, timestamp_ns))
}

fn optional(read: Result<u64, StatsError>) -> Result<Option<u64>, StatsError> {
    match read {
        Ok(v) => Ok(Some(v)),
        Err(StatsError::Cgroup { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

fn cgroup_err(path: &Path) -> impl FnOnce(io::Error) -> StatsError + '_ {
    move |source| StatsError::Cgroup {
        path: path.to_path_buf(),
        source,
    }
}

fn invalid(path: &Path, text: &str) -> StatsError {
    cgroup_err(path)(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("unexpected content {text:?}"),
    ))
}

/// One number; v2's `max` is "no limit".
pub(crate) fn read_u64(path: &Path) -> Result<u64, StatsError> {
    let text = std::fs::read_to_string(path).map_err(cgroup_err(path))?;
    let text = text.trim();
    if text == "max" {
        return Ok(u64::MAX);
    }
    text.parse().map_err(|_| invalid(path, text))
}

/// `key value` lines (memory.stat, cpu.stat).
pub(crate) fn read_keyed(path: &Path) -> Result<HashMap<String, u64>, StatsError> {
    let text = std::fs::read_to_string(path).map_err(cgroup_err(path))?;
    parse_keyed(&text).ok_or_else(|| invalid(path, &text))
}

fn parse_keyed(text: &str) -> Option<HashMap<String, u64>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (key, value) = line.split_once(' ')?;
            Some((key.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}
