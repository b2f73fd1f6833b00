//! Where the kubelet marks its pods' start timelines ([`crate::timeline`]), and the start
//! metrics observed from them: `kubelet_pod_worker_start_duration_seconds` at a new pod's first
//! pick-up by its worker, `kubelet_pod_start_sli_duration_seconds` and
//! `kubelet_pod_start_total_duration_seconds` once its status shows every container running.

use k8s_openapi::api::core::v1::PodStatus;

use super::Kubelet;
use crate::pod_actions::{ContainerAction, RunActions, SandboxAction};
use crate::timeline::{self, Containers, Phase, PodId, Start, Trigger};
use crate::types::{Pod, RuntimePod, config_seen_nanos};

impl Kubelet {
    /// A pod admitted for the first time (or a new incarnation of its name): a new start from
    /// the moment its source reported it (`kubernetes.io/config.seen`).
    pub(super) fn timeline_admitted(&self, pod: &Pod) {
        let admitted = timeline::now();
        let seen = config_seen_nanos(pod).unwrap_or(admitted);
        let (init, app) = container_names(pod);
        let containers = Containers {
            init: &init,
            app: &app,
        };
        self.timeline
            .admitted(PodId::of(pod), containers, seen, admitted);
    }

    /// Asks the runtime, off the start's path, where the RunPodSandbox of `pod`'s current start
    /// went (ferrolet-cri tells its CNI ADD and pause container times), and keeps that with
    /// the start. Other runtimes are not asked: containerd's CRI would answer with the whole
    /// sandbox spec and no timings.
    pub(crate) fn timeline_sandbox_runtime(&self, pod: &Pod, sandbox_id: &str) {
        if self.runtime_name != crate::cri::TIMING_RUNTIME {
            return;
        }
        let id = PodId::of(pod);
        let (uid, namespace, name) = (
            id.uid.to_string(),
            id.namespace.to_string(),
            id.name.to_string(),
        );
        let (cri, timeline, sandbox_id) = (
            self.cri.clone(),
            self.timeline.clone(),
            sandbox_id.to_string(),
        );
        tokio::spawn(async move {
            match cri.sandbox_start_timings(&sandbox_id).await {
                Ok(Some(timings)) => {
                    let id = PodId {
                        uid: &uid,
                        namespace: &namespace,
                        name: &name,
                    };
                    timeline.sandbox_timings(id, timings);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(sandbox = %sandbox_id, error = %e, "the sandbox's start timings")
                }
            }
        });
    }

    /// Marks `phase` (of `container`) now in `pod`'s current start.
    pub(crate) fn timeline_mark(&self, pod: &Pod, phase: Phase, container: Option<&str>) {
        self.timeline
            .mark(PodId::of(pod), phase, container, timeline::now());
    }

    /// A sync that a pod worker began at `picked_up` and that will carry out `actions`: what
    /// the runtime shows is noted (an init container's exit the PLEG's events may have
    /// missed), a restart of containers or of the sandbox begins a start of its own (once
    /// the last one finished), and the pick-up is marked; a new pod's first pick-up is Go's
    /// `kubelet_pod_worker_start_duration_seconds` (from `config.seen`).
    pub(crate) fn timeline_sync(
        &self,
        pod: &Pod,
        picked_up: i64,
        actions: &RunActions,
        runtime: &RuntimePod,
    ) {
        let id = PodId::of(pod);
        self.timeline.runtime_seen(runtime, timeline::now());
        let new_sandbox = matches!(actions.sandbox, SandboxAction::Create(_));
        let starts = actions
            .steps
            .iter()
            .any(|s| matches!(s, ContainerAction::Start { .. }));
        if new_sandbox || starts {
            let trigger = if new_sandbox {
                Trigger::SandboxRecreated
            } else {
                Trigger::Restarted
            };
            let (init, app) = container_names(pod);
            let containers = Containers {
                init: &init,
                app: &app,
            };
            self.timeline.restarted(id, trigger, containers, picked_up);
        }
        if self
            .timeline
            .mark(id, Phase::WorkerStarted, None, picked_up)
            && let Some(seen) = config_seen_nanos(pod)
        {
            crate::metrics::observe_pod_worker_start(seconds(picked_up - seen));
        }
    }

    /// The status just stored for `pod`, made from `runtime` (`all_running`: it shows every
    /// container running, [`Kubelet::all_containers_running`]): such a status is the start's
    /// status visible, which finishes it; a new pod's first is observed into the start SLI
    /// metrics.
    pub(crate) fn timeline_status(&self, pod: &Pod, all_running: bool, runtime: &RuntimePod) {
        if !all_running {
            return;
        }
        // What the status was made from counts as seen (should a relist's events have come
        // while a container's start was still being marked).
        self.timeline.runtime_seen(runtime, timeline::now());
        let at = timeline::now();
        if let Some(start) = self.timeline.status_visible(PodId::of(pod), at) {
            observe_start(pod, &start, at);
        }
    }

    /// Go's `hasPodStartedSLO`: every container status shows it running.
    pub(crate) fn all_containers_running(status: &PodStatus) -> bool {
        let statuses = status.container_statuses.as_deref().unwrap_or_default();
        !statuses.is_empty()
            && statuses
                .iter()
                .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
    }
}

/// The start SLI of a pod's first start that this kubelet carried out (it made the sandbox;
/// not a pod adopted after a restart): from its creation (an API pod's
/// `creationTimestamp`; a static pod's `config.seen`, as it has no other) to its status
/// showing every container running, without the time spent pulling images (Go's
/// `firstStartedPulling` to `lastFinishedPulling`).
fn observe_start(pod: &Pod, start: &Start, at: i64) {
    if start.trigger != Trigger::Created || !start.made_sandbox() {
        return;
    }
    let created = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| i64::try_from(t.0.as_nanosecond()).ok())
        .filter(|_| !crate::podspec::resources::is_static_pod(pod))
        .or_else(|| start.first_at());
    let Some(created) = created else {
        return;
    };
    let total = at - created;
    let pulling = start.pull_window().map_or(0, |(from, to)| to - from);
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    crate::metrics::observe_pod_start_sli(seconds(total - pulling), seconds(total), host_network);
}

/// A pod's init and app container names.
fn container_names(pod: &Pod) -> (Vec<&str>, Vec<&str>) {
    let spec = pod.spec.as_ref();
    let init = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let app = spec
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    (init, app)
}

fn seconds(nanos: i64) -> f64 {
    nanos.max(0) as f64 / 1e9
}
