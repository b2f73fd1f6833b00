//! What a cgroup is given now and how much memory it uses, read back from its files (Go's
//! `GetCgroupConfig` and `GetCgroupMemoryUsage`, which in-place resize compares against).

use super::error::CgroupError;
use super::{CgroupManager, CgroupName, fs};

/// A v1 memory limit at or above this is "no limit" (the kernel's page-rounded maximum).
const V1_UNLIMITED: u64 = 1 << 62;

/// A cgroup's CPU and memory settings and its memory usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Current {
    /// The memory limit; None when unlimited.
    pub memory_limit: Option<i64>,
    /// `cpu.shares` (v2: from `cpu.weight`, the inverse of runc's conversion).
    pub cpu_shares: Option<u64>,
    /// The CFS quota; None when unlimited.
    pub cpu_quota: Option<i64>,
    /// Memory in use (v1 `memory.usage_in_bytes`, v2 `memory.current`).
    pub memory_usage: u64,
}

/// `cpu.shares` for a v2 `cpu.weight` (runc's `ConvertCPUSharesToCgroupV2Value` inverted).
fn weight_to_shares(weight: u64) -> u64 {
    2 + weight.saturating_sub(1) * 262_142 / 9_999
}

impl CgroupManager {
    /// `name`'s CPU and memory settings and memory usage.
    pub fn current(&self, name: &CgroupName) -> Result<Current, CgroupError> {
        let on_disk = self.on_disk(name);
        let cg = on_disk.to_cgroupfs();
        let limit =
            |v: u64, unlimited: u64| (v < unlimited).then(|| i64::try_from(v).unwrap_or(i64::MAX));
        if self.layout.mode().is_v2() {
            let dir = on_disk.dir_in(self.layout.root());
            let cpu_max = fs::read(&cg, &dir, "cpu.max")?;
            let quota = cpu_max.split_whitespace().next().unwrap_or("max");
            return Ok(Current {
                memory_limit: limit(fs::read_u64(&cg, &dir, "memory.max")?, u64::MAX),
                cpu_shares: Some(weight_to_shares(fs::read_u64(&cg, &dir, "cpu.weight")?)),
                cpu_quota: quota.parse().ok(),
                memory_usage: fs::read_u64(&cg, &dir, "memory.current")?,
            });
        }
        let dir_of = |controller: &str| {
            self.layout
                .mount_point(controller)
                .map(|m| on_disk.dir_in(m))
                .ok_or_else(|| CgroupError::Io {
                    cgroup: cg.clone(),
                    op: "read",
                    path: std::path::PathBuf::from(controller),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("no {controller} hierarchy is mounted"),
                    ),
                })
        };
        let memory = dir_of("memory")?;
        let cpu = dir_of("cpu")?;
        let quota = fs::read(&cg, &cpu, "cpu.cfs_quota_us")?;
        Ok(Current {
            memory_limit: limit(
                fs::read_u64(&cg, &memory, "memory.limit_in_bytes")?,
                V1_UNLIMITED,
            ),
            cpu_shares: Some(fs::read_u64(&cg, &cpu, "cpu.shares")?),
            cpu_quota: quota.trim().parse().ok().filter(|q: &i64| *q > 0),
            memory_usage: fs::read_u64(&cg, &memory, "memory.usage_in_bytes")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_go_back_to_shares() {
        for shares in [2_u64, 102, 1024, 2048, 262_144] {
            let weight = super::super::v2::cpu_shares_to_weight(shares).unwrap_or(0);
            let back = weight_to_shares(weight);
            // The conversion loses at most one weight step (about 27 shares).
            assert!(back.abs_diff(shares) <= 27, "{shares} → {weight} → {back}");
        }
    }
}
