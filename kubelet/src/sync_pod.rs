//! SyncPod and KillPod: the Kubernetes semantics of driving one pod to its desired state
//! through CRI (the Go kubelet's `SyncPod`; what to do is decided by
//! [`compute_pod_actions`](crate::pod_actions::compute_pod_actions)).
//!
//! One pass: read the pod back from the runtime, decide, then carry the actions out in order:
//! volumes, the sandbox (a new one when none is ready, after killing what was left of the
//! old one), kills, image pulls, CreateContainer/StartContainer and hooks. Anything that must
//! wait is recorded as a waiting reason; the next PLEG event or resync picks the pod up again.
//!
//! Hooks: `postStart` runs right after StartContainer and its failure kills the container
//! (`PostStartHookError`); every kill runs the container's `preStop` hook first, within the
//! grace period, and notes why the kubelet killed it for the instance's terminated state.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use ferrolet_proto::cri::ContainerState;
use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::events::{EventType, container_ref, pod_ref, reason};
use crate::kubelet::Kubelet;
use crate::lifecycle::{self, HookTarget};
use crate::pod_actions::{
    self, ContainerAction, PodActions, PodInputs, ProbeVerdicts, RunActions, SandboxAction,
};
use crate::podspec::{self, ContainerContext, EnvObjects};
use crate::prober::ProbeKind;
use crate::status::{self, StatusContext, Waiting};
use crate::timeline::Phase;
use crate::types::{Pod, RuntimePod, grace_period, uid_of};

mod ephemeral;

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
    /// The pod's user namespace could not be given (Go's GeneratePodSandboxConfig error).
    #[error("GeneratePodSandboxConfig for pod {pod:?} failed: {source}")]
    Userns {
        /// `namespace/name`.
        pod: String,
        /// Why.
        #[source]
        source: crate::userns::UsernsError,
    },
    /// The pod's cgroup could not be made.
    #[error("failed to ensure that the pod's cgroups exist and are correctly applied: {0}")]
    Cgroup(crate::cm::CmError),
    /// Containers could not be started (each waits with its reason); as in Go, the pass
    /// failed and the pod worker retries it after a back-off.
    #[error("{}", go_aggregate(.0))]
    StartContainers(Vec<String>),
}

/// Go's aggregate error text: one error as it is, more as `[a, b]`.
fn go_aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// The sandbox a pass starts containers in, and what every container of it shares.
#[derive(Clone, Copy)]
struct SandboxTarget<'a> {
    id: &'a str,
    config: &'a ferrolet_proto::cri::PodSandboxConfig,
    /// Primary first.
    pod_ips: &'a [String],
    volumes: &'a crate::volume::PodVolumes,
    /// The pulls of the pod's image volumes (none when the pass starts no container).
    image_volumes: &'a crate::kubelet::image_volumes::ImageVolumePulls,
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

impl Kubelet {
    /// Drives a pod to its desired state and records its status.
    pub async fn sync_pod(&self, pod: &Arc<Pod>) -> Result<(), SyncError> {
        // With in-place resize the pod runs as allocated: a changed spec is judged first.
        let pod = &self.handle_resize(pod).await;
        let uid = uid_of(pod);
        let started = Instant::now();
        let picked_up = crate::timeline::at(started);
        // Probes start with the pod (and are cheap to ask for again).
        self.probes.add_pod(pod, &self.events);
        let mut waiting = BTreeMap::new();
        let result = self
            .sync_pod_once(pod, &uid, picked_up, &mut waiting)
            .await
            .and_then(|()| start_failures(&waiting));
        if let Err(e) = &result {
            tracing::warn!(error = %e, "sync failed");
        }
        self.record_status(pod, &uid, waiting).await;
        tracing::debug!(elapsed = ?started.elapsed(), "synced");
        result
    }

    /// One pass: gather the inputs, decide, carry the actions out.
    async fn sync_pod_once(
        &self,
        pod: &Arc<Pod>,
        uid: &str,
        picked_up: i64,
        waiting: &mut BTreeMap<String, Waiting>,
    ) -> Result<(), SyncError> {
        let no_spec = PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&no_spec);
        let runtime = self.pleg.refresh(uid).await?.unwrap_or_default();
        let probes = self.probe_verdicts(&runtime);
        let resize = self.resize_plan(pod, &runtime);
        let input = PodInputs {
            uid,
            spec,
            grace: grace_period(pod),
            runtime: &runtime,
            backoff: &self.crash_backoff,
            probes: &probes,
            in_place_resize: resize.as_ref().map(|r| &r.restarts),
        };
        let actions = match pod_actions::compute_pod_actions(&input, Instant::now()) {
            PodActions::Finished { stop_sandboxes } => {
                // A finished pod keeps its containers (for logs and status) but not its sandbox.
                for id in &stop_sandboxes {
                    self.cri.stop_pod_sandbox(id).await?;
                }
                return Ok(());
            }
            PodActions::Run(actions) => actions,
        };
        self.timeline_sync(pod, picked_up, &actions, &runtime);
        let volumes = match self.volumes.wait_for_attach_and_mount(pod).await {
            Ok(v) => {
                self.timeline_mark(pod, Phase::VolumesReady, None);
                v
            }
            Err(e) => {
                // As the Go kubelet: the pod waits in ContainerCreating (the reason says why);
                // the volume manager keeps retrying and hands the pod back once they are set up.
                tracing::warn!(error = %e, "FailedMount");
                mark_all(spec, waiting, "ContainerCreating", &e.to_string());
                return Ok(());
            }
        };
        // Go's SyncPod: the pod's cgroup (and the QoS cgroups' update) before its sandbox.
        if let Err(e) = self.ensure_pod_cgroup(pod).await {
            tracing::warn!(error = %e, "making the pod's cgroup");
            return Err(SyncError::Cgroup(e));
        }
        let starts = actions.steps.iter().any(|s| {
            matches!(
                s,
                ContainerAction::Start { .. } | ContainerAction::StartEphemeral { .. }
            )
        });
        let mut sandbox_config = podspec::sandbox_config(pod, &self.node, actions.attempt)?;
        // Only a new sandbox or container carries the user namespace (Go asks for it when it
        // generates their configs), so a steady pod's sync reads no file for it.
        if starts || matches!(actions.sandbox, SandboxAction::Create(_)) {
            let userns = self.pod_userns(pod).await?;
            crate::userns::apply_to_sandbox(&mut sandbox_config, userns);
        }
        let (sandbox_id, pod_ips) = self
            .ensure_sandbox(pod, &actions, &runtime, &sandbox_config, waiting)
            .await?;
        // Go's SyncPod step 7, before the (re)starts: resize what runs, pod cgroup first.
        if let (Some(resize), SandboxAction::Keep { .. }) = (&resize, &actions.sandbox) {
            self.do_resize(pod, resize).await;
        }
        // Go pulls the image volumes' images after the sandbox, before any container starts.
        let image_volumes = if starts {
            self.pull_image_volumes(pod).await
        } else {
            Default::default()
        };
        let target = SandboxTarget {
            id: &sandbox_id,
            config: &sandbox_config,
            pod_ips: &pod_ips,
            volumes: &volumes,
            image_volumes: &image_volumes,
        };
        for step in &actions.steps {
            self.carry_out(pod, spec, step, &target, waiting).await;
        }
        if let Some(later) = &actions.initializing {
            for name in later {
                waiting.insert(name.clone(), pod_actions::pod_initializing());
            }
            mark_app_containers(spec, waiting);
        }
        Ok(())
    }

    /// The pod's CRI user namespace (Go's GetOrCreateUserNamespaceMappings); a refusal is
    /// the sandbox's failure, reported as Go reports it.
    async fn pod_userns(
        &self,
        pod: &Pod,
    ) -> Result<Option<ferrolet_proto::cri::UserNamespace>, SyncError> {
        let userns = self.userns.clone();
        let got = if pod.spec.as_ref().and_then(|s| s.host_users) == Some(false) {
            if !userns.knows_handlers() {
                match self.cri.status().await {
                    Ok(status) => userns.observe_status(&status),
                    Err(e) => tracing::warn!(error = %e, "reading the runtime's handlers"),
                }
            }
            // Reads (or writes) the pod's file.
            let owned = pod.clone();
            tokio::task::spawn_blocking(move || userns.mappings(&owned, ""))
                .await
                .unwrap_or_else(|e| {
                    Err(crate::userns::UsernsError::Refused(format!(
                        "user namespace worker: {e}"
                    )))
                })
        } else {
            // No file is read for a pod in the node's user namespace.
            userns.mappings(pod, "")
        };
        got.map_err(|source| {
            let message = format!("Failed to create pod sandbox: {source}");
            self.pod_event(
                pod,
                EventType::Warning,
                reason::FAILED_CREATE_POD_SANDBOX,
                &message,
            );
            SyncError::Userns {
                pod: crate::types::pod_name(pod),
                source,
            }
        })
    }

    /// The liveness and startup results of the pod's running instances.
    fn probe_verdicts(&self, runtime: &RuntimePod) -> ProbeVerdicts {
        let mut verdicts = ProbeVerdicts::default();
        let running = runtime
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::ContainerRunning);
        for rc in running {
            for kind in [ProbeKind::Liveness, ProbeKind::Startup] {
                if let Some(result) = self.probes.result(kind, &rc.id) {
                    verdicts.set(kind, &rc.id, result);
                }
            }
        }
        verdicts
    }

    /// The sandbox the containers go into (its id and IPs, primary first): the ready one, or
    /// a new one after whatever ran in the old one is gone (at once: no hooks).
    async fn ensure_sandbox(
        &self,
        pod: &Pod,
        actions: &RunActions,
        runtime: &RuntimePod,
        sandbox_config: &ferrolet_proto::cri::PodSandboxConfig,
        waiting: &mut BTreeMap<String, Waiting>,
    ) -> Result<(String, Vec<String>), SyncError> {
        let why = match &actions.sandbox {
            SandboxAction::Keep { id, ips } => return Ok((id.clone(), ips.clone())),
            SandboxAction::Create(why) => why,
        };
        tracing::debug!(reason = ?why, attempt = actions.attempt, "making a sandbox");
        if !runtime.sandboxes.is_empty() {
            let message = "Pod sandbox changed, it will be killed and re-created.";
            self.pod_event(pod, EventType::Normal, reason::SANDBOX_CHANGED, message);
        }
        let _ = self.kill_runtime_pod(runtime, None, 0).await;
        let spec = pod.spec.clone().unwrap_or_default();
        mark_all(&spec, waiting, "ContainerCreating", "");
        let id = match self.cri.run_pod_sandbox(sandbox_config.clone()).await {
            Ok(id) => {
                self.timeline_mark(pod, Phase::SandboxReady, None);
                self.timeline_sandbox_runtime(pod, &id);
                id
            }
            Err(e) => {
                let message = format!("Failed to create pod sandbox: {e}");
                self.pod_event(
                    pod,
                    EventType::Warning,
                    reason::FAILED_CREATE_POD_SANDBOX,
                    &message,
                );
                return Err(e.into());
            }
        };
        let status = self.cri.pod_sandbox_status(&id).await?;
        let net = status.network.unwrap_or_default();
        let mut ips = vec![net.ip];
        ips.extend(net.additional_ips.into_iter().map(|i| i.ip));
        waiting.clear();
        Ok((id, ips))
    }

    /// Carries out one container step.
    async fn carry_out(
        &self,
        pod: &Pod,
        spec: &PodSpec,
        step: &ContainerAction,
        target: &SandboxTarget<'_>,
        waiting: &mut BTreeMap<String, Waiting>,
    ) {
        let at = match step {
            ContainerAction::StartEphemeral { index, target: pid } => {
                self.start_ephemeral(pod, spec, *index, pid.as_ref(), target, waiting)
                    .await;
                return;
            }
            ContainerAction::Kill { container, .. }
            | ContainerAction::Remove { container, .. }
            | ContainerAction::Start { container, .. }
            | ContainerAction::Wait { container, .. } => *container,
        };
        // The steps come from this spec, so the container is always there.
        let Some(c) = at.spec(spec) else {
            tracing::warn!(?at, "a step for a container the spec does not have");
            return;
        };
        match step {
            ContainerAction::Kill {
                id, grace, message, ..
            } => {
                let kill = Kill {
                    spec: Some(c),
                    id,
                    pod_ip: target.pod_ips.first().map(String::as_str).unwrap_or(""),
                    grace: *grace,
                    note: Some(message.clone()),
                };
                let _ = self.kill_container(pod, kill).await;
            }
            ContainerAction::Remove { id, .. } => {
                let _ = self.cri.remove_container(id).await;
            }
            ContainerAction::Start {
                restart_count,
                backoff,
                ..
            } => {
                if *backoff {
                    // Only a container that ran long enough counts as not crash-looping (Go:
                    // 10 min); the window opens as the restart happens.
                    let key = pod_actions::backoff_key(&uid_of(pod), &c.name);
                    self.crash_backoff.next(&key, Instant::now());
                }
                self.start_container(pod, c, target, *restart_count, None, waiting)
                    .await;
            }
            // Started above: an ephemeral container is no `ContainerRef`.
            ContainerAction::StartEphemeral { .. } => {}
            ContainerAction::Wait { waiting: w, .. } => {
                if w.reason == "CrashLoopBackOff" {
                    // Once per back-off sync, as Go's doBackOff; the correlator bounds them.
                    let message = format!(
                        "Back-off restarting failed container {} in pod {}",
                        c.name,
                        lifecycle::format_pod(pod)
                    );
                    self.container_event(
                        pod,
                        &c.name,
                        EventType::Warning,
                        reason::BACK_OFF,
                        &message,
                    );
                }
                waiting.insert(c.name.clone(), w.clone());
            }
        }
    }

    /// Pulls, creates and starts one container (in the PID namespace of the container
    /// instance `pid_target` when given: an ephemeral container's target); failures become
    /// its waiting reason.
    async fn start_container(
        &self,
        pod: &Pod,
        c: &Container,
        target: &SandboxTarget<'_>,
        restart_count: u32,
        pid_target: Option<&str>,
        waiting: &mut BTreeMap<String, Waiting>,
    ) {
        let name = c.name.as_str();
        let failed = |message: &str| {
            let message = format!("Error: {message}");
            self.container_event(pod, name, EventType::Warning, reason::FAILED, &message);
        };
        // An image volume whose pull failed: `Error: <reason>` per failed volume, and the
        // container waits with the last (Go's toKubeContainerImageVolumes).
        let pulls = target.image_volumes;
        let images = match crate::kubelet::image_volumes::container_image_volumes(pulls, c) {
            Ok(images) => images,
            Err(failures) => {
                for w in &failures {
                    failed(&w.reason);
                }
                if let Some(w) = failures.into_iter().last() {
                    waiting.insert(c.name.clone(), w);
                }
                return;
            }
        };
        let mut config = match self
            .container_config(pod, c, target, &images, restart_count)
            .await
        {
            Ok(config) => config,
            Err(w) => {
                // Go's image errors print as their reason (`Error: ErrImagePull`), the rest
                // as their message.
                failed(if is_image_reason(&w.reason) {
                    &w.reason
                } else {
                    &w.message
                });
                waiting.insert(c.name.clone(), w);
                return;
            }
        };
        if let Some(id) = pid_target {
            podspec::ephemeral::join_target_pid_namespace(&mut config, id);
        }
        let uid = uid_of(pod);
        if let Some(cpus) = self.container_cpuset(&uid, name).await
            && let Some(r) = config.linux.as_mut().and_then(|l| l.resources.as_mut())
        {
            r.cpuset_cpus = cpus;
        }
        let id = match self
            .cri
            .create_container(target.id, config, target.config.clone())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                failed(&e.to_string());
                waiting.insert(c.name.clone(), fail("CreateContainerError", e.to_string()));
                return;
            }
        };
        self.timeline_mark(pod, Phase::ContainerCreated, Some(name));
        self.cpu_container_created(&uid, name, &id).await;
        let message = format!("Created container {name}");
        self.container_event(pod, name, EventType::Normal, reason::CREATED, &message);
        if let Err(e) = self.cri.start_container(&id).await {
            failed(&e.to_string());
            waiting.insert(c.name.clone(), fail("RunContainerError", e.to_string()));
            return;
        }
        self.timeline_mark(pod, Phase::ContainerStarted, Some(name));
        let message = format!("Started container {name}");
        self.container_event(pod, name, EventType::Normal, reason::STARTED, &message);
        tracing::info!(container = %c.name, id, restart_count, "container started");
        let pod_ip = target.pod_ips.first().map(String::as_str).unwrap_or("");
        if let Some(w) = self.post_start(pod, c, &id, pod_ip).await {
            waiting.insert(c.name.clone(), w);
            return;
        }
        waiting.remove(&c.name);
    }

    /// Everything CreateContainer needs, up to the container's log directory; what stops it
    /// as the container's waiting reason.
    async fn container_config(
        &self,
        pod: &Pod,
        c: &Container,
        target: &SandboxTarget<'_>,
        images: &BTreeMap<String, ferrolet_proto::cri::ImageSpec>,
        restart_count: u32,
    ) -> Result<ferrolet_proto::cri::ContainerConfig, Waiting> {
        let pod_ips = target.pod_ips;
        let ensured = self.ensure_image(&uid_of(pod), c).await?;
        if let Some(from) = ensured.pulled_from {
            let at = crate::timeline::at(from);
            let id = crate::timeline::PodId::of(pod);
            self.timeline
                .mark(id, Phase::ImagePulling, Some(c.name.as_str()), at);
        }
        self.timeline_mark(pod, Phase::ImageReady, Some(c.name.as_str()));
        let image = ensured.id;
        // Once per start, before the mounts (their subPathExpr reads it), as Go's
        // GenerateRunContainerOptions.
        let devices = self
            .device_options(pod, c)
            .await
            .map_err(|e| fail("CreateContainerConfigError", e))?;
        let mut envs = self
            .container_env(pod, c, pod_ips)
            .await
            .map_err(|e| fail("CreateContainerConfigError", e))?;
        // The plugins' env goes first (the container's own wins) and counts for `$(VAR)` and
        // `subPathExpr`, as Go's GenerateRunContainerOptions.
        let device_envs = devices
            .envs
            .iter()
            .map(|(key, value)| ferrolet_proto::cri::KeyValue {
                key: key.clone(),
                value: value.clone(),
            });
        envs = device_envs.chain(envs).collect();
        let mounts = self
            .container_mounts(pod, c, target.volumes, images, pod_ips, &envs)
            .await
            .map_err(|e| fail("CreateContainerConfigError", e))?;
        let ctx = ContainerContext {
            restart_count,
            mounts,
            devices: crate::volume::container_devices(c, target.volumes),
            envs,
            image: &image,
        };
        let mut config = podspec::container_config(pod, c, &self.node, &ctx)
            .map_err(|e| fail("CreateContainerConfigError", e.to_string()))?;
        // The sandbox's user namespace, for the container and each of its mounts.
        crate::userns::apply_to_container(&mut config, crate::userns::of_sandbox(target.config));
        let devices = crate::cm::devicemanager::RunContainerOptions {
            envs: Vec::new(),
            ..devices
        };
        crate::kubelet::devices::apply(&mut config, devices, &uid_of(pod), &c.name);
        // Tells ferrolet-cri where rotation happens, so its log writer waits for our rotation
        // instead of letting a fast logger run far past the limit between two passes; other
        // runtimes ignore it.
        config.annotations.insert(
            ferrolet_proto::cri::CONTAINER_LOG_MAX_SIZE_ANNOTATION.to_string(),
            self.config.container_log_max_size.to_string(),
        );
        if let Some(msg) = self.run_as_non_root_violation(pod, c, &image).await {
            return Err(fail("CreateContainerConfigError", msg));
        }
        // The runtime writes the log; the kubelet owns its directory (as the Go kubelet does).
        let log_directory = &target.config.log_directory;
        if !log_directory.is_empty() {
            let dir = std::path::Path::new(log_directory).join(&c.name);
            if let Err(e) = tokio::fs::create_dir_all(&dir).await {
                let message = format!("creating log dir {}: {e}", dir.display());
                return Err(fail("CreateContainerError", message));
            }
        }
        Ok(config)
    }

    /// Runs a started container's postStart hook; on failure kills the container and returns
    /// its waiting reason.
    async fn post_start(
        &self,
        pod: &Pod,
        c: &Container,
        id: &str,
        pod_ip: &str,
    ) -> Option<Waiting> {
        let hook = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref())?;
        let target = HookTarget {
            pod,
            container: c,
            container_id: id,
            pod_ip,
        };
        let e = self.hooks.run(hook, target).await.err()?;
        // The hook's message stays in the log (it may hold secrets), as in Go.
        tracing::warn!(container = %c.name, id, reason = "FailedPostStartHook", "{e}");
        let why = reason::FAILED_POST_START_HOOK;
        self.container_event(
            pod,
            &c.name,
            EventType::Warning,
            why,
            "PostStartHook failed",
        );
        let kill = Kill {
            spec: Some(c),
            id,
            pod_ip,
            grace: grace_period(pod),
            note: Some("FailedPostStartHook".into()),
        };
        let _ = self.kill_container(pod, kill).await;
        Some(fail("PostStartHookError", e.message))
    }

    /// Kills one container instance as Go's `killContainer`: notes why (for its terminated
    /// state), runs its preStop hook within the grace period, then StopContainer with what is
    /// left of it (at least 2 s after a hook).
    async fn kill_container(&self, pod: &Pod, kill: Kill<'_>) -> Result<(), String> {
        let name = kill.spec.map(|c| c.name.as_str()).unwrap_or_default();
        if let Some(note) = &kill.note {
            self.killed.record(&uid_of(pod), kill.id, note.clone());
            tracing::info!(container = name, id = kill.id, "killing: {note}");
        }
        // A pod known only from the runtime (a sandbox being replaced) has no reference.
        if !name.is_empty() && pod.metadata.uid.is_some() {
            let message = match &kill.note {
                Some(note) if !note.is_empty() => note.clone(),
                _ => format!("Stopping container {name}"),
            };
            self.container_event(pod, name, EventType::Normal, reason::KILLING, &message);
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
            let run = self.hooks.pre_stop(hook, target, grace).await;
            if run.failed {
                let why = reason::FAILED_PRE_STOP_HOOK;
                self.container_event(pod, name, EventType::Warning, why, "PreStopHook failed");
            }
            grace = lifecycle::remaining_grace(grace, run.spent);
        }
        if let Err(e) = self.cri.stop_container(kill.id, grace).await {
            tracing::warn!(id = %kill.id, error = %e, "stopping container");
            return Err(format!("KillContainer {name} ({}): {e}", kill.id));
        }
        Ok(())
    }

    /// Records an event about `pod`.
    fn pod_event(&self, pod: &Pod, kind: EventType, why: &str, message: &str) {
        self.events.record(&pod_ref(pod), kind, why, message);
    }

    /// Records an event about one of `pod`'s containers.
    fn container_event(
        &self,
        pod: &Pod,
        container: &str,
        kind: EventType,
        why: &str,
        message: &str,
    ) {
        self.events
            .record(&container_ref(pod, container), kind, why, message);
    }

    /// The container's environment (Go's `makeEnvironmentVariables`), after fetching the
    /// secrets and configMaps it reads; `envFrom` keys skipped as invalid names become Go's
    /// `InvalidEnvironmentVariableNames` event. The error is Go's message, for
    /// `CreateContainerConfigError`.
    async fn container_env(
        &self,
        pod: &Pod,
        c: &Container,
        pod_ips: &[String],
    ) -> Result<Vec<ferrolet_proto::cri::KeyValue>, String> {
        let objects = self.env_objects(pod, c).await;
        let pod_ip = pod_ips.first().map(String::as_str).unwrap_or("");
        let env = podspec::container_env(pod, c, &self.node, pod_ip, pod_ips, &objects);
        for skipped in &env.skipped {
            let why = reason::INVALID_ENVIRONMENT_VARIABLE_NAMES;
            self.pod_event(pod, EventType::Warning, why, &skipped.message());
        }
        env.vars.map_err(|e| e.to_string())
    }

    /// The secrets and configMaps `c`'s environment reads, as the object source has them
    /// (a watch-based cache answers from memory; standalone every read fails as Go's).
    async fn env_objects(&self, pod: &Pod, c: &Container) -> EnvObjects {
        let refs = podspec::env_references(c);
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut objects = EnvObjects::default();
        for name in refs.config_maps {
            let fetched = self.objects.config_map(namespace, &name).await;
            objects.config_maps.insert(name, fetched);
        }
        for name in refs.secrets {
            let fetched = self.objects.secret(namespace, &name).await;
            objects.secrets.insert(name, fetched);
        }
        objects
    }

    /// A container's mounts, with what its /etc/hosts and subPathExpr need.
    async fn container_mounts(
        &self,
        pod: &Pod,
        c: &Container,
        volumes: &crate::volume::PodVolumes,
        images: &BTreeMap<String, ferrolet_proto::cri::ImageSpec>,
        pod_ips: &[String],
        envs: &[ferrolet_proto::cri::KeyValue],
    ) -> Result<Vec<ferrolet_proto::cri::Mount>, String> {
        let (hostname, domain) =
            podspec::hostname_and_domain(pod, &self.node).map_err(|e| e.to_string())?;
        let ctx = crate::volume::MountContext {
            pod_ips,
            hostname: &hostname,
            host_domain: &domain,
            envs,
            images,
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
    /// What failed comes back, for Go's `FailedKillPod`.
    async fn kill_runtime_pod(
        &self,
        runtime: &RuntimePod,
        pod: Option<&Pod>,
        grace: i64,
    ) -> Vec<String> {
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
        let stops = futures::future::join_all(running.iter().map(|rc| {
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
        let mut errors: Vec<String> = stops.into_iter().filter_map(Result::err).collect();
        for sb in &runtime.sandboxes {
            if let Err(e) = self.cri.stop_pod_sandbox(&sb.id).await {
                tracing::warn!(id = %sb.id, error = %e, "stopping sandbox");
                errors.push(format!("KillPodSandbox {}: {e}", sb.id));
            }
        }
        errors
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
            let mut pod = Arc::unwrap_or_clone(s.pod);
            pod.status = Some(s.status);
            pod
        });
        let errors = self.kill_runtime_pod(&runtime, pod.as_ref(), grace).await;
        if let (Some(pod), false) = (&pod, errors.is_empty()) {
            let message = format!("error killing pod: {}", errors.join("; "));
            self.pod_event(pod, EventType::Warning, reason::FAILED_KILL_POD, &message);
        }
        // A pod deleted in the API reports how its containers ended before they are removed.
        if let Some(pod) = pod
            .as_ref()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
        {
            self.record_status(pod, uid, BTreeMap::new()).await;
        }
        self.killed.forget_pod(uid);
        self.oom_killed.forget_pod(uid);
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
        if let Err(e) = self.release_volumes(uid).await {
            tracing::warn!(error = %e, "removing the pod's volumes");
        }
        // Go's SyncTerminatedPod: with the containers gone, their pod cgroup goes too.
        self.destroy_pod_cgroup(uid).await;
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
        let exists = |id: &str| runtime.containers.iter().any(|c| c.id == id);
        self.killed.retain(uid, exists);
        self.oom_killed.retain(uid, exists);
        let killed = self.killed.of_pod(uid);
        let oom_killed = self.oom_killed.ids_of_pod(uid);
        let ctx = StatusContext {
            host_ip: &self.node.host_ip,
            waiting: &waiting,
            ready: &ready,
            started: &started,
            killed: &killed,
            oom_killed: &oom_killed,
            start_time: Some(start_time.clone()),
            previous: Some(&state.status),
            runtime_name: &self.runtime_name,
        };
        let mut status = status::pod_status(pod, &runtime, &ctx);
        self.resize_status(pod, &runtime, &mut status, Some(&state.status))
            .await;
        crate::metrics::observe_pod_status(pod, &state.status, &status);
        // The probe workers look at the instances this status shows.
        self.probes.set_status(uid, &status);
        self.status_sink.set_pod_status(&state.pod, &status);
        let all_running = Kubelet::all_containers_running(&status);
        self.update_state(uid, |s| {
            s.status = status;
            s.waiting = waiting;
            s.start_time = Some(start_time);
        });
        // Noted once `/pods` serves it.
        self.timeline_status(pod, all_running, &runtime);
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

/// Every container (app containers, then init containers) waits for `reason`.
fn mark_all(spec: &PodSpec, waiting: &mut BTreeMap<String, Waiting>, reason: &str, message: &str) {
    let w = fail(reason, message.to_string());
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        waiting.insert(c.name.clone(), w.clone());
    }
}

/// The containers this pass failed to start, as Go's sync result reports them
/// (`failed to "StartContainer" for "c" with CreateContainerConfigError: "…"`); waiting in a
/// back-off (crash loop, image pull) is not a failure of the pass, as in Go.
fn start_failures(waiting: &BTreeMap<String, Waiting>) -> Result<(), SyncError> {
    let failures: Vec<String> = waiting
        .iter()
        .filter(|(_, w)| is_start_failure(&w.reason))
        .map(|(name, w)| {
            format!(
                "failed to \"StartContainer\" for \"{name}\" with {}: {}",
                w.reason,
                podspec::env::go_quote(&w.message)
            )
        })
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(SyncError::StartContainers(failures))
    }
}

/// Reasons [`Kubelet::start_container`] gives a container it could not start.
fn is_start_failure(reason: &str) -> bool {
    matches!(
        reason,
        "CreateContainerConfigError"
            | "CreateContainerError"
            | "RunContainerError"
            | "PostStartHookError"
    ) || (is_image_reason(reason) && reason != "ImagePullBackOff")
}

/// App containers without a reason of their own wait for the init containers.
fn mark_app_containers(spec: &PodSpec, waiting: &mut BTreeMap<String, Waiting>) {
    for c in &spec.containers {
        waiting
            .entry(c.name.clone())
            .or_insert_with(pod_actions::pod_initializing);
    }
}

/// The waiting reasons of Go's image errors, which its `Failed` event prints bare.
fn is_image_reason(reason: &str) -> bool {
    matches!(
        reason,
        "ErrImagePull"
            | "ImagePullBackOff"
            | "ErrImageNeverPull"
            | "InvalidImageName"
            | "ImageInspectError"
            | "RegistryUnavailable"
            | "SignatureValidationFailed"
    )
}

fn fail(reason: &str, message: String) -> Waiting {
    Waiting {
        reason: reason.into(),
        message,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn start_failures_fail_the_pass_as_gos_sync_result() {
        let mut waiting = BTreeMap::new();
        waiting.insert("init".to_string(), pod_actions::pod_initializing());
        waiting.insert(
            "crash".to_string(),
            fail("CrashLoopBackOff", "back-off".into()),
        );
        waiting.insert(
            "pull".to_string(),
            fail("ImagePullBackOff", "back-off".into()),
        );
        waiting.insert("made".to_string(), fail("ContainerCreating", String::new()));
        // Back-offs and waiting are not failures of the pass.
        assert!(start_failures(&waiting).is_ok());

        let message = "secret \"s\" not found".to_string();
        waiting.insert(
            "app".to_string(),
            fail("CreateContainerConfigError", message),
        );
        let err = start_failures(&waiting).unwrap_err().to_string();
        assert_eq!(
            err,
            r#"failed to "StartContainer" for "app" with CreateContainerConfigError: "secret \"s\" not found""#
        );
        waiting.insert("img".to_string(), fail("ErrImagePull", "boom".into()));
        let err = start_failures(&waiting).unwrap_err().to_string();
        assert!(
            err.starts_with("[failed to \"StartContainer\" for \"app\""),
            "{err}"
        );
        assert!(
            err.ends_with("for \"img\" with ErrImagePull: \"boom\"]"),
            "{err}"
        );
    }
}
