//! Reading a cgroup's CPU, memory and pid counters straight from cgroupfs, v1 or v2, as
//! cadvisor reads them for the Go kubelet: the node (the root cgroup), the `pods` and
//! `kubelet` system containers, and pods whose runtime does not report pod stats.

use std::path::{Path, PathBuf};

/// v1 reports "unlimited" as the largest page-aligned i64; anything this large is no limit.
const UNLIMITED: u64 = 1 << 62;

/// Memory of one cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryReading {
    /// All memory charged, page cache included.
    pub usage: u64,
    /// Usage minus inactive file pages (never below zero).
    pub working_set: u64,
    /// Anonymous memory.
    pub rss: u64,
    /// Minor page faults.
    pub page_faults: u64,
    /// Major page faults.
    pub major_page_faults: u64,
    /// The limit; `None` when unlimited.
    pub limit: Option<u64>,
}

/// One reading of a cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupReading {
    /// When read, nanoseconds since the epoch.
    pub timestamp_ns: i64,
    /// Cumulative CPU time, nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    /// Memory, when the memory controller knows the cgroup.
    pub memory: Option<MemoryReading>,
    /// Tasks in the cgroup (pids controller).
    pub pids: Option<u64>,
}

/// Where cgroupfs is mounted and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroupfs {
    root: PathBuf,
    unified: bool,
}

impl Default for Cgroupfs {
    fn default() -> Self {
        Self::detect()
    }
}

impl Cgroupfs {
    /// The host's `/sys/fs/cgroup`: unified (v2) when it has `cgroup.controllers`.
    pub fn detect() -> Self {
        let root = PathBuf::from("/sys/fs/cgroup");
        let unified = root.join("cgroup.controllers").exists();
        Self { root, unified }
    }

    /// A tree laid out as v1 (one dir per controller) or v2 under `root` (tests).
    #[cfg(test)]
    pub fn at(root: impl Into<PathBuf>, unified: bool) -> Self {
        Self {
            root: root.into(),
            unified,
        }
    }

    /// Whether this is cgroup v2.
    pub fn is_unified(&self) -> bool {
        self.unified
    }

    fn dir(&self, controller: &str, cgroup: &str) -> PathBuf {
        let rel = cgroup.trim_start_matches('/');
        if self.unified {
            self.root.join(rel)
        } else {
            self.root.join(controller).join(rel)
        }
    }

    /// Whether the cgroup exists (in the memory hierarchy on v1).
    #[cfg(test)]
    pub fn exists(&self, cgroup: &str) -> bool {
        self.dir("memory", cgroup).is_dir()
    }

    /// The cgroup dir's change time, the closest cgroupfs has to a creation time.
    pub fn created(&self, cgroup: &str) -> Option<i64> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(self.dir("memory", cgroup)).ok()?;
        meta.ctime()
            .checked_mul(1_000_000_000)?
            .checked_add(meta.ctime_nsec())
    }

    /// Reads a cgroup (`/kubepods/pod<uid>`, `/` for the root). Blocking: a few small file
    /// reads. `None` when no controller knows it.
    pub fn read(&self, cgroup: &str, timestamp_ns: i64) -> Option<CgroupReading> {
        let reading = if self.unified {
            self.read_v2(cgroup, timestamp_ns)
        } else {
            self.read_v1(cgroup, timestamp_ns)
        };
        (reading.cpu_usage_ns.is_some() || reading.memory.is_some()).then_some(reading)
    }

    fn read_v1(&self, cgroup: &str, timestamp_ns: i64) -> CgroupReading {
        let cpu_usage_ns = read_number(&self.dir("cpuacct", cgroup).join("cpuacct.usage"));
        let memory_dir = self.dir("memory", cgroup);
        let memory = read_number(&memory_dir.join("memory.usage_in_bytes")).map(|usage| {
            let stat = read_keyed(&memory_dir.join("memory.stat"));
            let key = |k: &str| stat.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
            let inactive_file = key("total_inactive_file").unwrap_or_default();
            MemoryReading {
                usage,
                working_set: usage.saturating_sub(inactive_file),
                rss: key("total_rss").unwrap_or_default(),
                page_faults: key("total_pgfault").unwrap_or_default(),
                major_page_faults: key("total_pgmajfault").unwrap_or_default(),
                limit: read_number(&memory_dir.join("memory.limit_in_bytes"))
                    .filter(|l| *l < UNLIMITED),
            }
        });
        let pids = read_number(&self.dir("pids", cgroup).join("pids.current"));
        CgroupReading {
            timestamp_ns,
            cpu_usage_ns,
            memory,
            pids,
        }
    }

    fn read_v2(&self, cgroup: &str, timestamp_ns: i64) -> CgroupReading {
        let dir = self.dir("", cgroup);
        let cpu = read_keyed(&dir.join("cpu.stat"));
        let cpu_usage_ns = cpu
            .iter()
            .find(|(k, _)| k == "usage_usec")
            .map(|(_, v)| v.saturating_mul(1000));
        let memory = read_number(&dir.join("memory.current")).map(|usage| {
            let stat = read_keyed(&dir.join("memory.stat"));
            let key = |k: &str| stat.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
            MemoryReading {
                usage,
                working_set: usage.saturating_sub(key("inactive_file").unwrap_or_default()),
                rss: key("anon").unwrap_or_default(),
                page_faults: key("pgfault").unwrap_or_default(),
                major_page_faults: key("pgmajfault").unwrap_or_default(),
                // "max" does not parse as a number: unlimited.
                limit: read_number(&dir.join("memory.max")).filter(|l| *l < UNLIMITED),
            }
        });
        let pids = read_number(&dir.join("pids.current"));
        CgroupReading {
            timestamp_ns,
            cpu_usage_ns,
            memory,
            pids,
        }
    }
}

/// The cgroup of a process in the memory hierarchy (v1) or the unified one (v2), from
/// `/proc/<pid>/cgroup` text.
pub fn cgroup_of_process(proc_cgroup: &str, unified: bool) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let id = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        let wanted = if unified {
            id == "0" && controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == "memory")
        };
        wanted.then(|| path.to_string())
    })
}

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `key value` lines (memory.stat, cpu.stat).
fn read_keyed(path: &Path) -> Vec<(String, u64)> {
    std::fs::read_to_string(path)
        .map(|text| parse_keyed(&text))
        .unwrap_or_default()
}

/// Parses `key value` lines, skipping any that do not fit.
pub fn parse_keyed(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}
