//! The kubelet-owned pod conditions, as the Go kubelet's `status/generate.go` and the status
//! manager make them: PodReadyToStartContainers, Initialized, Ready, ContainersReady and
//! PodScheduled, with `lastTransitionTime` kept from the previous status while a condition's
//! status does not change.

use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::containers::is_sidecar;
use super::phase::{FAILED, SUCCEEDED};
use crate::types::Pod;

/// Condition types the kubelet owns (others in the pod's status are kept as they are).
pub const KUBELET_CONDITIONS: [&str; 7] = [
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
    "PodResizePending",
    "PodResizeInProgress",
];

/// A container list as Go's `%s` prints a `[]string`: `[a b]`.
fn go_list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

fn condition(type_: &str, ok: bool, reason: &str, message: &str) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: (!reason.is_empty()).then(|| reason.to_string()),
        message: (!message.is_empty()).then(|| message.to_string()),
        ..Default::default()
    }
}

fn find<'a>(statuses: &'a [ContainerStatus], name: &str) -> Option<&'a ContainerStatus> {
    statuses.iter().find(|s| s.name == name)
}

/// Whether an app container has run (running or terminated): the pod was initialized once.
fn any_app_container_started(pod: &Pod, statuses: &[ContainerStatus]) -> bool {
    pod.spec.iter().flat_map(|s| &s.containers).any(|c| {
        find(statuses, &c.name)
            .and_then(|s| s.state.as_ref())
            .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
    })
}

/// ContainersReady: every app container and sidecar ready.
pub(crate) fn containers_ready(
    pod: &Pod,
    statuses: &[ContainerStatus],
    phase: &str,
) -> PodCondition {
    const TYPE: &str = "ContainersReady";
    let spec = pod.spec.clone().unwrap_or_default();
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_sidecar(c));
    let mut unknown = Vec::new();
    let mut unready = Vec::new();
    for c in sidecars.chain(spec.containers.iter()) {
        match find(statuses, &c.name) {
            Some(s) if !s.ready => unready.push(c.name.as_str()),
            Some(_) => {}
            None => unknown.push(c.name.as_str()),
        }
    }
    if phase == SUCCEEDED && unknown.is_empty() {
        return condition(TYPE, false, "PodCompleted", "");
    }
    if phase == FAILED {
        return condition(TYPE, false, "PodFailed", "");
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!(
            "containers with unknown status: {}",
            go_list(&unknown)
        ));
    }
    if !unready.is_empty() {
        messages.push(format!(
            "containers with unready status: {}",
            go_list(&unready)
        ));
    }
    if messages.is_empty() {
        condition(TYPE, true, "", "")
    } else {
        condition(TYPE, false, "ContainersNotReady", &messages.join(", "))
    }
}

/// Ready: as ContainersReady, then the readiness gates.
pub(crate) fn ready(
    pod: &Pod,
    conditions: &[PodCondition],
    containers: &PodCondition,
) -> PodCondition {
    const TYPE: &str = "Ready";
    if containers.status != "True" {
        return PodCondition {
            type_: TYPE.into(),
            ..containers.clone()
        };
    }
    let mut messages = Vec::new();
    for gate in pod
        .spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
    {
        let t = &gate.condition_type;
        match conditions.iter().find(|c| &c.type_ == t) {
            None => messages.push(format!(
                "corresponding condition of pod readiness gate \"{t}\" does not exist."
            )),
            Some(c) if c.status != "True" => messages.push(format!(
                "the status of pod readiness gate \"{t}\" is not \"True\", but {}",
                c.status
            )),
            Some(_) => {}
        }
    }
    if messages.is_empty() {
        condition(TYPE, true, "", "")
    } else {
        condition(TYPE, false, "ReadinessGatesNotReady", &messages.join(", "))
    }
}

fn init_done(c: &Container, s: &ContainerStatus) -> bool {
    if is_sidecar(c) {
        s.started == Some(true)
    } else {
        s.ready
    }
}

/// Initialized: every init container succeeded (sidecars: started).
pub(crate) fn initialized(pod: &Pod, statuses: &[ContainerStatus], phase: &str) -> PodCondition {
    const TYPE: &str = "Initialized";
    let mut unknown = Vec::new();
    let mut incomplete = Vec::new();
    for c in pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
    {
        match find(statuses, &c.name) {
            None => unknown.push(c.name.as_str()),
            Some(s) if !init_done(c, s) => incomplete.push(c.name.as_str()),
            Some(_) => {}
        }
    }
    if phase == SUCCEEDED && unknown.is_empty() {
        return condition(TYPE, true, "PodCompleted", "");
    }
    if any_app_container_started(pod, statuses) {
        return condition(TYPE, true, "", "");
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!(
            "containers with unknown status: {}",
            go_list(&unknown)
        ));
    }
    if !incomplete.is_empty() {
        messages.push(format!(
            "containers with incomplete status: {}",
            go_list(&incomplete)
        ));
    }
    if messages.is_empty() {
        condition(TYPE, true, "", "")
    } else {
        condition(
            TYPE,
            false,
            "ContainersNotInitialized",
            &messages.join(", "),
        )
    }
}

/// PodReadyToStartContainers: the pod has its one ready sandbox with networking.
pub(crate) fn ready_to_start(sandbox_ready: bool) -> PodCondition {
    condition("PodReadyToStartContainers", sandbox_ready, "", "")
}

/// PodScheduled: always True on the node that runs the pod.
pub(crate) fn scheduled() -> PodCondition {
    condition("PodScheduled", true, "", "")
}

/// Sets each condition's `lastTransitionTime`: the previous one's while the status is the
/// same, `now` when it changed or is new.
pub(crate) fn set_transition_times(
    conditions: &mut [PodCondition],
    previous: Option<&PodStatus>,
    now: &Time,
) {
    let old = previous
        .and_then(|p| p.conditions.as_deref())
        .unwrap_or_default();
    for c in conditions.iter_mut() {
        if !KUBELET_CONDITIONS.contains(&c.type_.as_str()) {
            continue;
        }
        let kept = old
            .iter()
            .find(|o| o.type_ == c.type_ && o.status == c.status)
            .and_then(|o| o.last_transition_time.clone());
        c.last_transition_time = Some(kept.unwrap_or_else(|| now.clone()));
    }
}
