//! SyncPod and KillPod: the Kubernetes semantics of driving one pod to its desired state
//! through CRI (the Go kubelet's `computePodActions` + `SyncPod`).
//!
//! One pass: make the sandbox when there is none ready (killing what was left of the old one),
//! then the init containers strictly in order, each to success before the next (sidecars, init
//! containers with `restartPolicy: Always`, start and keep running), then the app containers,
//! restarting exited ones per `restartPolicy` with crash-loop back-off and replacing those
//! whose spec hash changed. Anything that must wait is recorded as a waiting reason; the next
//! PLEG event or resync picks the pod up again.

use std::collections::BTreeMap;
use std::time::Instant;

use ferrolet_proto::cri::ContainerState;
use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::kubelet::{Kubelet, grace_period, uid_of};
use crate::podspec::{self, ContainerContext};
use crate::status::{self, StatusContext, Waiting};
use crate::types::{Pod, RuntimeContainer, RuntimePod};

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
                // Whatever ran in an old sandbox goes with it.
                self.kill_runtime_pod(&runtime, 0).await;
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
                        Step::Keep
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
                    if !rc.hash.is_empty() && rc.hash != hash {
                        tracing::info!(container = %c.name, "spec changed; replacing the container");
                        self.stop_container(rc, grace_period(pod)).await;
                        Step::Start(rc.attempt + 1)
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
        waiting.remove(&c.name);
        tracing::info!(container = %c.name, id, restart_count, "container started");
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

    async fn stop_container(&self, rc: &RuntimeContainer, grace: i64) {
        if let Err(e) = self.cri.stop_container(&rc.id, grace).await {
            tracing::warn!(id = %rc.id, error = %e, "stopping container");
        }
    }

    /// Stops every container (with the grace period, in parallel) and every sandbox of a
    /// runtime pod.
    async fn kill_runtime_pod(&self, runtime: &RuntimePod, grace: i64) {
        let running: Vec<_> = runtime
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::ContainerRunning)
            .collect();
        futures::future::join_all(running.iter().map(|c| self.stop_container(c, grace))).await;
        for sb in &runtime.sandboxes {
            if let Err(e) = self.cri.stop_pod_sandbox(&sb.id).await {
                tracing::warn!(id = %sb.id, error = %e, "stopping sandbox");
            }
        }
    }

    /// KillPod for a pod gone from its source: containers get SIGTERM with the grace period,
    /// then sandboxes are stopped and removed, and the pod's dirs cleaned.
    pub async fn kill_pod(&self, uid: &str, grace: i64) {
        let runtime = match self.pleg.refresh(uid).await {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "reading the pod before killing it");
                return;
            }
        };
        self.kill_runtime_pod(&runtime, grace).await;
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
        let ready = BTreeMap::new();
        let ctx = StatusContext {
            host_ip: &self.node.host_ip,
            waiting: &waiting,
            ready: &ready,
            start_time: Some(start_time.clone()),
            previous: Some(&state.status),
            runtime_name: &self.runtime_name,
        };
        let status = status::pod_status(pod, &runtime, &ctx);
        self.update_state(uid, |s| {
            s.status = status;
            s.waiting = waiting;
            s.start_time = Some(start_time);
        });
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
