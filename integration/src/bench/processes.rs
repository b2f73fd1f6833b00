//! A node's runtime stack as `/proc` shows it, for the benchmarks' memory and CPU figures:
//! containerd's runtime v2 shims, found by the containerd socket on their command line (they
//! run detached from the containerd that started them, so no parent link leads to them), the
//! pause processes under them, and any process's RSS and CPU time.

use std::path::Path;

/// The `comm` of the pause process of a sandbox (ferrolet-cri's built-in image, which the
/// reference containerd is given too, runs `/pause`).
pub const PAUSE_COMM: &str = "pause";

/// A runtime v2 shim process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shim {
    pub pid: u32,
    /// Its program's file name (`containerd-shim-runc-v2`, `containerd-shim-ferrolet-v1`).
    pub program: String,
    /// Its `-id`: the task it was started for (a pod's first).
    pub id: String,
    /// Its `-namespace`.
    pub namespace: String,
    /// Its `-address`: the socket of the containerd that started it.
    pub address: String,
}

/// A shim from its NUL-separated command line (`containerd-shim-* -namespace NS -id ID
/// -address SOCKET ...`); None for any other program.
pub fn parse_shim(pid: u32, cmdline: &[u8]) -> Option<Shim> {
    let args: Vec<&str> = cmdline
        .split(|b| *b == 0)
        .map(std::str::from_utf8)
        .collect::<Result<_, _>>()
        .ok()?;
    let program = Path::new(args.first()?).file_name()?.to_str()?;
    if !program.starts_with("containerd-shim") {
        return None;
    }
    let flag = |name: &str| {
        let at = args.iter().position(|a| *a == name)?;
        args.get(at + 1).map(|v| v.to_string())
    };
    Some(Shim {
        pid,
        program: program.to_string(),
        id: flag("-id")?,
        namespace: flag("-namespace").unwrap_or_default(),
        address: flag("-address")?,
    })
}

/// Pids of every process now, from `/proc`.
fn all_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Every shim running now, of any containerd.
pub fn all_shims() -> Vec<Shim> {
    all_pids()
        .into_iter()
        .filter_map(|pid| parse_shim(pid, &std::fs::read(format!("/proc/{pid}/cmdline")).ok()?))
        .collect()
}

/// Every shim running now that the containerd at `address` started, of `namespace` when given.
pub fn shims(address: &str, namespace: Option<&str>) -> Vec<Shim> {
    all_shims()
        .into_iter()
        .filter(|s| s.address == address && namespace.is_none_or(|ns| s.namespace == ns))
        .collect()
}

/// The parent pid and `comm` from the text of `/proc/<pid>/stat`.
pub fn parse_stat_parent(stat: &str) -> Option<(u32, &str)> {
    // The name may hold spaces and parentheses: it runs from the first '(' to the last ')'.
    let comm = &stat[stat.find('(')? + 1..stat.rfind(')')?];
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state, then ppid.
    let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
    Some((ppid, comm))
}

/// Pids of the processes named `comm` whose parent is one of `parents` (a shim's pause
/// processes: the shim is their subreaper).
pub fn children_named(parents: &[u32], comm: &str) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            parse_stat_parent(&stat).is_some_and(|(ppid, c)| c == comm && parents.contains(&ppid))
        })
        .collect()
}

/// A `kB` field of the text of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`).
pub fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A process's RSS, KiB; None once it has gone (or for a kernel thread).
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(
        &std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        "VmRSS:",
    )
}

/// The summed RSS of `pids`, KiB (those gone count nothing).
pub fn total_rss_kib(pids: &[u32]) -> u64 {
    pids.iter().filter_map(|p| rss_kib(*p)).sum()
}

/// CPU time `pids` have used so far, nanoseconds (those gone count nothing): the scheduler's
/// own account, summed over each process's threads (`/proc/<pid>/task/*/schedstat`; the
/// process's own `schedstat` is its main thread's only), or utime + stime where the kernel
/// keeps no schedstat. Ticks come in 10 ms steps: an idle shim uses less than one in a window
/// of seconds, so ticks would read 0 for every shim alike. A thread that ends takes its time
/// out of the sum: fine across an idle window, where daemons start and end none.
pub fn total_cpu_ns(pids: &[u32]) -> u64 {
    pids.iter().filter_map(|pid| process_cpu_ns(*pid)).sum()
}

/// One process's CPU time as [`total_cpu_ns`] reads it.
fn process_cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut exact = None;
    for task in tasks.flatten() {
        let ns = std::fs::read_to_string(task.path().join("schedstat"))
            .ok()
            .and_then(|s| parse_schedstat_ns(&s));
        if let Some(ns) = ns {
            exact = Some(exact.unwrap_or(0) + ns);
        }
    }
    exact.or_else(|| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some((super::parse_stat_ticks(&stat)? as f64 * 1e9 / ticks_per_s()) as u64)
    })
}

/// The time on a CPU from the text of `/proc/<pid>/schedstat`, nanoseconds.
pub fn parse_schedstat_ns(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().next()?.parse().ok()
}

/// Clock ticks per second (`CLK_TCK`).
pub fn ticks_per_s() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(hz)) if hz > 0 => hz as f64,
        _ => 100.0,
    }
}

/// KiB as MiB.
pub fn kib_to_mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn shims_are_read_from_their_command_line() {
        let go = b"/usr/bin/containerd-shim-runc-v2\0-namespace\0k8s.io\0-id\0abc\0-address\0/run/x.sock\0";
        let s = parse_shim(7, go).unwrap();
        assert_eq!(
            (s.pid, s.program.as_str(), s.id.as_str()),
            (7, "containerd-shim-runc-v2", "abc")
        );
        assert_eq!(
            (s.namespace.as_str(), s.address.as_str()),
            ("k8s.io", "/run/x.sock")
        );
        let ours = b"containerd-shim-ferrolet-v1\0-namespace\0ns\0-address\0/a.sock\0-id\0p1\0";
        assert_eq!(
            parse_shim(1, ours).unwrap().program,
            "containerd-shim-ferrolet-v1"
        );
        assert_eq!(
            parse_shim(1, b"/usr/bin/containerd\0-id\0abc\0-address\0x\0"),
            None
        );
        assert_eq!(
            parse_shim(1, b"containerd-shim-runc-v2\0-namespace\0x\0"),
            None
        );
        assert_eq!(parse_shim(1, b""), None);
    }

    #[test]
    fn stat_gives_the_parent_and_the_name() {
        let stat = "123 (a b) c) S 45 123 123 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        assert_eq!(parse_stat_parent(stat), Some((45, "a b) c")));
        assert_eq!(parse_stat_parent("9 (pause) S 8 9 9"), Some((8, "pause")));
        assert_eq!(parse_stat_parent("garbage"), None);
    }

    #[test]
    fn status_fields_are_kib() {
        let status = "Name:\tx\nVmHWM:\t  20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(10240));
        assert_eq!(status_kib(status, "VmHWM:"), Some(20480));
        assert_eq!(status_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn schedstat_gives_nanoseconds() {
        assert_eq!(parse_schedstat_ns("958259 78888 2\n"), Some(958_259));
        assert_eq!(parse_schedstat_ns(""), None);
    }

    #[test]
    fn this_process_is_sampled() {
        let me = std::process::id();
        let spent = total_cpu_ns(&[me]);
        // Some work on another thread, then the account has grown: every thread counts.
        let worker = std::thread::spawn(|| {
            let mut x = 0u64;
            for i in 0..5_000_000u64 {
                x = std::hint::black_box(x.wrapping_add(i));
            }
            // Still running when measured: a thread that ended takes its time with it.
            let now = total_cpu_ns(&[std::process::id(), u32::MAX]);
            (x, now)
        });
        let (x, now) = worker.join().unwrap();
        assert!(now > spent, "{x}");
        assert!(rss_kib(me).unwrap() > 0);
        assert_eq!(rss_kib(u32::MAX), None);
        assert!(ticks_per_s() > 0.0);
    }
}
