//! Cgroup v1 files, as runc's `cgroups/fs` writes them: one hierarchy per controller (or
//! per co-mounted set), a cgroup made in each, cpuset cgroups given their parent's CPUs and
//! memory nodes before anything can join them.

use std::path::Path;

use super::CgroupName;
use super::error::{CgroupError, io_error};
use super::fs;
use super::layout::Layout;
use crate::cm::ResourceConfig;

const CPUSET_CPUS: &str = "cpuset.cpus";
const CPUSET_MEMS: &str = "cpuset.mems";
const MEMORY_LIMIT: &str = "memory.limit_in_bytes";
const MEMSW_LIMIT: &str = "memory.memsw.limit_in_bytes";
const CPU_PERIOD: &str = "cpu.cfs_period_us";
const CPU_QUOTA: &str = "cpu.cfs_quota_us";

/// Makes `name` in every hierarchy, the cpuset one level by level.
pub(super) fn create(layout: &Layout, name: &CgroupName) -> Result<(), CgroupError> {
    let cg = name.to_cgroupfs();
    let cpuset = layout.mount_point("cpuset");
    for h in layout.hierarchies() {
        if Some(h) == cpuset {
            ensure_cpuset(&cg, h, name)?;
        } else {
            fs::mkdir_all(&cg, &name.dir_in(h))?;
        }
    }
    Ok(())
}

/// Makes each level from the cpuset mount down to `name`, giving one without CPUs or memory
/// nodes its parent's: a cpuset cgroup with none takes no process (runc's
/// `cpusetEnsureParent` and `cpusetCopyIfNeeded`).
fn ensure_cpuset(cg: &str, mount: &Path, name: &CgroupName) -> Result<(), CgroupError> {
    let mut parent = mount.to_path_buf();
    for c in name.clean() {
        let dir = parent.join(c);
        fs::mkdir(cg, &dir)?;
        for file in [CPUSET_CPUS, CPUSET_MEMS] {
            let current =
                fs::read_opt(&dir, file).map_err(|e| io_error(cg, "read", dir.join(file), e))?;
            if current.as_deref().is_none_or(|c| c.trim().is_empty()) {
                let inherited = fs::read(cg, &parent, file)?;
                fs::write(cg, &dir, file, inherited.trim())?;
            }
        }
        parent = dir;
    }
    Ok(())
}

/// Writes what `r` sets, in runc's order (cpuset, memory, cpu, pids, hugetlb); a zero is
/// unset, as runc has it. `hugetlb` is page size name → limit.
pub(super) fn set(
    layout: &Layout,
    name: &CgroupName,
    r: &ResourceConfig,
    hugetlb: &[(String, i64)],
) -> Result<(), CgroupError> {
    let cg = name.to_cgroupfs();
    let dir = |controller, setting| super::controller_dir(layout, name, controller, setting);
    if let Some(cpus) = r.cpuset_cpus.as_deref().filter(|c| !c.is_empty()) {
        fs::write(&cg, &dir("cpuset", CPUSET_CPUS)?, CPUSET_CPUS, cpus)?;
    }
    if let Some(limit) = r.memory.filter(|m| *m != 0) {
        set_memory(&cg, &dir("memory", MEMORY_LIMIT)?, limit)?;
    }
    let nonzero = |v: Option<u64>| v.filter(|v| *v != 0);
    if let Some(shares) = nonzero(r.cpu_shares) {
        set_shares(&cg, &dir("cpu", "cpu.shares")?, shares)?;
    }
    let quota = r.cpu_quota.filter(|q| *q != 0);
    let period = nonzero(r.cpu_period);
    if quota.is_some() || period.is_some() {
        set_cfs(&cg, &dir("cpu", CPU_QUOTA)?, quota, period)?;
    }
    if let Some(pids) = r.pids_limit.filter(|p| *p != 0) {
        let value = if pids > 0 {
            pids.to_string()
        } else {
            "max".into()
        };
        fs::write(&cg, &dir("pids", "pids.max")?, "pids.max", &value)?;
    }
    // hugetlb is optional: without it there is nothing to limit.
    if let Some(mount) = layout.mount_point("hugetlb") {
        let d = name.dir_in(mount);
        for (size, limit) in hugetlb {
            let file = format!("hugetlb.{size}.limit_in_bytes");
            fs::write(&cg, &d, &file, &limit.to_string())?;
        }
    }
    Ok(())
}

fn set_memory(cg: &str, dir: &Path, limit: i64) -> Result<(), CgroupError> {
    // Unlimited memory needs unlimited memory+swap where the kernel has it, first: memsw may
    // not be below the memory limit.
    if limit == -1 && dir.join(MEMSW_LIMIT).exists() {
        fs::write(cg, dir, MEMSW_LIMIT, "-1")?;
    }
    let value = limit.to_string();
    match fs::write_raw(dir, MEMORY_LIMIT, &value) {
        Ok(()) => Ok(()),
        // The kernel refuses a limit below the usage it cannot reclaim.
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(CgroupError::MemoryBelowUsage {
            cgroup: cg.to_string(),
            limit,
            usage: fs::read_u64(cg, dir, "memory.usage_in_bytes")?,
            peak: fs::read_u64(cg, dir, "memory.max_usage_in_bytes")?,
        }),
        Err(e) => Err(fs::write_error(cg, dir, MEMORY_LIMIT, &value, e)),
    }
}

/// Writes the shares and reads them back: the kernel clamps what is out of its range.
fn set_shares(cg: &str, dir: &Path, shares: u64) -> Result<(), CgroupError> {
    fs::write(cg, dir, "cpu.shares", &shares.to_string())?;
    let kept = fs::read_u64(cg, dir, "cpu.shares")?;
    let bound = match shares.cmp(&kept) {
        std::cmp::Ordering::Equal => return Ok(()),
        std::cmp::Ordering::Greater => "maximum",
        std::cmp::Ordering::Less => "minimum",
    };
    Err(CgroupError::CpuShares {
        cgroup: cg.to_string(),
        bound,
        actual: kept,
    })
}

/// The period, then the quota (runc's order).
fn set_cfs(
    cg: &str,
    dir: &Path,
    quota: Option<i64>,
    period: Option<u64>,
) -> Result<(), CgroupError> {
    let mut period_again = None;
    if let Some(p) = period {
        let value = p.to_string();
        match fs::write_raw(dir, CPU_PERIOD, &value) {
            Ok(()) => {}
            // A period shorter than the current one is refused (EINVAL) when the current
            // quota over it exceeds the parent's; it takes once the new quota is in.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && quota.is_some() => {
                period_again = Some(value);
            }
            Err(e) => return Err(fs::write_error(cg, dir, CPU_PERIOD, &value, e)),
        }
    }
    if let Some(q) = quota {
        fs::write(cg, dir, CPU_QUOTA, &q.to_string())?;
        if let Some(value) = period_again {
            fs::write(cg, dir, CPU_PERIOD, &value)?;
        }
    }
    Ok(())
}
