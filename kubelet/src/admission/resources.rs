//! Resource fit, as the scheduler's `noderesources.Fits` the Go kubelet calls at admission:
//! the pod's effective requests against allocatable minus what admitted pods request, and the
//! pod count against allocatable `pods`.

use std::collections::BTreeMap;
use std::convert::Infallible;

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::manifest::quantity::parse_quantity;
use crate::podspec::pod_resources::{ContainerKind, millis, sum_containers, units};
use crate::types::Pod;

/// Amounts per resource name: millicores for `cpu`, whole units (bytes, devices) otherwise.
pub type Amounts = BTreeMap<String, i128>;

/// A resource the node lacks for the pod (Go's `InsufficientResource`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insufficient {
    /// `cpu`, `memory`, `ephemeral-storage`, `pods` or a scalar resource's name.
    pub resource: String,
    /// What the pod asks for.
    pub requested: i128,
    /// What admitted pods already have.
    pub used: i128,
    /// What the node can allocate.
    pub capacity: i128,
}

/// Whether `name` is one of the scheduler's scalar resources (extended resources, hugepages,
/// attachable volumes, prefixed native ones), the rest of the names being ignored.
pub fn is_scalar(name: &str) -> bool {
    (name.contains('/') && !name.starts_with("requests."))
        || name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
}

/// Whether `name` is an extended resource (Go's `IsExtendedResourceName`).
pub fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// Whether fit looks at `name` at all.
fn counted(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage") || is_scalar(name)
}

/// A quantity in the unit fit compares: millicores for `cpu`, whole units otherwise (Go's
/// `MilliValue()` / `Value()`, rounded up). Unparsable quantities count as zero (the API
/// server has validated them).
pub fn amount(name: &str, q: &Quantity) -> i128 {
    let Ok(p) = parse_quantity(&q.0) else {
        return 0;
    };
    if name == "cpu" {
        p.milli_ceil()
    } else {
        p.value_ceil()
    }
}

/// The node's allocatable amounts, `pods` included.
pub fn allocatable(list: &BTreeMap<String, Quantity>) -> Amounts {
    list.iter()
        .map(|(name, q)| (name.clone(), amount(name, q)))
        .collect()
}

/// Requests of one container in nano-units, only the resources fit counts, and (for app
/// containers) without extended resources the node does not have at all.
fn container_requests(c: &Container, keep: &dyn Fn(&str) -> bool) -> BTreeMap<String, i128> {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .into_iter()
        .flatten()
        .filter(|(name, _)| counted(name) && keep(name))
        .filter_map(|(name, q)| Some((name.clone(), parse_quantity(&q.0).ok()?.nanos())))
        .collect()
}

/// The pod's effective requests (Go's `resource.PodRequests`): app containers and sidecars
/// added up, or while initializing the largest init container with the sidecars started before
/// it if more, plus the pod overhead. `node` (when given) drops app containers' extended
/// resources it lacks, as Go's `removeMissingExtendedResources`.
pub fn pod_requests(pod: &Pod, node: Option<&Amounts>) -> Amounts {
    let Some(spec) = pod.spec.as_ref() else {
        return Amounts::new();
    };
    let keep_app =
        |name: &str| !is_extended(name) || node.is_none_or(|alloc| alloc.contains_key(name));
    let summed = sum_containers(
        spec,
        |c, kind| {
            let keep: &dyn Fn(&str) -> bool = match kind {
                ContainerKind::App => &keep_app,
                ContainerKind::Init | ContainerKind::Sidecar => &|_| true,
            };
            Ok::<_, Infallible>(container_requests(c, keep))
        },
        |_| {},
    );
    let Ok(mut total) = summed;
    for (name, q) in spec.overhead.iter().flatten() {
        if counted(name)
            && let Ok(p) = parse_quantity(&q.0)
        {
            *total.entry(name.clone()).or_default() += p.nanos();
        }
    }
    total
        .into_iter()
        .map(|(name, nanos)| {
            let v = if name == "cpu" {
                millis(Some(&nanos))
            } else {
                units(Some(&nanos))
            };
            (name, i128::from(v))
        })
        .collect()
}

/// What the node lacks for `pod` given the `admitted` pods, in Go's order: pods, cpu, memory,
/// ephemeral-storage, then scalar resources (by name).
pub fn fits(pod: &Pod, alloc: &Amounts, admitted: &[&Pod]) -> Vec<Insufficient> {
    let mut out = Vec::new();
    let allowed = alloc.get("pods").copied().unwrap_or(0);
    let count = admitted.len() as i128;
    if count + 1 > allowed {
        out.push(Insufficient {
            resource: "pods".into(),
            requested: 1,
            used: count,
            capacity: allowed,
        });
    }
    let want = pod_requests(pod, Some(alloc));
    if want.values().all(|v| *v == 0) {
        return out;
    }
    let mut used = Amounts::new();
    for p in admitted {
        for (k, v) in pod_requests(p, None) {
            *used.entry(k).or_default() += v;
        }
    }
    let order = ["cpu", "memory", "ephemeral-storage"];
    let scalars = want.keys().filter(|k| is_scalar(k)).map(String::as_str);
    for name in order.into_iter().chain(scalars) {
        let requested = want.get(name).copied().unwrap_or(0);
        let capacity = alloc.get(name).copied().unwrap_or(0);
        let in_use = used.get(name).copied().unwrap_or(0);
        if requested > 0 && requested > capacity - in_use {
            out.push(Insufficient {
                resource: name.to_string(),
                requested,
                used: in_use,
                capacity,
            });
        }
    }
    out
}
