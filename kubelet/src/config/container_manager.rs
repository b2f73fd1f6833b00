//! The container manager's settings (`cgroupsPerQOS`, `cgroupDriver`,
//! `enforceNodeAllocatable`, the reserved cgroups, `podPidsLimit`, `qosReserved`, the CPU
//! manager's and CFS quota's): their flags, the Go kubelet's checks in its words, and
//! [`Config::cm_settings`], what the container manager is handed.

use std::collections::BTreeMap;
use std::num::IntErrorKind;
use std::path::Path;
use std::time::Duration;

use ferrolet_proto::go_duration::{format_duration, parse_duration_flag};

use super::file::invalid;
use super::{Config, ConfigError};
use crate::cm::{CgroupDriver, CpuManagerPolicy, Settings};
use crate::manifest::quantity::parse_quantity;

/// The only cgroup driver ferrolet drives (Go's default).
pub const CGROUPFS: &str = "cgroupfs";
/// The systemd cgroup driver's name.
pub const SYSTEMD: &str = "systemd";
/// `enforceNodeAllocatable`: limit all pods together to node allocatable (Go's default).
pub const ENFORCE_PODS: &str = "pods";
const ENFORCE_KUBE_RESERVED: &str = "kube-reserved";
const ENFORCE_SYSTEM_RESERVED: &str = "system-reserved";
const ENFORCE_NONE: &str = "none";

/// Gate under which `cpuCFSQuotaPeriod` may differ from 100ms (alpha, off by default in Go
/// 1.28-1.32).
pub const GATE_CUSTOM_CPU_CFS_QUOTA_PERIOD: &str = "CustomCPUCFSQuotaPeriod";
/// Gate under which `qosReserved` is acted on (alpha, off by default in Go 1.28-1.32).
pub const GATE_QOS_RESERVED: &str = "QOSReserved";
/// Gate under which cgroup v2's `memory.min` and `memory.high` protect and throttle pods'
/// memory (alpha, off by default in Go 1.28-1.34).
pub const GATE_MEMORY_QOS: &str = "MemoryQoS";
/// Gate under which a running pod's CPU and memory resize in place (beta, on by default
/// from Go 1.33; alpha and off in 1.28-1.32).
pub const GATE_IN_PLACE_POD_VERTICAL_SCALING: &str = "InPlacePodVerticalScaling";
/// The feature gates ferrolet acts on; setting any other one to true is reported as not
/// implemented.
pub const HONOURED_FEATURE_GATES: &[&str] = &[
    GATE_CUSTOM_CPU_CFS_QUOTA_PERIOD,
    GATE_QOS_RESERVED,
    GATE_MEMORY_QOS,
    GATE_IN_PLACE_POD_VERTICAL_SCALING,
    crate::userns::GATE,
];

/// Where systemd keeps its runtime state: present exactly when systemd is PID 1 (the test
/// of systemd's own `sd_booted`).
const SYSTEMD_RUNTIME_DIR: &str = "/run/systemd/system";

const CGROUP_DRIVER: &str = "cgroupDriver (--cgroup-driver)";
const ENFORCE: &str = "enforceNodeAllocatable (--enforce-node-allocatable)";
const KUBE_RESERVED_CGROUP: &str = "kubeReservedCgroup (--kube-reserved-cgroup)";
const SYSTEM_RESERVED_CGROUP: &str = "systemReservedCgroup (--system-reserved-cgroup)";
pub(super) const QOS_RESERVED: &str = "qosReserved (--qos-reserved)";
const CPU_MANAGER_POLICY: &str = "cpuManagerPolicy (--cpu-manager-policy)";
const RESERVED_CPUS: &str = "reservedSystemCPUs (--reserved-cpus)";
const CFS_QUOTA_PERIOD: &str = "cpuCFSQuotaPeriod (--cpu-cfs-quota-period)";
const MEMORY_THROTTLING_FACTOR: &str = "memoryThrottlingFactor";

/// Go's default `cpuCFSQuotaPeriod`.
const DEFAULT_CFS_QUOTA_PERIOD: Duration = Duration::from_millis(100);

/// The container manager's flags, spelled as the Go kubelet's; flattened into the kubelet's.
#[derive(clap::Args, Clone, Debug, Default, PartialEq)]
pub struct CmFlags {
    /// Create the QoS and pod cgroup tree (cgroupsPerQOS) [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub cgroups_per_qos: Option<bool>,
    /// The cgroup driver, cgroupfs or systemd (cgroupDriver) [default: cgroupfs].
    #[arg(long, value_name = "DRIVER")]
    pub cgroup_driver: Option<String>,
    /// What node allocatable is enforced on, comma-separated: pods, kube-reserved,
    /// system-reserved, or none; "" for nothing (enforceNodeAllocatable) [default: pods].
    #[arg(long, value_name = "LEVEL[,LEVEL...]")]
    pub enforce_node_allocatable: Vec<String>,
    /// The cgroup kube-reserved is enforced on, such as /kube-reserved (kubeReservedCgroup).
    #[arg(long, value_name = "CGROUP")]
    pub kube_reserved_cgroup: Option<String>,
    /// The cgroup system-reserved is enforced on, such as /system-reserved
    /// (systemReservedCgroup).
    #[arg(long, value_name = "CGROUP")]
    pub system_reserved_cgroup: Option<String>,
    /// Most processes per pod; -1 = no limit of its own (podPidsLimit) [default: -1].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub pod_max_pids: Option<i64>,
    /// Requests kept from lower QoS classes, `memory=50%` (qosReserved; acted on under the
    /// QOSReserved feature gate).
    #[arg(long, value_name = "RESOURCE=PERCENT[,...]")]
    pub qos_reserved: Vec<String>,
    /// The CPU manager's policy: none or static (cpuManagerPolicy) [default: none].
    #[arg(long, value_name = "POLICY")]
    pub cpu_manager_policy: Option<String>,
    /// How often the CPU manager reconciles containers' cpusets (cpuManagerReconcilePeriod)
    /// [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub cpu_manager_reconcile_period: Option<Duration>,
    /// CPUs kept from pods, such as 0-1,4; replaces the CPUs of --kube-reserved and
    /// --system-reserved (reservedSystemCPUs).
    #[arg(long, value_name = "CPU LIST")]
    pub reserved_cpus: Option<String>,
    /// Enforce CPU limits with CFS quota (cpuCFSQuota) [default: true].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub cpu_cfs_quota: Option<bool>,
    /// The CFS quota period, 1ms to 1s; another value than the default needs the
    /// CustomCPUCFSQuotaPeriod feature gate (cpuCFSQuotaPeriod) [default: 100ms].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub cpu_cfs_quota_period: Option<Duration>,
}

/// The policy named `name`, matched as Go's CPU manager matches it (case and all).
pub(super) fn cpu_manager_policy(name: &str) -> Result<CpuManagerPolicy, ConfigError> {
    match name {
        "none" => Ok(CpuManagerPolicy::None),
        "static" => Ok(CpuManagerPolicy::Static),
        other => Err(invalid(
            CPU_MANAGER_POLICY,
            format!("unknown policy: \"{other}\""),
        )),
    }
}

/// Go's `strconv.Atoi`, with its error texts.
fn atoi(s: &str) -> Result<i64, String> {
    s.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => "value out of range",
            _ => "invalid syntax",
        };
        format!("strconv.Atoi: parsing {s:?}: {why}")
    })
}

/// How many CPUs a kernel CPU list (`0-3,8`) names, parsed as Go's `cpuset.Parse` (with its
/// error texts); "" names none.
pub(super) fn cpu_list_size(list: &str) -> Result<u64, String> {
    if list.is_empty() {
        return Ok(0);
    }
    let mut ranges = Vec::new();
    for part in list.split(',') {
        let range = match part.split_once('-') {
            None => {
                let cpu = atoi(part)?;
                (cpu, cpu)
            }
            Some((from, to)) => {
                let (from, to) = (atoi(from)?, atoi(to)?);
                if from > to {
                    return Err(format!("invalid range {part:?} ({from} > {to})"));
                }
                (from, to)
            }
        };
        ranges.push(range);
    }
    // Overlapping ranges name their CPUs once.
    ranges.sort_unstable();
    let mut size: i128 = 0;
    let mut next: Option<i128> = None;
    for (from, to) in ranges {
        let (from, to) = (i128::from(from), i128::from(to));
        let start = next.map_or(from, |n| n.max(from));
        if to >= start {
            size += to - start + 1;
        }
        next = Some(next.map_or(to + 1, |n| n.max(to + 1)));
    }
    Ok(u64::try_from(size).unwrap_or(u64::MAX))
}

/// Go's `parsePercentage`: `50%` → 50, within 0..=100.
fn percentage(v: &str) -> Result<i64, String> {
    if !v.ends_with('%') {
        return Err(format!("percentage expected, got '{v}'"));
    }
    let p: i64 = v
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("invalid number in percentage '{v}'"))?;
    if !(0..=100).contains(&p) {
        return Err("percentage must be between 0 and 100".into());
    }
    Ok(p)
}

/// Go's `ParseQOSReserved`: the memory percentage of `qosReserved`, the only resource it
/// takes.
pub(super) fn qos_reserved_memory(map: &BTreeMap<String, String>) -> Result<Option<i64>, String> {
    let mut memory = None;
    for (resource, value) in map {
        if resource != "memory" {
            return Err(format!("cannot reserve {resource:?} resource"));
        }
        let p = percentage(value).map_err(|e| {
            format!("failed to parse percentage {value:?} for {resource:?} resource: {e}")
        })?;
        memory = Some(p);
    }
    Ok(memory)
}

/// `cgroupDriver`: cgroupfs, or systemd where systemd runs (it makes every cgroup a
/// transient unit through its D-Bus API).
pub(super) fn check_cgroup_driver(driver: &str, systemd_runs: bool) -> Result<(), ConfigError> {
    match driver {
        CGROUPFS => Ok(()),
        SYSTEMD if systemd_runs => Ok(()),
        SYSTEMD => Err(invalid(
            CGROUP_DRIVER,
            "the \"systemd\" cgroup driver needs systemd as PID 1 (and its D-Bus API) to create \
             cgroups as units, and this node does not run systemd; use \"cgroupfs\" (and the \
             cgroupfs driver in the container runtime too)",
        )),
        other => Err(invalid(
            CGROUP_DRIVER,
            format!(
                "unknown cgroup driver {other:?}: ferrolet drives \"cgroupfs\" and \"systemd\""
            ),
        )),
    }
}

impl Config {
    /// Whether the feature gate `name` is on (off by default; see [`Config::in_place_resize`]).
    pub fn feature_gate(&self, name: &str) -> bool {
        self.feature_gate_or(name, false)
    }

    /// Whether the feature gate `name` is on, `default` when unset (a beta gate).
    pub fn feature_gate_or(&self, name: &str, default: bool) -> bool {
        self.feature_gates.get(name).copied().unwrap_or(default)
    }

    /// Whether running pods resize in place (`InPlacePodVerticalScaling`, on unless turned
    /// off, as Go 1.33's beta).
    pub fn in_place_resize(&self) -> bool {
        self.feature_gates
            .get(GATE_IN_PLACE_POD_VERTICAL_SCALING)
            .copied()
            .unwrap_or(true)
    }

    /// The container manager's checks: Go's `ValidateKubeletConfiguration` in its words, then
    /// what Go refuses when it builds the container manager.
    pub(super) fn check_cm(&self) -> Result<(), ConfigError> {
        let systemd_runs =
            std::fs::symlink_metadata(Path::new(SYSTEMD_RUNTIME_DIR)).is_ok_and(|m| m.is_dir());
        check_cgroup_driver(&self.cgroup_driver, systemd_runs)?;
        if !self.cgroups_per_qos && !self.enforce_node_allocatable.is_empty() {
            return Err(invalid(
                ENFORCE,
                "is not supported unless cgroupsPerQOS (--cgroups-per-qos) is set to true",
            ));
        }
        let period = self.cpu_cfs_quota_period;
        if !self.feature_gate(GATE_CUSTOM_CPU_CFS_QUOTA_PERIOD) {
            if period != DEFAULT_CFS_QUOTA_PERIOD {
                return Err(invalid(
                    CFS_QUOTA_PERIOD,
                    format!(
                        "{} requires feature gate {GATE_CUSTOM_CPU_CFS_QUOTA_PERIOD}",
                        format_duration(period)
                    ),
                ));
            }
        } else if !(Duration::from_millis(1)..=Duration::from_secs(1)).contains(&period) {
            return Err(invalid(
                CFS_QUOTA_PERIOD,
                format!(
                    "{} must be between 1ms and 1sec, inclusive",
                    format_duration(period)
                ),
            ));
        }
        let factor = self.memory_throttling_factor;
        if factor <= 0.0 || factor > 1.0 {
            return Err(invalid(
                MEMORY_THROTTLING_FACTOR,
                format!("{factor} must be greater than 0 and less than or equal to 1.0"),
            ));
        }
        self.check_enforcement()?;
        if !self.reserved_system_cpus.is_empty() {
            if !self.system_reserved_cgroup.is_empty() || !self.kube_reserved_cgroup.is_empty() {
                return Err(invalid(
                    RESERVED_CPUS,
                    "can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup \
                     (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)",
                ));
            }
            cpu_list_size(&self.reserved_system_cpus).map_err(|e| {
                invalid(
                    RESERVED_CPUS,
                    format!(
                        "unable to parse reservedSystemCPUs (--reserved-cpus) {}, error: {e}",
                        self.reserved_system_cpus
                    ),
                )
            })?;
        }
        qos_reserved_memory(&self.qos_reserved).map_err(|e| invalid(QOS_RESERVED, e))?;
        if self.cpu_manager_policy == CpuManagerPolicy::Static && self.reserved_cpu_nanos() <= 0 {
            // Go's CPU manager refuses to start: an empty reservation would let Guaranteed
            // pods take every CPU from the shared pool.
            return Err(invalid(
                CPU_MANAGER_POLICY,
                "[cpumanager] unable to determine reserved CPU resources for static policy",
            ));
        }
        Ok(())
    }

    /// `enforceNodeAllocatable`'s values, as Go's validation walks them.
    fn check_enforcement(&self) -> Result<(), ConfigError> {
        for level in &self.enforce_node_allocatable {
            match level.as_str() {
                ENFORCE_PODS => {}
                ENFORCE_SYSTEM_RESERVED if self.system_reserved_cgroup.is_empty() => {
                    return Err(invalid(
                        SYSTEM_RESERVED_CGROUP,
                        format!(
                            "must be specified when {ENFORCE_SYSTEM_RESERVED:?} contained in \
                             enforceNodeAllocatable (--enforce-node-allocatable)"
                        ),
                    ));
                }
                ENFORCE_KUBE_RESERVED if self.kube_reserved_cgroup.is_empty() => {
                    return Err(invalid(
                        KUBE_RESERVED_CGROUP,
                        format!(
                            "must be specified when {ENFORCE_KUBE_RESERVED:?} contained in \
                             enforceNodeAllocatable (--enforce-node-allocatable)"
                        ),
                    ));
                }
                ENFORCE_SYSTEM_RESERVED | ENFORCE_KUBE_RESERVED => {}
                ENFORCE_NONE => {
                    if self.enforce_node_allocatable.len() > 1 {
                        return Err(invalid(
                            ENFORCE,
                            format!(
                                "may not contain additional enforcements when {ENFORCE_NONE:?} \
                                 is specified"
                            ),
                        ));
                    }
                }
                other => {
                    return Err(invalid(
                        ENFORCE,
                        format!(
                            "option {other:?} specified for {ENFORCE}. Valid options are \
                             {ENFORCE_PODS:?}, {ENFORCE_SYSTEM_RESERVED:?}, \
                             {ENFORCE_KUBE_RESERVED:?}, or {ENFORCE_NONE:?}"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The CPU kept from pods, in nano-CPUs: kube-reserved's plus system-reserved's, as
    /// [`Config::effective_reserved`] has them.
    fn reserved_cpu_nanos(&self) -> i128 {
        let (kube, system) = self.effective_reserved();
        [kube, system]
            .iter()
            .filter_map(|m| m.get("cpu"))
            .filter_map(|q| parse_quantity(q).ok())
            .map(|q| q.nanos())
            .sum()
    }

    /// `kubeReserved` and `systemReserved` as Go hands them to the container manager: with
    /// `reservedSystemCPUs`, system-reserved's `cpu` is that list's CPU count and
    /// kube-reserved has no `cpu`.
    pub fn effective_reserved(&self) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let (mut kube, mut system) = (self.kube_reserved.clone(), self.system_reserved.clone());
        if let Ok(cpus) = cpu_list_size(&self.reserved_system_cpus)
            && cpus > 0
        {
            kube.remove("cpu");
            system.insert("cpu".into(), cpus.to_string());
        }
        (kube, system)
    }

    /// What the container manager is told, from these (checked) settings. `qosReserved`
    /// reaches it only under the `QOSReserved` gate, as in Go.
    pub fn cm_settings(&self) -> Settings {
        let (kube_reserved, system_reserved) = self.effective_reserved();
        let qos_reserved_memory_percent = if self.feature_gate(GATE_QOS_RESERVED) {
            qos_reserved_memory(&self.qos_reserved).ok().flatten()
        } else {
            None
        };
        Settings {
            cgroups_per_qos: self.cgroups_per_qos,
            cgroup_root: self.cgroup_root.clone(),
            cgroup_driver: if self.cgroup_driver == SYSTEMD {
                CgroupDriver::Systemd
            } else {
                CgroupDriver::Cgroupfs
            },
            enforce_node_allocatable: self.enforce_node_allocatable.clone(),
            kube_reserved,
            system_reserved,
            kube_reserved_cgroup: self.kube_reserved_cgroup.clone(),
            system_reserved_cgroup: self.system_reserved_cgroup.clone(),
            pod_pids_limit: self.pod_pids_limit,
            qos_reserved_memory_percent,
            cpu_manager_policy: self.cpu_manager_policy,
            cpu_manager_reconcile_period: self.cpu_manager_reconcile_period,
            reserved_system_cpus: self.reserved_system_cpus.clone(),
            cpu_cfs_quota: self.cpu_cfs_quota,
            cpu_cfs_quota_period: self.cpu_cfs_quota_period,
            memory_qos: self.feature_gate(GATE_MEMORY_QOS),
        }
    }
}

#[cfg(test)]
mod tests;
