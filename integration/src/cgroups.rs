//! The host's cgroups as the tests read them, on cgroup v1 (one hierarchy per controller under
//! `/sys/fs/cgroup`) and v2 (`/sys/fs/cgroup` itself) alike: each setting and counter a test
//! checks is read from the file its version keeps it in, in the units the kubelet writes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test reports failure by panicking

use std::path::{Path, PathBuf};

const ROOT: &str = "/sys/fs/cgroup";

/// Whether the tests run the kubelets and runtimes with the systemd cgroup driver
/// (`FERROLET_CGROUP_DRIVER=systemd`, as `make test-node` sets it); cgroupfs otherwise.
pub fn systemd_driver() -> bool {
    std::env::var("FERROLET_CGROUP_DRIVER").is_ok_and(|d| d == "systemd")
}

/// The cgroup a kubelet name (`/root/kubepods/burstable/pod<uid>`) is on disk: as it is with
/// the cgroupfs driver; with the systemd driver one slice per level
/// (`/root.slice/root-kubepods.slice/…`, `-` in a component escaped as `_`). A path already
/// in systemd's form (its last part a slice or scope) is left as it is.
pub fn node_path(cgroup: &str) -> String {
    let last = cgroup.rsplit('/').next().unwrap_or("");
    if !systemd_driver() || last.ends_with(".slice") || last.ends_with(".scope") {
        return cgroup.to_string();
    }
    let parts: Vec<String> = cgroup
        .split('/')
        .filter(|c| !c.is_empty())
        .map(|c| c.replace('-', "_"))
        .collect();
    if parts.is_empty() {
        return "/".to_string();
    }
    (1..=parts.len())
        .map(|i| format!("/{}.slice", parts[..i].join("-")))
        .collect()
}

/// Whether `/sys/fs/cgroup` is a cgroup v2 hierarchy (not v1's, or a hybrid's, tmpfs of
/// mount points).
pub fn v2() -> bool {
    Path::new(ROOT).join("cgroup.controllers").exists()
}

/// The hierarchies' roots: `/sys/fs/cgroup` itself on v2, else each v1 controller's (and the
/// hybrid unified one's) mount under it.
pub fn hierarchies() -> Vec<PathBuf> {
    if v2() {
        return vec![PathBuf::from(ROOT)];
    }
    let Ok(entries) = std::fs::read_dir(ROOT) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|h| h.file_type().is_ok_and(|t| t.is_dir()))
        .map(|h| h.path())
        .collect()
}

/// Whether `path` is pod `uid`'s cgroup: `…/pod<uid>` (cgroupfs) or `…-pod<uid>.slice`
/// (systemd, the uid's `-` escaped as `_`).
pub fn is_pod_cgroup(path: &str, uid: &str) -> bool {
    path.ends_with(&format!("/pod{uid}"))
        || path.ends_with(&format!("-pod{}.slice", uid.replace('-', "_")))
}

/// Whether `path` is container `id`'s own cgroup right below pod cgroup `pod` (a kubelet name,
/// [`node_path`]): `<pod>/<id>` (cgroupfs) or `<pod slice>/<prefix>-<id>.scope` (systemd; the
/// prefix is the runtime's, `ferrolet-cri` or `cri-containerd`).
pub fn is_container_cgroup(path: &str, pod: &str, id: &str) -> bool {
    let Some((parent, last)) = path.rsplit_once('/') else {
        return false;
    };
    parent == node_path(pod)
        && (last == id
            || last
                .strip_suffix(".scope")
                .is_some_and(|s| s.ends_with(&format!("-{id}"))))
}

/// Starts the systemd slice a cgroup ([`node_path`]) is, as a transient unit asking for every
/// controller the kubelet checks its cgroup root for (cpu, memory, pids, io, and cpuset where
/// the kernel has it). A directory merely made there is not enough: systemd decides which
/// controllers a slice's children get from the units below it, and drops those none asks
/// for whenever another unit of the slice starts or stops, which made a parallel test's
/// kubelet find its root without `cpu` or `cpuset` and refuse it. `false` without the
/// systemd driver or when the path is not a slice.
pub fn start_slice(cgroup: &str) -> bool {
    let Some((path, unit)) = systemd_slice(cgroup) else {
        return false;
    };
    let property = |name: &str, signature: &str, values: Vec<String>| {
        [vec![name.to_string(), signature.to_string()], values].concat()
    };
    let mut props = vec![
        property("CPUWeight", "t", vec!["100".into()]),
        property("MemoryAccounting", "b", vec!["true".into()]),
        property("TasksAccounting", "b", vec!["true".into()]),
        property("IOAccounting", "b", vec!["true".into()]),
    ];
    let cpus =
        std::fs::read_to_string(Path::new(ROOT).join("cpuset.cpus.effective")).unwrap_or_default();
    let mask = cpu_mask(cpus.trim());
    if !mask.is_empty() {
        let bytes = std::iter::once(mask.len().to_string()).chain(mask.iter().map(u8::to_string));
        props.push(property("AllowedCPUs", "ay", bytes.collect()));
    }
    let started = std::process::Command::new("busctl")
        .args([
            "call",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            "StartTransientUnit",
            "ssa(sv)a(sa(sv))",
            &unit,
            "fail",
            &props.len().to_string(),
        ])
        .args(props.concat())
        .arg("0")
        .status();
    if !started.as_ref().is_ok_and(|s| s.success()) {
        panic!("starting slice {unit}: {started:?}");
    }
    // The job is queued: wait until the slice's cgroup is there.
    for _ in 0..100 {
        if Path::new(ROOT).join(path.trim_start_matches('/')).is_dir() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("slice {unit} has no cgroup after its start");
}

/// With the systemd driver, the path of the slice a cgroup ([`node_path`]) is, and the
/// slice's unit name; `None` otherwise or when the path is not a slice.
fn systemd_slice(cgroup: &str) -> Option<(String, String)> {
    if !systemd_driver() {
        return None;
    }
    let path = node_path(cgroup);
    let unit = path
        .rsplit('/')
        .next()
        .filter(|u| u.ends_with(".slice"))?
        .to_string();
    Some((path, unit))
}

/// The cgroup driver the tests run with, as a KubeletConfiguration names it.
pub fn driver_name() -> &'static str {
    if systemd_driver() {
        "systemd"
    } else {
        "cgroupfs"
    }
}

/// A cpuset list (`0-1,3`) as systemd's `AllowedCPUs` bit mask, lowest CPU in the first byte.
fn cpu_mask(list: &str) -> Vec<u8> {
    let mut mask = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) else {
            continue;
        };
        for cpu in a..=b {
            if mask.len() <= cpu / 8 {
                mask.resize(cpu / 8 + 1, 0);
            }
            mask[cpu / 8] |= 1 << (cpu % 8);
        }
    }
    mask
}

/// Stops the systemd slice a cgroup ([`node_path`]) is, with every unit below it (the
/// kubelet's slices, runc's scopes), when the tests run with the systemd driver.
pub fn stop_slice(cgroup: &str) {
    let Some((_, unit)) = systemd_slice(cgroup) else {
        return;
    };
    let stopped = std::process::Command::new("systemctl")
        .args(["stop", &unit])
        .status();
    if !stopped.as_ref().is_ok_and(|s| s.success()) {
        eprintln!("systemctl stop {unit}: {stopped:?}");
    }
}

/// The dir of `cgroup` ([`node_path`]) in `controller`'s hierarchy (v2: the one hierarchy).
pub fn dir(controller: &str, cgroup: &str) -> PathBuf {
    let cgroup = node_path(cgroup);
    let rel = cgroup.trim_start_matches('/');
    if v2() {
        Path::new(ROOT).join(rel)
    } else {
        Path::new(ROOT).join(controller).join(rel)
    }
}

/// Whether `cgroup` ([`node_path`]) exists in any hierarchy.
pub fn exists(cgroup: &str) -> bool {
    let cgroup = node_path(cgroup);
    let rel = cgroup.trim_start_matches('/');
    hierarchies().iter().any(|h| h.join(rel).is_dir())
}

/// The text of `file` of `cgroup`, trimmed; panics naming the file when it cannot be read.
pub fn read(controller: &str, cgroup: &str, file: &str) -> String {
    let p = dir(controller, cgroup).join(file);
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

fn number(controller: &str, cgroup: &str, file: &str) -> Option<u64> {
    std::fs::read_to_string(dir(controller, cgroup).join(file))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The value of `key` in a flat keyed file (`memory.stat`, `cpu.stat`).
pub fn keyed(controller: &str, cgroup: &str, file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(dir(controller, cgroup).join(file)).ok()?;
    text.lines().find_map(|l| {
        let (name, value) = l.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok()).flatten()
    })
}

/// The cgroup of process `pid` in `controller`'s hierarchy (v2: its one cgroup).
pub fn of_process(pid: u32, controller: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    ferrolet_cgroups::usage::cgroup_of_process(&text, v2(), controller)
}

/// The memory limit; `None` when unlimited (v1's huge number, v2's `max`).
pub fn memory_limit(cgroup: &str) -> Option<u64> {
    let file = if v2() {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    number("memory", cgroup, file).filter(|l| *l < 1 << 62)
}

/// Memory in use, page cache included.
pub fn memory_usage(cgroup: &str) -> Option<u64> {
    let file = if v2() {
        "memory.current"
    } else {
        "memory.usage_in_bytes"
    };
    number("memory", cgroup, file)
}

/// Inactive file cache (what cadvisor's working set leaves out).
pub fn inactive_file(cgroup: &str) -> Option<u64> {
    let key = if v2() {
        "inactive_file"
    } else {
        "total_inactive_file"
    };
    keyed("memory", cgroup, "memory.stat", key)
}

/// CPU time used, in nanoseconds.
pub fn cpu_usage_ns(cgroup: &str) -> Option<u64> {
    if v2() {
        keyed("cpu", cgroup, "cpu.stat", "usage_usec").map(|us| us * 1000)
    } else {
        number("cpuacct", cgroup, "cpuacct.usage")
    }
}

/// The CPU weight as the cgroup's version keeps it: v1 `cpu.shares`, v2 `cpu.weight`.
/// Compare with [`weight_of_shares`].
pub fn cpu_weight(cgroup: &str) -> u64 {
    let file = if v2() { "cpu.weight" } else { "cpu.shares" };
    read("cpu", cgroup, file).parse().unwrap()
}

/// What CPU shares become in the cgroup: themselves on v1, on v2 the weight the Go kubelet
/// and runc convert them to (`1 + (shares - 2) * 9999 / 262142`).
pub fn weight_of_shares(shares: u64) -> u64 {
    if v2() && shares > 0 {
        1 + (shares.max(2) - 2) * 9999 / 262_142
    } else {
        shares
    }
}

/// The CFS quota and period in microseconds; `None` when unlimited.
pub fn cpu_quota(cgroup: &str) -> Option<(u64, u64)> {
    if v2() {
        let text = read("cpu", cgroup, "cpu.max");
        let (quota, period) = text.split_once(' ')?;
        Some((quota.parse().ok()?, period.parse().ok()?))
    } else {
        let quota: i64 = read("cpu", cgroup, "cpu.cfs_quota_us").parse().ok()?;
        let period = read("cpu", cgroup, "cpu.cfs_period_us").parse().ok()?;
        u64::try_from(quota).ok().map(|q| (q, period))
    }
}

/// The pids limit; `None` when unlimited (`max`).
pub fn pids_max(cgroup: &str) -> Option<u64> {
    number("pids", cgroup, "pids.max")
}

/// Processes in the cgroup and below.
pub fn pids_current(cgroup: &str) -> u64 {
    read("pids", cgroup, "pids.current").parse().unwrap()
}

/// The CPUs of the cgroup's cpuset (as effective on v2, where an empty `cpuset.cpus` means
/// the parent's).
pub fn cpuset_cpus(cgroup: &str) -> String {
    let file = if v2() {
        "cpuset.cpus.effective"
    } else {
        "cpuset.cpus"
    };
    read("cpuset", cgroup, file)
}

/// Whether the kernel has `controller` (v2: listed at the root; v1: mounted).
pub fn has_controller(controller: &str) -> bool {
    if v2() {
        std::fs::read_to_string(Path::new(ROOT).join("cgroup.controllers"))
            .is_ok_and(|t| t.split_whitespace().any(|c| c == controller))
    } else {
        Path::new(ROOT).join(controller).is_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_become_systemd_masks() {
        assert_eq!(cpu_mask("0-1"), [3]);
        assert_eq!(cpu_mask("0,2-3,9"), [0b1101, 0b10]);
        assert!(cpu_mask("").is_empty());
    }

    #[test]
    fn shares_convert_to_weights_as_go_does_on_v2() {
        if !v2() {
            assert_eq!(weight_of_shares(870), 870);
            return;
        }
        // Go's CpuSharesToCpuWeight: 2 → 1, 1024 → 39, 262144 → 10000.
        assert_eq!(weight_of_shares(2), 1);
        assert_eq!(weight_of_shares(1024), 39);
        assert_eq!(weight_of_shares(262_144), 10_000);
    }

    #[test]
    fn our_own_process_has_a_cgroup() {
        assert!(of_process(std::process::id(), "memory").is_some());
    }
}
