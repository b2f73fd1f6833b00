//! Cgroup v2 files, as runc's `cgroups/fs2` writes them: one hierarchy, the controllers a
//! cgroup gets enabled in its parents' `cgroup.subtree_control`, v1 values converted
//! (shares → `cpu.weight`, quota and period → `cpu.max`, -1 → `max`).

use std::collections::BTreeSet;
use std::path::Path;

use super::CgroupName;
use super::error::CgroupError;
use super::fs;
use super::layout::Layout;
use crate::cm::ResourceConfig;

/// The controllers the kubelet uses, enabled below each parent when available.
const CONTROLLERS: [&str; 5] = ["cpu", "cpuset", "memory", "pids", "hugetlb"];
const SUBTREE_CONTROL: &str = "cgroup.subtree_control";
const CGROUP_CONTROLLERS: &str = "cgroup.controllers";
/// The CFS period when only a quota is given (the kernel's default).
const DEFAULT_PERIOD: u64 = 100_000;

/// `cpu.weight` for v1 `cpu.shares`, [2, 262144] onto [1, 10000]; None for 0, unset (runc's
/// `ConvertCPUSharesToCgroupV2Value`, clamped as Go's `getCPUWeight`).
pub fn cpu_shares_to_weight(shares: u64) -> Option<u64> {
    match shares {
        0 => None,
        s if s >= 262_144 => Some(10_000),
        s => Some(1 + (s.max(2) - 2) * 9_999 / 262_142),
    }
}

/// Makes `name` level by level, enabling the kubelet's controllers in each parent.
pub(super) fn create(layout: &Layout, name: &CgroupName) -> Result<(), CgroupError> {
    let cg = name.to_cgroupfs();
    let available = layout.controllers()?;
    let enable: Vec<&str> = CONTROLLERS
        .into_iter()
        .filter(|c| available.contains(*c))
        .collect();
    let mut parent = layout.root().to_path_buf();
    for c in name.clean() {
        if !enable.is_empty() {
            enable_controllers(&parent, &enable);
        }
        let dir = parent.join(c);
        fs::mkdir(&cg, &dir)?;
        if !fs::is_cgroupfs(&dir) {
            // The kernel gives a new cgroup its parent's subtree controllers.
            fs::write(&cg, &dir, CGROUP_CONTROLLERS, &enable.join(" "))?;
        }
        parent = dir;
    }
    Ok(())
}

/// Enables `controllers` for the cgroups below `dir`. A refused one fails the whole write,
/// so then each goes alone; what stays off fails its first write (runc's way).
fn enable_controllers(dir: &Path, controllers: &[&str]) {
    let tokens: Vec<String> = controllers.iter().map(|c| format!("+{c}")).collect();
    if fs::write_raw(dir, SUBTREE_CONTROL, &tokens.join(" ")).is_ok() {
        return;
    }
    for t in &tokens {
        let _ = fs::write_raw(dir, SUBTREE_CONTROL, t);
    }
}

/// The controllers enabled for `name` (its `cgroup.controllers`).
pub(super) fn enabled_controllers(
    layout: &Layout,
    name: &CgroupName,
) -> Result<BTreeSet<String>, CgroupError> {
    let text = fs::read(
        &name.to_cgroupfs(),
        &name.dir_in(layout.root()),
        CGROUP_CONTROLLERS,
    )?;
    Ok(text.split_whitespace().map(str::to_string).collect())
}

/// The controllers of the kubelet's the node has.
pub(super) fn supported_controllers(layout: &Layout) -> Result<BTreeSet<String>, CgroupError> {
    let available = layout.controllers()?;
    Ok(CONTROLLERS
        .into_iter()
        .filter(|c| available.contains(*c))
        .map(str::to_string)
        .collect())
}

/// Writes what `r` sets, in runc's order (pids, memory, cpu, cpuset, hugetlb); a zero is
/// unset, as runc has it. `hugetlb` is page size name → limit.
pub(super) fn set(
    layout: &Layout,
    name: &CgroupName,
    r: &ResourceConfig,
    hugetlb: &[(String, i64)],
) -> Result<(), CgroupError> {
    let cg = name.to_cgroupfs();
    let dir = name.dir_in(layout.root());
    let available = layout.controllers()?;
    let need = |controller: &'static str, setting: &'static str| {
        if available.contains(controller) {
            Ok(())
        } else {
            Err(CgroupError::MissingController {
                cgroup: cg.clone(),
                controller,
                setting,
            })
        }
    };
    if let Some(pids) = r.pids_limit.filter(|p| *p != 0) {
        need("pids", "pids.max")?;
        fs::write(&cg, &dir, "pids.max", &limit(pids))?;
    }
    if let Some(memory) = r.memory.filter(|m| *m != 0) {
        need("memory", "memory.max")?;
        fs::write(&cg, &dir, "memory.max", &limit(memory))?;
    }
    if let Some(min) = r.memory_min.filter(|m| *m > 0) {
        need("memory", "memory.min")?;
        fs::write(&cg, &dir, "memory.min", &min.to_string())?;
    }
    if let Some(weight) = r.cpu_shares.and_then(cpu_shares_to_weight) {
        need("cpu", "cpu.weight")?;
        fs::write(&cg, &dir, "cpu.weight", &weight.to_string())?;
    }
    let quota = r.cpu_quota.filter(|q| *q != 0);
    let period = r.cpu_period.filter(|p| *p != 0);
    if quota.is_some() || period.is_some() {
        need("cpu", "cpu.max")?;
        let q = quota
            .filter(|q| *q > 0)
            .map_or("max".into(), |q| q.to_string());
        let value = format!("{q} {}", period.unwrap_or(DEFAULT_PERIOD));
        fs::write(&cg, &dir, "cpu.max", &value)?;
    }
    if let Some(cpus) = r.cpuset_cpus.as_deref().filter(|c| !c.is_empty()) {
        need("cpuset", "cpuset.cpus")?;
        fs::write(&cg, &dir, "cpuset.cpus", cpus)?;
    }
    // hugetlb is optional: without it there is nothing to limit.
    if available.contains("hugetlb") {
        for (size, l) in hugetlb {
            fs::write(&cg, &dir, &format!("hugetlb.{size}.max"), &limit(*l))?;
        }
    }
    Ok(())
}

/// A v2 limit: negative is none (`max`, runc's -1).
fn limit(v: i64) -> String {
    if v < 0 { "max".into() } else { v.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_to_weight_as_runc() {
        assert_eq!(cpu_shares_to_weight(0), None);
        assert_eq!(cpu_shares_to_weight(2), Some(1));
        assert_eq!(cpu_shares_to_weight(1024), Some(39));
        assert_eq!(cpu_shares_to_weight(512), Some(20));
        assert_eq!(cpu_shares_to_weight(262_144), Some(10_000));
        assert_eq!(cpu_shares_to_weight(1_000_000), Some(10_000));
    }
}
