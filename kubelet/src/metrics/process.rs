//! The standard `process_*` metrics of the running kubelet, read from `/proc/self` when
//! scraped (as the Prometheus client's process collector does for the Go kubelet).

use std::path::Path;

use nix::unistd::{SysconfVar, sysconf};

/// What `/proc/self` says about this process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessStats {
    /// User + system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident set size, bytes.
    pub resident_bytes: f64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: f64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: f64,
    /// The soft limit on file descriptors.
    pub max_fds: f64,
}

/// Reads the current process's figures; fields that cannot be read stay 0.
pub fn read() -> ProcessStats {
    let proc_dir = Path::new("/proc/self");
    let mut stats = ProcessStats::default();
    // Unknown or nonsense values read as 1, so figures stay finite rather than divide by 0.
    let value = |var| sysconf(var).ok().flatten().unwrap_or(1).max(1) as f64;
    let (ticks, page) = (value(SysconfVar::CLK_TCK), value(SysconfVar::PAGE_SIZE));
    if let Ok(text) = std::fs::read_to_string(proc_dir.join("stat"))
        && let Some(fields) = parse_stat(&text)
    {
        stats.cpu_seconds = (fields.utime + fields.stime) as f64 / ticks;
        stats.virtual_bytes = fields.vsize as f64;
        stats.resident_bytes = fields.rss as f64 * page;
        if let Some(boot) = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| boot_time(&s))
        {
            stats.start_time_seconds = boot as f64 + fields.starttime as f64 / ticks;
        }
    }
    if let Ok(rd) = std::fs::read_dir(proc_dir.join("fd")) {
        // The read_dir handle itself is one of them.
        stats.open_fds = rd.count().saturating_sub(1) as f64;
    }
    if let Ok(text) = std::fs::read_to_string(proc_dir.join("limits")) {
        stats.max_fds = max_open_files(&text).unwrap_or_default();
    }
    stats
}

/// The fields of `/proc/<pid>/stat` we use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StatFields {
    utime: u64,
    stime: u64,
    starttime: u64,
    vsize: u64,
    rss: u64,
}

/// Parses `/proc/<pid>/stat`; the command name may hold spaces and parentheses, so fields
/// are counted from the last `)`.
fn parse_stat(text: &str) -> Option<StatFields> {
    let rest = &text[text.rfind(')')? + 1..];
    // After ")": field 3 (state) is index 0, so field n is index n - 3.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let at = |n: usize| f.get(n - 3).and_then(|s| s.parse::<u64>().ok());
    Some(StatFields {
        utime: at(14)?,
        stime: at(15)?,
        starttime: at(22)?,
        vsize: at(23)?,
        rss: at(24)?,
    })
}

/// `btime` from `/proc/stat`: boot time, seconds since the epoch.
fn boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft "Max open files" limit from `/proc/<pid>/limits`.
fn max_open_files(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        return Some(f64::INFINITY);
    }
    soft.parse().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_a_tricky_command_name() {
        let text = "1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 \
                    5000 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        let f = parse_stat(text).unwrap();
        assert_eq!(
            f,
            StatFields {
                utime: 250,
                stime: 50,
                starttime: 5000,
                vsize: 123_456_789,
                rss: 2048,
            }
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn boot_time_and_limits() {
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024.0));
    }

    #[test]
    fn this_process_reads() {
        let s = read();
        assert!(s.resident_bytes > 0.0, "{s:?}");
        assert!(s.virtual_bytes >= s.resident_bytes, "{s:?}");
        assert!(s.start_time_seconds > 1_000_000_000.0, "{s:?}");
        assert!(s.open_fds >= 3.0, "{s:?}");
        assert!(s.max_fds >= s.open_fds, "{s:?}");
        assert!(s.cpu_seconds >= 0.0, "{s:?}");
    }
}
