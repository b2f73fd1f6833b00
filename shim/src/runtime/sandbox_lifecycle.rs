//! RunPodSandbox, StopPodSandbox and RemovePodSandbox.
//!
//! RunPodSandbox records the sandbox on disk before it makes anything, so a crash half-way is
//! cleaned up at the next start; it then runs CNI ADD and the pause container's creation at
//! the same time (the pause process does not need the network, only the netns to exist), and
//! on any failure tears down everything it may have made.
//!
//! A pod that shares no PID namespace and sets no sysctls needs no pause process (with
//! `drop_infra_container`, the default): its IPC and UTS namespaces are pinned on files
//! beside the netns, its containerd record has no task, and it is ready once CNI ADD is done.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use ferrolet_proto::cri::{self, ContainerEventType, NamespaceMode};
use tonic::Code;
use tracing::Instrument;

use super::{Result, RuntimeError, RuntimeInner};
use crate::image::store::Image;
use crate::oci::{self, SandboxSpecInput};
use crate::sandbox::files::{self, SandboxFiles};
use crate::sandbox::namespaces::PinnedNamespaces;
use crate::sandbox::userns::PinnedUserns;
use crate::sandbox::{
    Sandbox, SandboxMeta, SandboxRecord, SandboxState, SandboxStatus, StartTimings, record_path,
};
use crate::store::{self, KIND_LABEL, KIND_SANDBOX, Lookup};
use crate::task::{self, TaskIo};

/// Runtime handlers every node has.
const DEFAULT_HANDLERS: [&str; 2] = ["", "runc"];

impl RuntimeInner {
    /// Finds a sandbox by id or unique prefix.
    pub fn sandbox(&self, id: &str) -> Result<Arc<Sandbox>> {
        self.sandboxes.get(id).map_err(|e| match e {
            Lookup::NotFound => RuntimeError::not_found(format!("pod sandbox {id:?} not found")),
            Lookup::Ambiguous => RuntimeError::invalid(format!(
                "pod sandbox id prefix {id:?} matches more than one sandbox"
            )),
        })
    }

    /// A sandbox, or `None` when it does not exist (for the idempotent calls).
    fn sandbox_if_any(&self, id: &str) -> Result<Option<Arc<Sandbox>>> {
        match self.sandbox(id) {
            Ok(sb) => Ok(Some(sb)),
            Err(e) if e.code() == Code::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// RunPodSandbox.
    pub async fn run_pod_sandbox(
        &self,
        req: cri::RunPodSandboxRequest,
    ) -> Result<cri::RunPodSandboxResponse> {
        let config = req
            .config
            .ok_or_else(|| RuntimeError::invalid("RunPodSandbox: config is required"))?;
        let meta = config
            .metadata
            .clone()
            .ok_or_else(|| RuntimeError::invalid("RunPodSandbox: config.metadata is required"))?;
        for (field, value) in [
            ("name", &meta.name),
            ("namespace", &meta.namespace),
            ("uid", &meta.uid),
        ] {
            if value.is_empty() {
                return Err(RuntimeError::invalid(format!(
                    "RunPodSandbox: config.metadata.{field} must not be empty"
                )));
            }
        }
        let handler = req.runtime_handler;
        if !DEFAULT_HANDLERS.contains(&handler.as_str())
            && !self.opts.runtime_handlers.contains_key(&handler)
        {
            return Err(RuntimeError::invalid(format!(
                "RunPodSandbox: runtime handler {handler:?} is not configured (known: \"runc\"{})",
                self.opts
                    .runtime_handlers
                    .keys()
                    .map(|h| format!(", {h:?}"))
                    .collect::<String>()
            )));
        }
        let parent = cgroup_parent(&config);
        if self.opts.systemd_cgroup && !oci::is_systemd_parent(parent) {
            return Err(RuntimeError::invalid(format!(
                "RunPodSandbox: cgroup_parent {parent:?} is not a systemd slice \
                 (`….slice`), but ferrolet-cri drives cgroups through systemd \
                 (systemd_cgroup = true): configure the kubelet with cgroupDriver: systemd"
            )));
        }
        let id = store::new_id();
        let span = tracing::Span::current();
        span.record("pod", format!("{}/{}", meta.namespace, meta.name));
        span.record("id", &id);
        let name = store::sandbox_name(&meta);
        self.sandboxes.reserve(&name, &id).map_err(|holder| {
            RuntimeError::new(
                Code::AlreadyExists,
                format!("pod sandbox name {name:?} is reserved for sandbox {holder}"),
            )
        })?;
        match self.run_reserved(&id, &name, config, handler).await {
            Ok(()) => Ok(cri::RunPodSandboxResponse { pod_sandbox_id: id }),
            Err(e) => {
                self.sandboxes.release(&name, &id);
                Err(e)
            }
        }
    }

    async fn run_reserved(
        &self,
        id: &str,
        name: &str,
        config: cri::PodSandboxConfig,
        runtime_handler: String,
    ) -> Result<()> {
        let ns_opts = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone())
            .unwrap_or_default();
        let host_network = ns_opts.network == NamespaceMode::Node as i32;
        let netns = (!host_network).then(|| self.network.netns_path(id));
        let parent = cgroup_parent(&config);
        let sandbox_state = self.opts.state.join("sandboxes").join(id);
        let userns = self.pod_userns(&ns_opts)?.map(|(uids, gids)| PinnedUserns {
            path: sandbox_state.join("user"),
            netns: netns.clone(),
            uids,
            gids,
        });
        let pinned = self.needs_no_pause(&config, &runtime_handler).then(|| {
            PinnedNamespaces::paths(
                &sandbox_state,
                ns_opts.ipc != NamespaceMode::Node as i32,
                !host_network,
            )
        });
        // The sandbox image is what the pause runs. A sandbox without a pause runs nothing from
        // it: its spec (kept for what reads it) takes the image's config when the node has it,
        // and the node never pulls it for such a pod.
        let (pause_image, local_image) = match &pinned {
            None => (Some(self.sandbox_image().await?), None),
            Some(_) => (None, self.images.resolve(&self.opts.sandbox_image)),
        };
        let fallback;
        let image_config = match pause_image.as_ref().or(local_image.as_ref()) {
            Some(image) => &image.config,
            None => {
                fallback = pauseless_image_config();
                &fallback
            }
        };
        let meta = SandboxMeta {
            id: id.to_string(),
            name: name.to_string(),
            files: SandboxFiles::paths(&self.opts.root, &self.opts.state, id, &config),
            cgroups_path: oci::cgroups_path(
                parent,
                self.cd.namespace(),
                id,
                self.opts.systemd_cgroup,
            ),
            pinned,
            userns,
            config,
            runtime_type: self.opts.runtime_type(&runtime_handler).to_string(),
            runtime_handler,
            netns,
            image: self.opts.sandbox_image.clone(),
            created_at: store::now_ns(),
        };
        // Refuse a bad request before making anything.
        // The builder stats and reads host files (seccomp profiles, devices).
        let spec = tokio::task::block_in_place(|| {
            oci::sandbox_spec(&SandboxSpecInput {
                id,
                config: &meta.config,
                image: image_config,
                netns_path: meta.netns.as_deref(),
                files: &meta.files,
                cgroups_path: &meta.cgroups_path,
                min_oom_score_adj: self.min_oom_score_adj,
                userns: meta.userns.as_ref(),
            })
        })?;
        let record = SandboxRecord {
            meta: meta.clone(),
            status: SandboxStatus::starting(&meta),
        };
        store::write_record(&record_path(&self.opts.root, id), &record).await?;
        match self.make_sandbox(&meta, pause_image.as_ref(), spec).await {
            Ok(status) => {
                let sandbox = Arc::new(Sandbox::new(meta, status));
                sandbox.persist(&self.opts.root).await?;
                self.sandboxes.insert(sandbox);
                self.emit(id, id, ContainerEventType::ContainerCreatedEvent);
                self.emit(id, id, ContainerEventType::ContainerStartedEvent);
                Ok(())
            }
            Err(e) => {
                let network_up = meta.netns.is_some();
                if let Err(cleanup) = self.destroy_sandbox(&meta, network_up).await {
                    // The call fails anyway; its record stays under root, and the sweeper
                    // finishes the teardown from it once the sandbox's name is free.
                    tracing::warn!(id, error = %cleanup, "rolling a failed sandbox back; the sweeper retries");
                    self.request_sweep();
                }
                Err(e)
            }
        }
    }

    /// Whether a sandbox can do without a pause process: nothing joins its PID namespace
    /// (the pause would be its init) and no sysctl needs setting in its namespaces (runc
    /// sets them in the pause container); other runtime handlers may need a sandbox process.
    fn needs_no_pause(&self, config: &cri::PodSandboxConfig, runtime_handler: &str) -> bool {
        let linux = config.linux.as_ref();
        let pid = linux
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .map_or(NamespaceMode::Pod as i32, |n| n.pid);
        self.opts.drop_infra_container
            && DEFAULT_HANDLERS.contains(&runtime_handler)
            && (pid == NamespaceMode::Container as i32 || pid == NamespaceMode::Node as i32)
            && linux.is_none_or(|l| l.sysctls.is_empty())
    }

    /// The user namespace a sandbox asks for (`hostUsers: false`), checked against what
    /// ferrolet-cri can give it: the node's network, PID and IPC namespaces are refused as the
    /// API server refuses them.
    fn pod_userns(&self, ns: &cri::NamespaceOption) -> Result<Option<oci::userns::Mappings>> {
        const SC: &str = "linux.security_context.namespace_options";
        let Some(mappings) = oci::userns::requested(Some(ns), SC)? else {
            return Ok(None);
        };
        for (mode, what) in [(ns.network, "network"), (ns.pid, "pid"), (ns.ipc, "ipc")] {
            if mode == NamespaceMode::Node as i32 {
                return Err(RuntimeError::invalid(format!(
                    "RunPodSandbox: {SC}.{what} NODE cannot be combined with a user namespace \
                     (userns_options mode POD)"
                )));
            }
        }
        if !self.userns_support.supported() {
            return Err(RuntimeError::precondition(format!(
                "RunPodSandbox: user namespaces are not supported on this node: {}",
                self.userns_support.reason()
            )));
        }
        Ok(Some(mappings))
    }

    /// Makes the sandbox's files, namespaces, network and pause task from `pause_image` (or,
    /// without one, its containerd record).
    async fn make_sandbox(
        &self,
        meta: &SandboxMeta,
        pause_image: Option<&Image>,
        spec: oci::Spec,
    ) -> Result<SandboxStatus> {
        let id = meta.id.as_str();
        let ms = |since: Instant| since.elapsed().as_secs_f64() * 1000.0;
        let mut timings = StartTimings::default();
        // Debug-level phase spans (each closes with its time): where a pod's start goes.
        let t = Instant::now();
        files::create(&meta.files, &meta.config)
            .instrument(tracing::debug_span!("sandbox_files"))
            .await?;
        timings.files_ms = ms(t);
        if let Some(userns) = &meta.userns {
            // The user namespace first, the pod's netns (and a pause-less pod's IPC and UTS
            // namespaces) made inside it.
            let t = Instant::now();
            userns
                .create(meta.pinned.as_ref(), &meta.config.hostname)
                .instrument(tracing::debug_span!("namespaces_pin"))
                .await
                .map_err(|e| RuntimeError::internal(format!("sandbox {id}: {e}")))?;
            timings.netns_ms = ms(t);
        } else if meta.netns.is_some() {
            let t = Instant::now();
            self.network
                .create_netns(id)
                .instrument(tracing::debug_span!("netns_create"))
                .await?;
            timings.netns_ms = ms(t);
        }
        if let (Some(pinned), None) = (&meta.pinned, &meta.userns) {
            let t = Instant::now();
            pinned
                .create(&meta.config.hostname)
                .instrument(tracing::debug_span!("namespaces_pin"))
                .await
                .map_err(|e| RuntimeError::internal(format!("sandbox {id}: {e}")))?;
            timings.netns_ms += ms(t);
        }
        let network = async {
            let t = Instant::now();
            let ips = async {
                let Some(ns) = &meta.netns else {
                    return Ok(None);
                };
                self.network.loopback_up(id, ns).await?;
                self.network.setup(id, ns, &meta.config).await.map(Some)
            }
            .await;
            (ips, ms(t))
        }
        .instrument(tracing::debug_span!("cni_add"));
        let pause = async {
            let Some(image) = pause_image else {
                return (
                    self.create_pauseless_record(meta, spec).await.map(|()| 0),
                    None,
                );
            };
            let t = Instant::now();
            let pid = self.start_pause(id, meta, image, spec).await;
            (pid, Some(ms(t)))
        };
        let ((ips, cni_add_ms), (pid, pause_ms)) = tokio::join!(network, pause);
        let (ips, pid) = (ips?, pid?);
        timings.cni_add_ms = cni_add_ms;
        timings.pause_ms = pause_ms;
        Ok(SandboxStatus {
            state: SandboxState::Ready,
            pid,
            network_up: ips.is_some(),
            ips: ips.unwrap_or_default(),
            stopped: false,
            start_timings: Some(timings),
        })
    }

    /// The pause container of a sandbox: its snapshot and record, its task created and
    /// started; returns the pause process's pid.
    async fn start_pause(
        &self,
        id: &str,
        meta: &SandboxMeta,
        image: &Image,
        mut spec: oci::Spec,
    ) -> Result<u32> {
        let snapshot =
            task::prepare_snapshot(&self.cd, &self.opts.snapshotter, id, &image.chain_id)
                .instrument(tracing::debug_span!("snapshot_prepare"))
                .await?;
        // A user-namespaced pause runs on an idmapped view of its rootfs (see `idmap`).
        let userns_root = meta
            .userns
            .as_ref()
            .map(|_| self.opts.state.join("sandboxes").join(id).join("userns"));
        if let Some(dir) = &userns_root {
            spec.root_mut()
                .get_or_insert_with(Default::default)
                .set_path(dir.join("rootfs"));
        }
        let labels = HashMap::from([(KIND_LABEL.to_string(), KIND_SANDBOX.to_string())]);
        let record = task::container_record(
            id,
            &meta.image,
            &self.opts.snapshotter,
            labels,
            oci::to_any(&spec)?,
            store::metadata_any(meta),
            task::RecordRuntime {
                runtime_type: &meta.runtime_type,
                options: self.opts.runc_options(&meta.runtime_handler),
            },
        );
        let mut mounts = snapshot
            .commit(&self.cd, record)
            .instrument(tracing::debug_span!("pause_record"))
            .await?;
        if let (Some(userns), Some(dir)) = (&meta.userns, userns_root) {
            // runc reaches the rootfs as the pod's root: the sandboxes' state dirs (0700 from
            // the shm mounts) must let it through, without a listing.
            for through in dir.ancestors().skip(1).take(2) {
                use std::os::unix::fs::PermissionsExt;
                tokio::fs::set_permissions(through, std::fs::Permissions::from_mode(0o711))
                    .await
                    .map_err(|e| RuntimeError::internal(format!("{}: {e}", through.display())))?;
            }
            self.mount_userns_rootfs(userns, &mounts, &dir).await?;
            mounts = Vec::new();
        }
        let task_io = TaskIo {
            options: self.opts.runc_options(&meta.runtime_handler),
            ..TaskIo::default()
        };
        task::create_task(&self.cd, id, mounts, task_io)
            .instrument(tracing::debug_span!("pause_task_create"))
            .await?;
        let pid = task::start_task(&self.cd, id)
            .instrument(tracing::debug_span!("pause_task_start"))
            .await?;
        Ok(pid)
    }

    /// The containerd record of a sandbox without a pause process: no snapshot, no task; the
    /// spec is kept for what reads it (and validated the request).
    async fn create_pauseless_record(&self, meta: &SandboxMeta, spec: oci::Spec) -> Result<()> {
        let labels = HashMap::from([(KIND_LABEL.to_string(), KIND_SANDBOX.to_string())]);
        let record = task::container_record(
            &meta.id,
            "",
            "",
            labels,
            oci::to_any(&spec)?,
            store::metadata_any(meta),
            task::RecordRuntime {
                runtime_type: &meta.runtime_type,
                options: self.opts.runc_options(&meta.runtime_handler),
            },
        );
        task::create_record(&self.cd, record)
            .instrument(tracing::debug_span!("sandbox_record"))
            .await?;
        Ok(())
    }

    /// Removes everything a sandbox may have: pause task, containerd record and snapshot,
    /// network, netns, pinned namespaces, files, and last its directories, whose record is
    /// what a retry (the client's, or the sweeper's) starts from. Each step tolerates what is
    /// already gone and every step runs; the result says whether all succeeded, and on a
    /// failure the directories stay.
    pub(crate) async fn destroy_sandbox(&self, meta: &SandboxMeta, network_up: bool) -> Result<()> {
        let id = meta.id.as_str();
        let containerd = async {
            // containerd refuses to delete a record that still has a task.
            self.kill_and_delete_task(id).await?;
            self.remove_dead_shim_socket(id).await?;
            // A user-namespaced pause's idmapped rootfs, before its snapshot goes.
            self.unmount_userns_views(&self.opts.state.join("sandboxes").join(id))
                .await?;
            let (record, snapshot) = tokio::join!(
                task::delete_record(&self.cd, id),
                task::remove_snapshot(&self.cd, &self.opts.snapshotter, id)
            );
            super::all_of([
                record.map_err(RuntimeError::from),
                snapshot.map_err(RuntimeError::from),
            ])
        };
        let network = async {
            let Some(ns) = &meta.netns else {
                return Ok(());
            };
            if network_up {
                self.network.teardown(id, ns, Some(&meta.config)).await?;
            }
            Ok(self.network.remove_netns(id, ns).await?)
        };
        let files = async {
            if let Some(pinned) = &meta.pinned {
                pinned
                    .remove()
                    .await
                    .map_err(|e| RuntimeError::internal(format!("sandbox {id}: {e}")))?;
            }
            if let Some(userns) = &meta.userns {
                userns
                    .remove()
                    .await
                    .map_err(|e| RuntimeError::internal(format!("sandbox {id}: {e}")))?;
            }
            Ok(files::remove(&meta.files).await?)
        };
        let (containerd, network, files) = tokio::join!(containerd, network, files);
        super::all_of([containerd, network, files])
            .map_err(|e| e.context(format_args!("tearing pod sandbox {id} down")))?;
        for base in [&self.opts.state, &self.opts.root] {
            store::remove_dir(&base.join("sandboxes").join(id)).await?;
        }
        Ok(())
    }

    /// Removes the socket the pod's shim left if it was killed (see [`crate::shim_socket`]);
    /// the pod's tasks are gone, so a shim still listening is on its way out and removes its
    /// own.
    async fn remove_dead_shim_socket(&self, id: &str) -> Result<()> {
        let path = crate::shim_socket::path(&self.opts.containerd_address, self.cd.namespace(), id);
        match crate::shim_socket::remove_if_dead(&path).await {
            Ok(true) => {
                tracing::info!(id, path = %path.display(), "removed the socket of the pod's killed shim");
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(e) => Err(RuntimeError::internal(format!(
                "removing the socket {} of pod sandbox {id}'s shim: {e}",
                path.display()
            ))),
        }
    }

    /// Kills a task (the pause process, or what the sweeper finds) and deletes it; no task
    /// is fine.
    pub(crate) async fn kill_and_delete_task(&self, id: &str) -> Result<()> {
        if task::task_state(&self.cd, id).await?.is_none() {
            return Ok(());
        }
        task::kill(&self.cd, id, libc::SIGKILL as u32).await?;
        if let Err(e) = task::wait(&self.cd, id).await {
            // The exit follower may reap the task while we wait, closing the shim under us.
            if let Some(task::TaskState::Running { .. }) = task::task_state(&self.cd, id).await? {
                return Err(e.into());
            }
        }
        task::delete_task(&self.cd, id).await?;
        Ok(())
    }

    /// The pause image, imported or pulled when missing.
    async fn sandbox_image(&self) -> Result<Image> {
        let name = &self.opts.sandbox_image;
        if let Some(image) = self.images.resolve(name) {
            return Ok(image);
        }
        let fetched = if name == crate::config::BUILTIN_PAUSE_IMAGE {
            self.images.ensure_pause_image().await.map(drop)
        } else {
            self.images.pull(name, None).await.map(drop)
        };
        fetched.map_err(|e| {
            RuntimeError::from(e).context(format_args!("pulling sandbox image {name}"))
        })?;
        self.images.resolve(name).ok_or_else(|| {
            RuntimeError::not_found(format!(
                "sandbox image {name:?} is not present after pulling it"
            ))
        })
    }

    /// StopPodSandbox: its containers are killed, the network torn down, the pause stopped.
    /// Stopping again, or an unknown id, succeeds.
    pub async fn stop_pod_sandbox(
        &self,
        req: cri::StopPodSandboxRequest,
    ) -> Result<cri::StopPodSandboxResponse> {
        let Some(sb) = self.sandbox_if_any(&req.pod_sandbox_id)? else {
            return Ok(cri::StopPodSandboxResponse {});
        };
        let _op = sb.op.lock().await;
        self.stop_sandbox_locked(&sb).await?;
        Ok(cri::StopPodSandboxResponse {})
    }

    async fn stop_sandbox_locked(&self, sb: &Arc<Sandbox>) -> Result<()> {
        let id = sb.meta.id.as_str();
        let containers = self.containers_of(id);
        futures::future::try_join_all(
            containers
                .iter()
                .map(|c| self.stop_container_with(c, c.pod_grace_period())),
        )
        .await?;
        let network = async {
            let status = sb.status();
            if let (Some(ns), true) = (&sb.meta.netns, status.network_up) {
                self.network.teardown(id, ns, Some(&sb.meta.config)).await?;
                sb.update(|s| s.network_up = false);
            }
            if let Some(ns) = &sb.meta.netns {
                self.network.remove_netns(id, ns).await?;
            }
            Ok::<_, RuntimeError>(())
        };
        let (network, pause) = tokio::join!(network, self.kill_and_delete_task(id));
        network?;
        pause?;
        if let Some(pinned) = &sb.meta.pinned {
            pinned
                .remove()
                .await
                .map_err(|e| RuntimeError::internal(format!("sandbox {id}: {e}")))?;
        }
        if let Some(userns) = &sb.meta.userns {
            userns
                .remove()
                .await
                .map_err(|e| RuntimeError::internal(format!("sandbox {id}: {e}")))?;
        }
        if let Some(shm) = &sb.meta.files.shm {
            crate::mount::unmount(shm).await?;
        }
        let was_ready = sb.update(|s| {
            let was = s.state == SandboxState::Ready;
            s.state = SandboxState::NotReady;
            s.pid = 0;
            s.stopped = true;
            was
        });
        sb.persist(&self.opts.root).await?;
        if was_ready {
            self.emit(id, id, ContainerEventType::ContainerStoppedEvent);
        }
        Ok(())
    }

    /// RemovePodSandbox: stops it if needed, removes its containers and everything it had.
    /// Removing again, or an unknown id, succeeds.
    pub async fn remove_pod_sandbox(
        &self,
        req: cri::RemovePodSandboxRequest,
    ) -> Result<cri::RemovePodSandboxResponse> {
        let Some(sb) = self.sandbox_if_any(&req.pod_sandbox_id)? else {
            return Ok(cri::RemovePodSandboxResponse {});
        };
        let _op = sb.op.lock().await;
        if self.sandboxes.get(&sb.meta.id).is_err() {
            // Removed while we waited for the lock.
            return Ok(cri::RemovePodSandboxResponse {});
        }
        let status = sb.status();
        if !status.stopped || status.state == SandboxState::Ready {
            self.stop_sandbox_locked(&sb).await?;
        }
        let id = sb.meta.id.as_str();
        let containers = self.containers_of(id);
        futures::future::try_join_all(containers.iter().map(|c| self.remove_container_entry(c)))
            .await?;
        sb.mark_removed().await;
        // A step that fails (containerd restarting) fails the call and the sandbox stays
        // listed, so the client's retry finishes the job.
        self.destroy_sandbox(&sb.meta, false).await?;
        self.sandboxes.remove(id);
        self.sandboxes.release(&sb.meta.name, id);
        self.cpu.forget(id);
        self.emit_removed_sandbox(&sb);
        Ok(cri::RemovePodSandboxResponse {})
    }
}

/// The image config of a pause-less sandbox's spec when the node lacks the sandbox image: the
/// pause image's own entrypoint, so the spec reads as it would with the image.
fn pauseless_image_config() -> crate::image_config::ImageConfig {
    let mut defaults = crate::image_config::ContainerDefaults::default();
    defaults.set_entrypoint(Some(vec!["/pause".into()]));
    let mut config = crate::image_config::ImageConfig::default();
    config.set_config(Some(defaults));
    config
}

/// The pod's cgroup parent as the kubelet sent it ("" for none).
fn cgroup_parent(config: &cri::PodSandboxConfig) -> &str {
    config
        .linux
        .as_ref()
        .map(|l| l.cgroup_parent.as_str())
        .unwrap_or("")
}
