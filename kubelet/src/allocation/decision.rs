//! Whether a pod's changed resources may be allocated (Go 1.33's `canResizePod`), pure: a
//! Guaranteed pod under the static CPU manager cannot be resized (its exclusive CPUs would
//! not follow); requests beyond the node's allocatable can never fit (`Infeasible`, Go's
//! "Node didn't have enough capacity" message); requests that do not fit beside the other
//! pods' allocations wait (`Deferred`, admission's message) and are judged again on later
//! syncs; the rest is allocated.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::admission::{self, NodeInfo, resources};
use crate::podspec::qos::{QosClass, qos_class};
use crate::types::Pod;

/// Go's message for a Guaranteed pod under the static CPU manager.
pub const STATIC_CPU_MANAGER: &str =
    "Resize is infeasible for Guaranteed Pods alongside CPU Manager static policy";

/// What becomes of a resize.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allocate the new resources.
    Allocate,
    /// Not now: the other pods' allocations leave no room.
    Deferred(String),
    /// Never on this node.
    Infeasible(String),
}

/// The containers whose resources a pod allocates, by name: app containers and sidecars
/// (Go's `IsResizableContainer` without the init-container gate).
pub fn resizable(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    let apps = spec.into_iter().flat_map(|s| s.containers.iter());
    let sidecars = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    apps.chain(sidecars)
}

/// What `pod`'s spec asks its resizable containers be given.
pub fn requested(pod: &Pod) -> BTreeMap<String, ResourceRequirements> {
    resizable(pod)
        .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
        .collect()
}

/// A quantity list by value (`1` and `1000m` are the same), as Go's semantic equality.
fn same_list(
    a: Option<&BTreeMap<String, Quantity>>,
    b: Option<&BTreeMap<String, Quantity>>,
) -> bool {
    let empty = BTreeMap::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    a.len() == b.len()
        && a.iter().all(|(name, q)| {
            b.get(name).is_some_and(|other| {
                let parse = |q: &Quantity| crate::manifest::quantity::parse_quantity(&q.0).ok();
                match (parse(q), parse(other)) {
                    (Some(x), Some(y)) => x.nanos() == y.nanos(),
                    _ => q.0 == other.0,
                }
            })
        })
}

/// Whether two resource requirements ask for the same (claims aside, which do not resize).
pub fn same_resources(a: &ResourceRequirements, b: &ResourceRequirements) -> bool {
    same_list(a.limits.as_ref(), b.limits.as_ref())
        && same_list(a.requests.as_ref(), b.requests.as_ref())
}

/// `pod` with `allocated` in place of its resizable containers' resources (Go's
/// `UpdatePodFromAllocation`); `None` when they are what the spec has already.
pub fn with_allocation(
    pod: &Pod,
    allocated: &BTreeMap<String, ResourceRequirements>,
) -> Option<Pod> {
    let differs = resizable(pod).any(|c| {
        allocated
            .get(&c.name)
            .is_some_and(|a| !same_resources(a, &c.resources.clone().unwrap_or_default()))
    });
    if !differs {
        return None;
    }
    let mut out = pod.clone();
    let spec = out.spec.as_mut()?;
    let sidecars = spec
        .init_containers
        .iter_mut()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    for c in spec.containers.iter_mut().chain(sidecars) {
        if let Some(a) = allocated.get(&c.name) {
            c.resources = Some(a.clone());
        }
    }
    Some(out)
}

/// What the node says to `desired` (the pod with its new resources): `others` are the other
/// admitted pods with their allocations, `static_cpu_manager` whether the CPU manager's
/// policy is `static`.
pub fn judge(desired: &Pod, node: &NodeInfo, others: &[&Pod], static_cpu_manager: bool) -> Verdict {
    if static_cpu_manager && qos_class(desired) == QosClass::Guaranteed {
        return Verdict::Infeasible(STATIC_CPU_MANAGER.into());
    }
    let allocatable = resources::allocatable(&node.allocatable);
    let requests = resources::pod_requests(desired, None);
    let get = |m: &BTreeMap<String, i128>, k: &str| m.get(k).copied().unwrap_or(0);
    let (cpu, memory) = (get(&requests, "cpu"), get(&requests, "memory"));
    let (cpu_cap, memory_cap) = (get(&allocatable, "cpu"), get(&allocatable, "memory"));
    if memory > memory_cap {
        return Verdict::Infeasible(format!(
            "Node didn't have enough capacity: memory, requested: {memory}, capacity: {memory_cap}"
        ));
    }
    if cpu > cpu_cap {
        return Verdict::Infeasible(format!(
            "Node didn't have enough capacity: cpu, requested: {cpu}, capacity: {cpu_cap}"
        ));
    }
    match admission::admit(desired, node, others) {
        Ok(_) => Verdict::Allocate,
        Err(rejection) => Verdict::Deferred(rejection.message),
    }
}
