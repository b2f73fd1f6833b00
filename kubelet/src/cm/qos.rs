//! What the QoS cgroups are given, as Go's QoS container manager's `UpdateCgroups`
//! (qos_container_manager_linux.go: `setCPUCgroupConfig`, `setHugePagesConfig`,
//! `setMemoryReserve`), which Go runs at start and every minute over the active pods.

use std::collections::BTreeMap;

use crate::cm::ResourceConfig;
use crate::podspec::pod_resources::{millis, pod_requests, units};
use crate::podspec::qos::{QosClass, qos_class};
use crate::podspec::resources::{MIN_SHARES, milli_cpu_to_shares};
use crate::types::Pod;

/// The huge page limit Go gives every QoS cgroup for every page size: effectively unbounded.
pub const UNBOUNDED_HUGEPAGES: i64 = 1 << 62;

/// The three QoS cgroups' resources.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QosConfigs {
    /// `kubepods` itself, the Guaranteed pods' parent: only huge pages (Go updates it with
    /// the unbounded limits too, over what node allocatable enforcement set).
    pub guaranteed: ResourceConfig,
    /// `kubepods/burstable`.
    pub burstable: ResourceConfig,
    /// `kubepods/besteffort`.
    pub besteffort: ResourceConfig,
}

/// The QoS cgroups' resources for these pods. The caller passes the active pods, as Go's
/// `activePods` (admitted, not terminated); `hugepage_sizes` are the node's page sizes in
/// bytes.
///
/// - cpu shares: BestEffort 2, Burstable from the summed cpu requests of the Burstable pods
///   (each pod's as Go's `PodRequests`, in millicores, then `MilliCPUToShares`);
/// - huge pages: [`UNBOUNDED_HUGEPAGES`] for every page size on all three;
/// - memory, only with `qos_reserved_memory_percent` (Go's `qosReserved: memory=N%`, read
///   only under the `QOSReserved` alpha gate) and a non-zero `allocatable_memory`: Burstable
///   `allocatable - guaranteedRequests * N / 100`, BestEffort that less
///   `burstableRequests * N / 100`, integer division, no floor (Go's `setMemoryReserve`).
///   Go's allocatable here is `GetNodeAllocatableAbsolute`: capacity less kubeReserved and
///   systemReserved, not less the eviction threshold.
///
/// A pod whose quantities do not parse (it got no containers either) counts as asking for
/// nothing. With `memory_qos` (the `MemoryQoS` gate on cgroup v2), `memory.min` protects
/// what the pods ask for, as Go's `setMemoryQoS`: Burstable the Burstable pods' memory
/// requests, `kubepods` those plus the Guaranteed pods' (unset while zero). Not done: Go's
/// retry that lowers a limit below current usage to the usage after a failed write (it reads
/// the cgroup).
pub fn qos_cgroup_configs(
    pods: &[&Pod],
    allocatable_memory: i64,
    qos_reserved_memory_percent: Option<i64>,
    hugepage_sizes: &[u64],
    memory_qos: bool,
) -> QosConfigs {
    let (mut burstable_cpu_milli, mut guaranteed_memory, mut burstable_memory) = (0i64, 0i64, 0i64);
    for pod in pods {
        let class = qos_class(pod);
        if class == QosClass::BestEffort {
            continue;
        }
        let requests = pod_requests(pod).unwrap_or_default();
        let memory = units(requests.get("memory"));
        if class == QosClass::Burstable {
            burstable_cpu_milli = burstable_cpu_milli.saturating_add(millis(requests.get("cpu")));
            burstable_memory = burstable_memory.saturating_add(memory);
        } else {
            guaranteed_memory = guaranteed_memory.saturating_add(memory);
        }
    }
    let hugepages: BTreeMap<u64, i64> = hugepage_sizes
        .iter()
        .map(|size| (*size, UNBOUNDED_HUGEPAGES))
        .collect();
    let with_hugepages = |cpu_shares| ResourceConfig {
        cpu_shares,
        hugepage_limits: hugepages.clone(),
        ..Default::default()
    };
    let mut configs = QosConfigs {
        guaranteed: with_hugepages(None),
        burstable: with_hugepages(Some(
            milli_cpu_to_shares(burstable_cpu_milli).unsigned_abs(),
        )),
        besteffort: with_hugepages(Some(MIN_SHARES.unsigned_abs())),
    };
    if let Some(percent) = qos_reserved_memory_percent
        && allocatable_memory != 0
    {
        let reserve = |requests: i64| {
            let kept = i128::from(requests) * i128::from(percent) / 100;
            i64::try_from(kept).unwrap_or(i64::MAX)
        };
        let burstable_limit = allocatable_memory.saturating_sub(reserve(guaranteed_memory));
        let besteffort_limit = burstable_limit.saturating_sub(reserve(burstable_memory));
        configs.burstable.memory = Some(burstable_limit);
        configs.besteffort.memory = Some(besteffort_limit);
    }
    if memory_qos {
        let guaranteed_min = guaranteed_memory.saturating_add(burstable_memory);
        configs.burstable.memory_min = Some(burstable_memory).filter(|m| *m > 0);
        configs.guaranteed.memory_min = Some(guaranteed_min).filter(|m| *m > 0);
    }
    configs
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::cm::pod_config::tests::go_pods;

    const GI: i64 = 1 << 30;
    const SIZES: [u64; 2] = [2 << 20, 1 << 30];

    fn configs(percent: Option<i64>) -> QosConfigs {
        let pods = go_pods();
        let active: Vec<&Pod> = pods.iter().collect();
        qos_cgroup_configs(&active, 8 * GI, percent, &SIZES, false)
    }

    #[test]
    fn matches_go_1_28() {
        // Go 1.28.7's setCPUCgroupConfig, setHugePagesConfig and setMemoryReserve over the
        // ten pods of the pod_config capture, allocatable memory 8Gi, on a node with 2MB and
        // 1GB pages. Burstable cpu: 160m + 250m + 1500m + 500m = 2410m.
        let unbounded: std::collections::BTreeMap<u64, i64> = [
            (2_097_152, 4_611_686_018_427_387_904),
            (1_073_741_824, 4_611_686_018_427_387_904),
        ]
        .into();
        let none = configs(None);
        assert_eq!(
            none.guaranteed,
            ResourceConfig {
                hugepage_limits: unbounded.clone(),
                ..Default::default()
            }
        );
        assert_eq!(none.burstable.cpu_shares, Some(2467));
        assert_eq!(none.besteffort.cpu_shares, Some(2));
        assert_eq!(none.burstable.hugepage_limits, unbounded);
        assert_eq!(none.besteffort.hugepage_limits, unbounded);
        assert_eq!(
            (none.burstable.memory, none.besteffort.memory),
            (None, None)
        );
        // (percent, burstable memory, besteffort memory) as Go printed them.
        for (percent, burstable, besteffort) in [
            (0, 8_589_934_592, 8_589_934_592),
            (50, 7_348_420_607, 6_995_574_783),
            (33, 7_770_535_362, 7_537_657_119),
            (100, 6_106_906_622, 5_401_214_974),
        ] {
            let got = configs(Some(percent));
            assert_eq!(got.burstable.memory, Some(burstable), "{percent}%");
            assert_eq!(got.besteffort.memory, Some(besteffort), "{percent}%");
            assert_eq!(got.guaranteed.memory, None);
            assert_eq!(got.burstable.cpu_shares, Some(2467));
        }
    }

    #[test]
    fn no_pods_and_no_allocatable() {
        let got = qos_cgroup_configs(&[], 0, Some(50), &[], false);
        assert_eq!(got.burstable.cpu_shares, Some(2));
        assert_eq!(got.burstable.memory, None);
        assert!(got.burstable.hugepage_limits.is_empty());
        let pods = go_pods();
        // Go: one Burstable pod of 1500m → 1536 shares.
        let got = qos_cgroup_configs(&[&pods[4]], 8 * GI, None, &[], false);
        assert_eq!(got.burstable.cpu_shares, Some(1536));
    }

    #[test]
    fn memory_qos_protects_the_requests() {
        let pods = go_pods();
        let active: Vec<&Pod> = pods.iter().collect();
        let off = qos_cgroup_configs(&active, 8 * GI, None, &[], false);
        assert_eq!(
            (off.guaranteed.memory_min, off.burstable.memory_min),
            (None, None)
        );
        let on = qos_cgroup_configs(&active, 8 * GI, None, &[], true);
        let (mut guaranteed, mut burstable) = (0, 0);
        for p in &active {
            let memory = units(pod_requests(p).unwrap().get("memory"));
            match qos_class(p) {
                QosClass::Guaranteed => guaranteed += memory,
                QosClass::Burstable => burstable += memory,
                QosClass::BestEffort => {}
            }
        }
        assert!(burstable > 0 && guaranteed > 0);
        assert_eq!(on.burstable.memory_min, Some(burstable));
        assert_eq!(on.guaranteed.memory_min, Some(guaranteed + burstable));
        assert_eq!(on.besteffort.memory_min, None);
        let empty = qos_cgroup_configs(&[], 8 * GI, None, &[], true);
        assert_eq!(empty.guaranteed, off_guaranteed_default());
    }

    fn off_guaranteed_default() -> ResourceConfig {
        qos_cgroup_configs(&[], 8 * GI, None, &[], false).guaranteed
    }
}
