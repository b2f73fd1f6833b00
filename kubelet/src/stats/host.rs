//! Node facts from the host: CPU and memory of the whole node, network counters, filesystem
//! capacity (statvfs), directory usage (du), pid limits and the boot time. Everything here is
//! blocking file I/O: callers run it in `spawn_blocking`.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::unistd::{SysconfVar, sysconf};

use super::cgroup::{self, CgroupReading, Hierarchy, MemoryUsage};
use super::types::InterfaceStats;

/// Interfaces cadvisor leaves out of a host's network stats: loopback and container ends.
const IGNORED_INTERFACE_PREFIXES: &[&str] = &["lo", "veth", "docker", "nerdctl"];

/// The whole node's CPU and memory: the root cgroup on v1 (as cadvisor reads it), else
/// `/proc/stat` and `/proc/meminfo`, with the root's pressure on v2.
pub fn node_reading(cgroups: &Hierarchy, timestamp_ns: i64) -> CgroupReading {
    let mut reading = cgroup::read(cgroups, "/", timestamp_ns).unwrap_or(CgroupReading {
        timestamp_ns,
        ..Default::default()
    });
    if cgroups.is_unified() {
        // v2's root has no memory.current, and its cpu.stat is not what cadvisor reports.
        reading.cpu_usage_ns = None;
        reading.memory = None;
    }
    if reading.cpu_usage_ns.is_none() {
        reading.cpu_usage_ns = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|t| proc_stat_cpu_ns(&t, clock_ticks()));
    }
    if reading.memory.is_none() {
        reading.memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| meminfo_memory(&t));
    }
    reading
}

fn clock_ticks() -> u64 {
    sysconf(SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|n| u64::try_from(n).ok())
        .filter(|n| *n > 0)
        .unwrap_or(100)
}

/// Busy CPU time of the node from `/proc/stat`'s `cpu` line (user, nice, system, irq,
/// softirq, steal), in nanoseconds.
pub fn proc_stat_cpu_ns(text: &str, ticks_per_second: u64) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let pick = |i: usize| fields.get(i).copied().unwrap_or(0);
    let busy = [0, 1, 2, 5, 6, 7]
        .into_iter()
        .fold(0u64, |acc, i| acc.saturating_add(pick(i)));
    Some(busy.saturating_mul(1_000_000_000 / ticks_per_second.max(1)))
}

/// Node memory from `/proc/meminfo` (cgroup v2 has no root memory.current): usage is total
/// minus free, the working set usage minus inactive file pages.
pub fn meminfo_memory(text: &str) -> Option<MemoryUsage> {
    let kb = |key: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|v| v.saturating_mul(1024))
    };
    let total = kb("MemTotal:")?;
    let usage = total.saturating_sub(kb("MemFree:")?);
    Some(MemoryUsage {
        usage,
        working_set: usage.saturating_sub(kb("Inactive(file):").unwrap_or(0)),
        rss: kb("AnonPages:").unwrap_or(0),
        page_faults: 0,
        major_page_faults: 0,
        limit: None,
        swap: None,
    })
}

/// When the node booted, seconds since the epoch (`btime` in `/proc/stat`).
pub fn boot_time() -> Option<i64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// `/proc/net/dev` as interface counters.
pub fn parse_net_dev(text: &str) -> Vec<InterfaceStats> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|v| v.parse().unwrap_or(0))
                .collect();
            Some(InterfaceStats {
                name: name.trim().to_string(),
                rx_bytes: f.first().copied(),
                rx_errors: f.get(2).copied(),
                tx_bytes: f.get(8).copied(),
                tx_errors: f.get(10).copied(),
            })
        })
        .collect()
}

/// The interface of the default route in `/proc/net/route` text.
pub fn default_route_interface(text: &str) -> Option<String> {
    const RTF_UP: u32 = 0x1;
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (iface, dest, flags) = (f.first()?, f.get(1)?, f.get(3)?);
        let up = u32::from_str_radix(flags, 16).ok()? & RTF_UP != 0;
        (*dest == "00000000" && up).then(|| iface.to_string())
    })
}

/// The host's interfaces (cadvisor's selection) and which is the default one: the default
/// route's, else `eth0` as the Go kubelet assumes.
pub fn host_network() -> Option<(InterfaceStats, Vec<InterfaceStats>)> {
    let dev = std::fs::read_to_string("/proc/net/dev").ok()?;
    let interfaces: Vec<InterfaceStats> = parse_net_dev(&dev)
        .into_iter()
        .filter(|i| {
            !IGNORED_INTERFACE_PREFIXES
                .iter()
                .any(|p| i.name.starts_with(p))
        })
        .collect();
    let default_name = std::fs::read_to_string("/proc/net/route")
        .ok()
        .and_then(|t| default_route_interface(&t))
        .unwrap_or_else(|| "eth0".to_string());
    let default = interfaces
        .iter()
        .find(|i| i.name == default_name)
        .cloned()
        .unwrap_or_default();
    Some((default, interfaces))
}

/// A filesystem's size and free space, from statvfs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsInfo {
    /// Size in bytes.
    pub capacity: u64,
    /// Bytes free for unprivileged users.
    pub available: u64,
    /// Bytes in use (size minus all free blocks).
    pub used: u64,
    /// Inodes of the filesystem.
    pub inodes: u64,
    /// Free inodes.
    pub inodes_free: u64,
}

/// statvfs of the filesystem holding `path`.
pub fn fs_info(path: &Path) -> std::io::Result<FsInfo> {
    let st = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
    let unit = st.fragment_size();
    let blocks = st.blocks();
    Ok(FsInfo {
        capacity: blocks.saturating_mul(unit),
        available: st.blocks_available().saturating_mul(unit),
        used: blocks.saturating_sub(st.blocks_free()).saturating_mul(unit),
        inodes: st.files(),
        inodes_free: st.files_free(),
    })
}

/// What a directory tree takes on its filesystem.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes of allocated blocks (`du -s -B1`).
    pub bytes: u64,
    /// Inodes (files, dirs, links), hard links once.
    pub inodes: u64,
}

/// `du -x -s` of `path` in bytes and inodes: allocated blocks, hard links counted once, not
/// crossing into other filesystems. A missing path is empty; entries that vanish while
/// walking are skipped.
pub fn disk_usage(path: &Path) -> std::io::Result<DiskUsage> {
    let top = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(DiskUsage::default()),
        Err(e) => return Err(e),
    };
    let dev = top.dev();
    let mut seen = HashSet::new();
    let mut usage = DiskUsage::default();
    let mut count = |meta: &std::fs::Metadata, usage: &mut DiskUsage| {
        if meta.nlink() > 1 && !meta.is_dir() && !seen.insert((meta.dev(), meta.ino())) {
            return;
        }
        usage.bytes = usage
            .bytes
            .saturating_add(meta.blocks().saturating_mul(512));
        usage.inodes += 1;
    };
    count(&top, &mut usage);
    if !top.is_dir() {
        return Ok(usage);
    }
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.dev() != dev {
                continue;
            }
            count(&meta, &mut usage);
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(usage)
}

/// Sizes of the regular files directly in `dir` (not in its subdirs), as `DiskUsage`.
pub fn top_level_files_usage(dir: &Path) -> DiskUsage {
    let mut usage = DiskUsage::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return usage;
    };
    for entry in entries.flatten() {
        if let Ok(meta) = entry.metadata()
            && meta.is_file()
        {
            usage.bytes = usage
                .bytes
                .saturating_add(meta.blocks().saturating_mul(512));
            usage.inodes += 1;
        }
    }
    usage
}

/// `kernel.pid_max` and the tasks on the node (the total of `/proc/loadavg`'s
/// `running/total` field, which the Go kubelet prefers to sysinfo's truncated count).
pub fn pid_limits() -> (Option<i64>, Option<i64>) {
    let max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse().ok());
    let current = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| loadavg_tasks(&t));
    (max, current)
}

/// The total task count in `/proc/loadavg` text (`0.0 0.1 0.2 1/108 2987`).
pub fn loadavg_tasks(text: &str) -> Option<i64> {
    text.split_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse()
        .ok()
}
