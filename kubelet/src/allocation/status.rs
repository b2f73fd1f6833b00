//! How a pod's status shows its resources and resize (pure): each container's
//! `allocatedResources` (its allocated requests) and, while it runs, `resources` (what the
//! runtime reports applied: Go's `convertContainerStatusResources`, CPU from shares and
//! quota, the memory limit from the runtime, the memory request from the allocation); the
//! resize's state both as Kubernetes 1.28's alpha `status.resize` and as 1.33's conditions
//! (`PodResizePending` with reason `Deferred`/`Infeasible`, `PodResizeInProgress`, reason
//! `Error` after a failed attempt), all cleared once the resize is done.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::actuation::Applied;
use super::checkpoint::{PodAllocation, ResizeState};
use crate::types::RuntimePod;

/// Go's `PodResizePending` condition type.
pub const RESIZE_PENDING: &str = "PodResizePending";
/// Go's `PodResizeInProgress` condition type.
pub const RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";

/// Millicores as Go's `NewMilliQuantity(…, DecimalSI)` prints them.
pub fn cpu_quantity(milli: i64) -> Quantity {
    Quantity(if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    })
}

/// Bytes as Go's `NewQuantity(…, BinarySI)` prints them: the largest binary suffix that
/// divides exactly, else the plain number.
pub fn memory_quantity(bytes: i64) -> Quantity {
    const SUFFIXES: [&str; 6] = ["Ei", "Pi", "Ti", "Gi", "Mi", "Ki"];
    for (i, suffix) in SUFFIXES.iter().enumerate() {
        let unit = 1_i64 << (10 * (SUFFIXES.len() - i));
        if bytes != 0 && bytes % unit == 0 {
            return Quantity(format!("{}{suffix}", bytes / unit));
        }
    }
    Quantity(bytes.to_string())
}

/// A running container's `resources`: `applied` as the runtime reports it, for the
/// resources its allocation names (limits when it has limits, requests when requests).
pub fn running_resources(
    allocated: &ResourceRequirements,
    applied: &Applied,
) -> ResourceRequirements {
    let limits = allocated.limits.as_ref().map(|alloc| {
        let mut out = BTreeMap::new();
        if let Some(cpu) = applied.cpu_limit_milli() {
            out.insert("cpu".to_string(), cpu_quantity(cpu));
        }
        if applied.memory_limit > 0 {
            out.insert("memory".to_string(), memory_quantity(applied.memory_limit));
        }
        copy_others(alloc, &mut out);
        out
    });
    let requests = allocated.requests.as_ref().map(|alloc| {
        let mut out = BTreeMap::new();
        if let Some(cpu) = applied.cpu_request_milli()
            && alloc.contains_key("cpu")
        {
            out.insert("cpu".to_string(), cpu_quantity(cpu));
        }
        if let Some(memory) = alloc.get("memory") {
            out.insert("memory".to_string(), memory.clone());
        }
        copy_others(alloc, &mut out);
        out
    });
    ResourceRequirements {
        limits,
        requests,
        ..Default::default()
    }
}

/// Resources other than CPU and memory are what was allocated (they never resize).
fn copy_others(alloc: &BTreeMap<String, Quantity>, out: &mut BTreeMap<String, Quantity>) {
    for (name, q) in alloc {
        if name != "cpu" && name != "memory" {
            out.insert(name.clone(), q.clone());
        }
    }
}

/// Lays the allocation and the runtime's resources onto `status` (see the module doc).
/// `previous` is the last status, whose conditions keep their transition times.
pub fn decorate(
    status: &mut PodStatus,
    allocation: &PodAllocation,
    runtime: &RuntimePod,
    previous: Option<&PodStatus>,
) {
    let lists = [
        status.container_statuses.as_mut(),
        status.init_container_statuses.as_mut(),
    ];
    for cs in lists.into_iter().flatten().flat_map(|l| l.iter_mut()) {
        let Some(allocated) = allocation.containers.get(&cs.name) else {
            continue;
        };
        decorate_container(cs, allocated, runtime);
    }
    let (resize, condition) = match &allocation.resize {
        None => (None, None),
        Some(ResizeState::InProgress { error }) => (
            Some("InProgress"),
            Some(condition(
                RESIZE_IN_PROGRESS,
                error.as_ref().map(|_| "Error"),
                error.as_deref(),
            )),
        ),
        Some(ResizeState::Deferred { message }) => (
            Some("Deferred"),
            Some(condition(RESIZE_PENDING, Some("Deferred"), Some(message))),
        ),
        Some(ResizeState::Infeasible { message }) => (
            Some("Infeasible"),
            Some(condition(RESIZE_PENDING, Some("Infeasible"), Some(message))),
        ),
    };
    status.resize = resize.map(str::to_string);
    let mut conditions = status.conditions.take().unwrap_or_default();
    conditions.retain(|c| c.type_ != RESIZE_PENDING && c.type_ != RESIZE_IN_PROGRESS);
    conditions.extend(condition.map(|mut c| {
        let before = previous
            .and_then(|p| p.conditions.as_ref())
            .into_iter()
            .flatten()
            .find(|o| o.type_ == c.type_ && o.status == c.status && o.reason == c.reason);
        if let Some(before) = before {
            c.last_transition_time = before.last_transition_time.clone();
        }
        c
    }));
    status.conditions = (!conditions.is_empty()).then_some(conditions);
}

fn decorate_container(
    cs: &mut ContainerStatus,
    allocated: &ResourceRequirements,
    runtime: &RuntimePod,
) {
    cs.allocated_resources = allocated.requests.clone();
    let running = cs.state.as_ref().is_some_and(|s| s.running.is_some());
    let id = cs
        .container_id
        .as_deref()
        .and_then(|id| id.split_once("://").map(|(_, id)| id));
    let applied = runtime
        .containers
        .iter()
        .find(|c| Some(c.id.as_str()) == id)
        .and_then(|c| Applied::reported(c.resources.as_ref()));
    cs.resources = match (running, applied) {
        (true, Some(applied)) => Some(running_resources(allocated, &applied)),
        // A runtime that reports nothing: what was allocated, as Go's fallback.
        (true, None) => Some(allocated.clone()),
        (false, _) => None,
    };
}

fn condition(kind: &str, reason: Option<&str>, message: Option<&str>) -> PodCondition {
    PodCondition {
        type_: kind.to_string(),
        status: "True".to_string(),
        reason: reason.map(str::to_string),
        message: message.map(str::to_string),
        last_probe_time: None,
        last_transition_time: Some(crate::status::now()),
        observed_generation: None,
    }
}
