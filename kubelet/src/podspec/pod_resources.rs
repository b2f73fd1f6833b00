//! A pod's resources as a whole, summed as Go's `resource.PodRequests` and `PodLimits`: the
//! app containers and sidecars (restartable init containers) added up, or while an init
//! container runs, it plus the sidecars started before it, if more; then the pod overhead.
//! Sums are exact (nano-units) and rounded once, as Go sums quantities before `Value()`.
//! Admission, the pod cgroup, the QoS cgroups and memory-backed emptyDirs all read these.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::SpecError;
use super::qos::QosClass;
use crate::manifest::quantity::{ParsedQuantity, parse_quantity};
use crate::types::Pod;

/// Amounts by resource name in nano-units (nano-cores for cpu, nano-bytes for memory).
pub type Nanos = BTreeMap<String, i128>;

/// What a container is to the pod's sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerKind {
    /// `spec.containers`.
    App,
    /// An init container that runs to completion.
    Init,
    /// An init container with `restartPolicy: Always`, running beside the app containers.
    Sidecar,
}

fn add(into: &mut Nanos, from: &Nanos) {
    for (name, v) in from {
        *into.entry(name.clone()).or_default() += v;
    }
}

fn max_into(into: &mut Nanos, from: &Nanos) {
    for (name, v) in from {
        let e = into.entry(name.clone()).or_insert(*v);
        *e = (*e).max(*v);
    }
}

/// Go's `PodRequests`/`PodLimits` over each container's list as `list_of` reads it, without
/// the overhead. `each` sees what Go's `ContainerFn` sees: an app container's own list, a
/// sidecar's with the sidecars before it, an init container's plus the sidecars before it.
pub fn sum_containers<E>(
    spec: &PodSpec,
    mut list_of: impl FnMut(&Container, ContainerKind) -> Result<Nanos, E>,
    mut each: impl FnMut(&Nanos),
) -> Result<Nanos, E> {
    let mut total = Nanos::new();
    for c in &spec.containers {
        let own = list_of(c, ContainerKind::App)?;
        each(&own);
        add(&mut total, &own);
    }
    let (mut sidecars, mut init_max) = (Nanos::new(), Nanos::new());
    for c in spec.init_containers.iter().flatten() {
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        let kind = if sidecar {
            ContainerKind::Sidecar
        } else {
            ContainerKind::Init
        };
        let own = list_of(c, kind)?;
        let running = if sidecar {
            add(&mut total, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut running = sidecars.clone();
            add(&mut running, &own);
            running
        };
        each(&running);
        max_into(&mut init_max, &running);
    }
    max_into(&mut total, &init_max);
    Ok(total)
}

/// One of a container's lists in nano-units, refusing a quantity that does not parse.
fn parsed_list(
    list: Option<&BTreeMap<String, Quantity>>,
    field: impl Fn(&str) -> String,
) -> Result<Nanos, SpecError> {
    let mut out = Nanos::new();
    for (name, q) in list.into_iter().flatten() {
        let p = parse_quantity(&q.0)
            .map_err(|e| SpecError::invalid(field(name), format!("{:?}: {e}", q.0)))?;
        out.insert(name.clone(), p.nanos());
    }
    Ok(out)
}

fn container_field(c: &Container, list: &str, name: &str) -> String {
    format!("spec.containers[{}].resources.{list}[{name}]", c.name)
}

/// A container's limits.
pub fn container_limits(c: &Container) -> Result<Nanos, SpecError> {
    let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    parsed_list(limits, |name| container_field(c, "limits", name))
}

/// A container's requests, each missing one taken from its limit (the API server's
/// defaulting, so an undefaulted manifest sums like a defaulted one).
pub fn container_requests(c: &Container) -> Result<Nanos, SpecError> {
    let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    let mut out = parsed_list(requests, |name| container_field(c, "requests", name))?;
    for (name, v) in container_limits(c)? {
        out.entry(name).or_insert(v);
    }
    Ok(out)
}

fn overhead(spec: &PodSpec) -> Result<Nanos, SpecError> {
    parsed_list(spec.overhead.as_ref(), |name| {
        format!("spec.overhead[{name}]")
    })
}

/// The pod's requests (Go's `resource.PodRequests`), overhead included.
pub fn pod_requests(pod: &Pod) -> Result<Nanos, SpecError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Nanos::new());
    };
    let mut total = sum_containers(spec, |c, _| container_requests(c), |_| {})?;
    add(&mut total, &overhead(spec)?);
    Ok(total)
}

/// The pod's limits and whether every container declares a cpu and a memory limit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodLimits {
    /// Summed limits, overhead added to the non-zero ones (Go's `resource.PodLimits`).
    pub nanos: Nanos,
    /// Every container (an init container counting the sidecars before it) limits cpu.
    pub cpu_declared: bool,
    /// Every container (an init container counting the sidecars before it) limits memory.
    pub memory_declared: bool,
}

impl PodLimits {
    /// The pod cgroup's memory limit in bytes for a pod of `class` (Go's
    /// `ResourceConfigForPod`): Guaranteed always, Burstable when every container has one.
    pub fn cgroup_memory(&self, class: QosClass) -> Option<i64> {
        let declared = match class {
            QosClass::Guaranteed => true,
            QosClass::Burstable => self.memory_declared,
            QosClass::BestEffort => false,
        };
        declared.then(|| units(self.nanos.get("memory")))
    }
}

/// The pod's limits (Go's `resource.PodLimits` with `ResourceConfigForPod`'s `ContainerFn`).
pub fn pod_limits(pod: &Pod) -> Result<PodLimits, SpecError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(PodLimits::default());
    };
    let (mut cpu_declared, mut memory_declared) = (true, true);
    let mut nanos = sum_containers(
        spec,
        |c, _| container_limits(c),
        |list| {
            let zero = |name: &str| list.get(name).is_none_or(|v| *v == 0);
            cpu_declared &= !zero("cpu");
            memory_declared &= !zero("memory");
        },
    )?;
    for (name, v) in overhead(spec)? {
        if let Some(limit) = nanos.get_mut(&name).filter(|l| **l != 0) {
            *limit += v;
        }
    }
    Ok(PodLimits {
        nanos,
        cpu_declared,
        memory_declared,
    })
}

/// The pod's memory limit as its cgroup gets it (Go's `ResourceConfigForPod`, which the
/// emptyDir plugin reads too); None when the pod cgroup has none.
pub fn pod_memory_limit(pod: &Pod) -> Result<Option<i64>, SpecError> {
    Ok(pod_limits(pod)?.cgroup_memory(super::qos::qos_class(pod)))
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// Nano-units as whole units, rounded up (Go's `Value()`); 0 when absent.
pub fn units(nanos: Option<&i128>) -> i64 {
    saturate(nanos.map_or(0, |n| ParsedQuantity::from_nanos(*n).value_ceil()))
}

/// Nano-units as thousandths, rounded up (Go's `MilliValue()`); 0 when absent.
pub fn millis(nanos: Option<&i128>) -> i64 {
    saturate(nanos.map_or(0, |n| ParsedQuantity::from_nanos(*n).milli_ceil()))
}

/// The page size in bytes a `hugepages-<size>` resource names (Go's
/// `HugePageSizeFromResourceName`); None for other names and malformed or empty sizes.
pub fn hugepage_size_of(name: &str) -> Option<u64> {
    let size = parse_quantity(name.strip_prefix("hugepages-")?).ok()?;
    u64::try_from(size.value_ceil()).ok().filter(|s| *s > 0)
}

/// Huge page amounts in bytes by page size in bytes, those of the same size added (Go's
/// `HugePageLimits`).
pub fn hugepage_amounts(list: &Nanos) -> BTreeMap<u64, i64> {
    let mut out: BTreeMap<u64, i64> = BTreeMap::new();
    for (name, v) in list {
        if let Some(size) = hugepage_size_of(name) {
            let e = out.entry(size).or_default();
            *e = e.saturating_add(units(Some(v)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::podspec::testutil::pod;

    const MI: i128 = 1 << 20;
    const NANO: i128 = 1_000_000_000;

    #[test]
    fn init_containers_and_sidecars_as_go() {
        let p = pod("metadata: {name: p, uid: u}
spec:
  initContainers:
  - {name: i1, image: x, resources: {limits: {memory: 1Gi}}}
  - {name: s1, image: x, restartPolicy: Always, resources: {limits: {memory: 100Mi}}}
  - {name: i2, image: x, resources: {limits: {memory: 200Mi}}}
  containers:
  - {name: c1, image: x, resources: {limits: {memory: 300Mi}}}
  - {name: c2, image: x, resources: {limits: {memory: 100Mi}}}");
        // max(1Gi, 100Mi + 200Mi, 300Mi + 100Mi + 100Mi)
        let limits = pod_limits(&p).unwrap();
        assert_eq!(limits.nanos["memory"], 1024 * MI * NANO);
        assert!(limits.memory_declared);
        assert!(!limits.cpu_declared);
        assert_eq!(pod_memory_limit(&p).unwrap(), Some(1 << 30));
        // Requests default to limits.
        assert_eq!(pod_requests(&p).unwrap()["memory"], 1024 * MI * NANO);
    }

    #[test]
    fn an_init_container_counts_the_sidecars_before_it() {
        // `setup` declares no cpu limit, but the sidecar before it does: Go's ContainerFn sees
        // the sum, so the pod still counts as limiting cpu.
        let p = pod("metadata: {name: p, uid: u}
spec:
  initContainers:
  - {name: side, image: x, restartPolicy: Always, resources: {limits: {cpu: 200m, memory: 64Mi}}}
  - {name: setup, image: x, resources: {limits: {memory: 128Mi}}}
  containers:
  - {name: app, image: x, resources: {limits: {cpu: '1', memory: 256Mi}}}");
        let limits = pod_limits(&p).unwrap();
        assert!(limits.cpu_declared && limits.memory_declared);
        assert_eq!(millis(limits.nanos.get("cpu")), 1200);
        assert_eq!(units(limits.nanos.get("memory")), (320 * MI) as i64);
    }

    #[test]
    fn overhead_adds_to_requests_and_non_zero_limits() {
        let p = pod("metadata: {name: p, uid: u}
spec:
  overhead: {cpu: 100m, memory: 64Mi}
  containers:
  - {name: a, image: x, resources: {requests: {cpu: 500m}, limits: {memory: 128Mi}}}");
        let requests = pod_requests(&p).unwrap();
        assert_eq!(millis(requests.get("cpu")), 600);
        assert_eq!(units(requests.get("memory")), (192 * MI) as i64);
        let limits = pod_limits(&p).unwrap();
        assert_eq!(limits.nanos.get("cpu"), None);
        assert_eq!(units(limits.nanos.get("memory")), (192 * MI) as i64);
        // Burstable without a cpu limit: the memory limit is the pod's.
        assert_eq!(pod_memory_limit(&p).unwrap(), Some(192 << 20));
    }

    #[test]
    fn sums_round_once() {
        // Two containers of 0.5 millicores are 1 millicore; 100m bytes twice round up to 1.
        let p = pod("metadata: {name: p, uid: u}
spec:
  containers:
  - {name: a, image: x, resources: {requests: {cpu: '0.0005', memory: 100m}}}
  - {name: b, image: x, resources: {requests: {cpu: '0.0005', memory: 100m}}}");
        let requests = pod_requests(&p).unwrap();
        assert_eq!(millis(requests.get("cpu")), 1);
        assert_eq!(units(requests.get("memory")), 1);
    }

    #[test]
    fn hugepages_by_page_size() {
        let list: Nanos = [
            ("hugepages-2Mi".to_string(), 100 * MI * NANO),
            ("hugepages-2048Ki".to_string(), 2 * MI * NANO),
            ("hugepages-1Gi".to_string(), 2048 * MI * NANO),
            ("hugepages-bogus".to_string(), NANO),
            ("memory".to_string(), NANO),
        ]
        .into();
        let got = hugepage_amounts(&list);
        assert_eq!(
            got,
            [(2 << 20, 102 << 20), (1 << 30, 2 << 30)]
                .into_iter()
                .collect()
        );
        assert_eq!(hugepage_size_of("hugepages-0"), None);
        assert_eq!(hugepage_size_of("memory"), None);
    }

    #[test]
    fn bad_quantities_name_their_field() {
        let p = pod("metadata: {name: p, uid: u}
spec: {containers: [{name: a, image: x, resources: {limits: {cpu: lots}}}]}");
        let err = pod_limits(&p).unwrap_err().to_string();
        assert!(
            err.starts_with("spec.containers[a].resources.limits[cpu]"),
            "{err}"
        );
        let p = pod("metadata: {name: p, uid: u}
spec: {overhead: {memory: much}, containers: [{name: a, image: x}]}");
        let err = pod_requests(&p).unwrap_err().to_string();
        assert!(err.starts_with("spec.overhead[memory]"), "{err}");
    }
}
