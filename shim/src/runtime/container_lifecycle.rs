//! CreateContainer, StartContainer, StopContainer, RemoveContainer, and what happens when a
//! container's process exits; also the calls that act on a running container (ExecSync,
//! ReopenContainerLog, UpdateContainerResources).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ferrolet_proto::containerd::services::v1::{
    GetContainerRequest, UpdateContainerRequest, UpdateTaskRequest,
};
use ferrolet_proto::cri::{self, ContainerEventType};
use tonic::Code;
use tracing::Instrument;

use super::{Result, RuntimeError, RuntimeInner};
use crate::container::exec::{ExecSpec, exec_sync};
use crate::container::io::{self, Fifos};
use crate::container::{
    Container, ContainerMeta, ContainerState, ContainerStatus, MountRecord, log, record_dir,
};
use crate::oci::{self, ContainerSpecInput};
use crate::sandbox::SandboxState;
use crate::store::{self, KIND_CONTAINER, KIND_LABEL, Lookup, SANDBOX_ID_LABEL};
use crate::task::{self, TaskIo};

/// Exit code reported for a container whose process never started (as containerd does).
const START_ERROR_EXIT_CODE: i32 = 128;
/// How often a stop re-checks the task itself, in case an exit event went missing.
const EXIT_RECHECK: Duration = Duration::from_secs(5);
/// Type URL of a runtime spec's linux resources, for Tasks.Update.
const RESOURCES_TYPE_URL: &str = "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources";

/// How long (10 ms steps) an exit by SIGKILL whose cgroup is gone waits for the shim's OOM
/// event, which may come after the exit event (by more than 300 ms on a slow node); a later
/// one still turns the reason into OOMKilled.
const OOM_EVENT_WAIT_STEPS: u32 = 100;

impl RuntimeInner {
    /// Finds a container by id or unique prefix.
    pub fn container(&self, id: &str) -> Result<Arc<Container>> {
        self.containers.get(id).map_err(|e| match e {
            Lookup::NotFound => RuntimeError::not_found(format!("container {id:?} not found")),
            Lookup::Ambiguous => RuntimeError::invalid(format!(
                "container id prefix {id:?} matches more than one container"
            )),
        })
    }

    fn container_if_any(&self, id: &str) -> Result<Option<Arc<Container>>> {
        match self.container(id) {
            Ok(c) => Ok(Some(c)),
            Err(e) if e.code() == Code::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn container_paths(&self, id: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        (
            record_dir(&self.opts.root, id),
            self.opts.state.join("containers").join(id),
        )
    }

    /// CreateContainer.
    pub async fn create_container(
        &self,
        req: cri::CreateContainerRequest,
    ) -> Result<cri::CreateContainerResponse> {
        let sb = self.sandbox(&req.pod_sandbox_id)?;
        let config = req
            .config
            .ok_or_else(|| RuntimeError::invalid("CreateContainer: config is required"))?;
        let meta = config
            .metadata
            .clone()
            .ok_or_else(|| RuntimeError::invalid("CreateContainer: config.metadata is required"))?;
        if meta.name.is_empty() {
            return Err(RuntimeError::invalid(
                "CreateContainer: config.metadata.name must not be empty",
            ));
        }
        let image_ref = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        if image_ref.is_empty() {
            return Err(RuntimeError::invalid(format!(
                "CreateContainer {:?}: config.image.image must not be empty",
                meta.name
            )));
        }
        if sb.status().state != SandboxState::Ready {
            return Err(RuntimeError::precondition(format!(
                "CreateContainer {:?}: pod sandbox {} is not ready",
                meta.name, sb.meta.id
            )));
        }
        let image = self.images.resolve(&image_ref).ok_or_else(|| {
            RuntimeError::not_found(format!(
                "CreateContainer {:?}: image {image_ref:?} not found; pull it first",
                meta.name
            ))
        })?;
        // The log is written as root: a path that climbs out of the pod's log directory (or
        // replaces it) would let the client aim a container's output at any host file.
        let log_path = std::path::Path::new(&config.log_path);
        if !log_path.components().all(|c| {
            matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        }) {
            return Err(RuntimeError::invalid(format!(
                "CreateContainer {:?}: log_path {:?} must be relative to the pod's log directory, without '..'",
                meta.name, config.log_path
            )));
        }
        let id = store::new_id();
        tracing::Span::current().record("id", &id);
        let name = store::container_name(&meta, &sb.metadata());
        self.containers.reserve(&name, &id).map_err(|holder| {
            RuntimeError::new(
                Code::AlreadyExists,
                format!("container name {name:?} is reserved for container {holder}"),
            )
        })?;
        let created = self.create_reserved(&id, &name, &sb, config, &image).await;
        if created.is_err() {
            self.containers.release(&name, &id);
        }
        created.map(|()| cri::CreateContainerResponse { container_id: id })
    }

    /// For a container asking for `namespace_options.pid` TARGET: the process of the target
    /// container (of the same pod), 0 when that does not run.
    fn target_pid(&self, sb: &crate::sandbox::Sandbox, config: &cri::ContainerConfig) -> u32 {
        let Some(ns) = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .filter(|n| n.pid == cri::NamespaceMode::Target as i32)
        else {
            return 0;
        };
        self.container(&ns.target_id)
            .ok()
            .filter(|c| c.meta.sandbox_id == sb.meta.id)
            .map_or(0, |c| c.status().pid)
    }

    async fn create_reserved(
        &self,
        id: &str,
        name: &str,
        sb: &crate::sandbox::Sandbox,
        config: cri::ContainerConfig,
        image: &crate::image::store::Image,
    ) -> Result<()> {
        let (_, state_dir) = self.container_paths(id);
        let fifos = Fifos::new(&state_dir, id, config.stdin, config.tty);
        let log_dir = &sb.meta.config.log_directory;
        let log_path = if log_dir.is_empty() || config.log_path.is_empty() {
            std::path::PathBuf::new()
        } else {
            std::path::Path::new(log_dir).join(&config.log_path)
        };
        let cgroups_path = oci::cgroups_path(
            sb.meta
                .config
                .linux
                .as_ref()
                .map(|l| l.cgroup_parent.as_str())
                .unwrap_or(""),
            self.cd.namespace(),
            id,
            self.opts.systemd_cgroup,
        );
        let stop_signal = oci::stop_signal(
            image
                .config
                .config()
                .as_ref()
                .and_then(|c| c.stop_signal().as_deref()),
        )?;
        // Before anything is made: a device no spec defines fails the call with nothing to
        // undo.
        let cdi = self.resolve_cdi(&config).await?;
        let image_volumes = self.resolve_image_volumes(name, &config)?;
        let mut snapshot =
            task::prepare_snapshot(&self.cd, &self.opts.snapshotter, id, &image.chain_id).await?;
        let built = async {
            let image_volumes = self
                .make_image_volumes(id, &mut snapshot, &image_volumes)
                .await?;
            let etc = crate::mount::read_etc(&snapshot.mounts).await?;
            let sandbox_pid = sb.status().pid;
            let pod_namespaces = match &sb.meta.pinned {
                Some(pinned) => oci::PodNamespaces::Pinned(pinned),
                None => oci::PodNamespaces::Pause(sandbox_pid),
            };
            let target_pid = self.target_pid(sb, &config);
            // The builder stats devices and creates missing bind-mount sources; CDI edits
            // stat the host nodes of their devices.
            let spec = tokio::task::block_in_place(|| -> Result<oci::Spec> {
                let mut spec = oci::container_spec(&ContainerSpecInput {
                    id,
                    config: &config,
                    sandbox_config: &sb.meta.config,
                    image: &image.config,
                    etc: &etc,
                    pod_namespaces,
                    target_pid,
                    netns_path: sb.meta.netns.as_deref(),
                    files: &sb.meta.files,
                    image_volumes: &image_volumes,
                    cgroups_path: &cgroups_path,
                    min_oom_score_adj: self.min_oom_score_adj,
                    cgroups: oci::CgroupSupport::node(),
                    pod_userns: sb.meta.userns.as_ref(),
                })?;
                // Last, as containerd applies them: over the user, mounts and devices the
                // request itself made.
                if let Some(cdi) = &cdi {
                    cdi.apply(&mut spec)?;
                }
                Ok(spec)
            })?;
            Ok::<_, RuntimeError>(spec)
        }
        .await;
        let mut spec = match built {
            Ok(spec) => spec,
            Err(e) => {
                self.abandon_snapshot(id, snapshot).await;
                return Err(e);
            }
        };
        let pod_userns = sb.meta.userns.as_ref();
        let rootfs = match pod_userns {
            None => snapshot.mounts.iter().map(MountRecord::from).collect(),
            Some(user) => {
                let made = self
                    .mount_userns_views(
                        &state_dir,
                        user,
                        &snapshot.mounts,
                        &mut spec,
                        &config,
                        &sb.meta.files,
                    )
                    .await;
                if let Err(e) = made {
                    self.undo_userns_views(&state_dir).await;
                    self.abandon_snapshot(id, snapshot).await;
                    return Err(e.context(format_args!("CreateContainer {name:?}")));
                }
                // The task gets no rootfs mounts: the spec's root is our idmapped overlay.
                Vec::new()
            }
        };
        let meta = ContainerMeta {
            id: id.to_string(),
            sandbox_id: sb.meta.id.clone(),
            // The pod's shim: a pod's containers share the sandbox's.
            runtime_type: sb.meta.runtime_type.clone(),
            name: name.to_string(),
            image_id: image.id.clone(),
            image_ref: image
                .repo_digests()
                .into_iter()
                .next()
                .unwrap_or_else(|| image.id.clone()),
            log_path,
            fifos,
            rootfs,
            stop_signal,
            process: spec.process().clone().unwrap_or_default(),
            user: oci::cri_user(&spec),
            applied_resources: oci::cri_resources(&spec),
            cgroups_path,
            created_at: store::now_ns(),
            log_max_size: config
                .annotations
                .get(cri::CONTAINER_LOG_MAX_SIZE_ANNOTATION)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            config,
        };
        let labels = HashMap::from([
            (KIND_LABEL.to_string(), KIND_CONTAINER.to_string()),
            (SANDBOX_ID_LABEL.to_string(), sb.meta.id.clone()),
        ]);
        let image_name = meta
            .config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let spec_any = match oci::to_any(&spec) {
            Ok(a) => a,
            Err(e) => {
                self.undo_userns_views(&state_dir).await;
                self.abandon_snapshot(id, snapshot).await;
                return Err(e.into());
            }
        };
        let record = task::container_record(
            id,
            &image_name,
            &self.opts.snapshotter,
            labels,
            spec_any,
            store::metadata_any(&meta),
            task::RecordRuntime {
                runtime_type: &meta.runtime_type,
                options: self.opts.runc_options(&sb.meta.runtime_handler),
            },
        );
        // StopPodSandbox and RemovePodSandbox hold the sandbox's lock for their whole run: a
        // container recorded while they run would be missed by them and outlive its pod.
        let _op = sb.op.lock().await;
        if sb.status().state != SandboxState::Ready {
            self.undo_userns_views(&state_dir).await;
            self.abandon_snapshot(id, snapshot).await;
            return Err(RuntimeError::precondition(format!(
                "CreateContainer {name:?}: pod sandbox {} stopped meanwhile",
                sb.meta.id
            )));
        }
        if let Err(e) = snapshot.commit(&self.cd, record).await {
            self.undo_userns_views(&state_dir).await;
            return Err(e.into());
        }
        // Nothing to write yet: the record's extension holds the metadata, and a container
        // recovered without a status file is "created", which is what it is.
        let container = Arc::new(Container::new(meta, ContainerStatus::default()));
        self.containers.insert(container);
        self.emit(id, &sb.meta.id, ContainerEventType::ContainerCreatedEvent);
        Ok(())
    }

    /// A user-namespaced pod's container sees its rootfs and its idmapped binds through the
    /// pod's mapping (see `idmap`): mounted under `<state dir>/userns`, the spec pointed at
    /// them.
    async fn mount_userns_views(
        &self,
        state_dir: &std::path::Path,
        user: &crate::sandbox::userns::PinnedUserns,
        mounts: &[ferrolet_proto::containerd::types::Mount],
        spec: &mut oci::Spec,
        config: &cri::ContainerConfig,
        files: &crate::sandbox::files::SandboxFiles,
    ) -> Result<()> {
        let dir = state_dir.join("userns");
        let binds = oci::idmap_binds(spec, config, files, &dir.join("binds"));
        spec.root_mut()
            .get_or_insert_with(Default::default)
            .set_path(dir.join("rootfs"));
        self.mount_userns_rootfs(user, mounts, &dir).await?;
        let path = user.path.clone();
        idmap_work(move || {
            let userns = open_userns(&path)?;
            for b in &binds {
                crate::idmap::bind_idmapped(&b.source, &b.target, &userns)?;
            }
            Ok(())
        })
        .await
    }

    /// A snapshot's rootfs at `<dir>/rootfs`, its layers seen through the pod's mapping.
    pub(crate) async fn mount_userns_rootfs(
        &self,
        user: &crate::sandbox::userns::PinnedUserns,
        mounts: &[ferrolet_proto::containerd::types::Mount],
        dir: &std::path::Path,
    ) -> Result<()> {
        let (user, mounts, dir) = (user.clone(), mounts.to_vec(), dir.to_path_buf());
        let state = self.opts.state.clone();
        idmap_work(move || {
            let userns = open_userns(&user.path)?;
            crate::idmap::mount_rootfs(
                &mounts,
                &dir.join("rootfs"),
                &dir.join("layers"),
                &userns,
                user.host_root(),
            )?;
            crate::idmap::make_traversable(&state, &dir)
        })
        .await
    }

    /// Unmounts a container's idmapped views (none is fine).
    pub(crate) async fn unmount_userns_views(&self, state_dir: &std::path::Path) -> Result<()> {
        let dir = state_dir.join("userns");
        tokio::task::spawn_blocking(move || crate::idmap::unmount_under(&dir))
            .await
            .map_err(|e| RuntimeError::internal(format!("unmounting idmapped views: {e}")))?
            .map_err(|e| RuntimeError::internal(format!("unmounting idmapped views: {e}")))
    }

    /// Rolls a failed creation's views back; what cannot go is left to the sweeper.
    async fn undo_userns_views(&self, state_dir: &std::path::Path) {
        if let Err(e) = self.unmount_userns_views(state_dir).await {
            tracing::warn!(error = %e, "rolling idmapped mounts back; the sweeper retries");
            self.request_sweep();
        }
    }

    /// The CDI edits for the devices `config` asks for (`cdi_devices` and `cdi.k8s.io/*`
    /// annotations); `None` when it asks for none or CDI is off.
    async fn resolve_cdi(
        &self,
        config: &cri::ContainerConfig,
    ) -> Result<Option<crate::cdi::Resolved>> {
        let Some(registry) = &self.cdi else {
            let asked = !config.cdi_devices.is_empty()
                || config
                    .annotations
                    .keys()
                    .any(|k| k.starts_with(crate::cdi::ANNOTATION_PREFIX));
            if asked {
                // containerd with enable_cdi = false ignores them too, but says nothing.
                tracing::warn!("CDI devices asked for, but CDI is off (enable_cdi = false)");
            }
            return Ok(None);
        };
        let devices = crate::cdi::requested_devices(config)?;
        if devices.is_empty() {
            return Ok(None);
        }
        tracing::info!(?devices, "CDI devices");
        Ok(Some(registry.resolve_async(devices).await?))
    }

    /// Gives up the snapshot of a create that failed; if containerd cannot remove it now, the
    /// sweeper does (the key is the container's id, which nothing else will own).
    async fn abandon_snapshot(&self, id: &str, snapshot: task::PreparedSnapshot) {
        if let Err(e) = snapshot.abandon(&self.cd).await {
            tracing::warn!(id, error = %e, "giving up the snapshot of a failed create; the sweeper retries");
            self.request_sweep();
        }
    }

    /// Writes a container's status (and, with `meta`, its fixed part) under root.
    pub async fn persist_container(&self, c: &Container, meta: bool) -> Result<()> {
        let removed = c.removed.lock().await;
        if *removed {
            return Ok(());
        }
        let dir = record_dir(&self.opts.root, &c.meta.id);
        if meta || !c.meta_written.swap(true, Ordering::Relaxed) {
            store::write_record(&dir.join("container.json"), &c.meta).await?;
        }
        store::write_record(&dir.join("status.json"), &c.status()).await?;
        Ok(())
    }

    /// StartContainer.
    pub async fn start_container(
        &self,
        req: cri::StartContainerRequest,
    ) -> Result<cri::StartContainerResponse> {
        let c = self.container(&req.container_id)?;
        let _op = c.op.lock().await;
        let state = c.status().state;
        if state != ContainerState::Created {
            return Err(RuntimeError::precondition(format!(
                "container {} is {}, not created",
                c.meta.id,
                state.to_cri().as_str_name()
            )));
        }
        let sb = self.sandbox(&c.meta.sandbox_id)?;
        // As in CreateContainer: a start must not slip past a stop of its sandbox that has
        // already stopped the containers it saw.
        let _sandbox_op = sb.op.lock().await;
        if sb.status().state != SandboxState::Ready {
            return Err(RuntimeError::precondition(format!(
                "container {}: its pod sandbox {} is not ready",
                c.meta.id, sb.meta.id
            )));
        }
        match self.start_task_io(&c).await {
            Ok(pid) => {
                c.update(|s| {
                    if s.state == ContainerState::Created {
                        s.state = ContainerState::Running;
                        s.pid = pid;
                    }
                    if s.started_at == 0 {
                        s.started_at = store::now_ns();
                    }
                });
                self.persist_container(&c, false)
                    .instrument(tracing::debug_span!("record_write"))
                    .await?;
                self.emit(
                    &c.meta.id,
                    &c.meta.sandbox_id,
                    ContainerEventType::ContainerStartedEvent,
                );
                Ok(cri::StartContainerResponse {})
            }
            Err(e) => {
                let now = store::now_ns();
                c.update(|s| {
                    s.state = ContainerState::Exited;
                    s.pid = 0;
                    s.finished_at = now;
                    s.exit_code = START_ERROR_EXIT_CODE;
                    s.reason = "StartError".into();
                    s.message = e.to_string();
                });
                if let Err(pe) = self.persist_container(&c, false).await {
                    tracing::warn!(error = %pe, "recording a start failure");
                }
                Err(e)
            }
        }
    }

    /// The runtime handler of a container's sandbox ("" if the sandbox is gone).
    fn runtime_handler_of(&self, c: &Container) -> String {
        self.sandboxes
            .get_exact(&c.meta.sandbox_id)
            .map(|sb| sb.meta.runtime_handler.clone())
            .unwrap_or_default()
    }

    /// Creates the task with its FIFOs and log pumps, then starts it.
    async fn start_task_io(&self, c: &Container) -> Result<u32> {
        let id = c.meta.id.as_str();
        let fifos = &c.meta.fifos;
        // Debug-level phase spans (each closes with its time): where a start goes.
        let mut opened = io::open(fifos)
            .instrument(tracing::debug_span!("fifos_open"))
            .await?;
        let rootfs = c.meta.rootfs.iter().map(Into::into).collect();
        let task_io = TaskIo {
            stdin: fifos.stdin_str(),
            stdout: fifos.stdout_str(),
            stderr: fifos.stderr_str(),
            terminal: c.meta.config.tty,
            options: self.opts.runc_options(&self.runtime_handler_of(c)),
        };
        task::create_task(&self.cd, id, rootfs, task_io)
            .instrument(tracing::debug_span!("task_create"))
            .await?;
        opened.task_created();
        c.set_stdin(opened.take_stdin());
        let started = async {
            let handle = log::start(
                opened,
                c.meta.log_path.clone(),
                id.to_string(),
                c.meta.log_max_size,
            )?;
            c.set_log_handle(Some(handle));
            Ok(task::start_task(&self.cd, id)
                .instrument(tracing::debug_span!("task_start"))
                .await?)
        }
        .await;
        if started.is_err() {
            c.set_stdin(None);
            let _ = task::kill(&self.cd, id, libc::SIGKILL as u32).await;
            if let Err(e) = task::delete_task(&self.cd, id).await {
                tracing::warn!(id, error = %e, "deleting a task that failed to start");
            }
        }
        started
    }

    /// StopContainer: the stop signal, then SIGKILL after `timeout` seconds. Stopping a
    /// container that is not running, or an unknown id, succeeds.
    pub async fn stop_container(
        &self,
        req: cri::StopContainerRequest,
    ) -> Result<cri::StopContainerResponse> {
        let Some(c) = self.container_if_any(&req.container_id)? else {
            return Ok(cri::StopContainerResponse {});
        };
        let timeout = Duration::from_secs(req.timeout.max(0) as u64);
        self.stop_container_with(&c, timeout).await?;
        Ok(cri::StopContainerResponse {})
    }

    /// Kills a container at once and waits for its exit.
    pub async fn stop_container_now(&self, c: &Container) -> Result<()> {
        self.stop_container_with(c, Duration::ZERO).await
    }

    /// Stops a container: its stop signal, then SIGKILL after `timeout` (at once when zero).
    pub async fn stop_container_with(&self, c: &Container, timeout: Duration) -> Result<()> {
        if c.status().state != ContainerState::Running {
            return Ok(());
        }
        let id = c.meta.id.as_str();
        if !timeout.is_zero() && c.meta.stop_signal != libc::SIGKILL {
            task::kill(&self.cd, id, c.meta.stop_signal as u32).await?;
            if tokio::time::timeout(timeout, c.wait_exited()).await.is_ok() {
                return Ok(());
            }
            tracing::info!(
                id,
                ?timeout,
                "container ignored its stop signal; killing it"
            );
        }
        task::kill(&self.cd, id, libc::SIGKILL as u32).await?;
        loop {
            if tokio::time::timeout(EXIT_RECHECK, c.wait_exited())
                .await
                .is_ok()
            {
                return Ok(());
            }
            // The exit event may have been lost (containerd restarted): ask the task.
            match task::task_state(&self.cd, id).await? {
                Some(task::TaskState::Running { .. }) => {
                    task::kill(&self.cd, id, libc::SIGKILL as u32).await?;
                }
                Some(task::TaskState::Stopped {
                    exit_status,
                    exited_at_ns,
                }) => {
                    self.handle_container_exit(c, exit_status, exited_at_ns)
                        .await;
                }
                None => self.handle_container_exit(c, 255, store::now_ns()).await,
            }
        }
    }

    /// Records a container's exit (from containerd's exit event, a stop, or recovery) and
    /// reaps its task.
    pub async fn handle_container_exit(&self, c: &Container, exit_status: u32, exited_at: i64) {
        let id = c.meta.id.as_str();
        if c.status().state == ContainerState::Exited {
            return;
        }
        // Read before the task (and with it the cgroup) goes. A scope systemd removed with
        // its last process leaves only the shim's OOM event, which may trail the exit event.
        let killed = exit_status == 128 + libc::SIGKILL as u32;
        let mut oom = c.oom_killed.load(Ordering::Relaxed);
        if killed && !oom {
            match super::stats::cgroup_oom_killed(&c.meta.cgroups_path) {
                Some(found) => oom = found,
                None => {
                    for _ in 0..OOM_EVENT_WAIT_STEPS {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        if c.oom_killed.load(Ordering::Relaxed) {
                            oom = true;
                            break;
                        }
                    }
                }
            }
        }
        // Nobody reads its stdin any more.
        c.set_stdin(None);
        // Reap first, as containerd does: once a container reads as exited, RemoveContainer
        // finds no task left to wait for.
        match task::delete_task(&self.cd, id).await {
            Ok(_) => c.task_reaped.store(true, Ordering::Relaxed),
            Err(e) => tracing::warn!(id, error = %e, "deleting an exited task"),
        }
        let changed = c.update(|s| {
            if s.state == ContainerState::Exited {
                return false;
            }
            if s.started_at == 0 {
                s.started_at = exited_at;
            }
            s.state = ContainerState::Exited;
            s.pid = 0;
            s.finished_at = if exited_at > 0 {
                exited_at
            } else {
                store::now_ns()
            };
            s.exit_code = exit_status as i32;
            s.reason = if oom {
                "OOMKilled"
            } else if exit_status == 0 {
                "Completed"
            } else {
                "Error"
            }
            .into();
            true
        });
        if !changed {
            return;
        }
        if let Err(e) = self.persist_container(c, false).await {
            tracing::warn!(id, error = %e, "recording an exit");
        }
        self.emit(
            id,
            &c.meta.sandbox_id,
            ContainerEventType::ContainerStoppedEvent,
        );
    }

    /// Marks an exit already recorded as `Error` by SIGKILL as `OOMKilled` (the shim's OOM
    /// event came after its exit event).
    pub async fn record_late_oom(&self, c: &Container) {
        let changed = c.update(|s| {
            let late = s.state == ContainerState::Exited
                && s.reason == "Error"
                && s.exit_code == 128 + libc::SIGKILL;
            if late {
                s.reason = "OOMKilled".into();
            }
            late
        });
        if changed && let Err(e) = self.persist_container(c, false).await {
            tracing::warn!(id = %c.meta.id, error = %e, "recording an OOM kill");
        }
    }

    /// RemoveContainer: a running container is killed first. Removing again, or an unknown
    /// id, succeeds.
    pub async fn remove_container(
        &self,
        req: cri::RemoveContainerRequest,
    ) -> Result<cri::RemoveContainerResponse> {
        let Some(c) = self.container_if_any(&req.container_id)? else {
            return Ok(cri::RemoveContainerResponse {});
        };
        let _op = c.op.lock().await;
        if self.containers.get(&c.meta.id).is_err() {
            return Ok(cri::RemoveContainerResponse {});
        }
        self.remove_container_entry(&c).await?;
        Ok(cri::RemoveContainerResponse {})
    }

    /// Removes a container and everything it has. A step that fails (containerd restarting)
    /// fails the call and leaves the container listed, with its record under root, so the
    /// client's retry (or the sweeper, after a restart) finishes the job.
    pub async fn remove_container_entry(&self, c: &Container) -> Result<()> {
        self.stop_container_now(c).await?;
        self.destroy_container(c)
            .await
            .map_err(|e| e.context(format_args!("removing container {}", c.meta.id)))?;
        *c.removed.lock().await = true;
        let (record_dir, _) = self.container_paths(&c.meta.id);
        store::remove_dir(&record_dir)
            .instrument(tracing::debug_span!("record_dir_remove"))
            .await?;
        self.containers.remove(&c.meta.id);
        self.containers.release(&c.meta.name, &c.meta.id);
        self.cpu.forget(&c.meta.id);
        self.emit_removed_container(c);
        Ok(())
    }

    /// Deletes a container's task, record, snapshot, FIFOs and state dir. Each step tolerates
    /// what is gone already and every step runs; the result says whether all succeeded.
    async fn destroy_container(&self, c: &Container) -> Result<()> {
        let id = c.meta.id.as_str();
        // containerd refuses to delete a record that still has a task. An exit we reaped left
        // none, and asking again would cost a containerd round trip per removal.
        if !c.task_reaped.load(Ordering::Relaxed) {
            task::delete_task(&self.cd, id)
                .instrument(tracing::debug_span!("task_delete"))
                .await?;
            c.task_reaped.store(true, Ordering::Relaxed);
        }
        c.set_log_handle(None);
        c.set_stdin(None);
        // Before the snapshot and the state dir go: nothing may be removed through them.
        self.unmount_userns_views(&self.container_paths(id).1)
            .await?;
        let record = async { Ok(task::delete_record(&self.cd, id).await?) }
            .instrument(tracing::debug_span!("record_delete"));
        let snapshot = async {
            let (rootfs, views) = tokio::join!(
                task::remove_snapshot(&self.cd, &self.opts.snapshotter, id),
                self.remove_image_volumes(id, &c.meta.config),
            );
            super::all_of([rootfs.map_err(RuntimeError::from), views])
        }
        .instrument(tracing::debug_span!("snapshot_remove"));
        let files = async {
            io::remove(&c.meta.fifos).await?;
            let (_, state_dir) = self.container_paths(id);
            Ok(store::remove_dir(&state_dir).await?)
        }
        .instrument(tracing::debug_span!("files_remove"));
        let (record, snapshot, files) = tokio::join!(record, snapshot, files);
        super::all_of([record, snapshot, files])
    }

    /// ExecSync.
    pub async fn exec_sync(&self, req: cri::ExecSyncRequest) -> Result<cri::ExecSyncResponse> {
        let c = self.container(&req.container_id)?;
        if req.cmd.is_empty() {
            return Err(RuntimeError::invalid(format!(
                "ExecSync in container {}: cmd must not be empty",
                c.meta.id
            )));
        }
        self.require_running(&c, "ExecSync")?;
        let (_, state_dir) = self.container_paths(&c.meta.id);
        let out = exec_sync(
            &self.cd,
            ExecSpec {
                container_id: c.meta.id.clone(),
                cmd: req.cmd,
                timeout: (req.timeout > 0).then(|| Duration::from_secs(req.timeout as u64)),
                process: c.meta.process.clone(),
                fifo_dir: state_dir.join("exec"),
            },
        )
        .await?;
        Ok(cri::ExecSyncResponse {
            stdout: out.stdout,
            stderr: out.stderr,
            exit_code: out.exit_code,
        })
    }

    fn require_running(&self, c: &Container, call: &str) -> Result<()> {
        let state = c.status().state;
        if state != ContainerState::Running {
            return Err(RuntimeError::precondition(format!(
                "{call}: container {} is not running ({})",
                c.meta.id,
                state.to_cri().as_str_name()
            )));
        }
        Ok(())
    }

    /// ReopenContainerLog: the log file is closed and opened again at the same path.
    pub async fn reopen_container_log(
        &self,
        req: cri::ReopenContainerLogRequest,
    ) -> Result<cri::ReopenContainerLogResponse> {
        let c = self.container(&req.container_id)?;
        self.require_running(&c, "ReopenContainerLog")?;
        let handle = c.log_handle().ok_or_else(|| {
            RuntimeError::precondition(format!(
                "ReopenContainerLog: container {} has no log pumps",
                c.meta.id
            ))
        })?;
        handle
            .reopen()
            .await
            .map_err(|e| RuntimeError::precondition(format!("container {}: {e}", c.meta.id)))?;
        Ok(cri::ReopenContainerLogResponse {})
    }

    /// UpdateContainerResources: the stored spec, and the running task's cgroup.
    pub async fn update_container_resources(
        &self,
        req: cri::UpdateContainerResourcesRequest,
    ) -> Result<cri::UpdateContainerResourcesResponse> {
        let c = self.container(&req.container_id)?;
        let Some(resources) = req.linux else {
            return Ok(cri::UpdateContainerResourcesResponse {});
        };
        let _op = c.op.lock().await;
        let state = c.status().state;
        if !matches!(state, ContainerState::Created | ContainerState::Running) {
            return Err(RuntimeError::precondition(format!(
                "UpdateContainerResources: container {} is {}",
                c.meta.id,
                state.to_cri().as_str_name()
            )));
        }
        let id = c.meta.id.as_str();
        let mut record = self
            .cd
            .containers()
            .get(GetContainerRequest { id: id.to_string() })
            .await
            .map_err(RuntimeError::containerd(format!(
                "reading containerd container {id}"
            )))?
            .into_inner()
            .container
            .ok_or_else(|| RuntimeError::not_found(format!("containerd container {id} is gone")))?;
        let mut spec = oci::from_any(record.spec.as_ref().ok_or_else(|| {
            RuntimeError::internal(format!("containerd container {id} has no spec"))
        })?)?;
        let cgroups = oci::CgroupSupport::node();
        oci::update_resources(&mut spec, &resources, self.min_oom_score_adj, cgroups)?;
        let old_spec = record.spec.replace(oci::to_any(&spec)?);
        let mut restore = record.clone();
        restore.spec = old_spec;
        self.cd
            .containers()
            .update(UpdateContainerRequest {
                container: Some(record),
                update_mask: Some(ferrolet_proto::prost_types::FieldMask {
                    paths: vec!["spec".into()],
                }),
            })
            .await
            .map_err(RuntimeError::containerd(format!(
                "updating containerd container {id}"
            )))?;
        if state == ContainerState::Running
            && let Err(e) = self.update_task(id, &resources, cgroups).await
        {
            // As containerd: the record goes back to what the task still has (a memory limit
            // below usage is refused by the kernel on cgroup v1).
            let restored = self
                .cd
                .containers()
                .update(UpdateContainerRequest {
                    container: Some(restore),
                    update_mask: Some(ferrolet_proto::prost_types::FieldMask {
                        paths: vec!["spec".into()],
                    }),
                })
                .await;
            if let Err(r) = restored {
                tracing::warn!(id, error = %r, "restoring the spec after a failed update");
            }
            return Err(e);
        }
        // What the spec now says, after the node's cgroup support dropped what it cannot
        // enforce: ContainerStatus.resources reports what is applied, not what was asked.
        let applied = oci::cri_resources(&spec);
        c.update(|s| s.resources = applied);
        self.persist_container(&c, false).await?;
        Ok(cri::UpdateContainerResourcesResponse {})
    }

    /// Tasks.Update with `resources` as the node's cgroups take them.
    async fn update_task(
        &self,
        id: &str,
        resources: &cri::LinuxContainerResources,
        cgroups: &oci::CgroupSupport,
    ) -> Result<()> {
        let linux = oci::linux_resources(resources, cgroups)?;
        let body = serde_json::to_vec(&linux)
            .map_err(|e| RuntimeError::internal(format!("encoding resources: {e}")))?;
        self.cd
            .tasks()
            .update(UpdateTaskRequest {
                container_id: id.to_string(),
                resources: Some(ferrolet_proto::prost_types::Any {
                    type_url: RESOURCES_TYPE_URL.into(),
                    value: body,
                }),
                annotations: HashMap::new(),
            })
            .await
            .map_err(RuntimeError::containerd(format!("updating task {id}")))?;
        Ok(())
    }
}

/// The pod's pinned user namespace, for `mount_setattr`.
fn open_userns(path: &std::path::Path) -> Result<std::fs::File, crate::idmap::IdmapError> {
    std::fs::File::open(path).map_err(|source| crate::idmap::IdmapError::Io {
        op: "opening the pod's user namespace",
        path: path.to_path_buf(),
        source,
    })
}

/// Runs idmapped-mount work off the runtime; what the kernel or file system refuses is
/// FailedPrecondition naming the cause.
async fn idmap_work(
    f: impl FnOnce() -> Result<(), crate::idmap::IdmapError> + Send + 'static,
) -> Result<()> {
    let made = tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RuntimeError::internal(format!("idmapped mounts: {e}")))?;
    made.map_err(|e| {
        if e.is_unsupported() {
            RuntimeError::precondition(format!(
                "user namespace: the node cannot idmap the container's mounts: {e}"
            ))
        } else {
            RuntimeError::internal(format!("user namespace: idmapped mounts: {e}"))
        }
    })
}
