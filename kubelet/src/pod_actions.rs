//! What one sync of a pod does, decided without doing any of it (the Go kubelet's
//! `computePodActions`): from the pod's spec, the runtime's view of it, the crash-loop
//! back-off, the probe results that kill or hold containers back, and the time.
//!
//! The rules: a pod that is done for good (`Never` with every container exited, `OnFailure`
//! with every container exited 0, or `Never` with a failed init container) only loses its
//! sandbox. Otherwise the newest sandbox is used when ready, else a new one is made (and
//! whatever ran in the old one killed), and a new sandbox starts every container afresh. Init
//! containers run strictly in order, each to success before the next; sidecars (init
//! containers with `restartPolicy: Always`) start and keep running, and one with a startup
//! probe holds the next back until it has started. Then the app containers: exited ones
//! restart per `restartPolicy` under the crash-loop back-off, running ones whose spec hash
//! changed are replaced, and running ones whose liveness or startup probe failed are killed
//! and restarted per `restartPolicy`. Ephemeral containers (`kubectl debug`) start once in
//! the kept sandbox, before the init containers (Go: so that a failing init container does
//! not hold a debugger back), and are never restarted nor probed.
//!
//! [`compute_pod_actions`] returns the steps in the order `sync_pod` must carry them out, so
//! the CRI calls come in the same order as a single pass deciding as it goes.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use ferrolet_proto::cri::ContainerState;
use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::backoff::Backoff;
use crate::podspec;
use crate::prober::{ProbeKind, ProbeResult};
use crate::status::Waiting;
use crate::types::{RuntimeContainer, RuntimePod};

#[cfg(test)]
mod tests;

/// What the probes said of running container instances, by container id: the results a sync
/// acts on (liveness and startup).
#[derive(Clone, Debug, Default)]
pub struct ProbeVerdicts {
    results: HashMap<(ProbeKind, String), ProbeResult>,
}

impl ProbeVerdicts {
    /// Notes `kind`'s result for the container instance `id`.
    pub fn set(&mut self, kind: ProbeKind, id: &str, result: ProbeResult) {
        self.results.insert((kind, id.to_string()), result);
    }

    fn get(&self, kind: ProbeKind, id: &str) -> Option<ProbeResult> {
        self.results.get(&(kind, id.to_string())).copied()
    }
}

/// Everything one sync decides from.
#[derive(Clone, Copy)]
pub struct PodInputs<'a> {
    /// The pod's UID (back-off keys, messages).
    pub uid: &'a str,
    /// The pod's spec.
    pub spec: &'a PodSpec,
    /// The pod's termination grace period in seconds.
    pub grace: i64,
    /// What the runtime has of the pod.
    pub runtime: &'a RuntimePod,
    /// The crash-loop back-off (keys from [`backoff_key`]); only read.
    pub backoff: &'a Backoff,
    /// Liveness and startup results of the running instances.
    pub probes: &'a ProbeVerdicts,
    /// With in-place resize (the `InPlacePodVerticalScaling` gate), the running instances
    /// whose resize policy asks for a restart; a change of resources alone replaces nothing.
    pub in_place_resize: Option<&'a BTreeSet<String>>,
}

/// The actions of one sync.
#[derive(Clone, Debug, PartialEq)]
pub enum PodActions {
    /// The pod is done for good: stop these (ready) sandboxes; its containers stay for their
    /// logs and statuses.
    Finished {
        /// Sandbox ids to stop.
        stop_sandboxes: Vec<String>,
    },
    /// Bring the pod towards its desired state.
    Run(RunActions),
}

/// The actions of a sync that brings a pod up.
#[derive(Clone, Debug, PartialEq)]
pub struct RunActions {
    /// The sandbox to use or make.
    pub sandbox: SandboxAction,
    /// The sandbox attempt (the kept sandbox's, or the new one's).
    pub attempt: u32,
    /// Container steps, in the order to carry them out.
    pub steps: Vec<ContainerAction>,
    /// Set when initialization is not done after the steps: these later init containers
    /// wait in `PodInitializing`, and so does every app container without a reason of its own.
    pub initializing: Option<Vec<String>>,
}

/// What happens to the sandbox.
#[derive(Clone, Debug, PartialEq)]
pub enum SandboxAction {
    /// The newest sandbox is ready: use it.
    Keep {
        /// Its id.
        id: String,
        /// Its IPs, primary first.
        ips: Vec<String>,
    },
    /// Kill whatever is left of the pod (at once, no hooks) and make a new sandbox.
    Create(SandboxReason),
}

/// Why a new sandbox is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxReason {
    /// The pod has none yet.
    FirstSandbox,
    /// The newest one is not ready (stopped, or its network went).
    NotReady,
}

/// One of the pod's containers, by its place in the spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerRef {
    /// `initContainers[i]`.
    Init(usize),
    /// `containers[i]`.
    App(usize),
}

impl ContainerRef {
    /// The container's spec.
    pub fn spec(self, spec: &PodSpec) -> Option<&Container> {
        match self {
            ContainerRef::Init(i) => spec.init_containers.as_ref()?.get(i),
            ContainerRef::App(i) => spec.containers.get(i),
        }
    }
}

/// Why the kubelet kills a running container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillReason {
    /// Its spec hash changed: it is replaced.
    SpecChanged,
    /// Its resize policy restarts it for the new resources.
    ResizeRestart,
    /// Its liveness probe failed.
    Liveness,
    /// Its startup probe failed.
    Startup,
}

/// One step of a sync, on one container.
#[derive(Clone, Debug, PartialEq)]
pub enum ContainerAction {
    /// Stop a running instance (its preStop hook first, within `grace`).
    Kill {
        /// Whose instance.
        container: ContainerRef,
        /// The CRI container id.
        id: String,
        /// Grace period in seconds.
        grace: i64,
        /// Why.
        reason: KillReason,
        /// Why, for the instance's terminated state (Go's `Killing` message).
        message: String,
    },
    /// Remove an instance that was created but never started.
    Remove {
        /// Whose instance.
        container: ContainerRef,
        /// The CRI container id.
        id: String,
    },
    /// Start a new instance.
    Start {
        /// Which container.
        container: ContainerRef,
        /// The new instance's restart count.
        restart_count: u32,
        /// A restart under the crash-loop back-off: its next window opens as it starts.
        backoff: bool,
    },
    /// Start an ephemeral container: once, never again (Go's `EphemeralContainersToStart`).
    StartEphemeral {
        /// `ephemeralContainers[index]`.
        index: usize,
        /// The container whose PID namespace it joins (its `targetContainerName`).
        target: Option<PidTarget>,
    },
    /// The container may not start yet.
    Wait {
        /// Which container.
        container: ContainerRef,
        /// The reason its status shows.
        waiting: Waiting,
    },
}

/// The container an ephemeral container's `targetContainerName` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PidTarget {
    /// The target's name.
    pub name: String,
    /// The CRI id of its newest instance in the sandbox; `None` when it has none (Go's
    /// `unable to find target container`).
    pub id: Option<String>,
}

/// The crash-loop back-off key of a pod's container.
pub fn backoff_key(uid: &str, container: &str) -> String {
    format!("{uid}/{container}")
}

/// The waiting reason of containers held back by init containers.
pub fn pod_initializing() -> Waiting {
    Waiting {
        reason: "PodInitializing".into(),
        message: String::new(),
    }
}

/// Whether an init container is a sidecar (`restartPolicy: Always`).
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The actions of one sync of a pod, judged at `now`.
pub fn compute_pod_actions(input: &PodInputs<'_>, now: Instant) -> PodActions {
    let runtime = input.runtime;
    if pod_is_finished(input.spec, runtime) {
        let stop_sandboxes = runtime
            .sandboxes
            .iter()
            .filter(|s| s.ready)
            .map(|s| s.id.clone())
            .collect();
        return PodActions::Finished { stop_sandboxes };
    }
    let (sandbox, attempt) = match runtime.sandboxes.first() {
        Some(sb) if sb.ready => {
            let mut ips = vec![sb.ip.clone()];
            ips.extend(sb.additional_ips.iter().cloned());
            let id = sb.id.clone();
            (SandboxAction::Keep { id, ips }, sb.attempt)
        }
        Some(sb) => (
            SandboxAction::Create(SandboxReason::NotReady),
            sb.attempt.saturating_add(1),
        ),
        None => (SandboxAction::Create(SandboxReason::FirstSandbox), 0),
    };
    // Containers of the kept sandbox only: a new sandbox starts everyone afresh.
    let mine: Vec<&RuntimeContainer> = match &sandbox {
        SandboxAction::Keep { id, .. } => runtime
            .containers
            .iter()
            .filter(|c| &c.sandbox_id == id)
            .collect(),
        SandboxAction::Create(_) => Vec::new(),
    };
    let mut plan = Planner {
        input,
        now,
        mine,
        policy: input.spec.restart_policy.as_deref().unwrap_or("Always"),
        steps: Vec::new(),
    };
    if let SandboxAction::Keep { .. } = &sandbox {
        plan.ephemeral_containers();
    }
    let initializing = plan.init_containers();
    if initializing.is_none() {
        plan.app_containers();
    }
    PodActions::Run(RunActions {
        sandbox,
        attempt,
        steps: plan.steps,
        initializing,
    })
}

/// What the pass decided for one container after any kill.
enum Next {
    /// Nothing (running, or done and not to be restarted).
    Keep,
    /// Start a new instance with this restart count; `true` when under the back-off.
    Start(u32, bool),
    /// It may not start yet.
    Wait(Waiting),
}

/// The state of one decision pass.
struct Planner<'a> {
    input: &'a PodInputs<'a>,
    now: Instant,
    /// The kept sandbox's containers (none for a new sandbox).
    mine: Vec<&'a RuntimeContainer>,
    /// The pod's restart policy.
    policy: &'a str,
    steps: Vec<ContainerAction>,
}

impl<'a> Planner<'a> {
    /// Init containers in order; `Some(later init containers to hold)` when initialization
    /// is not done.
    fn init_containers(&mut self) -> Option<Vec<String>> {
        let inits: &[Container] = self.input.spec.init_containers.as_deref().unwrap_or(&[]);
        for (i, c) in inits.iter().enumerate() {
            let at = ContainerRef::Init(i);
            let sidecar = is_sidecar(c);
            let later = || inits[i + 1..].iter().map(|c| c.name.clone()).collect();
            let next = match self.newest(&c.name) {
                Some(rc) if rc.state == ContainerState::ContainerRunning => {
                    if !sidecar {
                        // A regular init container still running: wait for it.
                        return Some(later());
                    }
                    if let Some((reason, message, grace)) = self.probe_kill(c, rc, true) {
                        self.kill(at, rc, grace, reason, message);
                        self.restart(c, rc, "Always")
                    } else if self.resize_restarts(rc) {
                        // A sidecar resizes as an app container does (Go 1.33).
                        let message = format!("Container {} resize requires restart", c.name);
                        self.kill(at, rc, self.input.grace, KillReason::ResizeRestart, message);
                        Next::Start(rc.attempt.saturating_add(1), false)
                    } else if !self.sidecar_started(c, rc) {
                        // Go: the next init container waits for the sidecar to start.
                        return Some(later());
                    } else {
                        Next::Keep
                    }
                }
                Some(rc)
                    if rc.state == ContainerState::ContainerExited
                        && rc.exit_code == 0
                        && !sidecar =>
                {
                    Next::Keep
                }
                Some(rc) => {
                    let policy = if sidecar {
                        "Always"
                    } else {
                        init_policy(self.policy)
                    };
                    self.restart(c, rc, policy)
                }
                None => Next::Start(restart_count_from(self.input.runtime, &c.name), false),
            };
            match next {
                Next::Keep => {}
                Next::Start(count, backoff) => {
                    self.start(at, count, backoff);
                    if !sidecar {
                        return Some(Vec::new());
                    }
                }
                Next::Wait(waiting) => {
                    self.steps.push(ContainerAction::Wait {
                        container: at,
                        waiting,
                    });
                    return Some(Vec::new());
                }
            }
        }
        None
    }

    /// Ephemeral containers that never ran (no instance in any sandbox: they run once)
    /// start, whatever the restart policy and however far initialization got.
    fn ephemeral_containers(&mut self) {
        let runtime = self.input.runtime;
        let ephemeral = self.input.spec.ephemeral_containers.iter().flatten();
        for (index, ec) in ephemeral.enumerate() {
            if runtime.containers.iter().any(|c| c.name == ec.name) {
                continue;
            }
            let target = ec
                .target_container_name
                .as_deref()
                .filter(|t| !t.is_empty())
                .map(|name| PidTarget {
                    name: name.to_string(),
                    id: self.newest(name).map(|rc| rc.id.clone()),
                });
            self.steps
                .push(ContainerAction::StartEphemeral { index, target });
        }
    }

    /// App containers, each independently of the others.
    fn app_containers(&mut self) {
        let input = self.input;
        for (i, c) in input.spec.containers.iter().enumerate() {
            let at = ContainerRef::App(i);
            let next = match self.newest(&c.name) {
                Some(rc) if rc.state == ContainerState::ContainerRunning => {
                    self.running_app(at, c, rc)
                }
                Some(rc) if rc.state == ContainerState::ContainerCreated => {
                    // Created but never started (a crash between the two): start a fresh one.
                    self.steps.push(ContainerAction::Remove {
                        container: at,
                        id: rc.id.clone(),
                    });
                    Next::Start(rc.attempt.saturating_add(1), false)
                }
                Some(rc) => self.restart(c, rc, self.policy),
                None => Next::Start(restart_count_from(input.runtime, &c.name), false),
            };
            match next {
                Next::Keep => {}
                Next::Start(count, backoff) => self.start(at, count, backoff),
                Next::Wait(waiting) => self.steps.push(ContainerAction::Wait {
                    container: at,
                    waiting,
                }),
            }
        }
    }

    /// A running app container: replaced when its spec changed, killed (and restarted unless
    /// the pod never restarts) when a probe failed.
    fn running_app(&mut self, at: ContainerRef, c: &Container, rc: &RuntimeContainer) -> Next {
        if self.spec_changed(c, rc) {
            let message = format!("Container {} definition changed, will be restarted", c.name);
            self.kill(at, rc, self.input.grace, KillReason::SpecChanged, message);
            return Next::Start(rc.attempt.saturating_add(1), false);
        }
        if self.resize_restarts(rc) {
            // Go's computePodResizeAction: killed and started again with the new resources.
            let message = format!("Container {} resize requires restart", c.name);
            self.kill(at, rc, self.input.grace, KillReason::ResizeRestart, message);
            return Next::Start(rc.attempt.saturating_add(1), false);
        }
        let Some((reason, mut message, grace)) = self.probe_kill(c, rc, false) else {
            return Next::Keep;
        };
        // Go: killed and, unless the pod never restarts, started again.
        let restart = self.policy != "Never";
        if restart {
            message.push_str(", will be restarted");
        }
        self.kill(at, rc, grace, reason, message);
        if restart {
            self.restart(c, rc, "Always")
        } else {
            Next::Keep
        }
    }

    /// Whether the running instance `rc` restarts for its resize policy.
    fn resize_restarts(&self, rc: &RuntimeContainer) -> bool {
        self.input
            .in_place_resize
            .is_some_and(|restarts| restarts.contains(&rc.id))
    }

    /// Whether the running instance `rc` was made from another spec than `c`: the hash
    /// without resources when in-place resize is on and the instance has one (Go's
    /// `HashContainerWithoutResources`), else the whole spec's.
    fn spec_changed(&self, c: &Container, rc: &RuntimeContainer) -> bool {
        let without = rc
            .annotations
            .get(crate::types::labels::CONTAINER_HASH_WITHOUT_RESOURCES);
        match (self.input.in_place_resize, without) {
            (Some(_), Some(h)) => *h != podspec::hash::container_hash_without_resources(c),
            _ => !rc.hash.is_empty() && rc.hash != podspec::container_hash(c),
        }
    }

    /// Whether a stopped instance runs again under `policy`, honouring the back-off.
    fn restart(&self, c: &Container, rc: &RuntimeContainer, policy: &str) -> Next {
        let restart = match policy {
            "Never" => false,
            "OnFailure" => rc.exit_code != 0,
            _ => true,
        };
        if !restart {
            return Next::Keep;
        }
        let key = backoff_key(self.input.uid, &c.name);
        if let Some(left) = self.input.backoff.in_backoff(&key, self.now) {
            return Next::Wait(Waiting {
                reason: "CrashLoopBackOff".into(),
                message: format!(
                    "back-off {}s restarting failed container={} pod={}",
                    left.as_secs().max(1),
                    c.name,
                    self.input.uid
                ),
            });
        }
        Next::Start(rc.attempt.saturating_add(1), true)
    }

    /// Whether a running instance's liveness or startup probe failed: the kill's reason,
    /// message and grace period (the probe's own `terminationGracePeriodSeconds` when set).
    fn probe_kill(
        &self,
        c: &Container,
        rc: &RuntimeContainer,
        sidecar: bool,
    ) -> Option<(KillReason, String, i64)> {
        let failed = |kind| self.input.probes.get(kind, &rc.id) == Some(ProbeResult::Failure);
        let (kind, reason, what) = if failed(ProbeKind::Liveness) {
            (ProbeKind::Liveness, KillReason::Liveness, "liveness")
        } else if failed(ProbeKind::Startup) {
            (ProbeKind::Startup, KillReason::Startup, "startup")
        } else {
            return None;
        };
        let who = if sidecar {
            "Init container"
        } else {
            "Container"
        };
        let grace = kind
            .probe_of(c)
            .and_then(|p| p.termination_grace_period_seconds)
            .map(|g| g.max(0))
            .unwrap_or(self.input.grace);
        Some((
            reason,
            format!("{who} {} failed {what} probe", c.name),
            grace,
        ))
    }

    /// Whether a running sidecar has started: it has no startup probe, or it passed.
    fn sidecar_started(&self, c: &Container, rc: &RuntimeContainer) -> bool {
        c.startup_probe.is_none()
            || self.input.probes.get(ProbeKind::Startup, &rc.id) == Some(ProbeResult::Success)
    }

    fn kill(
        &mut self,
        container: ContainerRef,
        rc: &RuntimeContainer,
        grace: i64,
        reason: KillReason,
        message: String,
    ) {
        self.steps.push(ContainerAction::Kill {
            container,
            id: rc.id.clone(),
            grace,
            reason,
            message,
        });
    }

    fn start(&mut self, container: ContainerRef, restart_count: u32, backoff: bool) {
        self.steps.push(ContainerAction::Start {
            container,
            restart_count,
            backoff,
        });
    }

    fn newest(&self, name: &str) -> Option<&'a RuntimeContainer> {
        self.mine
            .iter()
            .copied()
            .filter(|c| c.name == name)
            .max_by_key(|c| c.created_at)
    }
}

/// Whether the pod is done for good: restartPolicy Never with every container exited, or
/// OnFailure with every container exited 0 (or Never with a failed init container).
fn pod_is_finished(spec: &PodSpec, runtime: &RuntimePod) -> bool {
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    if policy == "Always" || spec.containers.is_empty() {
        return false;
    }
    let Some(sb) = runtime.sandboxes.first() else {
        return false;
    };
    let newest = |name: &str| {
        runtime
            .containers
            .iter()
            .filter(|c| c.sandbox_id == sb.id && c.name == name)
            .max_by_key(|c| c.created_at)
    };
    if policy == "Never" {
        let failed_init = spec.init_containers.iter().flatten().any(|c| {
            newest(&c.name)
                .is_some_and(|rc| rc.state == ContainerState::ContainerExited && rc.exit_code != 0)
        });
        if failed_init {
            return true;
        }
    }
    spec.containers.iter().all(|c| match newest(&c.name) {
        Some(rc) if rc.state == ContainerState::ContainerExited => {
            policy == "Never" || rc.exit_code == 0
        }
        _ => false,
    })
}

/// The restart count a new instance gets: one more than the newest instance's, in any sandbox.
fn restart_count_from(runtime: &RuntimePod, name: &str) -> u32 {
    runtime
        .containers
        .iter()
        .filter(|c| c.name == name)
        .map(|c| c.attempt.saturating_add(1))
        .max()
        .unwrap_or(0)
}

/// Init containers are restarted on failure unless the pod is Never.
fn init_policy(pod_policy: &str) -> &'static str {
    if pod_policy == "Never" {
        "Never"
    } else {
        "OnFailure"
    }
}
