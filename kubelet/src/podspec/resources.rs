//! A container's resources as CRI linux resources, as the Go kubelet's
//! `generateLinuxContainerResources` makes them: cpu shares from the request, CFS quota from
//! the limit, the memory limit, huge page limits, oom_score_adj by QoS class, and on cgroup v2
//! `memory.oom.group` and no swap.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use ferrolet_proto::cri;
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::pod_resources::hugepage_size_of;
use super::qos::{QosClass, qos_class};
use super::{NodeContext, SpecError};
use crate::manifest::quantity::{ParsedQuantity, parse_quantity};
use crate::types::{Pod, labels};

/// cgroup cpu.shares floor (Go's `MinShares`, also a BestEffort cgroup's shares), ceiling,
/// and shares per cpu.
pub const MIN_SHARES: i64 = 2;
const MAX_SHARES: i64 = 262_144;
const SHARES_PER_CPU: i64 = 1024;
/// CFS period (µs) and the smallest quota the kernel takes.
pub const QUOTA_PERIOD: i64 = 100_000;
const MIN_QUOTA: i64 = 1000;
/// oom_score_adj of Guaranteed (and node-critical) and BestEffort containers.
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// oom_score_adj of BestEffort containers.
pub const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;
/// Pods at or above this priority are critical (Go's `SystemCriticalPriority`).
const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Cpu shares for a cpu amount in millicores (Go's `MilliCPUToShares`).
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli == 0 {
        return MIN_SHARES;
    }
    (milli.saturating_mul(SHARES_PER_CPU) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// CFS quota for a cpu limit in millicores over `period` µs; 0 = no limit (Go's
/// `milliCPUToQuota`).
pub fn milli_cpu_to_quota(milli: i64, period: i64) -> i64 {
    if milli == 0 {
        return 0;
    }
    (milli.saturating_mul(period) / 1000).max(MIN_QUOTA)
}

/// What the node's cgroup setup allows: decides the cgroup v2 extras and huge page limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupFacts {
    /// `/sys/fs/cgroup` is the unified (v2) hierarchy.
    pub v2: bool,
    /// Swap can be limited (v1 `memory.memsw.*`, v2 `memory.swap.max`).
    pub swap_controller: bool,
    /// The huge page sizes the kernel offers (`2MB`, `1GB`).
    pub hugepage_sizes: Vec<String>,
}

impl CgroupFacts {
    /// This node's, read once: these are kernel facts that do not change while we run, and
    /// reading them is a few stats of in-memory filesystems.
    pub fn node() -> &'static CgroupFacts {
        static FACTS: OnceLock<CgroupFacts> = OnceLock::new();
        FACTS.get_or_init(Self::detect)
    }

    fn detect() -> CgroupFacts {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let swap_file = if v2 {
            // memory.swap.max is absent in the root cgroup: look in our own, as Go does.
            let own = std::fs::read_to_string("/proc/self/cgroup")
                .ok()
                .and_then(|t| {
                    t.lines()
                        .find_map(|l| l.strip_prefix("0::").map(str::to_string))
                })
                .unwrap_or_else(|| "/".into());
            Path::new("/sys/fs/cgroup")
                .join(own.trim_start_matches('/'))
                .join("memory.swap.max")
        } else {
            Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").to_path_buf()
        };
        let mut hugepage_sizes: Vec<(u64, String)> = std::fs::read_dir("/sys/kernel/mm/hugepages")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let kb: u64 = name
                    .strip_prefix("hugepages-")?
                    .strip_suffix("kB")?
                    .parse()
                    .ok()?;
                Some((kb, hugepage_unit_size(kb.checked_mul(1024)?)?))
            })
            .collect();
        // Go lists them in directory-name order.
        hugepage_sizes.sort_by_key(|(kb, _)| kb.to_string());
        CgroupFacts {
            v2,
            swap_controller: swap_file.exists(),
            hugepage_sizes: hugepage_sizes.into_iter().map(|(_, s)| s).collect(),
        }
    }
}

/// A page size in bytes as the runtime names it (`2MB`, `1GB`); None when it is not a whole
/// number of its largest unit (Go's `HugePageUnitSizeFromByteSize`).
pub fn hugepage_unit_size(bytes: u64) -> Option<String> {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    let mut size = bytes;
    let mut i = 0;
    while size != 0 && size.is_multiple_of(1024) && i < UNITS.len() - 1 {
        size /= 1024;
        i += 1;
    }
    if size > 1024 && i < UNITS.len() - 1 {
        return None;
    }
    Some(format!("{size}{}", UNITS[i]))
}

/// A quantity from a resource list, refusing one that does not parse.
fn quantity(
    map: Option<&BTreeMap<String, Quantity>>,
    container: &str,
    list: &str,
    name: &str,
) -> Result<Option<ParsedQuantity>, SpecError> {
    let Some(q) = map.and_then(|m| m.get(name)) else {
        return Ok(None);
    };
    parse_quantity(&q.0).map(Some).map_err(|e| {
        SpecError::invalid(
            format!("spec.containers[{container}].resources.{list}[{name}]"),
            format!("{:?}: {e}", q.0),
        )
    })
}

/// A container's limit for a resource.
pub(crate) fn limit(c: &Container, name: &str) -> Result<Option<ParsedQuantity>, SpecError> {
    quantity(
        c.resources.as_ref().and_then(|r| r.limits.as_ref()),
        &c.name,
        "limits",
        name,
    )
}

/// A container's request for a resource, defaulting to its limit (the API server's
/// defaulting, so an undefaulted manifest behaves like a defaulted one).
pub(crate) fn request(c: &Container, name: &str) -> Result<Option<ParsedQuantity>, SpecError> {
    let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    match quantity(requests, &c.name, "requests", name)? {
        Some(q) => Ok(Some(q)),
        None => limit(c, name),
    }
}

fn to_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// The container's CRI linux resources on this node.
pub fn linux_resources(
    pod: &Pod,
    container: &Container,
    node: &NodeContext,
) -> Result<cri::LinuxContainerResources, SpecError> {
    let mut r = linux_resources_with(pod, container, node.memory_capacity, CgroupFacts::node())?;
    if let Some(qos) = &node.memory_qos {
        r.unified.extend(qos.unified(container)?);
    }
    Ok(r)
}

/// The container side of the `MemoryQoS` gate on cgroup v2 (Go's `enforceMemoryQoS`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryQos {
    /// `memoryThrottlingFactor`: how far from the request towards the limit `memory.high` is.
    pub throttling_factor: f64,
    /// The node's allocatable memory (capacity less the reservations), the ceiling of a
    /// container without a memory limit.
    pub allocatable_memory: i64,
}

/// The page size `memory.high` is rounded down to (Go's `defaultPageSize`).
const PAGE_SIZE: i64 = 4096;

impl MemoryQos {
    /// A container's `memory.min` (its memory request) and `memory.high`
    /// (`floor((request + factor × (limit or allocatable − request)) / page) × page`, only
    /// when the request differs from the limit and the result exceeds the request), as Go's
    /// `generateLinuxContainerResources`.
    pub fn unified(&self, container: &Container) -> Result<BTreeMap<String, String>, SpecError> {
        let request = request(container, "memory")?.map_or(0, |q| to_i64(q.value_ceil()));
        let limit = limit(container, "memory")?.map_or(0, |q| to_i64(q.value_ceil()));
        let mut unified = BTreeMap::new();
        if request != 0 {
            unified.insert("memory.min".to_string(), request.to_string());
        }
        if request != limit {
            let ceiling = if limit != 0 {
                limit
            } else {
                self.allocatable_memory
            };
            let high = if ceiling > 0 {
                let h = (request as f64 + (ceiling - request) as f64 * self.throttling_factor)
                    / PAGE_SIZE as f64;
                h.floor() as i64 * PAGE_SIZE
            } else {
                0
            };
            if high != 0 && high > request {
                unified.insert("memory.high".to_string(), high.to_string());
            }
        }
        Ok(unified)
    }
}

/// The container's CRI linux resources given the node's memory and cgroup facts.
pub fn linux_resources_with(
    pod: &Pod,
    container: &Container,
    memory_capacity: u64,
    facts: &CgroupFacts,
) -> Result<cri::LinuxContainerResources, SpecError> {
    let cpu_request = request(container, "cpu")?.map_or(0, |q| to_i64(q.milli_ceil()));
    let cpu_limit = limit(container, "cpu")?.map_or(0, |q| to_i64(q.milli_ceil()));
    let memory_limit = limit(container, "memory")?.map_or(0, |q| to_i64(q.value_ceil()));
    let mut r = cri::LinuxContainerResources {
        cpu_shares: milli_cpu_to_shares(cpu_request),
        cpu_period: QUOTA_PERIOD,
        cpu_quota: milli_cpu_to_quota(cpu_limit, QUOTA_PERIOD),
        memory_limit_in_bytes: memory_limit,
        oom_score_adj: oom_score_adj(pod, container, memory_capacity)?,
        hugepage_limits: hugepage_limits(container, &facts.hugepage_sizes)?,
        ..Default::default()
    };
    if facts.v2 {
        // Kill the whole container on OOM, not one of its processes.
        r.unified.insert("memory.oom.group".into(), "1".into());
    }
    // NoSwap, the default swap behaviour: no swap beyond the memory limit.
    if facts.swap_controller {
        if facts.v2 {
            r.unified.insert("memory.swap.max".into(), "0".into());
        } else {
            r.memory_swap_limit_in_bytes = r.memory_limit_in_bytes;
        }
    }
    Ok(r)
}

/// Every huge page size of the node limited to 0, except those the container asks for
/// (`hugepages-2Mi` limits), as Go's `GetHugepageLimitsFromResources`.
fn hugepage_limits(c: &Container, sizes: &[String]) -> Result<Vec<cri::HugepageLimit>, SpecError> {
    let mut wanted: BTreeMap<String, u64> = BTreeMap::new();
    let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    for name in limits.iter().flat_map(|m| m.keys()) {
        // Other resources, and a malformed size, are skipped, as Go does.
        let Some(unit) = hugepage_size_of(name).and_then(hugepage_unit_size) else {
            continue;
        };
        let amount = limit(c, name)?.map_or(0, |q| u64::try_from(q.value_ceil()).unwrap_or(0));
        wanted.insert(unit, amount);
    }
    Ok(sizes
        .iter()
        .map(|s| cri::HugepageLimit {
            page_size: s.clone(),
            limit: wanted.get(s).copied().unwrap_or(0),
        })
        .collect())
}

/// Whether the pod comes from a file or URL rather than the API server.
pub(crate) fn is_static_pod(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::CONFIG_SOURCE))
        .is_some_and(|s| s != "api")
}

/// Go's `IsCriticalPod`: static, mirror, or of system-critical priority.
pub(crate) fn is_critical_pod(pod: &Pod) -> bool {
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(labels::CONFIG_MIRROR));
    let priority = pod.spec.as_ref().and_then(|s| s.priority);
    is_static_pod(pod) || mirror || priority.is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

/// Go's `IsNodeCriticalPod`: critical and of class `system-node-critical`.
fn is_node_critical_pod(pod: &Pod) -> bool {
    let class = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref());
    is_critical_pod(pod) && class == Some("system-node-critical")
}

/// The container's oom_score_adj (Go's `GetContainerOOMScoreAdjust`): Guaranteed and
/// node-critical -997, BestEffort 1000, Burstable `1000 - 1000*memoryRequest/capacity` kept
/// within [3, 999] (sidecars no higher than the pod's smallest regular container).
pub fn oom_score_adj(
    pod: &Pod,
    container: &Container,
    memory_capacity: u64,
) -> Result<i64, SpecError> {
    if is_node_critical_pod(pod) {
        return Ok(GUARANTEED_OOM_SCORE_ADJ);
    }
    match qos_class(pod) {
        QosClass::Guaranteed => return Ok(GUARANTEED_OOM_SCORE_ADJ),
        QosClass::BestEffort => return Ok(BEST_EFFORT_OOM_SCORE_ADJ),
        QosClass::Burstable => {}
    }
    let capacity = i128::from(memory_capacity);
    let adjust = |request: i128| {
        if capacity == 0 {
            // Unknown capacity: the least protected Burstable score.
            return 999;
        }
        to_i64(1000 - (1000 * request) / capacity)
    };
    let memory_request = |c: &Container| -> Result<i128, SpecError> {
        Ok(request(c, "memory")?.map_or(0, |q| q.value_ceil()))
    };
    let mut score = adjust(memory_request(container)?);
    let spec = pod.spec.as_ref();
    let sidecar = spec
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|inits| {
            inits
                .iter()
                .any(|i| i.name == container.name && i.restart_policy.as_deref() == Some("Always"))
        });
    if sidecar {
        let mut min_request: Option<i128> = None;
        for c in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
            let r = memory_request(c)?;
            min_request = Some(min_request.map_or(r, |m| m.min(r)));
        }
        if let Some(m) = min_request {
            score = score.min(adjust(m));
        }
    }
    // Burstable stays above Guaranteed (a Guaranteed pod at 100% scores about 3) and below
    // BestEffort.
    let floor = 1000 + GUARANTEED_OOM_SCORE_ADJ;
    if score < floor {
        return Ok(floor);
    }
    if score == BEST_EFFORT_OOM_SCORE_ADJ {
        return Ok(score - 1);
    }
    Ok(score)
}

/// What the node offers pods when a container has no limit (the downward API's defaults):
/// Go's node allocatable with its default reservations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocatable {
    /// Millicores.
    pub cpu_milli: i64,
    /// Bytes: capacity less the default hard eviction threshold (`memory.available<100Mi`).
    pub memory: i64,
    /// Bytes of the root filesystem less `nodefs.available<10%`.
    pub ephemeral_storage: i64,
}

impl Allocatable {
    /// This node's.
    pub fn node(memory_capacity: u64) -> Allocatable {
        Allocatable {
            cpu_milli: online_cpus().saturating_mul(1000),
            memory: allocatable_memory(memory_capacity),
            ephemeral_storage: root_fs_capacity().map(|c| c - c / 10).unwrap_or(0),
        }
    }
}

/// Memory pods may use: capacity less the default hard eviction threshold
/// (`memory.available<100Mi`), as Go's node allocatable.
pub fn allocatable_memory(memory_capacity: u64) -> i64 {
    let memory = i64::try_from(memory_capacity).unwrap_or(i64::MAX);
    memory.saturating_sub(100 << 20).max(0)
}

/// Online cpus (Go's machine info `NumCores`).
fn online_cpus() -> i64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN) {
        Ok(Some(n)) if n > 0 => n,
        _ => 1,
    }
}

/// Size of the root filesystem in bytes; one statvfs, done only when a container reads an
/// unset ephemeral-storage limit through the downward API.
fn root_fs_capacity() -> Option<i64> {
    let st = nix::sys::statvfs::statvfs("/").ok()?;
    let bytes = u128::from(st.blocks()) * u128::from(st.fragment_size());
    i64::try_from(bytes).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::podspec::testutil::pod;

    const GI: u64 = 1 << 30;

    fn one(resources: &str) -> Pod {
        pod(&format!(
            "metadata: {{name: p, uid: u}}
spec: {{containers: [{{name: c, image: x, resources: {resources}}}]}}"
        ))
    }

    fn res(p: &Pod, facts: &CgroupFacts) -> cri::LinuxContainerResources {
        let c = &p.spec.as_ref().unwrap().containers[0];
        linux_resources_with(p, c, 8 * GI, facts).unwrap()
    }

    #[test]
    fn shares_and_quota_follow_go() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), 262_144);
        assert_eq!(milli_cpu_to_quota(0, 100_000), 0);
        assert_eq!(milli_cpu_to_quota(5, 100_000), 1000);
        assert_eq!(milli_cpu_to_quota(250, 100_000), 25_000);
        assert_eq!(milli_cpu_to_quota(2000, 100_000), 200_000);
    }

    #[test]
    fn resources_table() {
        let v1 = CgroupFacts::default();
        // (resources, shares, quota, memory limit, oom_score_adj)
        let table = [
            ("{}", 2, 0, 0, 1000),
            ("{requests: {cpu: 250m}}", 256, 0, 0, 999),
            ("{limits: {cpu: 500m}}", 512, 50_000, 0, 999),
            (
                "{requests: {cpu: 100m}, limits: {cpu: '1'}}",
                102,
                100_000,
                0,
                999,
            ),
            (
                "{limits: {cpu: '1', memory: 1Gi}}",
                1024,
                100_000,
                1 << 30,
                -997,
            ),
            // 1 GiB of 8 GiB requested: 1000 - 125.
            ("{requests: {memory: 1Gi}}", 2, 0, 0, 875),
            (
                "{requests: {memory: 2Gi}, limits: {memory: 4Gi}}",
                2,
                0,
                4 << 30,
                750,
            ),
            // All the memory requested: clamped to 3.
            ("{requests: {memory: 8Gi, cpu: 1}}", 1024, 0, 0, 3),
            ("{requests: {memory: 1}}", 2, 0, 0, 999),
        ];
        for (resources, shares, quota, memory, oom) in table {
            let r = res(&one(resources), &v1);
            assert_eq!(r.cpu_shares, shares, "{resources}");
            assert_eq!(r.cpu_period, 100_000, "{resources}");
            assert_eq!(r.cpu_quota, quota, "{resources}");
            assert_eq!(r.memory_limit_in_bytes, memory, "{resources}");
            assert_eq!(r.oom_score_adj, oom, "{resources}");
            assert!(r.unified.is_empty());
            assert_eq!(r.memory_swap_limit_in_bytes, 0);
        }
    }

    #[test]
    fn cgroup_v2_extras_and_swap() {
        let p = one("{limits: {memory: 64Mi}}");
        let v2 = CgroupFacts {
            v2: true,
            swap_controller: true,
            hugepage_sizes: vec![],
        };
        let r = res(&p, &v2);
        assert_eq!(
            r.unified.get("memory.oom.group").map(String::as_str),
            Some("1")
        );
        assert_eq!(
            r.unified.get("memory.swap.max").map(String::as_str),
            Some("0")
        );
        let v1_swap = CgroupFacts {
            v2: false,
            swap_controller: true,
            hugepage_sizes: vec![],
        };
        let r = res(&p, &v1_swap);
        assert!(r.unified.is_empty());
        assert_eq!(r.memory_swap_limit_in_bytes, 64 << 20);
    }

    #[test]
    fn hugepages_default_to_zero() {
        let facts = CgroupFacts {
            v2: false,
            swap_controller: false,
            hugepage_sizes: vec!["1GB".into(), "2MB".into()],
        };
        let r = res(&one("{}"), &facts);
        let got: Vec<_> = r
            .hugepage_limits
            .iter()
            .map(|h| (h.page_size.as_str(), h.limit))
            .collect();
        assert_eq!(got, [("1GB", 0), ("2MB", 0)]);
        let r = res(
            &one("{limits: {hugepages-2Mi: 100Mi, memory: 1Gi, cpu: 1}}"),
            &facts,
        );
        let got: Vec<_> = r
            .hugepage_limits
            .iter()
            .map(|h| (h.page_size.as_str(), h.limit))
            .collect();
        assert_eq!(got, [("1GB", 0), ("2MB", 100 << 20)]);
        assert_eq!(hugepage_unit_size(2 << 20).as_deref(), Some("2MB"));
        assert_eq!(hugepage_unit_size(1 << 30).as_deref(), Some("1GB"));
        assert_eq!(hugepage_unit_size(64 << 10).as_deref(), Some("64KB"));
        assert_eq!(hugepage_unit_size(1025 << 10), None);
    }

    #[test]
    fn node_critical_and_sidecars() {
        let p = pod("metadata:
  name: p
  uid: u
  annotations: {kubernetes.io/config.source: file}
spec:
  priorityClassName: system-node-critical
  containers: [{name: c, image: x}]");
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(oom_score_adj(&p, c, 8 * GI).unwrap(), -997);

        // The sidecar asks for less memory than the app container, but is protected as well.
        let p = pod("metadata: {name: p, uid: u}
spec:
  initContainers: [{name: side, image: x, restartPolicy: Always, resources: {requests: {memory: 512Mi}}}]
  containers: [{name: c, image: x, resources: {requests: {memory: 1Gi}}}]");
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(oom_score_adj(&p, &spec.containers[0], 8 * GI).unwrap(), 875);
        assert_eq!(
            oom_score_adj(&p, &spec.init_containers.as_ref().unwrap()[0], 8 * GI).unwrap(),
            875
        );
        // A sidecar asking for more keeps its own (lower) score.
        let p = pod("metadata: {name: p, uid: u}
spec:
  initContainers: [{name: side, image: x, restartPolicy: Always, resources: {requests: {memory: 4Gi}}}]
  containers: [{name: c, image: x, resources: {requests: {memory: 1Gi}}}]");
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(
            oom_score_adj(&p, &spec.init_containers.as_ref().unwrap()[0], 8 * GI).unwrap(),
            500
        );
    }

    #[test]
    fn bad_quantities_are_refused() {
        let p = one("{limits: {cpu: lots}}");
        let c = &p.spec.as_ref().unwrap().containers[0];
        let err = linux_resources_with(&p, c, GI, &CgroupFacts::default()).unwrap_err();
        assert!(err.to_string().contains("resources.limits[cpu]"), "{err}");
    }

    #[test]
    fn allocatable_is_sane() {
        let a = Allocatable::node(8 * GI);
        assert!(a.cpu_milli >= 1000);
        assert_eq!(a.memory, (8 << 30) - (100 << 20));
        assert!(a.ephemeral_storage > 0);
    }

    #[test]
    fn memory_qos_as_go_sets_it() {
        let gi = GI as i64;
        let qos = MemoryQos {
            throttling_factor: 0.9,
            allocatable_memory: 8 * gi,
        };
        let container = |resources: &str| {
            let p = pod(&format!(
                "spec:\n  containers:\n  - name: c\n    image: i\n    resources: {resources}\n"
            ));
            p.spec.unwrap().containers.remove(0)
        };
        let unified = |resources: &str| qos.unified(&container(resources)).unwrap();
        // Burstable: floor((64Mi + 0.9 × 64Mi) / 4096) × 4096.
        let u = unified("{requests: {memory: 64Mi}, limits: {memory: 128Mi}}");
        assert_eq!(u["memory.min"], "67108864");
        assert_eq!(u["memory.high"], "127504384");
        // Equal request and limit: protected, never throttled.
        let u = unified("{requests: {memory: 64Mi}, limits: {memory: 64Mi}}");
        assert_eq!(u.keys().collect::<Vec<_>>(), ["memory.min"]);
        // No limit: towards the node's allocatable memory.
        let u = unified("{requests: {memory: 1Gi}}");
        let high = ((gi as f64 + 7.0 * gi as f64 * 0.9) / 4096.0).floor() as i64 * 4096;
        assert_eq!(u["memory.high"], high.to_string());
        // Only a limit: the request defaults to it, as the API server's defaulting does, so
        // the memory is protected and not throttled.
        let u = unified("{limits: {memory: 100Mi}}");
        assert_eq!(u.keys().collect::<Vec<_>>(), ["memory.min"]);
        assert_eq!(u["memory.min"], "104857600");
        // BestEffort without an allocatable figure: nothing.
        let none = MemoryQos {
            allocatable_memory: 0,
            ..qos
        };
        assert!(none.unified(&container("{}")).unwrap().is_empty());
    }
}
