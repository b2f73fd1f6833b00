//! The API `PodStatus` of a pod from the runtime's view and what the sync loop saw, as the Go
//! kubelet's `generateAPIPodStatus` plus its status manager: phase, conditions, container
//! statuses, IPs, start time and QoS class.
//!
//! Parts: [`containers`] (init and app container statuses), [`phase`] (Pending, Running,
//! Succeeded, Failed), [`conditions`] (the kubelet's pod conditions and their transition
//! times), [`qos`] (the QoS class), [`killed`] (why the kubelet killed container instances),
//! [`sink`] (where statuses go: the API's status manager, or nowhere).

pub mod conditions;
pub mod containers;
pub mod killed;
pub mod phase;
pub mod qos;
pub mod sink;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ferrolet_proto::cri::ContainerState as CriState;
use k8s_openapi::api::core::v1::{HostIP, PodIP, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::types::{Pod, RuntimePod};
use containers::Kind;

/// Why a container is not running, as the sync loop last saw it (ContainerCreating,
/// PodInitializing, CrashLoopBackOff, ErrImagePull, ImagePullBackOff,
/// CreateContainerConfigError, CreateContainerError, RunContainerError, ErrImageNeverPull,
/// InvalidImageName), with a message.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Waiting {
    /// The reason (one word, CamelCase).
    pub reason: String,
    /// What went wrong, for people.
    pub message: String,
}

/// Inputs of a pod status besides the runtime's view.
#[derive(Clone, Debug)]
pub struct StatusContext<'a> {
    /// The node's IP (`hostIP`, and `podIP` of host-network pods); empty when unknown.
    pub host_ip: &'a str,
    /// Waiting reasons per container name, from the last sync.
    pub waiting: &'a BTreeMap<String, Waiting>,
    /// Readiness per container name (from readiness probes); a running, started container
    /// not in it is ready.
    pub ready: &'a BTreeMap<String, bool>,
    /// Whether each container has started (its startup probe succeeded); a running
    /// container not in it has.
    pub started: &'a BTreeMap<String, bool>,
    /// Why the kubelet killed container instances, by container id: the message their
    /// terminated state shows when the runtime gives none.
    pub killed: &'a BTreeMap<String, String>,
    /// The container ids the OOM watcher saw the kernel OOM-kill: an instance the runtime
    /// reports as exited `Error` with 137 reads `OOMKilled`.
    pub oom_killed: &'a BTreeSet<String>,
    /// When the kubelet first saw the pod (used when the previous status has none).
    pub start_time: Option<Time>,
    /// The status computed last time, for transition times, restart counts and terminal
    /// phases.
    pub previous: Option<&'a PodStatus>,
    /// The runtime's name (`containerd`, `ferrolet`), the scheme of container ids.
    pub runtime_name: &'a str,
}

/// The final status of a pod whose containers were all stopped because it is being deleted
/// (Go's `getPhase` with `podIsTerminal`): containers still shown running count as failed,
/// the phase becomes Succeeded when every container exited 0 and Failed otherwise, and the
/// pod is no longer ready.
pub fn terminated_status(last: &PodStatus) -> PodStatus {
    let mut status = last.clone();
    if status.phase.as_deref().is_some_and(phase::is_terminal) {
        return status;
    }
    let statuses = status.container_statuses.as_deref().unwrap_or_default();
    let all_zero = !statuses.is_empty()
        && statuses.iter().all(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0)
        });
    status.phase = Some(
        if all_zero {
            phase::SUCCEEDED
        } else {
            phase::FAILED
        }
        .to_string(),
    );
    for c in status.conditions.iter_mut().flatten() {
        if matches!(c.type_.as_str(), "Ready" | "ContainersReady") && c.status != "False" {
            c.status = "False".into();
            c.reason = Some("PodCompleted".into());
            c.last_transition_time = Some(now());
        }
    }
    for c in status.container_statuses.iter_mut().flatten() {
        c.ready = false;
    }
    status
}

/// The current time as an API time.
pub fn now() -> Time {
    Time(jiff::Timestamp::now())
}

/// The API PodStatus of `pod`, with transition times stamped now. See [`pod_status_at`].
pub fn pod_status(pod: &Pod, runtime: &RuntimePod, ctx: &StatusContext<'_>) -> PodStatus {
    pod_status_at(pod, runtime, ctx, now())
}

/// The API PodStatus: phase, conditions (PodReadyToStartContainers, Initialized, Ready,
/// ContainersReady, PodScheduled), init, app and ephemeral container statuses, pod and host
/// IPs, start time and QoS class; `now` stamps conditions whose status changed.
pub fn pod_status_at(
    pod: &Pod,
    runtime: &RuntimePod,
    ctx: &StatusContext<'_>,
    now: Time,
) -> PodStatus {
    let spec = pod.spec.clone().unwrap_or_default();
    let previous = ctx.previous;
    let prev_app = previous
        .and_then(|p| p.container_statuses.as_deref())
        .unwrap_or_default();
    let prev_init = previous
        .and_then(|p| p.init_container_statuses.as_deref())
        .unwrap_or_default();
    let init_specs = spec.init_containers.clone().unwrap_or_default();

    let app =
        containers::container_statuses(pod, &spec.containers, Kind::App, runtime, prev_app, ctx);
    let init =
        containers::container_statuses(pod, &init_specs, Kind::Init, runtime, prev_init, ctx);
    let prev_ephemeral = previous
        .and_then(|p| p.ephemeral_container_statuses.as_deref())
        .unwrap_or_default();
    let ephemeral_specs = crate::podspec::ephemeral::containers(&spec);
    let ephemeral = containers::container_statuses(
        pod,
        &ephemeral_specs,
        Kind::Ephemeral,
        runtime,
        prev_ephemeral,
        ctx,
    );

    let all: Vec<_> = app.iter().chain(init.iter()).cloned().collect();
    let app_running = spec.containers.iter().any(|c| {
        containers::newest(runtime, &c.name)
            .is_some_and(|rc| rc.state == CriState::ContainerRunning)
    });
    let mut phase = phase::phase(pod, &all, app_running).to_string();
    let mut reason = None;
    let mut message = None;
    if let Some(prev) = previous {
        let prev_phase = prev.phase.as_deref().unwrap_or_default();
        // A pod never leaves a terminal phase.
        if !phase::is_terminal(&phase) && phase::is_terminal(prev_phase) {
            phase = prev_phase.to_string();
        }
        if phase == prev_phase {
            reason = prev.reason.clone();
            message = prev.message.clone();
        }
    }

    // Conditions: those others own first, then the kubelet's in Go's order.
    let init_then_app: Vec<_> = init.iter().chain(app.iter()).cloned().collect();
    let mut conds: Vec<_> = pod
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| !conditions::KUBELET_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    conds.push(conditions::ready_to_start(sandbox_ready(pod, runtime)));
    conds.push(conditions::initialized(pod, &init_then_app, &phase));
    let containers_ready = conditions::containers_ready(pod, &init_then_app, &phase);
    conds.push(conditions::ready(pod, &conds, &containers_ready));
    conds.push(containers_ready);
    conds.push(conditions::scheduled());
    conditions::set_transition_times(&mut conds, previous, &now);

    let (pod_ip, pod_ips) = pod_ips(pod, runtime, ctx);
    let start_time = previous
        .and_then(|p| p.start_time.clone())
        .or_else(|| ctx.start_time.clone())
        .or(Some(now));

    PodStatus {
        phase: Some(phase),
        reason,
        message,
        conditions: Some(conds),
        container_statuses: Some(app),
        init_container_statuses: (!init_specs.is_empty()).then_some(init),
        ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
        host_ip: (!ctx.host_ip.is_empty()).then(|| ctx.host_ip.to_string()),
        host_ips: (!ctx.host_ip.is_empty()).then(|| {
            vec![HostIP {
                ip: ctx.host_ip.to_string(),
            }]
        }),
        pod_ip,
        pod_ips,
        start_time,
        qos_class: Some(qos::qos_class(pod).to_string()),
        ..Default::default()
    }
}

fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// Whether the pod has exactly one ready sandbox, the newest, with its network set up (Go's
/// "no new sandbox needed").
fn sandbox_ready(pod: &Pod, runtime: &RuntimePod) -> bool {
    let Some(newest) = runtime.sandboxes.iter().max_by_key(|s| s.created_at) else {
        return false;
    };
    let ready = runtime.sandboxes.iter().filter(|s| s.ready).count();
    newest.ready && ready == 1 && (host_network(pod) || !newest.ip.is_empty())
}

/// `podIP` and `podIPs`: the newest sandbox's addresses, one per family with the node's family
/// first; the node's for host-network pods; the previous status's once the sandbox is gone.
fn pod_ips(
    pod: &Pod,
    runtime: &RuntimePod,
    ctx: &StatusContext<'_>,
) -> (Option<String>, Option<Vec<PodIP>>) {
    let mut raw: Vec<String> = Vec::new();
    if let Some(sb) = runtime.sandboxes.iter().max_by_key(|s| s.created_at) {
        raw.push(sb.ip.clone());
        raw.extend(sb.additional_ips.iter().cloned());
    }
    let mut ips = sort_ips(&raw, ctx.host_ip);
    if ips.is_empty() && host_network(pod) && !ctx.host_ip.is_empty() {
        ips.push(ctx.host_ip.to_string());
    }
    if ips.is_empty() && !runtime.sandboxes.iter().any(|s| s.ready) {
        // An exited pod keeps the address it had (Go's PLEG keeps the cached one).
        if let Some(prev) = ctx.previous {
            return (prev.pod_ip.clone(), prev.pod_ips.clone());
        }
    }
    if ips.is_empty() {
        return (None, None);
    }
    let list = ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect();
    (ips.first().cloned(), Some(list))
}

/// At most two addresses: the first of the node's family, then the first of the other family
/// (re-printed, so odd spellings from CRI come out canonical).
fn sort_ips(raw: &[String], host_ip: &str) -> Vec<String> {
    let node_v6 = host_ip.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv6());
    let parsed: Vec<IpAddr> = raw.iter().filter_map(|s| s.trim().parse().ok()).collect();
    let mut out = Vec::new();
    for want_v6 in [node_v6, !node_v6] {
        if let Some(ip) = parsed.iter().find(|ip| ip.is_ipv6() == want_v6) {
            out.push(ip.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests;
