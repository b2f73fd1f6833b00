//! The kubelet: desired pods from the sources, the sync loop that hands work to the pod
//! workers, housekeeping, and the pods' statuses as the API shows them. [`eviction`]: the
//! eviction manager's loop over the kubelet's pods.

mod cgroups;
pub mod cluster;
mod cpu;
mod cpu_sampling;
pub(crate) mod devices;
mod eviction;
pub(crate) mod image_volumes;
mod oom;
pub(crate) mod resize;
mod timeline;
mod volumes;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::mpsc;

use crate::backoff::Backoff;
use crate::config::Config;
use crate::cri::Cri;
use crate::pleg::{Pleg, PodLifecycleEvent};
use crate::pod_workers::{PodWorkers, RetryAfter, Work};
use crate::podspec::NodeContext;
use crate::source::PodConfig;
use crate::status::Waiting;
use crate::types::{Pod, PodOp, PodUpdate, grace_period, pod_name, uid_of};

/// How often every pod is synced even without events (the Go kubelet's resync).
const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);
/// How often container log sizes are checked (the Go kubelet's log manager: 10 s).
const LOG_ROTATION_PERIOD: Duration = Duration::from_secs(10);
/// PLEG relist period.
const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// How long after a failed sync (a container that could not start, a runtime error) the pod
/// is synced again: the Go kubelet's `backOffPeriod` (its pod workers add up to 50 % jitter).
const SYNC_BACKOFF: Duration = Duration::from_secs(10);

/// What the kubelet knows of one desired pod.
#[derive(Clone, Debug, Default)]
pub struct PodState {
    /// The pod as its source gave it (shared with the merge, the workers and the managers).
    pub pod: Arc<Pod>,
    /// The status from the last sync.
    pub status: PodStatus,
    /// Why containers are not running, per container name, from the last sync.
    pub waiting: BTreeMap<String, Waiting>,
    /// When the kubelet first synced it.
    pub start_time: Option<Time>,
    /// Being killed (removed from its source, or deleted in the API).
    pub terminating: bool,
    /// Killed after its deletion in the API; kept until the API object is gone.
    pub terminated: bool,
    /// Refused by admission: never started, its status says why.
    pub rejected: bool,
    /// Gone from its source (Go's pod manager no longer has it), though maybe still being
    /// killed: its devices may go to other pods, as in Go.
    pub removed: bool,
}

impl PodState {
    /// Whether syncs (events, probes, the resync) may start or restart its containers.
    pub fn syncable(&self) -> bool {
        !self.terminating && !self.rejected
    }
}

/// What the kubelet hands its parts, which differ between standalone and cluster mode.
pub struct Seams {
    /// Where events go.
    pub events: Arc<dyn crate::events::EventRecorder>,
    /// Where pod statuses go besides `/pods`.
    pub status_sink: Arc<dyn crate::status::sink::StatusSink>,
    /// Where pull secrets come from.
    pub secrets: Arc<dyn crate::credentials::SecretSource>,
    /// Where pods' secrets and configMaps (volumes, environment) come from.
    pub objects: Arc<dyn crate::objects::ObjectSource>,
    /// Where bound service-account tokens come from.
    pub tokens: Arc<dyn crate::objects::TokenSource>,
    /// Where claims and persistent volumes come from.
    pub storage: Arc<dyn crate::objects::StorageSource>,
    /// The CSI drivers registered through the plugin manager.
    pub csi_drivers: crate::csi::registration::Drivers,
}

impl Default for Seams {
    fn default() -> Self {
        Self {
            events: Arc::new(crate::events::LogRecorder),
            status_sink: Arc::new(crate::status::sink::NoSink),
            secrets: Arc::new(crate::credentials::NoSecrets),
            objects: Arc::new(crate::objects::NoApi::default()),
            tokens: Arc::new(crate::objects::NoApi::default()),
            storage: Arc::new(crate::objects::NoApi::default()),
            csi_drivers: Default::default(),
        }
    }
}

/// The kubelet.
pub struct Kubelet {
    /// Settings.
    pub config: Config,
    /// Node-wide inputs of pod specs.
    pub node: NodeContext,
    /// The runtime.
    pub cri: Cri,
    /// The runtime pod cache and event generator.
    pub pleg: Arc<Pleg>,
    /// The runtime's name (`containerd`, `ferrolet`), for container ids in statuses.
    pub runtime_name: String,
    pub(crate) pods: RwLock<BTreeMap<String, PodState>>,
    pub(crate) crash_backoff: Backoff,
    /// Image pulls: policy, credentials, back-off.
    pub(crate) images: crate::images::ImageManager,
    /// The Summary API's provider (`/stats/summary`, the eviction signals).
    pub stats: Arc<crate::stats::StatsProvider>,
    /// Node-pressure eviction: signals, conditions, evicted pods.
    pub eviction: crate::eviction::EvictionManager,
    /// Liveness, readiness and startup probes.
    pub probes: Arc<crate::prober::Manager>,
    /// The pods' start timelines (`/debug/pods/<ns>/<name>/timeline`).
    pub timeline: Arc<crate::timeline::Timeline>,
    pub(crate) hooks: crate::lifecycle::HookRunner,
    pub(crate) killed: crate::status::killed::KillNotes,
    /// The container instances the OOM watcher saw the kernel kill.
    pub(crate) oom_killed: crate::status::killed::OomNotes,
    /// Where statuses go besides `/pods` (the API's status manager in a cluster).
    pub(crate) status_sink: Arc<dyn crate::status::sink::StatusSink>,
    /// Pods' secrets and configMaps.
    pub(crate) objects: Arc<dyn crate::objects::ObjectSource>,
    /// Bound service-account tokens.
    pub(crate) tokens: Arc<dyn crate::objects::TokenSource>,
    /// Where the pods' events go (the API writer in a cluster, the log standalone).
    pub(crate) events: Arc<dyn crate::events::EventRecorder>,
    /// The pods' volumes: set up, kept up to date, torn down.
    pub(crate) volumes: Arc<crate::volume_manager::VolumeManager>,
    /// API-server mode's parts; unset standalone.
    pub(crate) cluster: std::sync::OnceLock<cluster::Cluster>,
    /// The cgroup tree (`cgroupsPerQOS`); None when pods go straight under `cgroupRoot`.
    pub(crate) cm: Option<Arc<crate::cm::ContainerManager>>,
    /// The CPU manager with the `static` policy; None with `none`, which pins nothing.
    /// Only blocking tasks lock it (it writes its state file).
    pub(crate) cpu: Option<Arc<Mutex<crate::cm::cpu_manager::CpuManager>>>,
    /// Every pod source has sent its pods once, counted after the update that completes
    /// them has been handled (Go's `sourcesReady`): housekeeping and the CPU manager drop
    /// what belongs to pods they do not see only from then on.
    pub(crate) sources_ready: AtomicBool,
    /// The pods being admitted and the allocations made, for the CPU manager's stale check.
    pub(crate) cpu_admissions: Arc<cpu::CpuAdmissions>,
    /// Device plugins and the devices they gave containers.
    pub(crate) devices: Arc<crate::cm::devicemanager::DeviceManager>,
    /// The pods' allocated resources, with in-place resize on (set once at start-up).
    pub(crate) allocation: std::sync::OnceLock<Arc<crate::allocation::AllocationManager>>,
    /// Resizes are judged one at a time (Go's `podResizeMutex`).
    pub(crate) resize_lock: tokio::sync::Mutex<()>,
    /// The pods' user namespaces (`hostUsers: false`).
    pub(crate) userns: Arc<crate::userns::UsernsManager>,
}

impl Kubelet {
    /// A kubelet on a connected runtime.
    pub async fn new(
        config: Config,
        node: NodeContext,
        cri: Cri,
        seams: Seams,
        cm: Option<Arc<crate::cm::ContainerManager>>,
        cpu: Option<crate::cm::cpu_manager::CpuManager>,
        userns: Arc<crate::userns::UsernsManager>,
    ) -> Arc<Self> {
        let runtime_name = match cri.version().await {
            Ok(v) => v.runtime_name,
            Err(e) => {
                tracing::warn!(error = %e, "reading the runtime's version");
                "cri".into()
            }
        };
        let credentials =
            crate::credentials::Credentials::load(&config.root_dir, seams.secrets).await;
        let stats = Arc::new(crate::stats::StatsProvider::new(
            Arc::new(crate::stats::CriStatsSource::new(
                cri.clone(),
                config.runtime_request_timeout,
            )),
            crate::stats::NodeSettings {
                node_name: node.node_name.clone(),
                root_dir: config.root_dir.clone(),
                pod_logs_dir: config.pod_logs_dir.clone(),
                cgroup_root: config.cgroup_root.clone(),
                systemd_cgroups: node.systemd_cgroups,
                memory_capacity: node.memory_capacity,
            },
        ));
        let eviction = crate::eviction::EvictionManager::new(&config.eviction);
        let images = crate::images::ImageManager::new(
            cri.clone(),
            credentials,
            config.serialize_image_pulls,
        );
        let volumes = crate::volume_manager::VolumeManager::new(
            crate::volume_manager::Settings {
                root_dir: config.root_dir.clone(),
                node: node.clone(),
            },
            crate::volume_manager::Sources {
                objects: seams.objects.clone(),
                tokens: seams.tokens.clone(),
                storage: seams.storage.clone(),
                csi_drivers: seams.csi_drivers.clone(),
            },
            seams.events.clone(),
        );
        // Device changes wake the node status as volumes in use do.
        let devices = crate::cm::devicemanager::DeviceManager::new(
            &config.root_dir,
            config.device_plugin_stop_grace_period,
            volumes.in_use_changed(),
        );
        let timeline = Arc::new(crate::timeline::Timeline::new(crate::timeline::Limits {
            pods: config.pod_timeline_pods,
            ..Default::default()
        }));
        Arc::new(Self {
            pleg: Arc::new(Pleg::new(cri.clone()).with_timeline(timeline.clone())),
            timeline,
            probes: crate::prober::Manager::new(cri.clone()),
            hooks: crate::lifecycle::HookRunner::new(cri.clone()),
            killed: Default::default(),
            oom_killed: Default::default(),
            status_sink: seams.status_sink,
            objects: seams.objects,
            tokens: seams.tokens,
            events: seams.events,
            volumes,
            cluster: std::sync::OnceLock::new(),
            cm,
            cpu: cpu.map(|m| Arc::new(Mutex::new(m))),
            sources_ready: AtomicBool::new(false),
            cpu_admissions: Arc::default(),
            devices,
            allocation: std::sync::OnceLock::new(),
            resize_lock: tokio::sync::Mutex::new(()),
            userns,
            config,
            node,
            cri,
            runtime_name,
            pods: RwLock::new(BTreeMap::new()),
            crash_backoff: Backoff::crash_loop(),
            images,
            stats,
            eviction,
        })
    }

    /// The desired pods with their last statuses.
    pub fn pods(&self) -> Vec<PodState> {
        self.pods
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The desired pod `namespace/name`, without copying any state.
    pub fn find_pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .find(|s| {
                s.pod.metadata.namespace.as_deref() == Some(namespace)
                    && s.pod.metadata.name.as_deref() == Some(name)
            })
            .map(|s| s.pod.clone())
    }

    /// One desired pod.
    pub fn pod_state(&self, uid: &str) -> Option<PodState> {
        self.pods
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .cloned()
    }

    /// The image to create a container of pod `uid` from, or why it must wait.
    pub async fn ensure_image(
        &self,
        uid: &str,
        container: &Container,
    ) -> Result<crate::images::Ensured, Waiting> {
        // Only the pod's namespace and pull secrets, read under the lock: not a clone of its
        // whole state on every container start.
        let (pull, object) = self
            .pods
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .map(|s| {
                let object = crate::events::container_ref(&s.pod, &container.name);
                (crate::images::PullFor::pod(&s.pod), object)
            })
            .unwrap_or_else(|| {
                let pull = crate::images::PullFor {
                    uid: uid.to_string(),
                    namespace: "default".into(),
                    pull_secrets: Vec::new(),
                };
                (pull, Default::default())
            });
        let known = |uid: &str| self.knows(uid);
        let events = (&*self.events, &object);
        self.images
            .ensure_image(&pull, container, &known, events)
            .await
    }

    /// Whether pod `uid` is desired or still being killed.
    pub fn knows(&self, uid: &str) -> bool {
        self.pods
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(uid)
    }

    /// Changes a desired pod's state.
    pub(crate) fn update_state(&self, uid: &str, f: impl FnOnce(&mut PodState)) {
        let mut pods = self.pods.write().unwrap_or_else(|p| p.into_inner());
        if let Some(state) = pods.get_mut(uid) {
            f(state);
        }
    }

    /// The Summary API of this node: the runtime's pods (from the PLEG's cache) with the
    /// desired pods' specs.
    pub async fn stats_summary(
        &self,
        cpu_and_memory_only: bool,
    ) -> Result<crate::stats::types::Summary, crate::stats::StatsError> {
        let scope = if cpu_and_memory_only {
            crate::stats::Scope::CpuAndMemory
        } else {
            crate::stats::Scope::Full
        };
        self.summary_of(scope).await
    }

    /// The summary of `scope`.
    pub async fn summary_of(
        &self,
        scope: crate::stats::Scope,
    ) -> Result<crate::stats::types::Summary, crate::stats::StatsError> {
        let input = if scope == crate::stats::Scope::Node {
            crate::stats::SummaryInput::default()
        } else {
            crate::stats::SummaryInput {
                runtime_pods: self.pleg.all(),
                pods: self.pods().into_iter().map(|s| s.pod).collect(),
                persistent_volumes: if scope == crate::stats::Scope::CpuAndMemory {
                    Vec::new()
                } else {
                    self.volumes.persistent_volume_usage().await
                },
            }
        };
        self.stats.summary(input, scope).await
    }

    /// The sync loop: sources → pod workers; PLEG events and the periodic resync → syncs;
    /// housekeeping removes what no desired pod owns. Runs until the update channel closes.
    pub async fn run(self: Arc<Self>, mut updates: mpsc::Receiver<PodUpdate>) {
        let kubelet = self.clone();
        let workers = PodWorkers::new(move |uid: String, work: Work| {
            let kubelet = kubelet.clone();
            async move { kubelet.work(&uid, work).await }
        });
        let (pleg_tx, mut pleg_rx) = mpsc::channel::<PodLifecycleEvent>(1024);
        self.pleg.clone().spawn(RELIST_PERIOD, pleg_tx);
        let known = Arc::downgrade(&self);
        let gc = crate::gc::spawn(crate::gc::GcContext {
            cri: self.cri.clone(),
            policy: self.config.gc.clone(),
            runtime_request_timeout: self.config.runtime_request_timeout,
            pod_logs_dir: self.config.pod_logs_dir.clone(),
            is_known: Arc::new(move |uid| known.upgrade().is_some_and(|k| k.knows(uid))),
            runtime: self.pleg.clone(),
            volume_images: {
                let known = Arc::downgrade(&self);
                Arc::new(move || {
                    known
                        .upgrade()
                        .map(|k| k.image_volume_references())
                        .unwrap_or_default()
                })
            },
        });
        self.spawn_eviction_manager();
        self.spawn_cpu_sampling();
        self.spawn_cpu_reconcile();
        let mut volumes_ready = self.volumes.spawn();
        let mut oom_killed = self.spawn_oom_watcher();
        let mut config = PodConfig::new();
        // With no source configured there is nothing to wait for.
        self.sources_ready
            .store(config.seen_all(&self.sources()), Ordering::Relaxed);
        let mut resync =
            tokio::time::interval(self.config.sync_frequency.max(Duration::from_secs(1)));
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_PERIOD);
        let mut last_qos_update = std::time::Instant::now();
        let log_rotation = tokio::time::sleep(LOG_ROTATION_PERIOD);
        tokio::pin!(log_rotation);
        let mut probe_updates = self.probes.take_updates();
        loop {
            tokio::select! {
                update = updates.recv() => {
                    let Some(update) = update else { break };
                    for change in config.apply(update) {
                        self.handle_change(&workers, change).await;
                    }
                    // As Go's sync loop, a source counts as seen once its update is handled.
                    let ready = config.seen_all(&self.sources());
                    self.sources_ready.store(ready, Ordering::Relaxed);
                }
                Some(event) = pleg_rx.recv() => {
                    if let Some(state) = self.pod_state(&event.uid)
                        && state.syncable()
                    {
                        workers.update(&event.uid, Work::Sync(state.pod));
                    }
                }
                Some(uid) = volumes_ready.recv() => {
                    // Its volumes are all set up now, after a sync that had to leave it waiting.
                    if let Some(state) = self.pod_state(&uid)
                        && state.syncable()
                    {
                        workers.update(&uid, Work::Sync(state.pod));
                    }
                }
                Some(uid) = oom_killed.recv() => {
                    // The kernel OOM-killed one of its containers: its status says so.
                    if let Some(state) = self.pod_state(&uid)
                        && state.syncable()
                    {
                        workers.update(&uid, Work::Sync(state.pod));
                    }
                }
                Some(update) = probe_updates.recv() => {
                    // Liveness failures kill, readiness and startup changes show in the status.
                    if update.needs_sync()
                        && let Some(state) = self.pod_state(&update.pod_uid)
                        && state.syncable()
                    {
                        workers.update(&update.pod_uid, Work::Sync(state.pod));
                    }
                }
                _ = resync.tick() => {
                    for state in self.pods() {
                        if state.syncable() {
                            let uid = uid_of(&state.pod);
                            workers.update(&uid, Work::Sync(state.pod));
                        }
                    }
                }
                () = &mut log_rotation => {
                    let limits = crate::log_rotation::LogLimits {
                        max_size: self.config.container_log_max_size,
                        max_files: self.config.container_log_max_files as usize,
                    };
                    let hot =
                        crate::log_rotation::rotate_logs(&self.cri, &self.pleg.all(), limits).await;
                    let next = if hot { crate::log_rotation::HOT_PERIOD } else { LOG_ROTATION_PERIOD };
                    log_rotation.as_mut().reset(tokio::time::Instant::now() + next);
                }
                _ = housekeeping.tick() => {
                    let now = std::time::Instant::now();
                    self.crash_backoff.gc(now);
                    self.images.gc_backoff(now);
                    // Until every source has spoken, a running pod may just not be listed yet.
                    if self.sources_ready.load(Ordering::Relaxed) {
                        gc.set_sources_ready();
                        self.housekeeping(&workers, &mut last_qos_update).await;
                        self.sync_mirror_pods().await;
                    }
                }
            }
        }
    }

    /// The sources configured, by their `kubernetes.io/config.source` names.
    fn sources(&self) -> Vec<&'static str> {
        let mut sources = Vec::new();
        if self.config.static_pod_path.is_some() {
            sources.push(crate::source::FILE_SOURCE);
        }
        if self.config.static_pod_url.is_some() {
            sources.push(crate::source::HTTP_SOURCE);
        }
        if self.cluster.get().is_some() {
            sources.push(crate::source::API_SOURCE);
        }
        sources
    }

    async fn handle_change<F, Fut>(&self, workers: &Arc<PodWorkers<F>>, change: PodUpdate)
    where
        F: Fn(String, Work) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = RetryAfter> + Send + 'static,
    {
        for pod in change.pods {
            let uid = uid_of(&pod);
            match change.op {
                PodOp::Add | PodOp::Update | PodOp::Reconcile
                    if pod.metadata.deletion_timestamp.is_some() =>
                {
                    self.begin_graceful_deletion(workers, &uid, pod);
                }
                PodOp::Add | PodOp::Update | PodOp::Reconcile => {
                    if !self.knows(&uid) && !self.admitted(&uid, &pod).await {
                        continue;
                    }
                    let (known, rejected) = {
                        let mut pods = self.pods.write().unwrap_or_else(|p| p.into_inner());
                        let known = pods.contains_key(&uid);
                        let state = pods.entry(uid.clone()).or_default();
                        state.pod = pod.clone();
                        state.terminating = false;
                        (known, state.rejected)
                    };
                    self.cpu_admission_done(&uid);
                    if known {
                        self.status_sink.pod_seen(&pod);
                    }
                    if rejected {
                        continue;
                    }
                    if !known {
                        self.timeline_admitted(&pod);
                    }
                    // Its secrets and configMaps become readable (watched) before its sync.
                    self.objects.register_pod(&pod);
                    self.want_volumes(&uid, &pod);
                    // A re-listed, unchanged pod needs no sync of its own: PLEG events and the
                    // resync cover it (else N manifests written one by one cost N² syncs).
                    if change.op != PodOp::Reconcile || !known {
                        crate::metrics::note_pod_update(&uid, known);
                        workers.update(&uid, Work::Sync(pod));
                    }
                }
                PodOp::Remove => {
                    let grace = grace_period(&pod);
                    self.status_sink.pod_removed(&uid);
                    let done = {
                        let mut pods = self.pods.write().unwrap_or_else(|p| p.into_inner());
                        let done = pods.get(&uid).is_some_and(|s| s.terminated || s.rejected);
                        if done {
                            pods.remove(&uid);
                        }
                        done
                    };
                    // Killed already (deleted in the API), or never started (rejected).
                    if done {
                        continue;
                    }
                    self.update_state(&uid, |s| {
                        s.terminating = true;
                        s.removed = true;
                    });
                    tracing::info!(pod = %pod_name(&pod), grace, "pod removed from its source; stopping it");
                    workers.update(&uid, Work::Kill(pod, grace));
                }
            }
        }
    }

    /// Admits a pod seen for the first time (Go's `canAdmitPod`: the CPU manager's
    /// allocation, then the predicates); a rejected one is kept with a Failed status saying
    /// why, reported, and never started.
    async fn admitted(&self, uid: &str, pod: &Arc<Pod>) -> bool {
        let verdict = match self.allocate_cpus(pod).await {
            Ok(()) => match self.allocate_devices(pod).await {
                Ok(()) => self.admit(pod),
                Err(rejection) => Err(rejection),
            },
            Err(rejection) => Err(rejection),
        };
        let Err(rejection) = verdict else {
            self.record_allocation(pod).await;
            return true;
        };
        tracing::warn!(pod = %pod_name(pod), reason = %rejection.reason, message = %rejection.message, "pod rejected by admission");
        let status = cluster::rejected_status(&rejection);
        self.events.record(
            &crate::events::pod_ref(pod),
            crate::events::EventType::Warning,
            &rejection.reason,
            &rejection.message,
        );
        let pod = pod.clone();
        self.status_sink.set_pod_status(&pod, &status);
        self.pods.write().unwrap_or_else(|p| p.into_inner()).insert(
            uid.to_string(),
            PodState {
                pod,
                status,
                rejected: true,
                ..Default::default()
            },
        );
        self.cpu_admission_done(uid);
        false
    }

    /// A pod the API is deleting (`deletionTimestamp` set): killed once, with its
    /// `deletionGracePeriodSeconds` (preStop hooks included); a shorter grace given later
    /// does not restart the kill. Its state stays until the API object is gone.
    fn begin_graceful_deletion<F, Fut>(
        &self,
        workers: &Arc<PodWorkers<F>>,
        uid: &str,
        pod: Arc<Pod>,
    ) where
        F: Fn(String, Work) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = RetryAfter> + Send + 'static,
    {
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .unwrap_or_else(|| grace_period(&pod));
        let first = {
            let mut pods = self.pods.write().unwrap_or_else(|p| p.into_inner());
            let state = pods.entry(uid.to_string()).or_default();
            state.pod = pod.clone();
            !std::mem::replace(&mut state.terminating, true)
        };
        if first {
            tracing::info!(pod = %pod_name(&pod), grace, "pod deleted in the API; stopping it");
            workers.update(uid, Work::Kill(pod, grace));
        }
    }

    /// Runs one piece of a pod worker's work; a failed sync asks to be retried after
    /// [`SYNC_BACKOFF`].
    async fn work(&self, uid: &str, work: Work) -> RetryAfter {
        match work {
            Work::Sync(pod) => {
                // An evicted pod stays down until its source removes it.
                if self.enforce_eviction(uid).await {
                    return None;
                }
                let _timer = crate::metrics::pod_worker_timer(uid);
                let span = tracing::info_span!("sync_pod", pod = %pod_name(&pod), uid);
                let synced = tracing::Instrument::instrument(self.sync_pod(&pod), span).await;
                synced.is_err().then_some(SYNC_BACKOFF)
            }
            Work::Kill(pod, grace) => {
                let span = tracing::info_span!("kill_pod", pod = %pod_name(&pod), uid);
                tracing::Instrument::instrument(self.kill_pod(uid, grace), span).await;
                let (deleted, readded) = {
                    let mut pods = self.pods.write().unwrap_or_else(|p| p.into_inner());
                    match pods.get_mut(uid) {
                        // Deleted in the API: kept (and not killed again) until the object is
                        // gone, which the status manager now asks for.
                        Some(state) if state.pod.metadata.deletion_timestamp.is_some() => {
                            state.terminated = true;
                            state.status = crate::status::terminated_status(&state.status);
                            (Some((state.pod.clone(), state.status.clone())), false)
                        }
                        // Added again (the same UID: a static pod's manifest put back) while
                        // it was being killed: it stays, and the sync queued behind this kill
                        // starts it again (its status then comes from what the kill left).
                        Some(state) if !state.terminating => (None, true),
                        _ => {
                            pods.remove(uid);
                            (None, false)
                        }
                    }
                };
                if readded {
                    tracing::info!(pod = %pod_name(&pod), "added again while it was stopped; starting it again");
                    return None;
                }
                // Nothing of it runs any more: as Go's SyncTerminatedPod, stop watching its
                // objects and drop its tokens (a pod deleted in the API keeps its state, not
                // its references, until the object is gone).
                self.objects.unregister_pod(&pod);
                self.tokens.forget_pod(uid);
                if let Some((pod, status)) = deleted {
                    self.status_sink.pod_terminated(&pod, &status);
                }
                self.crash_backoff.forget_prefix(&format!("{uid}/"));
                None
            }
        }
    }

    /// Kills sandboxes and containers that belong to no desired pod (a pod removed while the
    /// kubelet was down, or one whose kill failed), and removes pod dirs of unknown pods.
    async fn housekeeping<F, Fut>(
        &self,
        workers: &Arc<PodWorkers<F>>,
        last_qos_update: &mut std::time::Instant,
    ) where
        F: Fn(String, Work) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = RetryAfter> + Send + 'static,
    {
        let desired: BTreeSet<String> = self
            .pods
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        let known = |uid: &str| desired.contains(uid) || workers.has(uid);
        self.volumes.remove_orphans(known);
        self.oom_killed.retain_pods(known);
        for runtime_pod in self.pleg.all() {
            if desired.contains(&runtime_pod.uid) || workers.has(&runtime_pod.uid) {
                continue;
            }
            tracing::info!(uid = %runtime_pod.uid, name = %runtime_pod.name, "housekeeping: killing a pod no source wants");
            let mut pod = Pod::default();
            pod.metadata.uid = Some(runtime_pod.uid.clone());
            pod.metadata.name = Some(runtime_pod.name.clone());
            pod.metadata.namespace = Some(runtime_pod.namespace.clone());
            workers.update(&runtime_pod.uid, Work::Kill(Arc::new(pod), 0));
        }
        let pod_dirs = crate::volume::pod_dirs(&self.config.root_dir).await;
        for uid in &pod_dirs {
            // The volume manager tears the volumes down first (see `remove_orphans`).
            if known(uid) || self.volumes.has_volumes(uid) {
                continue;
            }
            match crate::volume::teardown(&self.config.root_dir, uid).await {
                Ok(()) => self.userns.release(uid),
                Err(e) => tracing::warn!(uid, error = %e, "housekeeping: removing a pod dir"),
            }
        }
        // What no known pod holds, on disk or in memory (Go's
        // CleanupOrphanedPodUsernsAllocations).
        let on_disk = crate::volume::pod_dirs(&self.config.root_dir).await;
        let userns = self.userns.clone();
        let keep: BTreeSet<String> = on_disk
            .iter()
            .chain(pod_dirs.iter())
            .filter(|uid| known(uid))
            .cloned()
            .collect();
        let _ = tokio::task::spawn_blocking(move || {
            userns.cleanup_orphans(|uid| keep.contains(uid), &on_disk)
        })
        .await;
        self.sweep_pod_cgroups(&known, last_qos_update).await;
        if let Some(m) = self.allocations()
            && m.all().keys().any(|uid| !known(uid))
        {
            // Go's RemoveOrphanedPods: a pod gone for good loses its allocation.
            let m = m.clone();
            let kept: BTreeSet<String> = desired.iter().cloned().collect();
            let running: BTreeSet<String> = self.pleg.all().into_iter().map(|p| p.uid).collect();
            let _ = tokio::task::spawn_blocking(move || {
                m.retain(|uid| kept.contains(uid) || running.contains(uid))
            })
            .await;
        }
    }
}
