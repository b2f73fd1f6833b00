//! A cgroup's memory and CPU usage, read as cadvisor reads them: the working set is the usage
//! less the inactive file cache (floored at 0), RSS the anonymous memory.

use std::path::Path;

use super::CgroupName;
use super::error::CgroupError;
use super::fs;
use super::layout::Layout;

/// A cgroup's usage, in the units the Summary API wants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupStats {
    /// Memory in use, page cache included (v1 `memory.usage_in_bytes`, v2 `memory.current`).
    pub memory_usage_bytes: u64,
    /// The usage less inactive file cache, floored at 0 (cadvisor's working set).
    pub memory_working_set_bytes: u64,
    /// Anonymous memory (v1 `total_rss`, v2 `anon` of `memory.stat`).
    pub memory_rss_bytes: u64,
    /// CPU time used in nanoseconds (v1 `cpuacct.usage`, v2 `usage_usec` of `cpu.stat`).
    pub cpu_usage_nanos: u64,
}

/// `name`'s memory usage in bytes (Go's `MemoryUsage`).
pub(super) fn memory_usage(layout: &Layout, name: &CgroupName) -> Result<u64, CgroupError> {
    let (dir, file) = if layout.mode().is_v2() {
        (name.dir_in(layout.root()), "memory.current")
    } else {
        (
            super::controller_dir(layout, name, "memory", "memory.usage_in_bytes")?,
            "memory.usage_in_bytes",
        )
    };
    fs::read_u64(&name.to_cgroupfs(), &dir, file)
}

/// `name`'s memory and CPU usage.
pub(super) fn read(layout: &Layout, name: &CgroupName) -> Result<CgroupStats, CgroupError> {
    let cg = name.to_cgroupfs();
    let v2 = layout.mode().is_v2();
    let usage = memory_usage(layout, name)?;
    let (memory_dir, cpu_dir) = if v2 {
        let d = name.dir_in(layout.root());
        (d.clone(), d)
    } else {
        (
            super::controller_dir(layout, name, "memory", "memory.stat")?,
            super::controller_dir(layout, name, "cpuacct", "cpuacct.usage")?,
        )
    };
    let (inactive_key, rss_key) = if v2 {
        ("inactive_file", "anon")
    } else {
        ("total_inactive_file", "total_rss")
    };
    let stat = fs::read(&cg, &memory_dir, "memory.stat")?;
    let inactive = stat_value(&cg, &memory_dir, "memory.stat", &stat, inactive_key)?;
    let rss = stat_value(&cg, &memory_dir, "memory.stat", &stat, rss_key)?;
    let cpu_usage_nanos = if v2 {
        let stat = fs::read(&cg, &cpu_dir, "cpu.stat")?;
        stat_value(&cg, &cpu_dir, "cpu.stat", &stat, "usage_usec")?.saturating_mul(1000)
    } else {
        fs::read_u64(&cg, &cpu_dir, "cpuacct.usage")?
    };
    Ok(CgroupStats {
        memory_usage_bytes: usage,
        memory_working_set_bytes: usage.saturating_sub(inactive),
        memory_rss_bytes: rss,
        cpu_usage_nanos,
    })
}

/// The value of `key` in a flat keyed file (`key value` lines); 0 when absent.
fn stat_value(cg: &str, dir: &Path, file: &str, text: &str, key: &str) -> Result<u64, CgroupError> {
    let Some(line) = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(key))
    else {
        return Ok(0);
    };
    let value = line.split_whitespace().nth(1).unwrap_or("");
    value.parse().map_err(|_| CgroupError::Parse {
        cgroup: cg.to_string(),
        path: dir.join(file),
        content: line.to_string(),
    })
}
