//! A cgroup's CPU, memory and pid counters read straight from cgroupfs, v1 or v2, with
//! cadvisor's arithmetic (the working set is the usage less the inactive file cache, floored
//! at 0; RSS is the anonymous memory): the kubelet's node, system-container and pod stats and
//! ferrolet-cri's pod-level stats all read through [`Hierarchy::read`].

use std::collections::HashMap;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Above this a memory limit means "unlimited": v1 reports its maximum rounded down to a page
/// multiple, so the sentinel is not exactly `i64::MAX` (containerd and cadvisor use the same).
const UNLIMITED: u64 = 1 << 62;

/// Linux's errno for an operation not supported (what a pressure file answers with PSI off).
const EOPNOTSUPP: i32 = 95;

/// Memory of one cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// All memory charged, page cache included (v1 `memory.usage_in_bytes`, v2
    /// `memory.current`).
    pub usage: u64,
    /// Usage minus inactive file pages, never below zero.
    pub working_set: u64,
    /// Anonymous memory (v1 `total_rss`, v2 `anon`).
    pub rss: u64,
    /// Minor page faults.
    pub page_faults: u64,
    /// Major page faults.
    pub major_page_faults: u64,
    /// The limit; `None` when unlimited.
    pub limit: Option<u64>,
    /// Swap in use: v1 memory+swap less memory (`None` without swap accounting); v2
    /// `memory.swap.current`, 0 without it (as containerd's cgroups library reads it).
    pub swap: Option<u64>,
}

/// One line of a pressure file (`some avg10=0.12 avg60=0.05 avg300=0.01 total=12345`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PsiLine {
    /// Stall time since the cgroup's creation, microseconds (the kernel's `total`, kept as
    /// the Go kubelet keeps it).
    pub total: u64,
    /// Share of the last 10 s stalled, percent.
    pub avg10: f64,
    /// Share of the last 60 s stalled, percent.
    pub avg60: f64,
    /// Share of the last 300 s stalled, percent.
    pub avg300: f64,
}

/// One resource's pressure (PSI): time some task stalled, and time all tasks did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Psi {
    /// At least one task stalled.
    pub some: PsiLine,
    /// Every non-idle task stalled at once.
    pub full: PsiLine,
}

/// A cgroup's pressure stall information (cgroup v2 `cpu.pressure`, `memory.pressure`,
/// `io.pressure`; none on v1 or a kernel without PSI).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pressure {
    /// CPU pressure.
    pub cpu: Option<Psi>,
    /// Memory pressure.
    pub memory: Option<Psi>,
    /// IO pressure.
    pub io: Option<Psi>,
}

/// One reading of a cgroup; a part is `None` when its controller does not know the cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Cumulative CPU time, nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    /// Memory.
    pub memory: Option<MemoryUsage>,
    /// Tasks in the cgroup (pids controller).
    pub pids: Option<u64>,
    /// Pressure stall information (v2 only).
    pub pressure: Pressure,
}

/// Why a cgroup could not be read.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// The cgroup path is the root or climbs out of the hierarchy (it may come from a client).
    #[error("cgroup {0:?} is not a path below the cgroup root")]
    BadCgroup(String),
    /// A file exists but could not be read.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A file held something other than a number.
    #[error("{}: unexpected content {content:?}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it held.
        content: String,
    },
}

/// Where cgroupfs is mounted and which version it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    root: PathBuf,
    unified: bool,
    /// The machine-wide pressure files (`/proc/pressure`), the root cgroup's when the root
    /// has none of its own; `None` for a tree that is not the host's.
    proc_pressure: Option<PathBuf>,
}

impl Default for Hierarchy {
    fn default() -> Self {
        Self::detect()
    }
}

impl Hierarchy {
    /// The host's `/sys/fs/cgroup`.
    pub fn detect() -> Self {
        Self {
            proc_pressure: Some("/proc/pressure".into()),
            ..Self::detect_at("/sys/fs/cgroup")
        }
    }

    /// The hierarchy at `root`: unified (v2) when it has `cgroup.controllers`, else v1 with a
    /// directory per controller.
    pub fn detect_at(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let unified = root.join("cgroup.controllers").exists();
        Self {
            root,
            unified,
            proc_pressure: None,
        }
    }

    /// A tree laid out as v1 or v2 under `root`, whatever it holds (tests).
    pub fn at(root: impl Into<PathBuf>, unified: bool) -> Self {
        Self {
            root: root.into(),
            unified,
            proc_pressure: None,
        }
    }

    /// Whether this is cgroup v2.
    pub fn is_unified(&self) -> bool {
        self.unified
    }

    /// The directory of `cgroup` (`/kubepods/pod<uid>`) for `controller` (ignored on v2).
    pub fn dir(&self, controller: &str, cgroup: &str) -> PathBuf {
        let rel = cgroup.trim_start_matches('/');
        if self.unified {
            self.root.join(rel)
        } else {
            self.root.join(controller).join(rel)
        }
    }

    /// The cgroup directory's change time in nanoseconds since the epoch, the closest cgroupfs
    /// has to a creation time.
    pub fn created(&self, cgroup: &str) -> Option<i64> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(self.dir("memory", cgroup)).ok()?;
        meta.ctime()
            .checked_mul(1_000_000_000)?
            .checked_add(meta.ctime_nsec())
    }

    /// Reads `cgroup` (`/kubepods/pod<uid>`; `/` is the root, which only
    /// [`Hierarchy::read_root`] reads). Blocking: a few small file reads. A missing file leaves
    /// its part `None`; a file that cannot be read or parsed is an error naming it.
    pub fn read(&self, cgroup: &str) -> Result<Usage, UsageError> {
        let rel = relative(cgroup)?;
        self.read_dir(&rel.to_string_lossy())
    }

    /// Reads the root cgroup (the whole machine; v2 has no memory files there, and its
    /// pressure may be only in `/proc/pressure`).
    pub fn read_root(&self) -> Result<Usage, UsageError> {
        let mut usage = self.read_dir("")?;
        if let (true, Some(proc)) = (self.unified, &self.proc_pressure) {
            let p = &mut usage.pressure;
            for (slot, file) in [
                (&mut p.cpu, "cpu"),
                (&mut p.memory, "memory"),
                (&mut p.io, "io"),
            ] {
                if slot.is_none() {
                    *slot = read_psi(&proc.join(file))?;
                }
            }
        }
        Ok(usage)
    }

    /// How many of `cgroup`'s processes the kernel OOM-killed (v1 `memory.oom_control`, v2
    /// `memory.events`; on a hybrid v1 host the unified hierarchy's too, where a runtime may
    /// have put the container); `None` when the cgroup is gone (systemd removes a scope as soon
    /// as its last process exits) or the path is not below the root.
    pub fn oom_kills(&self, cgroup: &str) -> Option<u64> {
        let rel = relative(cgroup).ok()?;
        let count = |path: PathBuf| -> Option<u64> {
            let text = std::fs::read_to_string(path).ok()?;
            parse_keyed(&text).get("oom_kill").copied()
        };
        let files = if self.unified {
            vec![self.root.join(&rel).join("memory.events")]
        } else {
            vec![
                self.root
                    .join("memory")
                    .join(&rel)
                    .join("memory.oom_control"),
                self.root.join("unified").join(&rel).join("memory.events"),
            ]
        };
        files.into_iter().filter_map(count).max()
    }

    /// The child of `cgroup` whose name holds `id`, as cadvisor finds a container below its
    /// pod: `<id>` (cgroupfs), `cri-containerd-<id>.scope` or `ferrolet-cri-<id>.scope`
    /// (systemd). `None` when there is none or `cgroup` cannot be listed.
    pub fn child_with(&self, cgroup: &str, id: &str) -> Option<String> {
        let rel = relative(cgroup).ok()?;
        if id.is_empty() {
            return None;
        }
        let dir = self.dir("cpu", &rel.to_string_lossy());
        std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .find(|name| name.contains(id))
            .map(|name| format!("/{}/{name}", rel.display()))
    }

    fn read_dir(&self, rel: &str) -> Result<Usage, UsageError> {
        if self.unified {
            self.read_v2(&self.dir("", rel))
        } else {
            self.read_v1(rel)
        }
    }

    fn read_v1(&self, rel: &str) -> Result<Usage, UsageError> {
        let cpu_usage_ns = read_number(&self.dir("cpuacct", rel).join("cpuacct.usage"))?;
        let memory_dir = self.dir("memory", rel);
        let memory = match read_number(&memory_dir.join("memory.usage_in_bytes"))? {
            None => None,
            Some(usage) => {
                let stat = read_keyed(&memory_dir.join("memory.stat"))?;
                let key = |k: &str| stat.get(k).copied().unwrap_or_default();
                let memsw = read_number(&memory_dir.join("memory.memsw.usage_in_bytes"))?;
                Some(MemoryUsage {
                    usage,
                    working_set: usage.saturating_sub(key("total_inactive_file")),
                    rss: key("total_rss"),
                    page_faults: key("total_pgfault"),
                    major_page_faults: key("total_pgmajfault"),
                    limit: read_number(&memory_dir.join("memory.limit_in_bytes"))?.and_then(limit),
                    // memsw counts memory plus swap; swap alone is the difference.
                    swap: memsw.filter(|m| *m > 0).map(|m| m.saturating_sub(usage)),
                })
            }
        };
        let pids = read_number(&self.dir("pids", rel).join("pids.current"))?;
        Ok(Usage {
            cpu_usage_ns,
            memory,
            pids,
            pressure: Pressure::default(),
        })
    }

    fn read_v2(&self, dir: &Path) -> Result<Usage, UsageError> {
        let cpu_usage_ns = read_keyed_opt(&dir.join("cpu.stat"))?
            .and_then(|cpu| cpu.get("usage_usec").copied())
            .map(|usec| usec.saturating_mul(1000));
        let memory = match read_number(&dir.join("memory.current"))? {
            None => None,
            Some(usage) => {
                let stat = read_keyed(&dir.join("memory.stat"))?;
                let key = |k: &str| stat.get(k).copied().unwrap_or_default();
                Some(MemoryUsage {
                    usage,
                    working_set: usage.saturating_sub(key("inactive_file")),
                    rss: key("anon"),
                    page_faults: key("pgfault"),
                    major_page_faults: key("pgmajfault"),
                    limit: read_number(&dir.join("memory.max"))?.and_then(limit),
                    swap: Some(read_number(&dir.join("memory.swap.current"))?.unwrap_or(0)),
                })
            }
        };
        let pids = read_number(&dir.join("pids.current"))?;
        let pressure = Pressure {
            cpu: read_psi(&dir.join("cpu.pressure"))?,
            memory: read_psi(&dir.join("memory.pressure"))?,
            io: read_psi(&dir.join("io.pressure"))?,
        };
        Ok(Usage {
            cpu_usage_ns,
            memory,
            pids,
            pressure,
        })
    }
}

/// The cgroup of a process in `controller`'s hierarchy (v1) or the unified one (v2), from
/// `/proc/<pid>/cgroup` text.
pub fn cgroup_of_process(proc_cgroup: &str, unified: bool, controller: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let id = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        let wanted = if unified {
            id == "0" && controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == controller)
        };
        wanted.then(|| path.to_string())
    })
}

/// A limit as read, `None` for none: v2's `max`, v1's page-rounded maximum, or 0.
fn limit(value: u64) -> Option<u64> {
    (value > 0 && value < UNLIMITED).then_some(value)
}

/// The path below the root; it may come from a CRI request, so it may not climb out.
fn relative(cgroup: &str) -> Result<PathBuf, UsageError> {
    let rel: PathBuf = Path::new(cgroup)
        .components()
        .filter(|c| !matches!(c, Component::RootDir | Component::CurDir))
        .collect();
    if rel.as_os_str().is_empty() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(UsageError::BadCgroup(cgroup.to_string()));
    }
    Ok(rel)
}

/// A file's text; `None` when it does not exist.
fn read_text(path: &Path) -> Result<Option<String>, UsageError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(UsageError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// One number; v2's `max` reads as `u64::MAX`.
fn read_number(path: &Path) -> Result<Option<u64>, UsageError> {
    let Some(text) = read_text(path)? else {
        return Ok(None);
    };
    let text = text.trim();
    if text == "max" {
        return Ok(Some(u64::MAX));
    }
    text.parse().map(Some).map_err(|_| UsageError::Parse {
        path: path.to_path_buf(),
        content: text.to_string(),
    })
}

fn read_keyed_opt(path: &Path) -> Result<Option<HashMap<String, u64>>, UsageError> {
    Ok(read_text(path)?.map(|text| parse_keyed(&text)))
}

/// `key value` lines; empty when the file does not exist.
fn read_keyed(path: &Path) -> Result<HashMap<String, u64>, UsageError> {
    Ok(read_keyed_opt(path)?.unwrap_or_default())
}

/// A pressure file; `None` when it does not exist (v1, or a kernel built or booted without
/// PSI, where reading it fails with `EOPNOTSUPP`).
fn read_psi(path: &Path) -> Result<Option<Psi>, UsageError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(EOPNOTSUPP) => {
            return Ok(None);
        }
        Err(source) => {
            return Err(UsageError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    parse_psi(&text).map(Some).ok_or_else(|| UsageError::Parse {
        path: path.to_path_buf(),
        content: text.trim().to_string(),
    })
}

/// Parses a pressure file: a `some` line and, except for the machine's CPU on older
/// kernels, a `full` line (all zero when absent).
pub fn parse_psi(text: &str) -> Option<Psi> {
    let mut psi = Psi::default();
    let mut some_seen = false;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = line.split_whitespace();
        let slot = match fields.next()? {
            "some" => {
                some_seen = true;
                &mut psi.some
            }
            "full" => &mut psi.full,
            _ => return None,
        };
        for field in fields {
            let (key, value) = field.split_once('=')?;
            match key {
                "avg10" => slot.avg10 = value.parse().ok()?,
                "avg60" => slot.avg60 = value.parse().ok()?,
                "avg300" => slot.avg300 = value.parse().ok()?,
                "total" => slot.total = value.parse().ok()?,
                _ => {}
            }
        }
    }
    some_seen.then_some(psi)
}

/// Parses `key value` lines (memory.stat, cpu.stat), skipping any whose value is not one
/// number (newer kernels may add such lines).
pub fn parse_keyed(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
