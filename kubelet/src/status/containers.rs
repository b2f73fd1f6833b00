//! Container statuses from the runtime's view, as the Go kubelet's
//! `convertToAPIContainerStatuses`: the newest instance of a container gives `state`, the one
//! before it `lastState`; containers without an instance wait (`ContainerCreating`, or
//! `PodInitializing` when the pod has init containers); the sync loop's waiting reasons
//! (`CrashLoopBackOff`, `ErrImagePull`, ...) replace the state of containers that are to be
//! (re)started; what the previous status knew survives when the runtime forgot it.
//! Ephemeral containers convert as app containers (sorted by name) that are never restarted:
//! an instance that ended stays terminated, and they are neither started nor ready.

use std::collections::BTreeMap;

use ferrolet_proto::cri::ContainerState as CriState;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::StatusContext;
use crate::types::{Pod, RuntimeContainer, RuntimePod, labels};

/// Default waiting reason of a container not created yet.
pub const CONTAINER_CREATING: &str = "ContainerCreating";
/// Default waiting reason when the pod has init containers.
pub const POD_INITIALIZING: &str = "PodInitializing";
/// Reason of a container the runtime lost track of.
pub const STATUS_UNKNOWN: &str = "ContainerStatusUnknown";

/// Which of the pod's container lists is being converted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `spec.initContainers`.
    Init,
    /// `spec.containers`.
    App,
    /// `spec.ephemeralContainers` (as containers): never restarted nor probed.
    Ephemeral,
}

/// Whether an init container is a sidecar (`restartPolicy: Always`).
pub(crate) fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Nanoseconds since the epoch as an API time (`None` for unset).
pub(crate) fn time_from_nanos(ns: i64) -> Option<Time> {
    (ns > 0).then(|| Time(jiff::Timestamp::from_nanosecond(i128::from(ns)).unwrap_or_default()))
}

/// The runtime's instances of a container, newest first.
fn instances<'a>(runtime: &'a RuntimePod, name: &str) -> Vec<&'a RuntimeContainer> {
    let mut found: Vec<&RuntimeContainer> = runtime
        .containers
        .iter()
        .filter(|c| c.name == name)
        .collect();
    found.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    found
}

/// The newest instance of a container.
pub(crate) fn newest<'a>(runtime: &'a RuntimePod, name: &str) -> Option<&'a RuntimeContainer> {
    runtime
        .containers
        .iter()
        .filter(|c| c.name == name)
        .max_by_key(|c| c.created_at)
}

/// The restart count the kubelet recorded on the container (annotation, else the attempt).
fn restart_count(rc: &RuntimeContainer) -> i32 {
    rc.annotations
        .get(labels::RESTART_COUNT)
        .and_then(|v| v.parse::<i32>().ok())
        .unwrap_or(i32::try_from(rc.attempt).unwrap_or(i32::MAX))
}

/// Whether the runtime's image name is really an image id (`sha256:...`), which the API
/// status should not show in place of the image the user asked for.
fn looks_like_image_id(image: &str) -> bool {
    let hex = image.strip_prefix("sha256:").unwrap_or(image);
    image.is_empty() || (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn waiting(reason: &str, message: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: (!reason.is_empty()).then(|| reason.to_string()),
            message: (!message.is_empty()).then(|| message.to_string()),
        }),
        ..Default::default()
    }
}

fn terminated_unknown(message: &str) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 137,
            reason: Some(STATUS_UNKNOWN.into()),
            message: Some(message.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Exit code of a process killed with SIGKILL, as the kernel's OOM killer kills.
const SIGKILL_EXIT: i32 = 128 + 9;

/// What the kubelet knows of an instance's end besides the runtime: why it killed it, and
/// whether the kernel OOM-killed it.
#[derive(Clone, Copy, Default)]
struct Ending<'a> {
    killed: Option<&'a str>,
    oom_killed: bool,
}

/// One runtime instance as an API status (Go's `convertContainerStatus`).
fn convert(
    rc: &RuntimeContainer,
    spec: &Container,
    old: Option<&ContainerStatus>,
    runtime_name: &str,
    ending: Ending<'_>,
) -> ContainerStatus {
    let killed = ending.killed;
    let cid = format!("{runtime_name}://{}", rc.id);
    let image = if looks_like_image_id(&rc.image) {
        spec.image.clone().unwrap_or_default()
    } else {
        rc.image.clone()
    };
    let mut status = ContainerStatus {
        name: rc.name.clone(),
        restart_count: restart_count(rc),
        image,
        image_id: rc.image_ref.clone(),
        container_id: Some(cid.clone()),
        last_state: Some(ContainerState::default()),
        ..Default::default()
    };
    let state = match rc.state {
        CriState::ContainerRunning => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: time_from_nanos(rc.started_at),
            }),
            ..Default::default()
        },
        CriState::ContainerCreated => waiting("", ""),
        CriState::ContainerExited => {
            // Runtimes set Completed/Error/OOMKilled; fill the first two in for one that does
            // not. A kill the runtime missed (a pod-level or a node-wide OOM: its own OOM
            // notice may name only the cgroup that ran out) but the OOM watcher attributed
            // to this instance is what it was.
            let by_oom = ending.oom_killed
                && rc.exit_code == SIGKILL_EXIT
                && (rc.reason.is_empty() || rc.reason == "Error");
            let reason = if by_oom {
                "OOMKilled".into()
            } else if !rc.reason.is_empty() {
                rc.reason.clone()
            } else if rc.exit_code == 0 {
                "Completed".into()
            } else {
                "Error".into()
            };
            // The runtime's message (the container's termination message) first; else why
            // the kubelet killed it.
            let message = Some(rc.message.as_str())
                .filter(|m| !m.is_empty())
                .or(killed.filter(|m| !m.is_empty()))
                .map(str::to_string);
            ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: rc.exit_code,
                    reason: Some(reason),
                    message,
                    started_at: time_from_nanos(rc.started_at),
                    finished_at: time_from_nanos(rc.finished_at),
                    container_id: Some(cid),
                    signal: None,
                }),
                ..Default::default()
            }
        }
        CriState::ContainerUnknown => {
            match old.filter(|o| o.state.as_ref().is_some_and(|s| s.running.is_some())) {
                // It ran and the runtime lost it: it did not "never run", it ended.
                Some(o) => {
                    status.restart_count = o.restart_count + 1;
                    terminated_unknown(
                        "The container could not be located when the pod was terminated",
                    )
                }
                None => waiting("", ""),
            }
        }
    };
    status.state = Some(state);
    status
}

/// Whether the sync loop would (re)start the container (Go's `ShouldContainerBeRestarted`).
pub(crate) fn should_restart(c: &Container, kind: Kind, pod: &Pod, runtime: &RuntimePod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(rc) = newest(runtime, &c.name) else {
        return true;
    };
    if kind == Kind::Ephemeral {
        return false;
    }
    match rc.state {
        CriState::ContainerRunning => false,
        CriState::ContainerUnknown | CriState::ContainerCreated => true,
        CriState::ContainerExited => {
            if kind == Kind::Init && is_sidecar(c) {
                return true;
            }
            let policy = pod
                .spec
                .as_ref()
                .and_then(|s| s.restart_policy.as_deref())
                .unwrap_or("Always");
            match policy {
                "Never" => false,
                "OnFailure" => rc.exit_code != 0,
                _ => true,
            }
        }
    }
}

/// Whether any app container has an instance (created, running or exited).
fn any_app_container_created(pod: &Pod, runtime: &RuntimePod) -> bool {
    pod.spec.iter().flat_map(|s| &s.containers).any(|c| {
        newest(runtime, &c.name).is_some_and(|rc| {
            matches!(
                rc.state,
                CriState::ContainerCreated | CriState::ContainerRunning | CriState::ContainerExited
            )
        })
    })
}

fn is_default_waiting(s: &ContainerStatus, default_reason: &str) -> bool {
    s.state
        .as_ref()
        .and_then(|st| st.waiting.as_ref())
        .is_some_and(|w| w.reason.as_deref() == Some(default_reason))
}

fn last_terminated(s: &ContainerStatus) -> bool {
    s.last_state
        .as_ref()
        .is_some_and(|l| l.terminated.is_some())
}

fn state_terminated(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.terminated.is_some())
}

fn state_running(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

/// The statuses of one container list (init or app), in spec order for init containers and
/// by name for app containers, as the Go kubelet sorts them.
pub(crate) fn container_statuses(
    pod: &Pod,
    containers: &[Container],
    kind: Kind,
    runtime: &RuntimePod,
    previous: &[ContainerStatus],
    ctx: &StatusContext<'_>,
) -> Vec<ContainerStatus> {
    let has_init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|i| !i.is_empty());
    let default_reason = if has_init {
        POD_INITIALIZING
    } else {
        CONTAINER_CREATING
    };
    let old: BTreeMap<&str, &ContainerStatus> =
        previous.iter().map(|s| (s.name.as_str(), s)).collect();

    // Everyone starts out waiting, keeping what the previous status knew.
    let mut statuses: BTreeMap<String, ContainerStatus> = BTreeMap::new();
    for c in containers {
        let mut status = ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            state: Some(waiting(default_reason, "")),
            last_state: Some(ContainerState::default()),
            ..Default::default()
        };
        if let Some(o) = old.get(c.name.as_str()) {
            if state_terminated(o) {
                status = (*o).clone();
            } else {
                status.restart_count = o.restart_count;
                status.last_state = o
                    .last_state
                    .clone()
                    .or_else(|| Some(ContainerState::default()));
            }
        }
        statuses.insert(c.name.clone(), status);
    }

    // A container that was running and vanished from the runtime ended, even if we cannot
    // say how; waiting would wrongly send the pod back to Pending.
    for c in containers {
        if newest(runtime, &c.name).is_some() {
            continue;
        }
        let Some(o) = old.get(c.name.as_str()) else {
            continue;
        };
        if state_terminated(o) || !state_running(o) {
            continue;
        }
        let Some(status) = statuses.get_mut(&c.name) else {
            continue;
        };
        if !is_default_waiting(status, default_reason) || last_terminated(status) {
            continue;
        }
        status.last_state = Some(terminated_unknown(
            "The container could not be located when the pod was deleted.  The container used to be Running",
        ));
        if pod.metadata.deletion_timestamp.is_none() {
            status.restart_count += 1;
        }
    }

    // The newest instance is the state, the one before it the last state.
    for c in containers {
        let found = instances(runtime, &c.name);
        let mut found = found.into_iter();
        let ending = |rc: &RuntimeContainer| Ending {
            killed: ctx.killed.get(&rc.id).map(String::as_str),
            oom_killed: ctx.oom_killed.contains(&rc.id),
        };
        if let Some(rc) = found.next() {
            let old = old.get(c.name.as_str()).copied();
            let status = convert(rc, c, old, ctx.runtime_name, ending(rc));
            statuses.insert(c.name.clone(), status);
        }
        if let Some(rc) = found.next() {
            let before = convert(rc, c, None, ctx.runtime_name, ending(rc));
            if let Some(status) = statuses.get_mut(&c.name) {
                status.last_state = before.state;
            }
        }
    }

    // Containers the sync loop is about to (re)start show why they are not running yet.
    for c in containers {
        let Some(status) = statuses.get_mut(&c.name) else {
            continue;
        };
        if kind == Kind::Init {
            let rc = newest(runtime, &c.name);
            if rc.is_some_and(|rc| rc.state == CriState::ContainerExited && rc.exit_code == 0) {
                continue;
            }
            // The runtime forgot a regular init container but app containers exist: it
            // must have succeeded.
            let waiting_now = status.state.as_ref().is_some_and(|s| s.waiting.is_some());
            if rc.is_none()
                && !is_sidecar(c)
                && waiting_now
                && any_app_container_created(pod, runtime)
            {
                status.state = Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 0,
                        reason: Some("Completed".into()),
                        message: Some(
                            "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally".into(),
                        ),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
                continue;
            }
        }
        if !should_restart(c, kind, pod, runtime) {
            continue;
        }
        let Some(w) = ctx.waiting.get(&c.name) else {
            continue;
        };
        if state_terminated(status) {
            status.last_state = status.state.clone();
        }
        status.state = Some(waiting(&w.reason, &w.message));
    }

    // Started and ready, as the probe manager's `UpdatePodStatus`: a running container has
    // started unless the caller says its startup probe has not passed; a started one is
    // ready unless the caller says its readiness probe has not; a regular init container is
    // ready once it exited 0. Go's probe manager leaves ephemeral containers out: never
    // ready, `started` unset.
    for c in containers {
        if kind == Kind::Ephemeral {
            break;
        }
        let Some(status) = statuses.get_mut(&c.name) else {
            continue;
        };
        let started = state_running(status) && ctx.started.get(&c.name).copied().unwrap_or(true);
        status.started = Some(started);
        status.ready = if kind == Kind::Init && !is_sidecar(c) {
            status
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0)
        } else {
            started && ctx.ready.get(&c.name).copied().unwrap_or(true)
        };
    }

    match kind {
        Kind::Init => containers
            .iter()
            .filter_map(|c| statuses.remove(&c.name))
            .collect(),
        // A BTreeMap iterates in name order already.
        Kind::App | Kind::Ephemeral => statuses.into_values().collect(),
    }
}
