//! What a running container needs to reach its allocation (Go's `computePodResizeAction`),
//! pure. The runtime's `ContainerStatus.resources` says what is applied; it is compared with
//! what CreateContainer would give the allocated container, in cgroup units (shares, CFS
//! quota, memory limit), so millicore rounding never makes a difference that is not one. A
//! changed resource whose `resizePolicy` is `RestartContainer` restarts the container; the
//! rest is updated in place (memory and CPU each in their own step, as Go).

use std::cmp::Ordering;

use ferrolet_proto::cri;
use k8s_openapi::api::core::v1::Container;

use crate::podspec::resources::{
    MIN_SHARES, QUOTA_PERIOD, limit, milli_cpu_to_quota, milli_cpu_to_shares, request,
};

/// A container's cgroup values for CPU and memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// `cpu.shares` (v2: the weight's v1 equivalent as the runtime reports it).
    pub cpu_shares: i64,
    /// CFS quota in µs per period; 0 when unlimited.
    pub cpu_quota: i64,
    /// CFS period in µs.
    pub cpu_period: i64,
    /// Memory limit in bytes; 0 when unlimited.
    pub memory_limit: i64,
}

impl Applied {
    /// What the runtime reports (`None` when it reports no Linux resources).
    pub fn reported(r: Option<&cri::ContainerResources>) -> Option<Applied> {
        let l = r?.linux.as_ref()?;
        Some(Applied {
            cpu_shares: l.cpu_shares,
            cpu_quota: l.cpu_quota.max(0),
            cpu_period: if l.cpu_period > 0 {
                l.cpu_period
            } else {
                QUOTA_PERIOD
            },
            memory_limit: l.memory_limit_in_bytes.max(0),
        })
    }

    /// What CreateContainer gives container `c` (Go's `generateLinuxContainerResources`).
    pub fn wanted(c: &Container) -> Applied {
        let milli = |q: Option<crate::manifest::quantity::ParsedQuantity>| {
            q.map_or(0, |q| i64::try_from(q.milli_ceil()).unwrap_or(i64::MAX))
        };
        let cpu_request = milli(request(c, "cpu").ok().flatten());
        let cpu_limit = milli(limit(c, "cpu").ok().flatten());
        let memory_limit = limit(c, "memory")
            .ok()
            .flatten()
            .map_or(0, |q| i64::try_from(q.value_ceil()).unwrap_or(i64::MAX));
        Applied {
            cpu_shares: milli_cpu_to_shares(cpu_request),
            cpu_quota: milli_cpu_to_quota(cpu_limit, QUOTA_PERIOD),
            cpu_period: QUOTA_PERIOD,
            memory_limit,
        }
    }

    /// The CPU limit in millicores (Go's `quotaToMilliCPU`); `None` when unlimited.
    pub fn cpu_limit_milli(&self) -> Option<i64> {
        (self.cpu_quota > 0 && self.cpu_period > 0)
            .then(|| self.cpu_quota.saturating_mul(1000) / self.cpu_period)
    }

    /// The CPU request in millicores (Go's `sharesToMilliCPU`); `None` below the minimum.
    pub fn cpu_request_milli(&self) -> Option<i64> {
        (self.cpu_shares >= MIN_SHARES).then(|| (self.cpu_shares * 1000 + 1023) / 1024)
    }

    /// The CPU comparison: the limit when either side has one, else the request.
    fn cpu_order(&self, applied: &Applied) -> Ordering {
        if self.cpu_quota != applied.cpu_quota {
            // An unlimited side counts as the largest.
            let key = |q: i64| if q == 0 { i64::MAX } else { q };
            key(self.cpu_quota).cmp(&key(applied.cpu_quota))
        } else {
            self.cpu_shares.cmp(&applied.cpu_shares)
        }
    }

    fn memory_order(&self, applied: &Applied) -> Ordering {
        let key = |m: i64| if m == 0 { i64::MAX } else { m };
        key(self.memory_limit).cmp(&key(applied.memory_limit))
    }
}

/// What one running container needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// It has its allocation.
    Keep,
    /// A changed resource's policy is `RestartContainer`.
    Restart,
    /// UpdateContainerResources: whether memory and CPU go up (`Greater`) or down.
    Update {
        /// The memory limit's direction, when it changes.
        memory: Option<Ordering>,
        /// The CPU's direction (limit, else request), when it changes.
        cpu: Option<Ordering>,
    },
}

/// Whether `resource`'s resize policy for `c` is `RestartContainer` (default NotRequired).
fn restarts_for(c: &Container, resource: &str) -> bool {
    c.resize_policy
        .iter()
        .flatten()
        .any(|p| p.resource_name == resource && p.restart_policy == "RestartContainer")
}

/// What container `c` (with its allocated resources) needs, given what is `applied`.
pub fn step(c: &Container, applied: &Applied) -> Step {
    let wanted = Applied::wanted(c);
    let memory =
        (wanted.memory_limit != applied.memory_limit).then(|| wanted.memory_order(applied));
    let cpu = (wanted.cpu_quota != applied.cpu_quota || wanted.cpu_shares != applied.cpu_shares)
        .then(|| wanted.cpu_order(applied));
    if memory.is_none() && cpu.is_none() {
        return Step::Keep;
    }
    if (memory.is_some() && restarts_for(c, "memory")) || (cpu.is_some() && restarts_for(c, "cpu"))
    {
        return Step::Restart;
    }
    Step::Update { memory, cpu }
}

/// The UpdateContainerResources request of one step: `full` is what CreateContainer would
/// give the allocated container; for the memory step the CPU stays as `applied`, for the
/// CPU step the memory does (Go's `updatePodContainerResources`).
pub fn partial_update(
    full: &cri::LinuxContainerResources,
    applied: &Applied,
    resource: Resource,
) -> cri::LinuxContainerResources {
    let mut r = full.clone();
    match resource {
        Resource::Memory => {
            r.cpu_shares = applied.cpu_shares;
            r.cpu_quota = applied.cpu_quota;
            r.cpu_period = applied.cpu_period;
        }
        Resource::Cpu => {
            r.memory_limit_in_bytes = applied.memory_limit;
            if r.memory_swap_limit_in_bytes != 0 {
                r.memory_swap_limit_in_bytes = applied.memory_limit;
            }
        }
    }
    r
}

/// The two resources a resize changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// The memory limit.
    Memory,
    /// CPU shares and quota.
    Cpu,
}
