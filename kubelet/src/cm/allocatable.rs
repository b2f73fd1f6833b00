//! Node allocatable as cgroup values, as Go's node container manager
//! (node_container_manager_linux.go): the `kubepods` cgroup's limits (capacity, less
//! kubeReserved and systemReserved when `pods` is enforced), the kube-reserved and
//! system-reserved cgroups' limits, and the start-up check that reservations fit capacity.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::cm::ResourceConfig;
use crate::eviction::signals::Threshold;
use crate::manifest::quantity::{QuantityError, parse_quantity};
use crate::node_status::machine::MachineInfo;
use crate::node_status::setters::{hugepages_resource, reservation, resource_quantity};
use crate::podspec::pod_resources::{Nanos, hugepage_amounts, millis, units};
use crate::podspec::resources::milli_cpu_to_shares;

/// Go's name for the process-id resource (`pidlimit.PIDs`).
pub const PID: &str = "pid";

const NANOS: i128 = 1_000_000_000;

/// What the node has, as the container manager counts it (Go's `internalCapacity` with the
/// ephemeral storage of `capacity`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Millicores.
    pub cpu_milli: i64,
    /// Bytes of memory.
    pub memory: i64,
    /// Bytes of huge pages by page size in bytes (0 for a size with no pages).
    pub hugepages: BTreeMap<u64, i64>,
    /// Bytes of the root filesystem; None when unknown.
    pub ephemeral_storage: Option<i64>,
    /// The fewer of `kernel.pid_max` and `kernel.threads-max` (Go's `pidlimit.Stats`); None
    /// when unreadable, leaving `pids.max` alone.
    pub pid_max: Option<i64>,
}

/// The kernel's limit on processes: the fewer of `kernel.pid_max` and `kernel.threads-max`
/// (Go's `pidlimit.Stats`); None when neither reads.
pub fn kernel_pid_max() -> Option<i64> {
    let read = |f: &str| -> Option<i64> {
        std::fs::read_to_string(format!("/proc/sys/kernel/{f}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    match (read("pid_max"), read("threads-max")) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Capacity {
    /// From the machine's facts (Go's `CapacityFromMachineInfo`) and the kernel's pid limit.
    pub fn from_machine(machine: &MachineInfo, pid_max: Option<i64>) -> Self {
        Self {
            cpu_milli: i64::from(machine.num_cores).saturating_mul(1000),
            memory: machine.memory_bytes,
            hugepages: machine
                .hugepages
                .iter()
                .filter_map(|h| {
                    let size = u64::try_from(h.page_bytes).ok()?;
                    Some((size, h.page_bytes.saturating_mul(h.pages)))
                })
                .collect(),
            ephemeral_storage: machine.rootfs_capacity,
            pid_max,
        }
    }

    /// As a resource list in nano-units under Go's resource names.
    fn list(&self) -> Nanos {
        let mut list = Nanos::new();
        list.insert("cpu".into(), i128::from(self.cpu_milli) * 1_000_000);
        list.insert("memory".into(), i128::from(self.memory) * NANOS);
        for (size, bytes) in &self.hugepages {
            let size = i64::try_from(*size).unwrap_or(i64::MAX);
            list.insert(hugepages_resource(size), i128::from(*bytes) * NANOS);
        }
        if let Some(bytes) = self.ephemeral_storage {
            list.insert("ephemeral-storage".into(), i128::from(bytes) * NANOS);
        }
        if let Some(pids) = self.pid_max {
            list.insert(PID.into(), i128::from(pids) * NANOS);
        }
        list
    }

    fn from_list(list: &Nanos) -> Self {
        Self {
            cpu_milli: millis(list.get("cpu")),
            memory: units(list.get("memory")),
            hugepages: hugepage_amounts(list),
            ephemeral_storage: list.get("ephemeral-storage").map(|n| units(Some(n))),
            pid_max: list.get(PID).map(|n| units(Some(n))),
        }
    }
}

/// Why node allocatable cannot be computed or enforced.
#[derive(Debug, thiserror::Error)]
pub enum AllocatableError {
    /// A reservation that does not parse (config validation refuses these first).
    #[error("{field}: {value:?}: {reason}")]
    Quantity {
        /// `kubeReserved[cpu]`.
        field: String,
        /// The quantity as written.
        value: String,
        /// Why it does not parse.
        reason: QuantityError,
    },
    /// Reservations and hard eviction thresholds exceed capacity (Go's
    /// `validateNodeAllocatable`).
    #[error("invalid Node Allocatable configuration. {0}")]
    Exceeds(String),
}

fn parse_reserved(field: &str, map: &BTreeMap<String, String>) -> Result<Nanos, AllocatableError> {
    map.iter()
        .map(|(name, value)| {
            let q = parse_quantity(value).map_err(|reason| AllocatableError::Quantity {
                field: format!("{field}[{name}]"),
                value: value.clone(),
                reason,
            })?;
            Ok((name.clone(), q.nanos()))
        })
        .collect()
}

/// Go's `getCgroupConfig`: memory in bytes, cpu shares from millicores, the pids limit and
/// huge pages, each only when the list names it. Quota is never set here.
fn cgroup_config(list: &Nanos) -> ResourceConfig {
    ResourceConfig {
        memory: list.get("memory").map(|n| units(Some(n))),
        cpu_shares: list
            .get("cpu")
            .map(|n| milli_cpu_to_shares(millis(Some(n))).unsigned_abs()),
        pids_limit: list.get(PID).map(|n| units(Some(n))),
        hugepage_limits: hugepage_amounts(list),
        ..Default::default()
    }
}

/// Capacity less systemReserved and kubeReserved, each resource never below zero (Go's
/// `getNodeAllocatableAbsoluteImpl`, over the internal capacity); its memory is what Go's QoS
/// manager reserves from. Reserved resources the node does not have are ignored.
pub fn allocatable_absolute(
    capacity: &Capacity,
    kube_reserved: &BTreeMap<String, String>,
    system_reserved: &BTreeMap<String, String>,
) -> Result<Capacity, AllocatableError> {
    let system = parse_reserved("systemReserved", system_reserved)?;
    let kube = parse_reserved("kubeReserved", kube_reserved)?;
    let mut list = capacity.list();
    for (name, value) in list.iter_mut() {
        let reserved =
            system.get(name).copied().unwrap_or(0) + kube.get(name).copied().unwrap_or(0);
        *value = (*value - reserved).max(0);
    }
    Ok(Capacity::from_list(&list))
}

/// The `kubepods` cgroup's resources (Go's `enforceNodeAllocatableCgroups`): memory, cpu
/// shares, pids and huge pages of [`allocatable_absolute`] when `enforce_pods` (Go: cgroups
/// per QoS and `pods` in `enforceNodeAllocatable`), else of the raw capacity, which Go still
/// writes so the default cpu shares do not starve pods.
///
/// As Go, this does NOT subtract the hard eviction thresholds: only the Node's
/// `status.allocatable` does (Go's `GetNodeAllocatableReservation`). A resource reserved
/// beyond capacity gives 0 (memory and pids 0, which the cgroup writers leave unwritten as
/// runc does; cpu 2 shares).
pub fn node_allocatable_config(
    capacity: &Capacity,
    kube_reserved: &BTreeMap<String, String>,
    system_reserved: &BTreeMap<String, String>,
    enforce_pods: bool,
) -> Result<ResourceConfig, AllocatableError> {
    let amounts = if enforce_pods {
        allocatable_absolute(capacity, kube_reserved, system_reserved)?
    } else {
        capacity.clone()
    };
    Ok(cgroup_config(&amounts.list()))
}

/// The resources of the cgroup `kube-reserved` or `system-reserved` is enforced on (Go's
/// `enforceExistingCgroup` with `getCgroupConfig(reserved)`): memory, cpu shares, pids, huge
/// pages of the reservation itself. None for an empty reservation, which Go refuses to
/// enforce ("cgroup is not configured properly").
pub fn reserved_cgroup_config(
    reserved: &BTreeMap<String, String>,
) -> Result<Option<ResourceConfig>, AllocatableError> {
    if reserved.is_empty() {
        return Ok(None);
    }
    Ok(Some(cgroup_config(&parse_reserved("reserved", reserved)?)))
}

/// Go's `validateNodeAllocatable`: kubeReserved + systemReserved + the hard eviction
/// thresholds must not exceed capacity, for cpu, memory, huge pages and ephemeral storage.
/// The message is Go's since 1.29 (kubernetes#119764; 1.28 swapped its labels), resources in
/// name order, quantities in their canonical form where Go prints its struct.
pub fn validate_node_allocatable(
    capacity: &Capacity,
    kube_reserved: &BTreeMap<String, String>,
    system_reserved: &BTreeMap<String, String>,
    hard_thresholds: &[Threshold],
) -> Result<(), AllocatableError> {
    // Go's `capacity`: no pids, in each resource's unit (millicores for cpu).
    let mut amounts: BTreeMap<String, i64> = BTreeMap::new();
    amounts.insert("cpu".into(), capacity.cpu_milli);
    amounts.insert("memory".into(), capacity.memory);
    for (size, bytes) in &capacity.hugepages {
        amounts.insert(
            hugepages_resource(i64::try_from(*size).unwrap_or(i64::MAX)),
            *bytes,
        );
    }
    if let Some(bytes) = capacity.ephemeral_storage {
        amounts.insert("ephemeral-storage".into(), bytes);
    }
    let quantities: BTreeMap<String, Quantity> = amounts
        .iter()
        .map(|(name, v)| (name.clone(), resource_quantity(name, *v)))
        .collect();
    let reserved = reservation(&quantities, kube_reserved, system_reserved, hard_thresholds);
    let errors: Vec<String> = reserved
        .iter()
        .filter_map(|(name, r)| {
            let cap = amounts.get(name).copied().unwrap_or(0);
            (cap.saturating_sub(*r) < 0).then(|| {
                format!(
                    "Resource {name:?} has a reservation of {} but capacity of {}. Expected capacity >= reservation.",
                    resource_quantity(name, *r).0,
                    resource_quantity(name, cap).0
                )
            })
        })
        .collect();
    if errors.is_empty() {
        return Ok(());
    }
    Err(AllocatableError::Exceeds(errors.join(" ")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use super::*;
    use crate::eviction::signals::{Signal, ThresholdValue};

    /// The node of the Go capture: 2 cpus, 8Gi, 512Mi of 2Mi pages, no 1Gi pages, 100Gi of
    /// disk, pid_max 4194304.
    fn capacity() -> Capacity {
        Capacity {
            cpu_milli: 2000,
            memory: 8 << 30,
            hugepages: [(2 << 20, 512 << 20), (1 << 30, 0)].into(),
            ephemeral_storage: Some(100 << 30),
            pid_max: Some(4_194_304),
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn thresholds() -> [Threshold; 2] {
        let hard = |signal, value| Threshold {
            signal,
            value,
            grace_period: Duration::ZERO,
            min_reclaim: None,
        };
        [
            hard(Signal::MemoryAvailable, ThresholdValue::Quantity(100 << 20)),
            hard(Signal::NodeFsAvailable, ThresholdValue::Percentage(0.1)),
        ]
    }

    fn config(memory: i64, shares: u64, pids: Option<i64>) -> ResourceConfig {
        ResourceConfig {
            memory: Some(memory),
            cpu_shares: Some(shares),
            pids_limit: pids,
            hugepage_limits: [(2_097_152, 536_870_912), (1_073_741_824, 0)].into(),
            ..Default::default()
        }
    }

    #[test]
    fn kubepods_matches_go_1_28() {
        // Go 1.28.7 getCgroupConfig(getNodeAllocatableInternalAbsolute()) and of the raw
        // internal capacity, for each (systemReserved, kubeReserved).
        let cases = [
            (
                "none",
                map(&[]),
                map(&[]),
                config(8_589_934_592, 2048, Some(4_194_304)),
            ),
            (
                "both",
                map(&[("cpu", "500m"), ("memory", "1Gi"), ("pid", "1000")]),
                map(&[
                    ("cpu", "250m"),
                    ("memory", "512Mi"),
                    ("ephemeral-storage", "1Gi"),
                ]),
                config(6_979_321_856, 1280, Some(4_193_304)),
            ),
            (
                "over",
                map(&[("cpu", "3"), ("memory", "9Gi")]),
                map(&[("pid", "5000000")]),
                config(0, 2, Some(0)),
            ),
            (
                "fraction",
                map(&[("cpu", "1001m"), ("memory", "1.5Gi")]),
                map(&[("memory", "100M")]),
                config(6_879_321_856, 1022, Some(4_194_304)),
            ),
        ];
        let raw = config(8_589_934_592, 2048, Some(4_194_304));
        for (name, system, kube, want) in cases {
            let got = node_allocatable_config(&capacity(), &kube, &system, true).unwrap();
            assert_eq!(got, want, "{name}");
            let got = node_allocatable_config(&capacity(), &kube, &system, false).unwrap();
            assert_eq!(got, raw, "{name} not enforced");
        }
        let absolute = allocatable_absolute(&capacity(), &map(&[("memory", "512Mi")]), &map(&[]));
        assert_eq!(absolute.unwrap().memory, (8 << 30) - (512 << 20));
    }

    #[test]
    fn reserved_cgroups_match_go_1_28() {
        let cfg = |pairs: &[(&str, &str)]| reserved_cgroup_config(&map(pairs)).unwrap();
        assert_eq!(cfg(&[]), None);
        assert_eq!(
            cfg(&[("cpu", "500m"), ("memory", "1Gi"), ("pid", "1000")]),
            Some(ResourceConfig {
                memory: Some(1_073_741_824),
                cpu_shares: Some(512),
                pids_limit: Some(1000),
                ..Default::default()
            })
        );
        assert_eq!(
            cfg(&[
                ("cpu", "250m"),
                ("memory", "512Mi"),
                ("ephemeral-storage", "1Gi")
            ]),
            Some(ResourceConfig {
                memory: Some(536_870_912),
                cpu_shares: Some(256),
                ..Default::default()
            })
        );
        assert_eq!(
            cfg(&[("cpu", "1001m"), ("memory", "1.5Gi")]),
            Some(ResourceConfig {
                memory: Some(1_610_612_736),
                cpu_shares: Some(1025),
                ..Default::default()
            })
        );
        assert_eq!(
            cfg(&[("pid", "5000000")]),
            Some(ResourceConfig {
                pids_limit: Some(5_000_000),
                ..Default::default()
            })
        );
        let err = reserved_cgroup_config(&map(&[("cpu", "lots")])).unwrap_err();
        assert!(
            err.to_string().starts_with("reserved[cpu]: \"lots\""),
            "{err}"
        );
    }

    #[test]
    fn validation_matches_go() {
        let check = |system: &[(&str, &str)], kube: &[(&str, &str)]| {
            validate_node_allocatable(&capacity(), &map(kube), &map(system), &thresholds())
        };
        check(&[], &[]).unwrap();
        check(&[("cpu", "500m"), ("memory", "1Gi")], &[("cpu", "250m")]).unwrap();
        // Go 1.28.7 found cpu (3 of 2) and memory (9Gi + 100Mi of 8Gi) over; the words are
        // 1.29's.
        let err = check(&[("cpu", "3"), ("memory", "9Gi")], &[("pid", "5000000")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid Node Allocatable configuration. \
             Resource \"cpu\" has a reservation of 3 but capacity of 2. Expected capacity >= reservation. \
             Resource \"memory\" has a reservation of 9316Mi but capacity of 8Gi. Expected capacity >= reservation."
        );
    }

    #[test]
    fn capacity_from_machine() {
        let machine = MachineInfo {
            num_cores: 2,
            memory_bytes: 8 << 30,
            hugepages: vec![crate::node_status::machine::HugePages {
                page_bytes: 2 << 20,
                pages: 256,
            }],
            rootfs_capacity: Some(100 << 30),
            ..Default::default()
        };
        let c = Capacity::from_machine(&machine, Some(4_194_304));
        assert_eq!(c.cpu_milli, 2000);
        assert_eq!(c.hugepages, [(2 << 20, 512 << 20)].into());
        assert_eq!(c.pid_max, Some(4_194_304));
    }
}
