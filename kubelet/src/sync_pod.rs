//! SyncPod and KillPod: the Kubernetes semantics of driving one pod to its desired state
//! through CRI (the Go kubelet's `computePodActions` + `SyncPod`).
//!
//! One pass: make the sandbox when there is none ready (killing what was left of the old one),
//! then the init containers strictly in order, each to success before the next (sidecars, init
//! containers with `restartPolicy: Always`, start and keep running), then the app containers,
//! restarting exited ones per `restartPolicy` with crash-loop back-off and replacing those
//! whose spec hash changed. Anything that must wait is recorded as a waiting reason; the next
//! PLEG event or resync picks the pod up again.
//!
//! Probes and hooks: a running container whose liveness or startup probe failed is killed
//! (with the probe's own grace period when it has one) and restarted per `restartPolicy`; a
//! sidecar with a startup probe holds the next init container back until it has started.
//! `postStart` runs right after StartContainer and its failure kills the container
//! (`PostStartHookError`); every kill runs the container's `preStop` hook first, within the
//! grace period, and notes why the kubelet killed it for the instance's terminated state.

use std::collections::BTreeMap;
use std::time::Instant;

use ferrolet_proto::cri::ContainerState;
use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::kubelet::Kubelet;
use crate::lifecycle::{self, HookTarget};
use crate::podspec::{self, ContainerContext};
use crate::prober::{ProbeKind, ProbeResult};
use crate::status::{self, StatusContext, Waiting};
use crate::types::{Pod, RuntimeContainer, RuntimePod};
use crate::types::{grace_period, uid_of};

/// Why a sync pass stopped early.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The runtime failed.
    #[error(transparent)]
    Cri(#[from] crate::cri::CriError),
    /// The pod's volumes could not be made.
    #[error(transparent)]
    Volume(#[from] crate::volume::VolumeError),
    /// The pod cannot be expressed as CRI configs.
    #[error(transparent)]
    Spec(#[from] crate::podspec::SpecError),
}

/// The sandbox a pass starts containers in, and what every container of it shares.
#[derive(Clone, Copy)]
struct SandboxTarget<'a> {
    id: &'a str,
    config: &'a ferrolet_proto::cri::PodSandboxConfig,
    /// Primary first.
    pod_ips: &'a [String],
    volumes: &'a crate::volume::PodVolumes,
}

/// One container instance to kill, and why.
struct Kill<'a> {
    /// Its spec (for the preStop hook), when the pod still has it.
    spec: Option<&'a Container>,
    /// The CRI container id.
    id: &'a str,
    /// The pod's IP, for an httpGet preStop hook.
    pod_ip: &'a str,
    /// The grace period in seconds (preStop hook included).
    grace: i64,
    /// Why, for the instance's terminated state (Go's `Killing` message).
    note: Option<String>,
}

/// A probe's verdict that the container must go.
struct ProbeKill {
    message: String,
    grace: i64,
}

/// What the pass decided for one container.
enum Step {
    /// Nothing to do (running, or done and not to be restarted).
    Keep,
    /// Start a new instance with this restart count.
    Start(u32),
    /// Wait: the container may not start yet.
    Wait(Waiting),
}

impl Kubelet {
    /// Drives a pod to its desired state and records its status.
    pub async fn sync_pod(&self, pod: &Pod) -> Result<(), SyncError> {
        let uid = uid_of(pod);
        let started = Instant::now();
        // Probes start with the pod (and are cheap to ask for again).
        self.probes.add_pod(pod);
        let mut waiting = BTreeMap::new();
        let result = self.sync_pod_once(pod, &uid, &mut waiting).await;
        if let Err(e) = &result {
            tracing::warn!(error = %e, "sync failed");
        }
        self.record_status(pod, &uid, waiting).await;
        tracing::debug!(elapsed = ?started.elapsed(), "synced");
        result
    }

    async fn sync_pod_once(
        &self,
        pod: &Pod,
        uid: &str,
        waiting: &mut BTreeMap<String, Waiting>,
    ) -> Result<(), SyncError> {
        let spec = pod.spec.clone().unwrap_or_default();
        let runtime = self.pleg.refresh(uid).await?.unwrap_or_default();
        if self.pod_is_finished(pod, &spec, &runtime) {
            // A finished pod keeps its containers (for logs and status) but not its sandbox.
            for sb in runtime.sandboxes.iter().filter(|s| s.ready) {
                self.cri.stop_pod_sandbox(&sb.id).await?;
            }
            return Ok(());
        }
        let volumes = match crate::volume::setup(&self.config.root_dir, pod).await {
            Ok(v) => v,
            Err(e) => {
                // As the Go kubelet: the pod waits in ContainerCreating, the reason says why.
                tracing::warn!(error = %e, "FailedMount");
                let w = Waiting {
                    reason: "ContainerCreating".into(),
                    message: e.to_string(),
                };
                for c in spec
                    .containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                {
                    waiting.insert(c.name.clone(), w.clone());
                }
                return Ok(());
            }
        };
        let sandbox = runtime.sandboxes.first().filter(|s| s.ready).cloned();
        let attempt = match &sandbox {
            Some(sb) => sb.attempt,
            None => runtime
                .sandboxes
                .first()
                .map(|s| s.attempt + 1)
                .unwrap_or(0),
        };
        let sandbox_config = podspec::sandbox_config(pod, &self.node, attempt)?;
        let (sandbox_id, pod_ips, fresh) = match sandbox {
            Some(sb) => {
                let mut ips = vec![sb.ip];
                ips.extend(sb.additional_ips);
                (sb.id, ips, false)
            }
            None => {
                // Whatever ran in an old sandbox goes with it (at once: no hooks).
                self.kill_runtime_pod(&runtime, None, 0).await;
                for c in spec
                    .containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                {
                    waiting.insert(
                        c.name.clone(),
                        Waiting {
                            reason: "ContainerCreating".into(),
                            message: String::new(),
                        },
                    );
                }
                let id = self.cri.run_pod_sandbox(sandbox_config.clone()).await?;
                let status = self.cri.pod_sandbox_status(&id).await?;
                let net = status.network.unwrap_or_default();
                let mut ips = vec![net.ip];
                ips.extend(net.additional_ips.into_iter().map(|i| i.ip));
                waiting.clear();
                (id, ips, true)
            }
        };
        let target = SandboxTarget {
            id: &sandbox_id,
            config: &sandbox_config,
            pod_ips: &pod_ips,
            volumes: &volumes,
        };
        // Containers of this sandbox only: a new sandbox starts everyone afresh.
        let mine: Vec<&RuntimeContainer> = if fresh {
            Vec::new()
        } else {
            runtime
                .containers
                .iter()
                .filter(|c| c.sandbox_id == sandbox_id)
                .collect()
        };
        let restart_policy = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into());

        // Init containers, in order.
        for (i, c) in spec.init_containers.iter().flatten().enumerate() {
            let sidecar = c.restart_policy.as_deref() == Some("Always");
            let newest = newest(&mine, &c.name);
            let step = match newest {
                Some(rc) if rc.state == ContainerState::ContainerRunning => {
                    if sidecar {
                        if let Some(kill) = self.probe_kill(pod, c, rc, true) {
                            let primary = pod_ips.first().map(String::as_str).unwrap_or("");
                            self.kill_container(pod, kill.into_kill(c, rc, primary))
                                .await;
                            self.restart_step(uid, c, rc, "Always")
                        } else if !self.sidecar_started(c, rc) {
                            // Go: the next init container waits for the sidecar to start.
                            for later in spec.init_containers.iter().flatten().skip(i + 1) {
                                waiting.insert(later.name.clone(), pod_initializing());
                            }
                            self.mark_app_containers(&spec, waiting);
                            return Ok(());
                        } else {
                            Step::Keep
                        }
                    } else {
                        // A regular init container still running: wait for it.
                        for later in spec.init_containers.iter().flatten().skip(i + 1) {
                            waiting.insert(later.name.clone(), pod_initializing());
                        }
                        self.mark_app_containers(&spec, waiting);
                        return Ok(());
                    }
                }
                Some(rc)
                    if rc.state == ContainerState::ContainerExited
                        && rc.exit_code == 0
                        && !sidecar =>
                {
                    Step::Keep
                }
                Some(rc) => {
                    let policy = if sidecar {
                        "Always"
                    } else {
                        init_policy(&restart_policy)
                    };
                    self.restart_step(uid, c, rc, policy)
                }
                None => Step::Start(restart_count_from(&runtime, &c.name)),
            };
            match step {
                Step::Keep => continue,
                Step::Start(count) => {
                    self.start_container(pod, c, &target, count, waiting).await;
                    if !sidecar {
                        self.mark_app_containers(&spec, waiting);
                        return Ok(());
                    }
                }
                Step::Wait(w) => {
                    waiting.insert(c.name.clone(), w);
                    self.mark_app_containers(&spec, waiting);
                    return Ok(());
                }
            }
        }

        // App containers.
        for c in &spec.containers {
            let hash = podspec::container_hash(c);
            let step = match newest(&mine, &c.name) {
                Some(rc) if rc.state == ContainerState::ContainerRunning => {
                    let primary = pod_ips.first().map(String::as_str).unwrap_or("");
                    if !rc.hash.is_empty() && rc.hash != hash {
                        let kill = Kill {
                            spec: Some(c),
                            id: &rc.id,
                            pod_ip: primary,
                            grace: grace_period(pod),
                            note: Some(format!(
                                "Container {} definition changed, will be restarted",
                                c.name
                            )),
                        };
                        self.kill_container(pod, kill).await;
                        Step::Start(rc.attempt + 1)
                    } else if let Some(mut kill) = self.probe_kill(pod, c, rc, false) {
                        // Go: killed and, unless the pod never restarts, started again.
                        let restart = restart_policy != "Never";
                        if restart {
                            kill.message.push_str(", will be restarted");
                        }
                        self.kill_container(pod, kill.into_kill(c, rc, primary))
                            .await;
                        if restart {
                            self.restart_step(uid, c, rc, "Always")
                        } else {
                            Step::Keep
                        }
                    } else {
                        Step::Keep
                    }
                }
                Some(rc) if rc.state == ContainerState::ContainerCreated => {
                    // Created but never started (a crash between the two): start a fresh one.
                    let _ = self.cri.remove_container(&rc.id).await;
                    Step::Start(rc.attempt + 1)
                }
                Some(rc) => self.restart_step(uid, c, rc, &restart_policy),
                None => Step::Start(restart_count_from(&runtime, &c.name)),
            };
            match step {
                Step::Keep => {}
                Step::Start(count) => {
                    self.start_container(pod, c, &target, count, waiting).await;
                }
                Step::Wait(w) => {
                    waiting.insert(c.name.clone(), w);
                }
            }
        }
        Ok(())
    }

    /// Decides whether an exited container runs again, honouring the back-off.
    fn restart_step(&self, uid: &str, c: &Container, rc: &RuntimeContainer, policy: &str) -> Step {
        let restart = match policy {
            "Never" => false,
            "OnFailure" => rc.exit_code != 0,
            _ => true,
        };
        if !restart {
            return Step::Keep;
        }
        let key = format!("{uid}/{}", c.name);
        let now = Instant::now();
        // Only a container that ran long enough counts as not crash-looping (Go: 10 min).
        if let Some(left) = self.crash_backoff.in_backoff(&key, now) {
            return Step::Wait(Waiting {
                reason: "CrashLoopBackOff".into(),
                message: format!(
                    "back-off {}s restarting failed container={} pod={}",
                    left.as_secs().max(1),
                    c.name,
                    uid
                ),
            });
        }
        self.crash_backoff.next(&key, now);
        Step::Start(rc.attempt + 1)
    }

    fn mark_app_containers(&self, spec: &PodSpec, waiting: &mut BTreeMap<String, Waiting>) {
        for c in &spec.containers {
            waiting
                .entry(c.name.clone())
                .or_insert_with(pod_initializing);
        }
    }

    /// Pulls, creates and starts one container; failures become its waiting reason.
    async fn start_container(
        &self,
        pod: &Pod,
        c: &Container,
        target: &SandboxTarget<'_>,
        restart_count: u32,
        waiting: &mut BTreeMap<String, Waiting>,
    ) {
        let SandboxTarget {
            id: sandbox_id,
            config: sandbox_config,
            pod_ips,
            volumes,
        } = *target;
        let pod_ip = pod_ips.first().map(String::as_str).unwrap_or("");
        let uid = uid_of(pod);
        let image = match self.ensure_image(&uid, c).await {
            Ok(image) => image,
            Err(w) => {
                waiting.insert(c.name.clone(), w);
                return;
            }
        };
        let fail = |reason: &str, message: String| Waiting {
            reason: reason.into(),
            message,
        };
        let mounts = match self.container_mounts(pod, c, volumes, pod_ips).await {
            Ok(m) => m,
            Err(e) => {
                waiting.insert(c.name.clone(), fail("CreateContainerConfigError", e));
                return;
            }
        };
        let ctx = ContainerContext {
            pod_ip,
            pod_ips,
            restart_count,
            mounts,
            image: &image,
        };
        let config = match podspec::container_config(pod, c, &self.node, &ctx) {
            Ok(config) => config,
            Err(e) => {
                waiting.insert(
                    c.name.clone(),
                    fail("CreateContainerConfigError", e.to_string()),
                );
                return;
            }
        };
        if let Some(msg) = self.run_as_non_root_violation(pod, c, &image).await {
            waiting.insert(c.name.clone(), fail("CreateContainerConfigError", msg));
            return;
        }
        // The runtime writes the log; the kubelet owns its directory (as the Go kubelet does).
        if !sandbox_config.log_directory.is_empty() {
            let dir = std::path::Path::new(&sandbox_config.log_directory).join(&c.name);
            if let Err(e) = tokio::fs::create_dir_all(&dir).await {
                waiting.insert(
                    c.name.clone(),
                    fail(
                        "CreateContainerError",
                        format!("creating log dir {}: {e}", dir.display()),
                    ),
                );
                return;
            }
        }
        let id = match self
            .cri
            .create_container(sandbox_id, config, sandbox_config.clone())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                waiting.insert(c.name.clone(), fail("CreateContainerError", e.to_string()));
                return;
            }
        };
        if let Err(e) = self.cri.start_container(&id).await {
            waiting.insert(c.name.clone(), fail("RunContainerError", e.to_string()));
            return;
        }
        tracing::info!(container = %c.name, id, restart_count, "container started");
        if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let target = HookTarget {
                pod,
                container: c,
                container_id: &id,
                pod_ip,
            };
            if let Err(e) = self.hooks.run(hook, target).await {
                // An event-like line, as Go's FailedPostStartHook event.
                tracing::warn!(container = %c.name, id, reason = "FailedPostStartHook", "{e}");
                let kill = Kill {
                    spec: Some(c),
                    id: &id,
                    pod_ip,
                    grace: grace_period(pod),
                    note: Some("FailedPostStartHook".into()),
                };
                self.kill_container(pod, kill).await;
                waiting.insert(c.name.clone(), fail("PostStartHookError", e.message));
                return;
            }
        }
        waiting.remove(&c.name);
    }

    /// Whether a running container's liveness or startup probe has failed (Go's
    /// `computePodActions`); the kill's message and grace period (the probe's own
    /// `terminationGracePeriodSeconds` when set).
    fn probe_kill(
        &self,
        pod: &Pod,
        c: &Container,
        rc: &RuntimeContainer,
        sidecar: bool,
    ) -> Option<ProbeKill> {
        let failed = |kind| self.probes.result(kind, &rc.id) == Some(ProbeResult::Failure);
        let (kind, what) = if failed(ProbeKind::Liveness) {
            (ProbeKind::Liveness, "liveness")
        } else if failed(ProbeKind::Startup) {
            (ProbeKind::Startup, "startup")
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
            .unwrap_or_else(|| grace_period(pod));
        Some(ProbeKill {
            message: format!("{who} {} failed {what} probe", c.name),
            grace,
        })
    }

    /// Whether a running sidecar has started: it has no startup probe, or it passed.
    fn sidecar_started(&self, c: &Container, rc: &RuntimeContainer) -> bool {
        c.startup_probe.is_none()
            || self.probes.result(ProbeKind::Startup, &rc.id) == Some(ProbeResult::Success)
    }

    /// Kills one container instance as Go's `killContainer`: notes why (for its terminated
    /// state), runs its preStop hook within the grace period, then StopContainer with what is
    /// left of it (at least 2 s after a hook).
    async fn kill_container(&self, pod: &Pod, kill: Kill<'_>) {
        let name = kill.spec.map(|c| c.name.as_str()).unwrap_or_default();
        if let Some(note) = &kill.note {
            self.killed.record(&uid_of(pod), kill.id, note);
            tracing::info!(container = name, id = kill.id, "killing: {note}");
        }
        let mut grace = kill.grace;
        let pre_stop = kill
            .spec
            .and_then(|c| c.lifecycle.as_ref())
            .and_then(|l| l.pre_stop.as_ref());
        if let (Some(hook), Some(spec)) = (pre_stop, kill.spec)
            && grace > 0
        {
            let target = HookTarget {
                pod,
                container: spec,
                container_id: kill.id,
                pod_ip: kill.pod_ip,
            };
            let spent = self.hooks.pre_stop(hook, target, grace).await;
            grace = lifecycle::remaining_grace(grace, spent);
        }
        if let Err(e) = self.cri.stop_container(kill.id, grace).await {
            tracing::warn!(id = %kill.id, error = %e, "stopping container");
        }
    }

    /// A container's mounts, with what its /etc/hosts and subPathExpr need.
    async fn container_mounts(
        &self,
        pod: &Pod,
        c: &Container,
        volumes: &crate::volume::PodVolumes,
        pod_ips: &[String],
    ) -> Result<Vec<ferrolet_proto::cri::Mount>, String> {
        let pod_ip = pod_ips.first().map(String::as_str).unwrap_or("");
        let (hostname, domain) =
            podspec::hostname_and_domain(pod, &self.node).map_err(|e| e.to_string())?;
        let envs = podspec::container_env(pod, c, &self.node, pod_ip, pod_ips)
            .map_err(|e| e.to_string())?;
        let ctx = crate::volume::MountContext {
            pod_ips,
            hostname: &hostname,
            host_domain: &domain,
            envs: &envs,
        };
        crate::volume::container_mounts_with(&self.config.root_dir, pod, c, volumes, &ctx)
            .await
            .map_err(|e| e.to_string())
    }

    /// `runAsNonRoot` checked against the user the container would run as.
    async fn run_as_non_root_violation(
        &self,
        pod: &Pod,
        c: &Container,
        image: &str,
    ) -> Option<String> {
        let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
        let sc = c.security_context.as_ref();
        let non_root = sc
            .and_then(|s| s.run_as_non_root)
            .or_else(|| pod_sc.and_then(|s| s.run_as_non_root))
            .unwrap_or(false);
        if !non_root {
            return None;
        }
        let uid = sc
            .and_then(|s| s.run_as_user)
            .or_else(|| pod_sc.and_then(|s| s.run_as_user));
        let uid = match uid {
            Some(u) => Some(u),
            None => {
                let mut images = self.cri.images();
                let req = ferrolet_proto::cri::ImageStatusRequest {
                    image: Some(ferrolet_proto::cri::ImageSpec {
                        image: image.to_string(),
                        ..Default::default()
                    }),
                    verbose: false,
                };
                let img = images.image_status(req).await.ok()?.into_inner().image?;
                match img.uid {
                    Some(u) => Some(u.value),
                    None if !img.username.is_empty() => {
                        return Some(format!(
                            "container has runAsNonRoot and image has non-numeric user ({}), cannot verify user is non-root",
                            img.username
                        ));
                    }
                    None => Some(0),
                }
            }
        };
        (uid == Some(0))
            .then(|| "container has runAsNonRoot and image will run as root".to_string())
    }

    /// Stops every container (with the grace period, in parallel, each after its preStop
    /// hook when `pod` still has its spec) and every sandbox of a runtime pod.
    async fn kill_runtime_pod(&self, runtime: &RuntimePod, pod: Option<&Pod>, grace: i64) {
        let running: Vec<_> = runtime
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::ContainerRunning)
            .collect();
        let anonymous = Pod::default();
        let owner = pod.unwrap_or(&anonymous);
        let specs: Vec<&Container> = owner
            .spec
            .iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .collect();
        let pod_ip = runtime
            .sandboxes
            .first()
            .map(|s| s.ip.as_str())
            .filter(|ip| !ip.is_empty())
            .or_else(|| owner.status.as_ref().and_then(|s| s.pod_ip.as_deref()))
            .unwrap_or("");
        futures::future::join_all(running.iter().map(|rc| {
            let kill = Kill {
                spec: specs.iter().copied().find(|c| c.name == rc.name),
                id: &rc.id,
                pod_ip,
                grace,
                note: None,
            };
            self.kill_container(owner, kill)
        }))
        .await;
        for sb in &runtime.sandboxes {
            if let Err(e) = self.cri.stop_pod_sandbox(&sb.id).await {
                tracing::warn!(id = %sb.id, error = %e, "stopping sandbox");
            }
        }
    }

    /// KillPod for a pod gone from its source: containers get SIGTERM with the grace period,
    /// then sandboxes are stopped and removed, and the pod's dirs cleaned.
    pub async fn kill_pod(&self, uid: &str, grace: i64) {
        // A pod on its way out is not probed (nor restarted for failing a probe).
        self.probes.remove_pod(uid);
        let runtime = match self.pleg.refresh(uid).await {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "reading the pod before killing it");
                return;
            }
        };
        // The pod as last known (with its status), for the preStop hooks.
        let pod = self.pod_state(uid).map(|s| {
            let mut pod = s.pod;
            pod.status = Some(s.status);
            pod
        });
        self.kill_runtime_pod(&runtime, pod.as_ref(), grace).await;
        self.killed.forget_pod(uid);
        for c in &runtime.containers {
            if let Err(e) = self.cri.remove_container(&c.id).await {
                tracing::warn!(id = %c.id, error = %e, "removing container");
            }
        }
        for sb in &runtime.sandboxes {
            if let Err(e) = self.cri.remove_pod_sandbox(&sb.id).await {
                tracing::warn!(id = %sb.id, error = %e, "removing sandbox");
            }
        }
        if let Err(e) = crate::volume::teardown(&self.config.root_dir, uid).await {
            tracing::warn!(error = %e, "removing the pod's volumes");
        }
        let logs = self
            .node
            .pod_logs_dir
            .join(format!("{}_{}_{}", runtime.namespace, runtime.name, uid));
        if !runtime.name.is_empty() {
            let _ = tokio::fs::remove_dir_all(logs).await;
        }
        let _ = self.pleg.refresh(uid).await;
        tracing::info!("pod killed");
    }

    /// Whether the pod is done for good: restartPolicy Never with every container exited, or
    /// OnFailure with every container exited 0.
    fn pod_is_finished(&self, _pod: &Pod, spec: &PodSpec, runtime: &RuntimePod) -> bool {
        let policy = spec.restart_policy.as_deref().unwrap_or("Always");
        if policy == "Always" || spec.containers.is_empty() {
            return false;
        }
        let Some(sb) = runtime.sandboxes.first() else {
            return false;
        };
        let mine: Vec<&RuntimeContainer> = runtime
            .containers
            .iter()
            .filter(|c| c.sandbox_id == sb.id)
            .collect();
        // A failed init container under Never ends the pod too.
        if policy == "Never" {
            for c in spec.init_containers.iter().flatten() {
                if let Some(rc) = newest(&mine, &c.name)
                    && rc.state == ContainerState::ContainerExited
                    && rc.exit_code != 0
                {
                    return true;
                }
            }
        }
        spec.containers
            .iter()
            .all(|c| match newest(&mine, &c.name) {
                Some(rc) if rc.state == ContainerState::ContainerExited => {
                    policy == "Never" || rc.exit_code == 0
                }
                _ => false,
            })
    }

    /// Computes and stores the pod's status from the freshest runtime view.
    async fn record_status(&self, pod: &Pod, uid: &str, waiting: BTreeMap<String, Waiting>) {
        let runtime = match self.pleg.refresh(uid).await {
            Ok(r) => r.unwrap_or_default(),
            Err(_) => self.pleg.get(uid).unwrap_or_default(),
        };
        let Some(state) = self.pod_state(uid) else {
            return;
        };
        let start_time = state.start_time.clone().unwrap_or_else(status::now);
        let (started, ready) = self.probe_health(pod, uid, &runtime);
        self.killed
            .retain(uid, |id| runtime.containers.iter().any(|c| c.id == id));
        let killed = self.killed.of_pod(uid);
        let ctx = StatusContext {
            host_ip: &self.node.host_ip,
            waiting: &waiting,
            ready: &ready,
            started: &started,
            killed: &killed,
            start_time: Some(start_time.clone()),
            previous: Some(&state.status),
            runtime_name: &self.runtime_name,
        };
        let status = status::pod_status(pod, &runtime, &ctx);
        crate::metrics::observe_pod_status(pod, &state.status, &status);
        // The probe workers look at the instances this status shows.
        self.probes.set_status(uid, &status);
        self.update_state(uid, |s| {
            s.status = status;
            s.waiting = waiting;
            s.start_time = Some(start_time);
        });
    }
}

impl Kubelet {
    /// `started` and `ready` per probed container (app containers and sidecars) from the
    /// probe results of its newest instance; containers left out are started and ready
    /// while running.
    fn probe_health(
        &self,
        pod: &Pod,
        uid: &str,
        runtime: &RuntimePod,
    ) -> (BTreeMap<String, bool>, BTreeMap<String, bool>) {
        let mut started = BTreeMap::new();
        let mut ready = BTreeMap::new();
        let spec = pod.spec.as_ref();
        let sidecars = spec
            .into_iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        for c in spec.into_iter().flat_map(|s| &s.containers).chain(sidecars) {
            let Some(rc) = status::containers::newest(runtime, &c.name) else {
                continue;
            };
            let running = rc.state == ContainerState::ContainerRunning;
            let (s, r) = self.probes.health(uid, &c.name, &rc.id, running);
            started.insert(c.name.clone(), s);
            ready.insert(c.name.clone(), r);
        }
        (started, ready)
    }
}

impl ProbeKill {
    /// The kill of `rc` this verdict asks for.
    fn into_kill<'a>(
        self,
        c: &'a Container,
        rc: &'a RuntimeContainer,
        pod_ip: &'a str,
    ) -> Kill<'a> {
        Kill {
            spec: Some(c),
            id: &rc.id,
            pod_ip,
            grace: self.grace,
            note: Some(self.message),
        }
    }
}

fn newest<'a>(mine: &[&'a RuntimeContainer], name: &str) -> Option<&'a RuntimeContainer> {
    mine.iter()
        .copied()
        .filter(|c| c.name == name)
        .max_by_key(|c| c.created_at)
}

/// The restart count a new instance gets: one more than the newest instance's, in any sandbox.
fn restart_count_from(runtime: &RuntimePod, name: &str) -> u32 {
    runtime
        .containers
        .iter()
        .filter(|c| c.name == name)
        .map(|c| c.attempt + 1)
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

fn pod_initializing() -> Waiting {
    Waiting {
        reason: "PodInitializing".into(),
        message: String::new(),
    }
}
