//! What a pod's own cgroup is given, as Go's `ResourceConfigForPod` (helpers_linux.go) and the
//! pods limit the pod container manager adds when it creates the cgroup.

use crate::cm::ResourceConfig;
use crate::podspec::SpecError;
use crate::podspec::pod_resources::{hugepage_amounts, millis, pod_limits, pod_requests, units};
use crate::podspec::qos::{QosClass, qos_class};
use crate::podspec::resources::{MIN_SHARES, milli_cpu_to_quota, milli_cpu_to_shares};
use crate::types::Pod;

/// The pod cgroup's resources (Go's `ResourceConfigForPod`, then `podPidsLimit`):
///
/// - cpu shares from the summed cpu requests (init containers, sidecars and overhead counted
///   as Go's `PodRequests`); BestEffort gets 2 and nothing else;
/// - CFS quota from the summed cpu limits over `cpu_period_us` with that period, for
///   Guaranteed pods and Burstable pods whose every container limits cpu; -1 (unlimited,
///   written as such) there when `enforce_cpu_limits` (`cpuCFSQuota`) is off;
/// - the memory limit for Guaranteed pods and Burstable pods whose every container has one;
/// - huge page limits from the `hugepages-<size>` requests, only the sizes asked for: the
///   cgroup writer limits every other size the node has to 0, as Go's `maybeSetHugetlb`;
/// - `pod_pids_limit` when positive; otherwise none, leaving the inherited `max`.
///
/// Go computes the quota over the fixed 100ms period unless the `CustomCPUCFSQuotaPeriod`
/// gate is on, and refuses another `cpuCFSQuotaPeriod` without it: using the given period is
/// the same for every configuration Go accepts. With `memory_qos` (the `MemoryQoS` gate on
/// cgroup v2), `memory.min` is the pod's memory request when it has one. Not done: pod-level
/// resources (1.32 alpha) and in-place resize.
pub fn resource_config_for_pod(
    pod: &Pod,
    enforce_cpu_limits: bool,
    cpu_period_us: u64,
    pod_pids_limit: i64,
    memory_qos: bool,
) -> Result<ResourceConfig, SpecError> {
    let requests = pod_requests(pod)?;
    let limits = pod_limits(pod)?;
    let class = qos_class(pod);
    let shares = milli_cpu_to_shares(millis(requests.get("cpu"))).unsigned_abs();
    let period = i64::try_from(cpu_period_us).unwrap_or(i64::MAX);
    let quota = if enforce_cpu_limits {
        milli_cpu_to_quota(millis(limits.nanos.get("cpu")), period)
    } else {
        -1
    };
    let mut config = ResourceConfig {
        hugepage_limits: hugepage_amounts(&requests),
        pids_limit: (pod_pids_limit > 0).then_some(pod_pids_limit),
        memory_min: memory_qos
            .then(|| units(requests.get("memory")))
            .filter(|m| *m > 0),
        ..Default::default()
    };
    match class {
        QosClass::BestEffort => config.cpu_shares = Some(MIN_SHARES.unsigned_abs()),
        QosClass::Guaranteed | QosClass::Burstable => {
            config.cpu_shares = Some(shares);
            if class == QosClass::Guaranteed || limits.cpu_declared {
                config.cpu_quota = Some(quota);
                config.cpu_period = Some(cpu_period_us);
            }
            config.memory = limits.cgroup_memory(class);
        }
    }
    Ok(config)
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeMap;

    use super::*;
    use crate::podspec::testutil::pod;

    /// The pods of the Go capture (`ResourceConfigForPod` of Kubernetes 1.28.7, run on this
    /// machine): their expected values below are what Go printed.
    fn case(name: &str) -> Pod {
        let spec = match name {
            "besteffort" => "containers: [{name: c, image: x}]",
            "guaranteed" => {
                "overhead: {cpu: 100m, memory: 64Mi}
  containers:
  - {name: a, image: x, resources: {requests: {cpu: 500m, memory: 128Mi}, limits: {cpu: 500m, memory: 128Mi}}}
  - {name: b, image: x, resources: {requests: {cpu: 500m, memory: 128Mi}, limits: {cpu: 500m, memory: 128Mi}}}"
            }
            "burstable-all-limits" => {
                "overhead: {cpu: 10m, memory: 1Mi}
  containers:
  - {name: a, image: x, resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 200m, memory: 128Mi}}}
  - {name: b, image: x, resources: {requests: {cpu: 50m, memory: 256Mi}, limits: {cpu: 300m, memory: 256Mi}}}"
            }
            "burstable-partial" => {
                "containers:
  - {name: a, image: x, resources: {requests: {cpu: 250m, memory: 128Mi}, limits: {cpu: 500m, memory: 128Mi}}}
  - {name: b, image: x, resources: {requests: {memory: 32Mi}}}"
            }
            "burstable-requests-only" => {
                "containers: [{name: a, image: x, resources: {requests: {cpu: 1500m}}}]"
            }
            "init-larger" => {
                "initContainers:
  - {name: init, image: x, resources: {requests: {cpu: '2', memory: 1Gi}, limits: {cpu: '2', memory: 1Gi}}}
  containers:
  - {name: app, image: x, resources: {requests: {cpu: 500m, memory: 256Mi}, limits: {cpu: 500m, memory: 256Mi}}}"
            }
            "sidecar" => {
                "initContainers:
  - {name: side, image: x, restartPolicy: Always, resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 200m, memory: 64Mi}}}
  - {name: setup, image: x, resources: {requests: {cpu: 400m, memory: 128Mi}, limits: {memory: 128Mi}}}
  containers:
  - {name: app, image: x, resources: {requests: {cpu: 300m, memory: 100Mi}, limits: {cpu: '1', memory: 256Mi}}}"
            }
            "hugepages" => {
                "containers:
  - name: a
    image: x
    resources:
      requests: {cpu: '1', memory: 1Gi, hugepages-2Mi: 100Mi, hugepages-1Gi: 2Gi}
      limits: {cpu: '1', memory: 1Gi, hugepages-2Mi: 100Mi, hugepages-1Gi: 2Gi}"
            }
            "tiny-cpu" => {
                "containers:
  - {name: a, image: x, resources: {requests: {cpu: 1m, memory: '1'}, limits: {cpu: 1m, memory: '1'}}}"
            }
            "fractions" => {
                "containers:
  - {name: a, image: x, resources: {requests: {cpu: '0.0005', memory: 100m}, limits: {cpu: '0.0005', memory: 100m}}}
  - {name: b, image: x, resources: {requests: {cpu: '0.0005', memory: 100m}, limits: {cpu: '0.0005', memory: 100m}}}"
            }
            other => panic!("no case {other}"),
        };
        pod(&format!(
            "metadata: {{name: {name}, uid: u}}\nspec:\n  {spec}"
        ))
    }

    /// All Go-captured pods, in the capture's order (the QoS tests use them as active pods).
    pub(crate) fn go_pods() -> Vec<Pod> {
        [
            "besteffort",
            "guaranteed",
            "burstable-all-limits",
            "burstable-partial",
            "burstable-requests-only",
            "init-larger",
            "sidecar",
            "hugepages",
            "tiny-cpu",
            "fractions",
        ]
        .into_iter()
        .map(case)
        .collect()
    }

    fn config(
        memory: Option<i64>,
        shares: u64,
        quota: Option<i64>,
        hugepages: &[(u64, i64)],
    ) -> ResourceConfig {
        ResourceConfig {
            memory,
            cpu_shares: Some(shares),
            cpu_quota: quota,
            cpu_period: quota.map(|_| 100_000),
            hugepage_limits: hugepages.iter().copied().collect(),
            ..Default::default()
        }
    }

    #[test]
    fn matches_go_1_28() {
        // Go 1.28.7 `ResourceConfigForPod(pod, true, 100000, false)`.
        let table = [
            ("besteffort", config(None, 2, None, &[])),
            (
                "guaranteed",
                config(Some(335_544_320), 1126, Some(110_000), &[]),
            ),
            (
                "burstable-all-limits",
                config(Some(403_701_760), 163, Some(51_000), &[]),
            ),
            ("burstable-partial", config(None, 256, None, &[])),
            ("burstable-requests-only", config(None, 1536, None, &[])),
            (
                "init-larger",
                config(Some(1_073_741_824), 2048, Some(200_000), &[]),
            ),
            (
                "sidecar",
                config(Some(335_544_320), 512, Some(120_000), &[]),
            ),
            (
                "hugepages",
                config(
                    Some(1_073_741_824),
                    1024,
                    Some(100_000),
                    &[(2_097_152, 104_857_600), (1_073_741_824, 2_147_483_648)],
                ),
            ),
            ("tiny-cpu", config(Some(1), 2, Some(1000), &[])),
            ("fractions", config(Some(1), 2, Some(1000), &[])),
        ];
        for (name, want) in table {
            let got = resource_config_for_pod(&case(name), true, 100_000, -1, false).unwrap();
            assert_eq!(got, want, "{name}");
            // cpuCFSQuota off: the quota Go would set is -1, the rest unchanged.
            let off = resource_config_for_pod(&case(name), false, 100_000, 0, false).unwrap();
            let want_off = ResourceConfig {
                cpu_quota: want.cpu_quota.map(|_| -1),
                ..want
            };
            assert_eq!(off, want_off, "{name} without cfs quota");
        }
    }

    #[test]
    fn period_and_pids() {
        // Go 1.28.7 with CustomCPUCFSQuotaPeriod on: the quota follows the period.
        let got = resource_config_for_pod(&case("guaranteed"), true, 50_000, 1024, false).unwrap();
        assert_eq!(got.cpu_quota, Some(55_000));
        assert_eq!(got.cpu_period, Some(50_000));
        assert_eq!(got.pids_limit, Some(1024));
        let got = resource_config_for_pod(&case("burstable-all-limits"), true, 50_000, -1, false)
            .unwrap();
        assert_eq!(got.cpu_quota, Some(25_500));
        assert_eq!(got.pids_limit, None);
        let got = resource_config_for_pod(&case("besteffort"), true, 100_000, 100, false).unwrap();
        assert_eq!(got.pids_limit, Some(100));
        assert_eq!(got.hugepage_limits, BTreeMap::new());
    }

    #[test]
    fn undefaulted_requests_count_as_their_limits() {
        // Limits only: the API server would copy them to requests; Guaranteed either way.
        let p = pod("metadata: {name: p, uid: u}
spec:
  containers: [{name: a, image: x, resources: {limits: {cpu: 500m, memory: 128Mi}}}]");
        let got = resource_config_for_pod(&p, true, 100_000, -1, false).unwrap();
        assert_eq!(got, config(Some(128 << 20), 512, Some(50_000), &[]));
    }

    #[test]
    fn memory_qos_sets_the_pod_s_memory_min() {
        let on = resource_config_for_pod(&case("burstable-all-limits"), true, 100_000, -1, true)
            .unwrap();
        let requests = pod_requests(&case("burstable-all-limits")).unwrap();
        assert_eq!(on.memory_min, Some(units(requests.get("memory"))));
        let best_effort = resource_config_for_pod(&case("besteffort"), true, 100_000, -1, true);
        assert_eq!(best_effort.unwrap().memory_min, None);
    }
}
