//! A container's cgroup: found from its init's `/proc/<pid>/cgroup`, read for `Stats`, and
//! watched for OOM kills (cgroup v1 `memory.oom_control` through an eventfd, v2
//! `memory.events` through inotify).

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use ferrolet_proto::cgroup_metrics as m;
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

const ROOT: &str = "/sys/fs/cgroup";

/// Where a container's cgroup lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cgroup {
    /// cgroup v1: the memory controller's dir and the others' by controller name.
    V1(HashMap<String, PathBuf>),
    /// cgroup v2: the unified dir.
    V2(PathBuf),
}

impl Cgroup {
    /// The cgroup of process `pid`, or None if it is gone or has none.
    pub fn of_pid(pid: u32) -> Option<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        Self::parse(&text, Path::new(ROOT))
    }

    fn parse(text: &str, root: &Path) -> Option<Self> {
        let mut v1 = HashMap::new();
        let mut unified = None;
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let rel = path.trim_start_matches('/');
            if controllers.is_empty() {
                unified = Some(root.join(rel));
            } else {
                for c in controllers.split(',') {
                    let dir = controllers.trim_start_matches("name=");
                    v1.insert(c.to_string(), root.join(dir).join(rel));
                }
            }
        }
        if v1.contains_key("memory") {
            Some(Cgroup::V1(v1))
        } else {
            unified.map(Cgroup::V2)
        }
    }

    /// The processes in the cgroup.
    pub fn pids(&self) -> Vec<u32> {
        let dir = match self {
            Cgroup::V1(c) => c.get("pids").or_else(|| c.get("memory")),
            Cgroup::V2(d) => Some(d),
        };
        dir.and_then(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// The cgroup's metrics as `Stats` returns them.
    pub fn stats(&self) -> prost_types::Any {
        use prost::Message;
        match self {
            Cgroup::V1(c) => prost_types::Any {
                type_url: m::V1_TYPE.to_string(),
                value: v1_stats(c).encode_to_vec(),
            },
            Cgroup::V2(d) => prost_types::Any {
                type_url: m::V2_TYPE.to_string(),
                value: v2_stats(d).encode_to_vec(),
            },
        }
    }

    /// Starts watching for OOM kills; the descriptor turns readable on one.
    pub fn watch_oom(&self) -> Option<OomWatch> {
        match self {
            Cgroup::V1(c) => {
                let dir = c.get("memory")?;
                let control = std::fs::File::open(dir.join("memory.oom_control")).ok()?;
                let efd = EventFd::from_value_and_flags(
                    0,
                    EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
                )
                .ok()?;
                let line = format!("{} {}", efd.as_fd().as_raw_fd(), control.as_raw_fd());
                std::fs::write(dir.join("cgroup.event_control"), line).ok()?;
                Some(OomWatch::V1 {
                    efd,
                    _control: control,
                    dir: dir.clone(),
                })
            }
            Cgroup::V2(d) => {
                let events = d.join("memory.events");
                let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).ok()?;
                inotify.add_watch(&events, AddWatchFlags::IN_MODIFY).ok()?;
                let seen = oom_kills(&events);
                Some(OomWatch::V2 {
                    inotify,
                    events,
                    seen,
                })
            }
        }
    }
}

/// An armed OOM watch.
#[derive(Debug)]
pub enum OomWatch {
    /// The eventfd registered with `cgroup.event_control`.
    V1 {
        /// Readable on each OOM.
        efd: EventFd,
        /// Kept open: closing it unregisters the event.
        _control: std::fs::File,
        /// The memory cgroup.
        dir: PathBuf,
    },
    /// inotify on `memory.events`.
    V2 {
        /// Readable on each change.
        inotify: Inotify,
        /// The watched file.
        events: PathBuf,
        /// `oom_kill` seen so far.
        seen: u64,
    },
}

impl OomWatch {
    /// The descriptor to poll.
    pub fn fd(&self) -> i32 {
        match self {
            OomWatch::V1 { efd, .. } => efd.as_fd().as_raw_fd(),
            OomWatch::V2 { inotify, .. } => inotify.as_fd().as_raw_fd(),
        }
    }

    /// After readiness: whether an OOM kill happened since the last call.
    pub fn check(&mut self) -> bool {
        match self {
            OomWatch::V1 { efd, dir, .. } => {
                let mut hit = false;
                while efd.read().is_ok() {
                    hit = true;
                }
                // The eventfd also fires when the cgroup is removed.
                hit && dir.exists()
            }
            OomWatch::V2 {
                inotify,
                events,
                seen,
            } => {
                while inotify.read_events().is_ok_and(|e| !e.is_empty()) {}
                let now = oom_kills(events);
                let hit = now > *seen;
                *seen = now;
                hit
            }
        }
    }
}

fn oom_kills(events: &Path) -> u64 {
    read_keyed(events).get("oom_kill").copied().unwrap_or(0)
}

fn read_u64(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            let s = s.trim();
            if s == "max" {
                Some(u64::MAX)
            } else {
                s.parse().ok()
            }
        })
        .unwrap_or(0)
}

/// A `key value` file (`memory.stat`, `cpu.stat`, `memory.events`).
fn read_keyed(path: &Path) -> HashMap<String, u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn entry(dir: &Path, prefix: &str) -> m::MemoryEntry {
    m::MemoryEntry {
        limit: read_u64(&dir.join(format!("{prefix}.limit_in_bytes"))),
        usage: read_u64(&dir.join(format!("{prefix}.usage_in_bytes"))),
        max: read_u64(&dir.join(format!("{prefix}.max_usage_in_bytes"))),
        failcnt: read_u64(&dir.join(format!("{prefix}.failcnt"))),
    }
}

fn pids_stat(dir: &Path) -> m::PidsStat {
    let limit = read_u64(&dir.join("pids.max"));
    m::PidsStat {
        current: read_u64(&dir.join("pids.current")),
        limit: if limit == u64::MAX { 0 } else { limit },
    }
}

fn v1_stats(c: &HashMap<String, PathBuf>) -> m::V1Metrics {
    let memory = c.get("memory").map(|d| {
        let stat = read_keyed(&d.join("memory.stat"));
        let get = |k: &str| stat.get(k).copied().unwrap_or(0);
        let swap = entry(d, "memory.memsw");
        m::V1Memory {
            cache: get("cache"),
            rss: get("rss"),
            total_cache: get("total_cache"),
            total_rss: get("total_rss"),
            total_pg_fault: get("total_pgfault"),
            total_pg_maj_fault: get("total_pgmajfault"),
            total_inactive_file: get("total_inactive_file"),
            usage: Some(entry(d, "memory")),
            swap: (swap.limit > 0).then_some(swap),
        }
    });
    let cpu = c.get("cpuacct").map(|d| {
        let stat = read_keyed(&d.join("cpuacct.stat"));
        // cpuacct.stat is in USER_HZ (100 per second).
        let ticks = |k: &str| stat.get(k).copied().unwrap_or(0).saturating_mul(10_000_000);
        let throttle = c.get("cpu").map(|d| read_keyed(&d.join("cpu.stat")));
        m::V1Cpu {
            usage: Some(m::V1CpuUsage {
                total: read_u64(&d.join("cpuacct.usage")),
                kernel: ticks("system"),
                user: ticks("user"),
            }),
            throttling: throttle.map(|t| m::Throttle {
                periods: t.get("nr_periods").copied().unwrap_or(0),
                throttled_periods: t.get("nr_throttled").copied().unwrap_or(0),
                throttled_time: t.get("throttled_time").copied().unwrap_or(0),
            }),
        }
    });
    m::V1Metrics {
        pids: c.get("pids").map(|d| pids_stat(d)),
        cpu,
        memory,
    }
}

fn v2_stats(d: &Path) -> m::V2Metrics {
    let cpu = read_keyed(&d.join("cpu.stat"));
    let cget = |k: &str| cpu.get(k).copied().unwrap_or(0);
    let mem = read_keyed(&d.join("memory.stat"));
    let mget = |k: &str| mem.get(k).copied().unwrap_or(0);
    let events = read_keyed(&d.join("memory.events"));
    let eget = |k: &str| events.get(k).copied().unwrap_or(0);
    m::V2Metrics {
        pids: Some(pids_stat(d)),
        cpu: Some(m::V2Cpu {
            usage_usec: cget("usage_usec"),
            user_usec: cget("user_usec"),
            system_usec: cget("system_usec"),
            nr_periods: cget("nr_periods"),
            nr_throttled: cget("nr_throttled"),
            throttled_usec: cget("throttled_usec"),
        }),
        memory: Some(m::V2Memory {
            anon: mget("anon"),
            file: mget("file"),
            inactive_file: mget("inactive_file"),
            pgfault: mget("pgfault"),
            pgmajfault: mget("pgmajfault"),
            usage: read_u64(&d.join("memory.current")),
            usage_limit: read_u64(&d.join("memory.max")),
            swap_usage: read_u64(&d.join("memory.swap.current")),
            swap_limit: read_u64(&d.join("memory.swap.max")),
        }),
        memory_events: Some(m::MemoryEvents {
            low: eget("low"),
            high: eget("high"),
            max: eget("max"),
            oom: eget("oom"),
            oom_kill: eget("oom_kill"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v1_and_v2_membership() {
        let v1 = "12:pids:/k/pod/c\n4:memory:/k/pod/c\n3:cpu,cpuacct:/k/pod/c\n1:name=systemd:/k/pod/c\n0::/\n";
        let Some(Cgroup::V1(c)) = Cgroup::parse(v1, Path::new("/sys/fs/cgroup")) else {
            panic!("v1 expected");
        };
        assert_eq!(c["memory"], Path::new("/sys/fs/cgroup/memory/k/pod/c"));
        assert_eq!(
            c["cpuacct"],
            Path::new("/sys/fs/cgroup/cpu,cpuacct/k/pod/c")
        );
        assert_eq!(
            Cgroup::parse("0::/kubepods.slice/x.scope\n", Path::new("/sys/fs/cgroup")),
            Some(Cgroup::V2("/sys/fs/cgroup/kubepods.slice/x.scope".into()))
        );
    }

    #[test]
    fn v2_stats_read_the_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("cpu.stat"),
            "usage_usec 2500\nuser_usec 2000\n",
        )
        .unwrap();
        std::fs::write(d.path().join("memory.current"), "4096\n").unwrap();
        std::fs::write(d.path().join("memory.max"), "max\n").unwrap();
        std::fs::write(d.path().join("memory.stat"), "anon 100\ninactive_file 7\n").unwrap();
        std::fs::write(d.path().join("pids.current"), "3\n").unwrap();
        std::fs::write(d.path().join("memory.events"), "oom 1\noom_kill 1\n").unwrap();
        let s = v2_stats(d.path());
        assert_eq!(s.cpu.unwrap().usage_usec, 2500);
        let mem = s.memory.unwrap();
        assert_eq!(
            (mem.usage, mem.usage_limit, mem.anon, mem.inactive_file),
            (4096, u64::MAX, 100, 7)
        );
        assert_eq!(s.pids.unwrap().current, 3);
        assert_eq!(s.memory_events.unwrap().oom_kill, 1);
    }
}
